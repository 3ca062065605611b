"""EncryptedSerde, the row binding, and the core's encrypted paths, without a database."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from support.ops import drive

from pgcheckpoint import DecryptionError, EncryptedSerde, InvalidInputError
from pgcheckpoint.codec.binding import Sealer, binding, describe_binding, sealed_aad
from pgcheckpoint.codec.crypto import parse_keys
from pgcheckpoint.codec.integrity import add_structure
from pgcheckpoint.codec.labels import cipher_label
from pgcheckpoint.core.caches import MISSING
from pgcheckpoint.core.copies import copy_thread_op
from pgcheckpoint.core.reads import list_op
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.maintenance.rotation import not_active, rotate_page_op, value_counts_op

K1 = bytes(range(32))
K2 = bytes(range(32, 64))
WHERE = binding("blob", "t1", "", "messages", "v1")


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def serde(**kwargs: Any) -> EncryptedSerde:
    kwargs.setdefault("keys", {"k1": K1})
    return EncryptedSerde(**kwargs)


# -- keys ---------------------------------------------------------------------------


def test_the_first_key_of_the_variable_encrypts_and_every_key_decrypts() -> None:
    old = EncryptedSerde.from_env(environ={"PGCHECKPOINT_AES_KEYS": f"k1:{b64(K1)}"})
    both = EncryptedSerde.from_env(
        environ={"PGCHECKPOINT_AES_KEYS": f" k2:{b64(K2)} , k1:{b64(K1)} "}
    )
    assert both.active == "k2" and both.key_ids == ("k2", "k1")
    assert both.loads_typed(old.dumps_typed({"a": 1})) == {"a": 1}
    assert both.dumps_typed("x")[0] == "msgpack+aesgcm2:k2"


def test_url_safe_base64_and_missing_padding_are_accepted() -> None:
    key = bytes([251] * 32)
    text = base64.urlsafe_b64encode(key).decode().rstrip("=")
    assert parse_keys(f"k1:{text}") == {"k1": key}


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (f"k1:{b64(bytes(16))}", ["'k1'", "PGCHECKPOINT_AES_KEYS", "16 bytes", "32"]),
        ("k1:not base64!", ["'k1'", "PGCHECKPOINT_AES_KEYS", "base64"]),
        # junk in the middle: skipped by a lenient decoder, which left a valid key
        (f"k1:{b64(K1)[:20]}!#{b64(K1)[20:]}", ["'k1'", "not valid base64"]),
        (
            f"k1:{base64.urlsafe_b64encode(K2).decode()[:20]}*{base64.urlsafe_b64encode(K2).decode()[20:]}",
            ["'k1'", "not valid base64"],
        ),
        (b64(K1), ["PGCHECKPOINT_AES_KEYS", "key id"]),
        (f"k1:{b64(K1)},k1:{b64(K2)}", ["'k1'", "twice"]),
        (f"k+1:{b64(K1)}", ["'k+1'", "not allowed"]),
        (",", ["PGCHECKPOINT_AES_KEYS", "no key"]),
    ],
)
def test_a_bad_key_variable_is_refused_with_a_message_naming_it(
    value: str, words: list[str]
) -> None:
    with pytest.raises(InvalidInputError) as err:
        EncryptedSerde.from_env(environ={"PGCHECKPOINT_AES_KEYS": value})
    for word in words:
        assert word in str(err.value)


def test_wrong_key_length_in_the_constructor_names_the_argument() -> None:
    with pytest.raises(InvalidInputError, match=r"key 'k1' in keys is 31 bytes long"):
        EncryptedSerde(keys={"k1": bytes(31)})
    with pytest.raises(InvalidInputError, match="must be bytes"):
        EncryptedSerde(keys={"k1": b64(K1)})  # type: ignore[dict-item]
    with pytest.raises(InvalidInputError, match="active key 'k9'"):
        EncryptedSerde(keys={"k1": K1}, active="k9")
    with pytest.raises(InvalidInputError, match="no encryption key"):
        EncryptedSerde(keys={})
    with pytest.raises(InvalidInputError, match="no encryption key"):
        EncryptedSerde.from_env(environ={})


def test_the_keys_never_appear_in_repr() -> None:
    text = repr(serde(keys={"k1": K1, "k2": K2}))
    assert "k1" in text and "k2" in text
    assert b64(K1) not in text and repr(K1) not in text and K1.hex() not in text


# -- sealing ------------------------------------------------------------------------


def test_every_value_gets_a_fresh_nonce() -> None:
    s = serde()
    first, second = s.seal(b"same", WHERE), s.seal(b"same", WHERE)
    assert first[0] == second[0] == "aesgcm2:k1"
    assert first[1] != second[1]
    assert first[1][:12] != second[1][:12]


def test_a_value_only_opens_at_its_own_binding() -> None:
    s = serde()
    suffix, sealed = s.seal(b"payload", WHERE)
    assert s.unseal(f"msgpack+zstd+{suffix}", sealed, WHERE) == ("msgpack+zstd", b"payload")
    elsewhere = binding("blob", "t2", "", "messages", "v1")
    with pytest.raises(DecryptionError) as err:
        s.unseal(f"msgpack+{suffix}", sealed, elsewhere)
    message = str(err.value)
    assert "'k1'" in message and "thread 't2'" in message and "channel 'messages'" in message


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda b: b[:20], ["truncated", "'k1'"]),
        (lambda b: b[:-1], ["authentication failed", "'k1'"]),
        (lambda b: b[:15] + bytes([b[15] ^ 1]) + b[16:], ["authentication failed", "'k1'"]),
        (lambda b: b"", ["truncated"]),
    ],
)
def test_damaged_ciphertext_raises_decryption_error(damage: Any, words: list[str]) -> None:
    s = serde()
    suffix, sealed = s.seal(b"some payload bytes", WHERE)
    with pytest.raises(DecryptionError) as err:
        s.unseal(f"msgpack+{suffix}", damage(sealed), WHERE)
    for word in [*words, "channel 'messages'"]:
        assert word in str(err.value)


def test_wrong_and_missing_keys_name_the_key_id() -> None:
    suffix, sealed = serde().seal(b"x", WHERE)
    with pytest.raises(DecryptionError, match="key 'k1': authentication failed"):
        serde(keys={"k1": K2}).unseal(f"json+{suffix}", sealed, WHERE)
    with pytest.raises(DecryptionError, match="under key 'k1', which is not configured"):
        serde(keys={"k2": K2}).unseal(f"json+{suffix}", sealed, WHERE)


def test_plaintext_is_refused_unless_allowed() -> None:
    with pytest.raises(DecryptionError) as err:
        serde().unseal("msgpack+zstd", b"abc", WHERE)
    assert "unencrypted" in str(err.value) and "allow_plaintext=True" in str(err.value)
    assert "channel 'messages'" in str(err.value)
    assert serde(allow_plaintext=True).unseal("msgpack", b"abc", WHERE) == ("msgpack", b"abc")


def test_values_from_langgraphs_encrypted_serializer_are_read_with_its_key() -> None:
    legacy_key = b"0123456789abcdef0123456789abcdef"
    theirs = EncryptedSerializer.from_pycryptodome_aes(key=legacy_key)
    stored = theirs.dumps_typed({"messages": ["hi"]})
    assert stored[0] == "msgpack+aes"
    ours = serde(langgraph_key=legacy_key)
    assert ours.loads_typed(stored) == {"messages": ["hi"]}
    # bound reads (the saver's) accept them too: LangGraph bound nothing
    assert ours.unseal(stored[0], stored[1], WHERE)[0] == "msgpack"
    with pytest.raises(DecryptionError, match="LANGGRAPH_AES_KEY"):
        serde().loads_typed(stored)
    with pytest.raises(DecryptionError, match="LANGGRAPH_AES_KEY key: authentication failed"):
        serde(langgraph_key=b"x" * 32).loads_typed(stored)


def test_langgraph_aes_key_alone_is_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGCHECKPOINT_AES_KEYS", raising=False)
    monkeypatch.setenv("LANGGRAPH_AES_KEY", "0123456789abcdef")
    stored = EncryptedSerializer.from_pycryptodome_aes().dumps_typed([1, 2])
    s = EncryptedSerde.from_env()
    assert s.active == "langgraph"
    assert s.loads_typed(stored) == [1, 2]
    assert s.loads_typed(s.dumps_typed("new")) == "new"
    assert s.dumps_typed("new")[0] == "msgpack+aesgcm2:langgraph"
    monkeypatch.setenv("LANGGRAPH_AES_KEY", "short")
    with pytest.raises(InvalidInputError, match="LANGGRAPH_AES_KEY is 5 bytes long"):
        EncryptedSerde.from_env()


def test_cipher_labels() -> None:
    assert cipher_label("msgpack+aesgcm2:k1") == "k1"
    assert cipher_label("msgpack+zstd+aesgcm2:k-2.x") == "k-2.x"
    assert cipher_label("msgpack+zstd+aesgcm:k1") == "k1 (0.1.0)"
    assert cipher_label("msgpack+aes") == "(langgraph-eax)"
    assert cipher_label("msgpack") == cipher_label("msgpack+zstd") == "(plaintext)"


# -- bindings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("aad", "text"),
    [
        (binding("checkpoint", "t1", "", "c1"), "checkpoint 'c1' in thread 't1', namespace ''"),
        (
            binding("metadata", "t1", "n:1", "c1"),
            "metadata of checkpoint 'c1' in thread 't1', namespace 'n:1'",
        ),
        (
            binding("write", "t1", "", "c1", "task", -3),
            "write -3 of task 'task' at checkpoint 'c1' in thread 't1', namespace ''",
        ),
        (
            binding("blob", "tʰread", "", "ch", "v"),
            "value of channel 'ch' version 'v' in thread 'tʰread', namespace ''",
        ),
        (b"", "a value not bound to any row"),
        (sealed_aad(b"", "msgpack"), "a value not bound to any row"),
        (
            sealed_aad(binding("checkpoint", "t1", "", "c1"), "msgpack+zstd"),
            "checkpoint 'c1' in thread 't1', namespace ''",
        ),
        (b"other", "the row bound to b'other'"),
        (binding("blob", "t1"), "the row bound to"),
    ],
)
def test_bindings_describe_their_row(aad: bytes, text: str) -> None:
    assert describe_binding(aad).startswith(text)


# -- the core with an encrypting serializer ---------------------------------------------


def test_the_core_seals_without_compressing_unless_asked() -> None:
    core = SaverState(serde=serde())
    assert isinstance(core.serde, Sealer)
    big = {"text": "abc" * 2000}
    type_, data = core.dump_value(big, WHERE)
    assert type_ == "msgpack+aesgcm2:k1"
    assert len(data) > 6000 and b"abc" not in data
    assert core.load_value(type_, data, WHERE) == big
    with pytest.raises(DecryptionError):
        core.load_value(type_, data, binding("blob", "t1", "", "messages", "v2"))
    squeezed = SaverState(serde=serde(compress=True))
    type_, data = squeezed.dump_value(big, WHERE)
    assert type_ == "msgpack+zstd+aesgcm2:k1" and len(data) < 200
    assert squeezed.load_value(type_, data, WHERE) == big
    plain = SaverState(serde=JsonPlusSerializer())
    assert plain.dump_value(big, WHERE)[0] == "msgpack+zstd"


def test_the_stored_type_is_authenticated_too() -> None:
    core = SaverState(serde=serde(serde=JsonPlusSerializer(pickle_fallback=True)))
    type_, data = core.dump_value(b"user supplied bytes", WHERE)
    assert type_ == "bytes+aesgcm2:k1"
    assert core.load_value(type_, data, WHERE) == b"user supplied bytes"
    # another decoder, or the same value passed off as written by 0.1.0
    for forged in ("pickle+aesgcm2:k1", "msgpack+aesgcm2:k1", "bytes+aesgcm:k1"):
        with pytest.raises(DecryptionError, match="authentication failed"):
            core.load_value(forged, data, WHERE)
    core = SaverState(serde=serde(serde=JsonPlusSerializer(), compress=True))
    type_, data = core.dump_value({"text": "abc" * 2000}, WHERE)
    with pytest.raises(DecryptionError, match="authentication failed"):
        core.load_value(type_.replace("+zstd", ""), data, WHERE)


def test_only_the_listed_metadata_keys_stay_readable() -> None:
    core = SaverState(serde=serde(filterable_metadata=("source", "user")))
    metadata = {"source": "loop", "step": 1, "user": "u", "secret": "s"}
    metadata["counters_since_delta_snapshot"] = {"m": 2}
    assert core.metadata_projection(metadata) == {
        "source": "loop",
        "user": "u",
        "counters_since_delta_snapshot": {"m": 2},
    }


def test_filtering_on_an_encrypted_metadata_key_is_refused() -> None:
    core = SaverState(serde=serde())
    with pytest.raises(InvalidInputError, match="'secret': it is stored encrypted"):
        next(list_op(core, None, filter={"step": 1, "secret": "x"}))
    assert next(list_op(core, None, filter={"step": 1, "source": "loop"})).name == (
        "list_checkpoints_sealed"
    )
    plain = SaverState(serde=JsonPlusSerializer())
    assert next(list_op(plain, None, filter={"secret": "x"})).name == "list_checkpoints"


def test_copy_thread_goes_server_side_without_encryption() -> None:
    stmts, _ = drive(copy_thread_op(SaverState(), "a", "b"), [[], []])
    assert [s.name for s in stmts] == ["lock_thread_for_saving", "copy_thread"]


def test_copy_thread_reseals_every_value_for_the_target_thread() -> None:
    s = serde()
    core = SaverState(serde=s)
    core.copy_batch_size = 1

    def sealed(kind: str, *where: Any, value: Any = None, columns: Any = ()) -> Any:
        value = {"kind": kind} if value is None else value
        return core.dump_value(value, binding(kind, "src", *where), columns)

    record: dict[str, Any] = {"channel_values": {}}
    add_structure(record, parent=None, versions={"items": "v1"}, stored=["items"])
    ck_type, ck = sealed("checkpoint", "", "c1", value=record)
    md_type, md = sealed("metadata", "", "c1", columns=("",))
    bl_type, bl = sealed("blob", "", "items", "v1", columns=(None,))
    wr_type, wr = sealed("write", "", "c1", "task", 0, columns=("items", ""))
    page = {
        "checkpoint_ns": "",
        "checkpoint_id": "c1",
        "parent_checkpoint_id": None,
        "sealed_parent_id": "",
        "run_id": None,
        "type": ck_type,
        "checkpoint": ck,
        "channel_versions": '{"items": "v1"}',
        "inline_channels": "[]",
        "metadata_type": md_type,
        "metadata_blob": md,
        "metadata": "{}",
        "created_at": None,
    }
    blob = {
        "kind": "v",
        "thread_id": "src",
        "checkpoint_ns": "",
        "channel": "items",
        "version": "v1",
        "type": bl_type,
        "blob": bl,
        "base_version": None,
    }
    empty = {
        "kind": "v",
        "thread_id": "src",
        "checkpoint_ns": "",
        "channel": "gone",
        "version": "v0",
        "type": "empty",
        "blob": None,
        "base_version": None,
    }
    write = {
        "checkpoint_ns": "",
        "checkpoint_id": "c1",
        "task_id": "task",
        "task_path": "",
        "idx": 0,
        "channel": "items",
        "type": wr_type,
        "blob": wr,
    }
    op = copy_thread_op(core, "src", "dst")
    exists = {"kind": "c", "thread_id": "src", "checkpoint_ns": "", "checkpoint_id": "c1"}
    stmts, _ = drive(op, [[], [page], [blob, empty, exists], [write], [], []])
    names = [st.name for st in stmts[1:]]
    assert stmts[0].name == "lock_thread_for_saving"
    assert names == [
        "thread_checkpoints_page",
        "listed_values",
        "thread_writes_of_checkpoints",
        "insert_copied_rows",
        "thread_checkpoints_page",
    ]
    insert = stmts[4].params
    assert insert["thread_id"] == "dst"
    assert insert["blob_type"][1] == "empty" and insert["blob_blob"][1] is None
    assert stmts[5].params["after_id"] == "c1"

    def opened(kind: str, type_: str, data: bytes, *where: Any, columns: Any = ()) -> Any:
        return core.load_value(type_, data, binding(kind, "dst", *where), columns)

    assert opened("checkpoint", insert["type"][0], insert["checkpoint"][0], "", "c1")
    meta = opened(
        "metadata", insert["metadata_type"][0], insert["metadata_blob"][0], "", "c1", columns=("",)
    )
    assert meta == {"kind": "metadata"}
    blob_value = opened(
        "blob", insert["blob_type"][0], insert["blob_blob"][0], "", "items", "v1", columns=(None,)
    )
    assert blob_value == {"kind": "blob"}
    write_value = opened(
        "write",
        insert["write_type"][0],
        insert["write_blob"][0],
        "",
        "c1",
        "task",
        0,
        columns=("items", ""),
    )
    assert write_value == {"kind": "write"}
    assert insert["sealed_parent_id"] == [""]
    with pytest.raises(DecryptionError):
        core.load_value(
            insert["type"][0], insert["checkpoint"][0], binding("checkpoint", "src", "", "c1")
        )


# -- rotation ops -----------------------------------------------------------------------


def test_value_counts_are_grouped_by_key_label() -> None:
    rows = [
        {"kind": "blobs", "type": "msgpack+aesgcm2:k1", "n": 2},
        {"kind": "blobs", "type": "msgpack+zstd+aesgcm2:k1", "n": 1},
        {"kind": "writes", "type": "json+aesgcm2:k1", "n": 2},
        {"kind": "writes", "type": "msgpack+aesgcm:k1", "n": 5},
        {"kind": "checkpoints", "type": "msgpack+zstd", "n": 1},
        {"kind": "metadata", "type": None, "n": 1},
        {"kind": "blobs", "type": "msgpack+aes", "n": 4},
        {"kind": "items", "type": "json+aesgcm2:k1", "n": 7},
    ]
    _, counts = drive(value_counts_op(), [rows])
    assert counts["k1"] == {"checkpoints": 0, "metadata": 0, "blobs": 3, "writes": 2, "items": 7}
    assert counts["(plaintext)"]["checkpoints"] == counts["(plaintext)"]["metadata"] == 1
    assert not_active(counts, "k1") == {"(plaintext)": 2, "(langgraph-eax)": 4, "k1 (0.1.0)": 5}
    assert not_active(counts, "k2")["k1"] == 3 + 2 + 7


def test_a_rotation_page_reseals_under_the_active_key_guarded_by_the_old_value() -> None:
    old = serde()
    new = SaverState(serde=serde(keys={"k2": K2, "k1": K1}))
    rows = []
    for version in ("v1", "v2"):
        type_, data = SaverState(serde=old).dump_value(
            [version], binding("blob", "t", "", "c", version), (None,)
        )
        rows.append(
            {
                "thread_id": "t",
                "checkpoint_ns": "",
                "channel": "c",
                "version": version,
                "base_version": None,
                "type": type_,
                "blob": data,
            }
        )
    stmts, result = drive(rotate_page_op(new, "blobs", None, 2), [rows, [rows[1]]])
    assert stmts[0].name == "rotation_blobs_page"
    assert stmts[0].params["suffix"] == "+aesgcm2:k2"
    update = stmts[1].params
    assert update["old_type"] == [r["type"] for r in rows]
    assert update["old_base"] == [None, None]
    assert all(t == "msgpack+aesgcm2:k2" for t in update["type"])
    assert new.load_value(
        update["type"][0], update["blob"][0], binding("blob", "t", "", "c", "v1"), (None,)
    ) == ["v1"]
    # one row changed meanwhile: one value rotated, one skipped; a full page continues
    assert result[0] == 1 and result[1] == 1 and result[2] is rows[1]


def _item_row(codec: Any, ns: str, key: str, value: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """A `pgc_store` row as the store writes it with `codec`'s serializer."""
    from pgcheckpoint.store.plans import namespace_labels
    from pgcheckpoint.store.values import encode_value

    type_, data, doc = encode_value(
        codec, namespace_labels(ns), key, value, max_bytes=1 << 20, **kw
    )
    return {"ns": ns, "key": key, "type": type_, "value": data, "doc": json.loads(doc)}


