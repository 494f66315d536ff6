"""vLLM's planner: `planner.py` (the plan), `quantities.py` (one function per named
quantity), `log.py` (what its startup log says) and the modules they use."""
