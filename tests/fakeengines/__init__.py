"""The scripted stand-in (standin.py) and the engine log scenarios it plays (scenarios.py)."""
