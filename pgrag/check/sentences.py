"""Answers and sources cut into sentences, and the ``[Source N]`` citations of each sentence.

The rules (docs/cli.md, "Checked answers"):

* An answer is cut at line breaks (a list item is a sentence of its own; list markers and
  ``#`` heading marks are dropped) and after ``.``, ``!`` or ``?`` followed by white space,
  except after a few abbreviations (``e.g.``, ``i.e.``, ``etc.``, ``vs.``, a single initial).
* A citation belongs to the sentence it ends: one written after the full stop
  (``... port 8443. [Source 1]``) belongs to the sentence before it.
* ``[Source 2]``, ``[Source 1][Source 3]``, ``[Source 1, Source 3]`` and ``[Sources 1, 3]``
  cite sources 1-3 as read.
* A sentence is **exempt** (claims nothing that needs a source) when, citations removed, it has
  no letter or digit; when it ends with ``:`` (a lead-in such as ``In summary:``, ``The steps
  are:`` or ``**Note:**``); when it is a Markdown heading; or when it says that the sources do
  not contain the answer (the refusal the answer prompt asks for). Every other sentence must
  cite a source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CITATION = re.compile(
    r"\[\s*Sources?\s+(\d+(?:\s*(?:,|;|&|and)\s*(?:Source\s+)?\d+)*)\s*\]", re.IGNORECASE
)
_NUMBER = re.compile(r"\d+")
_LEADING_CITATIONS = re.compile(rf"^(?:\s*{CITATION.pattern})+", re.IGNORECASE)
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
_ABBREVIATION = re.compile(
    r"(?:\b(?:e\.g|i\.e|etc|vs|cf|approx|fig|dr|mr|mrs|ms)|(?<![\w.])[A-Z])\.$", re.IGNORECASE
)
_LIST_MARKER = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_HEADING = re.compile(r"^\s*#{1,6}\s")
_WORD = re.compile(r"\w")
_REFUSAL = re.compile(
    r"\bsources?\b[^.]*\b(?:do(?:es)?\s+not|don't|doesn't)\s+(?:contain|provide|include|say)"
    r"|\bnot\s+enough\s+information\b",
    re.IGNORECASE,
)
_SPACE_BEFORE_MARK = re.compile(r"\s+([.,;:!?])")
_SOURCE_HEADER = re.compile(r"^\[Source (\d+)\] ", re.MULTILINE)


@dataclass(frozen=True)
class AnswerSentence:
    """One sentence of an answer: its text as written, the sources it cites (numbers, in order,
    without repeats) and whether it is exempt from citing one."""

    text: str
    sources: tuple[int, ...]
    exempt: bool

    @property
    def claim(self) -> str:
        """The sentence without its citations: what a source has to support."""
        return _SPACE_BEFORE_MARK.sub(r"\1", " ".join(CITATION.sub(" ", self.text).split()))


def cited(text: str) -> tuple[int, ...]:
    """The source numbers ``text`` cites, in order of first mention."""
    numbers: list[int] = []
    for match in CITATION.finditer(text):
        for number in _NUMBER.findall(match.group(1)):
            if int(number) not in numbers:
                numbers.append(int(number))
    return tuple(numbers)


def split_text(text: str) -> list[str]:
    """``text`` cut into sentences (lines first, then sentence ends), markers dropped."""
    pieces: list[str] = []
    for line in text.splitlines():
        line = _LIST_MARKER.sub("", line).strip()
        if not line:
            continue
        start = 0
        for boundary in _BOUNDARY.finditer(line):
            candidate = line[start : boundary.start()].rstrip("\"')]")
            if _ABBREVIATION.search(candidate):
                continue
            pieces.append(line[start : boundary.start()].strip())
            start = boundary.end()
        pieces.append(line[start:].strip())
    return [piece for piece in pieces if piece]


def _attach_leading_citations(pieces: list[str]) -> list[str]:
    """Move citations that open a piece to the end of the piece before it."""
    out: list[str] = []
    for piece in pieces:
        lead = _LEADING_CITATIONS.match(piece)
        if lead and out:
            out[-1] = f"{out[-1]} {lead.group(0).strip()}"
            piece = piece[lead.end() :].strip()
        if piece:
            out.append(piece)
    return out


def is_exempt(sentence: str) -> bool:
    """Whether ``sentence`` needs no citation (the rules in the module's docstring)."""
    claim = CITATION.sub(" ", sentence).strip()
    return (
        not _WORD.search(claim)
        or claim.rstrip("*_ ").endswith(":")  # **Note:** too
        or bool(_HEADING.match(sentence))
        or bool(_REFUSAL.search(claim))
    )


def answer_sentences(answer: str) -> list[AnswerSentence]:
    """``answer`` as sentences with their citations."""
    lines = [line for line in answer.splitlines() if line.strip()]
    pieces: list[str] = []
    for line in lines:
        # A heading stays one piece, its marks kept so that it is recognised as one.
        pieces.extend([line.strip()] if _HEADING.match(line) else split_text(line))
    return [
        AnswerSentence(text, cited(text), is_exempt(text))
        for text in _attach_leading_citations(pieces)
    ]


def context_sources(context: str) -> dict[int, str]:
    """The text of each source of a ``build_context`` block, by number, without its header
    line (``[Source N] title (uri, ...)``). Headers are looked for in order (1, 2, ...), so a
    source whose text quotes another header is not cut."""
    texts: dict[int, str] = {}
    starts: list[tuple[int, int, int]] = []  # (number, header start, text start)
    expected = 1
    for match in _SOURCE_HEADER.finditer(context):
        if int(match.group(1)) != expected:
            continue
        line_end = context.find("\n", match.end())
        starts.append((expected, match.start(), len(context) if line_end < 0 else line_end + 1))
        expected += 1
    for i, (number, _, text_start) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else len(context)
        texts[number] = context[text_start:end].strip()
    return texts
