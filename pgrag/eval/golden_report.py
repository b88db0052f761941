"""The golden-set report: means per metric (per mode for retrieval), per-question results, and
the thresholds that gate CI (``--min METRIC=VALUE``, ``--max-errors N``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pgrag.errors import ConfigError, PgragError
from pgrag.eval.golden import GoldenQuestion
from pgrag.eval.golden_answers import ANSWER_METRICS, AnswerResult
from pgrag.eval.golden_retrieval import RETRIEVAL_METRICS, QuestionRetrieval

METRICS = (*RETRIEVAL_METRICS, *ANSWER_METRICS)


class BelowThreshold(PgragError):
    """A golden-set metric fell below its ``--min`` threshold, or more questions than
    ``--max-errors`` could not be judged (docs/cli.md, "Golden-set evaluation")."""

    exit_code = 5


def parse_threshold(spec: str) -> tuple[str, float]:
    """``METRIC=VALUE`` with a known metric and a value from 0 to 1."""
    name, sep, raw = spec.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in METRICS:
        raise ConfigError(
            f"--min {spec!r}: use METRIC=VALUE with METRIC one of {', '.join(METRICS)}."
        )
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"--min {spec!r}: {raw!r} is no number.") from None
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise ConfigError(f"--min {spec!r}: a threshold is a number from 0 to 1.")
    return name, value


def _mean(values: Sequence[float | None]) -> float | None:
    scored = [v for v in values if v is not None]
    return sum(scored) / len(scored) if scored else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass
class GoldenReport:
    """Everything one ``pgrag eval --golden`` run measured."""

    path: str
    questions: list[GoldenQuestion]
    k: int
    retrieval: dict[str, list[QuestionRetrieval]] = field(default_factory=dict)
    answers: list[AnswerResult] | None = None
    chat_model: str | None = None
    judge_model: str | None = None
    thresholds: dict[str, float] = field(default_factory=dict)
    max_errors: int = 0

    def retrieval_means(self) -> dict[str, dict[str, float | None]]:
        return {
            mode: {m: _mean([r.metrics[m] for r in rows]) for m in RETRIEVAL_METRICS}
            for mode, rows in self.retrieval.items()
        }

    @property
    def failed(self) -> list[AnswerResult]:
        return [a for a in self.answers or [] if a.error is not None]

    def answer_means(self) -> dict[str, float | None]:
        ok = [a for a in self.answers or [] if a.error is None]
        return {m: _mean([a.scores.get(m) for a in ok]) for m in ANSWER_METRICS}

    def checks(self) -> list[dict[str, Any]]:
        """Each threshold against each figure it applies to (every mode for a retrieval
        metric), and the unjudged questions against ``max_errors``."""
        out: list[dict[str, Any]] = []
        means = self.retrieval_means()
        answers = self.answer_means()
        for metric, minimum in self.thresholds.items():
            figures: list[tuple[str | None, float | None]]
            if metric in RETRIEVAL_METRICS:
                figures = [(mode, means[mode][metric]) for mode in means]
            else:
                figures = [(None, answers[metric])]
            for mode, value in figures:
                passed = value is not None and value >= minimum
                out.append(
                    {
                        "metric": metric,
                        "mode": mode,
                        "min": minimum,
                        "value": _round(value),
                        "passed": passed,
                    }
                )
        if self.answers is not None:
            failed = len(self.failed)
            out.append(
                {
                    "metric": "errors",
                    "mode": None,
                    "max": self.max_errors,
                    "value": failed,
                    "passed": failed <= self.max_errors,
                }
            )
        return out

    def failures(self) -> list[str]:
        """One phrase per unmet check, e.g. ``hit_rate 0.7500 < 0.8 (keyword)``."""
        lines = []
        for c in self.checks():
            if c["passed"]:
                continue
            if c["metric"] == "errors":
                lines.append(f"{c['value']} questions not judged > --max-errors {c['max']}")
                continue
            value = "not measured" if c["value"] is None else f"{c['value']:.4f}"
            mode = f" ({c['mode']})" if c["mode"] else ""
            lines.append(f"{c['metric']} {value} < {c['min']:g}{mode}")
        return lines

    def gate(self) -> None:
        """:class:`BelowThreshold` naming every unmet check, if any."""
        failures = self.failures()
        if failures:
            raise BelowThreshold("golden set below threshold: " + "; ".join(failures) + ".")

    def as_dict(self) -> dict[str, Any]:
        retrieval_means = self.retrieval_means()
        summary: dict[str, Any] = {
            "questions": len(self.questions),
            "k": self.k,
            "retrieval": {
                mode: {
                    **{m: _round(v) for m, v in means.items()},
                    "questions": len(self.retrieval[mode]),
                }
                for mode, means in retrieval_means.items()
            },
            "answers": None,
        }
        if self.answers is not None:
            summary["answers"] = {
                **{m: _round(v) for m, v in self.answer_means().items()},
                "chat_model": self.chat_model,
                "judge_model": self.judge_model,
                "judged": len(self.answers) - len(self.failed),
                "failed": len(self.failed),
            }
        checks = self.checks()
        return {
            "golden": self.path,
            "summary": summary,
            "thresholds": checks,
            "passed": all(c["passed"] for c in checks),
            "questions": [self._question(q) for q in self.questions],
        }

    def _question(self, q: GoldenQuestion) -> dict[str, Any]:
        row: dict[str, Any] = {
            "id": q.id,
            "line": q.line,
            "tenant": q.tenant,
            "question": q.question,
            "expected": q.expected,
            "retrieval": {
                mode: r.as_dict(self.k)
                for mode, rows in self.retrieval.items()
                for r in rows
                if r.question.id == q.id
            },
        }
        if self.answers is not None:
            row["answer"] = next(a.as_dict() for a in self.answers if a.question.id == q.id)
        return row
