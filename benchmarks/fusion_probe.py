"""Fusion variants on SciFact, chosen by cross-validation, from candidates dumped once.

Two steps:

* ``--dump FILE`` (when FILE does not exist yet): for every test query, each arm's candidates
  as pgrag's SQL arms return them (``pgrag.vector_candidates`` and ``pgrag.keyword_candidates``,
  ``--candidates`` each, what ``hybrid_search`` fuses for 100 rows), with each chunk's
  document, cosine similarity, BM25 length and the query lexemes' term frequencies in the chunk
  and in its document's title.
* then: every variant re-ranks those candidates offline, the chunk ranking is folded into
  documents as ``pgrag eval`` does (a document at its best chunk), and the choice among the
  variants of each family is cross-validated (5 folds, ``pgrag.eval.folds``): picked on four
  folds, scored on the fifth. The full-test figure of a variant is reported beside its family's
  out-of-fold figure; only the latter says what a choice is worth. The alternatives that beat
  today's default on the full test are also compared with it query by query (a paired
  randomisation test).

The re-ranking here is a model of the SQL (``pgrag.fused_candidates``), checked by
reproducing both SQL figures from the same candidates: today's default must equal the
``hybrid`` row of ``benchmarks/results/beir_folds.json`` and the BM25 model its ``keyword`` row
(written into the results as ``reproduces_beir_folds_ndcg@10``). What wins is then built in SQL
and measured there.

    PGRAG_HOME=/tmp/fusion-home .venv/bin/python benchmarks/fusion_probe.py \\
        --dump /tmp/scifact-candidates.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from common import SCIFACT, database_url

from pgrag import eval as ev

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "fusion_probe.json"
FETCH = 100  # chunks per query, as pgrag eval fetches for the metrics

Candidates = dict[str, Any]  # one query's dump


# -- the dump: the SQL arms' candidates, once ----------------------------------------------------
# (BM25 lengths and tf from the postings; every candidate's cosine similarity, also of those the
# vector arm did not return)


def dump(dsn: str, dataset: ev.BeirDataset, tenant: str, count: int) -> dict[str, Candidates]:
    from pgrag.db import connect, tenant_transaction
    from pgrag.search import query_embedder

    with connect(dsn) as conn:
        embedder = query_embedder(conn)
    embeddings = ev.embed_queries(embedder, dataset)
    out: dict[str, Candidates] = {}
    with connect(dsn) as conn:
        for qid, text in dataset.queries.items():
            with tenant_transaction(conn, tenant):
                v = conn.execute(
                    "select chunk_id, 1 - distance from pgrag.vector_candidates(%s, %s)"
                    " order by distance, chunk_id",
                    (embeddings[qid], count),
                ).fetchall()
                k = conn.execute(
                    "select chunk_id, score from pgrag.keyword_candidates(%s, %s)"
                    " order by score desc, chunk_id",
                    (text, count),
                ).fetchall()
                ids = sorted({r[0] for r in v} | {r[0] for r in k})
                # The query's scored lexemes with their IDF, and for each candidate chunk its
                # BM25 length and the lexemes' frequencies in it and in its document's title.
                terms = conn.execute(
                    """
                    with c as (select * from pgrag.bm25_corpus(pgrag.current_tenant_id(),
                                                       pgrag.text_search_config('language', null))),
                    q as (select (pgrag.keyword_query(%s, c.search_config)).lexemes, c from c)
                    select t.lexemes, t.idf, (q.c).avgdl, (q.c).search_config::text
                    from q, pgrag.bm25_terms((q.c).tenants, q.lexemes, (q.c).chunk_count) as t
                    """,
                    (text,),
                ).fetchone()
                lexemes = list(terms[0] or []) if terms else []
                rows = conn.execute(
                    """
                    select ch.id, d.source_uri, ch.chunk_index,
                           (select p.doc_len from pgrag.bm25_postings as p
                            where p.tenant_id = ch.tenant_id and p.chunk_id = ch.id
                              and p.lexeme = (select u.lexeme from pg_catalog.unnest(ch.fts) as u
                                              limit 1)),
                           (select pg_catalog.jsonb_object_agg(p.lexeme, p.tf)
                            from pgrag.bm25_postings as p
                            where p.tenant_id = ch.tenant_id and p.chunk_id = ch.id
                              and p.lexeme = any(%s::text[])),
                           (select pg_catalog.jsonb_object_agg(u.lexeme,
                                       pg_catalog.array_length(u.positions, 1))
                            from pg_catalog.unnest(pg_catalog.to_tsvector(%s::regconfig,
                                                   coalesce(d.title, ''))) as u
                            where u.lexeme = any(%s::text[])),
                           (select coalesce(sum(pg_catalog.array_length(u.positions, 1)), 0)
                            from pg_catalog.unnest(pg_catalog.to_tsvector(%s::regconfig,
                                                   coalesce(d.title, ''))) as u),
                           1 - (ch.embedding operator(public.<=>) %s)
                    from pgrag.chunks as ch
                    join pgrag.documents as d on d.tenant_id = ch.tenant_id
                                             and d.id = ch.document_id
                    where ch.id = any(%s::bigint[])
                    """,
                    (
                        lexemes,
                        terms[3] if terms else "english",
                        lexemes,
                        terms[3] if terms else "english",
                        embeddings[qid],
                        ids,
                    ),
                ).fetchall()
            out[qid] = {
                "vector": [[r[0], r[1]] for r in v],
                "keyword": [[r[0], r[1]] for r in k],
                "lexemes": lexemes,
                "idf": list(terms[1] or []) if terms else [],
                "avgdl": terms[2] if terms else None,
                "chunks": {
                    str(r[0]): {
                        "doc": dataset.doc_id(r[1]),
                        "index": r[2],
                        "len": r[3],
                        "tf": r[4] or {},
                        "title_tf": r[5] or {},
                        "title_len": r[6],
                        "similarity": r[7],
                    }
                    for r in rows
                },
            }
    return out


# -- the variants: a chunk score from the two arms' candidate lists -------------------------------

ArmScores = dict[int, float]


def minmax(scores: ArmScores) -> Callable[[float], float]:
    """Today's normalisation (pgrag.fused_candidates): (s - min) / (max - min) over the arm."""
    lo, hi = min(scores.values()), max(scores.values())
    return lambda s: (s - lo) / (hi - lo) if hi > lo else 1.0


