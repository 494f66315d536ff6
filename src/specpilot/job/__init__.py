"""`specpilot job`: the whole pipeline from a server spec to an exported dataset, resumable."""
