"""The ``pgrag`` command line: the root group and its ``--dsn``.

Each group of commands has its module: ``database`` (db, migrate, status), ``ingest`` (ingest,
delete, embed), ``importer``
(import), ``worker`` (the document queue), ``search`` (search, ask), ``browse``
(facets, suggest), ``eval``, ``reembed``, ``stats``, ``bundle`` (sql-bundle). ``common``
turns every error into one line and a documented exit status; ``state`` holds what commands
share.
"""

from __future__ import annotations

import click

from pgrag import __version__, tracing
from pgrag.cli import browse, bundle, database, importer, ingest, reembed, search, stats, worker
from pgrag.cli import eval as eval_command
from pgrag.cli.common import PgragGroup
from pgrag.cli.state import CliState


@click.group(cls=PgragGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--dsn",
    envvar="PGRAG_DSN",
    metavar="URL",
    help="PostgreSQL connection string (env PGRAG_DSN, then DATABASE_URL). "
    "Without one, pgrag uses its embedded database, starting it on demand.",
)
@click.option(
    "--read-dsn",
    envvar="PGRAG_READ_DSN",
    metavar="URL",
    help="Where search, ask and eval read from, e.g. a hot standby (env PGRAG_READ_DSN); "
    "writes (ingest, eval's ingest) still go to --dsn. Default: --dsn.",
)
@click.version_option(__version__, prog_name="pgrag")
@click.pass_context
def main(ctx: click.Context, dsn: str | None, read_dsn: str | None) -> None:
    """pgrag: retrieval-augmented generation inside Postgres.

    \b
    Quick start (embedded database, nothing to set up):
      pgrag migrate            install or upgrade pgrag's SQL
      pgrag ingest docs/       extract, chunk, embed and load documents
      pgrag worker             process documents submitted through SQL or PostgREST
      pgrag search "question"  hybrid BM25 + vector search with citations
    """
    ctx.obj = CliState(dsn, read_dsn)
    tracing.configure_from_env()  # OpenTelemetry, when the OTEL_* variables ask for it


# -- the commands, one module per group of them ---------------------------------------------------

main.add_command(database.db)
main.add_command(database.migrate)
main.add_command(database.status)
main.add_command(ingest.ingest)
main.add_command(ingest.delete)
main.add_command(ingest.embed)
main.add_command(importer.import_command)
main.add_command(worker.worker)
main.add_command(search.search)
main.add_command(search.ask)
main.add_command(browse.facets_command)
main.add_command(browse.suggest_command)
main.add_command(eval_command.evaluate)
main.add_command(reembed.reembed_command, "reembed")
main.add_command(stats.stats)
main.add_command(bundle.sql_bundle)
