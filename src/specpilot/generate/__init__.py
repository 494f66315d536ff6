"""Exactly-once, resumable bulk generation against OpenAI-compatible servers.

`specpilot generate` drives a prompt set through one or many SGLang/vLLM servers and
writes drafter training rows (SpecForge's `conversations` form, reasoning kept). The
ledger (`ledger.py`) and the part writer (`writer.py`) together guarantee that a kill at
any moment loses and duplicates nothing; `job.py` ties inputs, dispatch and output.
"""