def _mean_sd(scores: ArmScores) -> tuple[float, float]:
    vals = list(scores.values())
    mean = sum(vals) / len(vals)
    return mean, math.sqrt(sum((x - mean) ** 2 for x in vals) / len(vals))


def zscore(scores: ArmScores) -> Callable[[float], float]:
    """(s - mean) / population standard deviation over the arm's candidates."""
    mean, sd = _mean_sd(scores)
    return lambda s: (s - mean) / sd if sd > 0 else 0.0


def dbsf(scores: ArmScores) -> Callable[[float], float]:
    """Distribution-based score fusion: min-max between mean - 3 sd and mean + 3 sd."""
    mean, sd = _mean_sd(scores)
    lo, hi = mean - 3 * sd, mean + 3 * sd
    return lambda s: (s - lo) / (hi - lo) if hi > lo else 1.0


NORMS: dict[str, Callable[[ArmScores], Callable[[float], float]]] = {
    "minmax": minmax,
    "zscore": zscore,
    "dbsf": dbsf,
}


def fuse_scores(
    vec: ArmScores,
    kw: ArmScores,
    norm: str,
    vw: float,
    kwt: float,
    missing: str = "zero",
    full: tuple[ArmScores, ArmScores] | None = None,
) -> dict[int, float]:
    """Weighted sum of the arm scores, each normalised by its own candidates' statistics. A
    chunk one arm missed gets 0 from it (``missing="zero"``, as today), that arm's lowest
    normalised score (``"floor"``), or with ``full`` (every candidate's cosine similarity and
    BM25 score) its real score in that arm, normalised alike (``"fill"``)."""
    out: dict[int, float] = {}
    parts = []
    for arm, w, everyone in (
        (vec, vw, full[0] if full else {}),
        (kw, kwt, full[1] if full else {}),
    ):
        if not arm:
            parts.append((arm, w, None, 0.0, everyone))
            continue
        t = NORMS[norm](arm)
        floor = min(t(s) for s in arm.values()) if missing == "floor" else 0.0
        parts.append((arm, w, t, floor, everyone))
    for c in set(vec) | set(kw):
        total = 0.0
        for arm, w, t, floor, everyone in parts:
            if c in arm and t is not None:
                total += w * t(arm[c])
            elif missing == "fill" and t is not None and c in everyone:
                total += w * t(everyone[c])
            else:
                total += w * floor
        out[c] = total
    return out


