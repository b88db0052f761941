"""Installing and upgrading pgrag's SQL in a database.

* :mod:`.migrator`: the install engine: which files of ``sql/`` run, in which transaction,
  how each is recorded, and the preflight that refuses a database it cannot upgrade
  (SQLSTATEs PR101-PR104, mapped in :data:`pgrag.errors.SQLSTATE_ERRORS`); ``pgrag migrate``;
* :mod:`.bundle`: the same steps as one SQL file for ``psql -f``, or as Supabase migrations
  (``pgrag sql-bundle``);
* :mod:`.citus`: ``pgrag migrate --citus``, the steps on a Citus coordinator;
* :mod:`.compat`: released statements rewritten for servers older than PostgreSQL 17.
"""