def test_a_rotation_page_of_store_items_reseals_them_bound_to_their_item() -> None:
    from pgcheckpoint.store.values import decode_value

    new = SaverState(serde=serde(keys={"k2": K2, "k1": K1}, allow_plaintext=True))
    sealed = _item_row(
        SaverState(serde=serde()),
        "u.1",
        "a",
        {"kind": "p", "t": "x"},
        filterable=frozenset({"kind"}),
    )
    plain = _item_row(
        SaverState(), "u.1", "b", {"kind": "q", "t": "secret", "n": 2**70}, filterable=None
    )
    assert plain["type"] == "json" and plain["doc"] == {"kind": "q", "t": "secret", "n": 2**70}
    op = rotate_page_op(new, "items", None, 10, store_filterable=frozenset({"kind"}))
    stmts, result = drive(op, [[sealed, plain], [sealed, plain]])
    assert [s.name for s in stmts] == ["rotation_items_page", "rotation_update_items"]
    assert stmts[0].params["after_ns"] is None
    update = stmts[1].params
    assert update["ns"] == ["u.1", "u.1"] and update["key"] == ["a", "b"]
    assert update["old_type"] == [sealed["type"], "json"]
    assert [json.loads(d) for d in update["old_doc"]] == [sealed["doc"], plain["doc"]]
    assert all(t == "json+aesgcm2:k2" for t in update["type"])
    # the sealed item keeps its readable fields; the plain one keeps only `kind`
    assert update["doc"] == [None, '{"kind": "q"}']
    assert b"secret" not in update["value"][1]
    for i, (key, doc, value) in enumerate(
        [
            ("a", sealed["doc"], {"kind": "p", "t": "x"}),
            ("b", {"kind": "q"}, {"kind": "q", "t": "secret", "n": 2**70}),
        ]
    ):
        assert (
            decode_value(new, "u.1", key, update["type"][i], update["value"][i], doc, sealed=True)
            == value
        )
    assert result == (2, 0, None)


