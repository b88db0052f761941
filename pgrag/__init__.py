"""pgrag: retrieval-augmented generation inside Postgres.

Most of pgrag is versioned SQL (see ``sql/``); this package holds the migrator,
the ingester and the ``pgrag`` command-line interface.
"""

__version__ = "0.1.0"
