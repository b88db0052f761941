"""The shared folder beside the clone: data and vendored sources the repository does not hold.

A clone alone has no shared folder; a test that needs it skips, with the reason, through
:func:`shared_or_skip`, and nothing reads it through a hard-coded path. Where it is: the folder
``PGRAG_SHARED_DIR`` names, else ``shared`` beside the clone (the layout CI gives).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


class SharedDirMissing(Exception):
    """The shared folder, or the part of it asked for, is not there; the message says where."""


def shared_root() -> Path:
    """``PGRAG_SHARED_DIR``, else ``shared`` beside the clone (it may not exist)."""
    configured = os.environ.get("PGRAG_SHARED_DIR")
    return Path(configured) if configured else REPO.parent / "shared"


def shared_dir(*parts: str) -> Path:
    """``parts`` inside the shared folder; :class:`SharedDirMissing` when it is not there."""
    path = shared_root().joinpath(*parts)
    if not path.exists():
        where = "PGRAG_SHARED_DIR" if os.environ.get("PGRAG_SHARED_DIR") else "beside the clone"
        raise SharedDirMissing(
            f"{path} is missing (the shared folder {where}, with data and vendored sources "
            "that the repository does not hold; set PGRAG_SHARED_DIR to where it is)"
        )
    return path


def shared_or_skip(*parts: str) -> Path:
    """``parts`` inside the shared folder, or skip the calling test with the reason."""
    try:
        return shared_dir(*parts)
    except SharedDirMissing as exc:
        pytest.skip(str(exc))
