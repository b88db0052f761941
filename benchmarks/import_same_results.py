"""``pgrag import`` of SciFact both ways: the bulk path gives a tenant the results of a row-by-row
load, query by query, for every search function.

The 5,183 SciFact abstracts (``$PGRAG_SHARED_DIR/data/scifact``) with real embeddings of the
bundled model (its first 600 characters, as ``latency.py`` embeds them; computed once and cached
under ``$PGRAG_HOME/benchmarks``) are written to a JSONL export (``content``, ``embedding``,
``source_uri``, ``title``) and imported twice into one fresh database with
:func:`pgrag.importer.import_source`: tenant ``bulk`` by the path a tenant's first import takes
(``pgrag.bulk_replace_document_chunks``, then ``pgrag.finish_bulk_load``: BM25 postings in one
pass, the tenant's own HNSW graph built once) and tenant ``rows`` through
``pgrag.replace_document_chunks`` batch by batch (the ordinary path: the BM25 triggers index
every batch, every row enters the shared graph, then the tenant's own graph is built as after
any import that outgrows the exact path).

Then the 300 SciFact test queries run as each tenant, and the top 10 of ``vector_search``,
``keyword_search`` and ``hybrid_search`` (each as configured) and of the exact vector scan
(``vector_search`` with ``pgrag.exact_search_max_rows`` above the corpus) are compared:
``identical`` counts queries whose top 10 are the same rows in the same order with the same
scores (to 9 decimals); ``same_up_to_ties`` allows rows tied at the last score to differ. Both
graphs are built by ``CREATE INDEX`` over the same rows, but an HNSW build is not deterministic
(random levels, parallel workers), so the graph-walking functions may differ where the exact
ones may not. The control says by how much: the row-by-row tenant against itself after its
graph is built once more (``pgrag.share_tenant``, ``pgrag.isolate_tenant``).

    python benchmarks/import_same_results.py [--queries 300]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import latency  # noqa: E402
from common import SCIFACT  # noqa: E402

from pgrag.db import connect, set_request_tenant  # noqa: E402
from pgrag.home import pgrag_home  # noqa: E402
from pgrag.importer import ImportOptions  # noqa: E402
from pgrag.importer.run import Importer  # noqa: E402
from pgrag.importer.sources import open_file  # noqa: E402
from pgrag.pipeline.embedders import LOCAL_MODEL_NAME  # noqa: E402
from pgrag.testing import drop_database, fresh_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "import_same_results.json"
CALLS = {
    "vector_search": "select source_uri, chunk_index, similarity from public.vector_search(%s, 10)",
    "keyword_search": "select source_uri, chunk_index, score from public.keyword_search(%s, 10)",
    "hybrid_search": "select source_uri, chunk_index, score from public.hybrid_search(%s, %s, 10)",
    "exact": "select source_uri, chunk_index, similarity from public.vector_search(%s, 10)",
}


def embedded(name: str, texts: list[str]) -> np.ndarray:
    """Real embeddings of ``texts`` by the bundled model, cached under PGRAG_HOME by content
    hash (taken from ``latency.py``'s cache when it already holds them)."""
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    cache = pgrag_home() / "benchmarks"
    path = cache / f"{name}-{digest}.npy"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        other = latency.CACHE / path.name
        if other.exists():
            shutil.copyfile(other, path)
        else:
            np.save(path, latency.embed_cached(name, texts))
    return np.load(path)


def write_export(path: Path, docs: list[dict[str, Any]], vectors: np.ndarray) -> None:
    with path.open("w") as handle:
        for d, v in zip(docs, vectors, strict=True):
            record = {
                "content": (d["title"] + ". " + d["text"]).strip(),
                "embedding": [float(x) for x in v],
                "source_uri": f"scifact/{d['_id']}",
                "title": d["title"],
            }
            handle.write(json.dumps(record) + "\n")


def import_as(dsn: str, export: Path, tenant: str, bulk: bool) -> dict[str, Any]:
    importer = Importer(
        dsn, open_file(export), ImportOptions(tenant=tenant, model=LOCAL_MODEL_NAME)
    )
    if not bulk:
        importer.bulk = False  # the ordinary path, whatever pgrag.bulk_load_applies says
    try:
        s = importer.run()
    finally:
        importer.close()
    return {
        "bulk_load": s.bulk_load,
        "documents": s.documents_new,
        "chunks": s.chunks_imported,
        "seconds": s.seconds,
        "chunks_per_s": round(s.chunks_imported / s.seconds),
        "own_graph": s.tenant_isolated,
    }


def top10(dsn: str, tenant: str, queries: list[str], qvecs: np.ndarray) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {name: [] for name in CALLS}
    with connect(dsn) as conn:
        for text, vec in zip(queries, qvecs, strict=True):
            for name, call in CALLS.items():
                with conn.transaction():
                    if name == "exact":
                        conn.execute("set local pgrag.exact_search_max_rows = 100000000")
                    set_request_tenant(conn, tenant)
                    args = {"keyword_search": (text,), "hybrid_search": (text, vec)}.get(
                        name, (vec,)
                    )
                    rows = conn.execute(call, args).fetchall()
                out[name].append([(u, c, round(float(s), 9)) for u, c, s in rows])
    return out


def up_to_ties(x: list[Any], y: list[Any]) -> bool:
    if [r[2] for r in x] != [r[2] for r in y]:
        return False
    cut = x[-1][2] if x else None
    return {r for r in x if r[2] != cut} == {r for r in y if r[2] != cut}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queries", type=int, default=300, help="SciFact test queries")
    parser.add_argument("--abstracts", type=int, default=None, help="the first N (a quick run)")
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not (SCIFACT / "corpus.jsonl").exists():
        print(f"skipped: SciFact not found in {SCIFACT} (set PGRAG_SHARED_DIR)")
        return
    docs = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open()]
    texts, queries = latency.load_scifact()
    queries = queries[: args.queries]
    vectors = embedded("scifact-corpus", [t[: latency.EMBED_CHARS] for t in texts])
    docs, vectors = docs[: args.abstracts], vectors[: args.abstracts]
    qvecs = embedded("scifact-queries", queries)
    result: dict[str, Any] = {
        "command": "python benchmarks/import_same_results.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "abstracts": len(docs),
        "queries": len(queries),
    }
    with tempfile.TemporaryDirectory() as folder, server(args.admin_dsn, "pgrag-same-") as admin:
        export = Path(folder) / "scifact.jsonl"
        write_export(export, docs, vectors)
        dsn = fresh_database(admin, "import_same_results")
        try:
            for tenant, bulk in (("bulk", True), ("rows", False)):
                t = time.perf_counter()
                result[tenant] = import_as(dsn, export, tenant, bulk)
                print(
                    f"== {tenant}: {result[tenant]} ({time.perf_counter() - t:.0f} s)", flush=True
                )
            tops = {t: top10(dsn, t, queries, qvecs) for t in ("bulk", "rows")}
            # The control: the row-by-row tenant against itself, its graph built once more.
            with connect(dsn, autocommit=True) as conn:
                conn.execute("select pgrag.share_tenant('rows')")
                conn.execute("select pgrag.isolate_tenant('rows')")
            tops["rows_rebuilt"] = top10(dsn, "rows", queries, qvecs)
        finally:
            drop_database(admin, dsn)
    result["compared"] = {
        name: {
            "queries": len(queries),
            "identical": sum(
                a == b for a, b in zip(tops["bulk"][name], tops["rows"][name], strict=True)
            ),
            "same_up_to_ties": sum(
                up_to_ties(a, b)
                for a, b in zip(tops["bulk"][name], tops["rows"][name], strict=True)
            ),
            "full_top10": sum(len(a) == 10 for a in tops["bulk"][name]),
        }
        for name in CALLS
    }
    result["control_rows_graph_rebuilt"] = {
        name: sum(
            a == b for a, b in zip(tops["rows"][name], tops["rows_rebuilt"][name], strict=True)
        )
        for name in CALLS
    }
    result["machine"]["load_avg_at_end"] = list(os.getloadavg())
    print(json.dumps(result["compared"], indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
