"""Progress lines on stderr when several threads report: whole lines, and none after the end."""

from __future__ import annotations

import contextlib
import io

import pytest

from pgrag.progress import Progress


class Writes(io.StringIO):
    """stderr that keeps each write apart (a non-terminal: progress prints lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, s: str) -> int:
        self.calls.append(s)
        return super().write(s)


@pytest.mark.parametrize("mode", ["lines", "json"])
def test_each_progress_line_is_one_write_ending_in_a_newline(mode: str) -> None:
    stderr = Writes()
    with (
        contextlib.redirect_stderr(stderr),
        Progress("ingest", 3, mode, interval=0) as progress,  # type: ignore[arg-type]
    ):
        progress.plan_chunks(10, 30)
        progress.chunks_done(4)
        progress.advance(1)

    assert len(stderr.calls) >= 3
    assert all(call.endswith("\n") and call.count("\n") == 1 for call in stderr.calls)


def test_a_report_after_the_progress_ended_prints_nothing() -> None:
    stderr = Writes()
    with contextlib.redirect_stderr(stderr):
        progress = Progress("ingest", 3, "lines", interval=0)
        with progress:
            progress.advance(1)
        printed = stderr.getvalue()

        progress.chunks_done(8)  # an embedding thread still finishing after an interruption
        progress.advance(1)

    assert printed.startswith("ingest: 1/3 documents")
    assert stderr.getvalue() == printed
