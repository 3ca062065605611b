"""Every column of every table, tampered with by someone who can write but has no key.

Two threads are written with encryption on by a real graph (a DeltaChannel
of messages snapshotted every 3 steps, a list that grows and is stored as
deltas, values kept inline, pending writes). Then, one case at a time, one
column of one row is changed in one of five ways: a byte flipped, set NULL,
swapped with a sibling row's value, copied from the other thread, pointed at
an older version. After each change everything a reader gets is read again
with a fresh saver: every checkpoint by id, each thread's latest, each
thread's list, a filtered list across threads, and the DeltaChannel history
at two points.

Each read must either return exactly what it returned before the change, or
raise a clear pgcheckpoint error: an `UnreadableValueError` (usually its
`DecryptionError`) naming the table. A read that returns other data fails the
case. One exception is allowed, and only where the change amounts to deleting
a row, which per-row authentication cannot see (the README says so): a change
of a row's key moves it away, so reads of its old place may return what they
would return had the row been deleted (`deleted` below), while reads that
meet it in its new place must fail. The same goes for a filtered list when
the readable metadata column was edited: the row may drop out of that list as
a deleted one would, while every other read of it fails.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import END, START, StateGraph
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from support.checkpoints import config
from typing_extensions import TypedDict

from pgcheckpoint import EncryptedSerde, PgCheckpointError, PostgresSaver, UnreadableValueError

KEY = bytes(range(32))
THREADS = ("t1", "t2")
TURNS = 4
KEYS = {
    "pgc_checkpoints": ("thread_id", "checkpoint_ns", "checkpoint_id"),
    "pgc_blobs": ("thread_id", "checkpoint_ns", "channel", "version"),
    "pgc_writes": ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
}
MUTATIONS = ("flip_a_byte", "set_null", "swap_with_sibling", "copy_from_other_thread", "older")


def serde() -> EncryptedSerde:
    return EncryptedSerde(keys={"k1": KEY}, filterable_metadata=("source", "step", "user_id"))


class State(TypedDict, total=False):
    messages: Annotated[list[str], DeltaChannel(operator.add, snapshot_frequency=3)]
    items: Annotated[list[str], operator.add]
    turn: int
    note: str


def graph(saver: PostgresSaver) -> Any:
    def agent(state: State) -> dict[str, Any]:
        turn = state["turn"]
        return {
            "messages": [f"ai {turn} " + "m" * 30],
            "items": [f"item {turn} " + "i" * 120],
            "note": f"note {turn}",
        }

    def tool(state: State) -> dict[str, Any]:
        return {"items": [f"tool {state['turn']}"]}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_edge("agent", "tool")
    g.add_edge("tool", END)
    return g.compile(checkpointer=saver)


def write(dsn: str) -> None:
    with PostgresSaver.from_conn_string(dsn, serde=serde()) as saver:
        app = graph(saver)
        for thread_id in THREADS:
            for turn in range(TURNS):
                run = {**config(thread_id), "metadata": {"user_id": f"user-{thread_id}"}}
                app.invoke({"messages": [f"human {turn}"], "turn": turn}, run)


# -- what a reader gets ----------------------------------------------------------------------


def _tuple(tup: CheckpointTuple | None) -> Any:
    if tup is None:
        return None
    return (tup.config, tup.parent_config, tup.checkpoint, tup.metadata, tup.pending_writes)


def _history(found: dict[str, Any]) -> Any:
    out = {}
    for channel, entry in found.items():
        seed = entry.get("seed")
        if isinstance(seed, _DeltaSnapshot):
            seed = ("snapshot", seed.value)
        out[channel] = (seed, entry["writes"])
    return out


@dataclass(frozen=True)
class Failed:
    """A read that raised: a clear pgcheckpoint error, or anything else (which fails)."""

    error: type[BaseException]
    message: str

    @property
    def clear(self) -> bool:
        return issubclass(self.error, UnreadableValueError) and "pgc_" in self.message


def attempt(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except PgCheckpointError as exc:
        return Failed(type(exc), str(exc))
    except Exception as exc:  # anything but a pgcheckpoint error fails the case
        return Failed(type(exc), f"{type(exc).__name__}: {exc}")


def observe(dsn: str, ids: dict[str, list[str]]) -> dict[tuple[str, ...], Any]:
    """Everything a reader gets, each read on its own (a fresh saver: no cache carried over).

    Each thread's list reads every checkpoint; `get_tuple` (another statement)
    reads the head, the oldest and the three around the middle of t1, where
    the cases change rows.
    """
    seen: dict[tuple[str, ...], Any] = {}
    middle = len(ids["t1"]) // 2
    by_id = {ids["t1"][i] for i in (0, middle - 1, middle, middle + 1, len(ids["t1"]) - 1)}
    with PostgresSaver.from_conn_string(dsn, serde=serde()) as saver:
        for thread_id in THREADS:
            seen[("list", thread_id)] = attempt(
                lambda t=thread_id: [_tuple(x) for x in saver.list(config(t))]
            )
            seen[("latest", thread_id)] = attempt(
                lambda t=thread_id: _tuple(saver.get_tuple(config(t)))
            )
            walks = {ids[thread_id][0], ids[thread_id][middle]}
            for at in sorted(walks):
                seen[("history", thread_id, at)] = attempt(
                    lambda t=thread_id, c=at: _history(
                        saver.get_delta_channel_history(config=config(t, c), channels=["messages"])
                    )
                )
        for cid in sorted(by_id):
            seen[("get", "t1", cid)] = attempt(
                lambda c=cid: _tuple(saver.get_tuple(config("t1", c)))
            )
        seen[("filtered",)] = attempt(
            lambda: [_tuple(x) for x in saver.list(None, filter={"user_id": "user-t1"}, limit=3)]
        )
    return seen


# -- the database: written once, restored before each case ------------------------------------


@dataclass
class Stage:
    dsn: str
    ids: dict[str, list[str]]  # checkpoint ids per thread, newest first
    baseline: dict[tuple[str, ...], Any]
    deleted: dict[str, dict[tuple[str, ...], Any]]  # per table: reads with the target row gone
    targets: dict[str, dict[str, Any]]  # per table: the row each case changes
    others: dict[str, dict[str, dict[str, Any]]]  # per table: sibling, other thread, older

    def restore(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn, conn.transaction():
            conn.execute("TRUNCATE pgc_writes, pgc_blobs, pgc_checkpoints")
            conn.execute("INSERT INTO pgc_checkpoints SELECT * FROM bak_checkpoints")
            # a delta's base goes first: versions grow
            conn.execute(
                "INSERT INTO pgc_blobs SELECT * FROM bak_blobs"
                " ORDER BY thread_id, channel, base_version IS NOT NULL, version"
            )
            conn.execute("INSERT INTO pgc_writes SELECT * FROM bak_writes")


def _rows(conn: psycopg.Connection[Any], query: str, *params: Any) -> list[dict[str, Any]]:
    return conn.execute(query, params).fetchall()  # type: ignore[arg-type, return-value]


@pytest.fixture(scope="module")
def stage(_databases: Any, template_db: str) -> Iterator[Stage]:
    name = _databases.new_name("tamper")
    _databases.create(name, conninfo_to_dict(template_db)["dbname"])
    dsn = _databases.dsn(name)
    try:
        write(dsn)
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            for table in ("checkpoints", "blobs", "writes"):
                conn.execute(f"CREATE TABLE bak_{table} AS SELECT * FROM pgc_{table}")
            ids = {
                t: [
                    r["checkpoint_id"]
                    for r in _rows(
                        conn,
                        "SELECT checkpoint_id FROM pgc_checkpoints WHERE thread_id = %s"
                        " ORDER BY checkpoint_id DESC",
                        t,
                    )
                ]
                for t in THREADS
            }
            targets, others = _choose_rows(conn, ids)
        stage = Stage(dsn, ids, observe(dsn, ids), {}, targets, others)
        _check_baseline(stage)
        for table, row in targets.items():
            stage.restore()
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SET session_replication_role = replica")  # the FK of a base
                _where(conn, "DELETE FROM {}", table, row, ())
            stage.deleted[table] = observe(dsn, ids)
        yield stage
    finally:
        _databases.drop(name)


def _choose_rows(
    conn: psycopg.Connection[Any], ids: dict[str, list[str]]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, dict[str, Any]]]]:
    """The row each table's cases change (in the middle of thread t1), and the rows whose
    values they borrow: a sibling, the same place in thread t2, an older one."""

    def checkpoint(thread_id: str, position: int) -> dict[str, Any]:
        return _rows(
            conn,
            "SELECT * FROM pgc_checkpoints WHERE thread_id = %s AND checkpoint_id = %s",
            thread_id,
            ids[thread_id][position],
        )[0]

    middle = len(ids["t1"]) // 2
    target = checkpoint("t1", middle)
    targets = {"pgc_checkpoints": target}
    others = {
        "pgc_checkpoints": {
            "sibling": checkpoint("t1", middle + 1),
            "other_thread": checkpoint("t2", middle),
            "older": checkpoint("t1", len(ids["t1"]) - 1),
        }
    }

    def items_blobs(thread_id: str) -> list[dict[str, Any]]:
        return _rows(
            conn,
            "SELECT * FROM pgc_blobs WHERE thread_id = %s AND channel = 'items' ORDER BY version",
            thread_id,
        )

    # a delta of the growing list, with its base before it
    blobs = items_blobs("t1")
    at = next(i for i in range(len(blobs) - 1, 0, -1) if blobs[i]["base_version"] is not None)
    targets["pgc_blobs"] = blobs[at]
    others["pgc_blobs"] = {
        "sibling": blobs[at - 1],
        "other_thread": items_blobs("t2")[at],
        "older": blobs[0],
    }

    def writes_at(thread_id: str, checkpoint_id: str) -> list[dict[str, Any]]:
        return _rows(
            conn,
            "SELECT * FROM pgc_writes WHERE thread_id = %s AND checkpoint_id = %s"
            " ORDER BY task_path, task_id, idx",
            thread_id,
            checkpoint_id,
        )

    # a checkpoint of t1 with at least two pending writes, and an older one with writes
    with_writes = [c for c in ids["t1"] if len(writes_at("t1", c)) >= 2]
    here, older = with_writes[len(with_writes) // 2], with_writes[-1]
    position = ids["t1"].index(here)
    mine = writes_at("t1", here)
    theirs = writes_at("t2", ids["t2"][position])
    targets["pgc_writes"] = mine[0]
    others["pgc_writes"] = {
        "sibling": mine[1],
        "other_thread": theirs[0] if theirs else mine[1],
        "older": writes_at("t1", older)[0],
    }
    return targets, others


def _check_baseline(stage: Stage) -> None:
    """The data is what the cases need: values read back, deltas, seeds, writes."""
    assert not [k for k, v in stage.baseline.items() if isinstance(v, Failed)]
    latest = stage.baseline[("latest", "t1")]
    assert len(latest[2]["channel_values"]["items"]) == 2 * TURNS
    assert latest[4] == [] and any(t[4] for t in stage.baseline[("list", "t1")])
    histories = [v["messages"] for k, v in stage.baseline.items() if k[0] == "history"]
    assert any(writes for _, writes in histories), "a DeltaChannel history has writes"
    assert any(seed for seed, _ in histories), "a DeltaChannel history has a seed"
    assert stage.targets["pgc_blobs"]["base_version"] is not None


def _where(
    conn: psycopg.Connection[Any],
    statement: str,
    table: str,
    row: dict[str, Any],
    params: tuple[Any, ...],
) -> int:
    keys = KEYS[table]
    query = sql.SQL(statement + " WHERE {}").format(
        sql.Identifier(table),
        sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(k)) for k in keys),
    )
    return conn.execute(query, (*params, *(row[k] for k in keys))).rowcount


# -- the five changes ---------------------------------------------------------------------------


def flipped(value: Any) -> Any:
    """One byte of a value changed, keeping its type (and JSON valid)."""
    if isinstance(value, bytes):
        raw = bytearray(value)
        raw[len(raw) // 2] ^= 0x01
        return bytes(raw)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value ^ 1
    if isinstance(value, str):
        if not value:
            return "!"
        i = len(value) // 2
        return value[:i] + chr(ord(value[i]) ^ 1) + value[i + 1 :]
    if isinstance(value, list):
        return [flipped(value[0]), *value[1:]] if value else ["!"]
    if isinstance(value, dict):
        text = json.dumps(value)
        for i in range(len(text) // 2, len(text)):
            if text[i].isalnum():
                changed = text[:i] + chr(ord(text[i]) ^ 1) + text[i + 1 :]
                try:
                    return json.loads(changed)
                except ValueError:
                    continue
        return {**value, "!": 1}
    if value is None:
        return None
    import datetime as dt

    if isinstance(value, dt.datetime):
        return value + dt.timedelta(seconds=1)
    raise AssertionError(f"no way to flip a {type(value).__name__}")


def _adapt(value: Any) -> Any:
    return Jsonb(value) if isinstance(value, dict) else value


def tamper(stage: Stage, table: str, column: str, mutation: str) -> str:
    """Apply one change; say what happened (the database may refuse it)."""
    target = stage.targets[table]
    others = stage.others[table]
    try:
        with psycopg.connect(stage.dsn, autocommit=True) as conn:
            assignment = sql.SQL("UPDATE {} SET ") + sql.SQL("{} = %s").format(
                sql.Identifier(column)
            )
            statement = assignment.as_string(conn)
            if mutation == "swap_with_sibling":
                sibling = others["sibling"]
                with conn.transaction():
                    _where(conn, statement, table, target, (_adapt(sibling[column]),))
                    moved = {**sibling}
                    _where(conn, statement, table, moved, (_adapt(target[column]),))
                return "swapped"
            value = {
                "flip_a_byte": lambda: flipped(target[column]),
                "set_null": lambda: None,
                "copy_from_other_thread": lambda: others["other_thread"][column],
                "older": lambda: others["older"][column],
            }[mutation]()
            if value == target[column]:
                return "unchanged"
            changed = _where(conn, statement, table, target, (_adapt(value),))
            return "changed" if changed else "no row"
    except psycopg.Error as exc:  # NOT NULL, a key taken, a delta base that must exist
        return f"refused by the database ({type(exc).__name__})"


CASES = [
    (table, column, mutation)
    for table, columns in {
        "pgc_checkpoints": (
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "parent_checkpoint_id",
            "run_id",
            "type",
            "checkpoint",
            "channel_versions",
            "inline_channels",
            "metadata_type",
            "metadata_blob",
            "metadata",
            "created_at",
            "sealed_parent_id",
        ),
        "pgc_blobs": (
            "thread_id",
            "checkpoint_ns",
            "channel",
            "version",
            "type",
            "blob",
            "base_version",
        ),
        "pgc_writes": (
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "task_id",
            "task_path",
            "idx",
            "channel",
            "type",
            "blob",
        ),
    }.items()
    for column in columns
    for mutation in MUTATIONS
]


def test_the_cases_cover_every_column_of_every_table(stage: Stage) -> None:
    # the saver's tables; the store's are tampered with in test_store_encryption.py.
    # pgc_deletions is read by puts only (was a missing parent deleted?): an edit
    # there changes which puts are refused, never what a read returns
    with psycopg.connect(stage.dsn) as conn:
        found = {
            (table, column)
            for table, column in conn.execute(
                "SELECT table_name, column_name FROM information_schema.columns"
                " WHERE table_schema = 'public' AND table_name LIKE 'pgc\\_%'"
                " AND NOT starts_with(table_name, 'pgc_store')"
                " AND table_name <> 'pgc_deletions'"
            )
        }
    assert found == {(table, column) for table, column, _ in CASES}


@pytest.mark.parametrize(
    ("table", "column", "mutation"), CASES, ids=[f"{t}.{c}-{m}" for t, c, m in CASES]
)
def test_a_tampered_column_fails_clearly_or_changes_nothing(
    stage: Stage, table: str, column: str, mutation: str
) -> None:
    stage.restore()
    outcome = tamper(stage, table, column, mutation)
    after = observe(stage.dsn, stage.ids)
    moves_row = column in KEYS[table]
    wrong = {}
    for read, got in after.items():
        before = stage.baseline[read]
        if got == before:
            continue
        if isinstance(got, Failed) and got.clear:
            continue
        gone = stage.deleted[table][read]
        if got == gone and (moves_row or (column == "metadata" and read == ("filtered",))):
            continue  # as if the row were deleted: what per-row authentication cannot see
        wrong[read] = got
    assert not wrong, f"{outcome}; reads that returned other data or failed unclearly: {wrong}"
