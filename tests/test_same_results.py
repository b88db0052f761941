"""benchmarks/same_results.py's comparison finds any change of a row or a score, and only those.

The rows come from the real search functions of a test database (the search corpus, as a tenant
through row-level security, the way the script calls them); version B is played by the same
database called with an argument that changes the results a little.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from plugins.search_corpus import seed_corpus

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from psycopg.conninfo import make_conninfo  # noqa: E402
from same_results import AUTHENTICATOR, Caller, Tally, ensure_authenticator, one_call  # noqa: E402

from pgrag.db import connect  # noqa: E402

TENANT = Caller("tenant default", tenant="default")
QUERIES = ("widget service port", "how do I roll out a release?", "tomato sunlight")
HYBRID = "select * from public.hybrid_search(%(q)s, %(e)s, 5{f})"


@pytest.fixture
def searched(db: str, local_embedder: Any) -> tuple[str, Any]:
    seed_corpus(db, local_embedder)
    ensure_authenticator(db)
    return db, local_embedder


def results(db: str, embedder: Any, extra: str = "") -> list[Any]:
    vectors = embedder.embed(list(QUERIES))
    with connect(make_conninfo(db, user=AUTHENTICATOR)) as conn:
        statement = HYBRID.format(f=extra)
        return [
            one_call(conn, TENANT, statement, q, e, [])
            for q, e in zip(QUERIES, vectors, strict=True)
        ]


def tally(a: list[Any], b: list[Any]) -> Tally:
    t = Tally()
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        t.add(TENANT.name, i, x, y)
    return t


def test_the_same_searches_twice_are_identical(searched: tuple[str, Any]) -> None:
    a, b = results(*searched), results(*searched)
    t = tally(a, b)
    assert t.ok and t.identical == len(QUERIES) and t.rows > 0 and t.empty == 0


def test_a_score_changed_beyond_the_tolerance_is_a_difference(searched: tuple[str, Any]) -> None:
    a = results(*searched)
    b = results(*searched, ", vector_weight => 0.8000001")
    t = tally(a, b)
    assert not t.ok
    assert 1e-12 < t.max_abs_score_difference < 1e-6
    assert t.differing[0]["caller"] == TENANT.name


def test_a_different_row_count_is_a_difference(searched: tuple[str, Any]) -> None:
    a = results(*searched)
    b = results(*searched, ", min_score => 0.3")
    assert any(len(x) != len(y) for x, y in zip(a, b, strict=True))
    assert not tally(a, b).ok


def test_a_last_bit_difference_is_within_the_tolerance(searched: tuple[str, Any]) -> None:
    a = results(*searched)
    b = [[[v + 1e-15 if isinstance(v, float) else v for v in row] for row in rows] for rows in a]
    t = tally(a, b)
    assert t.ok and t.within_tolerance == len(QUERIES) and t.identical == 0
