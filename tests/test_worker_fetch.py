"""What the worker fetches for a submitted URL: only what the operator allowed (SSRF guard).

A local HTTP server (pytest-httpserver, on 127.0.0.1) plays the outside world; loopback is
refused unless the operator's allow-list says ``allow_private_addresses`` for the prefix, which
these tests do explicitly. The database and the model are real.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from plugins.queue import chunk_signature, documents_by_uri, submit_url
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from pgrag.db import connect
from pgrag.errors import FetchRefused
from pgrag.worker import FetchLimits, QueueWorker, WorkerOptions
from pgrag.worker.fetch import FetchRule, address_refusal, allowed_rule, normalise_url

PAGE = (
    "<html><head><title>Fetched page</title></head>"
    "<body><p>Tides follow the moon.</p></body></html>"
)


def allow(db: str, prefix: str, private: bool) -> None:
    with connect(db) as conn:
        conn.execute(
            "insert into pgrag.fetch_allowlist (url_prefix, allow_private_addresses) "
            "values (%s, %s)",
            (prefix, private),
        )
        conn.commit()


def process(db: str, embedder: Any, **fetch: Any) -> Any:
    options = WorkerOptions(once=True, fetch=FetchLimits(**fetch))
    return QueueWorker(db, options, embedder=embedder).run()


def outcome(db: str, url: str) -> dict[str, Any]:
    return documents_by_uri(db, "acme")[url]


@pytest.fixture
def site(httpserver_ipv4: HTTPServer) -> HTTPServer:
    """The outside world, on 127.0.0.1."""
    httpserver_ipv4.expect_request("/docs/page.html").respond_with_data(
        PAGE, content_type="text/html"
    )
    return httpserver_ipv4


# -- the rules, unit by unit -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("HTTP://Example.COM:80/a/./b/../c", "http://example.com/a/c"),
        ("https://example.com:443", "https://example.com/"),
        ("https://example.com:8443/x/?q=1#frag", "https://example.com:8443/x/?q=1"),
        ("http://[::1]:8080/p", "http://[::1]:8080/p"),
    ],
)
def test_urls_are_normalised_before_matching(url: str, normal: str) -> None:
    assert normalise_url(url) == normal


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:///etc/passwd", "scheme file:// is never fetched"),
        ("gopher://example.com/", "scheme gopher:// is never fetched"),
        ("http://user:secret@example.com/", "user info"),
        ("http://example.com/docs/%2e%2e/admin", "encoded dots"),
        ("http://example.com/docs/..%2fadmin", "encoded dots"),
    ],
)
def test_urls_that_could_escape_a_prefix_are_refused(url: str, reason: str) -> None:
    with pytest.raises(FetchRefused, match=reason):
        normalise_url(url)


def test_a_prefix_matches_at_its_own_boundaries() -> None:
    rules = [FetchRule(normalise_url("https://docs.example.com/public/"))]
    assert allowed_rule(normalise_url("https://docs.example.com/public/a.html"), rules)
    assert allowed_rule(normalise_url("https://docs.example.com/public/x/../b"), rules)
    for url in (
        "https://docs.example.com/private/a.html",
        "https://docs.example.com/public/../private/a.html",
        "https://docs.example.com.evil.net/public/a.html",
        "http://docs.example.com/public/a.html",
        "https://docs.example.com:444/public/a.html",
    ):
        assert allowed_rule(normalise_url(url), rules) is None, url


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("127.0.0.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("::ffff:127.0.0.1", "a loopback address"),
        ("10.1.2.3", "a private or non-global address"),
        ("192.168.0.10", "a private or non-global address"),
        ("100.64.0.1", "a private or non-global address"),
        ("169.254.169.254", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("224.0.0.1", "a multicast address"),
        ("0.0.0.0", "a reserved address"),
        ("240.0.0.1", "a reserved address"),
        ("2002:7f00:1::", "a loopback address"),  # 6to4 around 127.0.0.1
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_non_global_addresses_are_refused(address: str, refused: str | None) -> None:
    assert address_refusal(address) == refused


# -- the worker, against a real server -------------------------------------------------------------


def test_nothing_is_fetched_unless_the_operator_allowed_it(
    db: str, site: HTTPServer, local_embedder: Any
) -> None:
    url = site.url_for("/docs/page.html")
    submit_url(db, "acme", url)

    summary = process(db, local_embedder)

    assert summary.documents_failed == 1
    doc = outcome(db, url)
    assert (doc["status"], doc["queue_state"]) == ("error", "failed")
    assert "not in the operator's list of URLs the worker may fetch" in doc["error"]
    assert site.log == []  # not even connected


def test_loopback_is_refused_even_for_an_allowed_prefix(
    db: str, site: HTTPServer, local_embedder: Any
) -> None:
    url = site.url_for("/docs/page.html")
    allow(db, site.url_for("/docs/"), private=False)
    submit_url(db, "acme", url)

    process(db, local_embedder)

    doc = outcome(db, url)
    assert doc["status"] == "error"
    assert "resolves to 127.0.0.1, a loopback address: refused" in doc["error"]
    assert site.log == []


def test_the_check_is_on_the_resolved_address_not_the_name(
    db: str, site: HTTPServer, local_embedder: Any
) -> None:
    url = f"http://localhost:{site.port}/docs/page.html"  # a name, resolved to loopback
    allow(db, f"http://localhost:{site.port}/docs/", private=False)
    submit_url(db, "acme", url)

    process(db, local_embedder)

    doc = outcome(db, url)
    assert doc["status"] == "error" and "a loopback address: refused" in doc["error"]
    assert site.log == []


def test_an_explicitly_allowed_private_prefix_is_fetched_and_loaded(
    db: str, site: HTTPServer, local_embedder: Any
) -> None:
    url = site.url_for("/docs/page.html")
    allow(db, site.url_for("/docs/"), private=True)
    submit_url(db, "acme", url)

    summary = process(db, local_embedder)

    assert summary.documents_done == 1
    doc = outcome(db, url)
    assert (doc["status"], doc["chunks"]) == ("ready", 1)
    assert [c[2] for c in chunk_signature(db, "acme")] == ["Tides follow the moon."]
    with connect(db) as conn:
        assert conn.execute("select title, source_type from pgrag.documents").fetchone() == (
            "Fetched page",
            "url",
        )


def test_a_redirect_out_of_the_allowed_prefix_is_refused(
    db: str, site: HTTPServer, local_embedder: Any
) -> None:
    site.expect_request("/docs/moved.html").respond_with_response(
        Response("", status=302, headers={"Location": "/private/secret.html"})
    )
    site.expect_request("/private/secret.html").respond_with_data(
        "secret", content_type="text/plain"
    )
    url = site.url_for("/docs/moved.html")
    allow(db, site.url_for("/docs/"), private=True)
    submit_url(db, "acme", url)

    process(db, local_embedder)

    doc = outcome(db, url)
    assert doc["status"] == "error"
    assert "/private/secret.html (redirected from" in doc["error"]
    assert [r.path for r, _ in site.log] == ["/docs/moved.html"]


def test_a_redirect_to_a_link_local_address_is_refused_before_connecting(
    db: str, site: HTTPServer, local_embedder: Any
) -> None:
    metadata = "http://169.254.169.254/latest/meta-data/"
    site.expect_request("/docs/cloud.html").respond_with_response(
        Response("", status=307, headers={"Location": metadata})
    )
    url = site.url_for("/docs/cloud.html")
    allow(db, site.url_for("/docs/"), private=True)
    allow(db, "http://169.254.169.254/", private=False)  # allowed by prefix, not by address
    submit_url(db, "acme", url)

    process(db, local_embedder)

    doc = outcome(db, url)
    assert doc["status"] == "error"
    assert "169.254.169.254, a link-local address: refused" in doc["error"]


def test_a_response_larger_than_the_limit_is_refused(
    db: str, site: HTTPServer, local_embedder: Any
) -> None:
    site.expect_request("/docs/big.txt").respond_with_data("x " * 5000, content_type="text/plain")
    url = site.url_for("/docs/big.txt")
    allow(db, site.url_for("/docs/"), private=True)
    submit_url(db, "acme", url)

    process(db, local_embedder, max_bytes=1000)

    doc = outcome(db, url)
    assert doc["status"] == "error" and "larger than 1000 bytes" in doc["error"]


def test_a_slow_server_times_out_and_the_document_is_retried_later(
    db: str, site: HTTPServer, local_embedder: Any
) -> None:
    def slow(request: Request) -> Response:
        time.sleep(1.5)
        return Response(PAGE, content_type="text/html")

    site.expect_request("/docs/slow.html").respond_with_handler(slow)
    url = site.url_for("/docs/slow.html")
    allow(db, site.url_for("/docs/"), private=True)
    submit_url(db, "acme", url)

    started = time.monotonic()
    summary = process(db, local_embedder, timeout=0.5)

    assert time.monotonic() - started < 20
    assert (summary.documents_retrying, summary.documents_failed) == (1, 0)
    doc = outcome(db, url)
    assert (doc["status"], doc["queue_state"], doc["attempts"]) == ("pending", "queued", 1)
    assert "timed out" in doc["last_error"]


@pytest.mark.parametrize(("status", "retried"), [(404, False), (503, True), (429, True)])
def test_http_errors_are_retried_only_when_a_retry_can_help(
    db: str, site: HTTPServer, local_embedder: Any, status: int, retried: bool
) -> None:
    site.expect_request("/docs/e.html").respond_with_data("no", status=status)
    url = site.url_for("/docs/e.html")
    allow(db, site.url_for("/docs/"), private=True)
    submit_url(db, "acme", url)

    process(db, local_embedder)

    doc = outcome(db, url)
    assert doc["queue_state"] == ("queued" if retried else "failed")
    assert f"HTTP {status}" in (doc["last_error"] or "")


def test_tenants_cannot_read_or_change_the_allow_list(db: str, authenticator: str) -> None:
    import psycopg
    from plugins.tenancy import claims_for, request

    for statement in (
        "select * from pgrag.fetch_allowlist",
        "insert into pgrag.fetch_allowlist (url_prefix, allow_private_addresses) "
        "values ('http://10.0.0.1/', true)",
    ):
        with (
            pytest.raises(psycopg.errors.InsufficientPrivilege),
            request(db, "authenticated", claims_for("acme")) as conn,
        ):
            conn.execute(statement)
