"""Released incremental migrations are frozen: ``sql/incremental/SHA256SUMS`` lists each one.

A database that applied an incremental file recorded its SHA-256 and refuses the file once it
differs (``ChecksumMismatch``, SQLSTATE PR103): an edit to a released migration would break
every installed database at its next upgrade. These tests make that edit fail in CI instead.

**How a file gets listed.** A new incremental file is released when it reaches the main branch:
from then on databases built from main (developers', CI's, users installing from a clone) may
have applied it. So the commit that merges it also appends its line:

    cd sql/incremental && sha256sum 008-name.sql >> SHA256SUMS

Until then the file may change freely on its branch (and the second test below says it is not
listed yet). The list is in ``sha256sum`` format: ``sha256sum -c SHA256SUMS`` in that folder
checks the files too.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import shutil
from pathlib import Path

import pytest

from pgrag.install.migrator import sql_dir

LIST = "SHA256SUMS"
RELEASES = Path(__file__).parent / "fixtures" / "releases"


def listed(root: Path | None = None) -> list[tuple[str, str]]:
    """(file name, sha256) per line of the frozen list, in its order."""
    text = ((root or sql_dir()) / "incremental" / LIST).read_text(encoding="utf-8")
    entries = []
    for line in text.splitlines():
        match = re.fullmatch(r"([0-9a-f]{64})  (\d{3}-[a-z][a-z0-9_-]*\.sql)", line)
        assert match, f"{LIST}: not a sha256sum line: {line!r}"
        entries.append((match.group(2), match.group(1)))
    return entries


def released_files_changed(root: Path | None = None) -> list[str]:
    """One message per listed file that is gone or differs from its listed SHA-256."""
    folder = (root or sql_dir()) / "incremental"
    problems = []
    for name, frozen in listed(root):
        path = folder / name
        if not path.exists():
            problems.append(
                f"sql/incremental/{name} was released and is gone: never delete a released "
                "migration; installed databases have applied it."
            )
            continue
        now = hashlib.sha256(path.read_bytes()).hexdigest()
        if now != frozen:
            problems.append(
                f"sql/incremental/{name} changed after release (listed sha256 {frozen[:12]}, "
                f"now {now[:12]}): never edit a released migration, every database that "
                f"applied it would refuse to upgrade. Restore it (git checkout -- "
                f"sql/incremental/{name}) and add a new migration with the change."
            )
    return problems


def files_not_listed(root: Path | None = None) -> list[str]:
    """One message per incremental file the frozen list lacks."""
    known = {name for name, _ in listed(root)}
    return [
        f"sql/incremental/{p.name} is not in sql/incremental/{LIST}: add its line when "
        f"releasing it, in the commit that merges it (cd sql/incremental && sha256sum "
        f"{p.name} >> {LIST}); from then on it must never change."
        for p in sorted(((root or sql_dir()) / "incremental").glob("*.sql"))
        if p.name not in known
    ]


def test_the_list_is_one_line_per_file_in_order() -> None:
    names = [name for name, _ in listed()]
    assert names == sorted(set(names)), f"{LIST} must list each file once, in order"


def test_no_released_incremental_file_changed() -> None:
    problems = released_files_changed()
    assert not problems, "\n".join(problems)


def test_every_incremental_file_is_listed() -> None:
    problems = files_not_listed()
    assert not problems, "\n".join(problems)


def test_the_checks_catch_an_edit_a_deletion_and_a_new_file(tmp_path: Path) -> None:
    copy = tmp_path / "sql"
    shutil.copytree(sql_dir(), copy)
    first, second, *_ = sorted((copy / "incremental").glob("*.sql"))
    first.write_text(first.read_text() + "\n-- an edit after release\n")
    second.unlink()
    (copy / "incremental" / "999-new.sql").write_text("select 1;\n")

    changed = released_files_changed(copy)
    assert len(changed) == 2
    assert f"{first.name} changed after release" in changed[0]
    assert "never edit a released migration" in changed[0]
    assert f"{second.name} was released and is gone" in changed[1]
    (unlisted,) = files_not_listed(copy)
    assert "999-new.sql is not in sql/incremental/SHA256SUMS: add its line when releasing" in (
        unlisted
    )


@pytest.mark.parametrize("bundle", sorted(RELEASES.glob("*.sql.gz")), ids=lambda p: p.name)
def test_past_releases_shipped_the_listed_files(bundle: Path) -> None:
    # A bundle names each incremental file with its SHA-256 ("-- incremental/NNN-x.sql (sha256").
    text = gzip.decompress(bundle.read_bytes()).decode("utf-8")
    shipped = re.findall(r"^-- incremental/(\S+) \(sha256 ([0-9a-f]{64})\)$", text, re.M)
    assert shipped, f"{bundle.name} names no incremental file"
    assert set(shipped) <= set(listed())
