"""The semantic answer cache (``pgrag ask --cache``) on repeated paraphrases of questions about
the sample documents: hit rate, false hits and latency of a hit against a miss.

A throwaway PostgreSQL server (or the one ``--dsn`` names) gets the sample documents
(``samples/*.md``, ``samples/search.html``) through ``pgrag ingest``. The question set below:
40 questions about them, each with 2 or 3 paraphrases (86), the same 40 typed again (lower case,
no question mark), and 20 different questions: 10 off the corpus's subjects and 10 near misses
(on its subjects, with another answer: "on Windows" for "on Linux", text-embedding-3-large for
-small...).

1. Thresholds (SQL, the bundled model): the 40 questions' answers are cached
   (``public.answer_cache_store`` with their real ``build_context`` sources), then every
   paraphrase and different question is looked up (``public.answer_cache_lookup``) at each
   similarity: a paraphrase's hit is right when it returns its own question's answer, wrong
   when another question's; a different question's hit is false (both listed). The lookups
   are timed (SQL alone, over the cached entries).
2. End to end (``pgrag ask --cache --json`` in one process, the default similarity): the 40
   questions, then the paraphrases, then the different questions, each command timed from
   invocation to output (loading the model, embedding, lookup; on a miss retrieval, the chat
   call and the store; misses are stored too, so later questions may hit them). The chat
   endpoint is a local stand-in server answering after a fixed
   ``--chat-latency-ms`` (500 ms by default; hosted models often take 1-5 s): a hit saves that
   and retrieval.

    .venv/bin/python benchmarks/answer_cache.py [--dsn DSN]   # about 3 minutes

Writes benchmarks/results/answer_cache.json (rendered into docs/benchmarks.md by report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from common import admin_url, latency_summary

from pgrag.answer_cache import DEFAULT_SIMILARITY
from pgrag.db import connect, tenant_transaction
from pgrag.install.migrator import Migrator
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.search import ContextOptions, build_context
from pgrag.testing import create_database, drop_database, temporary_cluster

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "answer_cache.json"
SAMPLES = ["getting-started.md", "ingestion.md", "release-process.md", "search.html"]
THRESHOLDS = (0.8, 0.85, 0.9, 0.92, 0.95, 0.97)
TENANT = "default"

# (question, paraphrases) about the sample documents.
QUESTIONS: list[tuple[str, list[str]]] = [
    (
        "What does pgrag keep inside PostgreSQL?",
        [
            "What does pgrag store in Postgres?",
            "Which parts of RAG does pgrag keep in the database?",
        ],
    ),
    (
        "Which clients can search with pgrag?",
        [
            "What clients can query pgrag?",
            "Can PostgREST or Supabase call pgrag's search functions?",
        ],
    ),
    (
        "What does pgrag need to run?",
        [
            "What are pgrag's requirements?",
            "Which PostgreSQL extension does pgrag require?",
        ],
    ),
    (
        "What happens when no connection string is given?",
        [
            "What does pgrag do without a DSN?",
            "Does pgrag start its own database if I give no connection string?",
            "What happens if I don't pass a connection string?",
        ],
    ),
    (
        "How do I install pgrag on Linux?",
        [
            "What are the Linux installation steps for pgrag?",
            "How to set up pgrag on Linux?",
            "How can I install pgrag on a Linux machine?",
        ],
    ),
    (
        "What does pgrag migrate do?",
        [
            "What does the migrator do?",
            "What happens when I run pgrag migrate?",
        ],
    ),
    (
        "How do I point pgrag at an existing server?",
        [
            "How can I use pgrag with my own PostgreSQL server?",
            "Which option sets the server pgrag connects to?",
        ],
    ),
    (
        "How is the embedding dimension chosen?",
        [
            "Where do I set the embedding dimension?",
            "How do I choose the vector dimension at install time?",
        ],
    ),
    (
        "What dimension does the bundled local model use?",
        [
            "How many dimensions does the local embedding model have?",
            "What is the embedding size of the bundled model?",
            "What dimension do the local model's embeddings have?",
        ],
    ),
    (
        "What dimension does OpenAI's text-embedding-3-small use?",
        [
            "How many dimensions does text-embedding-3-small have?",
            "What is the embedding dimension for OpenAI text-embedding-3-small?",
        ],
    ),
    (
        "How do I run my first search?",
        [
            "How do I search after installing pgrag?",
            "What are the first steps to search my documents?",
        ],
    ),
    (
        "What information does each search hit carry?",
        [
            "What fields come with every search result?",
            "What does a search hit show besides its text?",
        ],
    ),
    (
        "What can pgrag ingest read?",
        [
            "Which inputs does pgrag ingest accept?",
            "Can pgrag ingest load URLs and folders?",
        ],
    ),
    (
        "How are chunks loaded into the database?",
        [
            "How does the ingester write chunks to Postgres?",
            "Does ingest use COPY to load the chunks?",
        ],
    ),
    (
        "How are PDF files read?",
        [
            "How does pgrag extract text from PDFs?",
            "Which library reads PDF files page by page?",
            "How is a PDF document read during ingestion?",
        ],
    ),
    (
        "What happens to tables in a PDF?",
        [
            "Are tables in PDFs kept?",
            "How does the extractor treat tables found on a PDF page?",
        ],
    ),
    (
        "What happens with encrypted or corrupt PDFs?",
        [
            "How are scanned or broken PDFs reported?",
            "Does an encrypted PDF stop the ingest run?",
        ],
    ),
    (
        "How does Markdown keep its heading path?",
        [
            "What heading path does a Markdown paragraph get?",
            "How are Markdown headings stored with the chunks?",
        ],
    ),
    (
        "What does HTML extraction remove?",
        [
            "What parts of an HTML page are dropped?",
            "Does the HTML extractor keep navigation and scripts?",
        ],
    ),
    (
        "How is plain text decoded?",
        [
            "What encoding is used for plain text files?",
            "How does pgrag read text files that are not UTF-8?",
        ],
    ),
    (
        "How does the default chunker split documents?",
        [
            "How does the structural chunker choose chunk boundaries?",
            "Where does the default chunker cut a document?",
        ],
    ),
    (
        "Can a chunk span two sections?",
        [
            "Do chunks ever cross section boundaries?",
            "Can one chunk contain text from two sections?",
        ],
    ),
    (
        "In what units are chunk sizes counted?",
        [
            "Are chunk sizes measured in characters or tokens?",
            "What unit is the chunk size in?",
        ],
    ),
    (
        "What is the default chunk size of the tokens chunker?",
        [
            "How big are chunks by default with the tokens chunker?",
            "What's the default size for the tokens chunker?",
        ],
    ),
    (
        "What is the default overlap of the words chunker?",
        [
            "How much overlap does the words chunker use by default?",
            "What overlap do words chunks have by default?",
        ],
    ),
    (
        "What happens when a document's content is unchanged?",
        [
            "Is an unchanged document re-embedded when ingested again?",
            "What does ingest do with a file whose hash did not change?",
        ],
    ),
    (
        "Which chunks are re-embedded when a document changes?",
        [
            "Does a changed document re-embed every chunk?",
            "When a document changes, which of its chunks get new embeddings?",
        ],
    ),
    (
        "Can a search see half of a replaced document?",
        [
            "Is a document replaced atomically?",
            "Could a search see a partly replaced document?",
        ],
    ),
    (
        "Who can run a release of the widget service?",
        [
            "Who is allowed to release the widget service?",
            "Which team can run a widget service release?",
        ],
    ),
    (
        "What is the first step of a release?",
        [
            "How does a release start?",
            "What do I do first when releasing?",
            "What is step one of the release process?",
        ],
    ),
    (
        "What must pass before deploying the release candidate?",
        [
            "Which checks run on the release candidate?",
            "What tests are run before the candidate is deployed?",
        ],
    ),
    (
        "How long do we watch staging after deploying the candidate?",
        [
            "How long is the error rate watched on staging?",
            "For how long is staging monitored after the candidate deploy?",
        ],
    ),
    (
        "Where is a new release announced?",
        [
            "Which channel announces a release?",
            "Where do we announce a release?",
        ],
    ),
    (
        "How do I roll back a bad deploy?",
        [
            "What do I do if the error rate rises after a deploy?",
            "How do I revert a release?",
            "How can a bad deployment be rolled back?",
        ],
    ),
    (
        "Why does the previous version keep working after a migration?",
        [
            "Why is a rollback safe with database migrations?",
            "Why can the old version still run after migrations are applied?",
        ],
    ),
    (
        "How does hybrid search fuse its rankings?",
        [
            "How are BM25 and vector results combined?",
            "How does hybrid search merge the keyword and vector rankings?",
        ],
    ),
    (
        "Are filters applied before or after fusion?",
        [
            "Where are filters applied in hybrid search?",
            "Does filtering happen inside each arm or after fusion?",
        ],
    ),
    (
        "Which filters does hybrid search support?",
        [
            "What can I filter search results by?",
            "What filters are available for hybrid search?",
        ],
    ),
    (
        "How many candidates does each arm fetch?",
        [
            "Does each arm fetch more candidates than it returns?",
            "How many results does each search arm retrieve?",
        ],
    ),
    (
        "How can I see why a chunk was chosen?",
        [
            "What explains why a result was returned?",
            "Does each result show its vector rank and keyword rank?",
        ],
    ),
]

# Questions that must not reuse any answer above: off the corpus's subjects, then near misses
# (the subjects above, another answer).
DIFFERENT: list[str] = [
    "What is the capital of France?",
    "How do I bake sourdough bread?",
    "Who won the 2018 football World Cup?",
    "How many hours of sunlight do tomato plants need?",
    "At what temperature does water boil at high altitude?",
    "How do I change a flat car tire?",
    "What is the population of Tokyo?",
    "How do I learn to play the guitar?",
    "What is a good recipe for pancakes?",
    "How far is the moon from the earth?",
    "What dimension does OpenAI's text-embedding-3-large use?",
    "How do I install pgrag on Windows?",
    "How are Word documents read?",
    "What happens to images in a PDF?",
    "How does the semantic chunker split documents?",
    "How long do we watch production after a release?",
    "Who approves a database migration?",
    "How do I delete a document from pgrag?",
    "How does a cross-encoder re-rank search results?",
    "How do I back up the embedded PostgreSQL database?",
]


class StandInChat:
    """A local OpenAI-compatible chat endpoint: after ``latency_ms``, answers each request with
    "Answer to: <the question>" (so a hit shows whose answer it reused), counting requests."""

    def __init__(self, latency_ms: float) -> None:
        self.latency_ms = latency_ms
        self.requests = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    outer.requests += 1
                time.sleep(outer.latency_ms / 1000)
                question = body["messages"][-1]["content"].rsplit("Question: ", 1)[-1]
                payload = json.dumps(
                    {
                        "id": "chatcmpl-bench",
                        "object": "chat.completion",
                        "created": 1700000000,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {
                                    "role": "assistant",
                                    "content": f"Answer to: {question} [Source 1]",
                                },
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 10},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def ingest_samples(db: str) -> None:
    from click.testing import CliRunner

    from pgrag.cli import main

    files = [str(ROOT / "samples" / name) for name in SAMPLES]
    result = CliRunner().invoke(main, ["--dsn", db, "ingest", *files])
    if result.exit_code != 0:
        raise SystemExit(f"ingest failed: {result.output}")


def retyped(question: str) -> str:
    """The same question typed again: lower case, no question mark."""
    return question.lower().rstrip("?")


def thresholds(db: str, embedder: LocalEmbedder) -> dict[str, Any]:
    """Phase 1: the 40 answers cached through SQL, every other question looked up at each
    similarity; the lookups timed."""
    import numpy as np

    settings = json.dumps({"benchmark": "thresholds"})
    base = [q for q, _ in QUESTIONS]
    paraphrases = [(p, q) for q, ps in QUESTIONS for p in ps]
    texts = base + [p for p, _ in paraphrases] + [retyped(q) for q in base] + DIFFERENT
    vectors = dict(zip(texts, embedder.embed(texts), strict=True))
    lookup_ms: list[float] = []
    with connect(db) as conn:
        for q in base:
            ctx = build_context(
                conn, q, ContextOptions(), tenant=TENANT, query_embedding=vectors[q]
            )
            with tenant_transaction(conn, TENANT):
                conn.execute(
                    "select public.answer_cache_store(%s, %s, %s, %s, %s)",
                    (q, vectors[q], f"Answer to: {q}", json.dumps(ctx.sources), settings),
                )

        def nearest(text: str, t: float) -> str | None:
            started = time.perf_counter()
            with tenant_transaction(conn, TENANT):
                row = conn.execute(
                    "select cached_question from public.answer_cache_lookup(%s, %s, %s)",
                    (vectors[text], settings, t),
                ).fetchone()
            lookup_ms.append((time.perf_counter() - started) * 1000)
            return row[0] if row else None

        (cached,) = conn.execute("select count(*) from pgrag.answer_cache").fetchone()  # type: ignore[misc]
        out: dict[str, Any] = {}
        for t in THRESHOLDS:
            found = {p: nearest(p, t) for p, _ in paraphrases}
            false = {d: nearest(d, t) for d in DIFFERENT}
            out[f"{t}"] = {
                "retyped_hits": sum(nearest(retyped(q), t) == q for q in base),
                "paraphrase_hits": sum(found[p] == q for p, q in paraphrases),
                "paraphrase_wrong_hits": [
                    [p, found[p]] for p, q in paraphrases if found[p] not in (None, q)
                ],
                "different_false_hits": [[d, q] for d, q in false.items() if q is not None],
            }

    def sim(a: str, b: str) -> float:
        return float(np.dot(vectors[a], vectors[b]))

    own = [sim(p, q) for p, q in paraphrases]
    diff = [max(sim(d, q) for q in base) for d in DIFFERENT]
    cross = [sim(a, b) for i, a in enumerate(base) for b in base[i + 1 :]]
    return {
        "cached_questions": cached,
        "by_threshold": out,
        "lookup_ms": latency_summary(lookup_ms) | {"n": len(lookup_ms), "entries": cached},
        "similarity": {
            "retyped_to_own_question_min": round(min(sim(retyped(q), q) for q in base), 3),
            "paraphrase_to_own_question": {
                "min": round(min(own), 3),
                "p10": round(float(np.percentile(own, 10)), 3),
                "median": round(statistics.median(own), 3),
                "p90": round(float(np.percentile(own, 90)), 3),
            },
            "different_to_nearest_question": {
                "median": round(statistics.median(diff), 3),
                "p90": round(float(np.percentile(diff, 90)), 3),
                "max": round(max(diff), 3),
            },
            "between_the_40_questions_max": round(max(cross), 3),
        },
    }


def end_to_end(db: str, similarity: float, chat: StandInChat) -> dict[str, Any]:
    """Phase 2: ``pgrag ask --cache --json`` in one process, each command timed."""
    from click.testing import CliRunner

    from pgrag.cli import main

    with connect(db) as conn:
        conn.execute("delete from pgrag.answer_cache")
        conn.execute("delete from pgrag.answer_cache_counters")
        conn.commit()
    runner = CliRunner()
    times: dict[str, list[float]] = {"hit": [], "miss": []}
    outcome = {"paraphrase_hits": 0, "paraphrase_wrong_hits": 0, "different_false_hits": 0}

    def ask(text: str) -> dict[str, Any]:
        started = time.perf_counter()
        result = runner.invoke(
            main,
            ["--dsn", db, "ask", text, "--cache", "--cache-similarity", str(similarity), "--json"],
        )
        elapsed = (time.perf_counter() - started) * 1000
        if result.exit_code != 0:
            raise SystemExit(f"ask failed: {result.output}")
        data: dict[str, Any] = json.loads(result.stdout)
        times["hit" if data.get("cached") else "miss"].append(elapsed)
        return data

    # Whose answer a hit reused: each stored answer names the question it was made for.
    group = {text: q for q, ps in QUESTIONS for text in (q, *ps)}
    for q, _ in QUESTIONS:
        ask(q)
    stored_requests = chat.requests
    for q, ps in QUESTIONS:
        for p in ps:
            data = ask(p)
            if data.get("cached"):
                answered = data["answer"].removeprefix("Answer to: ").removesuffix(" [Source 1]")
                own = group.get(answered) == q
                outcome["paraphrase_hits" if own else "paraphrase_wrong_hits"] += 1
    for d in DIFFERENT:
        outcome["different_false_hits"] += bool(ask(d).get("cached"))
    with connect(db) as conn:
        row = conn.execute(
            "select entries, lookups, hits, hit_rate from pgrag.answer_cache_stats(%s)", (TENANT,)
        ).fetchone()
    assert row is not None
    return {
        "similarity": similarity,
        **outcome,
        "chat_requests_for_the_40": stored_requests,
        "chat_requests_after": chat.requests - stored_requests,
        "stats": {"entries": row[0], "lookups": row[1], "hits": row[2], "hit_rate": row[3]},
        "latency_ms": {k: latency_summary(v) | {"n": len(v)} for k, v in times.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("PGRAG_DSN"))
    parser.add_argument("--chat-latency-ms", type=float, default=500.0)
    parser.add_argument("--similarity", type=float, default=DEFAULT_SIMILARITY)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    began = datetime.now(UTC)
    chat = StandInChat(args.chat_latency_ms)
    os.environ["OPENAI_BASE_URL"] = chat.base_url
    os.environ["OPENAI_API_KEY"] = "not-needed"
    os.environ.pop("PGRAG_CHAT_MODEL", None)
    with ExitStack() as stack:
        stack.callback(chat.server.shutdown)
        # A throwaway server unless --dsn names one: nothing is left running.
        dsn = args.dsn or stack.enter_context(temporary_cluster("pgrag-answer-cache-"))
        admin = admin_url(dsn)
        db = create_database(admin)
        stack.callback(drop_database, admin, db)
        Migrator(db).migrate(384)
        ingest_samples(db)
        by_threshold = thresholds(db, LocalEmbedder())
        e2e = end_to_end(db, args.similarity, chat)
        with connect(db) as conn:
            server = conn.execute("show server_version").fetchone()
    paraphrases = sum(len(ps) for _, ps in QUESTIONS)
    result = {
        "command": "python benchmarks/answer_cache.py",
        "measured_at": began.isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_at_end": list(os.getloadavg()),
        },
        "server_version": server[0] if server else None,
        "model": "all-MiniLM-L6-v2 (local, 384 dimensions)",
        "questions": len(QUESTIONS),
        "paraphrases": paraphrases,
        "different_questions": len(DIFFERENT),
        "chat_stand_in_latency_ms": args.chat_latency_ms,
        "default_similarity": DEFAULT_SIMILARITY,
        **by_threshold,
        "end_to_end": e2e,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
