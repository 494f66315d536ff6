"""A job's live status page and Prometheus `/metrics` (`generate --serve-status`, `specpilot view`)."""
