"""No cross-tenant signal through the vector index.

* anon learns nothing about private rows: its vector search walks a graph of public chunks only,
  so 20,000 private chunks packed around a query change nothing anon gets (vector_search,
  hybrid_search with supabase-js defaults, build_context).
* A tenant isolated with ``pgrag.isolate_tenant`` searches its own HNSW graph: a neighbour's
  dense cluster around its queries changes neither its results nor its recall.

Clients are the PostgREST replay of tests/test_tenancy.py (a LOGIN NOINHERIT authenticator,
``set local role``, local ``request.jwt.claims``); data is loaded as the owner. Public texts and
queries are real all-MiniLM-L6-v2 embeddings; the crowds are synthetic vectors around them.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.tenancy import claims_for, ensure_authenticator, request
from psycopg import sql

from pgrag.db import connect, set_request_tenant

DIMS = 384
PUBLIC_TEXTS = [
    f"{topic}: {detail}"
    for topic in (
        "Vacation policy",
        "Expense reports",
        "Security badges",
        "Parental leave",
        "Remote work",
        "Travel booking",
    )
    for detail in (
        "how many days employees get each year",
        "who approves requests and how long it takes",
        "what to do when something goes wrong",
        "the form to fill in and where to send it",
        "exceptions for part-time staff and contractors",
        "the rules changed this year, see the summary",
        "questions go to the people team by email",
    )
]
QUERY = "how many paid vacation days do I get"


def unit(vectors: np.ndarray) -> np.ndarray:
    return (vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)).astype(np.float32)


def crowd(centre: np.ndarray, n: int, rng: np.random.Generator, spread: float = 0.01) -> np.ndarray:
    """n vectors packed around ``centre``: each nearer to it than any real text is."""
    return unit(centre[None, :] + rng.normal(0, spread, (n, DIMS)))


def add_document(
    conn: psycopg.Connection[Any],
    tenant: str,
    vectors: np.ndarray,
    *,
    public: bool,
    texts: list[str] | None = None,
) -> int:
    """One ready document of ``tenant`` with a chunk per vector (binary COPY, as the owner)."""
    row = conn.execute(
        "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status, "
        "is_public) values (%s, 'doc', 'text', gen_random_uuid()::text, 'ready', %s) "
        "returning id",
        (tenant, public),
    ).fetchone()
    assert row is not None
    with conn.cursor().copy(
        "copy pgrag.chunks (tenant_id, document_id, chunk_index, content, embedding, "
        "content_sha256) from stdin (format binary)"
    ) as copy:
        copy.set_types(["text", "int8", "int4", "text", "vector", "text"])
        for i, v in enumerate(vectors):
            text = texts[i] if texts else f"private note {i}"
            copy.write_row((tenant, row[0], i, text, v, f"{i:064x}"))
    return int(row[0])


def bulk_load(conn: psycopg.Connection[Any], load: Any) -> None:
    """Run ``load`` with the shared HNSW index rebuilt afterwards (faster than 20k inserts)."""
    conn.execute("drop index pgrag.chunks_embedding_hnsw")
    load()
    conn.execute("set maintenance_work_mem = '256MB'")
    conn.execute(
        "create index chunks_embedding_hnsw on pgrag.chunks "
        "using hnsw (embedding vector_cosine_ops) where embedding is not null"
    )
    conn.execute("analyze pgrag.chunks")
    conn.execute("analyze pgrag.documents")
    conn.commit()


def anon_view(db: str, query_emb: np.ndarray) -> dict[str, Any]:
    """Everything anon gets for QUERY from the three search entry points."""
    with request(db, "anon", {"role": "anon"}) as c:
        vector = c.execute(
            "select chunk_id, similarity from public.vector_search("
            "query_embedding := %s, match_count := 10)",
            (query_emb,),
        ).fetchall()
        # supabase-js: rpc('hybrid_search', { query_text, query_embedding })
        hybrid = c.execute(
            "select chunk_id, vector_rank, keyword_rank, score from public.hybrid_search("
            "query_text := %s, query_embedding := %s)",
            (QUERY, query_emb),
        ).fetchall()
        context = c.execute(
            "select context, sources from public.build_context(query_text := %s, "
            "query_embedding := %s)",
            (QUERY, query_emb),
        ).fetchone()
    return {"vector_search": vector, "hybrid_search": hybrid, "build_context": context}


@pytest.fixture
def public_corpus(db: str, conn: psycopg.Connection[Any], local_embedder: Any, pg_admin_dsn: str):
    ensure_authenticator(pg_admin_dsn)
    emb = unit(np.asarray(local_embedder.embed([*PUBLIC_TEXTS, QUERY]), dtype=np.float32))
    add_document(conn, "acme", emb[:-1], public=True, texts=list(PUBLIC_TEXTS))
    conn.commit()
    conn.execute("analyze pgrag.chunks")
    conn.commit()
    return emb[-1]


def test_anon_results_do_not_change_when_private_chunks_crowd_the_query(
    db: str, conn: psycopg.Connection[Any], public_corpus: np.ndarray
) -> None:
    query_emb = public_corpus
    before = anon_view(db, query_emb)
    assert len(before["vector_search"]) == 10
    assert before["build_context"][1]

    rng = np.random.default_rng(3)

    def load() -> None:
        # 20,000 private chunks nearer the query than any public text: half in the public
        # tenant's own private document, half in another tenant.
        add_document(conn, "acme", crowd(query_emb, 10_000, rng), public=False)
        add_document(conn, "globex", crowd(query_emb, 10_000, rng), public=False)

    bulk_load(conn, load)
    assert conn.execute("select count(*) from pgrag.chunks where not is_public").fetchone() == (
        20_000,
    )
    assert anon_view(db, query_emb) == before


def test_a_client_cannot_put_a_private_chunk_into_the_public_graph(
    db: str, conn: psycopg.Connection[Any], public_corpus: np.ndarray
) -> None:
    doc = add_document(
        conn, "acme", crowd(public_corpus, 3, np.random.default_rng(1)), public=False
    )
    conn.commit()
    # A tenant may not name is_public at all (column privileges)...
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        request(db, "authenticated", claims_for("acme")) as c,
    ):
        c.execute("update pgrag.chunks set is_public = true where document_id = %s", (doc,))
    # ...and even a role that may (service_role) cannot publish a chunk of a private document:
    # the trigger copies the document's flag over whatever is written.
    with request(db, "service_role", claims_for("acme")) as c:
        c.execute("update pgrag.chunks set is_public = true where document_id = %s", (doc,))
        c.execute(
            "insert into pgrag.chunks (document_id, chunk_index, content, embedding, "
            "content_sha256, is_public) values (%s, 99, 'forged', %s, 'x', true)",
            (doc, public_corpus),
        )
    assert conn.execute(
        "select count(*), count(*) filter (where is_public) from pgrag.chunks "
        "where document_id = %s",
        (doc,),
    ).fetchone() == (4, 0)


def test_publishing_a_document_moves_its_chunks_into_the_public_graph_and_back(
    db: str, conn: psycopg.Connection[Any], public_corpus: np.ndarray
) -> None:
    doc = add_document(
        conn, "acme", crowd(public_corpus, 3, np.random.default_rng(1)), public=False
    )
    conn.commit()
    ids = {r[0] for r in conn.execute("select id from pgrag.chunks where document_id = %s", (doc,))}

    def anon_ids() -> set[int]:
        with request(db, "anon", {"role": "anon"}) as c:
            return {
                r[0]
                for r in c.execute(
                    "select chunk_id from public.vector_search(%s, 10)", (public_corpus,)
                )
            }

    assert not anon_ids() & ids
    conn.execute("update pgrag.documents set is_public = true where id = %s", (doc,))
    conn.commit()
    assert ids <= anon_ids()
    conn.execute("update pgrag.documents set is_public = false where id = %s", (doc,))
    conn.commit()
    assert not anon_ids() & ids


# -- noisy neighbours -----------------------------------------------------------------------------

VICTIM_ROWS = 3_000
CLUSTER_ROWS = 6_000
QUERIES = 30
K = 10


@pytest.fixture
def neighbourhood(conn: psycopg.Connection[Any], pg_admin_dsn: str) -> dict[str, Any]:
    """A tenant of 3,000 clustered chunks (isolated) and query vectors among them."""
    ensure_authenticator(pg_admin_dsn)
    rng = np.random.default_rng(11)
    centres = unit(rng.normal(0, 1, (200, DIMS)))
    own = unit(
        centres[rng.integers(0, 200, VICTIM_ROWS)] + rng.normal(0, 0.03, (VICTIM_ROWS, DIMS))
    )
    queries = unit(centres[rng.integers(0, 200, QUERIES)] + rng.normal(0, 0.04, (QUERIES, DIMS)))
    bulk_load(conn, lambda: add_document(conn, "victim", own, public=False))
    conn.execute("select pgrag.isolate_tenant('victim')")
    conn.commit()
    return {"queries": queries, "rng": rng}


def victim_search(db: str, queries: np.ndarray) -> list[list[tuple[int, float]]]:
    out = []
    with request(db, "authenticated", claims_for("victim")) as c:
        for q in queries:
            out.append(
                c.execute(
                    "select chunk_id, similarity from public.vector_search(%s, %s)", (q, K)
                ).fetchall()
            )
    return out


def exact_top_k(conn: psycopg.Connection[Any], q: np.ndarray) -> list[int]:
    rows = conn.execute(
        "select id from (select id, embedding <=> %s as d from pgrag.chunks "
        "where tenant_id = 'victim' offset 0) s order by d, id limit %s",
        (q, K),
    ).fetchall()
    return [r[0] for r in rows]


def add_cluster(
    conn: psycopg.Connection[Any], queries: np.ndarray, rng: np.random.Generator
) -> None:
    """Another tenant's dense cluster around every query (CLUSTER_ROWS chunks in all)."""
    per_query = CLUSTER_ROWS // len(queries)
    vectors = np.concatenate([crowd(q, per_query, rng, 0.005) for q in queries])
    bulk_load(
        conn,
        lambda: add_document(conn, "neighbour", vectors, public=False),
    )


