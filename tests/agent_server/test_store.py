"""The server's long-term memory store on pgcheckpoint's factory, driven through the SDK.

One server for the module (`langgraph dev` with the example's `langgraph.json`,
whose `store` block names `pgcheckpoint.agent_server.store`, here with a `ttl`
block, encryption on and `kind` kept readable for filters): the SDK's item
calls, a node of the example's review subgraph that writes to the store, the
factory's sweep of expired items (the server starts none for a custom
store), and a restart that keeps every item. Each test checks what the
server answers and what `pgc_store` holds.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.agent_server import EXAMPLE, AgentServer, server_env, server_folder

from .conftest import client_of, table_rows

KEY = base64.b64encode(bytes(range(80, 112))).decode()
STORE_TTL = {"default_ttl": 60, "refresh_on_read": True, "sweep_interval_minutes": 1}


@pytest.fixture(scope="module")
def server(module_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    config = json.loads((EXAMPLE / "langgraph.json").read_text())
    assert config["store"] == {"path": "pgcheckpoint.agent_server.store"}
    config["store"]["ttl"] = STORE_TTL
    folder = server_folder(tmp_path_factory.mktemp("store"), config=config)
    env = server_env(
        module_dsn,
        PGCHECKPOINT_AES_KEYS=f"k1:{KEY}",
        PGCHECKPOINT_STORE_FILTERABLE="kind",
        PGCHECKPOINT_TTL_SWEEP_SECONDS="1",
    )
    server = AgentServer(folder, env)
    server.start()
    yield server
    server.stop()


def namespace() -> list[str]:
    """A namespace of the test's own: the tests share the server's store."""
    return ["users", uuid.uuid4().hex[:12]]


def stored(dsn: str, ns: list[str]) -> dict[str, dict[str, Any]]:
    rows = table_rows(
        dsn,
        "SELECT key, type, value, doc, ttl_minutes FROM pgc_store WHERE ns = %s",
        (".".join(ns),),
    )
    return {row["key"]: row for row in rows}


async def test_items_go_in_come_back_and_go(server: AgentServer, module_dsn: str) -> None:
    ns = namespace()
    async with client_of(server.url) as client:
        await client.store.put_item(ns, "prefs", {"kind": "prefs", "theme": "dark"}, ttl=10)
        await client.store.put_item(ns, "note", {"kind": "note", "text": "call back on monday"})
        item = await client.store.get_item(ns, "prefs")
        assert (item["namespace"], item["key"], item["value"]) == (
            ns,
            "prefs",
            {"kind": "prefs", "theme": "dark"},
        )
        found = await client.store.search_items(ns, filter={"kind": "note"})
        assert [(i["key"], i["value"]["text"]) for i in found["items"]] == [
            ("note", "call back on monday")
        ]
        listed = await client.store.list_namespaces(prefix=ns)
        assert listed["namespaces"] == [ns]
        rows = stored(module_dsn, ns)
        assert set(rows) == {"prefs", "note"}
        # the server sends a put_item without ttl as ttl=None: no expiry, not default_ttl
        assert (rows["prefs"]["ttl_minutes"], rows["note"]["ttl_minutes"]) == (10.0, None)
        # sealed values: only `kind` stays readable
        assert rows["note"]["type"].endswith(":k1") and b"monday" not in rows["note"]["value"]
        assert rows["note"]["doc"] == {"kind": "note"}

        await client.store.delete_item(ns, "note")
        assert (await client.store.search_items(ns))["items"][0]["key"] == "prefs"
        assert len((await client.store.search_items(ns))["items"]) == 1
    assert set(stored(module_dsn, ns)) == {"prefs"}


async def test_the_review_subgraph_records_its_decision_in_the_store(
    server: AgentServer, module_dsn: str
) -> None:
    async with client_of(server.url) as client:
        thread_id = (await client.threads.create())["thread_id"]
        await client.runs.wait(thread_id, "refunds", input={"amount": 400})
        # stopped at the interrupt: nothing decided yet
        assert thread_id not in stored(module_dsn, ["refunds"])
        await client.runs.wait(thread_id, "refunds", command={"resume": "approved"})
        item = await client.store.get_item(["refunds"], thread_id)
    assert item["value"] == {"amount": 400, "risk": "high", "decision": "approved"}
    # a graph's put without a ttl gets the block's default_ttl
    assert stored(module_dsn, ["refunds"])[thread_id]["ttl_minutes"] == 60.0


async def test_the_factory_sweeps_expired_items_the_server_does_not(
    server: AgentServer, module_dsn: str
) -> None:
    assert "Skipping store TTL sweeper" in server.output()
    ns = namespace()
    async with client_of(server.url) as client:
        await client.store.put_item(ns, "old", {"kind": "cache"}, ttl=5)
        await client.store.put_item(ns, "fresh", {"kind": "cache"}, ttl=5)
    assert stored(module_dsn, ns)["old"]["ttl_minutes"] == 5.0
    table_rows(
        module_dsn,
        "UPDATE pgc_store SET expires_at = now() - interval '1 minute'"
        " WHERE ns = %s AND key = 'old' RETURNING 1",
        (".".join(ns),),
    )
    for _ in range(300):
        if set(stored(module_dsn, ns)) == {"fresh"}:
            break
        await asyncio.sleep(0.1)
    assert set(stored(module_dsn, ns)) == {"fresh"}
    assert "store ttl sweep: deleted 1 expired items" in server.output()


async def test_items_outlive_a_restart_of_the_server(server: AgentServer) -> None:
    ns = namespace()
    async with client_of(server.url) as client:
        await client.store.put_item(ns, "kept", {"kind": "prefs", "lang": "fr"})
        before = await client.store.search_items(ns)
    server.stop(signal.SIGTERM)
    assert server.output().count("pgcheckpoint store closed its pool") == 1
    server.start()
    async with client_of(server.url) as client:
        after = await client.store.search_items(ns)
        assert [i["value"] for i in after["items"]] == [{"kind": "prefs", "lang": "fr"}]
        assert [(i["key"], i["created_at"]) for i in after["items"]] == [
            (i["key"], i["created_at"]) for i in before["items"]
        ]
