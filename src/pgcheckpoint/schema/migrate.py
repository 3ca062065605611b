"""Schema migrations: Alembic revisions under `migrations/`, run safely.

`upgrade` is what `setup()` and `pgcheckpoint migrate` call. Many processes may
call it at once: each waits for a session advisory lock taken by polling on a
separate autocommit connection (a blocking lock on the migrating connection
would deadlock with `CREATE INDEX CONCURRENTLY`, which waits for every open
transaction), and whoever gets it second finds nothing left to do.

Example:
    >>> from pgcheckpoint.schema import upgrade, current, head
    >>> upgrade("postgresql://postgres@127.0.0.1/app")  # doctest: +SKIP
    >>> current("postgresql://postgres@127.0.0.1/app") == head()  # doctest: +SKIP
    True
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from ..commands import schema_option
from ..errors import PgCheckpointError
from ..resources import migrations_dir
from ..telemetry.activity import Activity, Plain, logger
from ..telemetry.config import DEFAULT_TELEMETRY, Telemetry
from ..validate import check_schema, libpq_dsn
from .ddl import VERSION_TABLE, migration_lock
from .roles import check_ownership, ownership

# Alembic (and SQLAlchemy with it: 20 MiB of a worker's memory) is imported by the
# functions that migrate, not with the savers, which only run statements.
if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["current", "downgrade", "head", "history", "offline_sql", "upgrade"]


def _config(conninfo: str | None, schema: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["schema"] = schema
    # env.py takes the migration lock itself only when plain `alembic` runs it
    cfg.attributes["locked_by_caller"] = True
    if conninfo is not None:
        cfg.attributes["dsn"] = conninfo
    return cfg


def upgrade(
    conninfo: str,
    *,
    schema: str = "public",
    revision: str = "head",
    lock_timeout: float = 600,
    telemetry: Telemetry | None = None,
    check_at_target: bool = True,
) -> str | None:
    """Upgrade the schema to `revision` (default: the newest), creating it if needed.

    Safe to call from many processes at once, and to re-run after an
    interruption. Refuses (`PgCheckpointError`) when pgcheckpoint's tables
    exist but another role owns them (`check_ownership`).

    Args:
        conninfo: A libpq connection string or URI for a role that may run DDL
            (`postgresql+psycopg://` URLs too).
        schema: The Postgres schema for the tables and the version table.
        revision: The target revision id, or "head".
        lock_timeout: Seconds to wait for another process's migration.
        telemetry: Where the `migrate` span goes (`pgcheckpoint.telemetry`).
        check_at_target: Check the owner also when the schema is already at
            `revision` and nothing would run (`setup()` of an application
            role that only reads and writes the tables passes False).

    Returns:
        The revision the schema was at when this call got the lock (None if
        never migrated); equal to the new one when there was nothing to do.

    Example:
        >>> upgrade("postgresql://postgres@127.0.0.1/app", schema="tenant_a")  # doctest: +SKIP
        '0001'
    """
    conninfo = libpq_dsn(conninfo)
    with (
        _observe("migrate", conninfo, schema, revision, telemetry) as activity,
        migration_lock(conninfo, schema, timeout=lock_timeout),
    ):
        seen = ownership(conninfo, schema=schema)
        if check_at_target:
            check_ownership(conninfo, schema=schema, seen=seen)
        before = current(conninfo, schema=schema)
        activity.set("pgcheckpoint.migration.from", before or "base")
        if before != (head() if revision == "head" else revision):
            check_ownership(conninfo, schema=schema, seen=seen)
        known = [rev for rev, _down, _title in history()]
        if before is not None and before not in known and revision == "head":
            # A newer pgcheckpoint migrated it; its changes are additive for a
            # release, so this older version runs on it: a rolling deploy must not
            # fail here.
            logger.warning(
                "schema %r is at revision %r, newer than this pgcheckpoint's %r; "
                "leaving it as it is",
                Plain(schema),
                Plain(before),
                Plain(known[-1]),
            )
            return before
        if before in known and revision in known and known.index(revision) < known.index(before):
            raise PgCheckpointError(
                f"schema {schema!r} is at revision {before!r}, past {revision!r}: to go "
                f"back, run `pgcheckpoint downgrade {revision}{schema_option(schema)}`"
            )
        from alembic import command

        command.upgrade(_config(conninfo, schema), revision)
    return before


def downgrade(
    conninfo: str,
    revision: str,
    *,
    schema: str = "public",
    lock_timeout: float = 600,
    telemetry: Telemetry | None = None,
) -> str | None:
    """Downgrade the schema to `revision` ("base" removes every table).

    Returns:
        The revision the schema was at when this call got the lock.

    Example:
        >>> downgrade("postgresql://postgres@127.0.0.1/app", "base")  # doctest: +SKIP
        '0002'
    """
    conninfo = libpq_dsn(conninfo)
    with (
        _observe("downgrade", conninfo, schema, revision, telemetry) as activity,
        migration_lock(conninfo, schema, timeout=lock_timeout),
    ):
        check_ownership(conninfo, schema=schema)
        before = current(conninfo, schema=schema)
        activity.set("pgcheckpoint.migration.from", before or "base")
        from alembic import command

        command.downgrade(_config(conninfo, schema), revision)
    return before


def _observe(
    name: str, conninfo: str, schema: str, revision: str, telemetry: Telemetry | None
) -> Activity:
    activity = (telemetry or DEFAULT_TELEMETRY).observe(name=name, schema=schema, sweep=True)
    database = conninfo_to_dict(conninfo).get("dbname")
    if database:
        activity.set("db.namespace", f"{database}.{schema}")
    activity.set("pgcheckpoint.migration.to", revision)
    return activity


def current(conninfo: str, *, schema: str = "public") -> str | None:
    """The revision the database is at, or None when it was never migrated.

    Example:
        >>> current("postgresql://postgres@127.0.0.1/empty")  # doctest: +SKIP
    """
    schema = check_schema(schema)
    with psycopg.connect(libpq_dsn(conninfo), autocommit=True) as conn:
        exists = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
            " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = %s)",
            (schema, VERSION_TABLE),
        ).fetchone()
        if not exists or not exists[0]:
            return None
        row = conn.execute(
            sql.SQL("SELECT version_num FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(VERSION_TABLE)
            )
        ).fetchone()
        return None if row is None else str(row[0])


def head() -> str:
    """The newest revision this version of pgcheckpoint ships.

    Example:
        >>> head() >= "0001"
        True
    """
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_config(None, "public"))
    heads = script.get_heads()
    if len(heads) != 1:
        raise PgCheckpointError(f"the migrations have {len(heads)} heads; expected one")
    return str(heads[0])


def history() -> list[tuple[str, str | None, str]]:
    """Every revision, oldest first, as (revision, down_revision, title).

    Example:
        >>> history()[0][:2]
        ('0001', None)
    """
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_config(None, "public"))
    revisions = list(script.walk_revisions())
    revisions.reverse()
    result = []
    for rev in revisions:
        down = rev.down_revision
        title = (rev.doc or "").strip().splitlines()[0] if rev.doc else ""
        result.append((str(rev.revision), None if down is None else str(down), title))
    return result


def offline_sql(*, schema: str = "public", revision: str = "head", start: str | None = None) -> str:
    """The SQL that upgrading would run, for DBAs who apply it by hand.

    Example:
        >>> "CREATE TABLE" in offline_sql()
        True
    """
    from alembic import command

    target = f"{start}:{revision}" if start else revision
    buffer = io.StringIO()
    cfg = _config(None, check_schema(schema))
    cfg.output_buffer = buffer
    with redirect_stdout(io.StringIO()):
        command.upgrade(cfg, target, sql=True)
    return buffer.getvalue()
