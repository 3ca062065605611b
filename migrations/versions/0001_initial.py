"""Checkpoints, blobs and writes tables.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op

from pgcheckpoint.schema.ddl import ident

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade(schema: str = "public") -> None:
    s = ident(schema)
    op.execute(f"""
        CREATE TABLE IF NOT EXISTS {s}.pgc_checkpoints (
            thread_id text NOT NULL,
            checkpoint_ns text NOT NULL DEFAULT '',
            checkpoint_id text NOT NULL,
            parent_checkpoint_id text,
            run_id text,
            type text NOT NULL,
            checkpoint bytea NOT NULL,
            channel_versions jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            inline_channels text[] NOT NULL DEFAULT ARRAY[]::text[],
            metadata_type text NOT NULL,
            metadata_blob bytea NOT NULL,
            metadata jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
        )
    """)
    op.execute(f"""
        CREATE TABLE IF NOT EXISTS {s}.pgc_blobs (
            thread_id text NOT NULL,
            checkpoint_ns text NOT NULL DEFAULT '',
            channel text NOT NULL,
            version text NOT NULL,
            type text NOT NULL,
            blob bytea,
            PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
        )
    """)
    op.execute(f"""
        CREATE TABLE IF NOT EXISTS {s}.pgc_writes (
            thread_id text NOT NULL,
            checkpoint_ns text NOT NULL DEFAULT '',
            checkpoint_id text NOT NULL,
            task_id text NOT NULL,
            task_path text NOT NULL DEFAULT '',
            idx integer NOT NULL,
            channel text NOT NULL,
            type text NOT NULL,
            blob bytea NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        )
    """)
    # Values arrive compressed by the client (zstd); Postgres compressing them
    # again costs time on every insert and saves nothing.
    for table, column in (
        ("pgc_checkpoints", "checkpoint"),
        ("pgc_checkpoints", "metadata_blob"),
        ("pgc_blobs", "blob"),
        ("pgc_writes", "blob"),
    ):
        op.execute(f"ALTER TABLE {s}.{table} ALTER COLUMN {column} SET STORAGE EXTERNAL")


def downgrade(schema: str = "public") -> None:
    s = ident(schema)
    op.execute(f"DROP TABLE IF EXISTS {s}.pgc_writes")
    op.execute(f"DROP TABLE IF EXISTS {s}.pgc_blobs")
    op.execute(f"DROP TABLE IF EXISTS {s}.pgc_checkpoints")
