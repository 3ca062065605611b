"""The sync methods of `AsyncPostgresSaver`, for code on other threads.

LangGraph calls a saver's sync methods from sync code (`graph.invoke`,
`get_state`) and its async ones from async code. The async saver's sync
methods run the async twin on the event loop the saver was made on and wait
for it, as the official saver's do; called from that loop itself they would
deadlock, and raise instead.

Example:
    >>> saver = AsyncPostgresSaver(pool)  # doctest: +SKIP
    >>> await asyncio.to_thread(saver.get_tuple, config)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from .core import SaverCore
from .errors import PgCheckpointError

__all__ = ["SyncFromThreads"]


class SyncFromThreads(SaverCore):
    """`BaseCheckpointSaver`'s sync methods, each running its async twin on `self.loop`.

    Example:
        >>> issubclass(AsyncPostgresSaver, SyncFromThreads)  # doctest: +SKIP
        True
    """

    loop: asyncio.AbstractEventLoop

    def _blocking(self, method: str, *args: Any, **kwargs: Any) -> Any:
        # runs `a<method>` on the saver's loop and waits for it on this thread
        try:
            if asyncio.get_running_loop() is self.loop:
                raise PgCheckpointError(
                    f"AsyncPostgresSaver.{method}() was called from the event loop it runs "
                    f"on, which would deadlock; use `await saver.a{method}(...)` there, or "
                    "call the sync method from another thread"
                )
        except RuntimeError:
            pass
        coro = getattr(self, "a" + method)(*args, **kwargs)
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

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
