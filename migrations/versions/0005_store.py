"""The store's items: LangGraph's long-term memory (`PostgresStore`), beside the checkpoints.

One row per item, keyed by its namespace and key. The namespace is its labels
joined by `.` (a label may hold no `.`, so the join is exact), in the "C"
collation: a namespace prefix is one range of the primary key (`ns = 'a.b' OR
ns >= 'a.b.' AND ns < 'a.b/'`), matched byte for byte, with no LIKE pattern
for `%`, `_` or `\\` to escape. The value is stored as the savers store theirs,
by the value codec (`type`, `value`: JSON text or the serializer's bytes,
sealed when encrypting); `doc` is what filters read: the whole value as JSONB,
or with a key configured only the fields declared filterable. TTLs are
fractional minutes. The vector table, whose column type depends on the
store's `index` settings (`dims`, `vector_type`), is created by `setup()` of a
store configured with one, not by this revision.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

from pgcheckpoint.schema.ddl import DowngradeRefusedError, ident

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade(schema: str = "public") -> None:
    s = ident(schema)
    op.execute(f"""
        CREATE TABLE IF NOT EXISTS {s}.pgc_store (
            ns text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            type text NOT NULL,
            value bytea NOT NULL,
            doc jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz,
            ttl_minutes double precision,
            PRIMARY KEY (ns, key)
        )
    """)
    op.execute(
        f"CREATE INDEX IF NOT EXISTS pgc_store_expires_at_idx ON {s}.pgc_store (expires_at) "
        "WHERE expires_at IS NOT NULL"
    )


def downgrade(schema: str = "public") -> None:
    s = ident(schema)
    context = op.get_context()
    if not context.as_sql:
        items = op.get_bind().execute(text(f"SELECT count(*) FROM {s}.pgc_store")).scalar()
        if items:
            raise DowngradeRefusedError(
                f"the store holds {items} items, which revision 0004 has no table for; "
                "delete them (or restore a backup taken before the upgrade), then downgrade"
            )
    op.execute(f"DROP TABLE IF EXISTS {s}.pgc_store_vectors")
    op.execute(f"DROP TABLE IF EXISTS {s}.pgc_store")
