"""Each document's extraction and chunking in a child process, under a time and a memory limit.

A tenant's document is untrusted input to parsers (YAML front matter, HTML, PDF, charsets) and
to the chunker. The worker therefore never parses one in its own process: a
:class:`DocumentSandbox` keeps one child process (the worker's Python running :func:`main`) that
turns a :class:`DocumentSource` into a :class:`Prepared` document (title, metadata, hash and
its chunks), one document at a time. The embedding model stays in the worker; the child loads
only the model's tokenizer, so the common path costs one round trip per document.

Limits (:class:`DocumentLimits`, ``pgrag worker --document-timeout/--document-memory``):

* time: the worker waits ``timeout`` seconds for the child's answer, then kills it (SIGKILL)
  and starts another for the next document;
* memory: the child caps its own address space (``RLIMIT_AS``) at what it uses once ready plus
  ``memory_mb``; an allocation over it fails (``MemoryError``, or the child dies), and a child
  that kept more than half of that budget after a document is replaced.

Whatever goes wrong with one document (a parser's exception, a limit, a crash of the child)
comes back as a :class:`Failure` with a one-line reason a tenant can act on; only a child that
cannot start at all (:class:`SandboxUnavailable`: the worker's own environment) is raised.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from pgrag.errors import Cancelled, ConfigError, ExtractionError
from pgrag.pipeline.chunking import Chunk

DEFAULT_DOCUMENT_TIMEOUT = 120.0  # seconds: PGRAG_DOCUMENT_TIMEOUT
DEFAULT_DOCUMENT_MEMORY_MB = 1024  # MiB: PGRAG_DOCUMENT_MEMORY
CHILD = "from pgrag.worker.sandbox import main; main()"
START_TIMEOUT = 120.0  # seconds a new child may take to load its libraries and tokenizer
MAX_METADATA_DEPTH = 32  # nesting levels of a document's metadata (front matter)
MAX_REASON_CHARS = 300


class SandboxUnavailable(ConfigError):
    """The child process that extracts documents cannot start (the worker's environment)."""


@dataclass(frozen=True)
class DocumentLimits:
    """What one document's extraction and chunking may take: wall-clock seconds, and MiB of
    memory beyond what the extraction process uses when idle."""

    timeout: float = DEFAULT_DOCUMENT_TIMEOUT
    memory_mb: int = DEFAULT_DOCUMENT_MEMORY_MB


@dataclass(frozen=True)
class ChunkSpec:
    """How the worker's run chunks: the chunker and its sizes, and the tokenizer to count with
    (``("local", backend)`` or ``("openai", model, dims)``)."""

    chunker: str
    chunk_size: int
    overlap: int
    language: str
    max_tokens: int
    tokenizer: tuple[Any, ...]


@dataclass(frozen=True)
class DocumentSource:
    """A claimed document as the child reads it: inline ``content``, or a fetched body
    (``data`` with its content type and charset)."""

    uri: str
    source_type: str
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    content: str | None = None
    data: bytes | None = None
    content_type: str = ""
    charset: str | None = None


@dataclass
class Prepared:
    """A document extracted and chunked: what the ingest pipeline stores."""

    uri: str
    title: str
    source_type: str
    metadata: dict[str, Any]
    content_sha256: str
    chunks: list[Chunk]
    empty_message: str


@dataclass(frozen=True)
class Failure:
    """Why a document could not be prepared; ``retryable``: a later attempt may succeed."""

    reason: str
    retryable: bool


# -- what the child does to one document ---------------------------------------------------------


def tokenizer_spec(embedder: Any) -> tuple[Any, ...]:
    """How a child makes the token counter of ``embedder`` (without its model)."""
    if embedder.provider == "openai":
        return ("openai", embedder.model_name, embedder.dims)
    return ("local", getattr(embedder, "backend", None))


def _token_counter(spec: tuple[Any, ...]) -> Any:
    from pgrag.pipeline.chunking import token_counter
    from pgrag.pipeline.embedders import LocalEmbedder, OpenAIEmbedder

    if spec[0] == "openai":
        return token_counter(OpenAIEmbedder(spec[1], spec[2], api_key="unused"))
    return token_counter(LocalEmbedder(backend=spec[1]))


def inferred_type(uri: str, source_type: str) -> str:
    """The type inline content is read as: the submitted one, except that ``text`` (also the
    default when none was given) becomes what the URI's extension says, as ``pgrag ingest``
    reads a file (``kb/printer.md``: markdown)."""
    from pgrag.pipeline.extract import source_type_for

    if source_type != "text":
        return source_type
    found = source_type_for(urllib.parse.urlsplit(uri).path)
    return found if found in ("markdown", "html") else source_type


def stem_title(uri: str) -> str:
    """The title of a document without one, as ``pgrag ingest`` names a file."""
    from pgrag.pipeline.extract import title_from_name

    path = urllib.parse.urlsplit(uri).path or uri
    return title_from_name(path) or uri


def extract_source(source: DocumentSource) -> Any:
    """``source`` as an :class:`~pgrag.pipeline.extract.ExtractedDocument` (the worker's
    reading of a submission: the same title, type and metadata rules as ``pgrag ingest``)."""
    from pgrag.pipeline.extract import ExtractedDocument, document_from_response

    if source.content is not None:
        kind = inferred_type(source.uri, source.source_type)
        doc = ExtractedDocument.from_text(
            source.uri,
            source.content,
            title=source.title or "",
            metadata=source.metadata,
            source_type=kind,
        )
    else:
        doc = document_from_response(
            source.uri, source.data or b"", source.content_type, source.charset
        )
        doc.title = source.title or doc.title
        doc.metadata.update(source.metadata)
    if not doc.title:
        doc.title = stem_title(source.uri)
    return doc


def _storable(text: str) -> str:
    """``text`` as PostgreSQL can store it: no NUL, no lone surrogate."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _depth(value: Any) -> int:
    depth, level = 0, [value]
    while level:
        depth += 1
        nested: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                nested.extend(item.values())
            elif isinstance(item, list):
                nested.extend(item)
        level = nested
    return depth - 1


def _storable_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    if _depth(metadata) > MAX_METADATA_DEPTH:
        raise ExtractionError(
            f"metadata (front matter) nested deeper than {MAX_METADATA_DEPTH} levels: flatten it"
        )
    text = json.dumps(metadata, default=str, ensure_ascii=False)
    loaded: dict[str, Any] = json.loads(_storable(text).replace("\\u0000", ""))
    return loaded


def prepare(source: DocumentSource, chunker: Any) -> Prepared:
    """Extract and chunk ``source`` (in the child)."""
    doc = extract_source(source)
    chunks = []
    for chunk in chunker.chunks(doc.blocks):
        chunk.content = _storable(chunk.content)
        chunk.heading_path = tuple(_storable(h) for h in chunk.heading_path)
        chunks.append(chunk)
    return Prepared(
        uri=doc.uri,
        title=_storable(doc.title)[:1000],
        source_type=doc.source_type,
        metadata=_storable_metadata(doc.metadata),
        content_sha256=doc.content_sha256,
        chunks=chunks,
        empty_message=doc.empty_message,
    )


_PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)+[\w.+-]*")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)


def scrub(message: str, keep: str = "") -> str:
    """``message`` on one line, shortened, without server file paths or URLs (but ``keep``, the
    document's own URI): what a tenant may read of an unexpected error."""
    text = " ".join(message.split())
    if keep:
        text = text.replace(keep, "\0")
    text = _URL.sub("(a URL)", text)
    text = _PATH.sub("(a path)", text)
    text = text.replace("\0", keep)
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


def failure_for(exc: BaseException, uri: str, limits: DocumentLimits) -> Failure:
    """What a tenant reads when preparing a document raised ``exc`` (in the child)."""
    if isinstance(exc, ExtractionError):  # an unusable document: no retry fixes it
        return Failure(scrub(str(exc), uri), False)
    if isinstance(exc, MemoryError):
        return Failure(memory_reason(limits), False)
    if isinstance(exc, RecursionError):
        return Failure("document nested too deeply to be read: flatten its structure", False)
    detail = scrub(str(exc), uri)
    what = type(exc).__name__ + (f": {detail}" if detail else "")
    return Failure(f"could not be read ({what}); fix the document and submit it again", True)


def time_reason(limits: DocumentLimits) -> str:
    return (
        f"document exceeded the {limits.timeout:g} s extraction time limit; split it, or the "
        "operator raises pgrag worker --document-timeout"
    )


def memory_reason(limits: DocumentLimits) -> str:
    return (
        f"document exceeded the {limits.memory_mb} MiB extraction memory limit; split it, or the "
        "operator raises pgrag worker --document-memory"
    )


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _peak_address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    return 0


def _serve(conn: Connection) -> None:
    """The child's loop: ("init", spec, limits) once, then ("prepare", source) per document."""
    import resource

    from pgrag.pipeline.chunking import make_chunker

    _, spec, limits = conn.recv()
    chunker = make_chunker(
        spec.chunker,
        _token_counter(spec.tokenizer),
        spec.chunk_size,
        spec.overlap,
        spec.language,
        max_tokens=spec.max_tokens - 2,
    )
    # Everything a document may need is loaded before the limit is set: the parsers, and the
    # tokenizer (one call loads it).
    import charset_normalizer  # noqa: F401
    import selectolax.lexbor  # noqa: F401
    import yaml  # noqa: F401

    with contextlib.suppress(ImportError):
        import pymupdf  # noqa: F401
    list(chunker.chunks(extract_source(DocumentSource("warm-up", "text", content="Ready.")).blocks))
    baseline = _address_space()
    budget = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (baseline + budget, baseline + budget))
    conn.send(("ready", baseline))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] != "prepare":
            return
        source: DocumentSource = message[1]
        try:
            result: Prepared | Failure = prepare(source, chunker)
        except BaseException as exc:  # one document's problem, whatever it is
            result = failure_for(exc, source.uri, limits)
            # A library that could not allocate may say so in its own words.
            if _peak_address_space() > baseline + budget * 9 // 10:
                result = Failure(memory_reason(limits), False)
        del message, source
        # A fresh child for the next document once this one has used half the budget (the
        # peak counts: a child that came near the limit starts the next document afresh).
        recycle = _peak_address_space() > baseline + budget // 2
        try:
            conn.send(("done", result, recycle))
        except MemoryError:
            conn.send(("done", Failure(memory_reason(limits), False), True))
        if recycle:
            return


