"""Exactly-once, resumable bulk generation against OpenAI-compatible servers.

`specpilot generate` drives a prompt set through one or many SGLang/vLLM servers and
writes drafter training rows (SpecForge's `conversations` form, reasoning kept). The
ledger (`ledger/store.py`) and the part writer (`writers/parts.py`) together guarantee that a
kill at any moment loses and duplicates nothing; `job.py` ties inputs, dispatch and output.

The subpackages import one way: `rows/` (the row in and out) <- `ledger/` (the job's record)
<- `writers/` (the output shards) <- `dispatch/` (sending rows to servers) <- `job.py` and
`eta.py` <- `verify.py` (`specpilot verify`'s full read); `sampling.py` (what is asked of the
model) sits beneath them all.
"""
