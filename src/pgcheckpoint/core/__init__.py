"""The checkpointer written once, without I/O.

Each operation is a generator (`pgcheckpoint.ops.Op`): it yields the named
statements to run, receives their rows, and returns the operation's result.
`PostgresSaver` and `AsyncPostgresSaver` only run them (`saver.run(op)`), so
the logic exists once for both. `SaverCore` gathers the operations, one module
per concern: `writes` (put, put_writes), `reads` (get_tuple, list),
`delta_history` (DeltaChannel), `maintenance` (delete, copy, prune),
`reseal` (rows sealed again for a copy or a key rotation), on the shared
state of `base`.

Example:
    >>> from pgcheckpoint.core import SaverCore
    >>> next(SaverCore().delete_thread_op("t1")).name
    'delete_thread'
"""

from __future__ import annotations

from .delta_history import DeltaHistory
from .maintenance import Maintenance
from .reads import ListingMemo
from .writes import Writes

__all__ = ["ListingMemo", "SaverCore"]


class SaverCore(Writes, Maintenance, DeltaHistory):
    """The I/O-free half of both savers: builds statements, decodes rows.

    Subclasses provide the I/O: they run an `Op` to completion on a connection.

    Example:
        >>> core = SaverCore()
        >>> core.get_next_version(None, None).startswith("0" * 31 + "1.")
        True
    """
