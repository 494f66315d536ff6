"""The job's record: the SQLite ledger (`store.py`, exactly-once), the directory lock
(`lock.py`), the summary computed from the ledger alone (`report.py`), and how a disk error is
told (`disk.py`)."""
