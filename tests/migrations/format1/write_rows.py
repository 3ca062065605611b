"""Write the rows of `rows.json` with pgcheckpoint 0.1.0 (row format 1), and what it read.

`test_format_upgrade.py` loads these rows into a database at revision 0003 and
checks that this version reads them the same, before and after `rotate-key`.
To write them again, run this file with a 0.1.0 checkout first on the path:

    git worktree add /tmp/v010 5b6e69d
    PYTHONPATH=/tmp/v010/src python tests/migrations/format1/write_rows.py \\
        postgresql://postgres@127.0.0.1:5432/postgres

It creates a scratch database, writes three threads (sealed by 0.1.0's
EncryptedSerde, in clear, and by LangGraph's own EncryptedSerializer), and
drops the database again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import psycopg
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from psycopg.conninfo import make_conninfo

import pgcheckpoint
from pgcheckpoint import EncryptedSerde, PostgresSaver
from pgcheckpoint.schema.migrate import upgrade

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/, for support.format1

from support.format1 import (  # noqa: E402
    FILTERABLE,
    KEY,
    LANGGRAPH_KEY,
    TABLES,
    config,
    graph,
    what_reads,
)


def main(server: str) -> None:
    name = "pgc_format1_rows"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    dsn = make_conninfo(server, dbname=name)
    try:
        upgrade(dsn)
        serdes = {
            "sealed": EncryptedSerde(keys={"k1": KEY}, filterable_metadata=FILTERABLE),
            "plain": None,
            "langgraph": EncryptedSerializer.from_pycryptodome_aes(key=LANGGRAPH_KEY),
        }
        expected = {}
        for thread_id, serde in serdes.items():
            with PostgresSaver.from_conn_string(dsn, serde=serde) as saver:
                app = graph(saver)
                for turn in range(3):
                    run = {**config(thread_id), "metadata": {"user_id": f"user-{thread_id}"}}
                    app.invoke({"messages": [f"human {turn}"], "turn": turn}, run)
                expected[thread_id] = what_reads(saver, thread_id)
        rows: dict[str, list[dict[str, Any]]] = {}
        with psycopg.connect(dsn) as conn:
            for table in TABLES:
                cur = conn.execute(f"SELECT to_jsonb(t) FROM {table} t")
                rows[table] = sorted((r[0] for r in cur), key=json.dumps)
            revision = conn.execute(
                "SELECT version_num FROM pgcheckpoint_alembic_version"
            ).fetchone()
        payload = {
            "written_by": f"pgcheckpoint {pgcheckpoint.__version__}",
            "revision": revision[0] if revision else None,
            "rows": rows,
            "expected": expected,
        }
        (HERE / "rows.json").write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


if __name__ == "__main__":
    main(sys.argv[1])
