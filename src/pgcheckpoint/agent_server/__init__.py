"""LangGraph's Agent Server on pgcheckpoint: the factories `langgraph.json` names.

    "checkpointer": {"path": "pgcheckpoint.agent_server.checkpointer"},
    "store": {"path": "pgcheckpoint.agent_server.store"}

`checkpointer` (`factory`) and `store` (`store_factory`) are async context
managers the server calls with no arguments and enters as they are; their
settings come from the environment (`settings`, `store_settings`), and each
sweeps the TTL of its `ttl` block itself (`ttl`). The library never
imports this package, nor this package the server's. See docs/agent-server.md.

Example:
    >>> from pgcheckpoint.agent_server import checkpointer
    >>> async with checkpointer() as saver:  # doctest: +SKIP
    ...     print(type(saver).__name__)
    AsyncPostgresSaver
"""

from __future__ import annotations

from .factory import checkpointer
from .store_factory import store

__all__ = ["checkpointer", "store"]
