"""LangGraph's own checkpointer conformance suite, all eight capabilities, on every variant,
with the default cache budget and with nothing cached.

The suite drives savers through their async methods. `AsyncPostgresSaver` is
validated as is; `PostgresSaver` through `ThreadedSaver`, which runs each sync
method in a worker thread, as an async caller of a sync saver would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver
from pgcheckpoint.caches import DEFAULT_CACHE_BYTES


class ThreadedSaver(BaseCheckpointSaver[str]):
    """A sync saver behind async methods, each call run with `asyncio.to_thread`.

    The async methods are overridden here (not inherited), so the conformance
    suite's capability detection sees every one of them.
    """

    def __init__(self, inner: PostgresSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    def get_next_version(self, current: str | None, channel: None) -> str:
        return self.inner.get_next_version(current, channel)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.inner.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        def collect() -> list[CheckpointTuple]:
            return list(self.inner.list(config, filter=filter, before=before, limit=limit))

        for tup in await asyncio.to_thread(collect):
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.inner.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.inner.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.inner.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.inner.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.inner.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.inner.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            self.inner.get_delta_channel_history, config=config, channels=channels
        )


# the same behaviour whatever the savers keep between calls, nothing included
@pytest.mark.parametrize(
    "cache_bytes", [DEFAULT_CACHE_BYTES, 0], ids=["default-budget", "nothing-cached"]
)
async def test_conformance_all_capabilities(saver: PostgresSaver | AsyncPostgresSaver) -> None:
    subject: BaseCheckpointSaver[str] = (
        saver if isinstance(saver, AsyncPostgresSaver) else ThreadedSaver(saver)
    )

    @checkpointer_test(name=type(saver).__name__)
    async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
        yield subject

    report = await validate(factory)
    expected = {cap.value for cap in ALL_CAPABILITIES}
    assert set(report.results) == expected
    problems = {
        name: result.failures or "not detected"
        for name, result in report.results.items()
        if not (result.detected and result.passed)
    }
    assert not problems, problems
    assert all(r.tests_passed > 0 and r.tests_failed == 0 for r in report.results.values())
