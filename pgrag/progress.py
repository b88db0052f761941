"""Progress of long work, on stderr: a live bar on a terminal, periodic lines elsewhere.

On a terminal a rich bar moves with the work (documents done, plus a counter such as chunks
embedded that moves per batch); in a pipe, a log or CI, one line every ``interval`` seconds
(env PGRAG_PROGRESS_INTERVAL, default 10) says how far the work is and how long it should
still take. Safe to update from several threads: each line is one write, so a line from a
thread that is still finishing never splits another's (the final ``Error: ...`` of an
interrupted run), and once the ``with`` block has ended the progress prints nothing more.

Work measured in chunks as well as documents (``pgrag ingest``, ``pgrag import``) reports
chunks: those done (ingest: embedded, or needing no embedding; import: rows read and checked)
of those planned, i.e. chunked so far plus an estimate of the rest (``~``) while sources are
still being read, and those written to the database. The time left is the chunks not yet
written divided by the rate at which chunks got done since the first ones (the first batch,
which includes the model's warm-up, is not counted), so one large document shows movement and a
sane estimate rather than "0/1", and the last batches' writing is included.

Mode ``json`` (``--progress-json``) writes the same figures for scripts: one JSON object per line
on stderr, every ``interval`` seconds and once at the end (``"done": true``); the fields are
listed in docs/cli.md ("Progress").
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

ProgressMode = Literal["auto", "bar", "lines", "json", "off"]
DEFAULT_INTERVAL = 10.0


def progress_mode(enabled: bool | None) -> ProgressMode:
    """``--progress`` (True): always report; ``--no-progress`` (False): never; None: auto."""
    if enabled is None:
        return "auto"
    return "auto" if enabled else "off"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _write_line(line: str) -> None:
    """``line`` on stderr in one write (``print`` writes the text and the newline apart, and
    another thread's message could land between them)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class Progress:
    """Progress of ``label`` over ``total`` units (None when unknown), plus free counters."""

    def __init__(
        self,
        label: str,
        total: int | None,
        mode: ProgressMode = "auto",
        *,
        unit: str = "documents",
        interval: float | None = None,
        chunks_done_as: str = "chunks embedded",
        writes_trail: bool = True,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0.0
        self.counters: dict[str, int] = {}
        self.chunks = 0  # chunks done (embedded, or needing no embedding; import: rows read)
        self.chunks_done_as = chunks_done_as  # what a chunk done is, in the lines
        self.chunks_planned = 0  # chunks known so far (chunked)
        self.chunks_estimate: int | None = None  # all the run's chunks, estimated
        self.chunks_started: float | None = None  # when the first chunks were done
        self.chunks_first = 0  # how many: not counted in the rate (done before that time)
        self.written: int | None = None  # chunks written to the database, once reported
        # Every chunk done is written after it (ingest's loader): the time left includes the
        # writing of those done but not written. Else (import) a chunk done is settled.
        self.writes_trail = writes_trail
        self.interval = (
            interval
            if interval is not None
            else float(os.environ.get("PGRAG_PROGRESS_INTERVAL", DEFAULT_INTERVAL))
        )
        self.started = time.monotonic()
        self.last_line = self.started
        self.lock = threading.Lock()
        self.bar: Any = None
        self.task: Any = None
        self.lines = False
        self.closed = False  # the with block ended: nothing more is printed
        self.json = mode == "json"
        if mode == "off":
            return
        if sys.stderr.isatty() and mode in ("auto", "bar"):
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import (
                Progress as RichProgress,
            )

            self.bar = RichProgress(
                TextColumn(f"[bold]{label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}", style="dim"),
                transient=True,
            )
            self.task = self.bar.add_task("", total=total)
        else:
            self.lines = True

    def __enter__(self) -> Progress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
        with self.lock:
            if self.json:
                self._print_event(time.monotonic(), done=True)
            self.closed = True

    def advance(self, n: float = 1, description: str | None = None) -> None:
        """``n`` more units done."""
        with self.lock:
            self.done += n
            self._show(description)

    def count(self, name: str, n: int) -> None:
        """Add ``n`` to the counter ``name`` (shown beside the units, e.g. chunks embedded)."""
        with self.lock:
            self.counters[name] = self.counters.get(name, 0) + n
            self._show(None)

    def plan_chunks(self, n: int, estimate: int | None = None) -> None:
        """``n`` more chunks to do; ``estimate``: all the run's chunks, when one can be made."""
        with self.lock:
            self.chunks_planned += n
            self.chunks_estimate = estimate
            self._show(None)

    def expect_chunks(self, total: int | None, estimated: bool = False) -> None:
        """The run's chunks are known before they are read (import: the rows of a file, or a
        table's row estimate); None: not known."""
        if total is None:
            return
        with self.lock:
            if estimated:
                self.chunks_estimate = total
            else:
                self.chunks_planned = total
            self._show(None)

    def chunks_written(self, n: int) -> None:
        """``n`` more chunks written to the database (staged or swapped in)."""
        with self.lock:
            self.written = (self.written or 0) + n
            self._show(None)

    def forget_chunks(self, planned: int, done: int) -> None:
        """A failed document's chunks: ``planned`` of them, ``done`` already counted."""
        with self.lock:
            self.chunks_planned -= planned
            self.chunks -= done
            self._show(None)

    def chunks_done(self, n: int) -> None:
        """``n`` more chunks done."""
        if n <= 0:
            return
        with self.lock:
            if self.chunks_started is None:
                self.chunks_started, self.chunks_first = time.monotonic(), n
            self.chunks += n
            self._show(None)

    def _chunk_total(self) -> tuple[int, bool]:
        """Chunks to do in all, and whether that is an estimate."""
        estimate = self.chunks_estimate
        if estimate is not None and estimate > max(self.chunks_planned, self.chunks):
            return estimate, True  # (an estimate passed by the chunks done is no longer one)
        return max(self.chunks_planned, self.chunks), False

    def _chunk_rate(self, now: float) -> float | None:
        """Chunks done a second since the first ones (None until a second batch is done)."""
        if self.chunks_started is None or self.chunks <= self.chunks_first:
            return None
        return (self.chunks - self.chunks_first) / max(now - self.chunks_started, 1e-3)

    def _chunks_left(self, now: float) -> float | None:
        """Seconds left: the chunks not yet written (``writes_trail``, once writes are
        reported), else not yet done, at the chunk rate so far; None before a rate is known."""
        total, _ = self._chunk_total()
        rate = self._chunk_rate(now)
        if rate is None or not total:
            return None
        settled = self.chunks
        if self.writes_trail and self.written is not None:
            settled = min(self.written, total)
        pending = total - settled
        return max(pending, 0) / rate

    def _chunk_text(self) -> str:
        total, estimated = self._chunk_total()
        percent = f" ({100 * self.chunks / total:.0f} %)" if total else ""
        text = f"{self.chunks}/{'~' if estimated else ''}{total} {self.chunks_done_as}{percent}"
        if self.written is not None:
            text += f", {self.written} written"
        return text

    def _counters(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return ", ".join(
            f"{value} {name} ({value / elapsed:.1f}/s)" for name, value in self.counters.items()
        )

    def _by_chunks(self) -> bool:
        """Whether the work is measured in chunks (some planned, or an estimate given)."""
        return bool(self.chunks_planned) or self.chunks_estimate is not None

    def _left(self, now: float) -> float | None:
        """Seconds left: from chunks when measured in chunks, else from the units done."""
        if self._by_chunks():
            return self._chunks_left(now)
        if self.total and self.done > 0:
            return (now - self.started) * (self.total - self.done) / self.done
        return None

    def _show(self, description: str | None) -> None:
        if self.closed:
            return
        if self.bar is not None:
            text = self._counters()
            left = self._left(time.monotonic())
            if left is not None:
                text = ", ".join(t for t in (text, f"about {_clock(left)} left") if t)
            if self._by_chunks():  # the bar moves with chunks; documents and writes beside it
                total, estimated = self._chunk_total()
                where = f"{int(self.done)}/{self.total} {self.unit}" if self.total else ""
                wrote = f"{self.written} written" if self.written is not None else ""
                text = ", ".join(t for t in ("~" if estimated else "", wrote, where, text) if t)
                if description:
                    text = f"{text}  {description}" if text else description
                self.bar.update(self.task, completed=self.chunks, total=total, description=text)
                return
            if description:
                text = f"{text}  {description}" if text else description
            self.bar.update(self.task, completed=self.done, description=text)
            return
        if not self.lines:
            return
        now = time.monotonic()
        if now - self.last_line < self.interval:
            return
        self.last_line = now
        if self.json:
            self._print_event(now, done=False)
            return
        elapsed = now - self.started
        done = int(self.done)
        if self.total:
            where = f"{done}/{self.total} {self.unit} ({100 * self.done / self.total:.0f} %)"
        else:
            where = f"{done} {self.unit}"
        parts = [self._chunk_text(), where] if self._by_chunks() else [where]
        if self.counters:
            parts.append(self._counters())
        parts.append(f"elapsed {_clock(elapsed)}")
        left = self._left(now)
        if left is not None:
            parts.append(f"about {_clock(left)} left")
        _write_line(f"{self.label}: {', '.join(parts)}")

    def _print_event(self, now: float, *, done: bool) -> None:
        """One JSON line (fields: docs/cli.md, "Progress"): units and chunks done of their
        totals, chunks written, counters, seconds elapsed and, while running, the estimate of
        the seconds left and of the time the work ends."""
        by_chunks = self._by_chunks()
        total, estimated = self._chunk_total()
        left = None if done else self._left(now)
        rate = self._chunk_rate(now) if by_chunks else None
        eta = None
        if left is not None:
            eta = (datetime.now(UTC) + timedelta(seconds=left)).isoformat(timespec="seconds")
        embedding = by_chunks and self.chunks_done_as == "chunks embedded"
        event = {
            "event": "progress",
            "label": self.label,
            self.unit: int(self.done),
            f"{self.unit}_total": self.total,
            "chunks_done": self.chunks if by_chunks else None,
            "chunks_embedded": self.chunks if embedding else None,
            "chunks_written": self.written,
            "chunks_total": total if by_chunks else None,
            "chunks_total_estimated": estimated if by_chunks else None,
            "chunks_per_s": None if rate is None else round(rate, 1),
            "counters": dict(self.counters),
            "elapsed_s": round(now - self.started, 1),
            "left_s": None if left is None else round(left, 1),
            "eta": eta,
            "done": done,
        }
        _write_line(json.dumps(event))
