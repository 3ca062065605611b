"""Errors raised by pgcheckpoint.

Every error derives from `PgCheckpointError`. Errors about the connection also
derive from `psycopg.OperationalError`, so handlers written for psycopg keep
catching them.

Example:
    >>> from pgcheckpoint.errors import PgCheckpointError, InvalidInputError
    >>> issubclass(InvalidInputError, (PgCheckpointError, ValueError))
    True
"""

from __future__ import annotations

import asyncio

from psycopg_pool import PoolTimeout

__all__ = [
    "DecryptionError",
    "DowngradeRefusedError",
    "DriverMismatchError",
    "InvalidInputError",
    "MissingCheckpointError",
    "MissingParentError",
    "PgCheckpointError",
    "PoolTimeoutError",
    "SchemaOutOfDateError",
    "ThreadBusyError",
    "ThreadConflictError",
    "UnreadableValueError",
    "UnserializableValueError",
    "WrongTypeError",
]


class PgCheckpointError(Exception):
    """Root of every error pgcheckpoint raises.

    Example:
        >>> try:
        ...     raise InvalidInputError("thread_id is missing")
        ... except PgCheckpointError as exc:
        ...     print(exc)
        thread_id is missing
    """


class InvalidInputError(PgCheckpointError, ValueError):
    """An argument cannot be stored; nothing was written.

    Example:
        >>> InvalidInputError("'thread_id' contains a NUL character")
        InvalidInputError("'thread_id' contains a NUL character")
    """


class WrongTypeError(InvalidInputError, TypeError):
    """An argument is of a type the method does not take; nothing was done.

    One thread id given as a string where `prune` takes a list of them, a
    limit that is no int. Also a `TypeError`, which the official saver raises
    there, so code written for it keeps catching it.

    Example:
        >>> issubclass(WrongTypeError, (InvalidInputError, TypeError))
        True
    """


class UnserializableValueError(InvalidInputError, TypeError):
    """The serializer cannot encode a value; nothing was written.

    Also a `TypeError`, which is what the serializer itself raises, so code
    written for other savers keeps catching it.

    Example:
        >>> issubclass(UnserializableValueError, (InvalidInputError, TypeError))
        True
    """


class SchemaOutOfDateError(PgCheckpointError):
    """The database schema is behind this version of pgcheckpoint.

    Example:
        >>> str(SchemaOutOfDateError("run `pgcheckpoint migrate`"))
        'run `pgcheckpoint migrate`'
    """


class DowngradeRefusedError(PgCheckpointError):
    """A downgrade would strand rows the older revision cannot read; nothing changed.

    Example:
        >>> issubclass(DowngradeRefusedError, PgCheckpointError)
        True
    """


class ThreadBusyError(PgCheckpointError):
    """Another worker holds the lock of this thread.

    Attributes:
        thread_id: The thread that could not be locked.
        holder_pid: The backend pid of the holder, when Postgres can tell.

    Example:
        >>> err = ThreadBusyError("t1", holder_pid=4242)
        >>> err.thread_id, err.holder_pid
        ('t1', 4242)
    """

    def __init__(self, thread_id: str, *, holder_pid: int | None = None, message: str = "") -> None:
        self.thread_id = thread_id
        self.holder_pid = holder_pid
        if not message:
            holder = f" (held by backend pid {holder_pid})" if holder_pid else ""
            message = (
                f"thread {thread_id!r} is locked by another worker{holder}; "
                "retry later or pass a timeout to wait"
            )
        super().__init__(message)


class ThreadConflictError(PgCheckpointError):
    """A delete kept conflicting with concurrent work on its threads; nothing was deleted.

    Deletes wait for the saves in flight and make later ones wait, so this
    takes a writer that skips the threads' locks (an older pgcheckpoint
    during a rolling deploy, SQL of your own), or deletes of several threads
    each that keep waiting for each other.

    Attributes:
        thread_ids: The threads of the delete.

    Example:
        >>> ThreadConflictError(["t1"], "thread 't1' kept being written to").thread_ids
        ['t1']
    """

    def __init__(self, thread_ids: list[str], message: str) -> None:
        self.thread_ids = thread_ids
        super().__init__(message)


