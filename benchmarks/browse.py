"""Latency of the search page's extras, facets and "did you mean", beside hybrid_search.

On the single-tenant corpus of ``benchmarks/latency.py`` (SciFact abstracts re-used with
variations, 10 chunks per document, real MiniLM vectors plus noise; binary COPY), as tenant
``t0``, per SciFact test claim: ``hybrid_search`` (the reference), ``search_facets`` of the claim
and of no query (every document; one metadata key), ``suggest_query`` of the claim as written
(every word known: lexicon lookups only) and with one word misspelt (its longest word of 6 or
more letters, two middle letters swapped), and how often the misspelt word's suggestion is the
original word (or another word of the same stem), among the misspelt words the corpus holds.
Each call once untimed, then timed.

    .venv/bin/python benchmarks/browse.py --size 10000 --queries 100
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import latency  # noqa: E402
from common import latency_summary  # noqa: E402

from pgrag.db import connect  # noqa: E402
from pgrag.testing import drop_database, fresh_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "browse.json"


def misspell_word(word: str) -> str:
    """``word`` with its two middle letters swapped."""
    i = len(word) // 2
    return word[: i - 1] + word[i] + word[i - 1] + word[i + 1 :]


def misspell(query: str) -> tuple[str, str] | None:
    """``query`` with its longest word of 6+ letters misspelt; (that query, the word)."""
    words = sorted(set(re.findall(r"\b[A-Za-z]{6,}\b", query)), key=lambda w: (-len(w), w))
    if not words:
        return None
    word = words[0]
    wrong = misspell_word(word)
    if wrong.lower() == word.lower():
        return None
    return re.sub(rf"\b{word}\b", wrong, query, count=1), word


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--admin-dsn", help="superuser DSN (default: a throwaway cluster)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    texts, all_queries = latency.load_scifact()
    texts = texts[:1000]
    queries = all_queries[: args.queries]
    vectors = latency.embed_cached("scifact-corpus", [t[: latency.EMBED_CHARS] for t in texts])
    qvecs = latency.embed_cached("scifact-queries", all_queries)[: len(queries)]
    rng = np.random.default_rng(42)
    s_texts, s_vecs = latency.synthetic(args.size, texts, vectors, rng)
    typos = [misspell(q) for q in queries]
    times: dict[str, list[float]] = {
        k: []
        for k in (
            "hybrid_search",
            "search_facets",
            "search_facets_no_query",
            "suggest_query_known_words",
            "suggest_query_one_typo",
        )
    }
    fixed = tried = 0
    misses: list[list[Any]] = []
    with server(args.admin_dsn, "pgrag-browse-") as admin:
        dsn = fresh_database(admin, f"browse_{args.size}")
        load = latency.load(dsn, s_texts, s_vecs, tenants=1)
        with connect(dsn) as conn:
            # Every tenth document in team a, the rest in b: a metadata key to count.
            conn.execute(
                "update pgrag.documents set metadata = jsonb_build_object('team', "
                "case when id % 10 = 0 then 'a' else 'b' end)"
            )
            conn.commit()
            # As autovacuum would after a load: the trigram index's pending list merged, the
            # lexicon's statistics taken (benchmarks/latency.py vacuums the other tables).
            conn.autocommit = True
            conn.execute("vacuum analyze pgrag.bm25_lexicon, pgrag.documents")
            conn.autocommit = False
            for q, v, typo in zip(queries, qvecs, typos, strict=True):
                calls: list[tuple[str, str, Any]] = [
                    ("hybrid_search", "select 1 from public.hybrid_search(%s, %s, 10)", (q, v)),
                    (
                        "search_facets",
                        "select 1 from public.search_facets(%s, array['team'])",
                        (q,),
                    ),
                    (
                        "search_facets_no_query",
                        "select 1 from public.search_facets(null, array['team'])",
                        (),
                    ),
                    ("suggest_query_known_words", "select * from public.suggest_query(%s)", (q,)),
                ]
                if typo is not None:
                    calls.append(
                        (
                            "suggest_query_one_typo",
                            "select * from public.suggest_query(%s)",
                            (typo[0],),
                        )
                    )
                for name, statement, params in calls:
                    latency.timed(conn, "t0", statement, params)  # untimed: plans, pages
                    ms, rows = latency.timed(conn, "t0", statement, params)
                    times[name].append(ms)
                    if name == "suggest_query_one_typo" and typo is not None:
                        known = conn.execute(
                            "select exists (select from pgrag.bm25_lexicon where lexeme = "
                            "(tsvector_to_array(to_tsvector('english', %s)))[1])",
                            (typo[1],),
                        ).fetchone()
                        if not (known and known[0]):
                            continue  # the right word is not in the corpus: nothing to find
                        tried += 1
                        wrong = misspell_word(typo[1])
                        suggested = [c["suggestion"] for c in rows[0][1] if c["word"] == wrong]
                        same_stem = conn.execute(
                            "select to_tsvector('english', %s) = to_tsvector('english', %s)",
                            (suggested[0] if suggested else "", typo[1]),
                        ).fetchone()
                        fixed += bool(same_stem and same_stem[0])
                        if not (same_stem and same_stem[0]) and len(misses) < 15:
                            misses.append([typo[1], wrong, suggested[0] if suggested else None])
        drop_database(admin, dsn)
    result = {
        "command": "python benchmarks/browse.py " + " ".join(sys.argv[1:]),
        "size": args.size,
        "load": load,
        "latency_ms": {k: latency_summary(v) for k, v in times.items() if v},
        "typos": {"tried": tried, "corrected_to_the_word": fixed, "missed": misses},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
