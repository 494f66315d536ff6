"""`specpilot bench`: which configuration finishes the job soonest on this GPU, measured.

Each variant (no speculation, the spec's method at 1, 2, 3 draft tokens, or `--variants`)
is checked and planned (`launch.preflight`), started at the knobs the plan recommends for
it (`launch.supervisor`), warmed up, sent the same stratified sample of the job's own
prompts through `generate`'s own job code (a scratch ledger per variant), measured
(steady-state output tok/s, acceptance, TTFT and ITL), and stopped. The winner is the
variant with the shortest projected time for the whole input (`specpilot.projection`).
"""
