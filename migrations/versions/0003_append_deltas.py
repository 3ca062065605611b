"""Append-only values stored as deltas: blobs may extend a base version.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

from pgcheckpoint.schema.ddl import create_index_concurrently, drop_index_concurrently, ident

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade(schema: str = "public") -> None:
    s = ident(schema)
    op.execute(f"ALTER TABLE {s}.pgc_blobs ADD COLUMN IF NOT EXISTS base_version text")
    # A delta's base can never be deleted from under it. Checked at the end of
    # each statement, so one statement may insert or delete a whole chain.
    op.execute(f"""
        DO $$ BEGIN
            ALTER TABLE {s}.pgc_blobs ADD CONSTRAINT pgc_blobs_base_fkey
                FOREIGN KEY (thread_id, checkpoint_ns, channel, base_version)
                REFERENCES {s}.pgc_blobs (thread_id, checkpoint_ns, channel, version)
                NOT VALID;
        EXCEPTION WHEN duplicate_object THEN NULL;
        END $$
    """)
    op.execute(f"ALTER TABLE {s}.pgc_blobs VALIDATE CONSTRAINT pgc_blobs_base_fkey")
    create_index_concurrently(
        schema,
        "pgc_blobs_base_idx",
        "pgc_blobs (thread_id, checkpoint_ns, channel, base_version) "
        "WHERE base_version IS NOT NULL",
    )


def downgrade(schema: str = "public") -> None:
    s = ident(schema)
    context = op.get_context()
    if not context.as_sql:
        deltas = (
            op.get_bind()
            .execute(text(f"SELECT count(*) FROM {s}.pgc_blobs WHERE base_version IS NOT NULL"))
            .scalar()
        )
        if deltas:
            raise RuntimeError(
                f"{deltas} stored values are deltas that revision 0002 cannot read; "
                "delete or prune those threads first (pgcheckpoint prune), then downgrade"
            )
    drop_index_concurrently(schema, "pgc_blobs_base_idx")
    op.execute(f"ALTER TABLE {s}.pgc_blobs DROP CONSTRAINT IF EXISTS pgc_blobs_base_fkey")
    op.execute(f"ALTER TABLE {s}.pgc_blobs DROP COLUMN IF EXISTS base_version")
