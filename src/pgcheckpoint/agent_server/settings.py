"""What the Agent Server factories read from the environment, checked once at start.

The server calls a factory with no arguments: the blocks of `langgraph.json`
reach it only as environment variables (`LANGGRAPH_CHECKPOINTER` holds the
`checkpointer` block: `path`, `ttl`, `serde`), and `langgraph dev` sets
`DATABASE_URI` to `:memory:` whatever the user's environment says. Every
variable is read here, into frozen settings, so a bad one fails the server's
start with one line that names it.

Example:
    >>> settings = ServerSettings.from_env({"PGCHECKPOINT_DSN": "postgresql://u@h/app"})
    >>> settings.dsn, settings.pool_max_size, settings.ttl
    ('postgresql://u@h/app', 10, None)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..core.deletes import PRUNE_STRATEGIES
from ..errors import InvalidInputError
from ..validate import check_schema, libpq_dsn

__all__ = ["DSN_VARIABLES", "ServerSettings", "TTLPolicy", "sweep_seconds"]

# Where the database comes from, first set wins (DATABASE_URI is skipped when it
# is ":memory:", which `langgraph dev` sets).
DSN_VARIABLES = ("PGCHECKPOINT_DSN", "POSTGRES_URI", "DATABASE_URI")
IN_MEMORY = ":memory:"
CHECKPOINTER_BLOCK = "LANGGRAPH_CHECKPOINTER"
# The server's own variable for the thread TTL; it wins over the block's `ttl`,
# as in the server.
THREAD_TTL_VARIABLE = "LANGGRAPH_THREAD_TTL"
SWEEP_SECONDS_VARIABLE = "PGCHECKPOINT_TTL_SWEEP_SECONDS"
# The server's defaults for a `ttl` block that leaves them out.
DEFAULT_SWEEP_MINUTES = 5.0
DEFAULT_SWEEP_LIMIT = 10_000


@dataclass(frozen=True)
class TTLPolicy:
    """The thread TTL the factory sweeps: the `ttl` block of `langgraph.json`.

    Attributes:
        strategy: `delete` (threads idle past the TTL go whole) or
            `keep_latest` (they keep their latest checkpoint per namespace).
        ttl: How long a thread may stay idle: the age of its newest checkpoint.
        interval: Time between two sweeps (`sweep_interval_minutes`, or
            `PGCHECKPOINT_TTL_SWEEP_SECONDS`).
        sweep_limit: Threads one sweep looks at, at most.

    Example:
        >>> TTLPolicy.from_block({"strategy": "keep_latest", "default_ttl": 60}).ttl
        datetime.timedelta(seconds=3600)
    """

    strategy: str
    ttl: timedelta
    interval: timedelta
    sweep_limit: int = DEFAULT_SWEEP_LIMIT

    @classmethod
    def from_block(
        cls, block: Mapping[str, Any], *, source: str = "ttl", interval_seconds: float | None = None
    ) -> TTLPolicy | None:
        """The policy of a `ttl` block; None when it sets no `default_ttl`.

        Example:
            >>> TTLPolicy.from_block({"default_ttl": 5}).interval
            datetime.timedelta(seconds=300)
        """
        if not isinstance(block, Mapping):
            raise InvalidInputError(f"{source} must be a JSON object, not {block!r}")
        strategy = block.get("strategy") or "delete"
        if strategy not in PRUNE_STRATEGIES:
            raise InvalidInputError(
                f"{source}.strategy {strategy!r} is not one of {PRUNE_STRATEGIES!r}"
            )
        minutes = block.get("default_ttl")
        if minutes is None:
            return None
        ttl = _minutes(minutes, f"{source}.default_ttl")
        every = block.get("sweep_interval_minutes")
        interval = (
            timedelta(minutes=DEFAULT_SWEEP_MINUTES)
            if every is None
            else _minutes(every, f"{source}.sweep_interval_minutes")
        )
        if interval_seconds is not None:
            interval = timedelta(seconds=interval_seconds)
        limit = block.get("sweep_limit")
        if limit is None:
            limit = DEFAULT_SWEEP_LIMIT
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInputError(f"{source}.sweep_limit must be a positive int, not {limit!r}")
        return cls(strategy, ttl, interval, limit)


@dataclass(frozen=True)
class ServerSettings:
    """The checkpointer factory's settings, as the environment gives them.

    Attributes:
        dsn: The database (`PGCHECKPOINT_DSN`, else `POSTGRES_URI`, else
            `DATABASE_URI` unless it is `:memory:`).
        dsn_source: The variable the DSN came from, for messages.
        schema: `PGCHECKPOINT_SCHEMA` (default `public`).
        pool_min_size: `PGCHECKPOINT_POOL_MIN_SIZE` (default 1).
        pool_max_size: `PGCHECKPOINT_POOL_MAX_SIZE` (default 10).
        auto_migrate: `PGCHECKPOINT_AUTO_MIGRATE=1`: create or upgrade the
            schema at start instead of refusing to start.
        encrypt: `PGCHECKPOINT_AES_KEYS` (or `LANGGRAPH_AES_KEY`) is set.
        ttl: The thread TTL to sweep, or None (no `default_ttl`, or
            `PGCHECKPOINT_TTL_SWEEP_SECONDS=0`).

    Example:
        >>> ServerSettings.from_env({"DATABASE_URI": ":memory:"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        pgcheckpoint.errors.InvalidInputError: no database for pgcheckpoint: ...
    """

    dsn: str
    dsn_source: str
    schema: str = "public"
    pool_min_size: int = 1
    pool_max_size: int = 10
    auto_migrate: bool = False
    encrypt: bool = False
    ttl: TTLPolicy | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerSettings:
        """Read every setting of the checkpointer factory; a bad value names its variable.

        Example:
            >>> env = {"POSTGRES_URI": "postgresql://u@h/app", "PGCHECKPOINT_POOL_MAX_SIZE": "4"}
            >>> ServerSettings.from_env(env).pool_max_size
            4
        """
        env = os.environ if environ is None else environ
        dsn, source = _dsn(env)
        schema = env.get("PGCHECKPOINT_SCHEMA") or "public"
        try:
            schema = check_schema(schema)
        except InvalidInputError as exc:
            raise InvalidInputError(f"PGCHECKPOINT_SCHEMA: {exc}") from None
        low = _count(env, "PGCHECKPOINT_POOL_MIN_SIZE", 1, minimum=0)
        high = _count(env, "PGCHECKPOINT_POOL_MAX_SIZE", max(10, low), minimum=2)
        if low > high:
            raise InvalidInputError(
                f"PGCHECKPOINT_POOL_MIN_SIZE ({low}) is above PGCHECKPOINT_POOL_MAX_SIZE ({high})"
            )
        from ..codec.labels import KEYS_ENV, LANGGRAPH_KEY_ENV

        return cls(
            dsn=dsn,
            dsn_source=source,
            schema=schema,
            pool_min_size=low,
            pool_max_size=high,
            auto_migrate=_switch(env, "PGCHECKPOINT_AUTO_MIGRATE"),
            encrypt=bool(env.get(KEYS_ENV, "").strip() or env.get(LANGGRAPH_KEY_ENV)),
            ttl=_ttl(env),
        )


def _dsn(env: Mapping[str, str]) -> tuple[str, str]:
    for name in DSN_VARIABLES:
        value = (env.get(name) or "").strip()
        if value and value != IN_MEMORY:
            if value == "embedded":
                raise InvalidInputError(
                    f"{name}=embedded names the command line's embedded server, which the "
                    "Agent Server's factory does not start: give the DSN of a running PostgreSQL"
                )
            try:
                return libpq_dsn(value), name
            except InvalidInputError as exc:
                raise InvalidInputError(f"{name}: {exc}") from None
    raise InvalidInputError(
        "no database for pgcheckpoint: set PGCHECKPOINT_DSN (or POSTGRES_URI) to a libpq "
        "string or URI such as postgresql://user@host:5432/app (`langgraph dev` sets "
        f"DATABASE_URI to {IN_MEMORY!r}, which is not one)"
    )


def _count(env: Mapping[str, str], name: str, default: int, *, minimum: int) -> int:
    text = (env.get(name) or "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise InvalidInputError(f"{name}={text!r} must be a whole number of at least {minimum}")
    return value


def _switch(env: Mapping[str, str], name: str) -> bool:
    text = (env.get(name) or "").strip().lower()
    if text in ("", "0", "false", "off", "no"):
        return False
    if text in ("1", "true", "on", "yes"):
        return True
    raise InvalidInputError(f"{name}={text!r} is not understood; set it to 1 or 0")


def _minutes(value: Any, source: str) -> timedelta:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidInputError(f"{source} must be a positive number of minutes, not {value!r}")
    return timedelta(minutes=value)


def sweep_seconds(env: Mapping[str, str]) -> float | None:
    """`PGCHECKPOINT_TTL_SWEEP_SECONDS`, checked: None when unset, 0 for no sweeper.

    Example:
        >>> sweep_seconds({"PGCHECKPOINT_TTL_SWEEP_SECONDS": "0.5"})
        0.5
    """
    seconds_text = (env.get(SWEEP_SECONDS_VARIABLE) or "").strip()
    if not seconds_text:
        return None
    try:
        seconds = float(seconds_text)
    except ValueError:
        seconds = -1.0
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidInputError(
            f"{SWEEP_SECONDS_VARIABLE}={seconds_text!r} must be a number of seconds "
            "(0 turns the sweeper off)"
        )
    return seconds


def _ttl(env: Mapping[str, str]) -> TTLPolicy | None:
    seconds = sweep_seconds(env)
    if seconds == 0:
        return None
    own = (env.get(THREAD_TTL_VARIABLE) or "").strip()
    if own:
        # the server's forms: minutes alone, or a JSON object like the block's
        block: Any
        if own.startswith("{"):
            block = _json(own, THREAD_TTL_VARIABLE)
        else:
            block = {"default_ttl": _number(own, THREAD_TTL_VARIABLE)}
        return TTLPolicy.from_block(block, source=THREAD_TTL_VARIABLE, interval_seconds=seconds)
    text = (env.get(CHECKPOINTER_BLOCK) or "").strip()
    if not text:
        return None
    config = _json(text, CHECKPOINTER_BLOCK)
    if not isinstance(config, Mapping):
        raise InvalidInputError(f"{CHECKPOINTER_BLOCK} must be a JSON object, not {text!r}")
    ttl = config.get("ttl")
    if ttl is None:
        return None
    return TTLPolicy.from_block(ttl, source="checkpointer.ttl", interval_seconds=seconds)


def _json(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(f"{name} is not valid JSON: {exc}") from None


def _number(text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidInputError(
            f"{name}={text!r} must be a number of minutes or a JSON object"
        ) from None
