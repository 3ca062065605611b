"""The sync driver is generated from the async one and must not drift from it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "async_to_sync.py"


def load_tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("async_to_sync", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["async_to_sync"] = module
    spec.loader.exec_module(module)
    return module


def test_saver_py_is_generated_from_aio_py() -> None:
    tool = load_tool()
    generated = tool.generate(tool.SOURCE.read_text(encoding="utf-8"))
    assert tool.TARGET.read_text(encoding="utf-8") == generated, (
        "src/pgcheckpoint/saver.py differs from what aio.py generates: edit aio.py, "
        "then run `make sync-twin`"
    )


def test_generator_renames_and_markers() -> None:
    tool = load_tool()
    source = (
        "import asyncio  # sync: import threading\n"
        "from psycopg import AsyncConnection, Capabilities, Error\n"
        "async def aget_tuple(self):\n"
        "    self.loop = 1  # async-only\n"
        "    # sync-only: return self.get(x)\n"
        "    return await self.aget(x)  # async-only\n"
        "# async-only: begin\n"
        "def gone(): pass\n"
        "# async-only: end\n"
    )
    assert tool.generate(source).splitlines()[2:] == [
        "import threading",
        "from psycopg import Capabilities, Connection, Error",
        "def get_tuple(self):",
        "    return self.get(x)",
    ]