def rrf_scores(vec: ArmScores, kw: ArmScores, k: float, vw: float, kwt: float) -> dict[int, float]:
    out: dict[int, float] = {}
    for arm, w in ((vec, vw), (kw, kwt)):
        ranked = sorted(arm, key=lambda c: (-arm[c], c))
        for r, c in enumerate(ranked, 1):
            out[c] = out.get(c, 0.0) + w / (k + r)
    return out


def bm25f(
    q: Candidates, title_weight: float, k1: float = 1.5, b: float = 0.75, field: bool = False
) -> ArmScores:
    """BM25 of every dumped candidate with the document title counted ``title_weight`` times
    in every chunk of the document (tf + (w - 1) * title tf; the length likewise); w = 1 is
    the arm's own score (k1 1.5, b 0.75). With ``field`` the title is a field of weight w of
    every chunk: the first chunk (whose text starts with the title) adds w - 1 copies, the
    others w. IDF and avgdl stay the corpus'."""
    out: ArmScores = {}
    avgdl = q["avgdl"] or 1.0
    for key, ch in q["chunks"].items():
        cid = int(key)
        extra = title_weight - (1.0 if not field or ch["index"] == 0 else 0.0)
        dl = ch["len"] + extra * ch["title_len"]
        s = 0.0
        for lex, idf in zip(q["lexemes"], q["idf"], strict=True):
            tf = ch["tf"].get(lex, 0) + extra * ch["title_tf"].get(lex, 0)
            if tf > 0:
                s += idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))
        out[cid] = s
    return out


def doc_ranking(q: Candidates, chunk_scores: Mapping[int, float], agg: str) -> list[str]:
    """Documents best first. ``max``: the document at its best chunk among the best FETCH
    chunks (what pgrag eval does with hybrid_search's rows); ``max+0.1``/``top2``: its best
    chunk plus 0.1 x / plus the whole second-best chunk's score (aggregation at the document
    level over the same FETCH chunks)."""
    ranked = sorted(chunk_scores, key=lambda c: (-chunk_scores[c], c))[:FETCH]
    per_doc: dict[str, list[float]] = {}
    order: list[str] = []
    for c in ranked:
        doc = q["chunks"][str(c)]["doc"]
        if doc is None:
            continue
        if doc not in per_doc:
            order.append(doc)
            per_doc[doc] = []
        per_doc[doc].append(chunk_scores[c])
    if agg == "max":
        return order
    bonus = {"max+0.1": 0.1, "top2": 1.0}[agg]
    score = {d: s[0] + bonus * (s[1] if len(s) > 1 else 0.0) for d, s in per_doc.items()}
    pos = {d: i for i, d in enumerate(order)}
    return sorted(order, key=lambda d: (-score[d], pos[d]))


# -- the families: each a set of variants the cross-validation chooses among ----------------------


