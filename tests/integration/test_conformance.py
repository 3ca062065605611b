"""LangGraph's own checkpointer conformance suite, all eight capabilities, on every variant,
with the default cache budget and with nothing cached.

The suite drives savers through their async methods. `AsyncPostgresSaver` is
validated as is; `PostgresSaver` through `ThreadedSaver`, which runs each sync
method in a worker thread, as an async caller of a sync saver would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from support.savers import ThreadedSaver

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver
from pgcheckpoint.core.caches import DEFAULT_CACHE_BYTES


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
