"""Where a schema stands: the revision it is at, and what to say when it is behind.

The drivers catch the errors a statement raises when a table or column is
missing (`SCHEMA_ERRORS`, free until raised), read the schema's revision
(`schema_revision_op`) and raise instead the error `schema_error` words, which
names the command that fixes it.

Example:
    >>> from pgcheckpoint.schema.status import schema_error
    >>> "pgcheckpoint migrate" in str(schema_error("public", None))
    True
"""

from __future__ import annotations

from psycopg import errors

from ..commands import migrate_command
from ..errors import SchemaOutOfDateError
from ..ops import Op, Stmt
from .migrate import head, history

__all__ = ["SCHEMA_ERRORS", "schema_error", "schema_revision_op"]

# What a statement raises when the schema lacks a table or column it expects. The
# drivers catch these (free until raised) and ask `schema_error` what to say.
SCHEMA_ERRORS = (errors.UndefinedTable, errors.UndefinedColumn)


def schema_revision_op(schema: str) -> Op[str | None]:
    """Read the revision the schema is at; None when it was never migrated.

    Example:
        >>> op = schema_revision_op("public")
        >>> next(op).name
        'version_table_exists'
    """
    rows = yield Stmt("version_table_exists", {"schema": schema}, fetch=True)
    if not rows or not rows[0]["present"]:
        return None
    rows = yield Stmt("schema_revision", fetch=True)
    return str(rows[0]["version_num"]) if rows else None


def schema_error(schema: str, revision: str | None) -> SchemaOutOfDateError | None:
    """The error to raise instead of a missing table or column, if the schema explains it.

    None when the schema is at the newest revision: then the original error
    stands (something else removed the table).

    Example:
        >>> "`pgcheckpoint migrate --schema tenant_a`" in str(schema_error("tenant_a", None))
        True
    """
    newest = head()
    if revision == newest:
        return None
    command = migrate_command(schema)
    if revision is None:
        return SchemaOutOfDateError(
            f"schema {schema!r} has no pgcheckpoint tables: run `{command}` "
            "with a role that may run DDL (or call saver.setup())"
        )
    if revision not in {rev for rev, _down, _title in history()}:
        return SchemaOutOfDateError(
            f"schema {schema!r} is at revision {revision!r}, which this version of "
            f"pgcheckpoint does not know (its newest is {newest!r}): upgrade the "
            "pgcheckpoint package to the version that migrated the database"
        )
    return SchemaOutOfDateError(
        f"schema {schema!r} is at revision {revision!r} but this version of pgcheckpoint "
        f"needs {newest!r}: run `{command}`"
    )
