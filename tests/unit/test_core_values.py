"""The core's pure helpers: metadata projection and matching, ids, channel versions."""

from __future__ import annotations

import math
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest

from pgcheckpoint import InvalidInputError
from pgcheckpoint.codec.metadata import json_projection, metadata_matches
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.validate import check_id, thread_of

# -- json_projection ---------------------------------------------------------------


def test_projection_of_plain_json_is_the_value_itself_and_not_lossy() -> None:
    value = {
        "source": "loop",
        "step": 3,
        "parents": {"": "1ef"},
        "nested": {"list": [1, 2.5, None, True, {"deep": ["x"]}], "empty": {}},
        "unicode": "ünïcødé ✓ \U0001f600",
    }
    assert json_projection(value) == (value, False)


@pytest.mark.parametrize(
    ("value", "projected"),
    [
        ({"a": "x\x00y"}, {"a": "x\ufffdy"}),
        ({"a": {"b": ["ok", "\x00"]}}, {"a": {"b": ["ok", "\ufffd"]}}),
        ({"k\x00ey": 1}, {"k\ufffdey": 1}),
        ({"a": "\ud800"}, {"a": "?"}),
        ({"a": math.inf, "b": -math.inf}, {"a": "inf", "b": "-inf"}),
        ({"a": math.nan}, {"a": "nan"}),
        ({"a": b"raw"}, {"a": "b'raw'"}),
        ({"a": {1, 2}}, {"a": str({1, 2})}),
    ],
    ids=["nul", "nested-nul", "nul-in-key", "surrogate", "inf", "nan", "bytes", "set"],
)
def test_projection_replaces_what_jsonb_cannot_hold_and_says_so(
    value: dict[str, Any], projected: dict[str, Any]
) -> None:
    assert json_projection(value) == (projected, True)


def test_projection_turns_tuples_into_lists_and_keys_into_strings() -> None:
    assert json_projection({"t": (1, (2, 3)), 4: "four"}) == (
        {"t": [1, [2, 3]], "4": "four"},
        False,
    )


def test_projection_of_other_objects_is_their_text() -> None:
    when = datetime(2024, 1, 2, tzinfo=timezone.utc)
    ident = uuid.UUID(int=1)
    assert json_projection({"when": when, "id": ident}) == (
        {"when": str(when), "id": str(ident)},
        True,
    )


def test_projection_leaves_its_input_alone() -> None:
    value = {"a": ["x\x00"]}
    json_projection(value)
    assert value == {"a": ["x\x00"]}


# -- metadata_matches ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "filter", "expected"),
    [
        ({"a": 1, "b": 2}, {}, True),
        ({"a": 1, "b": 2}, {"a": 1}, True),
        ({"a": 1}, {"a": 2}, False),
        ({"a": 1}, {"b": 1}, False),
        ({"a": None}, {"a": None}, True),
        ({}, {"a": None}, False),
        ({"a": {"b": {"c": 1, "d": 2}}}, {"a": {"b": {"c": 1}}}, True),
        ({"a": {"b": {"c": 1}}}, {"a": {"b": {"c": 1, "d": 2}}}, False),
        ({"a": {"b": 1}}, {"a": "b"}, False),
        ({"a": ["x", "y", "z"]}, {"a": ["z", "x"]}, True),
        ({"a": ["x"]}, {"a": ["x", "w"]}, False),
        ({"a": ["x"]}, {"a": "x"}, False),
        ({"a": [{"b": 1, "c": 2}, {"b": 3}]}, {"a": [{"b": 3}]}, True),
        ({"a": ("x", "y")}, {"a": ["y"]}, True),
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": 1}, {"a": True}, False),
        ({"a": False}, {"a": 0}, False),
        ({"a": True}, {"a": True}, True),
        ({"a": "x\x00y"}, {"a": "x\x00y"}, True),
        ({"a": "x\x00y"}, {"a": "x\ufffdy"}, False),
        ({"a": math.inf}, {"a": math.inf}, True),
    ],
)
def test_metadata_matches_is_jsonb_containment(
    metadata: dict[str, Any], filter: dict[str, Any], expected: bool
) -> None:
    assert metadata_matches(metadata, filter) is expected


# -- ids -------------------------------------------------------------------------------


def test_ids_become_strings() -> None:
    assert check_id("thread_id", 42) == "42"
    assert check_id("thread_id", uuid.UUID(int=5)) == str(uuid.UUID(int=5))
    assert check_id("thread_id", "ünï") == "ünï"


@pytest.mark.parametrize(
    ("kind", "size", "accepted"),
    [
        ("checkpoint_id", 255, True),
        ("checkpoint_id", 256, False),
        ("task_id", 256, False),
        ("thread_id", 1024, True),
        ("thread_id", 1025, False),
    ],
)
def test_ids_are_held_to_their_limit_at_its_edge(kind: str, size: int, accepted: bool) -> None:
    # ASCII ids of the usual length take a shorter path: its edges hold the same limits
    if accepted:
        assert check_id(kind, "x" * size) == "x" * size
    else:
        with pytest.raises(InvalidInputError, match=f"'{kind}' is {size} bytes long"):
            check_id(kind, "x" * size)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "'thread_id' is missing"),
        ("a\x00b", "'thread_id' contains a NUL character"),
        (b"bytes", "'thread_id' must be a string"),
        ("\udc80", "'thread_id' contains an unpaired surrogate"),
        ("x" * 1025, "'thread_id' is 1025 bytes long; the limit is 1024"),
    ],
    ids=["missing", "nul", "bytes", "surrogate", "too-long"],
)
def test_bad_ids_are_refused_with_a_message_that_says_what_to_do(value: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        check_id("thread_id", value)


@pytest.mark.parametrize(
    "config",
    [{}, {"configurable": {}}, {"configurable": {"checkpoint_ns": ""}}, None],
    ids=["empty", "no-configurable-keys", "ns-only", "none"],
)
def test_a_config_without_thread_id_says_so(config: Any) -> None:
    with pytest.raises(InvalidInputError, match="no 'thread_id'") as info:
        thread_of(config)
    assert "config={'configurable': {'thread_id': ...}}" in str(info.value)


def test_thread_of_defaults_the_namespace() -> None:
    assert thread_of({"configurable": {"thread_id": 7, "checkpoint_ns": None}}) == ("7", "")
    assert thread_of({"configurable": {"thread_id": "t", "checkpoint_ns": "a:1"}}) == ("t", "a:1")


# -- get_next_version ---------------------------------------------------------------


def test_next_version_is_strictly_increasing_as_a_string() -> None:
    core = SaverState()
    version = None
    seen = []
    for _ in range(1200):  # crosses 9 -> 10, 99 -> 100 and 999 -> 1000
        version = core.get_next_version(version, None)
        seen.append(version)
    assert seen == sorted(seen)
    assert len(set(seen)) == len(seen)
    assert [int(v.split(".")[0]) for v in seen] == list(range(1, 1201))


def test_next_version_continues_from_int_and_official_saver_versions() -> None:
    core = SaverState()
    assert int(core.get_next_version(41, None).split(".")[0]) == 42  # type: ignore[arg-type]
    # `langgraph-checkpoint-postgres` writes f"{n:032}.{random:016}"
    official = f"{9:032}.{0.123456789:016}"
    following = core.get_next_version(official, None)
    assert following > official
    assert following.startswith(f"{10:032}.")
    assert len(following.split(".", 1)[0]) == 32
