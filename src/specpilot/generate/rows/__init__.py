"""The row in and out: prompt files read into `PromptRow`s (`inputs.py`, `turns.py`, `ids.py`),
an answer checked (`thinking.py`, `validate.py`) and the output row built from its
turns (`output.py`). What a trainer sees of the rows lives in `export/`."""
