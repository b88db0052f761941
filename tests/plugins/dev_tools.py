"""Commands of the dev dependencies (pgspot, squawk) for the tests that run them, and what
pgspot may report on the SQL."""

from __future__ import annotations

import re
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


# Functions the planner must inline into their callers, which a SET clause (a pinned
# search_path) would prevent: each qualifies every name and operator in its body instead (pgspot
# checks that; the Makefile exempts exactly these from PS005), and has no setting at all.
INLINED_FUNCTIONS = (
    "pgrag.searchable(text,bigint,jsonb,jsonb,text,timestamp with time zone,bigint[],jsonb,text[],"
    "timestamp with time zone,timestamp with time zone)",
    "pgrag.distributed()",
)


def pgspot_codes(output: str) -> set[str]:
    """The finding codes in pgspot's output, but for PS005 (no explicit search_path) on one of
    INLINED_FUNCTIONS: their bodies are still checked for unqualified names (PS001, PS016...)."""
    inlined = {signature.split("(")[0] for signature in INLINED_FUNCTIONS}
    codes = set()
    for line in output.splitlines():
        m = re.match(r"(PS\d{3}): (.*)$", line)
        if m and not (m[1] == "PS005" and m[2].split(": ")[-1].split("(")[0] in inlined):
            codes.add(m[1])
    return codes
