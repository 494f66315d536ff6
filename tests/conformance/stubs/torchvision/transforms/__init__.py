# ruff: noqa  (a stub mirrors another package's import surface)
"""Stub for argument validation only."""

import enum


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    LANCZOS = "lanczos"
    NEAREST_EXACT = "nearest-exact"
    BOX = "box"
    HAMMING = "hamming"


from . import functional, v2


def __getattr__(name: str) -> object:
    return type(name, (), {"__init__": lambda self, *a, **k: None})
