"""EncryptedSerde on a real database: nothing sensitive in clear, every value bound to
its row, LangGraph's own format readable, and key rotation while the app writes."""

from __future__ import annotations

import contextlib
import json
import operator
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

import psycopg
import pytest
import zstandard
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import (
    INTERRUPT,
    BaseCheckpointSaver,
    CheckpointTuple,
    empty_checkpoint,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt
from psycopg import sql
from psycopg.rows import dict_row
from support.savers import VARIANTS, ThreadedSaver, open_variant
from typing_extensions import TypedDict

from pgcheckpoint import (
    AsyncPostgresSaver,
    DecryptionError,
    EncryptedSerde,
    InvalidInputError,
    PostgresSaver,
    PostgresStore,
    rotate_key,
)
from pgcheckpoint.cli import main as cli_main
from pgcheckpoint.maintenance.rotation import rotate_page_op
from pgcheckpoint.statements.queries import Queries

K1 = bytes(range(32))
K2 = bytes(range(100, 132))
LG_KEY = b"0123456789abcdef0123456789abcdef"
MARKER = "MARKER-7f3c2a9e"


def enc(**kwargs: Any) -> EncryptedSerde:
    kwargs.setdefault("keys", {"k1": K1})
    return EncryptedSerde(**kwargs)


def config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint_id(cfg: RunnableConfig) -> str:
    return str(cfg["configurable"]["checkpoint_id"])


def fill(saver: PostgresSaver, thread_id: str, n: int = 3) -> list[RunnableConfig]:
    """`n` chained checkpoints, each with a stored value, an inline one, and two writes."""
    cfg, version, configs = config(thread_id), None, []
    for i in range(n):
        version = saver.get_next_version(version, None)
        cp = empty_checkpoint()
        cp["channel_values"] = {"items": [f"{thread_id}-{i}"], "count": i}
        cp["channel_versions"] = {"items": version, "count": version}
        metadata: Any = {"source": "loop", "step": i, "note": f"note-{i}"}
        cfg = saver.put(cfg, cp, metadata, {"items": version, "count": version})
        saver.put_writes(cfg, [("items", [f"w{i}"]), ("count", 10 + i)], task_id=f"task{i}")
        configs.append(cfg)
    return configs


def check_tuple(tup: CheckpointTuple | None, thread_id: str, i: int) -> None:
    assert tup is not None
    assert tup.checkpoint["channel_values"] == {"items": [f"{thread_id}-{i}"], "count": i}
    assert tup.metadata["note"] == f"note-{i}"
    assert tup.pending_writes == [(f"task{i}", "items", [f"w{i}"]), (f"task{i}", "count", 10 + i)]


@pytest.fixture
def saver(db_dsn: str) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(db_dsn, serde=enc()) as opened:
        yield opened


# -- the conformance suite, encrypted ---------------------------------------------------


@pytest.fixture(params=VARIANTS)
async def encrypted_saver(
    request: pytest.FixtureRequest, db_dsn: str
) -> AsyncIterator[BaseCheckpointSaver[str]]:
    """Every driver/connection variant with EncryptedSerde; sync savers behind threads."""
    serde = enc(filterable_metadata=("source", "step", "score"))
    async with open_variant(request.param, db_dsn, serde=serde) as opened:
        yield ThreadedSaver(opened) if isinstance(opened, PostgresSaver) else opened


async def test_conformance_suite_passes_with_encryption_on(
    encrypted_saver: BaseCheckpointSaver[str], db_dsn: str
) -> None:
    @checkpointer_test(name="encrypted")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
        yield encrypted_saver

    report = await validate(factory)
    problems = {
        name: result.failures or "not detected"
        for name, result in report.results.items()
        if not (result.detected and result.passed)
    }
    assert not problems, problems
    with psycopg.connect(db_dsn) as conn:
        types = conn.execute(
            "SELECT type FROM pgc_checkpoints UNION ALL SELECT metadata_type FROM pgc_checkpoints"
            " UNION ALL SELECT type FROM pgc_blobs WHERE type <> 'empty'"
            " UNION ALL SELECT type FROM pgc_writes"
        ).fetchall()
    assert types and all(t.endswith("+aesgcm2:k1") for (t,) in types)


# -- nothing in clear ---------------------------------------------------------------------


class State(TypedDict):
    note: str
    items: Annotated[list[str], operator.add]


def build_graph(checkpointer: BaseCheckpointSaver[str]) -> Any:
    def first(state: State) -> dict[str, Any]:
        return {"items": [f"{MARKER} from first"], "note": f"{MARKER} inline note"}

    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"question": f"{MARKER} question"})
        return {"items": [str(answer)]}

    graph = StateGraph(State)
    graph.add_node("first", first)
    graph.add_node("ask", ask)
    graph.add_edge(START, "first")
    graph.add_edge("first", "ask")
    graph.add_edge("ask", END)
    return graph.compile(checkpointer=checkpointer)


