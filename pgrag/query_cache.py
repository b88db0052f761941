"""Query embeddings for the search commands, through the query-embedding cache.

A query embedded before (same tenant, same model, same text once normalised by
``pgrag.normalize_query`` in SQL) is read back from ``pgrag.query_embeddings`` and the model is
never loaded; otherwise the model embeds it and the result is cached (``pgrag.query_cache_get``
and ``pgrag.query_cache_put``: the key, the size bound and the eviction are SQL's). Hits and
model calls are recorded as usage (operation ``query``), so ``pgrag stats`` shows the hit rate.

Cache and usage writes go to the connection given as ``primary``: searches may run elsewhere
(a read replica), the cache is written where writes are possible. None of it may fail a search:
an unreachable primary, a read-only server or an installation without the cache only turns the
cache off for the rest of the command, with one warning on stderr.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg

from pgrag import tracing
from pgrag.db import one_line, tenant_transaction
from pgrag.pipeline.embedders import Embedder, embedder_for_database, read_embedding_config
from pgrag.usage import Usage, record_usage_quietly, warn


class QueryEmbeddings:
    """Embeds a command's queries for ``tenant`` with the model the database records.

    ``primary`` is the connection cache reads and writes and usage records use; ``embedder``
    defaults to the database's model (loaded only on the first cache miss).
    """

    def __init__(
        self,
        primary: psycopg.Connection[Any],
        tenant: str,
        embedder: Embedder | None = None,
        *,
        use_cache: bool = True,
    ) -> None:
        self.primary = primary
        self.tenant = tenant
        self._embedder = embedder
        self.use_cache = use_cache
        self.hits = 0
        self.misses = 0
        self.tokens = 0
        self._recorded = (0, 0, 0)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = embedder_for_database(self.primary)
        return self._embedder

    # -- the cache, failure-tolerant --------------------------------------------------------

    def _cache_call(self, query: str, args: tuple[Any, ...]) -> Any:
        """One cache statement as the tenant; None (and the cache off) when it fails."""
        if not self.use_cache:
            return None
        try:
            with tenant_transaction(self.primary, self.tenant):
                row = self.primary.execute(query, args).fetchone()
        except (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable):
            self.use_cache = False  # an installation without the cache: nothing to say
            return None
        except psycopg.Error as exc:
            self.use_cache = False
            warn(
                "query-embedding cache off for this command "
                f"({one_line(exc.diag.message_primary or str(exc)) or type(exc).__name__})"
            )
            return None
        return row[0] if row else None

    def cached(self, text: str) -> np.ndarray | None:
        """The cached embedding of ``text`` by this model, or None."""
        found = self._cache_call(
            "select pgrag.query_cache_get(%s, %s)", (self.embedder.model_name, text)
        )
        if found is None:
            return None
        # pgvector's loader gives a Vector (pgvector >= 0.4) or an array (earlier versions).
        values = found.to_numpy() if hasattr(found, "to_numpy") else found
        return np.asarray(values, dtype=np.float32)

    def _store(self, text: str, vector: np.ndarray) -> None:
        self._cache_call(
            "select pgrag.query_cache_put(%s, %s, %s)", (self.embedder.model_name, text, vector)
        )

    # -- embedding -------------------------------------------------------------------------

    def embed(self, text: str) -> np.ndarray:
        """The embedding of ``text``: from the cache, else from the model (then cached)."""
        return self.embed_many([text])[0]

    def embed_many(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Embeddings of ``texts`` in order; the model embeds the cache misses in one call."""
        with tracing.span("embed", {"pgrag.tenant": self.tenant, "pgrag.batch.size": len(texts)}):
            hits, tokens = self.hits, self.tokens
            out = self._embed_many(texts)
            embedder = self.embedder
            tracing.annotate(
                {
                    "gen_ai.operation.name": "embeddings",
                    "gen_ai.provider.name": embedder.provider,
                    "gen_ai.request.model": embedder.model_name,
                    "gen_ai.usage.input_tokens": self.tokens - tokens,
                    "pgrag.cache.hits": self.hits - hits,
                }
            )
            return out

    def _embed_many(self, texts: Sequence[str]) -> list[np.ndarray]:
        out: list[np.ndarray | None] = [self.cached(t) for t in texts]
        missing = [i for i, v in enumerate(out) if v is None]
        self.hits += len(texts) - len(missing)
        if missing:
            embedder = self.embedder
            before = embedder.tokens_used
            vectors = embedder.embed([texts[i] for i in missing])
            self.tokens += embedder.tokens_used - before
            self.misses += len(missing)
            for row, i in enumerate(missing):
                vector = np.asarray(vectors[row], dtype=np.float32)
                out[i] = vector
                self._store(texts[i], vector)
        return [v for v in out if v is not None]

    # -- after a search ----------------------------------------------------------------------

    def still_current(self, conn: psycopg.Connection[Any] | None = None) -> bool:
        """Whether the database still records this embedder's model and dimension.

        Checked after a search: a re-embed may have switched models between the moment the
        query was embedded and the search (``pgrag reembed``), and a query embedding of the
        previous model ranks the new embeddings badly, or fails on another dimension."""
        conn = conn or self.primary
        dims, model, provider = read_embedding_config(conn)
        if not conn.autocommit:
            conn.rollback()
        embedder = self.embedder
        if model is None:
            return dims == embedder.dims
        return (model, provider, dims) == (embedder.model_name, embedder.provider, embedder.dims)

    def switch_to_database_model(self) -> None:
        """Use the model the database records from now on (after :meth:`still_current` said
        it changed): queries are embedded again by it."""
        self.record_usage()
        self._embedder = embedder_for_database(self.primary)

    def record_usage(self) -> bool:
        """Record the hits and model calls not recorded yet (as usage of operation ``query``);
        never raises."""
        hits, misses, tokens = self.hits, self.misses, self.tokens
        seen_hits, seen_misses, seen_tokens = self._recorded
        if (hits, misses, tokens) == self._recorded or self._embedder is None:
            return True
        usage = Usage(
            "query",
            self.embedder.provider,
            self.embedder.model_name,
            input_tokens=tokens - seen_tokens,
            requests=misses - seen_misses,
            cache_hits=hits - seen_hits,
        )
        self._recorded = (hits, misses, tokens)
        return record_usage_quietly(self.primary, self.tenant, usage)
