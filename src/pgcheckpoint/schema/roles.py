"""The roles around the tables: the grants an application role needs, and who owns them.

Example:
    >>> from pgcheckpoint.schema.roles import runtime_grants
    >>> runtime_grants("app")[0]
    'GRANT USAGE ON SCHEMA "public" TO "app"'
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from ..errors import PgCheckpointError
from ..store.vectors import VECTOR_TABLE
from ..validate import check_schema
from .ddl import TABLES, VERSION_TABLE, ident

__all__ = ["Ownership", "check_ownership", "ownership", "runtime_grants"]


def runtime_grants(role: str, schema: str = "public") -> list[str]:
    """The GRANTs an application role needs to run the savers and the store, and nothing more.

    Reading and writing the tables, and the store's vector table where it
    exists (`setup()` of a store with an `index` creates it, not a
    migration), plus reading the version table (so a schema that is behind
    is reported as such). No DDL: the migrating role keeps that. The
    statements are idempotent; run them again after a release whose
    migrations add a table, and after the migrating role first sets up a
    store with an `index`.

    Example:
        >>> runtime_grants("app", "tenant_a")[0]
        'GRANT USAGE ON SCHEMA "tenant_a" TO "app"'
    """
    schema = check_schema(schema)
    s, r = ident(schema), ident(role)
    tables = ", ".join(f"{s}.{table}" for table in TABLES)
    vectors = _text_literal(sql.Identifier(schema, VECTOR_TABLE).as_string(None))
    return [
        f"GRANT USAGE ON SCHEMA {s} TO {r}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {r}",
        f"GRANT SELECT ON {s}.{VERSION_TABLE} TO {r}",
        f"DO $$ BEGIN IF to_regclass({vectors}) IS NOT NULL THEN "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.{VECTOR_TABLE} TO {r}; END IF; END $$",
    ]


def _text_literal(text: str) -> str:
    # Inside a `DO $$ ... $$` block a `$` could end the quoting: a U& literal
    # spells it as an escape, as `ident` does in names.
    quoted = text.replace("'", "''")
    if "$" not in text and "\\" not in text:
        return f"'{quoted}'"
    return "U&'" + quoted.replace("\\", "\\\\").replace("$", "\\0024") + "'"


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
