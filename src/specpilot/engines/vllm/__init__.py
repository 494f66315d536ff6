"""vLLM knowledge as data: per-release flag tables and `--speculative-config` rules."""
