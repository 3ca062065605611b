"""What other sessions are doing, from `pg_stat_activity`: for tests that force an interleaving."""

from __future__ import annotations

import psycopg


def waiting_on_a_lock(dsn: str, application_name: str) -> bool:
    """Whether a session of that `application_name` waits for a lock right now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = %s AND wait_event_type = 'Lock'",
            [application_name],
        ).fetchone()
    return bool(row and row[0])