def variants() -> dict[str, dict[str, dict[str, Any]]]:
    weights = [0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5]
    fam: dict[str, dict[str, dict[str, Any]]] = {}
    fam["today: weighted min-max, vector_weight 0.8 (fixed)"] = {
        "minmax vw=0.8": {"norm": "minmax", "vw": 0.8}
    }
    for norm in NORMS:
        fam[f"{norm}, vector_weight grid"] = {
            f"{norm} vw={w}": {"norm": norm, "vw": w} for w in weights
        }
    fam["zscore, vector_weight 1 (fixed)"] = {"zscore vw=1.0": {"norm": "zscore", "vw": 1.0}}
    fam["dbsf, vector_weight 1 (fixed)"] = {"dbsf vw=1.0": {"norm": "dbsf", "vw": 1.0}}
    fam["zscore, missing arm at its floor, vector_weight grid"] = {
        f"zscore-floor vw={w}": {"norm": "zscore", "vw": w, "missing": "floor"} for w in weights
    }
    for norm in NORMS:
        fam[f"{norm}, missing arm filled with its real score, vector_weight grid"] = {
            f"{norm}-fill vw={w}": {"norm": norm, "vw": w, "missing": "fill"} for w in weights
        }
    fam["rrf, k grid"] = {f"rrf k={k}": {"rrf": k} for k in (10, 20, 40, 60, 100)}
    fam["minmax 0.8, document aggregation"] = {
        f"minmax vw=0.8 {a}": {"norm": "minmax", "vw": 0.8, "agg": a}
        for a in ("max", "max+0.1", "top2")
    }
    fam["zscore 1.0, document aggregation"] = {
        f"zscore vw=1.0 {a}": {"norm": "zscore", "vw": 1.0, "agg": a}
        for a in ("max", "max+0.1", "top2")
    }
    fam["keyword: BM25F title weight"] = {
        f"keyword title x{t}": {"keyword_only": True, "title": t} for t in (1.0, 1.5, 2.0, 3.0)
    }
    fam["minmax 0.8 + BM25F title weight"] = {
        f"minmax vw=0.8 title x{t}": {"norm": "minmax", "vw": 0.8, "title": t}
        for t in (1.0, 1.5, 2.0, 3.0)
    }
    fam["zscore 1.0 + BM25F title weight"] = {
        f"zscore vw=1.0 title x{t}": {"norm": "zscore", "vw": 1.0, "title": t}
        for t in (1.0, 1.5, 2.0, 3.0)
    }
    fam["keyword: BM25F title as a field of every chunk"] = {
        f"keyword title field x{t}": {"keyword_only": True, "title": t, "field": True}
        for t in (0.0, 0.5, 1.0, 2.0)
    }
    fam["minmax 0.8 + BM25F title as a field of every chunk"] = {
        f"minmax vw=0.8 title field x{t}": {"norm": "minmax", "vw": 0.8, "title": t, "field": True}
        for t in (0.0, 0.5, 1.0, 2.0)
    }
    fam["keyword: BM25 k1/b grid"] = {
        f"keyword k1={k1} b={b}": {"keyword_only": True, "k1": k1, "b": b}
        for k1 in (0.9, 1.2, 1.5, 2.0)
        for b in (0.5, 0.75, 0.9)
    }
    fam["minmax 0.8 + BM25 k1/b grid"] = {
        f"minmax vw=0.8 k1={k1} b={b}": {"norm": "minmax", "vw": 0.8, "k1": k1, "b": b}
        for k1 in (0.9, 1.2, 1.5, 2.0)
        for b in (0.5, 0.75, 0.9)
    }
    fam["zscore + BM25F title weight, both grids"] = {
        f"zscore vw={w} title x{t}": {"norm": "zscore", "vw": w, "title": t}
        for w in weights
        for t in (1.0, 1.5, 2.0, 3.0)
    }
    # Candidates per arm: hybrid_search fetches greatest(4 x match_count, 40) per arm, so an
    # application asking for 10 rows fuses 40, and the evaluation (100 rows) 400.
    for norm, w in (("minmax", 0.8), ("zscore", 0.8)):
        fam[f"{norm} {w}, candidates per arm"] = {
            f"{norm} vw={w} candidates={n}": {"norm": norm, "vw": w, "candidates": n}
            for n in (40, 100, 200, 400)
        }
    at40 = {"candidates": 40}
    fam["minmax, vector_weight grid, 40 candidates per arm"] = {
        f"minmax vw={w} candidates=40": {"norm": "minmax", "vw": w, **at40} for w in weights
    }
    fam["zscore, vector_weight grid, 40 candidates per arm"] = {
        f"zscore vw={w} candidates=40": {"norm": "zscore", "vw": w, **at40} for w in weights
    }
    fam["minmax or zscore, vector_weight grids, 40 candidates per arm"] = {
        **fam["minmax, vector_weight grid, 40 candidates per arm"],
        **fam["zscore, vector_weight grid, 40 candidates per arm"],
    }
    fam["default switch, 40 candidates per arm: today or zscore vw=0.8"] = {
        "minmax vw=0.8 candidates=40": {"norm": "minmax", "vw": 0.8, **at40},
        "zscore vw=0.8 candidates=40": {"norm": "zscore", "vw": 0.8, **at40},
    }
    # Switching the default: today's fusion or one alternative, chosen on four folds.
    for name, spec in (
        ("zscore vw=0.8", {"norm": "zscore", "vw": 0.8}),
        ("zscore vw=1.0", {"norm": "zscore", "vw": 1.0}),
        ("zscore vw=1.2", {"norm": "zscore", "vw": 1.2}),
        ("dbsf vw=0.8", {"norm": "dbsf", "vw": 0.8}),
    ):
        fam[f"default switch: today or {name}"] = {
            "minmax vw=0.8": {"norm": "minmax", "vw": 0.8},
            name: spec,
        }
    everything: dict[str, dict[str, Any]] = {}
    for name, members in fam.items():
        if name.startswith(("keyword", "default switch")) or "40 candidates" in name:
            continue
        everything.update(members)
    fam["every hybrid variant above"] = everything
    return fam


