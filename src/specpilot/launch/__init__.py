"""Supervised launch of an engine server: run directory, start, verify, classify, stop.

`specpilot up` writes a run directory on the host, ships it with verified hashes,
starts the engine detached, proves the live process is the planned one, and
classifies the whole engine log line by line until the server is ready or failed.
"""
