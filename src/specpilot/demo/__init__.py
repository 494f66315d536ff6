"""The self-contained demo: a tiny local model served by a real CPU engine."""
