"""The output shards: written durably and committed with the ledger (`parts.py`), read back to
the committed byte (`committed.py`), and the truncated rows moved back for a retry
(`truncated.py`)."""
