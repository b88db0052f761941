"""Re-ranking of search candidates: a cross-encoder or a re-rank API scores each candidate
against the query, and the candidates are put in the order of those scores.

* :mod:`pgrag.rerank.base`: the :class:`Reranker` protocol and the :func:`rerank` step;
* :mod:`pgrag.rerank.local`: a local cross-encoder (sentence-transformers, offline);
* :mod:`pgrag.rerank.http`: an HTTP re-rank API (Cohere, Jina, Voyage, Hugging Face TEI);
* :mod:`pgrag.rerank.config`: the ``--rerank`` specification (``local:MODEL`` or a URL).
"""

from pgrag.rerank.base import (
    DEFAULT_RERANK_TOP,
    MAX_RERANK_TOP,
    Reranker,
    checked_scores,
    rerank,
)
from pgrag.rerank.config import RerankSettings, reranker_from_spec

__all__ = [
    "DEFAULT_RERANK_TOP",
    "MAX_RERANK_TOP",
    "RerankSettings",
    "Reranker",
    "checked_scores",
    "rerank",
    "reranker_from_spec",
]
