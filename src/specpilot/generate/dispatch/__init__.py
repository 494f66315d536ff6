"""Sending rows to servers: where (`endpoints.py`), over what (`client.py`), which server is up
(`servers.py`), the dispatcher that runs the rows through them (`dispatcher.py`: the settings it
follows in `policy.py`, its bookkeeping in `state.py`) under one task group (`tasks.py`), and the
live counters (`stats.py`, `causes.py`). The dispatcher wires one module per concern: what
becomes of a failed row (`retries.py`), the request timeout (`watchdog.py`), whether a failure
was the row's or its server's and the all-down pause (`health.py`), answered rows
(`answers.py`), ledger commits (`commits.py`) and the acceptance length (`acceptance.py`)."""
