"""Where pgrag keeps its local state: ``PGRAG_HOME`` (no database driver imported here, so
the PL/Python functions can ask for it inside the server)."""

from __future__ import annotations

import os
from pathlib import Path


def pgrag_home() -> Path:
    """Folder holding pgrag's local state (the embedded cluster lives in ``pgdata/`` inside,
    the model's cached ONNX graph in ``models/``).

    ``PGRAG_HOME`` when set; for root ``/var/lib/pgrag`` (never a folder under ``/root``: see
    :mod:`pgrag.local_server`); otherwise the user data directory (platformdirs).
    """
    configured = os.environ.get("PGRAG_HOME")
    if configured:
        return Path(configured).expanduser().resolve()
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/pgrag")
    import platformdirs

    return Path(platformdirs.user_data_dir("pgrag"))
