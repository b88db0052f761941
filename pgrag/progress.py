"""Progress of long work, on stderr: a live bar on a terminal, periodic lines elsewhere.

On a terminal a rich bar moves with the work (documents done, plus a counter such as chunks
embedded that moves per batch); in a pipe, a log or CI, one line every ``interval`` seconds
(env PGRAG_PROGRESS_INTERVAL, default 10) says how far the work is and how long it should
still take. Safe to update from several threads.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Literal

ProgressMode = Literal["auto", "bar", "lines", "off"]
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

    def _counters(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return ", ".join(
            f"{value} {name} ({value / elapsed:.1f}/s)" for name, value in self.counters.items()
        )

    def _show(self, description: str | None) -> None:
        if self.bar is not None:
            text = self._counters()
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
        elapsed = now - self.started
        done = int(self.done)
        if self.total:
            where = f"{done}/{self.total} {self.unit} ({100 * self.done / self.total:.0f} %)"
        else:
            where = f"{done} {self.unit}"
        parts = [where]
        if self.counters:
            parts.append(self._counters())
        parts.append(f"elapsed {_clock(elapsed)}")
        if self.total and self.done > 0:
            parts.append(f"about {_clock(elapsed * (self.total - self.done) / self.done)} left")
        print(f"{self.label}: {', '.join(parts)}", file=sys.stderr, flush=True)