BM25_DEFAULTS = {"title": 1.0, "k1": 1.5, "b": 0.75}


def ranking(q: Candidates, spec: Mapping[str, Any]) -> list[str]:
    n = spec.get("candidates", len(q["vector"]) + len(q["keyword"]))
    vec = {c: s for c, s in q["vector"][:n]}
    kw = {c: s for c, s in q["keyword"][:n]}
    if spec.get("field") or any(spec.get(p, d) != d for p, d in BM25_DEFAULTS.items()):
        rescored = bm25f(
            q,
            spec.get("title", 1.0),
            spec.get("k1", 1.5),
            spec.get("b", 0.75),
            spec.get("field", False),
        )
        kw = {c: rescored[c] for c in kw}  # the arm's candidates, re-scored
    if spec.get("keyword_only"):
        scores: Mapping[int, float] = kw
    elif "rrf" in spec:
        scores = rrf_scores(vec, kw, spec["rrf"], 1.0, 1.0)
    else:
        full = None
        if spec.get("missing") == "fill":
            sims = {int(c): ch["similarity"] for c, ch in q["chunks"].items()}
            full = (sims, bm25f(q, 1.0))
        scores = fuse_scores(
            vec, kw, spec["norm"], spec["vw"], 1.0, spec.get("missing", "zero"), full
        )
    return doc_ranking(q, scores, spec.get("agg", "max"))


