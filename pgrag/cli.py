"""The ``pgrag`` command line. pgrag's own errors become one-line messages and exit status 1."""

from __future__ import annotations

import click

from pgrag import __version__
from pgrag.cli_common import PgragGroup, echo_json, json_option, pass_app
from pgrag.context import AppContext
from pgrag.db import redact
from pgrag.embedded import EmbeddedCluster
from pgrag.migrator import Migrator


@click.group(cls=PgragGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--dsn",
    envvar="PGRAG_DSN",
    metavar="URL",
    help="PostgreSQL connection string (env PGRAG_DSN, then DATABASE_URL). "
    "Without one, pgrag uses its embedded database, starting it on demand.",
)
@click.version_option(__version__, prog_name="pgrag")
@click.pass_context
def main(ctx: click.Context, dsn: str | None) -> None:
    """pgrag: retrieval-augmented generation inside Postgres.

    \b
    Quick start (embedded database, nothing to set up):
      pgrag migrate            install or upgrade pgrag's SQL
      pgrag ingest docs/       extract, chunk, embed and load documents
      pgrag search "question"  hybrid BM25 + vector search with citations
    """
    ctx.obj = AppContext(dsn)


# -- embedded database ---------------------------------------------------------------------------


@main.group()
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


@main.command()
@click.option(
    "--dims",
    type=int,
    default=None,
    envvar="EMBEDDING_DIMENSION",
    help="Embedding dimension, chosen at first install (default 384, the local model's; "
    "1536 for OpenAI text-embedding-3-small). Env EMBEDDING_DIMENSION.",
)
@click.option("--dry-run", is_flag=True, help="Print the SQL that would run; change nothing.")
@click.option(
    "--citus",
    is_flag=True,
    help="On a Citus coordinator: then distribute pgrag's tables by tenant (sql/citus/; "
    "docs/scaling.md). Use it for every migrate of that database.",
)
@json_option
@pass_app
def migrate(app: AppContext, dims: int | None, dry_run: bool, citus: bool, as_json: bool) -> None:
    """Install or upgrade pgrag's SQL in the database."""
    if citus:
        from pgrag.citus import migrate_citus

        result = migrate_citus(app.dsn(), dims, dry_run=dry_run)
    else:
        result = Migrator(app.dsn()).migrate(dims, dry_run=dry_run)
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


@main.command()
@json_option
@pass_app
def status(app: AppContext, as_json: bool) -> None:
    """Show applied and pending migrations, pgvector, and the embedding configuration."""
    dsn = app.dsn()
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
    for m in st.migrations:
        applied = m.record.applied_at.strftime("%Y-%m-%d %H:%M") if m.record else ""
        click.echo(f"  {m.state:<8} {m.file.name:<40} {m.file.sha256[:12]}  {applied}")
    click.echo("up to date" if not st.pending else f"{len(st.pending)} pending: run pgrag migrate")


# -- commands defined in their own modules (one import and one add_command each) ----------------

from pgrag.cli_search import ask, evaluate, search  # noqa: E402

main.add_command(search)
main.add_command(ask)
main.add_command(evaluate)

from pgrag.cli_bundle import sql_bundle  # noqa: E402

main.add_command(sql_bundle)

from pgrag.cli_ingest import delete, embed, ingest  # noqa: E402

main.add_command(ingest)
main.add_command(delete)
main.add_command(embed)
