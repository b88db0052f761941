"""The real bundled model for the tests (fixture ``local_embedder``), loaded once per run."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def local_embedder() -> Any:
    """The real bundled all-MiniLM-L6-v2 model, loaded once per test run."""
    from pgrag.pipeline.embedders import LocalEmbedder

    return LocalEmbedder()
