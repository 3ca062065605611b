"""Run a Python file whose top level awaits (a docs block), as `python -m asyncio` would.

A context that opened savers leaves them in an `AsyncExitStack` named `_stack`,
closed on the same event loop once the block ran.
"""

from __future__ import annotations

import ast
import asyncio
import sys
from typing import Any


async def run(path: str) -> None:
    with open(path, encoding="utf-8") as file:
        source = file.read()
    code = compile(source, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": path}
    result = eval(code, namespace)
    if asyncio.iscoroutine(result):
        await result
    stack = namespace.get("_stack")
    if stack is not None:
        await stack.aclose()


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1]))
