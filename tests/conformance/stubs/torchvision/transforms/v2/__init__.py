# ruff: noqa  (a stub mirrors another package's import surface)
def __getattr__(name: str) -> object:
    return type(name, (), {"__init__": lambda self, *a, **k: None})


from . import functional
