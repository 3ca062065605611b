"""What was deleted: per thread, the highest checkpoint id any delete removed.

A put names its parent checkpoint. When that parent is missing, the saver must
tell a parent that was deleted (by `delete_thread`, `prune`, `delete_for_runs`,
retention, the pg_cron procedure or a hand-written DELETE: refuse, or the
thread's history would stop short) from one this database never stored (a
thread copied newest-first from another saver, a config built by hand: store
it, as the official saver does). Every worker, including one started after
the delete, must tell them apart the same way, so the answer lives in a table.

`pgc_deletions` keeps one row per thread that ever lost a checkpoint: the
highest id deleted (in the "C" collation, which orders LangGraph's time-based
ids by time) and when. A statement-level trigger on `pgc_checkpoints` writes
it, in the deleting transaction, from the rows the statement removed, so no
delete path can forget it. A put whose missing parent sorts at or below the
thread's row is refused; one above it was never saved here.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

from pgcheckpoint.schema.ddl import ident

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade(schema: str = "public") -> None:
    s = ident(schema)
    op.execute(f"""
        CREATE TABLE IF NOT EXISTS {s}.pgc_deletions (
            thread_id text NOT NULL PRIMARY KEY,
            checkpoint_id text COLLATE "C" NOT NULL,
            deleted_at timestamptz NOT NULL DEFAULT now()
        )
    """)
    # The body names no schema (it reads the trigger's own, TG_TABLE_SCHEMA; no
    # format(): `%` doubles in `migrate --sql`'s script), so
    # the same function serves a schema restored under another name or built
    # from sql/schema.sql; search_path is pinned so a caller's cannot choose
    # which functions it runs.
    op.execute(f"""
        CREATE OR REPLACE FUNCTION {s}.pgc_note_deletions() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
        BEGIN
            EXECUTE 'INSERT INTO ' || quote_ident(TG_TABLE_SCHEMA) || '.pgc_deletions AS d '
                '(thread_id, checkpoint_id, deleted_at) '
                'SELECT thread_id, max(checkpoint_id COLLATE "C"), now() '
                'FROM gone GROUP BY thread_id '
                'ON CONFLICT (thread_id) DO UPDATE '
                'SET checkpoint_id = greatest(d.checkpoint_id, EXCLUDED.checkpoint_id), '
                'deleted_at = EXCLUDED.deleted_at';
            RETURN NULL;
        END
        $body$
    """)
    op.execute(f"DROP TRIGGER IF EXISTS pgc_checkpoints_deleted ON {s}.pgc_checkpoints")
    op.execute(f"""
        CREATE TRIGGER pgc_checkpoints_deleted
        AFTER DELETE ON {s}.pgc_checkpoints
        REFERENCING OLD TABLE AS gone
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.pgc_note_deletions()
    """)


def downgrade(schema: str = "public") -> None:
    s = ident(schema)
    op.execute(f"DROP TRIGGER IF EXISTS pgc_checkpoints_deleted ON {s}.pgc_checkpoints")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.pgc_note_deletions()")
    op.execute(f"DROP TABLE IF EXISTS {s}.pgc_deletions")