def lenient_text(value: Any) -> str:
    """Every way a value could show text: bytes decoded leniently, zstd frames opened."""
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        texts = [data.decode("utf-8", "ignore"), data.decode("latin-1")]
        with contextlib.suppress(zstandard.ZstdError):
            texts.append(lenient_text(zstandard.ZstdDecompressor().decompress(data)))
        return "\n".join(texts)
    if isinstance(value, list | tuple):
        return "\n".join(lenient_text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def columns_containing(dsn: str, marker: str) -> set[str]:
    """`table.column` of every column of every table whose raw value shows `marker`."""
    found: set[str] = set()
    with psycopg.connect(dsn) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            " AND table_type = 'BASE TABLE'"
        ).fetchall()
        assert tables
        for schema, table in tables:
            cur = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table)))
            names = [d.name for d in cur.description or ()]
            for row in cur:
                for name, value in zip(names, row, strict=True):
                    if marker in lenient_text(value):
                        found.add(f"{table}.{name}")
    return found


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
async def test_a_real_graph_leaves_no_marker_in_any_column(
    db_dsn: str, driver: str, encrypted: bool
) -> None:
    serde = enc() if encrypted else JsonPlusSerializer()
    run_config: RunnableConfig = {
        "configurable": {"thread_id": "graph-thread"},
        "metadata": {"ticket": f"{MARKER} in metadata"},
    }
    first_input = {"items": [f"{MARKER} input"], "note": ""}
    resume = Command(resume=f"{MARKER} answer")
    if driver == "sync":
        with PostgresSaver.from_conn_string(db_dsn, serde=serde) as sync_saver:
            graph = build_graph(sync_saver)
            graph.invoke(first_input, run_config)
            final = graph.invoke(resume, run_config)
            tup = sync_saver.get_tuple(run_config)
    else:
        async with AsyncPostgresSaver.from_conn_string(db_dsn, serde=serde) as async_saver:
            graph = build_graph(async_saver)
            await graph.ainvoke(first_input, run_config)
            final = await graph.ainvoke(resume, run_config)
            tup = await async_saver.aget_tuple(run_config)
    assert final["items"] == [f"{MARKER} input", f"{MARKER} from first", f"{MARKER} answer"]
    assert final["note"] == f"{MARKER} inline note"
    assert tup is not None and tup.metadata["ticket"] == f"{MARKER} in metadata"
    found = columns_containing(db_dsn, MARKER)
    if encrypted:
        assert found == set()
    else:  # the scan does see every place the marker goes when nothing is encrypted
        assert {"pgc_checkpoints.metadata", "pgc_checkpoints.checkpoint"} <= found
        assert {"pgc_blobs.blob", "pgc_writes.blob"} <= found


