"""Progress of long work, on stderr: a live bar on a terminal, periodic lines elsewhere.

On a terminal a rich bar moves with the work (documents done, plus a counter such as chunks
embedded that moves per batch); in a pipe, a log or CI, one line every ``interval`` seconds
(env PGRAG_PROGRESS_INTERVAL, default 10) says how far the work is and how long it should
still take. Safe to update from several threads.

Work measured in chunks as well as documents (``pgrag ingest``) reports chunks: those done
(embedded, or needing no embedding) of those planned, i.e. chunked so far plus an estimate of
the rest (``~``) while sources are still being read, and estimates the time left from the
chunk rate, so one large document shows movement and a sane estimate rather than "0/1".

Mode ``json`` (``--progress-json``) writes the same figures for scripts: one JSON object per line
on stderr, every ``interval`` seconds and once at the end (``"done": true``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
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
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0.0
        self.counters: dict[str, int] = {}
        self.chunks = 0  # chunks done (embedded, or needing no embedding)
        self.chunks_planned = 0  # chunks known so far (chunked)
        self.chunks_estimate: int | None = None  # all the run's chunks, estimated
        self.chunks_started: float | None = None  # when the first chunk was done
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
        self.json = mode == "json"
        if mode == "off":
            return
        if sys.stderr.isatty() and mode in ("auto", "bar"):
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import (
                Progress as RichProgress,
            )

            self.bar = RichProgress(
                TextColumn(f"[bold]{label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
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
        if self.json:
            with self.lock:
                self._print_event(time.monotonic(), done=True)

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
                self.chunks_started = time.monotonic()
            self.chunks += n
            self._show(None)

    def _chunk_total(self) -> tuple[int, bool]:
        """Chunks to do in all, and whether that is an estimate."""
        estimate = self.chunks_estimate
        if estimate is not None and estimate > self.chunks_planned:
            return estimate, True
        return max(self.chunks_planned, self.chunks), False

    def _chunks_left(self, now: float) -> float | None:
        """Seconds left at the chunk rate so far (None before any chunk was done)."""
        total, _ = self._chunk_total()
        if self.chunks_started is None or not self.chunks or not total:
            return None
        rate = self.chunks / max(now - self.chunks_started, 1e-3)
        return max(total - self.chunks, 0) / rate

    def _chunk_text(self) -> str:
        total, estimated = self._chunk_total()
        percent = f" ({100 * self.chunks / total:.0f} %)" if total else ""
        return f"{self.chunks}/{'~' if estimated else ''}{total} chunks embedded{percent}"

    def _counters(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return ", ".join(
            f"{value} {name} ({value / elapsed:.1f}/s)" for name, value in self.counters.items()
        )

    def _show(self, description: str | None) -> None:
        if self.bar is not None:
            text = self._counters()
            if self.chunks_planned:  # the bar moves with chunks; documents beside it
                total, estimated = self._chunk_total()
                where = f"{int(self.done)}/{self.total} {self.unit}" if self.total else ""
                text = ", ".join(t for t in (where, "~" if estimated else "", text) if t)
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
        parts = [self._chunk_text(), where] if self.chunks_planned else [where]
        if self.counters:
            parts.append(self._counters())
        parts.append(f"elapsed {_clock(elapsed)}")
        left = self._chunks_left(now) if self.chunks_planned else None
        if left is not None:
            parts.append(f"about {_clock(left)} left")
        elif self.total and self.done > 0 and not self.chunks_planned:
            parts.append(f"about {_clock(elapsed * (self.total - self.done) / self.done)} left")
        print(f"{self.label}: {', '.join(parts)}", file=sys.stderr, flush=True)

    def _print_event(self, now: float, *, done: bool) -> None:
        """One JSON line: units and chunks done of their totals, counters, seconds elapsed and
        (while running) the estimate of the seconds left."""
        total, estimated = self._chunk_total()
        left = self._chunks_left(now) if self.chunks_planned else None
        if left is None and self.total and self.done > 0 and not self.chunks_planned:
            left = (now - self.started) * (self.total - self.done) / self.done
        event = {
            "event": "progress",
            "label": self.label,
            self.unit: int(self.done),
            f"{self.unit}_total": self.total,
            "chunks_embedded": self.chunks if self.chunks_planned else None,
            "chunks_total": total if self.chunks_planned else None,
            "chunks_total_estimated": estimated if self.chunks_planned else None,
            "counters": dict(self.counters),
            "elapsed_s": round(now - self.started, 1),
            "left_s": None if done or left is None else round(left, 1),
            "done": done,
        }
        print(json.dumps(event), file=sys.stderr, flush=True)
