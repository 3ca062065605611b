"""What the Agent Server factory reads from the environment, without a server or a database.

The server hands the factory its `langgraph.json` blocks only as environment
variables, so every setting is parsed here: the database, the pool, the
switches, and the `ttl` block with its strategies and units (minutes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest

from pgcheckpoint import InvalidInputError
from pgcheckpoint.agent_server.settings import ServerSettings, TTLPolicy

DSN = "postgresql://app@db.internal:5432/app"


def settings(**env: str) -> ServerSettings:
    return ServerSettings.from_env(env)


def checkpointer_block(**block: Any) -> str:
    return json.dumps({"path": "pgcheckpoint.agent_server.checkpointer", **block})


def test_the_database_comes_from_the_first_variable_set_and_not_from_memory() -> None:
    assert settings(PGCHECKPOINT_DSN=DSN, POSTGRES_URI="postgresql://x@y/z").dsn == DSN
    chosen = settings(POSTGRES_URI=DSN, DATABASE_URI="postgresql://x@y/z")
    assert (chosen.dsn, chosen.dsn_source) == (DSN, "POSTGRES_URI")
    # `langgraph dev` sets DATABASE_URI to ":memory:" whatever the user's environment says
    assert settings(DATABASE_URI=":memory:", POSTGRES_URI=DSN).dsn == DSN
    assert settings(DATABASE_URI="postgresql+psycopg://u@h/db").dsn == "postgresql://u@h/db"
    with pytest.raises(InvalidInputError, match=r"set PGCHECKPOINT_DSN .*':memory:'"):
        settings(DATABASE_URI=":memory:")
    with pytest.raises(InvalidInputError, match=r"^PGCHECKPOINT_DSN: invalid connection string"):
        settings(PGCHECKPOINT_DSN="host=h port")
    # the command line's `embedded` starts a server; the factory does not
    with pytest.raises(InvalidInputError, match="PGCHECKPOINT_DSN=embedded names the command"):
        settings(PGCHECKPOINT_DSN="embedded")


def test_pool_schema_switches_and_keys() -> None:
    plain = settings(PGCHECKPOINT_DSN=DSN)
    assert (plain.pool_min_size, plain.pool_max_size, plain.schema) == (1, 10, "public")
    assert (plain.auto_migrate, plain.encrypt, plain.ttl) == (False, False, None)
    tuned = settings(
        PGCHECKPOINT_DSN=DSN,
        PGCHECKPOINT_POOL_MIN_SIZE="2",
        PGCHECKPOINT_POOL_MAX_SIZE="4",
        PGCHECKPOINT_SCHEMA="tenant a",
        PGCHECKPOINT_AUTO_MIGRATE="1",
        PGCHECKPOINT_AES_KEYS="k1:c2VjcmV0",
    )
    assert (tuned.pool_min_size, tuned.pool_max_size, tuned.schema) == (2, 4, "tenant a")
    assert tuned.auto_migrate and tuned.encrypt
    assert settings(PGCHECKPOINT_DSN=DSN, LANGGRAPH_AES_KEY="x" * 32).encrypt
    assert settings(PGCHECKPOINT_DSN=DSN, PGCHECKPOINT_POOL_MIN_SIZE="12").pool_max_size == 12


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("PGCHECKPOINT_POOL_MAX_SIZE", "1", "at least 2"),
        ("PGCHECKPOINT_POOL_MAX_SIZE", "ten", "whole number"),
        ("PGCHECKPOINT_POOL_MIN_SIZE", "-1", "at least 0"),
        ("PGCHECKPOINT_AUTO_MIGRATE", "maybe", "set it to 1 or 0"),
        ("PGCHECKPOINT_SCHEMA", "pg_mine", "PGCHECKPOINT_SCHEMA"),
        ("PGCHECKPOINT_TTL_SWEEP_SECONDS", "soon", "number of seconds"),
        ("LANGGRAPH_THREAD_TTL", "a week", "number of minutes"),
        ("LANGGRAPH_CHECKPOINTER", "{path", "not valid JSON"),
    ],
)
def test_a_bad_variable_is_named(variable: str, value: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says) as raised:
        settings(PGCHECKPOINT_DSN=DSN, **{variable: value})
    assert "\n" not in str(raised.value)
    if variable.startswith("PGCHECKPOINT_"):
        assert variable in str(raised.value)


def test_min_above_max_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"MIN_SIZE .4. is above .*MAX_SIZE .3."):
        settings(
            PGCHECKPOINT_DSN=DSN, PGCHECKPOINT_POOL_MIN_SIZE="4", PGCHECKPOINT_POOL_MAX_SIZE="3"
        )


def test_the_ttl_block_of_langgraph_json_in_minutes() -> None:
    block = checkpointer_block(
        ttl={"strategy": "keep_latest", "default_ttl": 90, "sweep_interval_minutes": 10},
        serde={"pickle_fallback": False},
    )
    ttl = settings(PGCHECKPOINT_DSN=DSN, LANGGRAPH_CHECKPOINTER=block).ttl
    assert ttl == TTLPolicy("keep_latest", timedelta(minutes=90), timedelta(minutes=10), 10_000)
    # the server's defaults: delete, a sweep every 5 minutes
    ttl = settings(
        PGCHECKPOINT_DSN=DSN, LANGGRAPH_CHECKPOINTER=checkpointer_block(ttl={"default_ttl": 0.5})
    ).ttl
    assert ttl == TTLPolicy("delete", timedelta(seconds=30), timedelta(minutes=5), 10_000)
    # no ttl, or one without default_ttl: nothing to sweep
    assert settings(PGCHECKPOINT_DSN=DSN, LANGGRAPH_CHECKPOINTER=checkpointer_block()).ttl is None
    no_default = checkpointer_block(ttl={"strategy": "delete", "sweep_interval_minutes": 1})
    assert settings(PGCHECKPOINT_DSN=DSN, LANGGRAPH_CHECKPOINTER=no_default).ttl is None


def test_the_servers_own_variable_wins_and_the_sweep_interval_can_be_seconds() -> None:
    block = checkpointer_block(ttl={"strategy": "keep_latest", "default_ttl": 90})
    ttl = settings(
        PGCHECKPOINT_DSN=DSN, LANGGRAPH_CHECKPOINTER=block, LANGGRAPH_THREAD_TTL="15"
    ).ttl
    assert ttl is not None and (ttl.strategy, ttl.ttl) == ("delete", timedelta(minutes=15))
    as_json = json.dumps({"strategy": "keep_latest", "default_ttl": 60, "sweep_limit": 50})
    ttl = settings(PGCHECKPOINT_DSN=DSN, LANGGRAPH_THREAD_TTL=as_json).ttl
    assert ttl is not None and (ttl.strategy, ttl.sweep_limit) == ("keep_latest", 50)
    fast = settings(
        PGCHECKPOINT_DSN=DSN, LANGGRAPH_CHECKPOINTER=block, PGCHECKPOINT_TTL_SWEEP_SECONDS="2.5"
    ).ttl
    assert fast is not None and fast.interval == timedelta(seconds=2.5)
    off = settings(
        PGCHECKPOINT_DSN=DSN, LANGGRAPH_CHECKPOINTER=block, PGCHECKPOINT_TTL_SWEEP_SECONDS="0"
    )
    assert off.ttl is None


@pytest.mark.parametrize(
    ("ttl", "says"),
    [
        ({"strategy": "archive", "default_ttl": 5}, "checkpointer.ttl.strategy 'archive'"),
        ({"default_ttl": -5}, "checkpointer.ttl.default_ttl must be a positive number"),
        ({"default_ttl": "5"}, "default_ttl must be a positive number of minutes, not '5'"),
        ({"default_ttl": 5, "sweep_interval_minutes": 0}, "sweep_interval_minutes must be"),
        ({"default_ttl": 5, "sweep_limit": 0}, "sweep_limit must be a positive int"),
        ([5], "checkpointer.ttl must be a JSON object"),
    ],
)
def test_a_bad_ttl_block_says_what_is_wrong(ttl: Any, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        settings(PGCHECKPOINT_DSN=DSN, LANGGRAPH_CHECKPOINTER=checkpointer_block(ttl=ttl))


def test_importing_pgcheckpoint_leaves_the_agent_server_and_its_packages_out() -> None:
    code = (
        "import sys, pgcheckpoint; "
        "assert not [m for m in sys.modules if m.startswith('pgcheckpoint.agent_server')]; "
        "import pgcheckpoint.agent_server; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph_api', 'langgraph_runtime', 'langgraph_runtime_inmem', 'langgraph_sdk', "
        "'langgraph_cli')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