def test_a_neighbours_cluster_leaves_an_isolated_tenants_recall_at_or_above_095(
    db: str, conn: psycopg.Connection[Any], neighbourhood: dict[str, Any]
) -> None:
    queries = neighbourhood["queries"]
    add_cluster(conn, queries, neighbourhood["rng"])
    got = victim_search(db, queries)
    assert all(len(rows) == K for rows in got)
    recall = np.mean(
        [
            len({r[0] for r in rows} & set(exact_top_k(conn, q))) / K
            for rows, q in zip(got, queries, strict=True)
        ]
    )
    assert recall >= 0.95


def test_an_isolated_tenants_results_are_the_same_whatever_its_neighbour_holds(
    db: str, conn: psycopg.Connection[Any], neighbourhood: dict[str, Any]
) -> None:
    queries = neighbourhood["queries"]
    alone = victim_search(db, queries)
    add_cluster(conn, queries, neighbourhood["rng"])
    assert victim_search(db, queries) == alone


def test_a_small_tenants_results_are_the_same_whatever_its_neighbour_holds(
    db: str, conn: psycopg.Connection[Any], pg_admin_dsn: str
) -> None:
    ensure_authenticator(pg_admin_dsn)
    rng = np.random.default_rng(5)
    own = unit(rng.normal(0, 1, (500, DIMS)))
    add_document(conn, "small", own, public=False)
    conn.commit()
    queries = own[:10]

    def search() -> list[list[tuple[int, float]]]:
        with request(db, "authenticated", claims_for("small")) as c:
            return [
                c.execute(
                    "select chunk_id, similarity from public.vector_search(%s, 10)", (q,)
                ).fetchall()
                for q in queries
            ]

    alone = search()
    vectors = np.concatenate([crowd(q, 300, rng, 0.005) for q in queries])
    bulk_load(
        conn,
        lambda: add_document(conn, "neighbour", vectors, public=False),
    )
    assert search() == alone


