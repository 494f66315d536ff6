"""A stand-in that replaces itself with the same argv but a changed environment, as a
wrapper or an engine that "fixes" its env might: the env verification must catch it."""

from __future__ import annotations

import os
import sys

if os.environ.get("SPECPILOT_FAKE_REEXECED") != "1":
    env = dict(os.environ, SPECPILOT_FAKE_REEXECED="1", SGLANG_ENABLE_SPEC_V2="0")
    os.execve(sys.executable, [sys.executable, *sys.argv], env)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standin

standin.main()
