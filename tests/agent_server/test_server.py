"""What a client of the Agent Server does, on pgcheckpoint's factory with encryption on.

One server for the module (`langgraph dev` with `langgraph.json` naming
`pgcheckpoint.agent_server.checkpointer`, `PGCHECKPOINT_AES_KEYS` set), driven
by `langgraph_sdk` as an application drives it: runs, interrupt and resume,
state and history, `update_state`, forks, subgraph state, thread copy,
multitask rollback, thread delete. Each test checks what the server answers
and what the tables hold; the last one that no value is in them in plaintext.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Iterator
from typing import Any

import pytest
from support.agent_server import AgentServer, interrupt_values, server_env, server_folder

from .conftest import checkpoint_count, table_rows

KEY = base64.b64encode(bytes(range(40, 72))).decode()
# A graph whose second node waits as long as its input says: a run to roll back.
SLOW_GRAPH = """
import asyncio
from typing import TypedDict

from langgraph.graph import START, StateGraph


class Steps(TypedDict, total=False):
    pause: float
    done: list[str]


def first(state: Steps) -> Steps:
    return {"done": ["first"]}


async def second(state: Steps) -> Steps:
    await asyncio.sleep(state.get("pause", 0))
    return {"done": [*state["done"], "second"]}


graph = (
    StateGraph(Steps)
    .add_node("first", first)
    .add_node("second", second)
    .add_edge(START, "first")
    .add_edge("first", "second")
    .compile()
)
"""


@pytest.fixture(scope="module")
def server(module_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    folder = server_folder(tmp_path_factory.mktemp("server"), graphs={"slow": "./slow.py:graph"})
    (folder / "slow.py").write_text(SLOW_GRAPH)
    server = AgentServer(folder, server_env(module_dsn, PGCHECKPOINT_AES_KEYS=f"k1:{KEY}"))
    server.start()
    yield server
    server.stop()


async def interrupted_thread(client: Any, amount: int = 400) -> tuple[str, Any]:
    thread = await client.threads.create()
    paused = await client.runs.wait(thread["thread_id"], "refunds", input={"amount": amount})
    return thread["thread_id"], paused


async def test_a_run_stops_at_its_interrupt_and_resumes_from_postgres(
    client: Any, module_dsn: str
) -> None:
    thread_id, paused = await interrupted_thread(client)
    assert [i["value"] for i in paused["__interrupt__"]] == ["refund 400 EUR?"]
    state = await client.threads.get_state(thread_id)
    assert state["next"] == ["review"]
    assert interrupt_values(state) == ["refund 400 EUR?"]
    thread = await client.threads.get(thread_id)
    assert thread["status"] == "interrupted"
    assert checkpoint_count(module_dsn, thread_id, "") == 2  # input, then the step that stopped

    done = await client.runs.wait(thread_id, "refunds", command={"resume": "approved"})
    assert done == {"amount": 400, "risk": "high", "decision": "approved", "paid": True}
    state = await client.threads.get_state(thread_id)
    assert state["next"] == [] and state["values"]["paid"] is True
    assert checkpoint_count(module_dsn, thread_id, "") == 4
    # the subgraph's own checkpoints, under its namespace
    assert checkpoint_count(module_dsn, thread_id) > 4


async def test_history_pages_back_from_a_checkpoint_the_sdk_gives(client: Any) -> None:
    thread_id, _ = await interrupted_thread(client, amount=20)  # low risk: no interrupt
    history = await client.threads.get_history(thread_id, limit=10)
    steps = [h["metadata"]["step"] for h in history]
    assert steps == [2, 1, 0, -1]
    # `before` as the SDK's checkpoint (its usual form: no `configurable` in it)
    older = await client.threads.get_history(thread_id, before=history[1]["checkpoint"])
    assert [h["metadata"]["step"] for h in older] == [0, -1]
    assert [h["values"] for h in older] == [history[2]["values"], history[3]["values"]]


async def test_the_subgraph_that_stopped_shows_its_own_state(client: Any) -> None:
    thread_id, _ = await interrupted_thread(client, amount=250)
    state = await client.threads.get_state(thread_id, subgraphs=True)
    (task,) = state["tasks"]
    assert task["name"] == "review"
    inner = task["state"]
    assert inner["values"] == {"amount": 250, "risk": "high"}
    assert inner["next"] == ["ask"]
    namespace = inner["checkpoint"]["checkpoint_ns"]
    assert namespace.startswith("review:")
    by_namespace = await client.threads.get_state(thread_id, checkpoint=inner["checkpoint"])
    assert by_namespace["values"] == inner["values"]


async def test_update_state_writes_a_checkpoint_and_a_fork_runs_on_its_own_branch(
    client: Any, module_dsn: str
) -> None:
    thread_id, _ = await interrupted_thread(client, amount=20)
    history = await client.threads.get_history(thread_id)
    updated = await client.threads.update_state(thread_id, {"decision": "refused"}, as_node="pay")
    state = await client.threads.get_state(thread_id)
    assert state["values"]["decision"] == "refused"
    assert state["checkpoint"]["checkpoint_id"] == updated["checkpoint"]["checkpoint_id"]

    # fork: a new value at the checkpoint before `review` ran, then run from there
    start = next(h for h in history if h["metadata"]["step"] == 0)
    forked = await client.threads.update_state(
        thread_id,
        {"amount": 900},
        checkpoint_id=start["checkpoint"]["checkpoint_id"],
        as_node="__start__",
    )
    paused = await client.runs.wait(
        thread_id,
        "refunds",
        input=None,
        checkpoint_id=forked["checkpoint"]["checkpoint_id"],
    )
    assert [i["value"] for i in paused["__interrupt__"]] == ["refund 900 EUR?"]
    rows = table_rows(
        module_dsn,
        "SELECT checkpoint_id, parent_checkpoint_id FROM pgc_checkpoints"
        " WHERE thread_id = %s AND checkpoint_ns = ''",
        (thread_id,),
    )
    parents = [r["parent_checkpoint_id"] for r in rows]
    # the fork's checkpoint and the first branch's step 1 share their parent
    assert parents.count(start["checkpoint"]["checkpoint_id"]) == 2
    # the first branch is still there: its last checkpoint reads as it was
    old = await client.threads.get_state(
        thread_id, checkpoint_id=updated["checkpoint"]["checkpoint_id"]
    )
    assert old["values"]["decision"] == "refused"


async def test_a_copied_thread_has_the_whole_history(client: Any, module_dsn: str) -> None:
    thread_id, _ = await interrupted_thread(client)
    copy = await client.threads.copy(thread_id)
    copied = copy["thread_id"]
    assert checkpoint_count(module_dsn, copied) == checkpoint_count(module_dsn, thread_id)
    original = await client.threads.get_history(thread_id)
    history = await client.threads.get_history(copied)
    assert [h["values"] for h in history] == [h["values"] for h in original]
    assert interrupt_values(await client.threads.get_state(copied)) == ["refund 400 EUR?"]
    # the copy runs on alone
    done = await client.runs.wait(copied, "refunds", command={"resume": "approved"})
    assert done["paid"] is True
    assert interrupt_values(await client.threads.get_state(thread_id)) == ["refund 400 EUR?"]


async def test_a_rolled_back_run_leaves_no_checkpoint(client: Any, module_dsn: str) -> None:
    thread = await client.threads.create()
    thread_id = thread["thread_id"]
    first = await client.runs.create(thread_id, "slow", input={"pause": 60})
    for _ in range(300):  # until the first run saved a checkpoint or two
        if table_rows(
            module_dsn, "SELECT 1 FROM pgc_checkpoints WHERE run_id = %s", (first["run_id"],)
        ):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the first run saved no checkpoint")
    second = await client.runs.create(
        thread_id, "slow", input={"pause": 0}, multitask_strategy="rollback"
    )
    await client.runs.join(thread_id, second["run_id"])
    kept = table_rows(
        module_dsn,
        "SELECT DISTINCT run_id FROM pgc_checkpoints WHERE thread_id = %s AND run_id IS NOT NULL",
        (thread_id,),
    )
    assert [r["run_id"] for r in kept] == [second["run_id"]]
    writes = table_rows(
        module_dsn,
        "SELECT count(*) AS n FROM pgc_writes w JOIN pgc_checkpoints c USING"
        " (thread_id, checkpoint_ns, checkpoint_id) WHERE c.run_id = %s",
        (first["run_id"],),
    )
    assert writes[0]["n"] == 0
    state = await client.threads.get_state(thread_id)
    assert state["values"] == {"pause": 0, "done": ["first", "second"]}


async def test_a_deleted_thread_leaves_no_row(client: Any, module_dsn: str) -> None:
    thread_id, _ = await interrupted_thread(client)
    assert checkpoint_count(module_dsn, thread_id) > 0
    await client.threads.delete(thread_id)
    for table in ("pgc_checkpoints", "pgc_blobs", "pgc_writes"):
        assert (
            table_rows(module_dsn, f"SELECT 1 FROM {table} WHERE thread_id = %s", (thread_id,))
            == []
        )
    from langgraph_sdk.errors import NotFoundError

    with pytest.raises(NotFoundError):
        await client.threads.get(thread_id)


async def test_no_value_the_server_stored_is_in_the_tables_in_plaintext(
    client: Any, module_dsn: str
) -> None:
    secret = "approved by IBAN DE89370400440532013000"
    thread_id, _ = await interrupted_thread(client, amount=31337)
    await client.runs.wait(thread_id, "refunds", command={"resume": secret})
    assert (await client.threads.get_state(thread_id))["values"]["decision"] == secret
    # every row of every table, as text, and each value's stored type
    dump = table_rows(
        module_dsn,
        "SELECT string_agg(t::text, E'\\n') AS text FROM ("
        " SELECT row_to_json(c)::text AS t FROM pgc_checkpoints c"
        " UNION ALL SELECT row_to_json(b)::text FROM pgc_blobs b"
        " UNION ALL SELECT row_to_json(w)::text FROM pgc_writes w) AS rows(t)",
    )[0]["text"]
    for clear in (secret, "IBAN", "refund 31337 EUR?", "approved"):
        assert clear not in dump
        assert clear.encode().hex() not in dump  # bytea shows as hex
    # the amount as a number of its own: as a bare substring, five digits turn up by
    # chance in the hex of ciphertexts and ids
    assert re.search(r"(?<![0-9A-Za-z.])31337(?![0-9A-Za-z.])", dump) is None
    types = table_rows(
        module_dsn,
        "SELECT type FROM pgc_checkpoints UNION SELECT metadata_type FROM pgc_checkpoints"
        " UNION SELECT type FROM pgc_blobs WHERE blob IS NOT NULL"
        " UNION SELECT type FROM pgc_writes",
    )
    assert types and all(r["type"].endswith("+aesgcm2:k1") for r in types), types
