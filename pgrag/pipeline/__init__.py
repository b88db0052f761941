"""The stages a document goes through before SQL stores it, each usable on its own.

In order:

* :mod:`.extract`: a file, a URL or a string -> an ``ExtractedDocument`` (title, hash, blocks),
  with :mod:`.frontmatter` (bounded YAML front matter) and :mod:`.html_depth` (bounded HTML
  nesting) guarding untrusted input;
* :mod:`.chunking`: blocks -> chunks, sized in the embedding model's own tokens
  (:mod:`.semantic_chunking` also cuts where sentence embeddings show a change of topic);
* :mod:`.embedders`: chunks (and queries) -> vectors: the local model, run by :mod:`.onnx_model`
  on ONNX Runtime, or an OpenAI-compatible endpoint.

:mod:`pgrag.ingest` and :mod:`pgrag.worker` drive these stages; :mod:`pgrag.plpython.server`
runs the chunker and the embedder inside PostgreSQL. Nothing here talks to the database except
:func:`.embedders.read_embedding_config` and :func:`.embedders.embedder_for_database` (the model
the database records). This ``__init__`` imports nothing, so the server's Python loads only the
stages it uses.
"""
