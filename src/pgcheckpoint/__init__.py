"""pgcheckpoint: PostgreSQL as the production checkpointer for LangGraph.

Example:
    >>> from pgcheckpoint import PostgresSaver
    >>> with PostgresSaver.from_conn_string(DSN) as saver:  # doctest: +SKIP
    ...     saver.setup()
    ...     graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

from .aio import AsyncPostgresSaver
from .crypto import EncryptedSerde
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
)
from .maintenance.rotation import rotate_key
from .saver import PostgresSaver
from .telemetry import Telemetry

__all__ = [
    "AsyncPostgresSaver",
    "DecryptionError",
    "DowngradeRefusedError",
    "DriverMismatchError",
    "EncryptedSerde",
    "InvalidInputError",
    "MissingCheckpointError",
    "MissingParentError",
    "PgCheckpointError",
    "PoolTimeoutError",
    "PostgresSaver",
    "SchemaOutOfDateError",
    "Telemetry",
    "ThreadBusyError",
    "ThreadConflictError",
    "UnreadableValueError",
    "UnserializableValueError",
    "rotate_key",
]

__version__ = "0.2.0"
