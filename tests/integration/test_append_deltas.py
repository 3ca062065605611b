"""Lists that grow by appending are stored as deltas and read back exactly."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timezone
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ITEM = st.one_of(
    st.text(max_size=40),
    INT64,
    st.dictionaries(st.text(max_size=5), INT64, max_size=3),
    st.tuples(st.text(max_size=5), st.booleans()),
)
# One step: append some items, edit one, remove one, or fork from an earlier version.
STEP = st.one_of(
    st.tuples(st.just("append"), st.lists(ITEM, min_size=0, max_size=6)),
    st.tuples(st.just("edit"), st.integers(min_value=0), ITEM),
    st.tuples(st.just("remove"), st.integers(min_value=0)),
    st.tuples(st.just("fork"), st.integers(min_value=0)),
)


def checkpoint(value: list[Any], version: str) -> dict[str, Any]:
    return {
        "v": 4,
        "id": str(uuid6()),
        "ts": datetime.now(timezone.utc).isoformat(),
        "channel_values": {"messages": value, "step": version},
        "channel_versions": {"messages": version},
        "versions_seen": {},
        "updated_channels": ["messages"],
    }


def play(steps: list[Any]) -> list[tuple[str | None, list[Any]]]:
    """The (parent index, value) of every checkpoint a step sequence makes."""
    seed = ["x" * 300]  # long enough to be worth deltas from the start
    out: list[tuple[int | None, list[Any]]] = [(None, seed)]
    head = 0
    for step in steps:
        value = list(out[head][1])
        kind = step[0]
        if kind == "append":
            value += step[1]
        elif kind == "edit" and value:
            value[step[1] % len(value)] = step[2]
        elif kind == "remove" and value:
            del value[step[1] % len(value)]
        elif kind == "fork":
            head = step[1] % len(out)
            value = list(out[head][1]) + [f"fork from {head}"]
        out.append((head, value))
        head = len(out) - 1
    # What the serializer gives back (a tuple comes back as a list, as on any saver).
    serde = JsonPlusSerializer()
    return [(p, serde.loads_typed(serde.dumps_typed(v))) for p, v in out]  # type: ignore[misc]


def store(saver: Any, thread_id: str, plan: list[Any]) -> list[tuple[str, list[Any]]]:
    ids: list[str] = []
    stored = []
    for n, (parent, value) in enumerate(plan):
        version = f"{n + 1:032}.0"
        cp = checkpoint(value, version)
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        if parent is not None:
            config["configurable"]["checkpoint_id"] = ids[parent]
        saver.put(config, cp, {"source": "loop", "step": n}, {"messages": version})
        ids.append(cp["id"])
        stored.append((cp["id"], value))
        # Read back right away, as LangGraph does between super-steps.
        got = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_id": cp["id"]}})
        assert got.checkpoint["channel_values"]["messages"] == value
    return stored


def assert_all_read_back(saver: Any, thread_id: str, stored: list[tuple[str, list[Any]]]) -> None:
    for checkpoint_id, value in stored:
        config = {"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}
        assert saver.get_tuple(config).checkpoint["channel_values"]["messages"] == value
    listed = {
        t.config["configurable"]["checkpoint_id"]: t
        for t in saver.list({"configurable": {"thread_id": thread_id}})
    }
    for checkpoint_id, value in stored:
        assert listed[checkpoint_id].checkpoint["channel_values"]["messages"] == value


def delta_rows(dsn: str, thread_id: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*), count(base_version) FROM pgc_blobs WHERE thread_id = %s",
            (thread_id,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEP, min_size=1, max_size=70))
def test_every_version_reads_back_sync(db_dsn: str, steps: list[Any]) -> None:
    thread_id = f"prop-{uuid.uuid4()}"
    plan = play(steps)
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        saver.full_value_every = 8
        stored = store(saver, thread_id, plan)
        assert_all_read_back(saver, thread_id, stored)
    # A new process (empty cache) reads the same values.
    with PostgresSaver.from_conn_string(db_dsn) as fresh:
        assert_all_read_back(fresh, thread_id, stored)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEP, min_size=1, max_size=50))
def test_every_version_reads_back_async(db_dsn: str, steps: list[Any]) -> None:
    thread_id = f"prop-{uuid.uuid4()}"
    plan = play(steps)

    async def main() -> None:
        async with AsyncPostgresSaver.from_conn_string(db_dsn, pool=True) as saver:
            saver.full_value_every = 8
            stored = await asyncio.to_thread(store, saver, thread_id, plan)
            await asyncio.to_thread(assert_all_read_back, saver, thread_id, stored)

    asyncio.run(main())


def test_appends_are_stored_as_deltas_with_periodic_full_values(db_dsn: str) -> None:
    plan = [(None if i == 0 else i - 1, ["x" * 300] + list(range(i))) for i in range(40)]
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        store(saver, "grow", plan)
    total, deltas = delta_rows(db_dsn, "grow")
    assert total == 40
    # One full value, then full again every 32 versions: 38 of 40 are deltas.
    assert deltas == 38


def test_switched_off_stores_whole_values(db_dsn: str) -> None:
    plan = [(None if i == 0 else i - 1, ["x" * 300] + list(range(i))) for i in range(10)]
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        saver.append_deltas = False
        stored = store(saver, "off", plan)
    assert delta_rows(db_dsn, "off") == (10, 0)
    # Turned on later, the same thread continues with deltas on top.
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        assert_all_read_back(saver, "off", stored)  # also teaches the cache the lists
        more = [(None, stored[-1][1] + ["new"])]
        config = {
            "configurable": {
                "thread_id": "off",
                "checkpoint_ns": "",
                "checkpoint_id": stored[-1][0],
            }
        }
        cp = checkpoint(more[0][1], f"{11:032}.0")
        saver.put(config, cp, {"source": "loop", "step": 10}, {"messages": f"{11:032}.0"})
        assert saver.get_tuple({"configurable": {"thread_id": "off"}}).checkpoint["channel_values"][
            "messages"
        ] == stored[-1][1] + ["new"]
    assert delta_rows(db_dsn, "off") == (11, 1)


def test_base_deleted_by_another_process_falls_back_to_whole_value(db_dsn: str) -> None:
    plan = [(None if i == 0 else i - 1, ["x" * 300] + list(range(i))) for i in range(3)]
    with (
        PostgresSaver.from_conn_string(db_dsn) as writer,
        PostgresSaver.from_conn_string(db_dsn) as other,
    ):
        stored = store(writer, "fk", plan)
        other.delete_thread("fk")  # the writer's cache still names the deleted versions
        value = stored[-1][1] + ["after"]
        cp = checkpoint(value, f"{4:032}.0")
        writer.put(
            {"configurable": {"thread_id": "fk", "checkpoint_ns": ""}},
            cp,
            {"source": "loop", "step": 4},
            {"messages": f"{4:032}.0"},
        )
        got = other.get_tuple({"configurable": {"thread_id": "fk"}})
        assert got.checkpoint["channel_values"]["messages"] == value
    assert delta_rows(db_dsn, "fk") == (1, 0)


def test_prune_and_copy_keep_delta_bases(db_dsn: str) -> None:
    plan = [(None if i == 0 else i - 1, ["x" * 300] + list(range(i))) for i in range(20)]
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        stored = store(saver, "keep", plan)
        saver.copy_thread("keep", "keep-copy")
        saver.prune(["keep"], strategy="keep_latest")
        latest = saver.get_tuple({"configurable": {"thread_id": "keep"}})
        assert latest.checkpoint["channel_values"]["messages"] == stored[-1][1]
        assert len(list(saver.list({"configurable": {"thread_id": "keep"}}))) == 1
        assert_all_read_back(saver, "keep-copy", stored)
        saver.delete_for_runs(["no-such-run"])
        saver.delete_thread("keep-copy")
    # The kept checkpoint's value is a delta: its chain of bases survived the prune.
    total, deltas = delta_rows(db_dsn, "keep")
    assert deltas >= 1 and total == deltas + 1


def test_listed_checkpoints_share_no_mutable_value(db_dsn: str) -> None:
    """list decodes shared pieces once, but hands every tuple its own objects."""
    base = [{"role": "human", "text": "x" * 300}]
    plan = [(None if i == 0 else i - 1, base + [{"n": n} for n in range(i)]) for i in range(5)]
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        stored = store(saver, "share", plan)
        listed = list(saver.list({"configurable": {"thread_id": "share"}}))
        newest, older = (t.checkpoint["channel_values"]["messages"] for t in listed[:2])
        newest[0]["text"] = "changed"
        newest.append("appended")
        assert older[0]["text"] == "x" * 300
        assert older == stored[-2][1]
        again = saver.get_tuple({"configurable": {"thread_id": "share"}})
        assert again.checkpoint["channel_values"]["messages"] == stored[-1][1]
