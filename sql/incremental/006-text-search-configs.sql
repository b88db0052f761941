-- pgrag text-search configurations a chunk may be stored with.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- pgrag.chunks.language is a regconfig, i.e. an OID. A configuration created in a temporary
-- schema (or dropped later) leaves that OID dangling: pg_dump writes it as a number that
-- pg_restore cannot load (the whole table fails), and every keyword search reading the row
-- errors. So only configurations of pg_catalog, and those an operator lists here, may be stored;
-- the check is a trigger on pgrag.chunks (sql/idempotent/001-helpers.sql). Triggers are restored
-- after the data, so the check never runs during pg_restore.
--
-- Names, not OIDs: a row here survives a dump and restore whatever configurations exist.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table pgrag.text_search_configs (
    schema_name text not null check (schema_name !~ '^pg_(toast_)?temp'),
    config_name text not null,
    primary key (schema_name, config_name)
);
alter table pgrag.text_search_configs enable row level security;
comment on table pgrag.text_search_configs is
'Text-search configurations outside pg_catalog that chunks may be stored with (pg_catalog''s are always allowed), by schema and name. Written by the operator only; a configuration listed here must be a permanent one, dumped with the database.';

-- Chunks stored before this check existed: name the ones it would refuse.
do $$
declare
    n bigint;
begin
    select pg_catalog.count(*) into n
    from pgrag.chunks as c
    left join pg_catalog.pg_ts_config as t on t.oid = c.language
    left join pg_catalog.pg_namespace as s on s.oid = t.cfgnamespace
    where s.nspname is distinct from 'pg_catalog';
    if n > 0 then
        raise warning 'pgrag: % chunks use a text-search configuration outside pg_catalog', n
            using hint = 'list permanent ones in pgrag.text_search_configs; set the others to an '
                         'allowed one (update pgrag.chunks set language = ''simple'' where ...), '
                         'or pg_dump cannot restore pgrag.chunks (docs/security.md, Restore).';
    end if;
end
$$;
