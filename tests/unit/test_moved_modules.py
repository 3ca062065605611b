"""Module paths earlier releases documented keep working for one release, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest

import pgcheckpoint
from pgcheckpoint import PostgresSaver, ThreadLock, libpq_dsn, thread_lock_key
from pgcheckpoint.schema import upgrade


@pytest.fixture(autouse=True)
def forget_old_paths() -> None:
    for name in pgcheckpoint.MOVED_MODULES:
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("old", "name", "same_as"),
    [
        ("pgcheckpoint.locking", "thread_lock_key", thread_lock_key),
        ("pgcheckpoint.locking", "ThreadLock", ThreadLock),
        ("pgcheckpoint.migrate", "upgrade", upgrade),
        ("pgcheckpoint.saver", "PostgresSaver", PostgresSaver),
    ],
)
def test_an_old_path_gives_the_same_object_with_a_deprecation_warning(
    old: str, name: str, same_as: object
) -> None:
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated"):
        module = importlib.import_module(old)
    assert getattr(module, name) is same_as


def test_every_old_path_imports_and_names_where_to_go() -> None:
    for old, homes in pgcheckpoint.MOVED_MODULES.items():
        with pytest.warns(DeprecationWarning, match=homes[0].replace(".", r"\.")):
            importlib.import_module(old)


def test_drivers_libpq_dsn_still_resolves_with_a_warning() -> None:
    import pgcheckpoint.drivers as drivers

    with pytest.warns(DeprecationWarning, match="import libpq_dsn from pgcheckpoint"):
        assert drivers.libpq_dsn is libpq_dsn


def test_a_name_the_old_module_never_had_is_an_attribute_error() -> None:
    with pytest.warns(DeprecationWarning):
        module = importlib.import_module("pgcheckpoint.official")
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        module.nothing_here  # noqa: B018
