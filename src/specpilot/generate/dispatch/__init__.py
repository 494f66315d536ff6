"""Sending rows to servers: where (`endpoints.py`), over what (`client.py`), which server is up
(`servers.py`), the dispatcher that runs the rows through them (`dispatcher.py`: the settings it
follows in `policy.py`, its bookkeeping in `state.py`) under one task group (`tasks.py`), and the
live counters (`stats.py`, `causes.py`)."""
