"""`pgcheckpoint threads --metadata` trusts what the key authenticates, and says when it cannot.

An application encrypts its checkpoints and keeps `user_id` readable for
`list(filter=...)`. Someone who can write the table but has no key sets
`user_id` to `alice` in the readable metadata of bob's rows and removes it from
alice's. With the key set, `threads --metadata user_id=alice` still finds
alice's thread and only hers (a "find this user's threads" export or erasure
must not act on the wrong person), and says which rows were edited. Without
the key it can only read the editable column, and says so, on stderr and in
each thread of `--json`.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from pgcheckpoint import EncryptedSerde, PostgresSaver
from pgcheckpoint.cli import main

KEY = bytes(range(32))
KEYS = "k1:" + base64.b64encode(KEY).decode()


def chat(dsn: str, thread_id: str, metadata: dict[str, Any], *, turns: int = 3) -> None:
    serde = EncryptedSerde(keys={"k1": KEY}, filterable_metadata=("source", "step", "user_id"))
    with PostgresSaver.from_conn_string(dsn, serde=serde) as saver:
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        for step in range(turns):
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"n": step}
            checkpoint["channel_versions"] = {"n": str(step + 1)}
            config = saver.put(
                config, checkpoint, {"source": "loop", "step": step, **metadata}, {"n": str(step)}
            )


def attack(dsn: str) -> None:
    """What someone without the key does to the readable metadata column."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            'UPDATE pgc_checkpoints SET metadata = metadata || \'{"user_id": "alice"}\''
            " WHERE thread_id = 'bob-chat'"
        )
        conn.execute(
            "UPDATE pgc_checkpoints SET metadata = metadata - 'user_id'"
            " WHERE thread_id = 'alice-chat'"
        )


def threads(
    capsys: pytest.CaptureFixture[str], dsn: str, *argv: str
) -> tuple[list[dict[str, Any]], str]:
    code = main(["threads", *argv, "--json", "--dsn", dsn])
    out, err = capsys.readouterr()
    assert code == 0, err
    found: list[dict[str, Any]] = json.loads(out)
    return found, err


@pytest.fixture
def attacked(db_dsn: str) -> str:
    chat(db_dsn, "alice-chat", {"user_id": "alice", "org": "acme"})
    chat(db_dsn, "bob-chat", {"user_id": "bob", "org": "acme"})
    chat(db_dsn, "carol-chat", {"user_id": "carol", "org": "other"})
    attack(db_dsn)
    return db_dsn


def test_with_the_key_the_sealed_metadata_decides(
    attacked: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGCHECKPOINT_AES_KEYS", KEYS)
    found, err = threads(capsys, attacked, "--metadata", "user_id=alice")
    assert [t["thread_id"] for t in found] == ["alice-chat"]
    assert found[0]["metadata_filter"] == "sealed"
    assert "differs from their sealed metadata" in err and "'bob-chat'" in err
    # a key the application keeps encrypted only is searched too
    found, _ = threads(capsys, attacked, "--metadata", "org=acme")
    assert [t["thread_id"] for t in found] == ["bob-chat", "alice-chat"]


def test_without_the_key_the_filter_is_said_unverified(
    attacked: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGCHECKPOINT_AES_KEYS", raising=False)
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    found, err = threads(capsys, attacked, "--metadata", "user_id=alice")
    # what the column says, which is what the attacker wrote: said so
    assert [(t["thread_id"], t["metadata_filter"]) for t in found] == [("bob-chat", "unverified")]
    assert "the result is unverified" in err and "PGCHECKPOINT_AES_KEYS" in err
    code = main(["threads", "--metadata", "user_id=alice", "--dsn", attacked])
    out, err = capsys.readouterr()
    assert code == 0 and "bob-chat" in out and "the result is unverified" in err
    found, err = threads(capsys, attacked)
    assert all(t["metadata_filter"] is None for t in found) and "unverified" not in err


def test_the_search_says_where_it_stopped(
    attacked: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGCHECKPOINT_AES_KEYS", KEYS)
    # carol's 3 checkpoints are the newest: 3 read, alice's are not reached
    found, err = threads(capsys, attacked, "--metadata", "user_id=alice", "--scan", "3")
    assert found == []
    assert "stopped after the newest 3 checkpoints" in err and "--scan N" in err
    found, err = threads(capsys, attacked, "--metadata", "user_id=alice", "--scan", "9")
    assert [t["thread_id"] for t in found] == ["alice-chat"] and "stopped after" not in err


def test_metadata_that_cannot_be_authenticated_is_reported(
    db_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    chat(db_dsn, "alice-chat", {"user_id": "alice"}, turns=1)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgc_checkpoints SET metadata_blob = metadata_blob || '\\x00'::bytea")
    monkeypatch.setenv("PGCHECKPOINT_AES_KEYS", KEYS)
    found, err = threads(capsys, db_dsn, "--metadata", "user_id=alice")
    assert found == []
    assert "could not be read or authenticated, so they were not matched" in err
    assert "'alice-chat'" in err
