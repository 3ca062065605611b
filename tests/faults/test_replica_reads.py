"""Reads from a hot standby: every read-only command, and the library reads a replica may serve.

A private primary and a streaming standby (`private_pg.Replicated`). Threads
are written on the primary; once the standby has replayed them, each
read-only command of the command line runs on the standby, reached by the
multi-host DSN the README gives for replicas (`target_session_attrs=standby`),
and answers as it does on the primary, but for thread locks: advisory locks
are not replicated, so there `threads` and `show` say that whether a worker
holds a thread's lock is unknown, never that it holds none. A command that
writes fails with a clear error there, and a saver on the replica serves
`get_tuple`, `list` and
`get_delta_channel_history` (never a graph's: a running graph must read its
own writes, which a replica has only once it replays them).
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support.chat import chat_graph
from support.retention import write_threads
from support.savers import SaverApi, open_saver

from pgcheckpoint import PostgresSaver
from pgcheckpoint.cli import main
from pgcheckpoint.schema import migrate

from .private_pg import Replicated, why_unavailable

pytestmark = pytest.mark.timeout(300)

KEYS = "k1:" + base64.b64encode(bytes(32)).decode()


@pytest.fixture(scope="module")
def replica() -> Iterator[tuple[Replicated, dict[str, str]]]:
    """The pair, and the threads written on the primary (name -> thread id), replayed."""
    reason = why_unavailable()
    if reason is not None:
        pytest.skip(f"cannot start a private primary and standby: {reason}")
    pair = Replicated.create(["app"], synchronous=False)
    try:
        dsn = pair.primary.dsn("app")
        migrate.upgrade(dsn)
        with psycopg.connect(dsn) as conn:
            saver = PostgresSaver(conn)
            threads = asyncio.run(write_threads(SaverApi(saver), dsn))
            chat = {"configurable": {"thread_id": f"chat-{uuid.uuid4()}"}}
            graph = chat_graph(saver, snapshot_frequency=3)
            for turn in range(5):
                graph.invoke({"messages": [f"human {turn}"], "turn": turn}, chat)
        threads["chat"] = chat["configurable"]["thread_id"]
        pair.wait_replayed()
        yield pair, threads
    finally:
        pair.remove()


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def sizes_left_out(stats_json: str) -> dict[str, Any]:
    # on-disk sizes are the server's own (free space maps, pages not yet reused)
    stats = json.loads(stats_json)
    stats.pop("tables")
    return dict(stats)


def lock_left_out(show: str) -> str:
    # the standby says the lock is unknown where the primary says no one holds it
    return "\n".join(line for line in show.splitlines() if not line.startswith("lock: "))


def lock_field_left_out(show_json: str) -> dict[str, Any]:
    page = json.loads(show_json)
    assert page.pop("lock") in ("unknown", "free")
    return dict(page)


READ_ONLY = {
    "threads": (["threads", "--limit", "50"], None),
    "show": (["show", "{week}"], lock_left_out),
    "show --json": (["show", "{week}", "--json"], lock_field_left_out),
    "stats": (["stats", "--json"], sizes_left_out),
    "stats --prometheus": (["stats", "--prometheus"], lambda text: "pgcheckpoint_threads" in text),
    "current": (["current", "--check"], None),
    "history": (["history"], None),
    "prune --dry-run": (["prune", "--older-than", "30d", "--dry-run", "--json"], None),
    "prune --keep-last --dry-run": (["prune", "--keep-last", "2", "--dry-run", "--json"], None),
    "rotate-key --dry-run": (["rotate-key", "--dry-run"], None),
}


@pytest.mark.parametrize("command", list(READ_ONLY))
def test_each_read_only_command_answers_on_the_standby_as_on_the_primary(
    replica: tuple[Replicated, dict[str, str]],
    command: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pair, threads = replica
    monkeypatch.setenv("PGCHECKPOINT_AES_KEYS", KEYS)
    template, compare = READ_ONLY[command]
    args = [arg.format(**threads) for arg in template]
    answers = []
    for dsn in (pair.dsn("app", "standby"), pair.primary.dsn("app")):
        code, out, err = cli(capsys, *args, "--dsn", dsn)
        assert code == 0, err
        answers.append(out if compare is None else compare(out))
    on_standby, on_primary = answers
    assert on_standby == on_primary
    assert on_standby  # an answer, not an empty one


def test_on_the_standby_a_held_lock_is_unknown_not_free(
    replica: tuple[Replicated, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    pair, threads = replica
    week = threads["week"]
    primary, standby = pair.primary.dsn("app"), pair.dsn("app", "standby")
    with PostgresSaver.from_conn_string(primary) as saver, saver.lock_thread(week) as lock:
        code, out, err = cli(capsys, "threads", "--limit", "50", "--json", "--dsn", primary)
        assert code == 0, err
        listed = {t["thread_id"]: t for t in json.loads(out)}
        assert (listed[week]["lock"], listed[week]["locked_by"]) == ("held", lock.backend_pid)
        code, out, err = cli(capsys, "show", week, "--dsn", primary)
        assert f"running now: lock held by pid {lock.backend_pid}" in out.splitlines()

        code, out, err = cli(capsys, "threads", "--limit", "50", "--json", "--dsn", standby)
        assert code == 0, err
        listed = {t["thread_id"]: t for t in json.loads(out)}
        assert {(t["lock"], t["locked_by"]) for t in listed.values()} == {("unknown", None)}
        assert (
            "this server is a standby" in err and "cannot see the primary's advisory locks" in err
        )
        code, out, err = cli(capsys, "threads", "--limit", "50", "--dsn", standby)
        assert code == 0 and week in out and "this server is a standby" in err
        code, out, err = cli(capsys, "show", week, "--dsn", standby)
        assert code == 0, err
        assert "lock: unknown on a standby, which cannot see the primary's advisory locks" in out
        assert "running now" not in out
        code, out, err = cli(capsys, "show", week, "--json", "--dsn", standby)
        page = json.loads(out)
        assert (page["lock"], page["locked_by"]) == ("unknown", None)


def test_a_command_that_writes_fails_clearly_on_the_standby(
    replica: tuple[Replicated, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    pair, threads = replica
    code, _, err = cli(capsys, "prune", "--older-than", "30d", "--dsn", pair.standby.dsn("app"))
    assert code == 1
    assert "read-only transaction" in err, err
    with psycopg.connect(pair.primary.dsn("app")) as conn:
        (ancient,) = conn.execute(
            "SELECT count(*) FROM pgc_checkpoints WHERE thread_id = %s", [threads["ancient"]]
        ).fetchone() or (0,)
    assert ancient > 0


@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_a_saver_on_the_replica_serves_reads_and_refuses_writes(
    replica: tuple[Replicated, dict[str, str]], driver: str
) -> None:
    pair, threads = replica
    config = {"configurable": {"thread_id": threads["chat"], "checkpoint_ns": ""}}
    answers = []
    for dsn in (pair.dsn("app", "standby"), pair.primary.dsn("app")):
        async with open_saver(driver, "own-pool", dsn) as api:
            latest = await api.get_tuple(config)
            assert latest is not None
            history = await api.get_delta_channel_history(
                config=latest.config, channels=["messages"]
            )
            listed = await api.list(config)
            across = await api.list(None, limit=5)
            answers.append((latest, history, listed, across))
            if dsn != pair.primary.dsn("app"):
                with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                    await api.delete_thread(threads["chat"])
    on_standby, on_primary = answers
    assert on_standby == on_primary
    _, history, listed, across = on_standby
    assert history["messages"] and len(listed) > 5 and len(across) == 5
