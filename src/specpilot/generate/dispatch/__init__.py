"""Sending rows to servers: where (`endpoints.py`), over what (`client.py`), which server is up
(`servers.py`), the dispatcher that runs the rows through them (`dispatcher.py`) under one task
group (`tasks.py`), and the live counters (`stats.py`, `causes.py`)."""
