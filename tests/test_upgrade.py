"""Upgrading an earlier installation gives exactly what a fresh installation gives.

For each earlier bundle in ``tests/fixtures/releases`` (see its README): install it with psql,
load documents and chunks (``samples/``, chunked and embedded by the bundled model, in two
tenants, one document published), upgrade to this checkout — with ``pgrag migrate``, and with
this checkout's bundle through psql — and compare with a fresh installation that loaded the same
rows:

* every row of every table in schema pgrag (timestamps aside, sharded counters summed);
* what vector_search, keyword_search, hybrid_search (both fusions) and build_context return for
  a few queries, as each tenant and as anon;
* ``pg_dump --schema-only``, normalised only as ``schema_dump`` does for every comparison (the
  ``\\restrict`` key pg_dump draws at random, the version header). Nothing else may differ: the
  same incremental files ran in the same order, so tables keep one column order, and the
  functions tier is replaced whole; a function an earlier tier created and this one lacks would
  show here (a release that removes one must drop it).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.databases import psql, schema_dump

from pgrag.db import connect
from pgrag.install.bundle import bundle_sql
from pgrag.install.migrator import Migrator
from pgrag.pipeline.chunking import Chunk, make_chunker, token_counter
from pgrag.pipeline.extract import extract_path
from pgrag.testing import create_database, drop_database

RELEASES = sorted((Path(__file__).parent / "fixtures" / "releases").glob("*.sql.gz"))
SAMPLES = Path(__file__).resolve().parents[1] / "samples"

QUERIES = [
    "how do I install pgrag on Linux",
    "reciprocal rank fusion of keyword and vector rankings",
    "what happens when an ingest is killed",
    "tag the release candidate v2.3.1-rc1",
]
# Columns that say when a row was written, not what it holds.
VOLATILE = ["created_at", "updated_at", "applied_at"]
# Sharded counters: which shard a writer picks depends on its backend, so their sums are
# compared (table: key columns, summed columns).
SHARDED = {
    "corpus_stats": ("tenant_id, language", "sum(chunk_count), sum(token_count)"),
    "bm25_lexicon": ("tenant_id, lexeme", "sum(df), max(max_tf), min(min_doc_len)"),
}


@dataclass(frozen=True)
class Document:
    tenant: str
    id: int
    path: Path
    is_public: bool
    chunks: list[Chunk]
    embeddings: np.ndarray


@pytest.fixture(scope="module")
def corpus(local_embedder: Any) -> list[Document]:
    """The sample files for tenant acme (search.html published), two of them for globex too."""
    chunker = make_chunker("tokens", token_counter(local_embedder), 64, 8)
    files = sorted(p for p in SAMPLES.iterdir() if p.suffix in (".md", ".html"))
    placed = [("acme", p) for p in files] + [("globex", p) for p in files[:2]]
    documents = []
    for n, (tenant, path) in enumerate(placed, start=1):
        chunks = list(chunker.chunks(extract_path(path).blocks))
        embeddings = local_embedder.embed([c.content for c in chunks])
        public = tenant == "acme" and path.name == "search.html"
        documents.append(Document(tenant, n, path, public, chunks, embeddings))
    return documents


def load(dsn: str, corpus: list[Document], model: str) -> None:
    """Insert ``corpus`` with plain SQL that every schema version accepts."""
    with connect(dsn) as conn:
        conn.execute("update pgrag.embedding_config set model = %s, provider = 'local'", (model,))
        for d in corpus:
            extracted = extract_path(d.path)
            conn.execute(
                "insert into pgrag.documents (tenant_id, id, title, source_type, source_uri, "
                "content_sha256, status, chunk_count, embedding_model, is_public) "
                "values (%s, %s, %s, %s, %s, %s, 'ready', %s, %s, %s)",
                (
                    d.tenant,
                    d.id,
                    extracted.title,
                    extracted.source_type,
                    d.path.name,
                    extracted.content_sha256,
                    len(d.chunks),
                    model,
                    d.is_public,
                ),
            )
            with conn.cursor() as cur:
                cur.executemany(
                    "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, "
                    "embedding, page, heading_path, language, token_count, content_sha256, "
                    "overlap_chars) values (%s, %s, %s, %s, %s, %s, %s, %s::regconfig, %s, %s, %s)",
                    [
                        (
                            d.tenant,
                            d.id,
                            c.index,
                            c.content,
                            e,
                            c.page,
                            list(c.heading_path),
                            c.language,
                            c.token_count,
                            c.sha256,
                            c.overlap_chars,
                        )
                        for c, e in zip(d.chunks, d.embeddings, strict=True)
                    ],
                )
        conn.commit()


def table_rows(dsn: str) -> dict[str, list[str]]:
    """Every table of schema pgrag as sorted JSON rows (see VOLATILE and SHARDED)."""
    with psycopg.connect(dsn) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "select relname from pg_class where relnamespace = 'pgrag'::regnamespace "
                "and relkind in ('r', 'p') order by 1"
            )
        ]
        out = {}
        for table in tables:
            if table in SHARDED:
                keys, sums = SHARDED[table]
                rows = conn.execute(
                    f"select to_jsonb(s) from (select {keys}, {sums} from pgrag.{table} "
                    f"group by {keys}) as s"
                ).fetchall()
            else:
                rows = conn.execute(
                    f"select to_jsonb(t) - %s::text[] from pgrag.{table} as t", (VOLATILE,)
                ).fetchall()
            out[table] = sorted(json.dumps(r[0], sort_keys=True) for r in rows)
    return out


def search_results(dsn: str, queries: dict[str, np.ndarray]) -> dict[str, Any]:
    """The search functions' rows per caller and query, as PostgREST would call them."""
    callers = {
        "acme": ("authenticated", {"role": "authenticated", "tenant_id": "acme"}),
        "globex": ("authenticated", {"role": "authenticated", "tenant_id": "globex"}),
        "anon": ("anon", {"role": "anon"}),
    }
    calls = {
        "vector": "select to_jsonb(r) from public.vector_search(%(e)s, 5) as r",
        "keyword": "select to_jsonb(r) from public.keyword_search(%(q)s, 5) as r",
        "hybrid": "select to_jsonb(r) from public.hybrid_search(%(q)s, %(e)s, 5) as r",
        "rrf": "select to_jsonb(r) from public.hybrid_search(%(q)s, %(e)s, 5, 'rrf') as r",
        "context": "select to_jsonb(r) from public.build_context(%(q)s, %(e)s) as r",
    }
    out: dict[str, Any] = {}
    with connect(dsn) as conn:
        for caller, (role, claims) in callers.items():
            for text, embedding in queries.items():
                for name, call in calls.items():
                    conn.execute(
                        "select set_config('role', %s, true), "
                        "set_config('request.jwt.claims', %s, true)",
                        (role, json.dumps(claims)),
                    )
                    rows = conn.execute(call, {"q": text, "e": embedding}).fetchall()
                    out[f"{caller} {name} {text!r}"] = [r[0] for r in rows]
                    conn.rollback()
    return out


