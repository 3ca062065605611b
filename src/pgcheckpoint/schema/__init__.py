"""Migrations and the schema: the public API of what `pgcheckpoint migrate` does.

Alembic revisions under `migrations/` are the one source of the schema; these
functions run them safely (`migrate`), word the grants an application role
needs (`roles`), and say where a schema stands (`status`). Revisions import
`ddl` and nothing else of the package.

Example:
    >>> from pgcheckpoint.schema import upgrade, current, head
    >>> upgrade("postgresql://postgres@127.0.0.1/app")  # doctest: +SKIP
    >>> current("postgresql://postgres@127.0.0.1/app") == head()  # doctest: +SKIP
    True
"""

from __future__ import annotations

from .ddl import migration_lock
from .migrate import current, downgrade, head, history, offline_sql, upgrade
from .roles import Ownership, check_ownership, ownership, runtime_grants

__all__ = [
    "Ownership",
    "check_ownership",
    "current",
    "downgrade",
    "head",
    "history",
    "migration_lock",
    "offline_sql",
    "ownership",
    "runtime_grants",
    "upgrade",
]