class UnreadableValueError(PgCheckpointError):
    """A stored value cannot be read back: corrupt, truncated, NULL, or not decryptable.

    The message names the table and row. `DecryptionError` is the kind raised
    when encryption is on and a value, or a column a read relies on, fails
    authentication.

    Example:
        >>> issubclass(DecryptionError, UnreadableValueError)
        True
    """


class DecryptionError(UnreadableValueError):
    """A stored value, or a column bound to it, could not be decrypted or authenticated.

    Raised with encryption on for a wrong or missing key, and for any row
    altered behind the saver's back: the message names the table, the row and
    the key.

    Example:
        >>> str(DecryptionError("blob of channel 'messages' failed authentication"))
        "blob of channel 'messages' failed authentication"
    """


class DriverMismatchError(PgCheckpointError, NotImplementedError, asyncio.InvalidStateError):
    """A saver was used the way only the other driver can serve.

    `PostgresSaver` called from async code (`graph.ainvoke`, `astream`,
    `aget_state`), or `AsyncPostgresSaver`'s sync methods called where its
    event loop cannot run them (on that loop itself, or once it stopped).
    Also a `NotImplementedError`, which LangGraph's base class raises for the
    first, and an `asyncio.InvalidStateError`, which the official
    `AsyncPostgresSaver` raises for a sync call on its loop, so handlers
    written for either keep catching it.

    Example:
        >>> import asyncio
        >>> issubclass(DriverMismatchError, (NotImplementedError, asyncio.InvalidStateError))
        True
    """


class PoolTimeoutError(PgCheckpointError, PoolTimeout):
    """No connection became free in the pool in time.

    Example:
        >>> import psycopg
        >>> issubclass(PoolTimeoutError, (PoolTimeout, psycopg.OperationalError))
        True
    """


class MissingParentError(PgCheckpointError):
    """A checkpoint continues from a parent checkpoint that was deleted; nothing was saved.

    The parent was deleted (by retention, `prune`, `delete_thread` or
    `delete_for_runs`), possibly while the graph was running on it. Saving the
    child anyway would leave a thread whose history stops short, so the put is
    refused. A parent this database never stored is no reason to refuse (the
    checkpoint is saved naming it, as the official saver does), but one whose id
    sorts at or below the highest checkpoint id deleted from the thread (the
    `pgc_deletions` table) is taken as deleted.

    Attributes:
        thread_id: The thread of the refused checkpoint.
        checkpoint_ns: Its namespace.
        checkpoint_id: The refused checkpoint.
        parent_checkpoint_id: The parent that is missing.

    Example:
        >>> err = MissingParentError("t1", "", "c2", "c1")
        >>> err.parent_checkpoint_id
        'c1'
    """

    def __init__(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, parent_checkpoint_id: str
    ) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.parent_checkpoint_id = parent_checkpoint_id
        super().__init__(
            f"checkpoint {checkpoint_id!r} of thread {thread_id!r}, namespace "
            f"{checkpoint_ns!r} was not saved: its parent {parent_checkpoint_id!r} was "
            "deleted (by `pgcheckpoint prune`, retention, delete_thread or delete_for_runs; "
            "a missing parent at or below the thread's highest deleted checkpoint id counts "
            "as deleted); run the graph again from the thread's current state"
        )


class MissingCheckpointError(PgCheckpointError):
    """Writes for a checkpoint that was deleted while they were saved; nothing was saved.

    Raised by `put_writes` when a delete (`delete_thread`, `prune`, retention)
    of the checkpoint's thread ran while the writes waited to be saved, and
    the checkpoint is gone: a run that goes on there would leave rows no read
    returns. Its next `put` would fail with `MissingParentError` anyway.

    Attributes:
        thread_id: The thread of the writes.
        checkpoint_ns: Their namespace.
        checkpoint_id: The checkpoint that is gone.
        task_id: The task that wrote them.

    Example:
        >>> MissingCheckpointError("t1", "", "c1", "task").checkpoint_id
        'c1'
    """

    def __init__(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, task_id: str
    ) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.task_id = task_id
        super().__init__(
            f"the writes of task {task_id!r} for checkpoint {checkpoint_id!r} of thread "
            f"{thread_id!r}, namespace {checkpoint_ns!r} were not saved: the checkpoint was "
            "deleted (delete_thread, prune or retention) while they were saved; run the "
            "graph again from the thread's current state"
        )
