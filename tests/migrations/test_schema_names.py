"""Any schema name PostgreSQL accepts works everywhere, or is refused up front.

Names that once broke something: a `{fragment}` placeholder (expanded inside
the quoted name), `%` (read by psycopg as a placeholder), `$$` (the end of a
revision's `DO $$` block), ` :word` (a bind parameter to SQLAlchemy), quotes,
and a name past PostgreSQL's 63 bytes (cut short, so two such names were one
schema with two sets of lock keys).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance.test_utils import generate_config, generate_metadata
from langgraph.checkpoint.postgres import PostgresSaver as OfficialSaver
from psycopg import sql

from pgcheckpoint import InvalidInputError, PostgresSaver
from pgcheckpoint.cli import EXIT_OK, EXIT_USAGE, main
from pgcheckpoint.schema.migrate import current, downgrade, head, offline_sql, upgrade
from pgcheckpoint.statements.queries import Queries

HOSTILE = [
    "x{level_walk}",
    "y{tuple_writes}%sb",
    "a$$b :c",
    "q\"uo'te",
    "Tenant é\nline",
]
KEYS = "k1:" + "A" * 43 + "="  # 32 zero-ish bytes, base64


def put_thread(saver: PostgresSaver, thread_id: str, steps: int = 3) -> dict[str, object]:
    config = generate_config(thread_id)
    for step in range(steps):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"log": [f"entry {i}" for i in range(step + 1)]}
        checkpoint["channel_versions"] = {"log": saver.get_next_version(None, None) + str(step)}
        config = saver.put(
            config,
            checkpoint,
            generate_metadata(step=step, run_id=f"run-{thread_id}"),
            checkpoint["channel_versions"],
        )
        saver.put_writes(config, [("log", f"write {step}")], f"task-{step}")
    return config


@pytest.mark.parametrize("schema", HOSTILE)
def test_a_hostile_schema_name_works_through_the_api(empty_db_dsn: str, schema: str) -> None:
    with psycopg.connect(empty_db_dsn) as conn:
        saver = PostgresSaver(conn, schema=schema)
        saver.setup()  # every revision
        assert current(empty_db_dsn, schema=schema) == head()
        assert "CREATE TABLE" in offline_sql(schema=schema)
        latest = put_thread(saver, "t1")
        assert saver.get_tuple(latest) is not None
        assert len(list(saver.list(generate_config("t1")))) == 3
        saver.copy_thread("t1", "t2")
        saver.prune(["t2"], strategy="keep_latest")
        assert len(list(saver.list(generate_config("t2")))) == 1
        saver.delete_for_runs(["run-t1"])
        assert saver.get_tuple(generate_config("t1")) is None
        put_thread(saver, "t3")
        with saver.lock_thread("t3") as lock:
            assert lock.schema == schema
        assert saver.prune_keep_last(1).threads == 1
        assert saver.prune_older_than(timedelta(seconds=1), dry_run=True).threads == 0
        saver.delete_thread("t3")
        assert list(saver.list(None)) == []
        with conn.cursor() as cur:
            cur.execute(
                sql.SQL("SELECT count(*) FROM {}.pgc_checkpoints").format(sql.Identifier(schema))
            )
            assert cur.fetchone() == (0,)
    downgrade(empty_db_dsn, "base", schema=schema)
    assert current(empty_db_dsn, schema=schema) is None
    upgrade(empty_db_dsn, schema=schema)


@pytest.mark.parametrize("schema", HOSTILE)
def test_a_hostile_schema_name_works_through_every_command(
    empty_db_dsn: str,
    schema: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dsn = ["--dsn", empty_db_dsn, "--schema", schema]
    monkeypatch.setenv("PGCHECKPOINT_AES_KEYS", KEYS)
    assert main(["migrate", "--sql", "--schema", schema]) == EXIT_OK
    assert main(["migrate", *dsn]) == EXIT_OK
    assert main(["current", "--check", *dsn]) == EXIT_OK
    assert main(["history", *dsn]) == EXIT_OK
    assert main(["grants", "--role", "postgres", *dsn]) == EXIT_OK
    assert main(["grants", "--role", "postgres", "--apply", *dsn]) == EXIT_OK
    with psycopg.connect(empty_db_dsn) as conn:
        put_thread(PostgresSaver(conn, schema=schema), "cli-thread")
    # the official saver's tables, read from public into the hostile schema
    with OfficialSaver.from_conn_string(empty_db_dsn) as official:
        official.setup()
        official.put(generate_config("official"), empty_checkpoint(), generate_metadata(), {})
    assert main(["import-langgraph", *dsn]) == EXIT_OK
    assert main(["stats", *dsn]) == EXIT_OK
    assert main(["threads", *dsn]) == EXIT_OK
    assert main(["show", "cli-thread", *dsn]) == EXIT_OK
    assert main(["show", "cli-thread", "--json", *dsn]) == EXIT_OK
    assert main(["show", "cli-thread", "--dot", *dsn]) == EXIT_OK
    assert main(["show", "cli-thread", "--values", *dsn]) == EXIT_OK
    assert main(["rotate-key", "--dry-run", "--allow-plaintext", *dsn]) == EXIT_OK
    assert main(["rotate-key", "--allow-plaintext", *dsn]) == EXIT_OK
    assert main(["prune", "--keep-last", "1", *dsn]) == EXIT_OK
    # rotate-key sealed the threads in row format 2, which revision 0003 cannot
    # read: the downgrade refuses, changes nothing, and says what to do
    assert main(["downgrade", "base", *dsn]) == 1
    assert "delete those threads" in capsys.readouterr().err
    # the revisions above 0004 (the store's, empty here) went before 0004 refused
    assert main(["migrate", *dsn]) == EXIT_OK
    assert main(["current", "--check", *dsn]) == EXIT_OK
    # after the refusal: on a slow machine the threads are older than a second
    assert main(["prune", "--older-than", "1s", *dsn]) == EXIT_OK
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        saver = PostgresSaver(conn, schema=schema)
        for (thread_id,) in conn.execute(
            sql.SQL("SELECT DISTINCT thread_id FROM {}.pgc_checkpoints").format(
                sql.Identifier(schema)
            )
        ).fetchall():
            saver.delete_thread(thread_id)
    assert main(["downgrade", "base", *dsn]) == EXIT_OK
    assert main(["current", "--check", *dsn]) == 1  # not migrated any more
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # an import from a schema of that name without the official tables says so
    assert main(["migrate", *dsn]) == EXIT_OK
    assert main(["import-langgraph", *dsn, "--from-schema", schema]) == 1
    assert "has no langgraph-checkpoint-postgres table" in capsys.readouterr().err


def test_names_longer_than_postgresql_keeps_are_refused(
    empty_db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # two such names would be one schema, cut at 63 bytes, with two sets of lock keys
    shared = "é" * 31 + "x"  # 63 bytes
    upgrade(empty_db_dsn, schema=shared)
    for schema in (shared + "a", shared + "b"):
        with pytest.raises(InvalidInputError, match="64 bytes long"):
            Queries(schema)
        with psycopg.connect(empty_db_dsn) as conn, pytest.raises(InvalidInputError):
            PostgresSaver(conn, schema=schema)
        with pytest.raises(InvalidInputError, match="PostgreSQL allows 63"):
            upgrade(empty_db_dsn, schema=schema)
        for command in (["migrate"], ["stats"], ["prune", "--keep-last", "1"], ["threads"]):
            code = main([*command, "--dsn", empty_db_dsn, "--schema", schema])
            assert code == EXIT_USAGE, command
        assert main(["import-langgraph", "--dsn", empty_db_dsn, "--from-schema", schema]) == (
            EXIT_USAGE
        )
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--from-schema: schema name" in err
    with psycopg.connect(empty_db_dsn) as conn:
        assert PostgresSaver(conn, schema=shared).list(None) is not None


@pytest.mark.parametrize(
    ("schema", "message"), [("", "is empty"), ("pg_mine", "reserves"), ("a\x00b", "NUL")]
)
def test_names_postgresql_refuses_are_refused_up_front(
    empty_db_dsn: str, schema: str, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        upgrade(empty_db_dsn, schema=schema)
    with pytest.raises(InvalidInputError, match=message):
        Queries(schema)
    assert main(["migrate", "--dsn", empty_db_dsn, "--schema", schema]) == EXIT_USAGE


def test_thread_ids_are_not_confused_across_hostile_schemas(empty_db_dsn: str) -> None:
    thread_id = f"t-{uuid.uuid4()}"
    with psycopg.connect(empty_db_dsn) as conn:
        savers = [PostgresSaver(conn, schema=s) for s in HOSTILE[:2]]
        for saver in savers:
            saver.setup()
        put_thread(savers[0], thread_id)
        assert savers[1].get_tuple(generate_config(thread_id)) is None
        savers[1].delete_thread(thread_id)
        assert savers[0].get_tuple(generate_config(thread_id)) is not None
