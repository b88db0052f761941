"""What OpenTelemetry tracing costs `pgrag search`: on against off, interleaved, in one run.

The sample corpus (``samples/``: Markdown and HTML) is ingested into a fresh database, then each
of ``--queries`` questions is searched ``--rounds`` times with tracing off and on, the order
alternating, two ways:

  * ``cli``: ``pgrag search QUESTION -k 10`` invoked in this process (click's runner: the
    command's own code, connection and all, without the interpreter's start);
  * ``hybrid_search``: the ``hybrid_search`` call as :func:`pgrag.search.run_search` (what the
    command runs) times it, on an open connection, inside a ``pgrag search`` root span.

"On" is what an operator runs: the SDK's batch processor exporting OTLP/HTTP to a collector,
here a loopback HTTP server that accepts ``POST /v1/traces`` (and counts the spans it is sent).
One untimed round first fills the query-embedding cache, so the model is not in the timings:
what is left is the database work and the tracing around it.

    .venv/bin/python benchmarks/tracing.py [--dsn ADMIN_DSN] [--queries 20] [--rounds 5]

Without ``--dsn`` a throwaway cluster is started. Writes benchmarks/results/tracing.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from click.testing import CliRunner
from common import latency_summary
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from pgrag import tracing
from pgrag.cli import main as cli_main
from pgrag.db import connect
from pgrag.ingest import ingest_paths
from pgrag.search import SearchOptions, run_search
from pgrag.testing import drop_database, fresh_database, server

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "tracing.json"
QUESTIONS = [
    "how do I install pgrag?",
    "what does hybrid search combine?",
    "how are documents chunked?",
    "which roles can call the search functions?",
    "how is a release cut?",
    "what happens when an ingest is interrupted?",
    "where does the embedded database keep its data?",
    "how are unchanged documents skipped?",
    "what does the context builder return?",
    "how are tenants kept apart?",
    "what is reciprocal rank fusion?",
    "how do I search from psql?",
    "which file types can be ingested?",
    "how are PDF pages extracted?",
    "what is the release checklist?",
    "how do I run the tests?",
    "how does the worker process submitted documents?",
    "what is stored for each chunk?",
    "how are embeddings computed?",
    "how do I upgrade the SQL?",
]


class Collector(BaseHTTPRequestHandler):
    """A collector stand-in: accepts OTLP/HTTP trace exports and counts their spans."""

    spans = 0
    requests = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        export = ExportTraceServiceRequest.FromString(body)
        count = sum(len(s.spans) for r in export.resource_spans for s in r.scope_spans)
        with Collector.lock:
            Collector.spans += count
            Collector.requests += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def ingest_samples(dsn: str) -> int:
    files = sorted(str(p) for p in (ROOT / "samples").iterdir() if p.suffix in (".md", ".html"))
    summary = ingest_paths(dsn, files)
    return summary.chunks_written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="admin DSN of a server with pgvector (default: throwaway)")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args()
    for name in [n for n in os.environ if n.startswith("OTEL_") or n == tracing.CONTENT_ENV]:
        del os.environ[name]  # tracing is switched by this script alone
    questions = QUESTIONS[: args.queries]
    began = datetime.now(UTC)

    collector = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}/v1/traces"
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))

    with server(args.dsn, "pgrag-tracing-bench-") as admin:
        dsn = fresh_database(admin)
        try:
            chunks = ingest_samples(dsn)
            times: dict[str, dict[str, list[float]]] = {
                "cli": {"off": [], "on": []},
                "hybrid_search": {"off": [], "on": []},
            }
            runner = CliRunner()
            tracing.install(None)
            conns = {"off": connect(dsn)}
            tracing.install(provider)
            conns["on"] = connect(dsn)  # its statements are spans
            tracing.install(None)
            options = SearchOptions(limit=10)

            def search_once(mode: str, question: str, timed: bool) -> None:
                tracing.install(provider if mode == "on" else None)
                started = time.perf_counter()
                result = runner.invoke(cli_main, ["--dsn", dsn, "search", question, "-k", "10"])
                cli_ms = (time.perf_counter() - started) * 1000
                assert result.exit_code == 0, result.output
                with tracing.root("pgrag search", {"pgrag.tenant": "default"}):
                    run = run_search(
                        conns[mode], question, options, tenant="default", writer=conns[mode]
                    )
                tracing.install(None)
                if timed:
                    times["cli"][mode].append(cli_ms)
                    times["hybrid_search"][mode].append(run.latency_ms)

            for question in questions:  # untimed: the query-embedding cache, warm connections
                for mode in ("off", "on"):
                    search_once(mode, question, timed=False)
            provider.force_flush()
            before = Collector.spans
            for r in range(args.rounds):
                for i, question in enumerate(questions):
                    order = ("off", "on") if (r + i) % 2 == 0 else ("on", "off")
                    for mode in order:
                        search_once(mode, question, timed=True)
            provider.force_flush()
            traced_searches = args.rounds * len(questions)
            spans_per_search = (Collector.spans - before) / traced_searches / 2
            version = conns["off"].execute("show server_version").fetchone()
            for conn in conns.values():
                conn.close()
        finally:
            tracing.install(None)
            provider.shutdown()
            drop_database(admin, dsn)
    collector.shutdown()

    results: dict[str, Any] = {}
    for what, modes in times.items():
        off, on = latency_summary(modes["off"]), latency_summary(modes["on"])
        results[what] = {
            "off": off,
            "on": on,
            "ratio_p50": round(on["p50_ms"] / off["p50_ms"], 3),
            "ratio_p95": round(on["p95_ms"] / off["p95_ms"], 3),
            "added_p50_ms": round(on["p50_ms"] - off["p50_ms"], 2),
            "runs": len(modes["on"]),
        }
        print(
            f"{what:14s} off p50 {off['p50_ms']:7.2f} p95 {off['p95_ms']:7.2f} | "
            f"on p50 {on['p50_ms']:7.2f} p95 {on['p95_ms']:7.2f} | "
            f"x{results[what]['ratio_p50']:.3f} p50"
        )
    out = {
        "benchmark": "tracing",
        "command": "benchmarks/tracing.py "
        + " ".join(a for a in sys.argv[1:] if not a.startswith(("postgres", "host="))),
        "started": began.isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_at_end": os.getloadavg(),
            "python": platform.python_version(),
        },
        "server_version": version[0] if version else None,
        "corpus_chunks": chunks,
        "queries": len(questions),
        "rounds": args.rounds,
        "exporter": "OTLP/HTTP, batch span processor, to a loopback collector stand-in",
        "spans_per_traced_search": round(spans_per_search, 1),
        "spans_received": Collector.spans,
        "results": results,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
