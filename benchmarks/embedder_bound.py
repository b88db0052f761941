"""How fast the local model could embed on this CPU, and how close the embedder comes.

    python benchmarks/embedder_bound.py        # writes benchmarks/results/embedder_bound.json

1. The CPU's sustained float32 matrix-multiply rate, twice: numpy (its BLAS) and ONNX Runtime's
   MatMul with the thread count the embedder uses (ONNX Runtime's default, one per core), on the
   shape of the model's widest layer ([tokens, 384] x [384, 1536]).
2. The model's floating-point operations per chunk of n tokens ([CLS] and [SEP] included),
   counted from the architecture (L = 6 layers, d = 384 hidden, f = 1536 intermediate,
   12 heads; a multiply-add is 2 operations):

       per layer: Q, K, V and output projections   4 * 2 n d^2  = 8 n d^2
                  feed-forward (two linear layers) 2 * 2 n d f  = 4 n d f
                  attention scores Q K^T + probs V 2 * 2 n^2 d  = 4 n^2 d
       FLOPs(n) = L (8 n d^2 + 4 n d f + 4 n^2 d)
                = 21,233,664 n + 9,216 n^2

   (layer norms, softmax, GELU and the embedding lookup are a few per cent more and left out,
   so the bound is slightly generous).
3. The bound in chunks/s: the faster of the two measured rates / FLOPs(n).
4. A sweep of batch size and threads at 200 tokens (fp32 and int8), every setting once per
   round, interleaved; then the embedder (``LocalEmbedder.embed``, tokenisation included) on real
   text, SciFact abstracts cut to exactly 60, 200 and 256 tokens, the old embedder (the model
   code of git revision --before, fp32, batch 64) against today's at its default batch size in
   fp32 and int8, interleaved in one run, as a fraction of the bound. The machine is shared:
   every figure is the best of its rounds (the run least disturbed by other work), and every
   round re-measures the matrix-multiply rate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import ROOT, SCIFACT

LAYERS, HIDDEN, INTERMEDIATE = 6, 384, 1536
LENGTHS = (60, 200, 256)
BEFORE = "965171b"  # the model code before the fused operators (the graph the issue measured)


def flops_per_chunk(n: int) -> int:
    """Floating-point operations of one chunk of ``n`` tokens (see the module docstring)."""
    d, f = HIDDEN, INTERMEDIATE
    return LAYERS * (8 * n * d * d + 4 * n * d * f + 4 * n * n * d)


def _sustained(run: Any, flops: float, seconds: float) -> float:
    """GFLOP/s of ``run`` repeated for about ``seconds`` (best of three equal slices)."""
    run()
    best = 0.0
    for _ in range(3):
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 3:
            run()
            count += 1
        best = max(best, count * flops / (time.perf_counter() - start) / 1e9)
    return best


def numpy_gemm(m: int, seconds: float) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, HIDDEN), dtype=np.float32)
    b = rng.standard_normal((HIDDEN, INTERMEDIATE), dtype=np.float32)
    return _sustained(lambda: a @ b, 2.0 * m * HIDDEN * INTERMEDIATE, seconds)


def onnx_matmul(m: int, seconds: float, threads: int | None) -> float:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    b = rng.standard_normal((HIDDEN, INTERMEDIATE), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "matmul",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, HIDDEN])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [m, INTERMEDIATE])],
        initializer=[numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as the embedder
    if threads is not None:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
    a = rng.standard_normal((m, HIDDEN), dtype=np.float32)
    return _sustained(lambda: session.run(None, {"a": a}), 2.0 * m * HIDDEN * INTERMEDIATE, seconds)


def texts_of_length(tokens: int, count: int) -> list[str]:
    """``count`` SciFact abstracts cut to exactly ``tokens`` word pieces with [CLS] and [SEP]."""
    from tokenizers import Tokenizer

    from pgrag.pipeline.embedders import local_model_path

    tokenizer = Tokenizer.from_file(str(local_model_path() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    out: list[str] = []
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"]
            encoding = tokenizer.encode(text, add_special_tokens=False)
            if len(encoding.ids) < tokens - 2:
                continue
            cut = text[: encoding.offsets[tokens - 3][1]]
            if len(tokenizer.encode(cut, add_special_tokens=False).ids) == tokens - 2:
                out.append(cut)
            if len(out) == count:
                break
    return out


class EmbedderAt:
    """The fp32 local model as the code of git revision ``rev`` ran it (its graph, its cache
    file in a temporary folder), in batches of ``batch_size``: the old embedder side by side with
    today's in one run."""

    def __init__(self, rev: str, batch_size: int) -> None:
        import tempfile
        import types

        from pgrag.pipeline.embedders import local_model_path

        shown = subprocess.run(
            ["git", "show", f"{rev}:pgrag/pipeline/onnx_model.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if shown.returncode != 0:
            raise SystemExit(
                f"--before {rev}: not in this clone's history ({shown.stderr.strip()})"
            )
        source = shown.stdout
        module = types.ModuleType(f"onnx_model_at_{rev}")
        sys.modules[module.__name__] = module  # dataclasses and typing resolve names through it
        exec(compile(source, f"{rev}:onnx_model.py", "exec"), module.__dict__)
        self._cache = tempfile.TemporaryDirectory(prefix="pgrag-embedder-at-")
        self._encoder = module.OnnxSentenceEncoder(local_model_path(), Path(self._cache.name))
        self.batch_size = batch_size

    def embed(self, texts: list[str]) -> Any:
        return self._encoder.encode(texts, batch_size=self.batch_size)


def rate(embedder: Any, texts: list[str]) -> float:
    start = time.perf_counter()
    embedder.embed(texts)
    return len(texts) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=96, help="chunks per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--batch", type=int, default=None, help="default: the embedder's")
    parser.add_argument("--gemm-seconds", type=float, default=1.5)
    parser.add_argument(
        "--before",
        default=BEFORE,
        help="git revision of the old embedder, run in batches of 64 (default: %(default)s, "
        "the last with the plain-operator graph)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/embedder_bound.json")
    args = parser.parse_args(argv)

    from pgrag.pipeline.embedders import LOCAL_BATCH_SIZE, LocalEmbedder

    load_before = os.getloadavg()
    m = 64 * 200  # a batch of 64 chunks of 200 tokens
    gemm: dict[str, list[float]] = {"numpy": [], "onnx": [], "onnx_1_thread": []}

    def measure_gemm() -> None:
        # Measured again in every round: the machine is shared, and the bound is what it
        # sustains when the other work leaves it alone (the best measurement of the run).
        gemm["numpy"].append(numpy_gemm(m, args.gemm_seconds))
        gemm["onnx"].append(onnx_matmul(m, args.gemm_seconds, None))
        gemm["onnx_1_thread"].append(onnx_matmul(m, args.gemm_seconds, 1))
        print({k: round(v[-1], 1) for k, v in gemm.items()}, flush=True)

    texts = {n: texts_of_length(n, args.chunks) for n in LENGTHS}

    # 1. Batch size and threads at 200 tokens, every setting once per round, interleaved.
    settings = [(p, t, b) for t in (None, 1) for b in (8, 16, 32, 64) for p in ("fp32", "int8")]
    made = {s: LocalEmbedder(batch_size=s[2], threads=s[1], precision=s[0]) for s in settings}
    for e in made.values():
        e.embed(texts[200][:8])  # load and warm up
    swept: dict[Any, list[float]] = {s: [] for s in settings}
    for _ in range(args.repeats):
        measure_gemm()
        for s in settings:
            swept[s].append(rate(made[s], texts[200]))
    sweep = [
        {
            "precision": p,
            "threads": t or "default",
            "batch_size": b,
            "chunks_per_s": round(max(swept[(p, t, b)]), 1),
            "runs": [round(r, 1) for r in swept[(p, t, b)]],
        }
        for (p, t, b) in settings
    ]
    for row in sweep:
        print(row, flush=True)

    # 2. Per chunk length: the old setting (fp32, batch 64) against the embedder's default batch
    # size (chosen from the sweep), fp32 and int8.
    best_batch = args.batch or LOCAL_BATCH_SIZE
    configs = {
        "before": EmbedderAt(args.before, 64),
        "fp32": LocalEmbedder(batch_size=best_batch, precision="fp32"),
        "int8": LocalEmbedder(batch_size=best_batch, precision="int8"),
    }
    for e in configs.values():
        e.embed(texts[200][:8])
    cosine = (configs["before"].embed(texts[200]) * configs["int8"].embed(texts[200])).sum(axis=1)
    measured: dict[str, dict[int, list[float]]] = {c: {n: [] for n in LENGTHS} for c in configs}
    for _ in range(args.repeats):
        measure_gemm()
        for n in LENGTHS:
            for c, e in configs.items():
                measured[c][n].append(rate(e, texts[n]))
    rates = {
        "numpy_gemm_gflops": round(max(gemm["numpy"]), 1),
        "onnx_matmul_gflops": round(max(gemm["onnx"]), 1),
        "onnx_matmul_1_thread_gflops": round(max(gemm["onnx_1_thread"]), 1),
        "gemm_runs": {k: [round(x, 1) for x in v] for k, v in gemm.items()},
    }
    peak = max(rates["numpy_gemm_gflops"], rates["onnx_matmul_gflops"])
    per_length = []
    for n in LENGTHS:
        bound = peak * 1e9 / flops_per_chunk(n)
        row: dict[str, Any] = {
            "tokens": n,
            "gflop_per_chunk": round(flops_per_chunk(n) / 1e9, 3),
            "bound_chunks_per_s": round(bound, 1),
        }
        for c in configs:
            best = max(measured[c][n])
            row[f"{c}_chunks_per_s"] = round(best, 1)
            row[f"{c}_runs"] = [round(r, 1) for r in measured[c][n]]
            row[f"{c}_fraction_of_bound"] = round(best / bound, 3)
        row["fp32_speedup"] = round(row["fp32_chunks_per_s"] / row["before_chunks_per_s"], 2)
        row["int8_speedup"] = round(row["int8_chunks_per_s"] / row["before_chunks_per_s"], 2)
        per_length.append(row)
        print(row, flush=True)

    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    result = {
        "command": "python benchmarks/embedder_bound.py " + " ".join(argv or sys.argv[1:]),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_head": head,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_before": list(load_before),
            "load_avg_at_end": list(os.getloadavg()),
        },
        "flops_formula": (
            "L (8 n d^2 + 4 n d f + 4 n^2 d), L=6, d=384, f=1536; n tokens with [CLS]/[SEP]"
        ),
        "matmul_shape": [m, HIDDEN, INTERMEDIATE],
        **rates,
        "bound_rate_gflops": peak,
        "batch_size": best_batch,
        "chunks_per_measurement": args.chunks,
        "repeats": args.repeats,
        "per_length": per_length,
        "int8_cosine_to_fp32": {
            "min": round(float(cosine.min()), 4),
            "mean": round(float(cosine.mean()), 4),
        },
        "sweep_200_tokens": sweep,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