def test_a_rotation_refuses_an_item_whose_readable_field_was_altered() -> None:
    both = SaverState(serde=serde(keys={"k2": K2, "k1": K1}))
    row = _item_row(
        SaverState(serde=serde()), "u", "a", {"kind": "p"}, filterable=frozenset({"kind"})
    )
    row["doc"] = {"kind": "other"}
    with pytest.raises(DecryptionError, match="altered"):
        drive(rotate_page_op(both, "items", None, 10), [[row]])
    # an item in clear needs allow_plaintext, as every other value does
    plain = _item_row(SaverState(), "u", "b", {"kind": "p"}, filterable=None)
    with pytest.raises(DecryptionError, match="stored unencrypted"):
        drive(rotate_page_op(both, "items", None, 10), [[plain]])


def test_rotation_refuses_a_serde_that_does_not_encrypt() -> None:
    with pytest.raises(InvalidInputError, match="EncryptedSerde"):
        next(rotate_page_op(SaverState(), "blobs", None, 10))


def test_strict_msgpack_allowlists_reach_the_inner_serializer() -> None:
    inner = JsonPlusSerializer(allowed_msgpack_modules=[("my.module", "Other")])
    s = serde(serde=inner)
    core = SaverState(serde=s)
    clone = core.with_allowlist([("my.module", "Thing")])
    assert clone is not core and core.serde is s
    assert isinstance(clone.serde, EncryptedSerde) and clone.serde.active == "k1"
    assert clone.serde.inner is not inner
    assert clone.serde.loads_typed(s.dumps_typed({"a": 1})) == {"a": 1}
    assert core.with_allowlist([("my.module", "Other")]) is core


def test_one_widened_copy_per_allowlist_with_its_own_decoded_values() -> None:
    core = SaverState(serde=JsonPlusSerializer(allowed_msgpack_modules=[("my.module", "Other")]))
    assert core.seed_cache.keep(("t", "", "m", "d"), ["decoded by the narrower serializer"])
    clone = core.with_allowlist([("my.module", "Thing")])
    assert clone is not core
    assert core.with_allowlist([("my.module", "Thing")]) is clone  # LangGraph asks every run
    assert core.with_allowlist([("my.module", "Another")]) is not clone
    # what a serializer decodes depends on its allowlist; stored bytes do not
    assert clone.seed_cache.lookup(("t", "", "m", "d")) is MISSING
    assert clone.write_cache.kind != core.write_cache.kind
    assert clone.append_cache is core.append_cache
    # one memory budget for the saver and its copies
    assert clone.caches is core.caches
