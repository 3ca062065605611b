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
    InvalidInputError,
    MissingCheckpointError,
    MissingParentError,
    PgCheckpointError,
    PoolTimeoutError,
    SchemaOutOfDateError,
    ThreadBusyError,
    ThreadConflictError,
    UnserializableValueError,
)
from .maintenance.rotation import rotate_key
from .saver import PostgresSaver

__all__ = [
    "AsyncPostgresSaver",
    "DecryptionError",
    "EncryptedSerde",
    "InvalidInputError",
    "MissingCheckpointError",
    "MissingParentError",
    "PgCheckpointError",
    "PoolTimeoutError",
    "PostgresSaver",
    "SchemaOutOfDateError",
    "ThreadBusyError",
    "ThreadConflictError",
    "UnserializableValueError",
    "rotate_key",
]

__version__ = "0.1.0"
