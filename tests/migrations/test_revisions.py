"""Every revision upgrades and downgrades cleanly, on an empty database and on data."""

from __future__ import annotations

from typing import Any

import psycopg
from langgraph.checkpoint.base import empty_checkpoint
from render_schema import VERSION_TABLE, catalog

from pgcheckpoint import PostgresSaver
from pgcheckpoint.schema.ddl import TABLES
from pgcheckpoint.schema.migrate import current, downgrade, head, history, upgrade


def _revisions() -> list[str]:
    return [rev for rev, _down, _title in history()]


def test_history_is_one_line_of_revisions_with_short_ordered_ids() -> None:
    revisions = history()
    assert [down for _rev, down, _title in revisions] == [None] + _revisions()[:-1]
    assert _revisions() == sorted(_revisions())
    assert all(len(rev) == 4 and rev.isdigit() for rev in _revisions())
    assert all(title for _rev, _down, title in revisions), "every revision needs a docstring"
    assert _revisions()[-1] == head()


def test_each_revision_up_down_up_on_an_empty_database(empty_db_dsn: str) -> None:
    """Each step down restores exactly the catalog the step up started from."""
    snapshots = {None: catalog(empty_db_dsn)}
    for rev in _revisions():
        upgrade(empty_db_dsn, revision=rev)
        assert current(empty_db_dsn) == rev
        snapshots[rev] = catalog(empty_db_dsn)
        assert snapshots[rev] != snapshots[_previous(rev)], f"revision {rev} changed nothing"
    for rev in reversed(_revisions()):
        target = _previous(rev)
        downgrade(empty_db_dsn, target or "base")
        assert current(empty_db_dsn) == target
        expected = snapshots[target]
        got = catalog(empty_db_dsn)
        if target is None:
            # Alembic keeps its (now empty) version table at base
            got["tables"].pop(VERSION_TABLE, None)
        assert got == expected, f"downgrade of {rev} left a different schema"
    upgrade(empty_db_dsn)
    assert catalog(empty_db_dsn) == snapshots[head()]


def _previous(rev: str) -> str | None:
    revisions = _revisions()
    index = revisions.index(rev)
    return revisions[index - 1] if index else None


def _write_thread(saver: PostgresSaver, thread_id: str) -> list[Any]:
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for step in range(3):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"count": step, "state": {"step": step, "tags": ["a"]}}
        checkpoint["channel_versions"] = {"count": f"{step + 1}", "state": f"{step + 1}"}
        config = saver.put(
            config,
            checkpoint,
            {"source": "loop", "step": step},
            {
                "count": f"{step + 1}",
                "state": f"{step + 1}",
            },
        )
        saver.put_writes(config, [("count", step + 1)], task_id=f"task-{step}")
    return list(saver.list({"configurable": {"thread_id": thread_id}}))


def test_down_and_up_again_keeps_the_data(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        saver = PostgresSaver(conn)
        before = _write_thread(saver, "t1")
    first = _revisions()[0]
    downgrade(db_dsn, first)
    assert current(db_dsn) == first
    upgrade(db_dsn)
    with psycopg.connect(db_dsn) as conn:
        after = list(PostgresSaver(conn).list({"configurable": {"thread_id": "t1"}}))
    assert after == before
    assert len(after) == 3


def test_runtime_grants_cover_every_table(db_dsn: str) -> None:
    """`migrate.TABLES` (what `pgcheckpoint grants` grants on) lists every table at head."""
    assert set(catalog(db_dsn)["tables"]) == {*TABLES, VERSION_TABLE}


def test_rerunning_upgrade_at_head_changes_nothing(db_dsn: str) -> None:
    before = catalog(db_dsn)
    upgrade(db_dsn)
    upgrade(db_dsn)
    assert catalog(db_dsn) == before


def test_custom_schema_holds_the_tables_and_the_version_table(empty_db_dsn: str) -> None:
    upgrade(empty_db_dsn, schema="tenant_a")
    upgrade(empty_db_dsn, schema="tenant_b", revision=_revisions()[0])
    assert current(empty_db_dsn, schema="tenant_a") == head()
    assert current(empty_db_dsn, schema="tenant_b") == _revisions()[0]
    assert current(empty_db_dsn) is None
    assert catalog(empty_db_dsn)["tables"] == {}
    with psycopg.connect(empty_db_dsn) as conn:
        a = PostgresSaver(conn, schema="tenant_a")
        _write_thread(a, "shared-id")
        assert a.get_tuple({"configurable": {"thread_id": "shared-id"}}) is not None
        upgrade(empty_db_dsn, schema="tenant_b")
        b = PostgresSaver(conn, schema="tenant_b")
        assert b.get_tuple({"configurable": {"thread_id": "shared-id"}}) is None
