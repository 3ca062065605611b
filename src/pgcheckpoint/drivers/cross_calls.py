"""The cross-calling methods: the async saver's sync ones, and the sync saver's async ones refused.

LangGraph calls a saver's sync methods from sync code (`graph.invoke`,
`get_state`) and its async ones from async code. The async saver's sync
methods run the async twin on the event loop the saver was made on and wait
for it, as the official saver's do; called from that loop itself they would
deadlock, and once that loop is closed nothing would run them, so both raise
instead. The sync saver's async methods say to use `AsyncPostgresSaver`
(LangGraph's base class raises a bare `NotImplementedError` there).

Example:
    >>> saver = AsyncPostgresSaver(pool)  # doctest: +SKIP
    >>> await asyncio.to_thread(saver.get_tuple, config)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from ..core.state import SaverState
from ..errors import DriverMismatchError

__all__ = ["AsyncCrossCalls", "CrossCalls"]

# How often a sync call waiting on the saver's loop checks that the loop still runs.
_LOOP_CHECK_SECONDS = 0.5


class AsyncCrossCalls(SaverState):
    """`BaseCheckpointSaver`'s sync methods, each running its async twin on `self.loop`.

    The loop is the one running when the saver is made.

    Example:
        >>> issubclass(AsyncPostgresSaver, AsyncCrossCalls)  # doctest: +SKIP
        True
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.loop = asyncio.get_running_loop()

    def _blocking(self, method: str, *args: Any, **kwargs: Any) -> Any:
        # runs `a<method>` on the saver's loop and waits for it on this thread
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise DriverMismatchError(
                f"AsyncPostgresSaver.{method}() was called from the event loop it runs "
                f"on, which would deadlock; use `await saver.a{method}(...)` there, or "
                "call the sync method from another thread"
            )
        if self.loop.is_closed() or not self.loop.is_running():
            raise self._loop_gone(method)
        coro = getattr(self, "a" + method)(*args, **kwargs)
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:  # the loop closed since the check above
            coro.close()
            raise self._loop_gone(method) from None
        while True:
            try:
                return future.result(timeout=_LOOP_CHECK_SECONDS)
            except concurrent.futures.TimeoutError:
                # a loop that stopped meanwhile would leave this call waiting for ever
                if not self.loop.is_running():
                    with contextlib.suppress(RuntimeError):  # cancelling on a closed loop
                        future.cancel()
                    raise self._loop_gone(method) from None

    def _loop_gone(self, method: str) -> DriverMismatchError:
        state = "closed" if self.loop.is_closed() else "not running"
        return DriverMismatchError(
            f"AsyncPostgresSaver.{method}() runs on the event loop the saver was made on, and "
            f"that loop is {state}: its sync methods only serve other threads while the loop "
            f"runs; use PostgresSaver in sync code, or `await saver.a{method}(...)` in a "
            "saver made on the running loop"
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """`aget_tuple` for code on another thread.

        Example:
            >>> saver.get_tuple(config)  # doctest: +SKIP
        """
        return self._blocking("get_tuple", config)  # type: ignore[no-any-return]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """`alist` for code on another thread.

        Example:
            >>> list(saver.list(config))  # doctest: +SKIP
        """
        yield from self._blocking("list_all", config, filter=filter, before=before, limit=limit)

    async def alist_all(
        self, config: RunnableConfig | None, **kwargs: Any
    ) -> builtins.list[CheckpointTuple]:
        """Every tuple `alist` yields, as a list.

        Example:
            >>> await saver.alist_all(config, limit=5)  # doctest: +SKIP
        """
        return [tup async for tup in self.alist(config, **kwargs)]

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """`aput` for code on another thread.

        Example:
            >>> saver.put(config, checkpoint, metadata, {})  # doctest: +SKIP
        """
        return self._blocking("put", config, checkpoint, metadata, new_versions)  # type: ignore[no-any-return]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """`aput_writes` for code on another thread.

        Example:
            >>> saver.put_writes(config, [("a", 1)], "task")  # doctest: +SKIP
        """
        self._blocking("put_writes", config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """`adelete_thread` for code on another thread.

        Example:
            >>> saver.delete_thread("t1")  # doctest: +SKIP
        """
        self._blocking("delete_thread", thread_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """`acopy_thread` for code on another thread.

        Example:
            >>> saver.copy_thread("t1", "t2")  # doctest: +SKIP
        """
        self._blocking("copy_thread", source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`aprune` for code on another thread.

        Example:
            >>> saver.prune(["t1"])  # doctest: +SKIP
        """
        self._blocking("prune", thread_ids, strategy=strategy)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """`adelete_for_runs` for code on another thread.

        Example:
            >>> saver.delete_for_runs(["run-1"])  # doctest: +SKIP
        """
        self._blocking("delete_for_runs", run_ids)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """`aget_delta_channel_history` for code on another thread.

        Example:
            >>> saver.get_delta_channel_history(config=config, channels=["m"])  # doctest: +SKIP
        """
        return self._blocking(  # type: ignore[no-any-return]
            "get_delta_channel_history", config=config, channels=channels
        )


def _refused(method: str) -> Any:
    """An async method of `PostgresSaver` that raises instead of running."""

    async def refuse(self: CrossCalls, *args: Any, **kwargs: Any) -> Any:
        raise _mismatch(method)

    refuse.__name__ = refuse.__qualname__ = method
    refuse.__doc__ = "Refused: use `AsyncPostgresSaver`."
    return refuse


def _mismatch(method: str) -> DriverMismatchError:
    return DriverMismatchError(
        f"PostgresSaver is synchronous, and async code (graph.ainvoke, astream, "
        f"aget_state) called its {method}(): for async code compile the graph with "
        "AsyncPostgresSaver (`from pgcheckpoint import AsyncPostgresSaver`, "
        "`async with AsyncPostgresSaver.from_conn_string(dsn) as saver: ...`), "
        "or call graph.invoke"
    )


class CrossCalls(SaverState):
    """`BaseCheckpointSaver`'s async methods on `PostgresSaver`: each says to use the async saver.

    A graph compiled with a `PostgresSaver` and run with `ainvoke`, `astream`
    or `aget_state` calls these; each raises `DriverMismatchError` naming
    `AsyncPostgresSaver` (LangGraph's base class raises a bare
    `NotImplementedError`). The signatures are the base class's.

    Example:
        >>> issubclass(PostgresSaver, CrossCalls)  # doctest: +SKIP
        True
    """

    aget_tuple = _refused("aget_tuple")
    aput = _refused("aput")
    aput_writes = _refused("aput_writes")
    adelete_thread = _refused("adelete_thread")
    acopy_thread = _refused("acopy_thread")
    aprune = _refused("aprune")
    adelete_for_runs = _refused("adelete_for_runs")
    aget_delta_channel_history = _refused("aget_delta_channel_history")

    async def alist(
        self, config: RunnableConfig | None, **kwargs: Any
    ) -> AsyncIterator[CheckpointTuple]:
        """Refused: use `AsyncPostgresSaver`."""
        raise _mismatch("alist")
        yield  # an async generator, as the method it stands for
