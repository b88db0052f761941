"""What a check found: a verdict per sentence, and the answer's overall confidence.

Overall confidence (docs/cli.md, "Checked answers"): the share of the answer's checked (not
exempt) sentences that are supported, times the judge's own confidence for the LLM checker, and
0 when the judge says the answer is not faithful. An answer with no sentence to check has the
judge's confidence (LLM) or 1 (local). The answer is withheld when the confidence is below the
threshold (``--min-confidence``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SentenceVerdict:
    """One sentence of the answer, the sources it cites, and whether they support it.

    ``score`` is the support measured (the local checker's best cosine similarity or
    cross-encoder score; None for the LLM checker and for exempt or uncited sentences)."""

    sentence: str
    sources: tuple[int, ...]
    supported: bool
    score: float | None
    reason: str
    exempt: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "sentence": self.sentence,
            "sources": list(self.sources),
            "supported": self.supported,
            "exempt": self.exempt,
            "score": None if self.score is None else round(self.score, 4),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class CheckResult:
    """A checked answer: verdicts, confidence, and whether it is shown."""

    checker: str
    model: str
    verdicts: list[SentenceVerdict]
    confidence: float
    min_confidence: float
    faithful: bool | None = None  # the judge's verdict (LLM checker)
    unsupported_claims: list[str] = field(default_factory=list)  # the judge's (LLM checker)

    @property
    def checked(self) -> list[SentenceVerdict]:
        return [v for v in self.verdicts if not v.exempt]

    @property
    def unsupported(self) -> list[SentenceVerdict]:
        return [v for v in self.verdicts if not v.supported]

    @property
    def withheld(self) -> bool:
        return self.confidence < self.min_confidence

    def summary(self) -> str:
        """``3 of 4 sentences supported, confidence 0.75 (local, all-MiniLM-L6-v2)``."""
        checked = self.checked
        supported = sum(v.supported for v in checked)
        noun = "sentence" if len(checked) == 1 else "sentences"
        return (
            f"{supported} of {len(checked)} {noun} supported, confidence "
            f"{self.confidence:.2f} ({self.checker}, {self.model})"
        )

    def reason(self) -> str:
        """Why the answer is withheld (or would be), on one line: the confidence, the counts,
        and the first unsupported sentence (or the judge's first unsupported claim)."""
        checked = self.checked
        supported = sum(v.supported for v in checked)
        line = (
            f"confidence {self.confidence:.2f} is below --min-confidence {self.min_confidence:g} "
            f"({supported} of {len(checked)} sentences supported, {self.checker} check)"
        )
        if self.unsupported:
            first = self.unsupported[0]
            line += f"; {_short(first.sentence)}: {first.reason}"
        elif self.faithful is False and self.unsupported_claims:
            line += f"; the judge found unsupported: {_short(self.unsupported_claims[0])}"
        elif self.faithful is False:
            line += "; the judge found the answer unfaithful"
        return " ".join(line.split())

    def as_dict(self) -> dict[str, Any]:
        return {
            "checker": self.checker,
            "model": self.model,
            "confidence": round(self.confidence, 4),
            "min_confidence": self.min_confidence,
            "withheld": self.withheld,
            "reason": self.reason() if self.withheld else None,
            "faithful": self.faithful,
            "unsupported_claims": self.unsupported_claims,
            "sentences": [v.as_dict() for v in self.verdicts],
        }


def _short(text: str, width: int = 80) -> str:
    """``text`` quoted, shortened to ``width`` characters."""
    folded = " ".join(text.split())
    return repr(folded if len(folded) <= width else folded[: width - 1] + "…")


def supported_share(verdicts: list[SentenceVerdict]) -> float | None:
    """The share of checked sentences that are supported; None when none is checked."""
    checked = [v for v in verdicts if not v.exempt]
    if not checked:
        return None
    return sum(v.supported for v in checked) / len(checked)


def citation_problem(sources: tuple[int, ...], available: int) -> str | None:
    """Why a sentence's citations cannot support it (none, or a source the context lacks)."""
    if not sources:
        return "no [Source N] citation"
    missing = [n for n in sources if not 1 <= n <= available]
    if missing:
        names = ", ".join(f"[Source {n}]" for n in missing)
        return f"cites {names}, which the context does not have"
    return None