def main() -> None:
    """The child's entry point (``CHILD``; its argument: the socket to the worker)."""
    # The worker stops it: a Ctrl-C or a SIGTERM sent to the whole process group is the
    # worker's to handle, and the child dies with the thread of the worker that started it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    sock = socket.socket(fileno=int(sys.argv[1]))
    conn = Connection(sock.detach())
    try:
        _serve(conn)
    finally:
        conn.close()


# -- the worker's side -----------------------------------------------------------------------------


class DocumentSandbox:
    """One child process preparing documents for one worker slot (see the module docstring)."""

    def __init__(self, spec: ChunkSpec, limits: DocumentLimits) -> None:
        self.spec = spec
        self.limits = limits
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self.started = 0  # children started (tests, and the operator's log)

    @property
    def pid(self) -> int | None:
        """The child's process id while one runs (tests, the operator's log)."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> Connection:
        """Start the child now (else at the first document); its connection."""
        mine, theirs = socket.socketpair()
        # The child imports the very pgrag this process runs (wherever it was imported from).
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.environ.get("PYTHONPATH")
        env = {
            **os.environ,
            "PYTHONPATH": root if not path else f"{root}{os.pathsep}{path}",
            "TOKENIZERS_PARALLELISM": "false",  # no thread pool: one document, one thread
            "OMP_NUM_THREADS": "1",
            # One malloc arena: when the main arena reaches the limit, glibc retries in another
            # arena, whose 64 MiB were reserved before the limit was set, so a document could
            # use that much more than its budget, depending on which thread made the arena.
            "MALLOC_ARENA_MAX": "1",
            "RUST_BACKTRACE": "0",  # the tokenizer's out-of-memory abort: one line
        }
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
            )
        except OSError as exc:
            mine.close()
            raise SandboxUnavailable(
                f"cannot start the document extraction process ({exc.strerror})"
            ) from exc
        finally:
            theirs.close()
        conn = Connection(mine.detach())
        self._proc, self._conn = proc, conn
        try:
            conn.send(("init", self.spec, self.limits))
            if conn.poll(START_TIMEOUT):
                reply = conn.recv()
                if reply[0] == "ready":
                    self.started += 1
                    return conn
        except (OSError, EOFError):
            pass
        self.close()
        raise SandboxUnavailable(
            "the document extraction process did not start (pgrag worker's environment: "
            "its Python must import pgrag, with the model's tokenizer installed)"
        )

    def prepare(
        self, source: DocumentSource, cancel: threading.Event | None = None
    ) -> Prepared | Failure:
        """``source`` extracted and chunked in the child, or why not (never raises for a
        document; :class:`SandboxUnavailable` when no child can start, :class:`Cancelled`
        when ``cancel`` is set meanwhile: the child is killed)."""
        conn = self._conn if self._conn is not None else self.start()
        try:
            conn.send(("prepare", source))
            deadline = time.monotonic() + self.limits.timeout
            while not conn.poll(min(0.2, max(0.0, deadline - time.monotonic()))):
                if cancel is not None and cancel.is_set():
                    self.close(kill=True)
                    raise Cancelled("cancelled: the worker is stopping")
                if time.monotonic() >= deadline:
                    self.close(kill=True)
                    return Failure(time_reason(self.limits), False)
            _, result, recycle = conn.recv()
        except (OSError, EOFError):  # the child died: over its memory limit, or a crash
            code = self.close()
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled: the worker is stopping") from None
            if code is not None and code < 0:
                return Failure(memory_reason(self.limits), False)
            return Failure(
                "could not be read (the extraction process failed); fix the document and "
                "submit it again",
                True,
            )
        if recycle:
            self.close()
        assert isinstance(result, Prepared | Failure)
        return result

    def close(self, kill: bool = False) -> int | None:
        """Stop the child (at once with ``kill``, else when it has finished); its exit status."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is None:
            return None
        if kill:
            proc.kill()
        try:
            return proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
