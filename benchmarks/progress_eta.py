"""How right ``pgrag ingest``'s estimate of the time left is, on real runs.

Runs the real ``pgrag ingest --progress-json`` (the bundled local model; ``--int8`` sets
``PGRAG_LOCAL_PRECISION=int8`` to shorten the runs) in a child process on a fresh database,
reads each JSON progress event as it arrives (``PGRAG_PROGRESS_INTERVAL`` = ``--interval``) and
compares, for every event after the first ``--warmup`` seconds (60), the time left it
predicts (``left_s``) with the time that was actually left:

* ``small``: a folder of ``--files`` Markdown files of random sizes (``--min-kb`` to
  ``--max-kb``, log-uniform), ingested to the end: the time actually left after an event is
  the process's exit time minus the event's arrival time (the final database work included).
* ``large``: one generated Markdown file of ``--large-mb`` megabytes. Ingesting all of it
  would take longer than this shared machine can give, so the run is interrupted (Ctrl-C)
  after ``--large-seconds``. The file's chunks reach the embedder in order, so the run's end
  is extrapolated from what it did: the file is first chunked in this process with the same
  settings (``chunks_in_file``, the true total); after an event at time t with w chunks
  written, the time actually left is taken as (T - t) + (N - W) / r, where T and W are the
  time and chunks written of the last event before the interruption, N the true total and r
  = (W - w) / (T - t) the rate measured after the event. Only events followed by at least
  ``--warmup`` seconds of measured work are compared. The estimate's chunk total is also
  compared with the true total.

The ratio of an event is max(predicted / actual, actual / predicted); the worst ratio over the
compared events is what must stay within 2.

    python benchmarks/progress_eta.py [--int8] [--files 300] [--large-mb 50 --large-seconds 480]

``--only small|large`` runs one of them, keeping the other's results in the output file.
``--replay`` replays other estimates (:func:`replay`) on the raw events of the output's
interrupted runs, and records their worst ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from pgrag.install.migrator import Migrator
from pgrag.testing import create_database, server

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "progress_eta.json"
_WORDS: list[str] = []


def vocabulary() -> list[str]:
    """English words, most frequent first: the whole words of the bundled model's vocabulary
    (its ids follow frequency), so the text tokenizes as English prose does."""
    if not _WORDS:
        from tokenizers import Tokenizer

        from pgrag.pipeline.embedders import local_model_path

        vocab = Tokenizer.from_file(str(local_model_path() / "tokenizer.json")).get_vocab()
        ranked = sorted((i, w) for w, i in vocab.items() if w.isalpha() and w.islower())
        _WORDS.extend(w for _, w in ranked[:8000])
    return _WORDS


def paragraph(rng: np.random.Generator, words: list[str], cdf: np.ndarray) -> str:
    picked = np.searchsorted(cdf, rng.random(int(rng.integers(30, 160))))
    sentence = " ".join(words[i] for i in picked)
    return sentence[0].upper() + sentence[1:] + "."


def markdown(rng: np.random.Generator, size: int, title: str) -> str:
    """A Markdown text of about ``size`` bytes: sections of paragraphs and lists."""
    words = vocabulary()
    ranks = np.arange(1, len(words) + 1)
    cdf = np.cumsum(1 / ranks) / (1 / ranks).sum()  # Zipf-like, as in real text
    cdf[-1] = 1.0
    parts = [f"# {title}\n"]
    written = len(parts[0])
    section = 0
    while written < size:
        section += 1
        block = [f"## Section {section}: {' '.join(rng.choice(words, 3))}\n"]
        for _ in range(int(rng.integers(2, 7))):
            block.append(paragraph(rng, words, cdf) + "\n")
        if rng.random() < 0.3:
            block.append("\n".join(f"- {paragraph(rng, words, cdf)[:80]}" for _ in range(4)))
        text = "\n".join(block) + "\n"
        parts.append(text)
        written += len(text)
    return "\n".join(parts)


def write_markdown(path: Path, size: int, rng: np.random.Generator) -> None:
    """One large Markdown file of about ``size`` bytes, written a megabyte at a time."""
    with path.open("w") as handle:
        done = 0
        part = 0
        while done < size:
            part += 1
            text = markdown(rng, min(2**20, size - done), f"Manual part {part}")
            handle.write(text + "\n")
            done += len(text) + 1


def write_small_files(folder: Path, n: int, min_kb: float, max_kb: float) -> int:
    rng = np.random.default_rng(11)
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(n):
        size = int(1024 * math.exp(rng.uniform(math.log(min_kb), math.log(max_kb))))
        text = markdown(rng, size, f"Note {i}")
        (folder / f"note{i:04d}.md").write_text(text)
        total += len(text.encode())
    return total


def chunks_in(path: Path) -> int:
    """The chunks ``pgrag ingest`` makes of ``path`` with its default settings."""
    from pgrag.pipeline.chunking import chunk_settings, make_chunker, token_counter
    from pgrag.pipeline.embedders import get_embedder
    from pgrag.pipeline.extract import extract

    embedder = get_embedder(None, None, 384)
    size, overlap = chunk_settings("tokens", embedder.max_tokens, embedder.model_name, None, None)
    chunker = make_chunker(
        "tokens",
        token_counter(embedder),
        size,
        overlap,
        "english",
        max_tokens=embedder.max_tokens - 2,
    )
    return sum(1 for _ in chunker.chunks(extract(str(path)).blocks))


def run_ingest(
    dsn: str, target: Path, env: dict[str, str], stop_after: float | None
) -> dict[str, Any]:
    """``pgrag ingest TARGET --progress-json`` in a child; its events with arrival times."""
    command = [sys.executable, "-c", "from pgrag.cli import main; main()"]
    command += ["--dsn", dsn, "ingest", str(target), "--progress-json", "--json"]
    started = time.monotonic()
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a job started in the background ignores SIGINT, and so would the child: restore it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    events: list[dict[str, Any]] = []
    other: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            now = time.monotonic() - started
            if line.startswith("{"):
                event = json.loads(line)
                event["t"] = round(now, 2)
                events.append(event)
            else:
                other.append(line.rstrip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    interrupted = False
    while proc.poll() is None:
        time.sleep(0.2)
        if stop_after is not None and not interrupted and time.monotonic() - started > stop_after:
            proc.send_signal(signal.SIGINT)
            interrupted = True
    ended = time.monotonic() - started
    reader.join(timeout=10)
    stdout = proc.stdout.read() if proc.stdout else ""
    return {
        "events": events,
        "ended": round(ended, 2),
        "status": proc.returncode,
        "interrupted": interrupted,
        "summary": json.loads(stdout) if stdout.strip().startswith("{") else None,
        "messages": other[-5:],
    }


def ratio(predicted: float, actual: float) -> float:
    predicted, actual = max(predicted, 0.05), max(actual, 0.05)
    return max(predicted / actual, actual / predicted)


def dump(result: dict[str, Any]) -> str:
    """JSON with each innermost list (an event, a point) on one line."""
    text = json.dumps(result, indent=1)
    return re.sub(r"\[[^\[\]{}]*\]", lambda m: re.sub(r"\s+", " ", m.group(0)), text) + "\n"


def brief(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k not in ("points", "events")}


def compact(run: dict[str, Any]) -> list[list[Any]]:
    """Each event as [t, chunks done, written, total, left_s]: to try other estimates."""
    return [
        [e["t"], e["chunks_done"], e["chunks_written"], e["chunks_total"], e["left_s"]]
        for e in run["events"]
    ]


def compare_complete(run: dict[str, Any], warmup: float) -> dict[str, Any]:
    """Each event after ``warmup`` s: predicted vs actual time left (to the process's exit)."""
    points = []
    missing = 0
    for e in run["events"]:
        if e["done"] or e["t"] < warmup:
            continue
        if e["left_s"] is None:
            missing += 1
            continue
        actual = run["ended"] - e["t"]
        points.append([e["t"], e["left_s"], round(actual, 1), round(ratio(e["left_s"], actual), 3)])
    done = [e for e in run["events"] if e["done"]]
    return {
        "seconds": run["ended"],
        "events_compared": len(points),
        "events_without_estimate": missing,
        "worst_ratio": max((p[3] for p in points), default=None),
        "median_ratio": float(np.median([p[3] for p in points])) if points else None,
        "finish_after_last_event_s": round(run["ended"] - done[-1]["t"], 1) if done else None,
        "chunks": done[-1]["chunks_written"] if done else None,
        "points": points,
    }


def compare_truncated(run: dict[str, Any], warmup: float, true_total: int) -> dict[str, Any]:
    """Events of an interrupted run against its extrapolated end (see the module docstring)."""
    events = [e for e in run["events"] if not e["done"] and e["chunks_written"] is not None]
    last = events[-1]
    t_last, w_last = last["t"], last["chunks_written"]
    points = []
    totals = []
    missing = 0
    for e in events:
        if e["t"] < warmup or t_last - e["t"] < warmup:
            continue
        if e["left_s"] is None:
            missing += 1
            continue
        rate = (w_last - e["chunks_written"]) / (t_last - e["t"])
        actual = (t_last - e["t"]) + (true_total - w_last) / rate
        points.append([e["t"], e["left_s"], round(actual, 1), round(ratio(e["left_s"], actual), 3)])
        totals.append(e["chunks_total"] / true_total)
    return {
        "seconds_run": t_last,
        "chunks_in_file": true_total,
        "chunks_written_at_stop": w_last,
        "rate_at_stop": last["chunks_per_s"],
        "events_compared": len(points),
        "events_without_estimate": missing,
        "worst_ratio": max((p[3] for p in points), default=None),
        "median_ratio": float(np.median([p[3] for p in points])) if points else None,
        "chunk_total_estimate_vs_true": [round(min(totals), 3), round(max(totals), 3)]
        if totals
        else None,
        "points": points,
    }


def replay(run: dict[str, Any], warmup: float) -> dict[str, float]:
    """Other estimates of the time left, replayed from an interrupted run's raw events and
    compared as :func:`compare_truncated` does: the worst ratio of each (the chunks left over
    the rate in the last 1, 2 or 5 minutes, or an exponential average over 5 minutes)."""
    events = [e for e in run["events"] if e[2] is not None]
    first, (t_stop, w_stop) = events[0], events[-1][0:3:2]
    true_total = run["chunks_in_file"]

    def windowed(i: int, window: float) -> float:
        t, done, written, total, _ = events[i]
        j = max(k for k in range(i + 1) if events[k][0] <= max(t - window, first[0]))
        return float((total - written) / ((done - events[j][1]) / (t - events[j][0])))

    averaged: list[float] = []
    rate = 0.0
    for i, (t, done, written, total, _) in enumerate(events):
        if i == 0:
            averaged.append(math.inf)
            continue
        dt = t - events[i - 1][0]
        now = (done - events[i - 1][1]) / dt
        if i == 1:
            rate = now
        rate += (now - rate) * (1 - math.exp(-dt / 300))
        averaged.append((total - written) / rate if rate > 0 else math.inf)
    estimates: dict[str, Callable[[int], float]] = {
        "window_60s": lambda i: windowed(i, 60),
        "window_120s": lambda i: windowed(i, 120),
        "window_300s": lambda i: windowed(i, 300),
        "ewma_300s": lambda i: averaged[i],
    }
    worst = {}
    for name, estimate in estimates.items():
        ratios = []
        for i, (t, _, written, _, _) in enumerate(events):
            if t < warmup or t_stop - t < warmup:
                continue
            rate_after = (w_stop - written) / (t_stop - t)
            ratios.append(ratio(estimate(i), (t_stop - t) + (true_total - w_stop) / rate_after))
        worst[name] = round(max(ratios), 2)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--min-kb", type=float, default=2)
    parser.add_argument("--max-kb", type=float, default=48)
    parser.add_argument("--large-mb", type=float, default=50)
    parser.add_argument("--large-seconds", type=float, default=480)
    parser.add_argument("--interval", type=float, default=5)
    parser.add_argument("--warmup", type=float, default=60)
    parser.add_argument("--int8", action="store_true", help="PGRAG_LOCAL_PRECISION=int8")
    parser.add_argument("--only", choices=["small", "large"], default=None)
    parser.add_argument(
        "--replay", action="store_true", help="only replay other estimates on the output's runs"
    )
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.replay:
        saved = json.loads(args.out.read_text())
        for run in saved["runs"].values():
            if "events" in run and "chunks_in_file" in run:
                run["replayed_worst_ratio"] = replay(run, saved["warmup_s"])
        args.out.write_text(dump(saved))
        return
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PGRAG_PROGRESS_INTERVAL": str(args.interval),
    }
    if args.int8:
        env["PGRAG_LOCAL_PRECISION"] = "int8"
        os.environ["PGRAG_LOCAL_PRECISION"] = "int8"
    result: dict[str, Any] = {
        "command": "python benchmarks/progress_eta.py " + " ".join(sys.argv[1:]),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_head": head,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "precision": "int8" if args.int8 else "fp32",
        "interval_s": args.interval,
        "warmup_s": args.warmup,
        "runs": {},
    }
    with server(args.admin_dsn, "pgrag-eta-") as admin, tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "small"):
            folder = Path(tmp) / "notes"
            size = write_small_files(folder, args.files, args.min_kb, args.max_kb)
            dsn = create_database(admin)
            Migrator(dsn).migrate(384)
            run = run_ingest(dsn, folder, env, None)
            small = compare_complete(run, args.warmup)
            small.update(files=args.files, bytes=size, status=run["status"], events=compact(run))
            result["runs"]["small"] = small
            print("small", brief(small), flush=True)
        if args.only in (None, "large"):
            path = Path(tmp) / "manual.md"
            write_markdown(path, int(args.large_mb * 2**20), np.random.default_rng(5))
            started = time.perf_counter()
            true_total = chunks_in(path)
            chunking = time.perf_counter() - started
            dsn = create_database(admin)
            Migrator(dsn).migrate(384)
            run = run_ingest(dsn, path, env, args.large_seconds)
            large = compare_truncated(run, args.warmup, true_total)
            large.update(
                replayed_worst_ratio=replay({**large, "events": compact(run)}, args.warmup),
                bytes=path.stat().st_size,
                chunking_s=round(chunking, 1),
                status=run["status"],
                events=compact(run),
            )
            result["runs"]["large"] = large
            print("large", brief(large), flush=True)
    for run in result["runs"].values():  # each run says how it was made
        run.update(
            command=result["command"],
            measured_at=result["measured_at"],
            git_head=head,
            machine=result["machine"],
            precision=result["precision"],
        )
    if args.only and args.out.exists():  # one run again: keep the other's results
        kept = json.loads(args.out.read_text())
        result["runs"] = {**kept.get("runs", {}), **result["runs"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dump(result))


if __name__ == "__main__":
    main()
