"""Released SQL that servers older than PostgreSQL 17 cannot run as written, and what they run.

``sql/incremental/007-identifier-lexemes.sql`` changes the expression of the generated column
``pgrag.chunks.fts`` with ``ALTER TABLE ... ALTER COLUMN ... SET EXPRESSION``, which PostgreSQL
17 added: on 14-16 (Debian bookworm's 15, Supabase projects on 15, Citus clusters on 15 or 16)
the whole file would be a syntax error. The file is released (its checksum is recorded and must
not change), so the install engine (:func:`pgrag.migrator.install_steps`) runs it there with
that one statement replaced by its older equivalent: drop the column (its GIN index goes with it)
and add it again with the new expression, then recreate the index under its old name. The
replacement is made by the step itself, in SQL, from the server's ``server_version_num``, so
``pgrag migrate``, the psql bundle and the Supabase files all do it. The file, its recorded
checksum and what its other statements do stay the same. What differs on 14-16: ``fts`` becomes
the last column of ``pgrag.chunks`` (every reader names its columns).
"""

from __future__ import annotations

# server_version_num from which every released statement runs as written.
SERVER_VERSION_AS_WRITTEN = 170000

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

# Migration file name -> (statement as written, its form for servers before 17), in order.
BEFORE_17: dict[str, tuple[tuple[str, str], ...]] = {
    "incremental/007-identifier-lexemes.sql": ((_FTS_SET_EXPRESSION, _FTS_DROP_AND_ADD),),
}
