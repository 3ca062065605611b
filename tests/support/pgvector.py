"""Which pgvector a server offers: the vector tests' server is chosen by it."""

from __future__ import annotations

import psycopg

# halfvec came with pgvector 0.7.0; the embedded pgserver's is 0.6.2
HALFVEC = (0, 7)


def pgvector_version(dsn: str) -> tuple[int, ...] | None:
    """The version of pgvector that `CREATE EXTENSION vector` would install, None without it."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
    return None if row is None else tuple(int(part) for part in str(row[0]).split(".")[:2])
