# ruff: noqa  (a stub mirrors another package's import surface)
"""Stub for argument validation only."""

from torchvision.transforms import InterpolationMode


def __getattr__(name: str) -> object:
    def _unavailable(*args: object, **kwargs: object) -> object:
        raise RuntimeError(f"torchvision stub: {name} is not available")

    return _unavailable
