"""specpilot: plan, check, launch and drive LLM inference servers for drafter data generation."""

__version__ = "0.1.0"
