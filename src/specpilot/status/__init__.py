"""A job's live status page and Prometheus `/metrics` (`generate --serve-status`, `specpilot view`)."""

#: where the page is served when no address is given: loopback only
DEFAULT_ADDR = "127.0.0.1:8765"
