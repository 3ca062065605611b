"""pgcheckpoint: PostgreSQL as the production checkpointer for LangGraph.

Example:
    >>> from pgcheckpoint import PostgresSaver
    >>> with PostgresSaver.from_conn_string("postgresql://postgres@127.0.0.1/app") as saver:  # doctest: +SKIP
    ...     saver.setup()
    ...     graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

from .aio import AsyncPostgresSaver
from .errors import (
    DecryptionError,
    InvalidInputError,
    PgCheckpointError,
    PoolTimeoutError,
    SchemaOutOfDateError,
    ThreadBusyError,
)
from .saver import PostgresSaver

__all__ = [
    "AsyncPostgresSaver",
    "DecryptionError",
    "InvalidInputError",
    "PgCheckpointError",
    "PoolTimeoutError",
    "PostgresSaver",
    "SchemaOutOfDateError",
    "ThreadBusyError",
]

__version__ = "0.1.0"
