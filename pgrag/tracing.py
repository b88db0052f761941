"""OpenTelemetry tracing: optional, and off unless the operator configures it.

The rule (docs/observability.md): tracing is on when ``OTEL_SDK_DISABLED`` is not ``true``
and either ``OTEL_TRACES_EXPORTER`` names an exporter other than ``none`` (``otlp`` or
``console``) or an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``). Spans then go over OTLP/HTTP (protobuf), batched, to
that endpoint (default ``http://localhost:4318``), configured by the standard ``OTEL_*``
variables; the provider is shut down, flushing them, when the process exits.

Without the ``otel`` extra (``opentelemetry-sdk`` and the OTLP/HTTP exporter) nothing here imports
OpenTelemetry and every helper is a no-op; when the operator configured tracing but the extra
is missing, one line on stderr says so and the command runs untraced.

pgrag's code marks its work with :func:`span` (a stage: extract, chunk, embed, load, retrieve,
rerank, chat), :func:`root` (a command or a worker job) and :func:`annotate`; each SQL
statement becomes a span of its own through :class:`pgrag.db` connections' cursor (only under
one of pgrag's spans, so a polling worker makes no orphan spans). Text (queries, chunks,
answers, SQL parameter values) is recorded only when ``PGRAG_TRACE_CONTENT=1``.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import wraps
from typing import TYPE_CHECKING, Any, Self, TypeVar

import psycopg
from psycopg import Copy, sql
from psycopg.rows import Row

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

CONTENT_ENV = "PGRAG_TRACE_CONTENT"
TRUE = ("1", "true", "yes", "on")
TRACER_NAME = "pgrag"
MAX_TEXT = 4096
"""Characters of one text attribute kept with the content opt-in."""

Attributes = Mapping[str, Any]
F = TypeVar("F", bound=Callable[..., Any])

_tracer: Tracer | None = None
_provider: TracerProvider | None = None
_configured = False
_content = False


# -- setting up ---------------------------------------------------------------------------------


def wanted(environ: Mapping[str, str] | None = None) -> str | None:
    """The exporter the ``OTEL_*`` variables ask for (``otlp`` or ``console``), or None when
    tracing is off: ``OTEL_SDK_DISABLED=true``, ``OTEL_TRACES_EXPORTER=none``, or neither an
    exporter nor an OTLP endpoint set."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporters = [e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    exporters = [e for e in exporters if e]
    if exporters:
        return None if exporters == ["none"] else exporters[0]
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return "otlp"
    return None


def configure_from_env() -> bool:
    """Turn tracing on when the ``OTEL_*`` variables ask for it (once per process); whether
    it is on. A setting pgrag cannot honour (the extra missing, an unknown exporter, the gRPC
    protocol) is one line on stderr, and the command runs untraced."""
    global _configured
    if _configured or _tracer is not None:
        return _tracer is not None
    _configured = True
    exporter_name = wanted()
    if exporter_name is None:
        return False
    try:
        exporter = _exporter(exporter_name)
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        _say(
            "tracing is configured (OTEL_* variables) but OpenTelemetry is not installed: "
            "pip install 'pgrag-sql[otel]', or unset OTEL_TRACES_EXPORTER and "
            "OTEL_EXPORTER_OTLP_ENDPOINT."
        )
        return False
    except ValueError as exc:
        _say(str(exc))
        return False
    provider = TracerProvider(resource=_resource())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    install(provider)
    atexit.register(shutdown)
    return True


