# ruff: noqa  (a stub mirrors another package's import surface)
"""Stub: SGLang's argument validation imports torchvision only for image utilities it does not call."""

__version__ = "0.0.0"
from . import io, transforms
