"""`specpilot export`: a generate job's committed rows as a trainer reads them.

`formats.py` is the registry (one record per format), `jsonl.py` and `arrow.py` the writers,
`target.py` where an export may go and how it lands whole, `run.py` the export itself;
`templates.py` the SpecForge chat template a format states, `lengths.py` what a trainer's
`--max-length` would cut.
"""
