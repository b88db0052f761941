#!/usr/bin/env python3
"""Check commit messages: the subject line is at most 72 characters, reads as an imperative
("Bound YAML front matter", not "Bounded ..." / "Bounds ..." / "Bounding ..."), does not end
with a period, and a body is separated from it by a blank line.

    check_commit_msg.py FILE          the message git hands the commit-msg hook (.githooks/)
    check_commit_msg.py --since REV   every commit in REV..HEAD (make lint; REV is a commit
                                      whose history is final, e.g. LINT_SINCE in the Makefile)

Exit status 1, with one line per problem, when a message breaks a rule. Standard library only:
the hook runs before any virtualenv exists.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MAX_SUBJECT = 72
SCISSORS = "# ------------------------ >8 ------------------------"
# First words that end like a past tense, a gerund or a third person but are imperatives.
IMPERATIVES = {
    "embed", "shed", "feed", "seed", "need", "speed", "proceed", "exceed", "succeed", "heed",
    "bring", "ring", "sing", "string", "spring", "ping", "sting", "swing",
    "focus", "pass", "process", "access", "address", "discuss", "bypass", "express", "press",
    "alias", "bias", "canvas", "redis", "analysis", "always", "does",
}  # fmt: skip
PREFIXES = ("fixup! ", "squash! ", "amend! ")


def message_lines(text: str) -> list[str]:
    """The message as git keeps it: comment lines and everything after the scissors dropped."""
    kept: list[str] = []
    for line in text.splitlines():
        if line.startswith(SCISSORS):
            break
        if not line.startswith("#"):
            kept.append(line.rstrip())
    while kept and not kept[0]:
        kept.pop(0)
    return kept


def not_imperative(word: str) -> bool:
    """A past tense (added), a gerund (adding) or a third person (adds), by their endings."""
    if word.endswith("ed") or (word.endswith("ing") and len(word) > 4):
        return True
    return word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3


def problems(text: str) -> list[str]:
    """What breaks the rules in one commit message (empty: nothing)."""
    lines = message_lines(text)
    if not lines:
        return ["the message is empty"]
    subject = lines[0]
    found = []
    if len(subject) > MAX_SUBJECT:
        found.append(f"the subject has {len(subject)} characters; at most {MAX_SUBJECT}")
    if subject.endswith("."):
        found.append("the subject ends with a period")
    words = subject
    for prefix in PREFIXES:
        words = words.removeprefix(prefix)
    first = words.split(" ", 1)[0].strip(":,").lower()
    if first and first not in IMPERATIVES and not_imperative(first):
        found.append(f"the subject starts with {first!r}: use the imperative ('Add', 'Fix')")
    if len(lines) > 1 and lines[1]:
        found.append("the second line is not blank: a blank line separates subject and body")
    return found


def check_range(since: str) -> int:
    """Check every commit in since..HEAD; 0 when all pass."""
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{since}^{{commit}}"], capture_output=True
    ).returncode
    if known != 0:
        print(f"check_commit_msg: {since} is not in this clone's history; nothing checked")
        return 0
    commits = subprocess.run(
        ["git", "rev-list", "--reverse", f"{since}..HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    failed = 0
    for commit in commits:
        body = subprocess.run(
            ["git", "log", "-1", "--format=%B", commit], capture_output=True, text=True, check=True
        ).stdout
        for problem in problems(body):
            failed += 1
            print(f"{commit[:10]} {message_lines(body)[0][:60]!r}: {problem}")
    print(f"check_commit_msg: {len(commits)} commits since {since}, {failed} problems")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--since":
        return check_range(argv[1])
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    found = problems(Path(argv[0]).read_text(encoding="utf-8", errors="replace"))
    for problem in found:
        print(f"commit-msg: {problem}", file=sys.stderr)
    if found:
        print("commit-msg: the message is kept in .git/COMMIT_EDITMSG", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
