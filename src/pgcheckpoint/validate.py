"""Checks on what callers pass in: ids, counts, schema names, configs, connection strings.

Example:
    >>> from pgcheckpoint.validate import thread_of
    >>> thread_of({"configurable": {"thread_id": 7}})
    ('7', '')
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from .errors import InvalidInputError, WrongTypeError

__all__ = [
    "MAX_INT4",
    "MAX_SCHEMA_BYTES",
    "check_count",
    "check_id",
    "check_id_list",
    "check_schema",
    "configurable",
    "libpq_dsn",
    "thread_of",
]

# Identifiers go into primary keys; a btree entry holds at most ~2,700 bytes.
_MAX_ID_BYTES = {"thread_id": 1024, "checkpoint_ns": 1024}
_MAX_OTHER_ID_BYTES = 255
# The largest count (batch size, limit, ...) a statement takes as an int4.
MAX_INT4 = 2**31 - 1
# PostgreSQL cuts longer identifiers short (NAMEDATALEN - 1): two longer schema
# names with the same first 63 bytes would be one schema.
MAX_SCHEMA_BYTES = 63


def check_id(kind: str, value: Any) -> str:
    """Validate an identifier before it reaches the database.

    Ints, UUIDs and other scalars are turned into their string form, as
    LangGraph does. Bytes, booleans and collections (a list where one id was
    meant) are refused with `WrongTypeError` (a `TypeError`), NUL characters,
    unpaired surrogates and over-long values with `InvalidInputError`, each
    with a message that says what to change.

    Example:
        >>> check_id("thread_id", 42)
        '42'
    """
    # The usual case, without the isinstance walk below (a put checks six ids):
    # an ASCII string within the smallest limit in characters is within every
    # limit in bytes, and holds no surrogate.
    if (
        type(value) is str
        and len(value) <= _MAX_OTHER_ID_BYTES
        and value.isascii()
        and "\x00" not in value
    ):
        return value
    if value is None:
        raise InvalidInputError(f"{kind!r} is missing; pass it in config['configurable']")
    if isinstance(value, bytes | bytearray | memoryview):
        raise WrongTypeError(f"{kind!r} must be a string, not bytes")
    if isinstance(value, bool) or (isinstance(value, Iterable) and not isinstance(value, str)):
        raise WrongTypeError(
            f"{kind!r} must be a string (or an int or UUID), not {type(value).__name__} "
            f"{_short(value)}; pass one id"
        )
    text = value if isinstance(value, str) else str(value)
    if "\x00" in text:
        raise InvalidInputError(
            f"{kind!r} contains a NUL character, which PostgreSQL text cannot store; "
            "remove it or encode the id (for example as hex)"
        )
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"{kind!r} contains an unpaired surrogate and is not valid unicode; "
            "pass a properly encoded string"
        ) from None
    limit = _MAX_ID_BYTES.get(kind, _MAX_OTHER_ID_BYTES)
    if size > limit:
        raise InvalidInputError(
            f"{kind!r} is {size} bytes long; the limit is {limit} bytes. "
            "Use a shorter id, for example a hash of this one"
        )
    return text


def check_id_list(name: str, values: Any, *, kind: str = "thread_id") -> list[str]:
    """Validate a list of ids (`prune`, `delete_for_runs`): sorted, each once.

    One id given as a string, or anything that is no list, raises
    `WrongTypeError`, a `TypeError` as the official saver raises.

    Example:
        >>> check_id_list("thread_ids", ["b", "a", "b"])
        ['a', 'b']
    """
    ids = kind.replace("_id", " ids")
    if isinstance(values, str):
        # iterating it would take each character for an id
        raise WrongTypeError(
            f"{name} must be a list of {ids}, not a str ({_short(values)}); "
            f"pass [{_short(values)}] for one"
        )
    if not isinstance(values, Iterable) or isinstance(values, bytes | bytearray | Mapping):
        raise WrongTypeError(f"{name} must be a list of {ids}, not {_a(values)} ({_short(values)})")
    return sorted({check_id(kind, v) for v in values})


def check_count(name: str, value: Any, *, minimum: int = 0, maximum: int | None = MAX_INT4) -> int:
    """Validate a whole number an argument gives (a limit, a batch size).

    Example:
        >>> check_count("batch_size", 50, minimum=1)
        50
    """
    if isinstance(value, bool) or not isinstance(value, int):
        kind = type(value).__name__
        raise WrongTypeError(f"{name} must be an int, not {kind} {_short(value)}")
    if value < minimum:
        raise InvalidInputError(f"{name} must be at least {minimum}, not {value}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(f"{name} must be at most {maximum:,}, not {value:,}")
    return value


def check_schema(schema: Any) -> str:
    """Validate a schema name: one PostgreSQL accepts, as it is (quoted, never cut short).

    Any character but NUL, 1 to 63 bytes in UTF-8, and no `pg_` prefix (reserved
    for PostgreSQL's own schemas).

    Example:
        >>> check_schema("Tenant A")
        'Tenant A'
    """
    if not isinstance(schema, str):
        raise WrongTypeError(f"schema must be a string, not {type(schema).__name__}")
    if not schema:
        raise InvalidInputError("schema name is empty; pass a name such as 'public'")
    if "\x00" in schema:
        raise InvalidInputError(f"schema name {schema!r} contains a NUL character; remove it")
    try:
        size = len(schema.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"schema name {schema!r} contains an unpaired surrogate; pass valid unicode"
        ) from None
    if size > MAX_SCHEMA_BYTES:
        raise InvalidInputError(
            f"schema name {schema!r} is {size} bytes long; PostgreSQL allows "
            f"{MAX_SCHEMA_BYTES} and would cut it short, so use a shorter name"
        )
    if schema.startswith("pg_"):
        raise InvalidInputError(
            f"schema name {schema!r} starts with 'pg_', which PostgreSQL reserves for its "
            "own schemas; use another name"
        )
    return schema


def _a(value: Any) -> str:
    """'a str', 'an int': the type of `value` with its article."""
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def configurable(config: RunnableConfig | None) -> dict[str, Any]:
    """A copy of `config["configurable"]`, empty when there is none.

    Example:
        >>> configurable(None), configurable({"configurable": {"thread_id": "t"}})
        ({}, {'thread_id': 't'})
    """
    if not config:
        return {}
    return dict(config.get("configurable") or {})


def thread_of(config: RunnableConfig) -> tuple[str, str]:
    """The validated (thread_id, checkpoint_ns) of a config.

    Example:
        >>> thread_of({"configurable": {"thread_id": "t1"}})
        ('t1', '')
    """
    conf = configurable(config)
    if conf.get("thread_id") is None:
        raise InvalidInputError(
            "config has no 'thread_id': pass config={'configurable': {'thread_id': ...}}"
        )
    thread_id = check_id("thread_id", conf["thread_id"])
    return thread_id, check_id("checkpoint_ns", conf.get("checkpoint_ns") or "")


# SQLAlchemy-style URLs ("postgresql+psycopg://", common in DATABASE_URL) name a
# driver in the scheme, which libpq does not read.
_DRIVER_SCHEME = re.compile(r"^(\s*postgres(?:ql)?)\+\w+://")


def libpq_dsn(dsn: str) -> str:
    """A connection string as libpq reads it; SQLAlchemy-style URLs lose their driver.

    Every form libpq takes passes unchanged, Unix-socket directories included
    (`host=/run/postgresql dbname=app`, `postgresql://app@/app?host=/run/postgresql`,
    `postgresql://app@%2Frun%2Fpostgresql/app`); `postgresql+psycopg://...`
    becomes `postgresql://...`.

    Raises:
        InvalidInputError: libpq cannot parse it (the message says why).

    Example:
        >>> libpq_dsn("postgresql+psycopg://app@/app?host=/run/postgresql")
        'postgresql://app@/app?host=/run/postgresql'
    """
    text = _DRIVER_SCHEME.sub(r"\1://", dsn)
    try:
        conninfo_to_dict(text)
    except ProgrammingError as exc:
        raise InvalidInputError(
            f"invalid connection string: {str(exc).strip()}; write a libpq string "
            "('host=/run/postgresql dbname=app') or URI ('postgresql://user@host/app')"
        ) from None
    return text