@pytest.mark.parametrize("draft", [False, True], ids=["all-ready", "with-a-draft"])
def test_a_tenant_whose_walk_runs_out_of_scan_budget_gets_its_exact_top_k(
    db: str, conn: psycopg.Connection[Any], pg_admin_dsn: str, draft: bool
) -> None:
    # A tenant above the exact threshold (2,000 chunks) in the shared graph, its query inside a
    # neighbour's dense cluster, and a scan budget (hnsw.max_scan_tuples) too small to walk past
    # the cluster: the walk finds some of the tenant's rows but fewer than k (k = 40 here), and
    # the tenant gets its exact top k instead (with a document of its own not ready, too: that
    # one never shows).
    ensure_authenticator(pg_admin_dsn)
    k = 40
    rng = np.random.default_rng(29)
    query = unit(rng.normal(0, 1, DIMS))
    own = np.concatenate([crowd(query, 3, rng, 0.001), unit(rng.normal(0, 1, (2_497, DIMS)))])

    def load() -> None:
        add_document(conn, "crowded", own, public=False)
        add_document(conn, "neighbour", crowd(query, 2_000, rng, 0.005), public=False)

    bulk_load(conn, load)
    if draft:
        doc = add_document(conn, "crowded", crowd(query, 5, rng, 0.05), public=False)
        conn.execute("update pgrag.documents set status = 'processing' where id = %s", (doc,))
        conn.commit()
    exact = conn.execute(
        "select c.id from (select c.id, c.embedding <=> %s as d from pgrag.chunks as c"
        " join pgrag.documents as d on d.id = c.document_id and d.tenant_id = c.tenant_id"
        " where c.tenant_id = 'crowded' and d.status = 'ready' offset 0) as c"
        " order by c.d, c.id limit %s",
        (query, k),
    ).fetchall()
    with request(db, "authenticated", claims_for("crowded")) as c:
        c.execute("select set_config('hnsw.max_scan_tuples', '1', true)")
        # The walk the arm makes for this tenant (its settings for a tenant with half of the
        # shared graph, 4 x k rows fetched), alone.
        for name, value in (
            ("hnsw.iterative_scan", "relaxed_order"),
            ("hnsw.ef_search", "100"),
            ("enable_sort", "off"),
        ):
            c.execute("select set_config(%s, %s, true)", (name, value))
        (walked,) = c.execute(
            "select count(*) from (select id from pgrag.chunks where embedding is not null"
            " order by embedding <=> %s limit %s) as w",
            (query, 4 * k),
        ).fetchone() or (None,)
        for name in ("hnsw.iterative_scan", "hnsw.ef_search", "enable_sort"):
            c.execute(f"reset {name}")
        rows = c.execute("select chunk_id from public.vector_search(%s, %s)", (query, k)).fetchall()
    assert walked is not None and 0 < walked < k
    assert rows == exact


