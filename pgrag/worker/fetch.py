"""Fetching what a tenant submitted as a URL, only where the operator allowed it (SSRF guard).

A tenant names the URL; the worker fetches it from inside the operator's network. So nothing is
fetched unless it matches a prefix of ``pgrag.fetch_allowlist`` (an operator-only table: no API
role may read or change it), and every connection, redirects included, goes to an address that
was checked after resolving the host name: a private, loopback, link-local, multicast,
reserved or otherwise non-global address is refused unless the matching prefix says
``allow_private_addresses``. The checked address is the one connected to (the host is not
resolved twice, so a DNS answer that changes in between cannot redirect the connection), and
HTTPS verifies the certificate against the host name. ``file://`` and every scheme but http and
https are never fetched. Size and time are bounded (:class:`FetchLimits`): the time limit
covers the whole exchange (connecting, TLS, headers, body, redirects), enforced by a watchdog
that shuts the socket down at the deadline, so a server sending a byte at a time cannot stretch
it.

Refusals raise :class:`~pgrag.errors.FetchRefused` (the document ends in ``error`` with the
reason, no retry); failures a later attempt may fix (timeouts, refused connections, HTTP 429
and 5xx) raise :class:`~pgrag.errors.FetchFailed` with ``retryable`` set.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import posixpath
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from pgrag.errors import FetchFailed, FetchRefused

DEFAULT_TIMEOUT = 30.0  # seconds per connection, and for the whole fetch: PGRAG_FETCH_TIMEOUT
DEFAULT_MAX_BYTES = 20 * 1024 * 1024  # PGRAG_FETCH_MAX_BYTES
MAX_REDIRECTS = 5
RETRYABLE_STATUS = {408, 425, 429, 500, 502, 503, 504}
_ENCODED_SEPARATOR = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)


@dataclass(frozen=True)
class FetchRule:
    """One allowed URL prefix (normalised) and whether it may reach non-global addresses."""

    prefix: str
    allow_private_addresses: bool = False


@dataclass(frozen=True)
class FetchLimits:
    """Bounds of one fetch: seconds (each connection, and the whole fetch with its
    redirects), response bytes, redirects followed."""

    timeout: float = DEFAULT_TIMEOUT
    max_bytes: int = DEFAULT_MAX_BYTES
    max_redirects: int = MAX_REDIRECTS


@dataclass(frozen=True)
class Fetched:
    """A fetched response body with what decides its format."""

    url: str
    data: bytes
    content_type: str
    charset: str | None


def load_allowlist(conn: psycopg.Connection[Any]) -> list[FetchRule]:
    """The operator's allowed prefixes (``pgrag.fetch_allowlist``), normalised."""
    rows = conn.execute(
        "select url_prefix, allow_private_addresses from pgrag.fetch_allowlist order by 1"
    ).fetchall()
    rules = []
    for prefix, private in rows:
        try:
            rules.append(FetchRule(normalise_url(str(prefix)), bool(private)))
        except FetchRefused:
            continue  # a prefix no URL can match (the table's check makes this rare)
    return rules


def normalise_url(url: str) -> str:
    """``url`` in the one form prefixes are matched in: scheme and host in lower case (IDNA),
    default port dropped, dot segments resolved, no fragment. Refuses (FetchRefused) any other
    scheme than http/https, user info, and encoded dots, slashes or backslashes in the path
    (servers decode them differently)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise FetchRefused(f"{url}: not a valid URL ({exc})") from exc
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise FetchRefused(
            f"{url}: scheme {scheme or '(none)'}:// is never fetched (only http and https)"
        )
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise FetchRefused(f"{url}: URLs with user info are not fetched")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise FetchRefused(f"{url}: no host")
    try:
        host = host.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise FetchRefused(f"{url}: invalid host name") from exc
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    default = 443 if scheme == "https" else 80
    netloc = host if port in (None, default) else f"{host}:{port}"
    path = parts.path or "/"
    if _ENCODED_SEPARATOR.search(path) or "\\" in path:
        raise FetchRefused(f"{url}: encoded dots, slashes or backslashes in the path are refused")
    trailing = path.endswith("/")
    path = posixpath.normpath(path)
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    if trailing and not path.endswith("/"):
        path += "/"
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{netloc}{path}{query}"


def allowed_rule(url: str, rules: list[FetchRule]) -> FetchRule | None:
    """The longest rule whose prefix starts ``url`` (both normalised), or None."""
    matches = [r for r in rules if url.startswith(r.prefix)]
    return max(matches, key=lambda r: len(r.prefix)) if matches else None


def address_refusal(address: str) -> str | None:
    """Why connecting to ``address`` is refused without ``allow_private_addresses``, or None."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            ip = embedded
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_unspecified or ip.is_reserved:
        return "a reserved address"
    if ip.is_private or not ip.is_global:
        return "a private or non-global address"
    return None


