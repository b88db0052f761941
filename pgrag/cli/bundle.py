"""``pgrag sql-bundle``: pgrag's SQL for psql or a Supabase migrations folder, no Python needed
on the database side."""

from __future__ import annotations

from pathlib import Path

import click

from pgrag.install.bundle import SUPABASE_VECTOR_SCHEMA, bundle_sql, write_supabase
from pgrag.install.migrator import DEFAULT_DIMS, DEFAULT_VECTOR_SCHEMA, MAX_DIMS


@click.command("sql-bundle")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Write the bundle to FILE (default: standard output).",
)
@click.option(
    "--dims",
    type=click.IntRange(1, MAX_DIMS),
    default=DEFAULT_DIMS,
    show_default=True,
    envvar="EMBEDDING_DIMENSION",
    help="Embedding dimension for a first install (a setting on the bundle's first lines).",
)
@click.option(
    "--vector-schema",
    default=None,
    metavar="NAME",
    help="Schema to create pgvector in when it is missing (default public; extensions with "
    "--supabase). An installed pgvector is used wherever it is.",
)
@click.option(
    "--supabase",
    "supabase_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Write timestamped files into a Supabase migrations folder (e.g. supabase/migrations) "
    "instead of one bundle; files already there are not written again.",
)
def sql_bundle(
    output: Path | None, dims: int, vector_schema: str | None, supabase_dir: Path | None
) -> None:
    """Write pgrag's SQL as one idempotent file for `psql -v ON_ERROR_STOP=1 -f`.

    \b
    Examples:
      pgrag sql-bundle -o pgrag.sql && psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f pgrag.sql
      pgrag sql-bundle --dims 1536 --supabase supabase/migrations && supabase db push
    """
    if supabase_dir is not None:
        if output is not None:
            raise click.UsageError("use either -o FILE or --supabase DIR, not both")
        written = write_supabase(supabase_dir, dims, vector_schema or SUPABASE_VECTOR_SCHEMA)
        for path in written:
            click.echo(f"wrote {path}")
        if not written:
            click.echo(f"{supabase_dir} already holds this version of pgrag")
        return
    text = bundle_sql(dims, vector_schema or DEFAULT_VECTOR_SCHEMA)
    if output is None:
        click.echo(text, nl=False)
        return
    output.write_text(text, encoding="utf-8")
    click.echo(f'wrote {output} (apply with: psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f {output})')
