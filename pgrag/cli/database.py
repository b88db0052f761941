"""``pgrag db``, ``pgrag migrate`` and ``pgrag status``: the database itself (the embedded
server, pgrag's schema in it)."""

from __future__ import annotations

import click

from pgrag.cli.common import echo_json, json_option, pass_state
from pgrag.cli.state import CliState
from pgrag.db import redact
from pgrag.install.migrator import MAX_DIMS, Migrator
from pgrag.local_server import EmbeddedCluster

# -- embedded database ---------------------------------------------------------------------------


@click.group()
def db() -> None:
    """Manage the embedded PostgreSQL (data under $PGRAG_HOME/pgdata)."""


@db.command("start")
def db_start() -> None:
    """Start the embedded database (initialising it on first use) and print its URL."""
    click.echo(EmbeddedCluster().start())


@db.command("stop")
def db_stop() -> None:
    """Stop the embedded database."""
    cluster = EmbeddedCluster()
    stopped = cluster.stop()
    click.echo(f"stopped ({cluster.data_dir})" if stopped else "not running")


@db.command("status")
@json_option
def db_status(as_json: bool) -> None:
    """Show whether the embedded database runs, and where its data lives."""
    st = EmbeddedCluster().status()
    data = {
        "data_dir": str(st.data_dir),
        "initialized": st.initialized,
        "running": st.running,
        "pid": st.pid,
        "url": st.url,
    }
    if as_json:
        echo_json(data)
        return
    click.echo(f"data directory: {st.data_dir}")
    click.echo(f"running:        {f'yes (pid {st.pid})' if st.running else 'no'}")
    if st.url:
        click.echo(f"url:            {st.url}")


@db.command("url")
def db_url() -> None:
    """Print the embedded database's connection URL (starting it if needed)."""
    click.echo(EmbeddedCluster().start())


# -- migrations ----------------------------------------------------------------------------------


@click.command()
@click.option(
    "--dims",
    type=click.IntRange(1, MAX_DIMS),
    default=None,
    envvar="EMBEDDING_DIMENSION",
    help="Embedding dimension, chosen at first install (default 384, the local model's; "
    "1536 for OpenAI text-embedding-3-small, 3072 for text-embedding-3-large; above 2000 the "
    "HNSW graphs index half-precision copies). Env EMBEDDING_DIMENSION.",
)
@click.option("--dry-run", is_flag=True, help="Print the SQL that would run; change nothing.")
@click.option(
    "--citus",
    is_flag=True,
    help="On a Citus coordinator: then distribute pgrag's tables by tenant (sql/citus/; "
    "docs/scaling.md). Use it for every migrate of that database.",
)
@json_option
@pass_state
def migrate(state: CliState, dims: int | None, dry_run: bool, citus: bool, as_json: bool) -> None:
    """Install or upgrade pgrag's SQL in the database."""
    if citus:
        from pgrag.install.citus import migrate_citus

        result = migrate_citus(state.dsn(), dims, dry_run=dry_run)
    else:
        result = Migrator(state.dsn()).migrate(dims, dry_run=dry_run)
    if as_json:
        echo_json({"applied": result.applied, "dims": result.dims, "dry_run": result.dry_run})
        return
    if dry_run:
        for statement in result.statements:
            click.echo(statement)
        return
    if result.nothing_to_do:
        click.echo("Nothing to apply: the database is up to date.")
        return
    for name in result.applied:
        click.echo(f"applied {name}")
    click.echo(f"pgrag is installed ({result.dims}-dimension embeddings).")


@click.command()
@json_option
@pass_state
def status(state: CliState, as_json: bool) -> None:
    """Show applied and pending migrations, pgvector, and the embedding configuration."""
    dsn = state.dsn()
    st = Migrator(dsn).status()
    if as_json:
        echo_json({"database": redact(dsn), **st.as_dict()})
        return
    click.echo(f"database:  {redact(dsn)}")
    click.echo(
        f"pgvector:  installed {st.pgvector_installed or 'no'}"
        f" (available {st.pgvector_available or 'no'})"
    )
    if st.dims is not None:
        click.echo(f"embedding: {st.dims} dims, model {st.model or '(set by the first ingest)'}")
    if st.text_search is not None:
        how = {
            "plpython": "PL/Python (queries embedded inside the database)",
            "stub": "stubs (no PL/Python: cached queries only)",
        }
        line = f"text search: {how.get(st.text_search, st.text_search)}"
        if st.text_search_wanted and st.text_search_wanted != st.text_search:
            line += f"; pgrag migrate would install {st.text_search_wanted}"
        click.echo(line)
    for m in st.migrations:
        applied = m.record.applied_at.strftime("%Y-%m-%d %H:%M") if m.record else ""
        click.echo(f"  {m.state:<8} {m.file.name:<40} {m.file.sha256[:12]}  {applied}")
    click.echo("up to date" if not st.pending else f"{len(st.pending)} pending: run pgrag migrate")
