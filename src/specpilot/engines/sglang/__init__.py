"""SGLang knowledge as data: per-release flag tables, model-class facts, validation rules."""
