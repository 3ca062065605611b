"""Schema migrations: Alembic revisions under `migrations/`, run safely.

`upgrade` is what `setup()` and `pgcheckpoint migrate` call. Many processes may
call it at once: each waits for a session advisory lock taken by polling on a
separate autocommit connection (a blocking lock on the migrating connection
would deadlock with `CREATE INDEX CONCURRENTLY`, which waits for every open
transaction), and whoever gets it second finds nothing left to do.

Example:
    >>> from pgcheckpoint.migrate import upgrade, current, head
    >>> upgrade("postgresql://postgres@127.0.0.1/app")  # doctest: +SKIP
    >>> current("postgresql://postgres@127.0.0.1/app") == head()  # doctest: +SKIP
    True
"""

from __future__ import annotations

import io
import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from .drivers import libpq_dsn
from .errors import PgCheckpointError
from .locking import LOCK_CLASS_MIGRATE, migration_lock_key
from .resources import migrations_dir
from .telemetry import DEFAULT_TELEMETRY, Activity, Telemetry, logger

# Alembic (and SQLAlchemy with it: 20 MiB of a worker's memory) is imported by the
# functions that migrate, not with the savers, which only run statements.
if TYPE_CHECKING:
    from alembic.config import Config
from .validate import check_schema

__all__ = [
    "TABLES",
    "VERSION_TABLE",
    "Ownership",
    "check_ownership",
    "create_index_concurrently",
    "current",
    "downgrade",
    "drop_index_concurrently",
    "head",
    "history",
    "ident",
    "migrate_command",
    "migration_lock",
    "offline_sql",
    "ownership",
    "runtime_grants",
    "schema_option",
    "upgrade",
]

VERSION_TABLE = "pgcheckpoint_alembic_version"
# The tables the savers read and write at run time (a revision adding one adds it here).
TABLES = ("pgc_checkpoints", "pgc_blobs", "pgc_writes")


def ident(name: str) -> str:
    """Quote an SQL identifier (a schema name) for text SQL, revisions included.

    Revisions run their text through SQLAlchemy, which reads `:word` as a bind
    parameter, and some wrap it in a dollar-quoted `DO $$ ... $$` block, which
    a `$$` would end: a name with `:` or `$` is written as a Unicode-escaped
    identifier (`U&"..."`), which PostgreSQL reads as the same name.

    Example:
        >>> ident("tenant_a"), ident("a:b").startswith('U&"a')
        ('"tenant_a"', True)
    """
    quoted = sql.Identifier(name).as_string(None)
    if ":" not in name and "$" not in name:
        return quoted
    body = quoted[1:-1].replace("\\", "\\\\").replace(":", "\\003A").replace("$", "\\0024")
    return f'U&"{body}"'


def runtime_grants(role: str, schema: str = "public") -> list[str]:
    """The GRANTs an application role needs to run the savers, and nothing more.

    Reading and writing the tables, plus reading the version table (so a schema
    that is behind is reported as such). No DDL: the migrating role keeps that.
    The statements are idempotent; run them again after a release whose
    migrations add a table.

    Example:
        >>> runtime_grants("app", "tenant_a")[0]
        'GRANT USAGE ON SCHEMA "tenant_a" TO "app"'
    """
    s, r = ident(check_schema(schema)), ident(role)
    tables = ", ".join(f"{s}.{table}" for table in TABLES)
    return [
        f"GRANT USAGE ON SCHEMA {s} TO {r}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {r}",
        f"GRANT SELECT ON {s}.{VERSION_TABLE} TO {r}",
    ]


def migrate_command(schema: str = "public") -> str:
    """The shell command that migrates `schema`, for messages.

    Example:
        >>> migrate_command("tenant a")
        "pgcheckpoint migrate --schema 'tenant a'"
    """
    return f"pgcheckpoint migrate{schema_option(schema)}"


def schema_option(schema: str) -> str:
    """The `--schema` option to repeat in a suggested command ("" for public).

    Example:
        >>> schema_option("tenant_a")
        ' --schema tenant_a'
    """
    return "" if schema == "public" else f" --schema {shlex.quote(schema)}"


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


@contextmanager
def migration_lock(
    conninfo: str, schema: str = "public", *, timeout: float = 600
) -> Iterator[None]:
    """Hold the lock that serialises migrations of `schema` in this database.

    Taken by polling `pg_try_advisory_lock` on a connection of its own, which
    holds no transaction open, so it never blocks a concurrent index build.

    Example:
        >>> with migration_lock("postgresql://postgres@127.0.0.1/app"):  # doctest: +SKIP
        ...     pass
    """
    key = migration_lock_key(check_schema(schema))
    with psycopg.connect(libpq_dsn(conninfo), autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        delay = 0.05
        while not conn.execute(
            "SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS_MIGRATE, key)
        ).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise PgCheckpointError(
                    f"another process has been migrating schema {schema!r} for over "
                    f"{timeout:.0f}s; check for a stuck `pgcheckpoint migrate` and retry"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS_MIGRATE, key))


