"""Alembic environment for pgcheckpoint.

Run through `pgcheckpoint migrate` (or `pgcheckpoint.schema.upgrade`), or with
plain Alembic: `alembic -c migrations/alembic.ini -x dsn=postgresql://... upgrade head`
(add `-x schema=NAME` for a schema other than `public`). The version table is
`pgcheckpoint_alembic_version`, so it never meets an application's own
`alembic_version` table.
"""

from __future__ import annotations

import os
from contextlib import nullcontext

import psycopg
from alembic import context
from sqlalchemy import create_engine, pool, text

from pgcheckpoint.schema.ddl import VERSION_TABLE, ident, libpq_dsn, migration_lock

config = context.config
x_args = context.get_x_argument(as_dictionary=True)
schema = config.attributes.get("schema") or x_args.get("schema") or "public"


def _dsn() -> str:
    dsn = (
        config.attributes.get("dsn")
        or x_args.get("dsn")
        or os.environ.get("PGCHECKPOINT_DSN")
        or os.environ.get("DATABASE_URL")
    )
    if not dsn:
        raise SystemExit("no database given: pass -x dsn=postgresql://... or set PGCHECKPOINT_DSN")
    return libpq_dsn(str(dsn))


def run_offline() -> None:
    context.configure(
        url="postgresql+psycopg://",
        literal_binds=True,
        version_table=VERSION_TABLE,
        version_table_schema=schema,
        transaction_per_migration=True,
    )
    # before the version table, which lives in the schema ("public" always exists, and
    # CREATE SCHEMA IF NOT EXISTS would still ask for CREATE on the database)
    if schema != "public":
        context.execute(f"CREATE SCHEMA IF NOT EXISTS {ident(schema)}")
    with context.begin_transaction():
        context.run_migrations(schema=schema)


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    dsn = _dsn()
    engine = create_engine(
        "postgresql+psycopg://",
        creator=lambda: psycopg.connect(dsn),
        poolclass=pool.NullPool,
    )
    # plain `alembic` gets the same lock as `pgcheckpoint migrate`, so the two can race
    lock = (
        nullcontext()
        if config.attributes.get("locked_by_caller")
        else migration_lock(dsn, schema, timeout=600)
    )
    with lock, engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    # CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the schema
    # exists; a migrating role that only owns its schema must not need it
    exists = connection.execute(
        text("SELECT 1 FROM pg_namespace WHERE nspname = :schema"), {"schema": schema}
    ).first()
    if exists is None:
        connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {ident(schema)}"))
    connection.commit()
    context.configure(
        connection=connection,
        version_table=VERSION_TABLE,
        version_table_schema=schema,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations(schema=schema)
    connection.commit()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