@dataclass
class Snapshot:
    rows: dict[str, list[str]]
    searches: dict[str, Any]
    schema: str


def snapshot(dsn: str, queries: dict[str, np.ndarray]) -> Snapshot:
    return Snapshot(table_rows(dsn), search_results(dsn, queries), schema_dump(dsn))


@pytest.fixture(scope="module")
def queries(local_embedder: Any) -> dict[str, np.ndarray]:
    return dict(zip(QUERIES, local_embedder.embed(QUERIES), strict=True))


@pytest.fixture(scope="module")
def fresh(
    pg_admin_dsn: str,
    template_db: str,
    corpus: list[Document],
    local_embedder: Any,
    queries: dict[str, np.ndarray],
) -> Iterator[Snapshot]:
    """A fresh installation of this checkout holding the corpus."""
    dsn = create_database(pg_admin_dsn, template=template_db)
    try:
        load(dsn, corpus, local_embedder.model_name)
        result = snapshot(dsn, queries)
        assert sum(len(v) for k, v in result.searches.items() if k.startswith("acme")) > 0
        yield result
    finally:
        drop_database(pg_admin_dsn, dsn)


@pytest.mark.parametrize("engine", ["migrate", "bundle"])
@pytest.mark.parametrize("release", RELEASES, ids=lambda p: p.name.removesuffix(".sql.gz"))
def test_upgrading_an_earlier_installation_equals_a_fresh_one(
    release: Path,
    engine: str,
    empty_db: str,
    corpus: list[Document],
    local_embedder: Any,
    queries: dict[str, np.ndarray],
    fresh: Snapshot,
    tmp_path: Path,
) -> None:
    old = tmp_path / release.name.removesuffix(".gz")
    old.write_bytes(gzip.decompress(release.read_bytes()))
    installed = psql(empty_db, old)
    assert installed.returncode == 0, installed.stderr
    load(empty_db, corpus, local_embedder.model_name)

    if engine == "migrate":
        Migrator(empty_db).migrate()
    else:
        new = tmp_path / "pgrag.sql"
        new.write_text(bundle_sql(), encoding="utf-8")
        upgraded = psql(empty_db, new)
        assert upgraded.returncode == 0, upgraded.stderr

    assert Migrator(empty_db).status().pending == []
    after = snapshot(empty_db, queries)
    assert after.rows == fresh.rows
    assert after.searches == fresh.searches
    assert after.schema == fresh.schema
