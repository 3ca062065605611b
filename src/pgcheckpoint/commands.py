"""The pgcheckpoint commands that messages suggest, with the `--schema` they need.

An error or warning that one command fixes names it whole, as the user would
type it: `migrate_command` for a schema that is behind, `schema_option` to
repeat the schema in any other.

Example:
    >>> from pgcheckpoint.commands import migrate_command
    >>> migrate_command("tenant_a")
    'pgcheckpoint migrate --schema tenant_a'
"""

from __future__ import annotations

import shlex

__all__ = ["migrate_command", "schema_option"]


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
