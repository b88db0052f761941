"""Released SQL that needs a rewrite on servers older than PostgreSQL 17.

``sql/incremental/007-identifier-lexemes.sql`` changes the expression of the generated column
``pgrag.chunks.fts`` with ``ALTER TABLE ... ALTER COLUMN ... SET EXPRESSION``, which PostgreSQL
17 added: on 14-16 (Debian bookworm's 15, Supabase's 15, Citus clusters on 15 or 16) the whole
file is a syntax error and the installation stops there. The file is released (its checksum is
recorded and must not change), so on those servers it runs with that one statement replaced by
its older equivalent: drop the column (its GIN index goes with it), add it again with the new
expression, and recreate the index under its old name. The file, its recorded checksum and what
the other statements of the file do stay the same. What differs on 14-16: ``fts`` becomes the
last column of ``pgrag.chunks`` (every reader names its columns).

The choice is made by the server when the step runs (``server_version_num``), not by the
process that wrote the step: the SQL bundle and the Supabase files carry both forms, so one
bundle installs on every supported major version.
"""

from __future__ import annotations

SET_EXPRESSION_MIN_VERSION = 170000  # server_version_num of PostgreSQL 17

_FTS_SET_EXPRESSION = (
    "alter table pgrag.chunks alter column fts set expression as "
    "(pgrag.chunk_fts(language, content));"
)
_FTS_DROP_AND_ADD = (
    "alter table pgrag.chunks drop column fts;\n"
    "alter table pgrag.chunks add column fts tsvector\n"
    "    generated always as (pgrag.chunk_fts(language, content)) stored;\n"
    "create index chunks_fts_gin on pgrag.chunks using gin (fts);"
)

# (file name, statement as written, statement for servers before 17)
BEFORE_17: tuple[tuple[str, str, str], ...] = (
    ("incremental/007-identifier-lexemes.sql", _FTS_SET_EXPRESSION, _FTS_DROP_AND_ADD),
)


def rewrites(name: str, sql: str) -> list[tuple[str, str]]:
    """The (statement as written, replacement) pairs that apply to file ``name`` before 17."""
    return [
        (written, older)
        for file_name, written, older in BEFORE_17
        if name == file_name and written in sql
    ]
