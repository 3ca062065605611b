"""The drivers: they run the core's ops on a connection, a pool or a pipeline. Internal.

`runner_async.AsyncRunner` runs ops (`run`, `run_each`) for asyncio code, and
`runner.Runner`, generated from it, for synchronous code; `saver_async` and
`saver` put LangGraph's checkpointer API on them (`AsyncPostgresSaver`,
`PostgresSaver`), `locks_async` and `locks` hold thread locks. The sync
modules are written by `tools/async_to_sync.py` from the async ones, with the
few names that differ in `_acompat`. Beside them: `connections` (what both
share: connection strings, pool settings, kept cursors, a pool's outages),
`oprun` (the retry rule), `cross_calls` (each saver's methods of the other
kind), `thread_locks` (lock slots, resume), `rotate_key`.

Example:
    >>> from pgcheckpoint.drivers.saver import PostgresSaver
    >>> PostgresSaver.__mro__[1].__name__
    'Runner'
"""

from __future__ import annotations

import warnings


def __getattr__(name: str) -> object:
    # `pgcheckpoint.drivers.libpq_dsn` was documented when `drivers` was a module
    if name == "libpq_dsn":
        warnings.warn(
            "pgcheckpoint.drivers.libpq_dsn is deprecated and goes in the next release: "
            "import libpq_dsn from pgcheckpoint",
            DeprecationWarning,
            stacklevel=2,
        )
        from ..validate import libpq_dsn

        return libpq_dsn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
