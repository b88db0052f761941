"""Catalog snapshot: what pgrag installs, as a checked-in listing reviewed like code.

The listing (``tests/snapshots/catalog.txt``) holds, for schema ``pgrag`` and pgrag's functions
in ``public`` (extension members left out): every function with its arguments and defaults,
result, kind, volatility, strictness, parallel safety, security (definer or invoker), cost and
rows, settings (``proconfig``) and the privileges each role holds (from the ACL); views; tables
with their row-level-security flags and privileges (table and column); sequences; policies;
triggers; the schema's privileges and the default privileges the migrating role leaves. Function
bodies and comments are not listed: an edit inside a body or a comment does not change it.

A change to any of these is a change to pgrag's API or security surface: it shows as a diff
here and in review. Regenerate the listing after an intended change with::

    PGRAG_UPDATE_SNAPSHOT=1 pytest tests/test_catalog.py

The listing is deterministic: sorted in the C collation, no OIDs, the owner shown as ``owner``
(whatever role migrated) and its own privileges left out, types schema-qualified.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import psycopg

from pgrag.db import connect

SNAPSHOT = Path(__file__).resolve().parent / "snapshots" / "catalog.txt"
UPDATE_ENV = "PGRAG_UPDATE_SNAPSHOT"

# Privileges of an ACL as "role=privileges" (PUBLIC for grantee 0, * after a privilege held
# WITH GRANT OPTION), one letter per privilege as in psql's \dp; the owner's own privileges are
# left out (it holds them all, and their set depends on the server version).
_ACL = """
    (select coalesce(pg_catalog.string_agg(g.who || '=' || g.privs, ' ' order by g.who), '-')
     from (select case when a.grantee = 0 then 'PUBLIC'
                       else a.grantee::regrole::text end as who,
                  pg_catalog.string_agg(
                      case a.privilege_type
                          when 'SELECT' then 'r' when 'INSERT' then 'a' when 'UPDATE' then 'w'
                          when 'DELETE' then 'd' when 'TRUNCATE' then 'D'
                          when 'REFERENCES' then 'x' when 'TRIGGER' then 't'
                          when 'EXECUTE' then 'X' when 'USAGE' then 'U' when 'CREATE' then 'C'
                          when 'MAINTAIN' then 'm' else a.privilege_type end
                      || case when a.is_grantable then '*' else '' end,
                      '' order by a.privilege_type) as privs
           from pg_catalog.aclexplode({acl}) as a
           where a.grantee <> {owner}
           group by 1) as g)
"""

_NOT_EXTENSION_MEMBER = """
    not exists (select 1 from pg_catalog.pg_depend as e
                where e.classid = '{catalog}'::regclass and e.objid = {oid} and e.deptype = 'e')
