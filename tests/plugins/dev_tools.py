"""Commands of the dev dependencies (pgspot, squawk) for the tests that run them."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def dev_tool(name: str) -> str | None:
    """Path of a dev-dependency command (pgspot, squawk): beside the Python running the tests,
    in this checkout's .venv, or on PATH; None when none has it."""
    for folder in (Path(sys.executable).parent, ROOT / ".venv/bin"):
        if (folder / name).exists():
            return str(folder / name)
    return shutil.which(name)