def _exporter(name: str) -> Any:
    """The span exporter ``OTEL_TRACES_EXPORTER`` names (ImportError without the extra)."""
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        raise ValueError(
            f"OTEL_TRACES_EXPORTER={name} is not supported: use otlp (OTLP over HTTP), "
            "console or none."
        )
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol.strip().lower() != "http/protobuf":
        raise ValueError(
            f"OTLP protocol {protocol} is not supported: pgrag exports OTLP over HTTP; set "
            "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and the collector's HTTP port (4318)."
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _resource() -> Any:
    """service.name ``pgrag`` unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES set one."""
    from opentelemetry.sdk.resources import Resource

    from pgrag import __version__

    attributes: dict[str, Any] = {"service.version": __version__}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attributes["service.name"] = "pgrag"
    return Resource.create(attributes)


def _say(message: str) -> None:
    print(f"pgrag: tracing off: {message}", file=sys.stderr, flush=True)


def install(provider: TracerProvider | None) -> None:
    """Trace with ``provider`` from now on (None: tracing off). Tests install one with an
    in-memory exporter; :func:`configure_from_env` one from the ``OTEL_*`` variables. The
    content opt-in (``PGRAG_TRACE_CONTENT``) is read here."""
    global _tracer, _provider, _content
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer(TRACER_NAME)
    _content = os.environ.get(CONTENT_ENV, "").strip().lower() in TRUE


def shutdown() -> None:
    """Flush and shut down the provider :func:`configure_from_env` installed (at exit)."""
    provider = _provider
    install(None)
    if provider is not None:
        provider.shutdown()


def enabled() -> bool:
    """Whether spans are recorded (a provider is installed)."""
    return _tracer is not None


def content_enabled() -> bool:
    """Whether the operator opted in to text in spans (``PGRAG_TRACE_CONTENT=1``)."""
    return _tracer is not None and _content


# -- spans ----------------------------------------------------------------------------------------


@contextmanager
def span(name: str, attributes: Attributes | None = None) -> Iterator[Span | None]:
    """A child span of the current one named ``name`` (a stage), or nothing when tracing is
    off or no span is current (a command that is not traced, such as ``pgrag eval``, makes
    no orphan spans). An exception leaving the block is recorded on it (:func:`record_error`)."""
    tracer = _tracer
    if tracer is None or not _in_a_trace():
        yield None
        return
    with tracer.start_as_current_span(
        name,
        attributes=_clean(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            record_error(exc, current)
            raise


def _in_a_trace() -> bool:
    from opentelemetry import trace

    return trace.get_current_span().get_span_context().is_valid


@contextmanager
def root(name: str, attributes: Attributes | None = None) -> Iterator[Span | None]:
    """A new trace: the span of one command or one worker job, whatever is current."""
    tracer = _tracer
    if tracer is None:
        yield None
        return
    from opentelemetry.context import Context

    with tracer.start_as_current_span(
        name,
        context=Context(),
        attributes=_clean(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            record_error(exc, current)
            raise


def command(name: str) -> Callable[[F], F]:
    """Decorate a click command's function: its call is the root span ``name``, with the
    ``tenant`` it was given (and, with the content opt-in, its ``query``/``question``)."""

    def decorate(func: F) -> F:
        @wraps(func)
        def traced(*args: Any, **kwargs: Any) -> Any:
            if _tracer is None:
                return func(*args, **kwargs)
            attributes = {"pgrag.tenant": kwargs.get("tenant")}
            text = kwargs.get("query") or kwargs.get("question")
            with root(name, attributes):
                if text is not None:
                    annotate_text("pgrag.query.text", text)
                return func(*args, **kwargs)

        return traced  # type: ignore[return-value]

    return decorate


def annotate(attributes: Attributes) -> None:
    """Set ``attributes`` (None values skipped) on the current span, when tracing."""
    if _tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(_clean(attributes))


def annotate_text(key: str, text: str) -> None:
    """Set a text attribute (a query, an answer) only with the content opt-in."""
    if content_enabled():
        annotate({key: text[:MAX_TEXT]})


def record_error(exc: BaseException, current: Span | None = None) -> None:
    """Mark ``current`` (default: the current span) failed: status ERROR with pgrag's
    one-line message, ``error.type``, and an ``exception`` event with that message."""
    if _tracer is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    target = current or trace.get_current_span()
    if not target.is_recording() or (isinstance(exc, SystemExit) and not exc.code):
        return
    message = error_line(exc)
    kind = type(exc).__qualname__
    target.set_status(Status(StatusCode.ERROR, message))
    target.set_attribute("error.type", getattr(exc, "sqlstate", None) or kind)
    target.add_event(
        "exception",
        {"exception.type": f"{type(exc).__module__}.{kind}", "exception.message": message},
    )


def error_line(exc: BaseException) -> str:
    """The one line the CLI prints for ``exc`` (without ``Error:``)."""
    import psycopg

    from pgrag.db import database_error_message, one_line
    from pgrag.errors import PgragError

    if isinstance(exc, PgragError):
        return str(exc)
    if isinstance(exc, psycopg.Error):
        return database_error_message(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted."
    if isinstance(exc, SystemExit):
        return f"exit status {exc.code}"
    return f"{type(exc).__name__}: {one_line(str(exc)) or '(no message)'}"


def _clean(attributes: Attributes | None) -> dict[str, Any]:
    """``attributes`` without None values (OpenTelemetry refuses them)."""
    return {k: v for k, v in (attributes or {}).items() if v is not None}


# -- across threads -----------------------------------------------------------------------------


def capture() -> Context | None:
    """The current trace context, for a thread that works on its behalf (None when off)."""
    if _tracer is None:
        return None
    from opentelemetry import context

    return context.get_current()


@contextmanager
def attached(ctx: Context | None) -> Iterator[None]:
    """Run the block in ``ctx`` (from :func:`capture` on another thread)."""
    if ctx is None:
        yield
        return
    from opentelemetry import context

    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)


# -- SQL statements -------------------------------------------------------------------------------

_OPERATION = re.compile(r"^\s*(?:/\*.*?\*/\s*)*([a-zA-Z]+)", re.S)
_NAME = r'(?:"?([a-z_][a-z0-9_$]*)"?\s*\.\s*)?"?([a-z_][a-z0-9_$]*)"?'
_FUNCTION = re.compile(r'(?:"?(pgrag|public)"?\s*\.\s*)"?([a-z_][a-z0-9_$]*)"?\s*\(', re.I)
_TARGET = {
    "INSERT": re.compile(r"\binto\s+" + _NAME, re.I),
    "UPDATE": re.compile(r"^\s*update\s+(?:only\s+)?" + _NAME, re.I),
    "DELETE": re.compile(r"\bfrom\s+(?:only\s+)?" + _NAME, re.I),
    "COPY": re.compile(r"^\s*copy\s+" + _NAME, re.I),
    "SELECT": re.compile(r"\bfrom\s+" + _NAME, re.I),
}


def summarize(text: str) -> tuple[str, str | None, str]:
    """The operation, the pgrag or public function called (if any) and the low-cardinality
    ``db.query.summary`` of a statement (``SELECT public.hybrid_search``, ``COPY
    pg_temp.pgrag_stage``, ``INSERT pgrag.documents``)."""
    found = _OPERATION.match(text)
    operation = found.group(1).upper() if found else "SQL"
    function = _FUNCTION.search(text)
    if function is not None:
        schema, name = function.group(1).lower(), function.group(2).lower()
        return operation, name, f"{operation} {schema}.{name}"
    pattern = _TARGET.get(operation)
    target = pattern.search(text) if pattern is not None else None
    if target is None:
        return operation, None, operation
    schema, name = target.group(1), target.group(2)
    qualified = f"{schema}.{name}" if schema else name
    return operation, None, f"{operation} {qualified.lower()}"


def _statement_text(query: Any, cursor: psycopg.Cursor[Any]) -> str:
    if isinstance(query, str):
        return query
    if isinstance(query, bytes):
        return query.decode("utf-8", "replace")
    if isinstance(query, sql.Composable):
        return query.as_string(cursor)
    return type(query).__name__


def _parameter(value: Any) -> Any:
    """A SQL parameter as an attribute value: text and numbers as they are (text cut to
    ``MAX_TEXT``), a vector or a long list as its size, anything else as its text."""
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value[:MAX_TEXT]
    size = getattr(value, "shape", None) or (len(value) if isinstance(value, list | tuple) else 0)
    if size and not isinstance(value, str):
        return f"<{type(value).__name__} {size}>"
    return str(value)[:MAX_TEXT]


def _parameters(params: Any) -> dict[str, Any]:
    if isinstance(params, Mapping):
        return {f"db.query.parameter.{k}": _parameter(v) for k, v in params.items()}
    if isinstance(params, list | tuple):
        return {f"db.query.parameter.{i}": _parameter(v) for i, v in enumerate(params)}
    return {}


@contextmanager
def sql_span(cursor: psycopg.Cursor[Any], query: Any, params: Any = None) -> Iterator[None]:
    """A CLIENT span for one statement (OpenTelemetry's database conventions), under the
    current pgrag span; nothing outside one (a worker's polling) or when tracing is off."""
    tracer = _tracer
    if tracer is None:
        yield
        return
    if not _in_a_trace():
        yield
        return
    from opentelemetry import trace

    text = _statement_text(query, cursor)
    operation, function, summary = summarize(text)
    info = cursor.connection.info
    attributes: dict[str, Any] = {
        "db.system.name": "postgresql",
        "db.operation.name": operation,
        "db.query.summary": summary,
        "db.stored_procedure.name": function,
        "db.namespace": info.dbname,
        "server.address": info.host,
        "server.port": info.port,
    }
    if _content:
        attributes["db.query.text"] = text[:MAX_TEXT]
        attributes |= _parameters(params)
    with tracer.start_as_current_span(
        summary,
        kind=trace.SpanKind.CLIENT,
        attributes=_clean(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield
        except BaseException as exc:
            state = getattr(exc, "sqlstate", None)
            if state:
                current.set_attribute("db.response.status_code", state)
            record_error(exc, current)
            raise
        if cursor.rowcount >= 0 and operation in ("SELECT", "WITH"):
            current.set_attribute("db.response.returned_rows", cursor.rowcount)


class TracedCursor(psycopg.Cursor[Row]):
    """The cursor of :func:`pgrag.db.connect`'s connections while tracing: each statement
    (``execute``, ``executemany``, ``copy``) in a :func:`sql_span`."""

    def execute(self, *args: Any, **kwargs: Any) -> Self:
        query = args[0] if args else kwargs.get("query")
        params = args[1] if len(args) > 1 else kwargs.get("params")
        with sql_span(self, query, params):
            return super().execute(*args, **kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> None:
        query = args[0] if args else kwargs.get("query")
        with sql_span(self, query):
            super().executemany(*args, **kwargs)

    @contextmanager
    def copy(self, *args: Any, **kwargs: Any) -> Iterator[Copy]:
        statement = args[0] if args else kwargs.get("statement")
        params = args[1] if len(args) > 1 else kwargs.get("params")
        with sql_span(self, statement, params), super().copy(*args, **kwargs) as copy:
            yield copy


def trace_connection(conn: psycopg.Connection[Any]) -> None:
    """Give ``conn`` the :class:`TracedCursor` when tracing is on."""
    if _tracer is not None:
        conn.cursor_factory = TracedCursor