"""

QUERIES: dict[str, str] = {
    "schema": f"""
        select 'schema ' || n.nspname || ' acl ' || {
        _ACL.format(owner="n.nspowner", acl="coalesce(n.nspacl, acldefault('n', n.nspowner))")
    }
        from pg_namespace as n where n.nspname = 'pgrag'
    """,
    "function": f"""
        select 'function ' || n.nspname || '.' || p.proname
               || '(' || pg_get_function_arguments(p.oid) || ')'
               || coalesce(' returns ' || pg_get_function_result(p.oid), '')
               || ' | ' || case p.prokind when 'f' then 'function' when 'p' then 'procedure'
                                          when 'a' then 'aggregate' else 'window' end
               || ' ' || case p.provolatile when 'i' then 'immutable' when 's' then 'stable'
                                            else 'volatile' end
               || case when p.proisstrict then ' strict' else '' end
               || ' parallel ' || case p.proparallel when 's' then 'safe'
                                                      when 'r' then 'restricted' else 'unsafe' end
               || case when p.prosecdef then ' security definer' else ' security invoker' end
               || case when p.proleakproof then ' leakproof' else '' end
               || ' language ' || l.lanname
               || case when p.prosqlbody is not null then ' (sql-standard body)' else '' end
               || ' cost ' || p.procost
               || case when p.proretset then ' rows ' || p.prorows else '' end
               || ' | config ' || coalesce(array_to_string(p.proconfig, '; '), '-')
               || ' | acl ' || {
        _ACL.format(owner="p.proowner", acl="coalesce(p.proacl, acldefault('f', p.proowner))")
    }
        from pg_proc as p
        join pg_namespace as n on n.oid = p.pronamespace
        join pg_language as l on l.oid = p.prolang
        where n.nspname in ('pgrag', 'public')
          and {_NOT_EXTENSION_MEMBER.format(catalog="pg_proc", oid="p.oid")}
    """,
    "relation": f"""
        select case c.relkind when 'r' then 'table ' when 'p' then 'table ' when 'v' then 'view '
                              when 'm' then 'materialized view ' when 'S' then 'sequence '
                              else 'relation ' end
               || n.nspname || '.' || c.relname
               || case when c.relkind in ('r', 'p')
                       then ' | rls ' || case when c.relrowsecurity then 'on' else 'off' end
                            || ' force ' || case when c.relforcerowsecurity then 'on' else 'off' end
                       else '' end
               || case when c.reloptions is not null
                       then ' | options ' || array_to_string(c.reloptions, ', ') else '' end
               || ' | acl ' || {
        _ACL.format(owner="c.relowner", acl="coalesce(c.relacl, acldefault('r', c.relowner))")
    }
        from pg_class as c
        join pg_namespace as n on n.oid = c.relnamespace
        where c.relkind in ('r', 'p', 'v', 'm', 'S')
          and (n.nspname = 'pgrag' or (n.nspname = 'public' and c.relkind in ('v', 'm')))
          and {_NOT_EXTENSION_MEMBER.format(catalog="pg_class", oid="c.oid")}
    """,
    "column": f"""
        select 'column ' || n.nspname || '.' || c.relname || '.' || a.attname || ' acl '
               || {_ACL.format(owner="c.relowner", acl="a.attacl")}
        from pg_attribute as a
        join pg_class as c on c.oid = a.attrelid
        join pg_namespace as n on n.oid = c.relnamespace
        where n.nspname = 'pgrag' and a.attnum > 0 and not a.attisdropped
          and a.attacl is not null
    """,
    "policy": r"""
        select 'policy ' || p.schemaname || '.' || p.tablename || ' ' || p.policyname
               || ' | ' || p.permissive || ' ' || p.cmd
               || ' to ' || array_to_string(array(select r from unnest(p.roles) as r
                                                  order by r collate "C"), ', ')
               || coalesce(' using ' || regexp_replace(p.qual, '\s+', ' ', 'g'), '')
               || coalesce(' with check ' || regexp_replace(p.with_check, '\s+', ' ', 'g'), '')
        from pg_policies as p
        where p.schemaname = 'pgrag'
    """,
    "trigger": """
        select 'trigger ' || pg_get_triggerdef(t.oid)
               || case t.tgenabled when 'O' then '' when 'D' then ' (disabled)'
                                   when 'R' then ' (replica)' else ' (always)' end
        from pg_trigger as t
        join pg_class as c on c.oid = t.tgrelid
        where c.relnamespace = 'pgrag'::regnamespace and not t.tgisinternal
    """,
    "default privileges": f"""
        select 'default privileges for ' || case when d.defaclrole = current_user::regrole
                                                  then 'owner' else d.defaclrole::regrole::text end
               || case when d.defaclnamespace = 0 then ''
                       else ' in schema ' || d.defaclnamespace::regnamespace::text end
               || ' on ' || case d.defaclobjtype when 'r' then 'tables' when 'S' then 'sequences'
                                                 when 'f' then 'functions' when 'T' then 'types'
                                                 else 'schemas' end
               || ' acl ' || {_ACL.format(owner="d.defaclrole", acl="d.defaclacl")}
        from pg_default_acl as d
    """,
}


def catalog_listing(conn: psycopg.Connection[Any]) -> str:
    """The listing: one line per object, sections in a fixed order, lines sorted bytewise."""
    # Every name qualified (types included), whatever the caller's search_path.
    conn.execute("set search_path = pg_catalog")
    out: list[str] = []
    for section, query in QUERIES.items():
        lines = sorted(str(r[0]) for r in conn.execute(query))
        out.append(f"## {section} ({len(lines)})")
        out.extend(lines)
        out.append("")
    conn.execute("reset search_path")
    return "\n".join(out)


HEADER = (
    "# pgrag's installed catalog (tests/test_catalog.py). Regenerate after an intended change:\n"
    f"#   {UPDATE_ENV}=1 pytest tests/test_catalog.py\n\n"
)


def test_catalog_matches_the_checked_in_snapshot(db: str) -> None:
    with connect(db) as conn:
        current = HEADER + catalog_listing(conn)
    if os.environ.get(UPDATE_ENV) == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(current, encoding="utf-8")
        return
    expected = SNAPSHOT.read_text(encoding="utf-8") if SNAPSHOT.exists() else ""
    if current != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                current.splitlines(keepends=True),
                fromfile=str(SNAPSHOT.relative_to(SNAPSHOT.parents[2])),
                tofile="installed catalog",
            )
        )
        raise AssertionError(
            "the installed catalog differs from the checked-in snapshot; if the change is "
            f"intended, regenerate it with {UPDATE_ENV}=1 pytest tests/test_catalog.py and "
            f"review the diff:\n{diff}"
        )
