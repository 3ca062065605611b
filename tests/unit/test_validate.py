"""An argument of the wrong type is a `TypeError`, as Python code and the official saver raise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pgcheckpoint import InvalidInputError, WrongTypeError
from pgcheckpoint.validate import check_count, check_id, check_id_list, check_schema

WRONG_TYPES: list[tuple[Callable[[], Any], str]] = [
    (lambda: check_id_list("thread_ids", "ab"), "not a str ('ab'); pass ['ab'] for one"),
    (lambda: check_id_list("run_ids", 7, kind="run_id"), "list of run ids, not an int (7)"),
    (lambda: check_id_list("thread_ids", {"a": 1}), "not a dict"),
    (lambda: check_id_list("thread_ids", b"ab"), "not a bytes"),
    (lambda: check_id("thread_id", b"t"), "must be a string, not bytes"),
    (lambda: check_id("thread_id", ["t"]), "pass one id"),
    (lambda: check_id("thread_id", True), "not bool"),
    (lambda: check_count("limit", "3"), "must be an int, not str"),
    (lambda: check_schema(5), "must be a string, not int"),
]


@pytest.mark.parametrize(("call", "message"), WRONG_TYPES)
def test_a_wrong_type_is_a_type_error_and_an_invalid_input_error(
    call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(TypeError) as refused:
        call()
    assert isinstance(refused.value, WrongTypeError)
    assert isinstance(refused.value, InvalidInputError)  # what pgcheckpoint's handlers catch
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda: check_id("thread_id", "t\x00"),
        lambda: check_id("thread_id", None),
        lambda: check_count("limit", -1),
        lambda: check_schema("pg_x"),
    ],
)
def test_a_wrong_value_of_the_right_type_stays_a_value_error(call: Callable[[], Any]) -> None:
    with pytest.raises(InvalidInputError) as refused:
        call()
    assert not isinstance(refused.value, TypeError)
