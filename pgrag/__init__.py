"""pgrag: retrieval-augmented generation inside Postgres.

Most of pgrag is versioned SQL (see ``sql/``): retrieval, tenancy, limits and integrity live
there, so every client gets them. This package installs that SQL, feeds it documents, and calls
it from the ``pgrag`` command line. What each part is:

Installing and upgrading
    :mod:`pgrag.install` (``migrator``, ``bundle``, ``citus``, ``compat``): the install
    engine, the SQL bundle, Citus, older servers.

The document pipeline
    :mod:`pgrag.pipeline` (``extract``, ``frontmatter``, ``html_depth``, ``chunking``,
    ``embedders``, ``onnx_model``): the stages a document goes through, each usable alone;
    :mod:`pgrag.ingest` runs them for ``pgrag ingest`` (plan, load, atomic swap) and
    :mod:`pgrag.worker` for the document queue (``pgrag worker``); :mod:`pgrag.reembed` switches
    the embedding model; :mod:`pgrag.documents` deletes documents and says what a tenant holds.

Retrieval
    :mod:`pgrag.search`: typed calls of the SQL retrieval API and the searches the commands run
    (``run_search``, ``run_context``); :mod:`pgrag.query_cache` (query embeddings through the
    cache), :mod:`pgrag.search_log` (the optional search log), :mod:`pgrag.answer` (the
    optional LLM answer, with :mod:`pgrag.openai_errors`); :mod:`pgrag.eval` (retrieval
    quality on BEIR data).

Inside PostgreSQL
    :mod:`pgrag.plpython`: what pgrag's PL/Python functions run, and a ``plpy`` stub.

Operating
    :mod:`pgrag.usage` (token usage), :mod:`pgrag.stats` (figures per tenant),
    :mod:`pgrag.local_server` (the embedded PostgreSQL of ``pgrag db``), :mod:`pgrag.home`
    (``PGRAG_HOME``), :mod:`pgrag.progress` (progress on stderr).

Shared
    :mod:`pgrag.db` (connecting; acting as a tenant: ``tenant_transaction``),
    :mod:`pgrag.errors` (the exceptions and the one SQLSTATE -> exception table).

The command line
    :mod:`pgrag.cli`: one module per group of commands; each parses options, calls the modules
    above and renders the result.

Not shipped
    :mod:`pgrag.testing` (throwaway servers and databases for the tests and benchmarks of a
    source checkout) is left out of the wheel.
"""

__version__ = "0.1.0"