@dataclass(frozen=True)
class Ownership:
    """Who owns pgcheckpoint's tables in a schema, as seen by the connecting role.

    Attributes:
        role: The connecting role (`current_user`).
        owners: Each of pgcheckpoint's tables (and its version table) that exists,
            with its owner.
        foreign: Those the role does not own, itself or through a role granted to
            it (a superuser's reach over every table does not count).

    Example:
        >>> ownership("postgresql://postgres@127.0.0.1/app").foreign  # doctest: +SKIP
        {}
    """

    role: str
    owners: dict[str, str]
    foreign: dict[str, str]


def ownership(conninfo: str, *, schema: str = "public") -> Ownership:
    """Who owns pgcheckpoint's tables in `schema` (see `Ownership`).

    Example:
        >>> ownership("postgresql://postgres@127.0.0.1/app", schema="tenant_a")  # doctest: +SKIP
        Ownership(role='deploy', owners={...}, foreign={})
    """
    schema = check_schema(schema)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "WITH RECURSIVE mine(oid) AS ("
            "  SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user"
            "  UNION"
            "  SELECT m.roleid FROM pg_catalog.pg_auth_members m JOIN mine ON m.member = mine.oid"
            ") SELECT current_user::text, c.relname::text,"
            " pg_catalog.pg_get_userbyid(c.relowner)::text, c.relowner IN (SELECT oid FROM mine)"
            " FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = ANY(%s) ORDER BY c.relname",
            (schema, [*TABLES, VERSION_TABLE]),
        ).fetchall()
        role = rows[0][0] if rows else str(conn.execute("SELECT current_user").fetchone()[0])  # type: ignore[index]
    return Ownership(
        role=role,
        owners={name: owner for _, name, owner, _ in rows},
        foreign={name: owner for _, name, owner, mine in rows if not mine},
    )


def check_ownership(
    conninfo: str, *, schema: str = "public", seen: Ownership | None = None
) -> None:
    """Refuse to migrate tables the connecting role does not own.

    `CREATE TABLE IF NOT EXISTS` would take over tables another role created
    first (perhaps with triggers, or a version table claiming a revision whose
    changes never ran); the role that owns them could change them still.

    Example:
        >>> check_ownership("postgresql://deploy@db/app", schema="tenant_a")  # doctest: +SKIP
    """
    if seen is None:
        seen = ownership(conninfo, schema=schema)
    if not seen.foreign:
        return
    listed = ", ".join(f"{name} (owned by {owner!r})" for name, owner in seen.foreign.items())
    owners = sorted(set(seen.foreign.values()))
    raise PgCheckpointError(
        f"schema {schema!r} holds pgcheckpoint tables that role {seen.role!r}, which runs "
        f"the migration, does not own: {listed}; pgcheckpoint does not take over tables "
        f"another role created. Run the migration as {owners[0]!r} if that role is meant "
        "to own them; otherwise have an administrator check them, then drop them or "
        f"hand them over (ALTER TABLE ... OWNER TO {seen.role})"
    )


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
                schema,
                before,
                known[-1],
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


def _index_exists_invalid(schema: str, name: str) -> bool | None:
    from alembic import op
    from sqlalchemy import text

    row = (
        op.get_bind()
        .execute(
            text(
                "SELECT i.indisvalid FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :schema AND c.relname = :name"
            ),
            {"schema": schema, "name": name},
        )
        .fetchone()
    )
    return None if row is None else not row[0]


def create_index_concurrently(schema: str, name: str, definition: str) -> None:
    """Build an index without blocking writers, from inside a revision.

    An INVALID index left by an interrupted build is dropped and built again.

    Args:
        schema: The schema of the table.
        name: The index name.
        definition: What follows `ON`, e.g. `"pgc_checkpoints (run_id)"`; the
            table is qualified with the schema.

    Example:
        >>> create_index_concurrently("public", "t_idx", "t (a)")  # doctest: +SKIP
    """
    from alembic import op

    context = op.get_context()
    with context.autocommit_block():
        if not context.as_sql and _index_exists_invalid(schema, name):
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {ident(schema)}.{ident(name)}")
        op.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {ident(name)} ON {ident(schema)}.{definition}"
        )


def drop_index_concurrently(schema: str, name: str) -> None:
    """Drop an index without blocking writers, from inside a revision.

    Example:
        >>> drop_index_concurrently("public", "t_idx")  # doctest: +SKIP
    """
    from alembic import op

    with op.get_context().autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {ident(schema)}.{ident(name)}")