def test_isolate_tenants_gives_every_tenant_above_the_threshold_its_own_graph_once(
    conn: psycopg.Connection[Any],
) -> None:
    rng = np.random.default_rng(2)
    add_document(conn, "big", unit(rng.normal(0, 1, (60, DIMS))), public=False)
    add_document(conn, "tiny", unit(rng.normal(0, 1, (5, DIMS))), public=False)
    conn.commit()
    made = conn.execute("select tenant_id, chunk_count from pgrag.isolate_tenants(50)").fetchall()
    conn.commit()
    assert made == [("big", 60)]
    assert conn.execute("select count(*) from pgrag.isolate_tenants(50)").fetchone() == (0,)
    name = conn.execute("select pgrag.tenant_index_name('big')").fetchone()[0]
    predicate = conn.execute(
        "select pg_get_expr(indpred, indrelid) from pg_index where indexrelid = %s::regclass",
        (f"pgrag.{name}",),
    ).fetchone()[0]
    # (the tenant's key, not its id: docs/security.md, "Catalog metadata an API role can read")
    key = conn.execute("select hashtextextended('big', 0)").fetchone()[0]
    assert f"hashtextextended(tenant_id, (0)::bigint) = '{key}'::bigint" in predicate
    assert conn.execute("select pgrag.share_tenant('big')").fetchone() == (True,)
    assert conn.execute("select to_regclass(%s)", (f"pgrag.{name}",)).fetchone() == (None,)


def test_isolate_tenant_builds_the_graph_in_memory_whatever_the_session_allows(
    conn: psycopg.Connection[Any],
) -> None:
    # pgvector builds several times slower once its graph outgrows maintenance_work_mem (it
    # says so in a notice); isolate_tenant raises it for the build and restores it after.
    add_document(
        conn, "big", unit(np.random.default_rng(4).normal(0, 1, (2000, DIMS))), public=False
    )
    conn.commit()
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("set maintenance_work_mem = '1MB'")
    conn.execute("select pgrag.isolate_tenant('big')")
    assert conn.execute("show maintenance_work_mem").fetchone() == ("1MB",)
    conn.commit()
    assert not [n for n in notices if "maintenance_work_mem" in n]