def evaluate(
    dataset: ev.BeirDataset, cands: Mapping[str, Candidates], folds: int
) -> dict[str, Any]:
    cache: dict[str, dict[str, dict[str, float]]] = {}

    def per_query(name: str, spec: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        if name not in cache:
            runs = {qid: ranking(cands[qid], spec) for qid in dataset.queries}
            cache[name] = ev.per_query_metrics(dataset.qrels, runs)
        return cache[name]

    families: dict[str, Any] = {}
    for family, members in variants().items():
        pq = {name: per_query(name, spec) for name, spec in members.items()}
        full = {name: round(ev.mean_metrics(v)["ndcg@10"], 4) for name, v in pq.items()}
        row: dict[str, Any] = {"full_test_ndcg@10": full}
        if len(members) > 1:
            cv = ev.cross_validate(pq, folds)
            row["chosen"] = cv.chosen
            row["out_of_fold_ndcg@10"] = round(cv.out_of_fold["ndcg@10"], 4)
            row["best_full_test"] = list(cv.best_full_test)
        else:
            cv = ev.cross_validate({**pq, "_": next(iter(pq.values()))}, folds)
            row["out_of_fold_ndcg@10"] = round(cv.out_of_fold["ndcg@10"], 4)
        families[family] = row
        print(f"{family}: OOF {row['out_of_fold_ndcg@10']:.4f}", file=sys.stderr)
    paired = {
        f"{other} vs {base}": sign_flip(cache[base], cache[other])
        for base, others in PAIRED.items()
        for other in others
    }
    return {"families": families, "paired_against_today": paired}


# Today's default (400 candidates: the evaluation's 100 rows; 40: an application's 10 rows)
# against the alternatives that beat it on the full test.
PAIRED = {
    "minmax vw=0.8": ["zscore vw=0.8", "zscore vw=1.2", "zscore-floor vw=0.8"],
    "minmax vw=0.8 candidates=40": ["zscore vw=0.8 candidates=40", "zscore vw=0.9 candidates=40"],
}


def sign_flip(
    base: Mapping[str, Mapping[str, float]],
    other: Mapping[str, Mapping[str, float]],
    rounds: int = 10000,
) -> dict[str, float]:
    """Paired randomisation test of the mean nDCG@10 difference over the queries (each query's
    difference kept or negated at random, seeded): the share of rounds at least as far from 0."""
    diffs = [other[q]["ndcg@10"] - base[q]["ndcg@10"] for q in base]
    observed = sum(diffs) / len(diffs)
    rnd = random.Random(0)
    extreme = sum(
        abs(sum(d if rnd.random() < 0.5 else -d for d in diffs)) / len(diffs) >= abs(observed)
        for _ in range(rounds)
    )
    return {
        "mean_difference": round(observed, 4),
        "p_value": round(extreme / rounds, 3),
        "queries_better": sum(d > 0 for d in diffs),
        "queries_worse": sum(d < 0 for d in diffs),
    }


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--dsn", default=os.environ.get("PGRAG_DSN"))
    parser.add_argument("--tenant", help="default beir-<dataset name> (ingested by beir.py)")
    parser.add_argument("--candidates", type=int, default=400, help="per arm (hybrid: 4 x 100)")
    parser.add_argument("--dump", type=Path, required=True, help="candidates file (.json.gz)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(list(argv) if argv is not None else None)

    dataset = ev.load_beir(args.data)
    tenant = args.tenant or f"beir-{dataset.name}"
    if not args.dump.exists():
        cands = dump(database_url(args.dsn), dataset, tenant, args.candidates)
        with gzip.open(args.dump, "wt") as f:
            json.dump(cands, f)
    with gzip.open(args.dump, "rt") as f:
        cands = json.load(f)
    evaluated = evaluate(dataset, cands, args.folds)
    families = evaluated["families"]
    # The model of the SQL checked against it: the same figures as beir.py's SQL runs.
    sql_rows = json.loads((ROOT / "benchmarks" / "results" / "beir_folds.json").read_text())
    reproduces = {
        "hybrid (SQL) vs minmax vw=0.8 (model)": [
            sql_rows["modes"]["hybrid"]["ndcg@10"],
            families["today: weighted min-max, vector_weight 0.8 (fixed)"]["full_test_ndcg@10"][
                "minmax vw=0.8"
            ],
        ],
        "keyword (SQL) vs keyword title x1.0 (model)": [
            sql_rows["modes"]["keyword"]["ndcg@10"],
            families["keyword: BM25F title weight"]["full_test_ndcg@10"]["keyword title x1.0"],
        ],
    }
    report = {
        "dataset": dataset.name,
        "queries": len(dataset.queries),
        "candidates_per_arm": args.candidates,
        "folds": args.folds,
        "split": "queries sorted by sha256 of their id, dealt round-robin (pgrag.eval.folds)",
        "method": "each family: the variant best on 4 folds scored on the 5th; out-of-fold = "
        "mean nDCG@10 over the held-out queries. Offline re-ranking of the SQL arms' "
        "candidates (see the module docstring).",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "PGRAG_HOME=/tmp/fusion-home .venv/bin/python benchmarks/fusion_probe.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "reproduces_beir_folds_ndcg@10": reproduces,
        "families": families,
        "paired_against_today": evaluated["paired_against_today"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
