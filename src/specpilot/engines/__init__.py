"""Engine knowledge, the bottom layer: each engine's releases, flag tables, rules, value
ranges and memory facts as data, and the one reader of engine argv.

Nothing here imports from the layers above (check, plan, launch, generate, cli); those
look engines up in `registry.ENGINES`.
"""