def test_only_the_listed_metadata_keys_are_readable_and_filterable(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    fill(saver, "t1", 2)
    rows = raw.execute("SELECT metadata FROM pgc_checkpoints ORDER BY checkpoint_id").fetchall()
    assert [r["metadata"] for r in rows] == [
        {"source": "loop", "step": 0},
        {"source": "loop", "step": 1},
    ]
    assert len(list(saver.list(None, filter={"step": 1}))) == 1
    assert [t.metadata["note"] for t in saver.list(None, filter={"source": "loop"})] == [
        "note-1",
        "note-0",
    ]
    with pytest.raises(InvalidInputError, match="'note': it is stored encrypted"):
        list(saver.list(None, filter={"note": "note-1"}))


class ChatState(TypedDict):
    messages: Annotated[list[Any], DeltaChannel(operator.add, snapshot_frequency=4)]
    turn: int


def build_chat(checkpointer: BaseCheckpointSaver[str]) -> Any:
    def agent(state: ChatState) -> dict[str, Any]:
        return {"messages": [f"ai {state['turn']}"], "turn": state["turn"]}

    graph = StateGraph(ChatState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    return graph.compile(checkpointer=checkpointer)


CHAT_TURNS = 15


def chat_inputs() -> Iterator[tuple[dict[str, Any], RunnableConfig]]:
    for t in range(CHAT_TURNS):
        cfg: RunnableConfig = {"configurable": {"thread_id": "chat"}, "run_id": uuid.uuid4()}
        yield {"messages": [f"human {t}"], "turn": t}, cfg


@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_a_delta_channel_graph_matches_in_memory_with_encryption_on(
    db_dsn: str, driver: str
) -> None:
    reference = build_chat(InMemorySaver())
    for state, cfg in chat_inputs():
        reference.invoke(state, cfg)
    chat = {"configurable": {"thread_id": "chat"}}
    copy = {"configurable": {"thread_id": "chat-copy"}}
    expected = [(h.values, h.next) for h in reference.get_state_history(chat)]
    if driver == "sync":
        with PostgresSaver.from_conn_string(db_dsn, serde=enc(), pool=True) as sync_saver:
            graph = build_chat(sync_saver)
            for state, cfg in chat_inputs():
                graph.invoke(state, cfg)
            assert [(h.values, h.next) for h in graph.get_state_history(chat)] == expected
            sync_saver.copy_thread("chat", "chat-copy")
            sync_saver.prune(["chat"], strategy="keep_latest")
            assert graph.get_state(chat).values == expected[0][0]
            assert [(h.values, h.next) for h in graph.get_state_history(copy)] == expected
    else:
        async with AsyncPostgresSaver.from_conn_string(db_dsn, serde=enc()) as async_saver:
            graph = build_chat(async_saver)
            for state, cfg in chat_inputs():
                await graph.ainvoke(state, cfg)
            history = [(h.values, h.next) async for h in graph.aget_state_history(chat)]
            assert history == expected
            await async_saver.acopy_thread("chat", "chat-copy")
            await async_saver.aprune(["chat"], strategy="keep_latest")
            assert (await graph.aget_state(chat)).values == expected[0][0]
            history = [(h.values, h.next) async for h in graph.aget_state_history(copy)]
            assert history == expected


# -- each value bound to its row ------------------------------------------------------------


def test_a_checkpoint_moved_to_another_row_fails_and_its_neighbours_still_read(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    configs = fill(saver, "t1", 3)
    a, b = checkpoint_id(configs[0]), checkpoint_id(configs[1])
    raw.execute(
        "UPDATE pgc_checkpoints SET type = s.type, checkpoint = s.checkpoint"
        " FROM pgc_checkpoints s WHERE s.checkpoint_id = %s AND pgc_checkpoints.checkpoint_id = %s",
        [b, a],
    )
    with pytest.raises(DecryptionError) as err:
        saver.get_tuple(configs[0])
    assert f"checkpoint {a!r} in thread 't1'" in str(err.value) and "'k1'" in str(err.value)
    check_tuple(saver.get_tuple(configs[1]), "t1", 1)
    check_tuple(saver.get_tuple(configs[2]), "t1", 2)


def test_metadata_swapped_between_checkpoints_fails(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    configs = fill(saver, "t1", 3)
    a, b = checkpoint_id(configs[0]), checkpoint_id(configs[1])
    raw.execute(
        "UPDATE pgc_checkpoints c SET metadata_blob = CASE c.checkpoint_id"
        " WHEN %(a)s THEN (SELECT metadata_blob FROM pgc_checkpoints WHERE checkpoint_id = %(b)s)"
        " ELSE (SELECT metadata_blob FROM pgc_checkpoints WHERE checkpoint_id = %(a)s) END"
        " WHERE c.checkpoint_id IN (%(a)s, %(b)s)",
        {"a": a, "b": b},
    )
    for cfg, cid in ((configs[0], a), (configs[1], b)):
        with pytest.raises(DecryptionError, match=f"metadata of checkpoint '{cid}'"):
            saver.get_tuple(cfg)
    check_tuple(saver.get_tuple(configs[2]), "t1", 2)


def test_rows_moved_to_another_thread_fail_and_the_source_still_reads(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    configs = fill(saver, "t1", 2)
    fill(saver, "t2", 1)
    # what a server-side copy would do: identical bytes under another thread id
    raw.execute(Queries()["copy_thread"], {"source_thread_id": "t1", "target_thread_id": "stolen"})
    with pytest.raises(DecryptionError, match="in thread 'stolen'"):
        saver.get_tuple(config("stolen"))
    with pytest.raises(DecryptionError, match="'k1'"):
        list(saver.list(config("stolen")))
    # one blob of t2 replaced by t1's for the same channel and version
    raw.execute(
        "UPDATE pgc_blobs SET blob = (SELECT blob FROM pgc_blobs WHERE thread_id = 't1'"
        " ORDER BY version LIMIT 1) WHERE thread_id = 't2'"
    )
    with pytest.raises(DecryptionError, match=r"value of channel 'items' .* in thread 't2'"):
        saver.get_tuple(config("t2"))
    for i, cfg in enumerate(configs):
        check_tuple(saver.get_tuple(cfg), "t1", i)


def test_tampered_and_truncated_values_fail_and_the_others_still_read(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    configs = fill(saver, "t1", 5)
    ids = [checkpoint_id(c) for c in configs]
    # a flipped bit in a write, a blob cut short, a checkpoint missing its last
    # byte, metadata whose stored type was edited to have another decoder read it
    row = raw.execute(
        "SELECT blob FROM pgc_writes WHERE checkpoint_id = %s AND idx = 1", [ids[0]]
    ).fetchone()
    assert row is not None
    flipped = bytearray(row["blob"])
    flipped[len(flipped) // 2] ^= 0x01
    raw.execute(
        "UPDATE pgc_writes SET blob = %s WHERE checkpoint_id = %s AND idx = 1",
        [bytes(flipped), ids[0]],
    )
    raw.execute(
        "UPDATE pgc_blobs SET blob = substring(blob from 1 for 20) WHERE version = %s",
        [saver.get_tuple(configs[1]).checkpoint["channel_versions"]["items"]],  # type: ignore[union-attr]
    )
    raw.execute(
        "UPDATE pgc_checkpoints SET checkpoint = substring(checkpoint from 1"
        " for length(checkpoint) - 1) WHERE checkpoint_id = %s",
        [ids[2]],
    )
    raw.execute(
        "UPDATE pgc_checkpoints SET metadata_type = 'json+aesgcm:k1' WHERE checkpoint_id = %s",
        [ids[3]],
    )
    expected = [
        ("write 1 of task 'task0'", "authentication failed"),
        ("value of channel 'items'", "truncated"),
        (f"checkpoint {ids[2]!r}", "authentication failed"),
        (f"metadata of checkpoint {ids[3]!r}", "authentication failed"),
    ]
    for cfg, (where, why) in zip(configs, expected, strict=False):
        with pytest.raises(DecryptionError) as err:
            saver.get_tuple(cfg)
        assert where in str(err.value) and why in str(err.value) and "'k1'" in str(err.value)
    check_tuple(saver.get_tuple(configs[4]), "t1", 4)
    assert [t.checkpoint["id"] for t in saver.list(config("t1"), limit=1)] == [ids[4]]


def test_wrong_or_missing_key_names_the_key_and_the_row(db_dsn: str, saver: PostgresSaver) -> None:
    configs = fill(saver, "t1", 1)
    cid = checkpoint_id(configs[0])
    with PostgresSaver.from_conn_string(db_dsn, serde=enc(keys={"k1": K2})) as wrong:
        with pytest.raises(DecryptionError) as err:
            wrong.get_tuple(configs[0])
        assert "key 'k1': authentication failed" in str(err.value)
        assert f"checkpoint {cid!r} in thread 't1'" in str(err.value)
    missing = PostgresSaver.from_conn_string(db_dsn, serde=enc(keys={"k2": K2}))
    with missing as reader, pytest.raises(DecryptionError, match="key 'k1', which is not config"):
        reader.get_tuple(configs[0])


def test_a_plaintext_row_is_refused_unless_allowed(db_dsn: str, saver: PostgresSaver) -> None:
    with PostgresSaver.from_conn_string(db_dsn) as plain:
        fill(plain, "plain", 1)
    configs = fill(saver, "t1", 1)
    with pytest.raises(DecryptionError) as err:
        saver.get_tuple(config("plain"))
    assert "stored unencrypted" in str(err.value) and "thread 'plain'" in str(err.value)
    check_tuple(saver.get_tuple(configs[0]), "t1", 0)
    with PostgresSaver.from_conn_string(db_dsn, serde=enc(allow_plaintext=True)) as migrating:
        check_tuple(migrating.get_tuple(config("plain")), "plain", 0)
        check_tuple(migrating.get_tuple(configs[0]), "t1", 0)


def test_a_saver_without_the_serde_names_what_to_pass(db_dsn: str, saver: PostgresSaver) -> None:
    configs = fill(saver, "t1", 1)
    cid = checkpoint_id(configs[0])
    with PostgresSaver.from_conn_string(db_dsn) as plain:  # forgot serde=
        with pytest.raises(DecryptionError) as err:
            plain.get_tuple(configs[0])
        message = str(err.value)
        assert f"checkpoint {cid!r} in thread 't1'" in message
        assert "encrypted under key 'k1' (type 'msgpack+aesgcm2:k1')" in message
        assert "pass serde=EncryptedSerde.from_env()" in message
        assert "PGCHECKPOINT_AES_KEYS" in message
        with pytest.raises(DecryptionError, match=r"EncryptedSerde\.from_env"):
            list(plain.list(config("t1")))
    theirs = EncryptedSerializer.from_pycryptodome_aes(key=LG_KEY)
    with PostgresSaver.from_conn_string(db_dsn, serde=theirs) as legacy:
        written = fill(legacy, "legacy", 1)
    with PostgresSaver.from_conn_string(db_dsn) as plain:
        with pytest.raises(DecryptionError, match="LangGraph's EncryptedSerializer") as err:
            plain.get_tuple(written[0])
        assert "LANGGRAPH_AES_KEY" in str(err.value)


# -- copy_thread re-binds ---------------------------------------------------------------------


def test_copy_thread_rebinds_every_value_to_the_new_thread(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    configs = fill(saver, "src", 5)
    saver.copy_batch_size = 2  # three pages
    saver.copy_thread("src", "dst")
    copied = list(saver.list(config("dst")))
    assert [t.checkpoint["id"] for t in copied] == [checkpoint_id(c) for c in reversed(configs)]
    for i, tup in enumerate(reversed(copied)):
        check_tuple(tup, "src", i)
        assert tup.config["configurable"]["thread_id"] == "dst"
    overlap = raw.execute(
        "SELECT count(*) AS n FROM pgc_blobs s"
        " JOIN pgc_blobs d USING (checkpoint_ns, channel, version)"
        " WHERE s.thread_id = 'src' AND d.thread_id = 'dst' AND s.blob = d.blob"
    ).fetchone()
    assert overlap == {"n": 0}
    counts = raw.execute(
        "SELECT thread_id, count(*) AS n FROM pgc_writes GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert counts == [{"thread_id": "dst", "n": 10}, {"thread_id": "src", "n": 10}]
    # copying again overwrites nothing; the source is unchanged
    saver.copy_thread("src", "dst")
    assert len(list(saver.list(config("dst")))) == 5
    check_tuple(saver.get_tuple(configs[-1]), "src", 4)


# -- LangGraph's own format and databases written without encryption -----------------------------


def test_values_written_by_langgraphs_encrypted_serializer_are_read_and_rotated(
    db_dsn: str, raw: psycopg.Connection[Any]
) -> None:
    theirs = EncryptedSerializer.from_pycryptodome_aes(key=LG_KEY)
    with PostgresSaver.from_conn_string(db_dsn, serde=theirs) as legacy:
        configs = fill(legacy, "legacy", 2)
    assert raw.execute("SELECT type FROM pgc_blobs LIMIT 1").fetchone() == {"type": "msgpack+aes"}
    without_key = PostgresSaver.from_conn_string(db_dsn, serde=enc())
    with without_key as reader, pytest.raises(DecryptionError, match="LANGGRAPH_AES_KEY"):
        reader.get_tuple(configs[0])
    ours = enc(langgraph_key=LG_KEY)
    with PostgresSaver.from_conn_string(db_dsn, serde=ours) as reader:
        for i, cfg in enumerate(configs):
            check_tuple(reader.get_tuple(cfg), "legacy", i)
    report = rotate_key(db_dsn, ours, batch_size=3)
    assert report.counts["(langgraph-eax)"]["blobs"] == 2
    assert report.rotated == report.to_rotate == 2 * 2 + 2 + 4 and report.remaining == {}
    # the metadata LangGraph's serializer left readable in full is cut to the listed keys
    assert [r["metadata"] for r in raw.execute("SELECT metadata FROM pgc_checkpoints")] == [
        {"source": "loop", "step": 0},
        {"source": "loop", "step": 1},
    ]
    with PostgresSaver.from_conn_string(db_dsn, serde=enc()) as after:
        for i, cfg in enumerate(configs):
            check_tuple(after.get_tuple(cfg), "legacy", i)


def test_a_database_written_without_encryption_is_encrypted_by_rotation(
    db_dsn: str, raw: psycopg.Connection[Any]
) -> None:
    with PostgresSaver.from_conn_string(db_dsn) as plain:
        configs = fill(plain, "old", 3)
    strict = enc()
    with pytest.raises(DecryptionError, match="stored unencrypted"):
        rotate_key(db_dsn, strict)
    report = rotate_key(db_dsn, enc(allow_plaintext=True), batch_size=2)
    assert report.remaining == {} and report.rotated == 3 * 2 + 3 + 6
    assert columns_containing(db_dsn, "note-") == set()
    with PostgresSaver.from_conn_string(db_dsn, serde=strict) as reader:
        for i, cfg in enumerate(configs):
            check_tuple(reader.get_tuple(cfg), "old", i)


# -- key rotation ---------------------------------------------------------------------------------


def test_rotation_from_k1_to_k2_under_concurrent_writes_then_k1_can_go(db_dsn: str) -> None:
    old, both, new_only = enc(), enc(keys={"k2": K2, "k1": K1}), enc(keys={"k2": K2})
    threads = [f"t{i}" for i in range(6)]
    with PostgresSaver.from_conn_string(db_dsn, serde=old) as app_v1:
        configs = {t: fill(app_v1, t, 3) for t in threads}
    expected_counts: dict[str, int] = {}
    expected_interrupts: dict[str, str] = {}
    new_heads: dict[str, RunnableConfig] = {}
    rounds = threading.Semaphore(0)
    stop = threading.Event()
    errors: list[BaseException] = []

    def app(mine: list[str]) -> None:
        # the application, already on k2 first: rewrites rows the rotation is
        # working through, upserts writes, and adds checkpoints
        try:
            with PostgresSaver.from_conn_string(db_dsn, serde=both) as app_v2:
                n = 0
                while not stop.is_set():
                    n += 1
                    for t in mine:
                        tup = app_v2.get_tuple(configs[t][0])
                        assert tup is not None
                        tup.checkpoint["channel_values"]["count"] = 1000 + n
                        app_v2.put(config(t), tup.checkpoint, tup.metadata, {})
                        expected_counts[t] = 1000 + n
                        app_v2.put_writes(configs[t][1], [(INTERRUPT, f"round {n}")], "app")
                        expected_interrupts[t] = f"round {n}"
                        head = app_v2.get_tuple(config(t))
                        assert head is not None
                        cp = head.checkpoint
                        cp["id"] = empty_checkpoint()["id"]
                        version = app_v2.get_next_version(cp["channel_versions"]["items"], None)
                        cp["channel_values"] = {"items": [f"new {n}"], "count": -n}
                        cp["channel_versions"] = {"items": version, "count": version}
                        new_heads[t] = app_v2.put(
                            head.config, cp, {"source": "loop", "step": 99}, {"items": version}
                        )
                    rounds.release()
                    stop.wait(0.005)
        except BaseException as exc:
            errors.append(exc)
            rounds.release()

    def interleave(done: int, total: int) -> None:
        # let the application complete a round between two batches
        rounds.acquire(timeout=30)

    workers = [
        threading.Thread(target=app, args=(threads[:3],)),
        threading.Thread(target=app, args=(threads[3:],)),
    ]
    for w in workers:
        w.start()
    try:
        report = rotate_key(db_dsn, both, batch_size=4, progress=interleave)
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert not errors, errors
    # the application may have rewritten some rows under k2 before the first count
    assert 0 < report.to_rotate <= 6 * (3 * 2 + 3 + 6)
    assert report.remaining == {}
    assert "k1" not in rotate_key(db_dsn, both, dry_run=True).counts
    with PostgresSaver.from_conn_string(db_dsn, serde=new_only) as app_v3:
        for t in threads:
            tuples = list(app_v3.list(config(t)))
            assert len(tuples) >= 4
            first = app_v3.get_tuple(configs[t][0])
            assert first is not None
            assert first.checkpoint["channel_values"]["count"] == expected_counts[t]
            assert first.checkpoint["channel_values"]["items"] == [f"{t}-0"]
            second = app_v3.get_tuple(configs[t][1])
            assert second is not None
            assert (("app", INTERRUPT, expected_interrupts[t])) in second.pending_writes
            head = app_v3.get_tuple(config(t))
            assert head is not None and head.config == new_heads[t]


def test_rotation_never_undoes_a_concurrent_save(db_dsn: str, raw: psycopg.Connection[Any]) -> None:
    old, both = enc(), enc(keys={"k2": K2, "k1": K1})
    with PostgresSaver.from_conn_string(db_dsn, serde=old) as app:
        configs = fill(app, "t1", 2)
        op = rotate_page_op(PostgresSaver(app.conn, serde=both), "checkpoints", None, 10)
        queries = Queries()
        with psycopg.connect(db_dsn, autocommit=True, row_factory=dict_row) as conn:
            stmt = next(op)
            stmt = op.send(conn.execute(queries[stmt.name], stmt.params).fetchall())
            # between the rotation's read and its write, an app still on k1 saves
            # checkpoint 0 again: same type, new value
            tup = app.get_tuple(configs[0])
            assert tup is not None
            tup.checkpoint["channel_values"]["count"] = 777
            app.put(config("t1"), tup.checkpoint, tup.metadata, {})
            updated = conn.execute(queries[stmt.name], stmt.params).fetchall()
            with pytest.raises(StopIteration) as done:
                op.send(updated)
    rotated, skipped, after = done.value.value
    assert (rotated, skipped, after) == (2, 1, None)
    with PostgresSaver.from_conn_string(db_dsn, serde=both) as reader:
        first = reader.get_tuple(configs[0])
        assert first is not None and first.checkpoint["channel_values"]["count"] == 777
        check_tuple(reader.get_tuple(configs[1]), "t1", 1)
    types = raw.execute("SELECT type FROM pgc_checkpoints ORDER BY checkpoint_id").fetchall()
    assert [r["type"] for r in types] == ["msgpack+aesgcm2:k1", "msgpack+aesgcm2:k2"]


def test_an_interrupted_rotation_resumes(db_dsn: str) -> None:
    with PostgresSaver.from_conn_string(db_dsn, serde=enc()) as app:
        configs = fill(app, "t1", 4)
    both = enc(keys={"k2": K2, "k1": K1})

    def stop_after_first_batch(done: int, total: int) -> None:
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rotate_key(db_dsn, both, batch_size=3, progress=stop_after_first_batch)
    second = rotate_key(db_dsn, both, batch_size=3)
    assert 0 < second.to_rotate < 4 * 2 + 4 + 8
    assert second.rotated == second.to_rotate and second.remaining == {}
    with PostgresSaver.from_conn_string(db_dsn, serde=enc(keys={"k2": K2})) as reader:
        for i, cfg in enumerate(configs):
            check_tuple(reader.get_tuple(cfg), "t1", i)


def test_rotate_key_command(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import base64

    with PostgresSaver.from_conn_string(db_dsn, serde=enc()) as app:
        fill(app, "t1", 2)
    with PostgresStore.from_conn_string(db_dsn, serde=enc()) as store:
        store.put(("users", "u1"), "prefs", {"theme": "dark"})
    keys = f"k2:{base64.b64encode(K2).decode()},k1:{base64.b64encode(K1).decode()}"
    monkeypatch.setenv("PGCHECKPOINT_AES_KEYS", keys)
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    assert cli_main(["rotate-key", "--dsn", db_dsn, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = ["key", "checkpoints", "metadata", "blobs", "writes", "items", "total"]
    assert out[0].split() == header
    assert out[1].split() == ["k1", "2", "2", "2", "4", "1", "11"]
    assert out[-1] == "11 values to re-encrypt under key 'k2'"
    assert cli_main(["rotate-key", "--dsn", db_dsn, "--batch-size", "1"]) == 0
    captured = capsys.readouterr()
    assert "re-encrypted 11 values under key 'k2'" in captured.out
    assert "keys ['k1'] can be removed" in captured.out
    # not a terminal: plain progress lines, no carriage returns
    assert "\r" not in captured.err
    assert captured.err.splitlines()[-1] == "re-encrypting under key 'k2': 11/11 (100%) done"
    assert cli_main(["rotate-key", "--dsn", db_dsn, "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == [
        "k2",
        "(active)",
        "2",
        "2",
        "2",
        "4",
        "1",
        "11",
    ]


def test_a_dry_run_on_plaintext_rows_names_allow_plaintext(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import base64

    with PostgresSaver.from_conn_string(db_dsn) as plain:
        fill(plain, "old", 2)
    monkeypatch.setenv("PGCHECKPOINT_AES_KEYS", f"k1:{base64.b64encode(K1).decode()}")
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    assert cli_main(["rotate-key", "--dsn", db_dsn, "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == "10 values to re-encrypt under key 'k1'"
    assert "10 of them are stored without encryption, which the run refuses" in captured.err
    assert "`pgcheckpoint rotate-key --allow-plaintext --filterable-metadata KEYS`" in (
        captured.err
    )
    # the run without the option stops on the first such row and names it as well
    assert cli_main(["rotate-key", "--dsn", db_dsn]) == 1
    assert "`pgcheckpoint rotate-key --allow-plaintext`" in capsys.readouterr().err
    assert cli_main(["rotate-key", "--dsn", db_dsn, "--dry-run", "--allow-plaintext"]) == 0
    assert "without encryption" not in capsys.readouterr().err
    assert cli_main(["rotate-key", "--dsn", db_dsn, "--allow-plaintext"]) == 0
    assert "re-encrypted 10 values under key 'k1'" in capsys.readouterr().out


def test_copy_thread_keeps_append_deltas_readable(db_dsn: str) -> None:
    """A growing messages list is stored as deltas; the re-sealed copy keeps their bases."""

    class Chat(TypedDict):
        messages: Annotated[list[Any], add_messages]

    def reply(state: Chat) -> dict[str, Any]:
        return {"messages": [("ai", f"answer {len(state['messages'])} " + "x" * 200)]}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)

    def run(checkpointer: BaseCheckpointSaver[str], thread_id: str) -> Any:
        graph = builder.compile(checkpointer=checkpointer)
        for turn in range(40):
            graph.invoke(
                {"messages": [("human", f"question {turn} " + "y" * 200)]}, config(thread_id)
            )
        return graph

    reference = run(InMemorySaver(), "ref").get_state(config("ref")).values
    with PostgresSaver.from_conn_string(db_dsn, serde=enc()) as saver:
        graph = run(saver, "chat")
        with psycopg.connect(db_dsn) as conn:
            deltas = conn.execute(
                "SELECT count(*) FROM pgc_blobs"
                " WHERE thread_id = 'chat' AND base_version IS NOT NULL"
            ).fetchone()
        assert deltas is not None and deltas[0] > 10
        saver.copy_batch_size = 7  # bases and deltas land in different pages
        saver.copy_thread("chat", "chat-copy")
        saver.delete_thread("chat")
        for thread_id in ("chat-copy",):
            state = graph.get_state(config(thread_id)).values
            assert [m.content for m in state["messages"]] == [
                m.content for m in reference["messages"]
            ]
            history = list(graph.get_state_history(config(thread_id)))
            assert len(history) == 120
