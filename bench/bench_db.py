"""Databases and savers for `make bench`.

The server is `PGCHECKPOINT_BENCH_DSN`, else `PGCHECKPOINT_TEST_DSN`, else the
embedded one. Each workload gets fresh databases, cloned from one migrated
template per saver, named `pgc_bench_<token>_<name>` and dropped when done. The
run holds an advisory lock on its token, so a later run drops the databases of a
run that died (the scheme of tests/conftest.py, with its own lock class).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver as OfficialSaver
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, ConnectionPool

ROOT = Path(__file__).resolve().parents[1]
DB_PREFIX = "pgc_bench_"
# First key of the advisory lock a live bench run holds on its token ("pgcb").
LOCK_CLASS_BENCH = 0x70676362
_NAME_RE = re.compile(rf"^{DB_PREFIX}(\d+)_")
POOL_SIZE = 8
# What LangGraph's docs pass to a pool for the official saver; both savers get it.
CONNECTION_KWARGS: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0}
SAVERS = ("ours", "official")
# pgcheckpoint with cache_bytes=0, timed next to the two where the trade shows
NOTHING_CACHED = "ours0"
# pgcheckpoint over a pool with psycopg's defaults (no autocommit,
# prepare_threshold=5, tuple rows), against the official saver with the docs' settings
BARE_POOL = "ours-bare"
OURS = ("ours", NOTHING_CACHED, BARE_POOL)
TABLES = {
    "ours": ("pgc_checkpoints", "pgc_blobs", "pgc_writes"),
    NOTHING_CACHED: ("pgc_checkpoints", "pgc_blobs", "pgc_writes"),
    BARE_POOL: ("pgc_checkpoints", "pgc_blobs", "pgc_writes"),
    "official": ("checkpoints", "checkpoint_blobs", "checkpoint_writes"),
}


def server_dsn() -> tuple[str, str]:
    """The server to use, and where its name came from."""
    for var in ("PGCHECKPOINT_BENCH_DSN", "PGCHECKPOINT_TEST_DSN"):
        value = os.environ.get(var)
        if value:
            return value, var
    from pgcheckpoint.contrib.embedded import embedded_dsn

    return embedded_dsn(ROOT / ".pgcheckpoint" / "pgdata"), "embedded server"


class Databases:
    """Creates, clones and drops this run's databases through one autocommit connection."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.token = secrets.randbits(31)
        self._conn: psycopg.Connection[TupleRow] = psycopg.connect(server, autocommit=True)
        self._conn.execute(
            "SELECT pg_advisory_lock(%s::int4, %s::int4)", (LOCK_CLASS_BENCH, self.token)
        )
        self._templates: dict[str, str] = {}
        self._live: list[str] = []

    def __enter__(self) -> Databases:
        self._drop_dead_runs()
        return self

    def __exit__(self, *exc: object) -> None:
        for name in reversed(self._live):
            with contextlib.suppress(psycopg.Error):
                self._drop(name)
        self._conn.close()

    def server_version(self) -> str:
        row = self._conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"

    def dsn(self, name: str) -> str:
        return make_conninfo(self.server, dbname=name)

    def _create(self, name: str, template: str) -> str:
        self._conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
        self._live.append(name)
        return self.dsn(name)

    def template(self, kind: str) -> str:
        """The migrated template database of a saver, made on first use."""
        if kind in self._templates:
            return self._templates[kind]
        name = f"{DB_PREFIX}{self.token}_{kind}_tpl"
        dsn = self._create(name, "template0")
        if kind == "ours":
            from pgcheckpoint.schema.migrate import upgrade

            upgrade(dsn)
        else:
            with OfficialSaver.from_conn_string(dsn) as saver:
                saver.setup()
        self._terminate(name)
        self._templates[kind] = name
        return name

    def fresh(self, kind: str, label: str) -> str:
        """A new database with `kind`'s schema and no rows."""
        if kind in (NOTHING_CACHED, BARE_POOL):
            kind, label = "ours", f"{label}{kind[4:]}"
        template = self.template(kind)
        return self._create(f"{DB_PREFIX}{self.token}_{kind}_{label}", template)

    def _terminate(self, name: str) -> None:
        self._conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )

    def drop(self, dsn: str) -> None:
        """Drop a database made by `fresh`, given its DSN."""
        self._drop(str(conninfo_to_dict(dsn)["dbname"]))

    def _drop(self, name: str) -> None:
        self._conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if name in self._live:
            self._live.remove(name)

    def _drop_dead_runs(self) -> None:
        rows = self._conn.execute(
            "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", [DB_PREFIX]
        ).fetchall()
        held = {
            objid
            for (objid,) in self._conn.execute(
                "SELECT objid::int8 FROM pg_locks WHERE locktype = 'advisory'"
                " AND classid = %s::int8::oid AND objsubid = 2 AND granted",
                [LOCK_CLASS_BENCH],
            )
        }
        # clones before templates: a template cannot go while a clone is being made
        for (name,) in sorted(rows, key=lambda r: str(r[0]).endswith("_tpl")):
            match = _NAME_RE.match(name)
            if match is None or int(match.group(1)) in held:
                continue
            with contextlib.suppress(psycopg.Error):
                self._drop(name)

    def analyze(self, dsn: str) -> None:
        """Give the planner statistics, as autovacuum would have on a live database."""
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE")

    def clone_thread(self, dsn: str, kind: str, source: str, targets: Sequence[str]) -> None:
        """Copy every row of thread `source` to each thread of `targets`, in SQL.

        Both savers' tables get the same treatment (each row as stored, only the
        thread id changed), so seeding many threads with one history costs a few
        statements instead of replaying it through each saver.
        """
        with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
            for table in TABLES[kind]:
                columns = [
                    str(name)
                    for (name,) in conn.execute(
                        "SELECT column_name FROM information_schema.columns"
                        " WHERE table_schema = 'public' AND table_name = %s"
                        " AND is_generated = 'NEVER' ORDER BY ordinal_position",
                        [table],
                    )
                ]
                picked = [
                    sql.SQL("k.tid") if c == "thread_id" else sql.SQL("t.") + sql.Identifier(c)
                    for c in columns
                ]
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {table} ({columns}) SELECT {picked} FROM {table} t"
                        " CROSS JOIN unnest(%s::text[]) AS k(tid) WHERE t.thread_id = %s"
                    ).format(
                        table=sql.Identifier(table),
                        columns=sql.SQL(", ").join(map(sql.Identifier, columns)),
                        picked=sql.SQL(", ").join(picked),
                    ),
                    [list(targets), source],
                )

    def storage_bytes(self, dsn: str, kind: str) -> dict[str, int]:
        """pg_total_relation_size (heap, TOAST, indexes) of each of a saver's tables."""
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT relname, pg_total_relation_size(c.oid) FROM pg_class c"
                " WHERE relname = ANY(%s) AND relnamespace = 'public'::regnamespace",
                [list(TABLES[kind])],
            ).fetchall()
        return {str(name): int(size) for name, size in rows}


