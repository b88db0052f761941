"""A local cross-encoder (sentence-transformers ``CrossEncoder`` on the CPU), offline.

The model is a local folder or the name of a model already in the Hugging Face cache
(``HF_HUB_OFFLINE`` is set unless the caller set it: pgrag never downloads at query time). It
must have one output (a relevance logit, as ``cross-encoder/ms-marco-MiniLM-L-6-v2``); pairs
longer than the model reads are truncated to its maximum length, and pairs are scored in
batches. ``threads`` (default ``PGRAG_RERANK_THREADS``, else torch's default: one per core)
sets torch's intra-op threads, as the embedder's ``threads`` sets ONNX Runtime's (1 inside
PostgreSQL; on a busy machine 1 thread can be faster than one per core).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pgrag.errors import ConfigError, RerankError
from pgrag.rerank.base import checked_scores

DEFAULT_BATCH_SIZE = 32


def _threads_from_env() -> int | None:
    raw = os.environ.get("PGRAG_RERANK_THREADS")
    if not raw:
        return None
    try:
        threads = int(raw)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ConfigError(f"PGRAG_RERANK_THREADS={raw!r} must be a whole number of at least 1.")
    return threads


class CrossEncoderReranker:
    """Scores (query, document) pairs with a cross-encoder; loads the model on first use."""

    def __init__(
        self,
        model: str,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        threads: int | None = None,
        max_length: int | None = None,
    ) -> None:
        if not model.strip():
            raise ConfigError("--rerank local: needs a model name or path, e.g. local:/models/ce.")
        if batch_size < 1:
            raise ConfigError("the re-rank batch size must be at least 1.")
        self.model = model
        self.name = f"local:{model}"
        self.batch_size = batch_size
        self.threads = threads if threads is not None else _threads_from_env()
        self._max_length = max_length
        self._encoder: Any = None

    def _load(self) -> Any:
        if self._encoder is not None:
            return self._encoder
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        try:
            import torch
            from sentence_transformers import CrossEncoder
        except ImportError as exc:
            raise RerankError(
                f"a local re-ranker needs sentence-transformers and torch ({exc.name} is "
                "missing): pip install 'pgrag-sql[local]', or use an HTTP re-rank API."
            ) from exc
        try:
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        except ImportError:  # pragma: no cover (sentence-transformers requires transformers)
            pass
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        path = Path(self.model).expanduser()
        looks_like_path = self.model.startswith((".", "/", "~")) or path.exists()
        if looks_like_path and not path.is_dir():
            raise RerankError(
                f"re-rank model folder {self.model} does not exist: pass a folder holding a "
                "cross-encoder (config.json, weights, tokenizer) or a model name."
            )
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")
        try:
            encoder = CrossEncoder(
                str(path) if looks_like_path else self.model,
                device="cpu",
                local_files_only=offline,
                max_length=self._max_length,
            )
        except (OSError, ValueError) as exc:
            raise RerankError(
                f"re-rank model {self.model} could not be loaded offline ({_first_line(exc)}): "
                f"download it once where the network is reachable (huggingface-cli download "
                f"{self.model}) or pass local:/path/to/the/model."
            ) from exc
        if encoder.num_labels != 1:
            raise RerankError(
                f"re-rank model {self.model} has {encoder.num_labels} outputs: a re-ranker "
                "needs a cross-encoder with one relevance score (num_labels 1), e.g. "
                "cross-encoder/ms-marco-MiniLM-L-6-v2."
            )
        limit = _model_limit(encoder)
        if limit is not None and (encoder.max_seq_length is None or encoder.max_seq_length > limit):
            encoder.max_seq_length = limit  # longer pairs are truncated, never an index error
        self._encoder = encoder
        return encoder

    @property
    def max_length(self) -> int | None:
        """Word pieces of one (query, document) pair the model reads; longer pairs are cut."""
        value = self._load().max_seq_length
        return None if value is None else int(value)

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        if not documents:
            return []
        encoder = self._load()
        pairs = [(query, document) for document in documents]
        scores = encoder.predict(
            pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        return checked_scores(self.name, [float(s) for s in scores.reshape(-1)], len(documents))


def _model_limit(encoder: Any) -> int | None:
    """The longest input the model's position embeddings allow (None: not stated)."""
    config = getattr(encoder, "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    return int(positions) if isinstance(positions, int) and positions > 0 else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
