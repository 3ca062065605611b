"""LangGraph's Agent Server on pgcheckpoint: the factory `langgraph.json` names.

    "checkpointer": {"path": "pgcheckpoint.agent_server.checkpointer"}

`checkpointer` is an async context manager the server calls with no
arguments and enters as it is (`factory`); its settings come from the
environment (`settings`), and it sweeps the thread TTL of the `ttl` block
itself (`ttl`). The library never imports this package, nor this package the
server's. See docs/agent-server.md.

Example:
    >>> from pgcheckpoint.agent_server import checkpointer
    >>> async with checkpointer() as saver:  # doctest: +SKIP
    ...     print(type(saver).__name__)
    AsyncPostgresSaver
"""

from __future__ import annotations

from .factory import checkpointer

__all__ = ["checkpointer"]
