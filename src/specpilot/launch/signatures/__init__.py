"""Log signatures per engine, as data: ready, progress, allocation and fatal lines."""

from __future__ import annotations

from specpilot.launch.signatures import common, sglang, vllm
from specpilot.launch.signatures.base import CAUSES, Kind, Signature, SignatureFix

ALL: tuple[Signature, ...] = sglang.SIGNATURES + vllm.SIGNATURES + common.SIGNATURES


def for_engine(engine: str) -> tuple[Signature, ...]:
    """The signatures that apply to `engine`, engine-specific before shared ones."""
    return tuple(sig for sig in ALL if sig.applies_to(engine))


__all__ = ["ALL", "CAUSES", "Kind", "Signature", "SignatureFix", "for_engine"]
