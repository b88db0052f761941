"""The commit-msg hook (.githooks/commit-msg, scripts/check_commit_msg.py) accepts good commit
messages and refuses bad ones, as git runs it and as ``make lint`` runs it over a range."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HOOK = REPO / ".githooks" / "commit-msg"
SCRIPT = REPO / "scripts" / "check_commit_msg.py"
GIT_ID = ["-c", "user.name=pgrag", "-c", "user.email=dev@pgrag.invalid"]


def run_hook(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message, encoding="utf-8")
    return subprocess.run([str(HOOK), str(path)], cwd=REPO, capture_output=True, text=True)


@pytest.mark.parametrize(
    "message",
    [
        "Bound YAML front matter\n",
        "Bound YAML front matter\n\nA 2 MB front matter blocked the worker for minutes.\n",
        "Embed queries once per session\n\nWhy.\n# Please enter the commit message\n",
        "Process each file alone\n",
        "fixup! Add a retry to the queue\n",
        "x" * 72 + "\n",
    ],
)
def test_the_hook_accepts_a_good_message(tmp_path: Path, message: str) -> None:
    done = run_hook(tmp_path, message)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ("x" * 73 + "\n", "73 characters"),
        ("Bound YAML front matter.\n", "ends with a period"),
        ("Added a retry to the queue\n", "'added'"),
        ("Adds a retry to the queue\n", "'adds'"),
        ("Adding a retry to the queue\n", "'adding'"),
        ("Add a retry\nto the queue\n", "second line is not blank"),
        ("# only a comment\n\n", "empty"),
    ],
)
def test_the_hook_refuses_a_bad_message(tmp_path: Path, message: str, problem: str) -> None:
    done = run_hook(tmp_path, message)
    assert done.returncode == 1
    assert problem in done.stderr


def test_a_range_check_reports_each_bad_commit_after_the_starting_one(tmp_path: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *GIT_ID, *args], cwd=tmp_path, capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "Fixed everything before the rules.")
    start = git("rev-parse", "HEAD")
    git("commit", "-q", "--allow-empty", "-m", "Add a check")
    git("commit", "-q", "--allow-empty", "-m", "Added another check.")
    done = subprocess.run(
        ["python3", str(SCRIPT), "--since", start],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 1
    assert "2 commits since" in done.stdout and "2 problems" in done.stdout
    assert "'added'" in done.stdout and "ends with a period" in done.stdout
    assert "Fixed everything" not in done.stdout
