"""The generated docs are current, and no document names an issue or a folder outside the clone.

docs/benchmarks.md and README.md's results table are written by ``benchmarks/report.py`` from
``benchmarks/results/*.json``; ``--check`` fails when either differs from what it would write or
when a results file is read by nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted(
    [
        REPO / "README.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "sql").glob("*/README.md"),
        *[p for p in (REPO / "CHANGELOG.md", REPO / "CONTRIBUTING.md") if p.exists()],
    ]
)
FENCE = re.compile(r"^(`{3,}|~{3,})")
# "issue 15", "issues 3 and 4", "issue #15", ".../issues/15", "PR #7", "pull request 7".
ISSUE_WORDS = re.compile(
    r"(?i:\b(?:issues?|pull requests?)\s*#?\d+)|\bPR\s+#?\d+|\bPR#\d+|/issues/\d+|/pull/\d+"
)
# "#12" in prose (a heading's "#", an anchor such as "page.md#6-step" and code blocks are not).
HASH_NUMBER = re.compile(r"(?<![\w/&#])#\d+\b")
SHARED_FOLDER = re.compile(r"\.\./shared\b|/work/shared\b")
# A link to a section of another Markdown file of the clone: [text](path.md#anchor).
SECTION_LINK = re.compile(r"\]\(([^)#\s]+\.md)#([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*)$", re.MULTILINE)


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def prose_lines(text: str) -> list[tuple[int, str, bool]]:
    """(line number, line, inside a fenced code block) of a Markdown file."""
    out = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line.strip())
        if m and (fence is None or m.group(1)[0] == fence[0]):
            fence = None if fence else m.group(1)
            out.append((number, line, True))
            continue
        out.append((number, line, fence is not None))
    return out


def problems_of(path: Path) -> list[str]:
    found = []
    name = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    for number, line, in_code in prose_lines(path.read_text(encoding="utf-8")):
        where = f"{name}:{number}"
        for m in ISSUE_WORDS.finditer(line):
            found.append(f"{where}: names an issue ({m.group(0)!r})")
        if not in_code:
            for m in HASH_NUMBER.finditer(line):
                found.append(f"{where}: names an issue number ({m.group(0)!r})")
        for m in SHARED_FOLDER.finditer(line):
            found.append(f"{where}: refers to a folder outside the clone ({m.group(0)!r})")
    return found


def test_docs_benchmarks_md_and_the_readme_table_are_what_report_py_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "report.py"), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_no_document_names_an_issue_or_a_folder_outside_the_clone() -> None:
    found = [problem for path in DOCS for problem in problems_of(path)]
    assert not found, "\n".join(found)


def test_the_issue_check_catches_each_form_and_spares_ranks_in_examples(tmp_path: Path) -> None:
    sample = tmp_path / "x.md"
    sample.write_text(
        "Fixed in issue 15 and #12, see ../shared/data.\n"
        "[step](supabase.md#6-add-documents)\n"
        "```console\nwhy: vector #1 (cosine similarity 0.33)\n```\n",
        encoding="utf-8",
    )
    problems = [p.split(": ", 1)[1] for p in problems_of(sample)]
    assert problems == [
        "names an issue ('issue 15')",
        "names an issue number ('#12')",
        "refers to a folder outside the clone ('../shared')",
    ]


def test_every_link_to_a_section_of_another_document_finds_its_heading() -> None:
    # The planning reasoning lives in one section that other documents link to by its anchor.
    broken = []
    for path in DOCS:
        for m in SECTION_LINK.finditer(path.read_text(encoding="utf-8")):
            target = (path.parent / m.group(1)).resolve()
            if not target.is_file():
                continue
            headings = {anchor(h) for h in HEADING.findall(target.read_text(encoding="utf-8"))}
            if m.group(2) not in headings:
                broken.append(f"{path.relative_to(REPO)}: {m.group(0)}")
    assert not broken, "\n".join(broken)