# -- savers ------------------------------------------------------------------------


def _budget(kind: str) -> dict[str, int]:
    return {"cache_bytes": 0} if kind == NOTHING_CACHED else {}


def _connection_kwargs(kind: str) -> dict[str, Any]:
    return {} if kind == BARE_POOL else dict(CONNECTION_KWARGS)


@contextlib.contextmanager
def sync_saver(
    kind: str, dsn: str, *, size: int = POOL_SIZE, serde: Any = None, **pool_kwargs: Any
) -> Iterator[Any]:
    """A saver of `kind` over its own open pool of `size` connections (`ours0`: with
    nothing cached; ours with `serde`)."""
    with ConnectionPool(
        dsn,
        min_size=size,
        max_size=size,
        kwargs=_connection_kwargs(kind),
        name=f"bench-{kind}",
        open=True,
        **pool_kwargs,
    ) as pool:
        pool.wait()
        if kind in OURS:
            from pgcheckpoint import PostgresSaver

            yield PostgresSaver(pool, serde=serde, **_budget(kind))
        else:
            yield OfficialSaver(pool)


@contextlib.asynccontextmanager
async def async_saver(
    kind: str, dsn: str, *, size: int = POOL_SIZE, **pool_kwargs: Any
) -> AsyncIterator[Any]:
    """The asyncio twin of `sync_saver`."""
    async with AsyncConnectionPool(
        dsn,
        min_size=size,
        max_size=size,
        kwargs=_connection_kwargs(kind),
        name=f"bench-{kind}",
        open=False,
        **pool_kwargs,
    ) as pool:
        await pool.wait()
        if kind in OURS:
            from pgcheckpoint import AsyncPostgresSaver

            yield AsyncPostgresSaver(pool, **_budget(kind))
        else:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver as Official

            yield Official(pool)
