"""Indexes for delete_for_runs and age-based retention, built concurrently.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from pgcheckpoint.schema.ddl import create_index_concurrently, drop_index_concurrently

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade(schema: str = "public") -> None:
    create_index_concurrently(
        schema, "pgc_checkpoints_run_id_idx", "pgc_checkpoints (run_id) WHERE run_id IS NOT NULL"
    )
    create_index_concurrently(
        schema, "pgc_checkpoints_created_at_idx", "pgc_checkpoints (created_at)"
    )


def downgrade(schema: str = "public") -> None:
    drop_index_concurrently(schema, "pgc_checkpoints_created_at_idx")
    drop_index_concurrently(schema, "pgc_checkpoints_run_id_idx")
