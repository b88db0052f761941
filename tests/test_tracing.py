"""OpenTelemetry tracing of ingest, worker, search and ask: spans, parentage, attributes,
what they never carry, the configuration rule, and a real OTLP/HTTP export.

Spans are collected with the SDK's in-memory exporter; the database and the model are real;
only the chat endpoint is the local OpenAI-compatible server fixture, and the OTLP collector a
loopback HTTP server (pytest-httpserver) whose requests are decoded with opentelemetry-proto.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "opentelemetry.sdk.trace", reason="opentelemetry-sdk is not installed (the otel extra)"
)

from click.testing import CliRunner
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from plugins.queue import cli_env, pgrag_command, submit_texts
from plugins.rerank import RerankApi
from plugins.sample_files import make_corrupt_pdf
from plugins.search_corpus import CORPUS, seed_corpus
from pytest_httpserver import HTTPServer

from pgrag import tracing
from pgrag.cli import main
from pgrag.db import connect
from pgrag.search import SearchOptions, run_search

QUERY = "Which port does the widget service listen on?"
GUIDE = "# Release guide\n\nThe release train leaves every second Tuesday from platform nine.\n"
NOTES = "# Kitchen notes\n\nThe walrus recipe needs three pounds of saffron and a quiet oven.\n"


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., InMemorySpanExporter]]:
    """``traced(content=False)`` installs a provider exporting to memory (with the content
    opt-in when asked); removed after the test."""

    def install(content: bool = False) -> InMemorySpanExporter:
        if content:
            monkeypatch.setenv(tracing.CONTENT_ENV, "1")
        else:
            monkeypatch.delenv(tracing.CONTENT_ENV, raising=False)
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracing.install(provider)
        return exporter

    yield install
    tracing.install(None)


@pytest.fixture
def corpus(db: str, local_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("PGRAG_TENANT", raising=False)
    seed_corpus(db, local_embedder)
    return db


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(exporter.get_finished_spans())


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    if span.parent is None:
        return None
    by_id = {s.context.span_id: s for s in spans}
    return by_id[span.parent.span_id]


def stage_of(span: ReadableSpan, spans: list[ReadableSpan]) -> str:
    parent = parent_of(span, spans)
    assert parent is not None, span.name
    return parent.name


def roots(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is None]


def sql_spans(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if (s.attributes or {}).get("db.system.name") == "postgresql"]


def all_text(spans: list[ReadableSpan]) -> str:
    """Every attribute value and event attribute value of ``spans``, as one text."""
    values: list[str] = []
    for s in spans:
        values.extend(str(v) for v in (s.attributes or {}).values())
        for event in s.events:
            values.extend(str(v) for v in (event.attributes or {}).values())
        values.append(s.status.description or "")
    return "\n".join(values)


def assert_one_trace(spans: list[ReadableSpan], root_name: str) -> ReadableSpan:
    (root,) = roots(spans)
    assert root.name == root_name
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    return root


# -- ingest and worker ---------------------------------------------------------------------------


def test_ingest_spans_each_stage_under_one_root(
    db: str, tmp_path: Path, traced: Callable[..., InMemorySpanExporter]
) -> None:
    exporter = traced()
    (tmp_path / "guide.md").write_text(GUIDE)
    (tmp_path / "notes.md").write_text(NOTES)
    result = cli("--dsn", db, "ingest", str(tmp_path), "--tenant", "acme", "--no-progress")
    assert result.exit_code == 0, result.output

    spans = finished(exporter)
    root = assert_one_trace(spans, "pgrag ingest")
    assert root.attributes is not None and root.attributes["pgrag.tenant"] == "acme"
    assert root.attributes["pgrag.ingest.documents_new"] == 2
    assert root.attributes["pgrag.ingest.chunks_embedded"] == 2
    extracts = [s for s in spans if s.name == "extract"]
    chunks = [s for s in spans if s.name == "chunk"]
    assert len(extracts) == 2 and len(chunks) == 2
    assert {stage_of(s, spans) for s in extracts + chunks} == {"pgrag ingest"}
    uris = {str((s.attributes or {})["pgrag.document.uri"]) for s in chunks}
    assert uris == {str((tmp_path / n).resolve()) for n in ("guide.md", "notes.md")}
    assert all(isinstance((s.attributes or {})["pgrag.document.id"], int) for s in chunks)

    embed = one(spans, "embed")
    assert stage_of(embed, spans) == "pgrag ingest"
    attrs = embed.attributes or {}
    assert attrs["gen_ai.request.model"] and attrs["gen_ai.provider.name"] == "local"
    assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["pgrag.batch.size"] == 2
    loads = [s for s in spans if s.name == "load"]
    assert loads and {stage_of(s, spans) for s in loads} == {"pgrag ingest"}
    assert {(s.attributes or {})["pgrag.tenant"] for s in [*loads, embed]} == {"acme"}
    functions = {
        (s.attributes or {}).get("db.stored_procedure.name"): stage_of(s, spans)
        for s in sql_spans(spans)
    }
    assert functions["record_usage"] == "load"
    assert "copy" not in {f for f in functions if f}  # COPY is a statement, not a function
    assert any(s.name == "COPY pg_temp.pgrag_stage" for s in sql_spans(spans))
    assert "walrus" not in all_text(spans) and "release train" not in all_text(spans)


def test_a_document_that_fails_alone_marks_its_span_and_the_run_goes_on(
    db: str, tmp_path: Path, traced: Callable[..., InMemorySpanExporter]
) -> None:
    exporter = traced()
    (tmp_path / "guide.md").write_text(GUIDE)
    broken = make_corrupt_pdf(tmp_path / "broken.pdf")
    result = cli("--dsn", db, "ingest", str(tmp_path), "--no-progress")
    assert result.exit_code == 1  # one document failed

    spans = finished(exporter)
    assert_one_trace(spans, "pgrag ingest")
    failed = [
        s for s in spans if s.status.status_code == StatusCode.ERROR and s.name != "pgrag ingest"
    ]
    assert [s.name for s in failed] == ["extract"]
    assert (failed[0].attributes or {})["pgrag.document.uri"] == str(broken)
    assert str(broken.resolve()) in (failed[0].status.description or "")
    assert one(spans, "chunk").status.status_code == StatusCode.UNSET
    assert (one(spans, "embed").attributes or {})["pgrag.batch.size"] == 1


def test_a_worker_job_is_one_trace_with_its_stages(
    db: str, traced: Callable[..., InMemorySpanExporter]
) -> None:
    (doc_id,) = submit_texts(db, "acme", [("notes/kitchen.md", NOTES)], "markdown")
    exporter = traced()
    result = cli("--dsn", db, "worker", "--once")
    assert result.exit_code == 0, result.output

    spans = finished(exporter)
    root = assert_one_trace(spans, "pgrag worker job")
    attrs = root.attributes or {}
    assert attrs["pgrag.tenant"] == "acme" and tuple(attrs["pgrag.document.ids"]) == (doc_id,)
    for name in ("extract", "chunk", "embed"):
        assert stage_of(one(spans, name), spans) == "pgrag worker job"
    assert (one(spans, "extract").attributes or {})["pgrag.document.id"] == doc_id
    complete = [
        s
        for s in sql_spans(spans)
        if (s.attributes or {}).get("db.stored_procedure.name") == "complete_documents"
    ]
    assert complete and {stage_of(s, spans) for s in complete} == {"load"}
    assert "walrus" not in all_text(spans)


# -- search and ask ------------------------------------------------------------------------------


def test_search_spans_name_the_sql_function_and_carry_no_text(
    corpus: str, traced: Callable[..., InMemorySpanExporter]
) -> None:
    exporter = traced()
    result = cli("--dsn", corpus, "search", QUERY, "-k", "3")
    assert result.exit_code == 0, result.output

    spans = finished(exporter)
    root = assert_one_trace(spans, "pgrag search")
    assert (root.attributes or {})["pgrag.tenant"] == "default"
    embed = one(spans, "embed")
    assert stage_of(embed, spans) == "pgrag search"
    assert (embed.attributes or {})["gen_ai.usage.input_tokens"] > 0
    assert (embed.attributes or {})["gen_ai.request.model"]
    call = one(spans, "SELECT public.hybrid_search")
    attrs = call.attributes or {}
    assert attrs["db.stored_procedure.name"] == "hybrid_search"
    assert attrs["db.system.name"] == "postgresql" and attrs["db.operation.name"] == "SELECT"
    assert attrs["db.response.returned_rows"] == 3
    assert "db.query.text" not in attrs
    assert stage_of(call, spans) == "retrieve"
    text = all_text(spans)
    assert QUERY not in text and "widget service" not in text.lower()
    for *_, chunks in CORPUS:
        assert not any(chunk in text for chunk in chunks)


def test_a_rerank_is_a_stage_of_the_search(
    corpus: str, rerank_api: RerankApi, traced: Callable[..., InMemorySpanExporter]
) -> None:
    exporter = traced()
    result = cli("--dsn", corpus, "search", QUERY, "-k", "2", "--rerank", rerank_api.url)
    assert result.exit_code == 0, result.output

    spans = finished(exporter)
    assert_one_trace(spans, "pgrag search")
    rerank = one(spans, "rerank")
    assert stage_of(rerank, spans) == "pgrag search"
    attrs = rerank.attributes or {}
    assert attrs["pgrag.rerank.model"] and attrs["pgrag.candidates"] >= 2
    assert QUERY not in all_text(spans)


def test_a_search_outside_a_traced_command_makes_no_orphan_spans(
    corpus: str, traced: Callable[..., InMemorySpanExporter]
) -> None:
    exporter = traced()
    with connect(corpus) as conn:
        run = run_search(conn, QUERY, SearchOptions(limit=2), tenant="default")
    assert run.hits
    assert finished(exporter) == []


def test_the_content_opt_in_records_the_query(
    corpus: str, traced: Callable[..., InMemorySpanExporter]
) -> None:
    exporter = traced(content=True)
    result = cli("--dsn", corpus, "search", QUERY, "-k", "3")
    assert result.exit_code == 0, result.output

    spans = finished(exporter)
    assert (one(spans, "pgrag search").attributes or {})["pgrag.query.text"] == QUERY
    call = one(spans, "SELECT public.hybrid_search").attributes or {}
    assert call["db.query.parameter.query_text"] == QUERY
    assert str(call["db.query.parameter.query_embedding"]).startswith("<")  # its size only
    assert "hybrid_search" in str(call["db.query.text"])


def test_ask_traces_the_chat_call_with_its_usage(
    corpus: str, openai_chat: Any, traced: Callable[..., InMemorySpanExporter]
) -> None:
    reply = "The widget service listens on port 8443 [Source 1]."
    openai_chat(reply)
    exporter = traced()
    result = cli("--dsn", corpus, "ask", QUERY)
    assert result.exit_code == 0, result.output

    spans = finished(exporter)
    assert_one_trace(spans, "pgrag ask")
    chat = one(spans, "chat")
    assert stage_of(chat, spans) == "pgrag ask"
    attrs = chat.attributes or {}
    assert attrs["gen_ai.request.model"] == "gpt-4o-mini"
    assert attrs["gen_ai.usage.input_tokens"] == 100  # the fake's first call
    assert attrs["gen_ai.usage.output_tokens"] == len(reply.split())
    call = one(spans, "SELECT public.build_context")
    assert (call.attributes or {})["db.stored_procedure.name"] == "build_context"
    assert stage_of(call, spans) == "retrieve"
    text = all_text(spans)
    assert QUERY not in text and "8443" not in text


def test_a_failed_command_records_its_one_line_error(
    empty_db: str, traced: Callable[..., InMemorySpanExporter]
) -> None:
    exporter = traced()
    result = CliRunner().invoke(main, ["--dsn", empty_db, "search", "quota", "--mode", "keyword"])
    assert result.exit_code == 1

    spans = finished(exporter)
    root = assert_one_trace(spans, "pgrag search")
    message = result.output.strip().removeprefix("Error: ")
    assert root.status.status_code == StatusCode.ERROR
    assert root.status.description == message
    (event,) = [e for e in root.events if e.name == "exception"]
    assert (event.attributes or {})["exception.message"] == message
    failed = [s for s in sql_spans(spans) if s.status.status_code == StatusCode.ERROR]
    assert failed and (failed[0].attributes or {})["db.response.status_code"] == "3F000"


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "exporter"),
    [
        ({}, None),
        ({"OTEL_SERVICE_NAME": "rag"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
    ],
)
def test_tracing_is_on_only_when_the_otel_variables_ask(
    environ: dict[str, str], exporter: str | None
) -> None:
    assert tracing.wanted(environ) == exporter


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )


def without_otel(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("OTEL_")}


def test_without_configuration_nothing_of_opentelemetry_is_loaded(corpus: str) -> None:
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from pgrag.cli import main\n"
        "from pgrag import tracing\n"
        "from pgrag.db import connect\n"
        f"r = CliRunner().invoke(main, ['search', {QUERY!r}, '-k', '1'])\n"
        "assert r.exit_code == 0, r.output\n"
        "import os\n"
        "conn = connect(os.environ['PGRAG_DSN'])\n"
        "print(tracing.enabled(), conn.cursor_factory.__name__,"
        " any(m.startswith('opentelemetry') for m in sys.modules))\n"
    )
    done = run_python(code, without_otel(cli_env(corpus)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "Cursor", "False"]


def test_configured_tracing_without_the_extra_is_one_line_and_the_command_runs(
    corpus: str,
) -> None:
    # The import system refuses every opentelemetry module, as when the extra is missing.
    code = (
        "import sys\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "from pgrag.cli import main\n"
        "main(['search', 'quota', '--mode', 'keyword', '-k', '1'])\n"
    )
    env = without_otel(cli_env(corpus)) | {"OTEL_TRACES_EXPORTER": "otlp"}
    done = run_python(code, env)
    assert done.returncode == 0, done.stderr
    assert "ERR-4471" in done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("pgrag: tracing off: tracing is configured")
    assert "pgrag-sql[otel]" in line


def test_an_otlp_export_reaches_the_collector(corpus: str, httpserver: HTTPServer) -> None:
    pytest.importorskip(
        "opentelemetry.exporter.otlp.proto.http",
        reason="the OTLP/HTTP exporter is not installed (the otel extra)",
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    httpserver.expect_request("/v1/traces", method="POST").respond_with_data(
        b"", status=200, content_type="application/x-protobuf"
    )
    endpoint = httpserver.url_for("/").rstrip("/")
    env = without_otel(cli_env(corpus)) | {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    done = subprocess.run(
        [pgrag_command(), "search", QUERY, "-k", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""

    spans: dict[str, Any] = {}
    services = set()
    for request, _ in httpserver.log:
        assert request.headers["Content-Type"] == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(request.get_data())
        for resource_spans in export.resource_spans:
            for attr in resource_spans.resource.attributes:
                if attr.key == "service.name":
                    services.add(attr.value.string_value)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans[span.name] = span
    assert services == {"pgrag"}
    root, call = spans["pgrag search"], spans["SELECT public.hybrid_search"]
    assert root.parent_span_id == b"" and call.trace_id == root.trace_id
    assert spans["retrieve"].parent_span_id == root.span_id
    assert call.parent_span_id == spans["retrieve"].span_id
    names = {a.key: a.value.string_value for a in call.attributes}
    assert names["db.stored_procedure.name"] == "hybrid_search"


def test_connections_get_the_traced_cursor_only_while_tracing(
    db: str, traced: Callable[..., InMemorySpanExporter]
) -> None:
    with connect(db) as plain:
        assert plain.cursor_factory.__name__ == "Cursor"
    traced()
    with connect(db) as conn:
        assert conn.cursor_factory is tracing.TracedCursor
