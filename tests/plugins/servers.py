"""Fixtures for real servers beyond the embedded one, started and stopped by the tests on loopback.

Registered from ``tests/conftest.py``; the machinery is in ``plugins/pgservers.py``.

* ``pg15_plpython`` (session): Debian PostgreSQL 15 with PL/Python and pgvector 0.8.6 available,
  a :class:`~plugins.pgservers.Pg15Server` (superuser DSN, version, bin dir, server Python, and
  ``venv``: the :class:`~plugins.pgservers.PlPythonVenv` on PL/Python's ``sys.path``).
* ``plpython_venv`` (session): that venv, made with ``/usr/bin/python3.11 -m venv`` with
  ``plpython_requirements`` installed (a session fixture returning ``[]``; override it in a
  conftest to preinstall, or call ``venv.install([...])`` later: new connections see it).
* ``citus_cluster`` (session): a :class:`~plugins.pgservers.CitusCluster`, coordinator + two
  workers with ``citus`` and ``vector`` created in database ``postgres``. The first use on a
  machine builds Citus (3-5 minutes): mark tests that use it ``slow``.
* ``replication_primary`` (session): the DSN of a dedicated embedded PostgreSQL 18 primary.
  It is not the session's ``pg_admin_dsn``: that one may be an external server or a container
  (another major version, settings the suite cannot change), and a base backup of the shared
  cluster would force checkpoints under every concurrently running test (``hot_standby`` does
  work on ``pg_admin_dsn`` when that is the embedded cluster: checked once). The embedded
  cluster's defaults already stream (``wal_level=replica``, ``max_wal_senders=10``, trust
  ``replication`` lines in pg_hba from initdb), so nothing needs changing on it.
* ``hot_standby`` (per test): a factory, ``hot_standby(primary_dsn) -> Standby`` (``.dsn``,
  ``.wait_for_replay(timeout)``), stopped and removed after the test.
* ``restartable_cluster`` (per test): a dedicated embedded PostgreSQL 18 cluster, a
  :class:`~plugins.pgservers.LocalCluster` (``.dsn(dbname)``, ``.restart()``, ``.stop()``),
  removed after the test: for tests that restart the database under a client.

PostgreSQL 15 is Debian's, unpacked into a private prefix under /var/cache/pgrag-test-build
(``PGRAG_TEST_BUILD_DIR``), never installed on the system (see ``plugins/pgservers.py``);
pgvector and Citus are built there from the vendored sources (about 10 s and 3 minutes on 2
cores, once per machine). Before anything is fetched or built, a ``[servers]`` line says what
will be done and that ``PGRAG_TEST_NO_INSTALL=1`` skips these tests instead. A fixture that
cannot get its server (no vendored sources, PGRAG_TEST_NO_INSTALL set, a system package missing
while not root, a failed fetch or build) skips the test with the reason, also printed as a
``[servers]`` line; the terminal summary lists how long each fetch, build and start took.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Callable, Iterator

import pytest

from pgrag.testing import temporary_cluster
from plugins.pgservers import (
    PLPYTHON_PACKAGES,
    CitusCluster,
    LocalCluster,
    Pg15Server,
    PlPythonVenv,
    ServerUnavailable,
    Standby,
    Steps,
    make_plpython_venv,
    prepare_pg15,
    start_citus_cluster,
    start_embedded_cluster,
    start_hot_standby,
    start_pg15_plpython,
)

STEPS = pytest.StashKey[Steps]()


def _sayer(config: pytest.Config) -> Callable[[str], None]:
    def say(line: str) -> None:
        text = f"[servers] {line}"
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            print(text, file=sys.stderr)
            return
        capman = config.pluginmanager.get_plugin("capturemanager")
        shown = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
        with shown:
            if reporter._tw.width_of_current_line:  # after progress dots: a line of its own
                reporter.write("\n")
            reporter.write_line(text)

    return say


def pytest_configure(config: pytest.Config) -> None:
    config.stash[STEPS] = Steps(say=_sayer(config))


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    steps = config.stash.get(STEPS, None)
    if steps is None or not steps.times:
        return
    terminalreporter.section("server fixtures: seconds per step")
    for name, took in steps.times:
        terminalreporter.write_line(f"{took:8.1f}  {name}")


@pytest.fixture(scope="session")
def server_steps(pytestconfig: pytest.Config) -> Steps:
    """Progress lines and step times of the server fixtures."""
    return pytestconfig.stash[STEPS]


@contextlib.contextmanager
def _or_skip(steps: Steps, what: str) -> Iterator[None]:
    try:
        yield
    except ServerUnavailable as exc:
        steps.say(f"SKIPPING tests that need {what}: {exc}")
        pytest.skip(f"{what}: {exc}")


@pytest.fixture(scope="session")
def pg15_plpython_installed(server_steps: Steps) -> None:
    """PostgreSQL 15 with PL/Python and pgvector 0.8.6 in the private prefix; python3.11-venv."""
    with (
        _or_skip(server_steps, "PostgreSQL 15 with PL/Python and pgvector"),
        server_steps.step("PostgreSQL 15 + PL/Python + pgvector (ready or prepared)"),
    ):
        prepare_pg15(server_steps, "the PL/Python tests", extra_packages=PLPYTHON_PACKAGES)


@pytest.fixture(scope="session")
def plpython_requirements() -> list[str]:
    """pip requirements preinstalled in ``plpython_venv`` (override in a conftest)."""
    return []


@pytest.fixture(scope="session")
def plpython_venv(
    pg15_plpython_installed: None, plpython_requirements: list[str], server_steps: Steps
) -> Iterator[PlPythonVenv]:
    """A venv of /usr/bin/python3.11 whose site-packages PL/Python imports from."""
    with _or_skip(server_steps, "a venv for PL/Python"):
        venv = make_plpython_venv(requirements=plpython_requirements, steps=server_steps)
    yield venv
    shutil.rmtree(venv.path.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def pg15_plpython(plpython_venv: PlPythonVenv, server_steps: Steps) -> Iterator[Pg15Server]:
    """A throwaway Debian PostgreSQL 15 cluster with PL/Python reading ``plpython_venv``."""
    server = start_pg15_plpython(plpython_venv, server_steps)
    yield server
    server.cluster.remove()


@pytest.fixture(scope="session")
def citus_cluster(server_steps: Steps) -> Iterator[CitusCluster]:
    """Citus 13.2.2 coordinator + 2 workers with pgvector (builds Citus once per machine)."""
    with (
        _or_skip(server_steps, "a Citus cluster"),
        server_steps.step("PostgreSQL 15 + pgvector + Citus (ready or prepared)"),
    ):
        prepare_pg15(server_steps, "the Citus tests", citus=True)
    cluster = start_citus_cluster(server_steps)
    yield cluster
    cluster.remove()


@pytest.fixture(scope="session")
def replication_primary(server_steps: Steps) -> Iterator[str]:
    """Superuser DSN of a dedicated embedded PostgreSQL 18 cluster to replicate from."""
    with contextlib.ExitStack() as stack:
        with server_steps.step("start a primary (embedded PostgreSQL 18)"):
            url = stack.enter_context(temporary_cluster("pgrag-primary-"))
        yield url


@pytest.fixture
def hot_standby(server_steps: Steps) -> Iterator[Callable[[str], Standby]]:
    """``hot_standby(primary_dsn)`` starts a streaming hot standby; all removed after the test."""
    made: list[Standby] = []

    def start(primary_dsn: str) -> Standby:
        with _or_skip(server_steps, "a hot standby"):
            standby = start_hot_standby(primary_dsn, server_steps)
        made.append(standby)
        return standby

    yield start
    for standby in made:
        standby.remove()


@pytest.fixture
def small_shm_cluster(server_steps: Steps) -> Iterator[LocalCluster]:
    """A dedicated embedded cluster whose /dev/shm holds 64 MB, Docker's default for a
    container; removed after the test."""
    with _or_skip(server_steps, "a cluster with a 64 MB /dev/shm"):
        cluster = start_embedded_cluster("pgrag-shm-", server_steps, shm_mb=64)
    yield cluster
    cluster.remove()


@pytest.fixture
def restartable_cluster(server_steps: Steps) -> Iterator[LocalCluster]:
    """A dedicated embedded cluster a test may restart; removed after the test."""
    with _or_skip(server_steps, "a dedicated embedded cluster"):
        cluster = start_embedded_cluster("pgrag-restart-", server_steps)
    yield cluster
    cluster.remove()
