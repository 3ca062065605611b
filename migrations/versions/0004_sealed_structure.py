"""Row format 2: the parent a sealed checkpoint names, kept when that parent is deleted.

With encryption on, pgcheckpoint now seals a checkpoint's structure (its parent,
channel versions and which channels hold values) into its record, and binds a
blob's delta base and a write's channel and task path to their values, so a
read notices any of those columns edited. Deleting a checkpoint clears the
`parent_checkpoint_id` of its children; `sealed_parent_id` keeps the id the
child was sealed with ('' for none), so a read can tell a parent deleted by
retention from a parent column cleared by someone without the key. NULL for
rows written without encryption or by 0.1.0, which read as before;
`pgcheckpoint rotate-key` rewrites the latter in format 2.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

from pgcheckpoint.schema.ddl import DowngradeRefusedError, ident

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade(schema: str = "public") -> None:
    s = ident(schema)
    # nullable and without a default: PostgreSQL adds it without rewriting the table
    op.execute(f"ALTER TABLE {s}.pgc_checkpoints ADD COLUMN IF NOT EXISTS sealed_parent_id text")


def downgrade(schema: str = "public") -> None:
    s = ident(schema)
    context = op.get_context()
    if not context.as_sql:
        sealed = (
            op.get_bind()
            .execute(
                text(
                    f"SELECT (SELECT count(*) FROM {s}.pgc_checkpoints"
                    "         WHERE strpos(type, '+aesgcm2:') > 0"
                    "            OR strpos(metadata_type, '+aesgcm2:') > 0)"
                    f"     + (SELECT count(*) FROM {s}.pgc_blobs"
                    "         WHERE strpos(type, '+aesgcm2:') > 0)"
                    f"     + (SELECT count(*) FROM {s}.pgc_writes"
                    "         WHERE strpos(type, '+aesgcm2:') > 0)"
                )
            )
            .scalar()
        )
        if sealed:
            raise DowngradeRefusedError(
                f"{sealed} rows are sealed in row format 2, which revision 0003 (pgcheckpoint "
                "0.1.0) cannot read; delete those threads, or restore a backup taken before "
                "the upgrade, then downgrade"
            )
    op.execute(f"ALTER TABLE {s}.pgc_checkpoints DROP COLUMN IF EXISTS sealed_parent_id")
