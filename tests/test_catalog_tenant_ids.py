"""The catalog names no isolated tenant's id to an API role (docs/security.md, "Catalog metadata
an API role can read").

Every role reads PostgreSQL's catalog. An isolated tenant's graph (pgrag.isolate_tenant) is a
partial index whose predicate, and the body of the function walking it, name the tenant by its
key (``hashtextextended(tenant_id, 0)``), never by its id; the walk still runs on the tenant's
own graph. A graph an earlier version made names the id in its predicate: it keeps working until
``pgrag.isolate_tenants`` builds it again by key.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.tenancy import claims_for, ensure_authenticator, request

from pgrag.db import set_request_tenant

DIMS = 384
SECRET = "tenant-secret-acme"
OTHER = "tenant-secret-globex"
ROWS = 300

# Everything of the schema an API role reads in the catalog that could hold a tenant id.
CATALOG_SQL = """
select 'pg_class.relname', c.relname::text
from pg_class as c where c.relnamespace = 'pgrag'::regnamespace
union all
select 'pg_indexes.indexdef', i.indexdef from pg_indexes as i where i.schemaname = 'pgrag'
union all
select 'pg_get_indexdef', pg_get_indexdef(x.indexrelid)
from pg_index as x join pg_class as t on t.oid = x.indrelid
where t.relnamespace = 'pgrag'::regnamespace
union all
select 'pg_index.indpred', pg_get_expr(x.indpred, x.indrelid)
from pg_index as x join pg_class as t on t.oid = x.indrelid
where t.relnamespace = 'pgrag'::regnamespace and x.indpred is not null
union all
select 'pg_proc.proname', p.proname::text from pg_proc as p
where p.pronamespace = 'pgrag'::regnamespace
union all
select 'pg_proc.prosrc', p.prosrc from pg_proc as p where p.pronamespace = 'pgrag'::regnamespace
union all
select 'pg_get_functiondef', pg_get_functiondef(p.oid) from pg_proc as p
where p.pronamespace = 'pgrag'::regnamespace and p.prokind = 'f'
union all
select 'pg_description', d.description from pg_description as d
union all
select 'pg_stats', s.most_common_vals::text from pg_stats as s where s.schemaname = 'pgrag'
"""


def unit(vectors: np.ndarray) -> np.ndarray:
    return (vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)).astype(np.float32)


def add_tenant(conn: psycopg.Connection[Any], tenant: str, vectors: np.ndarray) -> None:
    """One ready document of ``tenant`` with a chunk per vector (binary COPY, as the owner)."""
    row = conn.execute(
        "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status) "
        "values (%s, 'doc', 'text', gen_random_uuid()::text, 'ready') returning id",
        (tenant,),
    ).fetchone()
    assert row is not None
    with conn.cursor().copy(
        "copy pgrag.chunks (tenant_id, document_id, chunk_index, content, embedding, "
        "content_sha256) from stdin (format binary)"
    ) as copy:
        copy.set_types(["text", "int8", "int4", "text", "vector", "text"])
        for i, v in enumerate(vectors):
            copy.write_row((tenant, row[0], i, f"note {i}", v, f"{i:064x}"))


@pytest.fixture
def tenants(db: str, conn: psycopg.Connection[Any], pg_admin_dsn: str) -> np.random.Generator:
    """Two tenants of ROWS chunks each, searched by HNSW (above the exact path's threshold)."""
    ensure_authenticator(pg_admin_dsn)
    rng = np.random.default_rng(5)
    for tenant in (SECRET, OTHER):
        add_tenant(conn, tenant, unit(rng.normal(0, 1, (ROWS, DIMS))))
    name = psycopg.conninfo.conninfo_to_dict(db)["dbname"]
    conn.execute(f'alter database "{name}" set pgrag.exact_search_max_rows = 100')
    conn.execute("analyze pgrag.chunks")
    conn.commit()
    return rng


def catalog_as(db: str, role: str) -> list[tuple[str, str]]:
    claims = claims_for(OTHER) if role == "authenticated" else None
    with request(db, role, claims) as c:
        return [(w, v) for w, v in c.execute(CATALOG_SQL).fetchall() if v is not None]


def graph_plans(
    conn: psycopg.Connection[Any], tenant: str, q: np.ndarray
) -> tuple[list[Any], list[str]]:
    """``tenant``'s vector_search as authenticated, and the HNSW indexes its statements walked
    (auto_explain of every statement run inside pgrag's functions)."""
    notices: list[str] = []
    with conn.transaction():
        conn.execute("load 'auto_explain'")
        for setting, value in {
            "auto_explain.log_nested_statements": "on",
            "auto_explain.log_level": "notice",
            "auto_explain.log_format": "json",
            "pgrag.exact_search_max_rows": "100",
        }.items():
            conn.execute("select set_config(%s, %s, true)", (setting, value))
        set_request_tenant(conn, tenant)
        conn.execute("set local auto_explain.log_min_duration = 0")
        conn.execute("set local role authenticated")
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        rows = conn.execute("select chunk_id from public.vector_search(%s, 10)", (q,)).fetchall()
        conn.execute("reset role")
        conn.execute("set local auto_explain.log_min_duration = -1")
    indexes: list[str] = []
    for notice in notices:
        if "plan:" in notice:
            stack = [json.loads(notice.split("plan:", 1)[1])["Plan"]]
            while stack:
                node = stack.pop()
                stack.extend(node.get("Plans", []))
                if node.get("Relation Name") == "chunks" and "hnsw" in node.get("Index Name", ""):
                    indexes.append(node["Index Name"])
    return rows, indexes


def exact_top(conn: psycopg.Connection[Any], tenant: str, q: np.ndarray) -> list[int]:
    rows = conn.execute(
        "select id from (select id, embedding <=> %s as d from pgrag.chunks "
        "where tenant_id = %s offset 0) s order by d, id limit 10",
        (q, tenant),
    ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.parametrize("role", ["anon", "authenticated"])
def test_no_catalog_column_an_api_role_reads_names_an_isolated_tenant(
    db: str, conn: psycopg.Connection[Any], tenants: np.random.Generator, role: str
) -> None:
    for tenant in (SECRET, OTHER):
        conn.execute("select pgrag.isolate_tenant(%s)", (tenant,))
    conn.commit()
    seen = catalog_as(db, role)
    # The graphs and their walks are there, and readable: by their key.
    index = conn.execute("select pgrag.tenant_index_name(%s)", (SECRET,)).fetchone()[0]
    (indexdef,) = [v for w, v in seen if w == "pg_indexes.indexdef" and index in v]
    key = conn.execute("select hashtextextended(%s, 0)", (SECRET,)).fetchone()[0]
    assert "hashtextextended(tenant_id, " in indexdef and f"'{key}'::bigint" in indexdef
    walks = [v for w, v in seen if w == "pg_proc.proname" and v.startswith("own_graph_walk_t_")]
    assert len(walks) == 2
    assert [(w, v) for w, v in seen if "secret" in v] == []


def test_a_tenants_search_walks_its_own_graph_named_by_key(
    conn: psycopg.Connection[Any], tenants: np.random.Generator
) -> None:
    conn.execute("select pgrag.isolate_tenant(%s)", (SECRET,))
    conn.commit()
    index = conn.execute("select pgrag.tenant_index_name(%s)", (SECRET,)).fetchone()[0]
    q = unit(tenants.normal(0, 1, DIMS))
    rows, indexes = graph_plans(conn, SECRET, q)
    assert indexes == [index]
    assert [r[0] for r in rows] == exact_top(conn, SECRET, q)


def test_a_graph_an_earlier_version_made_is_walked_until_isolate_tenants_builds_it_by_key(
    db: str, conn: psycopg.Connection[Any], tenants: np.random.Generator
) -> None:
    from pgrag.install.migrator import Migrator

    index = conn.execute("select pgrag.tenant_index_name(%s)", (SECRET,)).fetchone()[0]
    # The graph as earlier versions made it (the tenant id in its predicate), with a storage
    # parameter an operator set; then a migrate of this version.
    conn.execute(
        f"create index {index} on pgrag.chunks using hnsw (embedding vector_cosine_ops) "
        f"with (m = 8) where tenant_id = '{SECRET}' and embedding is not null"
    )
    conn.execute("update pgrag.schema_migrations set sha256 = 'older' where kind = 'idempotent'")
    conn.commit()
    Migrator(db).migrate()
    q = unit(tenants.normal(0, 1, DIMS))
    expected = exact_top(conn, SECRET, q)
    assert conn.execute("select pgrag.own_graph_keyed(%s)", (SECRET,)).fetchone() == (False,)
    rows, indexes = graph_plans(conn, SECRET, q)
    assert indexes == [index] and [r[0] for r in rows] == expected

    # (whatever its size: min_rows leaves out the tenants without a graph)
    built = conn.execute(
        "select tenant_id, index_name::text from pgrag.isolate_tenants(min_rows => 100000)"
    )
    assert built.fetchall() == [(SECRET, f"pgrag.{index}")]
    conn.commit()
    assert conn.execute("select pgrag.own_graph_keyed(%s)", (SECRET,)).fetchone() == (True,)
    assert conn.execute(
        "select reloptions from pg_class where oid = to_regclass('pgrag.' || %s)", (index,)
    ).fetchone() == (["m=8"],)
    rows, indexes = graph_plans(conn, SECRET, q)
    assert indexes == [index] and [r[0] for r in rows] == expected
    assert [(w, v) for w, v in catalog_as(db, "anon") if "secret" in v] == []


def test_an_application_query_stating_the_key_walks_the_tenants_graph(
    conn: psycopg.Connection[Any], tenants: np.random.Generator
) -> None:
    # docs/scaling.md: a query of the application's own reaches the graph through the key.
    conn.execute("select pgrag.isolate_tenant(%s)", (SECRET,))
    index = conn.execute("select pgrag.tenant_index_name(%s)", (SECRET,)).fetchone()[0]
    conn.execute("set enable_sort = off")
    q = unit(tenants.normal(0, 1, DIMS))
    (plan,) = conn.execute(
        "explain (format json) select id from pgrag.chunks where tenant_id = %s"
        " and hashtextextended(tenant_id, 0) = hashtextextended(%s, 0) and embedding is not null"
        " order by embedding <=> %s limit 10",
        (SECRET, SECRET, q),
    ).fetchone()
    assert index in json.dumps(plan)