@pytest.mark.parametrize("role", ["anon", "authenticated"])
def test_api_roles_cannot_isolate_a_tenant(db: str, pg_admin_dsn: str, role: str) -> None:
    ensure_authenticator(pg_admin_dsn)
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        request(db, role, claims_for("acme")) as c,
    ):
        c.execute("select pgrag.isolate_tenant('acme')")


def test_isolate_tenant_refuses_a_blank_tenant(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="tenant"):
        conn.execute("select pgrag.isolate_tenant('  ')")


def test_isolated_search_uses_the_tenants_own_index(
    db: str, conn: psycopg.Connection[Any], neighbourhood: dict[str, Any]
) -> None:
    name = conn.execute("select pgrag.tenant_index_name('victim')").fetchone()[0]
    before = conn.execute(
        "select idx_scan from pg_stat_user_indexes where indexrelname = %s", (name,)
    ).fetchone()[0]
    victim_search(db, neighbourhood["queries"][:3])
    after = before
    for _ in range(50):  # the request's backend flushes its statistics as it exits
        with connect(db) as fresh:
            after = fresh.execute(
                "select idx_scan from pg_stat_user_indexes where indexrelname = %s", (name,)
            ).fetchone()[0]
        if after >= before + 3:
            break
        time.sleep(0.1)
    assert after >= before + 3


def walk_function(conn: psycopg.Connection[Any], tenant: str) -> str | None:
    """The name of ``tenant``'s walk function (pgrag.make_own_graph_walk), when it exists."""
    row = conn.execute(
        "select to_regproc('pgrag.' || pgrag.own_graph_walk_name(%s))::text", (tenant,)
    ).fetchone()
    return None if row is None else row[0]


def test_an_isolated_tenants_walk_function_returns_what_the_walk_planned_per_call_returns(
    db: str, conn: psycopg.Connection[Any], neighbourhood: dict[str, Any]
) -> None:
    # The function keeps its plan for the session; without it (Citus, or a graph made by
    # hand) the arm plans the same statement at each call. Both must answer alike, the short
    # walks included (a 3,000-row tenant, k = 10).
    queries = neighbourhood["queries"]
    name = walk_function(conn, "victim")
    assert name is not None
    with_function = victim_search(db, queries)
    conn.execute(f"drop function {name}")
    conn.commit()
    assert walk_function(conn, "victim") is None
    assert victim_search(db, queries) == with_function
    assert all(len(rows) == K for rows in with_function)


def test_every_migrate_makes_and_grants_an_isolated_tenants_walk_function_until_it_is_shared(
    db: str, conn: psycopg.Connection[Any], neighbourhood: dict[str, Any]
) -> None:
    from pgrag.install.migrator import Migrator

    name = psycopg.conninfo.conninfo_to_dict(db)["dbname"]
    conn.execute(f'alter database "{name}" set track_functions = pl')
    # A graph made before walk functions existed: the next migrate of the idempotent tier
    # makes its function, and grants it after revoking every function's grants.
    conn.execute(f"drop function {walk_function(conn, 'victim')}")
    conn.execute("update pgrag.schema_migrations set sha256 = 'older' where kind = 'idempotent'")
    conn.commit()
    Migrator(db).migrate()
    walk = walk_function(conn, "victim")
    assert walk is not None
    victim_search(db, neighbourhood["queries"][:3])  # as authenticated, through RLS
    calls = 0
    for _ in range(50):  # the request's backend flushes its statistics as it exits
        with connect(db) as fresh:
            row = fresh.execute(
                "select calls from pg_stat_user_functions where funcid = %s::regproc", (walk,)
            ).fetchone()
        calls = row[0] if row else 0
        if calls >= 3:
            break
        time.sleep(0.1)
    assert calls >= 3
    assert conn.execute("select pgrag.share_tenant('victim')").fetchone() == (True,)
    assert walk_function(conn, "victim") is None