def _resolve(host: str, port: int, url: str, rule: FetchRule) -> list[str]:
    """The addresses ``host`` resolves to, all checked (any refused one refuses the URL)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FetchFailed(f"{url}: cannot resolve {host} ({exc.strerror})", True) from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not rule.allow_private_addresses:
        for address in addresses:
            why = address_refusal(address)
            if why is not None:
                raise FetchRefused(
                    f"{url}: {host} resolves to {address}, {why}: refused (the operator may "
                    "allow it with allow_private_addresses in pgrag.fetch_allowlist)"
                )
    return addresses


class _Watchdog:
    """Shuts down the socket of the current connection when the fetch's deadline passes (a
    read blocked on a slow server then ends at once)."""

    def __init__(self, deadline: float) -> None:
        self.fired = False
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._socket = sock
            if self.fired:
                self._shutdown(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            if self._socket is not None:
                self._shutdown(self._socket)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to an address checked beforehand (never resolved again)."""

    def __init__(
        self,
        host: str,
        port: int,
        address: str,
        timeout: float,
        watch: Callable[[socket.socket], None],
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address
        self._watch = watch

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)
        self._watch(self.sock)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a checked address; the certificate is verified for the host name."""

    def __init__(
        self,
        host: str,
        port: int,
        address: str,
        timeout: float,
        watch: Callable[[socket.socket], None],
    ) -> None:
        self._tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self._tls)
        self._address = address
        self._watch = watch

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self._watch(sock)  # the handshake is inside the deadline too
        self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)


def fetch(url: str, rules: list[FetchRule], limits: FetchLimits | None = None) -> Fetched:
    """GET ``url`` if allowed, following redirects (each one allowed and checked again)."""
    limits = limits or FetchLimits()
    deadline = time.monotonic() + limits.timeout
    watchdog = _Watchdog(deadline)
    try:
        return _fetch(url, rules, limits, deadline, watchdog)
    except FetchFailed:
        raise
    except (OSError, http.client.HTTPException) as exc:
        if watchdog.fired:
            raise FetchFailed(f"{url}: timed out after {limits.timeout:g} s", True) from exc
        raise FetchFailed(f"{url}: cannot fetch ({exc})", True) from exc
    finally:
        watchdog.cancel()


def _fetch(
    url: str, rules: list[FetchRule], limits: FetchLimits, deadline: float, watchdog: _Watchdog
) -> Fetched:
    current = url
    for _ in range(limits.max_redirects + 1):
        normalised = normalise_url(current)
        rule = allowed_rule(normalised, rules)
        if rule is None:
            where = "" if current == url else f" (redirected from {url})"
            raise FetchRefused(
                f"{current}{where}: not in the operator's list of URLs the worker may fetch "
                "(pgrag.fetch_allowlist)"
            )
        parts = urllib.parse.urlsplit(normalised)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = _resolve(host, port, url, rule)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        response, connection = _request(
            parts.scheme, host, port, addresses, target, url, deadline, watchdog
        )
        try:
            if response.status in (301, 302, 303, 307, 308):
                location = response.getheader("Location")
                if not location:
                    raise FetchFailed(f"{url}: HTTP {response.status} without a Location")
                current = urllib.parse.urljoin(normalised, location)
                continue
            if response.status >= 400:
                raise FetchFailed(
                    f"{url}: HTTP {response.status} {response.reason}",
                    response.status in RETRYABLE_STATUS,
                )
            data = _read(response, url, limits, deadline, watchdog)
            content_type = response.headers.get_content_type() or ""
            if response.getheader("Content-Type") is None:
                content_type = ""
            return Fetched(current, data, content_type, response.headers.get_content_charset())
        finally:
            connection.close()
    raise FetchRefused(f"{url}: more than {limits.max_redirects} redirects")


def _request(
    scheme: str,
    host: str,
    port: int,
    addresses: list[str],
    target: str,
    url: str,
    deadline: float,
    watchdog: _Watchdog,
) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
    """Send the GET to the first checked address that accepts a connection."""
    last: Exception | None = None
    for address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        cls = _PinnedHTTPSConnection if scheme == "https" else _PinnedHTTPConnection
        connection = cls(host.strip("[]"), port, address, left, watchdog.watch)
        try:
            connection.request(
                "GET",
                target,
                headers={"User-Agent": "pgrag-worker", "Accept-Encoding": "identity"},
            )
            return connection.getresponse(), connection
        except ssl.SSLCertVerificationError as exc:
            connection.close()
            raise FetchRefused(f"{url}: TLS certificate not valid for {host} ({exc})") from exc
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            last = exc
            if watchdog.fired:
                break
    if last is None or isinstance(last, TimeoutError) or watchdog.fired:
        raise FetchFailed(f"{url}: timed out", True) from last
    raise FetchFailed(f"{url}: cannot fetch ({last})", True) from last


def _read(
    response: http.client.HTTPResponse,
    url: str,
    limits: FetchLimits,
    deadline: float,
    watchdog: _Watchdog,
) -> bytes:
    """The body, at most ``limits.max_bytes``, before the deadline."""
    too_large = f"{url}: larger than {limits.max_bytes} bytes (the worker's limit)"
    length = response.getheader("Content-Length")
    if length and length.isdigit() and int(length) > limits.max_bytes:
        raise FetchRefused(too_large)
    parts: list[bytes] = []
    size = 0
    try:
        while True:
            if time.monotonic() > deadline:
                raise FetchFailed(f"{url}: timed out after {limits.timeout:g} s", True)
            part = response.read1(65536)
            if not part:
                if watchdog.fired:  # the watchdog ended the read: not the body's end
                    raise FetchFailed(f"{url}: timed out after {limits.timeout:g} s", True)
                break
            size += len(part)
            if size > limits.max_bytes:
                raise FetchRefused(too_large)
            parts.append(part)
    except (OSError, http.client.HTTPException) as exc:
        timed_out = isinstance(exc, TimeoutError) or watchdog.fired
        raise FetchFailed(
            f"{url}: {'timed out' if timed_out else f'connection failed ({exc})'}", True
        ) from exc
    return b"".join(parts)
