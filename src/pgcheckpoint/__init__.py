"""pgcheckpoint: PostgreSQL as the production checkpointer for LangGraph.

The public names are these and those of the documented subpackages:
`pgcheckpoint.errors`, `pgcheckpoint.ops` (what an operation is, for
`saver.run`), `pgcheckpoint.schema` (migrations), `pgcheckpoint.telemetry`
and `pgcheckpoint.maintenance` (retention, key rotation, the importer,
statistics). Every other module is internal; docs/contributing.md maps them.

Example:
    >>> from pgcheckpoint import PostgresSaver
    >>> with PostgresSaver.from_conn_string(DSN) as saver:  # doctest: +SKIP
    ...     saver.setup()
    ...     graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

from .codec.crypto import EncryptedSerde
from .codec.strict import StrictSerializer
from .core.locks import ThreadLock, maintenance_lock_key, thread_lock_key
from .core.official import OfficialThreads
from .drivers.rotate_key import rotate_key
from .drivers.saver import PostgresSaver
from .drivers.saver_async import AsyncPostgresSaver
from .drivers.store import PostgresStore
from .drivers.store_async import AsyncPostgresStore
from .errors import (
    DecryptionError,
    DowngradeRefusedError,
    DriverMismatchError,
    InvalidInputError,
    MissingCheckpointError,
    MissingParentError,
    PgCheckpointError,
    PoolTimeoutError,
    SchemaOutOfDateError,
    ThreadBusyError,
    ThreadConflictError,
    UnreadableValueError,
    UnserializableValueError,
    WrongTypeError,
)
from .telemetry.config import Telemetry
from .validate import libpq_dsn

__all__ = [
    "AsyncPostgresSaver",
    "AsyncPostgresStore",
    "DecryptionError",
    "DowngradeRefusedError",
    "DriverMismatchError",
    "EncryptedSerde",
    "InvalidInputError",
    "MissingCheckpointError",
    "MissingParentError",
    "OfficialThreads",
    "PgCheckpointError",
    "PoolTimeoutError",
    "PostgresSaver",
    "PostgresStore",
    "SchemaOutOfDateError",
    "StrictSerializer",
    "Telemetry",
    "ThreadBusyError",
    "ThreadConflictError",
    "ThreadLock",
    "UnreadableValueError",
    "UnserializableValueError",
    "WrongTypeError",
    "libpq_dsn",
    "maintenance_lock_key",
    "rotate_key",
    "thread_lock_key",
]

__version__ = "0.2.0"

# Module paths that earlier releases documented, and the modules their names are
# in now. Importing one still works for this release, with a DeprecationWarning.
MOVED_MODULES = {
    "pgcheckpoint.aio": ("pgcheckpoint.drivers.saver_async",),
    "pgcheckpoint.saver": ("pgcheckpoint.drivers.saver",),
    "pgcheckpoint.crypto": ("pgcheckpoint.codec.crypto", "pgcheckpoint.codec.labels"),
    "pgcheckpoint.strict": ("pgcheckpoint.codec.strict",),
    "pgcheckpoint.locking": ("pgcheckpoint.core.locks", "pgcheckpoint.drivers.thread_locks"),
    "pgcheckpoint.official": ("pgcheckpoint.core.official",),
    "pgcheckpoint.migrate": (
        "pgcheckpoint.schema",
        "pgcheckpoint.schema.ddl",
        "pgcheckpoint.schema.roles",
        "pgcheckpoint.commands",
    ),
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old module paths of `MOVED_MODULES`: a module that hands out the new names."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return types.ModuleType(spec.name, f"Deprecated: see {MOVED_MODULES[spec.name][0]}.")

    def exec_module(self, module: types.ModuleType) -> None:
        homes = MOVED_MODULES[module.__name__]
        warnings.warn(
            f"{module.__name__} is deprecated and goes in the next release: import its "
            f"names from pgcheckpoint (the public ones) or from {homes[0]}",
            DeprecationWarning,
            stacklevel=2,
        )

        def moved(name: str) -> object:
            for home in homes:
                found = importlib.import_module(home)
                if hasattr(found, name):
                    return getattr(found, name)
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

        module.__getattr__ = moved  # type: ignore[method-assign]


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
