# ruff: noqa  (a stub mirrors another package's import surface)
"""Stub for argument validation only: any name resolves to a placeholder never called."""

import enum


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    RGB = 3


def __getattr__(name: str) -> object:
    def _unavailable(*args: object, **kwargs: object) -> object:
        raise RuntimeError(f"torchvision stub: {name} is not available in a validation harness")

    return _unavailable
