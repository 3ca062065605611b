"""Without OpenTelemetry, or with its API and no SDK: the savers work and send nothing.

The first test runs the savers in a Python process where the `opentelemetry`
package cannot be imported (a meta-path finder refuses it), as for an
application that installed pgcheckpoint without the `otel` extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_config

import pgcheckpoint
from pgcheckpoint import PostgresSaver
from pgcheckpoint.core.deletes import delete_thread_op
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.telemetry.activity import Activity
from pgcheckpoint.telemetry.config import observe

HIDDEN = textwrap.dedent(
    """
    import asyncio, importlib.abc, json, sys

    class HideOpenTelemetry(importlib.abc.MetaPathFinder):
        tried = []

        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] == "opentelemetry":
                self.tried.append(name)
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, HideOpenTelemetry())

    from langgraph.checkpoint.conformance.test_utils import generate_config
    from langgraph.checkpoint.base import empty_checkpoint
    from pgcheckpoint import AsyncPostgresSaver, PostgresSaver
    from pgcheckpoint.telemetry.activity import Activity
    from pgcheckpoint.telemetry.config import observe

    DSN = sys.argv[1]

    def checkpoint():
        cp = empty_checkpoint()
        cp["channel_values"] = {"items": ["a", "b"]}
        cp["channel_versions"] = {"items": "1.0"}
        return cp

    with PostgresSaver.from_conn_string(DSN, pool={"max_size": 2}) as saver:
        config = saver.put(generate_config("sync"), checkpoint(), {}, {"items": "1.0"})
        assert saver.get_tuple(config).checkpoint["channel_values"] == {"items": ["a", "b"]}
        assert len(list(saver.list(config))) == 1
        with saver.lock_thread("sync"):
            pass
        saver.prune_keep_last(1)
        assert type(observe(saver, name="put")) is Activity

    async def main():
        async with AsyncPostgresSaver.from_conn_string(DSN) as saver:
            config = await saver.aput(generate_config("async"), checkpoint(), {}, {"items": "1.0"})
            assert (await saver.aget_tuple(config)) is not None
            async with saver.lock_thread("async"):
                pass

    asyncio.run(main())
    print(json.dumps({
        "imported": sorted(m for m in sys.modules if m.partition(".")[0] == "opentelemetry"),
        "tried": HideOpenTelemetry.tried,
    }))
    """
)


def test_without_the_package_the_savers_work_and_nothing_imports_it(db_dsn: str) -> None:
    package_root = Path(pgcheckpoint.__file__).resolve().parents[1]
    path = os.pathsep.join(filter(None, [str(package_root), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", HIDDEN, db_dsn],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["imported"] == []
    # pgcheckpoint looked for it once, and took the answer
    assert "opentelemetry" in seen["tried"]


def test_with_the_api_and_no_sdk_an_operation_is_not_traced(db_dsn: str) -> None:
    trace = pytest.importorskip("opentelemetry.trace")
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("a tracer provider was set in this process")
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        activity = observe(saver, delete_thread_op(SaverState(), "t"))
        assert type(activity) is Activity and activity.operation == "delete_thread"
        assert saver.get_tuple(generate_config("nothing-here")) is None
