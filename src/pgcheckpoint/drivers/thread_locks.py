"""What both drivers' thread locks share: a pool's lock slots, and the resume command.

The lock itself (its key, the statements that take, check and release it) is
`pgcheckpoint.core.locks`; the drivers hold it on a reserved connection
(`drivers.locks` and its async source `drivers.locks_async`).

Example:
    >>> from pgcheckpoint.drivers.thread_locks import slots_timeout_message
    >>> slots_timeout_message(pool)  # doctest: +SKIP
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from langchain_core.runnables import RunnableConfig

from ..errors import InvalidInputError, PgCheckpointError

__all__ = ["ResumableGraph", "pool_lock_slots", "resume_command", "slots_timeout_message"]

S = TypeVar("S")

# -- sharing a pool -----------------------------------------------------------------

# Per pool, how many more guarded runs may take a connection for their lock.
_SLOTS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_SLOTS_MUTEX = threading.Lock()


def pool_lock_slots(pool: Any, make: Callable[[int], S]) -> S:
    """The semaphore that keeps one connection of `pool` free of thread locks.

    A guarded run holds a connection for its lock and needs another to save
    checkpoints; were every connection holding a lock, every run would wait for
    one to save and time out. So at most `max_size - 1` locks share a pool.

    Example:
        >>> import threading
        >>> pool_lock_slots(pool, threading.BoundedSemaphore)  # doctest: +SKIP
    """
    if pool.max_size < 2:
        raise InvalidInputError(
            f"pool {pool.name!r} has max_size={pool.max_size}: a run that holds a thread "
            "lock keeps one connection for the lock and needs another to save checkpoints; "
            "use max_size >= 2"
        )
    with _SLOTS_MUTEX:
        slots = _SLOTS.get(pool)
        if slots is None:
            slots = _SLOTS[pool] = make(pool.max_size - 1)
        return slots  # type: ignore[no-any-return]


def slots_timeout_message(pool: Any) -> str:
    """What to say when no connection of `pool` may take another thread lock."""
    return (
        f"{pool.max_size - 1} runs hold thread locks on {pool.max_size - 1} of the "
        f"{pool.max_size} connections of pool {pool.name!r} (one stays free to save "
        f"checkpoints) and none ended within {pool.timeout:.1f}s: raise max_size, or run "
        "fewer guarded runs at once"
    )


# -- resume -------------------------------------------------------------------------


class ResumableGraph(Protocol):
    """A compiled LangGraph graph (`StateGraph.compile()`), as `resume` uses it."""

    checkpointer: Any

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any: ...

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any: ...


def resume_command(graph: Any, saver: Any, value: Any) -> Any:
    """`Command(resume=value)`, after checking that `graph` saves through `saver`.

    Example:
        >>> resume_command(graph, saver, "yes")  # doctest: +SKIP
        Command(resume='yes')
    """
    if getattr(graph, "checkpointer", None) is not saver:
        raise InvalidInputError(
            "resume() locks the thread in this saver's database, but the graph was compiled "
            "with another checkpointer; compile it with checkpointer=saver, or wrap your own "
            "invoke in `with saver.lock_thread(thread_id):`"
        )
    try:
        from langgraph.types import Command
    except ImportError:  # pragma: no cover - resume is only useful with langgraph
        raise PgCheckpointError(
            "resume() needs langgraph; install it (pip install langgraph)"
        ) from None
    return Command(resume=value)
