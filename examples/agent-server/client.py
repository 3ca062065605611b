"""A client of the example server: a refund stops for approval, is approved, and is drawn.

The decision the graph recorded in the store is read back through the SDK.

Talks to `langgraph dev` at http://127.0.0.1:2024 (`LANGGRAPH_URL` for
another address) through LangGraph's SDK, as an application would.
"""

from __future__ import annotations

import asyncio
import os

from langgraph_sdk import get_client

URL = os.environ.get("LANGGRAPH_URL", "http://127.0.0.1:2024")


async def main() -> None:
    async with get_client(url=URL) as client:
        thread_id = (await client.threads.create())["thread_id"]
        paused = await client.runs.wait(thread_id, "refunds", input={"amount": 250})
        print("asked:", paused["__interrupt__"][0]["value"])
        done = await client.runs.wait(thread_id, "refunds", command={"resume": "approved"})
        print("done:", done)
        item = await client.store.get_item(["refunds"], thread_id)
        print("stored:", item["value"])
        history = await client.threads.get_history(thread_id)
        print(f"{len(history)} checkpoints in PostgreSQL; draw them with:")
        print(f"pgcheckpoint show {thread_id}")


if __name__ == "__main__":
    asyncio.run(main())
