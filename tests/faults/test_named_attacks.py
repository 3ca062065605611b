"""The attacks that were found working with encryption on, each as it was tried.

An attacker who can write to the tables but has no key:

1. plants a value that runs code when read: the command line (tests/cli/
   test_planted_code.py); here, an application with a key refuses the row;
2. edits the columns that decide what a read returns: `channel_versions`
   pointed at an older version, `type = 'empty'` on a sealed value, a delta's
   `base_version` set to NULL, two writes' `channel` swapped, the head's parent
   set to NULL; and `inline_channels`, `task_path`, `idx`, `task_id`;
3. edits the readable metadata so that a tenant's filter returns another's
   checkpoint and drops its own;
4. copies a value in LangGraph's own format (not bound to a row) from another
   thread;
5. reads sizes while adding text to a value that holds a secret, to learn it
   from how well it compresses.

Each must end in a clear error (or, for 5, learn nothing); what legitimately
looks the same (a parent deleted by a prune) still reads.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from psycopg.rows import dict_row
from support.checkpoints import config
from support.planted import code_ran, planted_value

from pgcheckpoint import DecryptionError, EncryptedSerde, PostgresSaver, rotate_key

KEY = bytes(range(32))
LG_KEY = b"0123456789abcdef0123456789abcdef"


def enc(**kwargs: Any) -> EncryptedSerde:
    kwargs.setdefault("keys", {"k1": KEY})
    kwargs.setdefault("filterable_metadata", ("source", "step", "user_id"))
    return EncryptedSerde(**kwargs)


def put(
    saver: PostgresSaver,
    cfg: Any,
    values: dict[str, Any],
    new: list[str],
    metadata: dict[str, Any] | None = None,
) -> Any:
    """A checkpoint after `cfg` holding `values`, with new versions for channels `new`."""
    parent = saver.get_tuple(cfg) if cfg["configurable"].get("checkpoint_id") else None
    versions = dict(parent.checkpoint["channel_versions"]) if parent else {}
    for channel in new:
        versions[channel] = saver.get_next_version(versions.get(channel), None)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = versions
    meta: Any = {"source": "loop", "step": len(versions), **(metadata or {})}
    return saver.put(cfg, checkpoint, meta, {c: versions[c] for c in new})


@pytest.fixture
def saver(db_dsn: str) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(db_dsn, serde=enc()) as opened:
        yield opened


def cid(cfg: Any) -> str:
    return str(cfg["configurable"]["checkpoint_id"])


# -- 1. a planted value ------------------------------------------------------------------------


def test_a_planted_plaintext_interrupt_is_refused_by_an_application_with_a_key(
    saver: PostgresSaver, raw: psycopg.Connection[Any], tmp_path: Any
) -> None:
    head = put(saver, config("t"), {"n": 1}, ["n"])
    saver.put_writes(head, [("__interrupt__", "ok?")], "task")
    marker = tmp_path / "ran"
    raw.execute("UPDATE pgc_writes SET type = 'msgpack', blob = %s", [planted_value(marker)])
    with pytest.raises(DecryptionError, match=r"pgc_writes.*stored unencrypted"):
        saver.get_tuple(head)
    assert not code_ran(marker)


# -- 2. the columns around the values --------------------------------------------------------


def test_channel_versions_pointed_at_an_older_version_fails(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    first = put(saver, config("t"), {"doc": {"v": "old"}}, ["doc"])
    second = put(saver, first, {"doc": {"v": "new"}}, ["doc"])
    raw.execute(
        "UPDATE pgc_checkpoints SET channel_versions = (SELECT channel_versions"
        " FROM pgc_checkpoints WHERE checkpoint_id = %s) WHERE checkpoint_id = %s",
        [cid(first), cid(second)],
    )
    with pytest.raises(DecryptionError, match="column channel_versions") as err:
        saver.get_tuple(second)
    assert "pgc_checkpoints" in str(err.value) and "'k1'" in str(err.value)
    with pytest.raises(DecryptionError, match="column channel_versions"):
        list(saver.list(config("t")))


def test_a_sealed_value_marked_empty_fails_instead_of_vanishing(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    head = put(saver, config("t"), {"doc": {"v": 1}, "n": 1}, ["doc", "n"])
    raw.execute("UPDATE pgc_blobs SET type = 'empty', blob = NULL WHERE channel = 'doc'")
    for read in (lambda: saver.get_tuple(head), lambda: list(saver.list(config("t")))):
        with pytest.raises(DecryptionError, match=r"\['doc'\].*missing or marked empty"):
            read()


def test_a_delta_base_set_to_null_fails_instead_of_returning_one_item(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    items = [f"item {i} " + "x" * 60 for i in range(11)]
    first = put(saver, config("t"), {"items": items}, ["items"])
    head = put(saver, first, {"items": [*items, "the twelfth"]}, ["items"])
    delta = raw.execute(
        "SELECT count(*) AS n FROM pgc_blobs WHERE base_version IS NOT NULL"
    ).fetchone()
    assert delta == {"n": 1}
    tup = saver.get_tuple(head)
    assert tup is not None and len(tup.checkpoint["channel_values"]["items"]) == 12
    raw.execute("UPDATE pgc_blobs SET base_version = NULL")
    for read in (lambda: saver.get_tuple(head), lambda: list(saver.list(config("t")))):
        with pytest.raises(DecryptionError, match="base_version") as err:
            read()
        assert "pgc_blobs" in str(err.value)


def test_two_writes_with_their_channels_swapped_fail(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    head = put(saver, config("t"), {"n": 1}, ["n"])
    saver.put_writes(head, [("pay_merchant", 100), ("pay_attacker", 0)], "checkout")
    raw.execute(
        "UPDATE pgc_writes SET channel = CASE channel WHEN 'pay_merchant' THEN 'pay_attacker'"
        " ELSE 'pay_merchant' END"
    )
    with pytest.raises(DecryptionError, match="channel, task_path") as err:
        saver.get_tuple(head)
    assert "pgc_writes" in str(err.value) and "'k1'" in str(err.value)


def test_the_heads_parent_set_to_null_fails_but_a_pruned_parent_reads(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    first = put(saver, config("t"), {"n": 1}, ["n"])
    head = put(saver, first, {"n": 2}, ["n"])
    raw.execute(
        "UPDATE pgc_checkpoints SET parent_checkpoint_id = NULL WHERE checkpoint_id = %s",
        [cid(head)],
    )
    with pytest.raises(DecryptionError, match="parent_checkpoint_id") as err:
        saver.get_tuple(head)
    assert "it is NULL, but parent" in str(err.value)
    raw.execute(
        "UPDATE pgc_checkpoints SET parent_checkpoint_id = %s WHERE checkpoint_id = %s",
        [cid(first), cid(head)],
    )
    # a prune deletes the parent and clears the column: the head reads, parentless
    saver.prune(["t"], strategy="keep_latest")
    tup = saver.get_tuple(config("t"))
    assert tup is not None and tup.parent_config is None
    assert tup.checkpoint["channel_values"] == {"n": 2}
    # pointed elsewhere, the column fails too
    other = put(saver, config("u"), {"n": 9}, ["n"])
    raw.execute(
        "UPDATE pgc_checkpoints SET parent_checkpoint_id = %s WHERE checkpoint_id = %s",
        [cid(other), cid(head)],
    )
    with pytest.raises(DecryptionError, match="parent_checkpoint_id"):
        saver.get_tuple(config("t"))


@pytest.mark.parametrize(
    ("statement", "words"),
    [
        ("UPDATE pgc_checkpoints SET inline_channels = '{}'", "column inline_channels"),
        ("UPDATE pgc_writes SET task_path = 'elsewhere'", "channel, task_path"),
        ("UPDATE pgc_writes SET idx = idx + 10", "authentication failed"),
        ("UPDATE pgc_writes SET task_id = 'another task'", "authentication failed"),
    ],
    ids=["inline_channels", "task_path", "idx", "task_id"],
)
def test_the_other_columns_a_read_relies_on(
    saver: PostgresSaver, raw: psycopg.Connection[Any], statement: str, words: str
) -> None:
    head = put(saver, config("t"), {"n": 1, "title": "x"}, ["n", "title"])
    saver.put_writes(head, [("n", 2), ("title", "y")], "task", task_path="~path")
    raw.execute(statement)
    with pytest.raises(DecryptionError, match=words):
        saver.get_tuple(head)


# -- 3. the readable metadata ------------------------------------------------------------------


def test_a_tenant_filter_never_returns_another_tenants_checkpoint(
    saver: PostgresSaver, raw: psycopg.Connection[Any]
) -> None:
    alice = put(saver, config("a"), {"n": 1}, ["n"], {"user_id": "alice"})
    bob = put(saver, config("b"), {"n": 2}, ["n"], {"user_id": "bob"})
    # bob's readable projection says alice; alice's says carol
    raw.execute(
        'UPDATE pgc_checkpoints SET metadata = metadata || \'{"user_id": "alice"}\''
        " WHERE checkpoint_id = %s",
        [cid(bob)],
    )
    with pytest.raises(DecryptionError, match="readable column metadata holds 'user_id'"):
        list(saver.list(None, filter={"user_id": "alice"}))
    raw.execute(
        'UPDATE pgc_checkpoints SET metadata = metadata || \'{"user_id": "carol"}\''
        " WHERE checkpoint_id = %s",
        [cid(alice)],
    )
    # a checkpoint whose projection lies fails every read that meets it
    with pytest.raises(DecryptionError):
        saver.get_tuple(alice)
    with pytest.raises(DecryptionError):
        saver.get_tuple(bob)


def test_rows_whose_metadata_is_not_bound_are_rechecked_and_limit_counts_matches(
    db_dsn: str, raw: psycopg.Connection[Any]
) -> None:
    """LangGraph's own format keeps all metadata readable and binds none of it: a
    filtered list decrypts each candidate, keeps the matches, and reads on to fill `limit`."""
    theirs = EncryptedSerializer.from_pycryptodome_aes(key=LG_KEY)
    with PostgresSaver.from_conn_string(db_dsn, serde=theirs) as legacy:
        cfg = config("t")
        made = []
        for i, user in enumerate(["alice", "bob", "bob", "alice", "bob", "alice"]):
            cfg = put(legacy, cfg, {"n": i}, ["n"], {"user_id": user})
            made.append((cid(cfg), user))
    # every bob row now claims alice in its readable column
    raw.execute('UPDATE pgc_checkpoints SET metadata = metadata || \'{"user_id": "alice"}\'')
    alices = [c for c, user in reversed(made) if user == "alice"]
    ours = enc(langgraph_key=LG_KEY)
    with PostgresSaver.from_conn_string(db_dsn, serde=ours) as reader:
        for limit in (1, 2, 3, None):
            found = [
                cid(t.config) for t in reader.list(None, filter={"user_id": "alice"}, limit=limit)
            ]
            assert found == alices[:limit], limit
            assert all(
                t.metadata["user_id"] == "alice"
                for t in reader.list(config("t"), filter={"user_id": "alice"}, limit=limit)
            )


# -- 4. LangGraph's own format -----------------------------------------------------------------


def test_langgraph_values_are_not_bound_and_are_refused_once_turned_off(
    db_dsn: str, raw: psycopg.Connection[Any]
) -> None:
    theirs = EncryptedSerializer.from_pycryptodome_aes(key=LG_KEY)
    with PostgresSaver.from_conn_string(db_dsn, serde=theirs) as legacy:
        a = put(legacy, config("a"), {"doc": {"owner": "alice"}}, ["doc"])
        put(legacy, config("b"), {"doc": {"owner": "bob"}}, ["doc"])
    # bob's value copied over alice's: LangGraph's format binds nothing to the row
    raw.execute(
        "UPDATE pgc_blobs SET blob = (SELECT blob FROM pgc_blobs WHERE thread_id = 'b')"
        " WHERE thread_id = 'a'"
    )
    reading = enc(langgraph_key=LG_KEY)
    with PostgresSaver.from_conn_string(db_dsn, serde=reading) as reader:
        tup = reader.get_tuple(a)
        assert tup is not None and tup.checkpoint["channel_values"]["doc"] == {"owner": "bob"}
    off = enc(langgraph_key=LG_KEY, accept_langgraph_eax=False)
    with (
        PostgresSaver.from_conn_string(db_dsn, serde=off) as reader,
        pytest.raises(DecryptionError, match=r"LangGraph's own format.*not bound"),
    ):
        reader.get_tuple(a)
    # rotate-key rewrites them bound to their rows: a copy no longer passes
    report = rotate_key(db_dsn, reading)
    assert report.remaining == {} and report.counts["(langgraph-eax)"]["blobs"] == 2
    raw.execute(
        "UPDATE pgc_blobs SET blob = (SELECT blob FROM pgc_blobs WHERE thread_id = 'b')"
        " WHERE thread_id = 'a'"
    )
    with PostgresSaver.from_conn_string(db_dsn, serde=off) as reader:
        with pytest.raises(DecryptionError, match="in thread 'a'"):
            reader.get_tuple(a)
        tup = reader.get_tuple(config("b"))
        assert tup is not None and tup.checkpoint["channel_values"]["doc"] == {"owner": "bob"}


# -- 5. sizes that tell what a value holds -----------------------------------------------------

ALPHABET = string.ascii_uppercase + string.digits
PREFIX = "session token: "


def stored_sizes(
    saver: PostgresSaver, raw: psycopg.Connection[Any], guesses: list[str]
) -> list[int]:
    """For each guess, the stored size of a value holding the secret and the guess.

    What the attacker does: put text of their own into a value the application
    also keeps a secret in, then read the size of the stored row.
    """
    rng = random.Random(1)
    notes = " ".join(
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
        for _ in range(250)
    )
    sizes = []
    for guess in guesses:
        value = {"notes": notes, "auth": PREFIX + SECRET, "draft": PREFIX + guess}
        cfg = put(saver, config("victim"), {"profile": value}, ["profile"])
        row = raw.execute(
            "SELECT octet_length(b.blob) AS n FROM pgc_blobs b JOIN pgc_checkpoints c"
            " ON c.thread_id = b.thread_id AND c.channel_versions ->> 'profile' = b.version"
            " WHERE c.checkpoint_id = %s",
            [cid(cfg)],
        ).fetchone()
        sizes.append(int(row["n"]))  # type: ignore[index]
    return sizes


def _token(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(ALPHABET) for _ in range(8))


SECRET = _token(0)
CANDIDATES = [SECRET] + [_token(seed) for seed in range(100, 135)]


def test_compressed_before_encryption_the_size_gives_the_secret_away(db_dsn: str) -> None:
    """The control: with compression on, the guess that repeats the secret stores smallest."""
    with (
        PostgresSaver.from_conn_string(db_dsn, serde=enc(compress=True)) as saver,
        psycopg.connect(db_dsn, autocommit=True, row_factory=dict_row) as raw,
    ):
        sizes = stored_sizes(saver, raw, CANDIDATES)
    best = min(sizes)
    assert [c for c, n in zip(CANDIDATES, sizes, strict=True) if n == best] == [SECRET]


def test_the_size_of_an_encrypted_value_tells_nothing_about_what_it_repeats(
    db_dsn: str,
) -> None:
    """The default: no compression before encryption, so every guess of the same
    length stores the same number of bytes, and neither a whole-secret guess nor a
    character-at-a-time attack learns anything."""
    with (
        PostgresSaver.from_conn_string(db_dsn, serde=enc()) as saver,
        psycopg.connect(db_dsn, autocommit=True, row_factory=dict_row) as raw,
    ):
        sizes = stored_sizes(saver, raw, CANDIDATES)
        assert len(set(sizes)) == 1, "the stored size depends on the content"
        known = ""
        for _ in range(3):  # a character at a time, one put per character tried
            tried = stored_sizes(saver, raw, [known + c for c in ALPHABET])
            assert len(set(tried)) == 1
            known += ALPHABET[tried.index(min(tried))]
    assert known != SECRET[:3]
