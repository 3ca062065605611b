-- Which Alembic revision a schema is at.

-- name: schema_revision
-- The Alembic revision the database is at, or no row.
SELECT version_num FROM {schema}.pgcheckpoint_alembic_version

-- name: version_table_exists
-- retry: safe
-- Whether the schema has pgcheckpoint's version table; asked before reading it,
-- so the check itself never fails on a database that was never migrated.
SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relname = 'pgcheckpoint_alembic_version'
) AS present