def rows_read(
    conn: psycopg.Connection[Any], tables: tuple[str, ...] = ("pgrag.chunks", "pgrag.documents")
) -> int:
    """Rows and index entries this transaction has read from ``tables`` and their indexes (the
    backend's own counters, as the owner)."""
    row = conn.execute(
        "select sum(pg_stat_get_xact_tuples_returned(c.oid)"
        " + pg_stat_get_xact_tuples_fetched(c.oid))"
        " from pg_class c left join pg_index i on i.indexrelid = c.oid"
        " where c.oid = any(%(t)s::regclass[]) or i.indrelid = any(%(t)s::regclass[])",
        {"t": list(tables)},
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def crowd_the_server(conn: psycopg.Connection[Any], documents_per_small_tenant: int) -> None:
    """Tenant 'big' (400 ready documents of 5 chunks) beside 300 small tenants, each with
    ``documents_per_small_tenant`` documents of one chunk; analyzed, as the owner."""
    conn.execute(
        "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status)"
        " select 'big', 'doc ' || d, 'text', 'big://' || d, 'ready' from generate_series(1, 400) d"
    )
    conn.execute(
        "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, content_sha256)"
        " select 'big', d.id, i, 'note ' || i || ' of ' || d.title || ' about inverter '"
        "        || (array['faults', 'wiring', 'cooling', 'firmware'])[1 + (d.id + i) % 4],"
        "        md5(d.id || ':' || i)"
        " from pgrag.documents d, generate_series(0, 4) i where d.tenant_id = 'big'"
    )
    conn.execute(
        "with d as (insert into pgrag.documents (tenant_id, title, source_type, source_uri, status)"
        " select 's' || t, 'small', 'text', 'small://' || t || '/' || n, 'ready'"
        " from generate_series(1, 300) t, generate_series(1, %s) n returning tenant_id, id)"
        " insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, content_sha256)"
        " select d.tenant_id, d.id, 0, 'inverter cooling', md5(d.tenant_id || d.id) from d",
        (documents_per_small_tenant,),
    )
    conn.execute("analyze pgrag.chunks")
    conn.execute("analyze pgrag.documents")
    conn.commit()


def rows_read_per_call(
    conn: psycopg.Connection[Any],
    calls: dict[str, tuple[str, str, tuple[Any, ...]]],
    tenant: str = "big",
    tables: tuple[str, ...] = ("pgrag.chunks", "pgrag.documents"),
) -> dict[str, list[int]]:
    """Each call (role, statement, parameters) as ``tenant`` seven times in one session, past
    the fifth call where PostgreSQL's default plan cache mode may switch to a generic plan; the
    rows and index entries each call read from ``tables`` (its transaction rolled back). Each
    call returns a row."""
    read: dict[str, list[int]] = {name: [] for name in calls}
    for _ in range(7):
        for name, (role, statement, params) in calls.items():
            with conn.transaction(force_rollback=True):
                before = rows_read(conn, tables)
                set_request_tenant(conn, tenant)
                conn.execute(sql.SQL("set local role {}").format(sql.Identifier(role)))
                assert conn.execute(statement, params).fetchall(), name
                conn.execute("reset role")
                read[name].append(rows_read(conn, tables) - before)
    return read


def test_many_small_tenants_leave_a_large_tenants_kept_plans_reading_by_key(
    db: str, conn: psycopg.Connection[Any], pg_admin_dsn: str
) -> None:
    # With 300 tenants on the server the planner takes a tenant for an average one (a few
    # rows). A search keeps generic plans for the session (each function's plan cache mode),
    # which must still read a few hits' chunks and documents by key, not every row of a large
    # tenant (as a hash join of its 2,000 chunks did for chunk_windows' ten hits).
    ensure_authenticator(pg_admin_dsn)
    crowd_the_server(conn, 1)
    hits = [
        r[0]
        for r in conn.execute(
            "select id from pgrag.chunks where tenant_id = 'big' order by id limit 10"
        )
    ]
    read = rows_read_per_call(
        conn,
        {
            "keyword_search": (
                "authenticated",
                "select * from public.keyword_search('inverter firmware', 10)",
                (),
            ),
            "chunk_windows": (
                "authenticated",
                "select * from public.chunk_windows(%s, 1)",
                (hits,),
            ),
        },
    )
    # ten hits, their documents and neighbours: a few hundred rows and index entries at most,
    # never the tenant's 2,400 rows (4,200 read with a plain join in chunk_windows' lookup)
    assert max(read["chunk_windows"]) < 1000, read
    assert max(read["keyword_search"]) < 1000, read


def test_a_tenants_keyword_search_reads_the_postings_of_its_query_words_alone(
    db: str, conn: psycopg.Connection[Any], pg_admin_dsn: str
) -> None:
    # Row-level security adds its own condition on the tenant, whose value the planner does
    # not know: it takes a tenant's postings for a few hundredth of what they are, and a plain
    # join read all of them, then kept those of the query's words. Each word's postings are
    # read by key instead (fenced subqueries), whatever the estimate.
    ensure_authenticator(pg_admin_dsn)
    crowd_the_server(conn, 1)
    # 'mid': 400 chunks of 20 words drawn from 50
    words = [f"word{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(50)]
    rng = np.random.default_rng(11)
    texts = [" ".join(rng.choice(words, 20)) for _ in range(400)]
    conn.execute(
        "with d as (insert into pgrag.documents (tenant_id, title, source_type, source_uri,"
        " status) values ('mid', 'mid', 'text', 'mid://1', 'ready') returning id)"
        " insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, content_sha256)"
        " select 'mid', d.id, x.n, x.t, md5(x.t) from d,"
        " unnest(%s::text[]) with ordinality as x(t, n)",
        (texts,),
    )
    conn.execute("analyze pgrag.bm25_postings")
    conn.commit()
    (postings,) = conn.execute(
        "select count(*) from pgrag.bm25_postings where tenant_id = 'mid'"
    ).fetchone() or (0,)
    read = rows_read_per_call(
        conn,
        {
            "keyword_search": (
                "authenticated",
                "select * from public.keyword_search(%s, 10)",
                (" ".join(words[:6]),),
            ),
        },
        tenant="mid",
        tables=("pgrag.bm25_postings",),
    )
    # the postings of six words of fifty (about an eighth), each read once from the index
    assert max(read["keyword_search"]) < postings / 2, (postings, read)


def test_a_small_tenants_exact_vector_search_keeps_its_plan_and_reads_its_own_rows(
    db: str, conn: psycopg.Connection[Any], pg_admin_dsn: str
) -> None:
    # A small tenant's vector search scans its rows exactly, in a plan kept for the session
    # (planned at every call, it paid for every index on pgrag.chunks). A kept plan takes the
    # tenant for an average one: beside a single large tenant, half the table, which a
    # sequential scan would read for every search of the small one.
    ensure_authenticator(pg_admin_dsn)
    conn.execute(
        "with d as (insert into pgrag.documents (tenant_id, title, source_type, source_uri,"
        " status) select 'large', 'doc', 'text', 'large://' || n, 'ready'"
        " from generate_series(1, 2000) n returning id)"
        " insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, content_sha256)"
        " select 'large', d.id, 0, 'note', md5(d.id::text) from d"
    )
    rng = np.random.default_rng(5)
    add_document(conn, "small", unit(rng.normal(0, 1, (20, DIMS))), public=False)
    conn.execute("analyze pgrag.chunks")
    conn.execute("analyze pgrag.documents")
    conn.commit()
    query = unit(rng.normal(0, 1, DIMS))
    read = rows_read_per_call(
        conn,
        {
            "vector_search": (
                "authenticated",
                "select * from public.vector_search(%s, 10)",
                (query,),
            )
        },
        tenant="small",
    )
    # its document and 20 chunks, by key (and the ten hits' rows): never the 2,000 documents
    # and chunks of 'large'
    assert max(read["vector_search"]) < 200, read


def test_many_small_tenants_leave_a_large_tenants_batch_writes_reading_by_key(
    db: str, conn: psycopg.Connection[Any], pg_admin_dsn: str
) -> None:
    # The loader's and the worker's batch functions join a batch of document ids to the rows:
    # under PostgreSQL's default plan cache mode their generic plans (from the sixth call of a
    # session) hashed every document of the large tenant to update ten. (delete_documents read
    # them all on every call: one condition ORed ids, URIs and URI patterns.)
    ensure_authenticator(pg_admin_dsn)
    crowd_the_server(conn, 20)
    ids = [
        r[0]
        for r in conn.execute(
            "select id from pgrag.documents where tenant_id = 'big' order by id limit 10"
        )
    ]
    read = rows_read_per_call(
        conn,
        {
            "fail_documents": (
                "service_role",
                "select pgrag.fail_documents(%s, array_fill('failed'::text, array[10]))",
                (ids,),
            ),
            "relabel_documents": (
                "service_role",
                "select pgrag.relabel_documents(%s, array_fill('{}'::jsonb, array[10]))",
                (ids,),
            ),
            "document_status": (
                "authenticated",
                "select * from public.document_status(%s)",
                (ids,),
            ),
            "delete_documents": (
                "service_role",
                "select * from pgrag.delete_documents(%s, dry_run => true)",
                (ids,),
            ),
        },
    )
    # ten documents by key: tens of rows and index entries (170 with delete_documents' chunk
    # counts), never the tenant's 400 documents (858 to 1,070 read here before)
    assert all(max(n) < 300 for n in read.values()), read


def test_ingest_gives_a_tenant_past_the_exact_threshold_its_own_graph(
    db: str, local_embedder: Any, tmp_path: Any
) -> None:
    from pgrag.ingest import ingest_paths

    name = psycopg.conninfo.conninfo_to_dict(db)["dbname"]
    with connect(db, autocommit=True) as admin:
        admin.execute(f'alter database "{name}" set pgrag.exact_search_max_rows = 3')
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"note{i}.md").write_text(
            f"# Note {i}\n\n" + " ".join(f"Paragraph {j} of note {i}." for j in range(200))
        )

    first = ingest_paths(db, [str(docs)], embedder=local_embedder, tenant="acme")
    again = ingest_paths(db, [str(docs)], embedder=local_embedder, tenant="acme")

    with connect(db) as conn:
        own = conn.execute(
            "select pg_catalog.to_regclass('pgrag.' || pgrag.tenant_index_name('acme')) is not null"
        ).fetchone()
        chunks = conn.execute(
            "select count(*) from pgrag.chunks where tenant_id = 'acme'"
        ).fetchone()
    assert chunks is not None and chunks[0] > 3
    assert first.tenant_isolated and own == (True,)
    assert not again.tenant_isolated  # isolated once


def test_ingest_leaves_a_tenant_under_the_threshold_on_the_exact_path(
    db: str, local_embedder: Any, tmp_path: Any
) -> None:
    from pgrag.ingest import ingest_paths

    (tmp_path / "one.md").write_text("# One\n\nA single short note.")
    summary = ingest_paths(db, [str(tmp_path)], embedder=local_embedder, tenant="acme")
    with connect(db) as conn:
        own = conn.execute(
            "select pg_catalog.to_regclass('pgrag.' || pgrag.tenant_index_name('acme'))"
        ).fetchone()
    assert not summary.tenant_isolated and own == (None,)


def test_anon_exact_search_over_a_large_public_document_writes_no_temp_files(
    db: str, conn: psycopg.Connection[Any]
) -> None:
    # The exact path (taken for a document_ids filter) once materialized every visible row
    # before sorting: past work_mem that spilled to temporary files. A streamed top-N sort
    # keeps memory bounded by match_count. work_mem is lowered so 5,000 rows would spill.
    (doc,) = conn.execute(
        "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status, "
        "is_public) values ('acme', 'big', 'text', 'big.txt', 'ready', true) returning id"
    ).fetchone()
    conn.execute(
        "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, embedding, "
        "content_sha256) select 'acme', %s, i, 'row ' || i, "
        "(select array_agg(random())::real[] from generate_series(1, 384) where i > 0)::vector, "
        "md5(i::text) from generate_series(1, 5000) as i",
        (doc,),
    )
    conn.commit()
    query = np.random.default_rng(3).random(384)
    conn.execute("set temp_file_limit = '64kB'")
    conn.execute("set work_mem = '64kB'")
    with conn.transaction():
        conn.execute("set local role anon")
        rows = conn.execute(
            "select chunk_id from public.vector_search(%s, 10, document_ids => array[%s])",
            (query, doc),
        ).fetchall()
    assert len(rows) == 10
