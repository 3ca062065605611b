-- The official saver's tables (langgraph-checkpoint-postgres) in the schema of
-- pgcheckpoint's own (pgcheckpoint.official): threads only they hold.

-- name: official_tables_readable
-- retry: safe
-- A row when the schema holds the official saver's tables and this role may
-- read them: its `checkpoints` table (with a thread_id column) and its
-- `checkpoint_migrations`. Asked first, so the next statement never fails.
SELECT 1 AS present
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname = 'checkpoints' AND c.relkind IN ('r', 'p')
  AND has_table_privilege(c.oid, 'SELECT')
  AND EXISTS (SELECT FROM pg_catalog.pg_attribute a
              WHERE a.attrelid = c.oid AND a.attname = 'thread_id' AND NOT a.attisdropped)
  AND EXISTS (SELECT FROM pg_catalog.pg_class m
              WHERE m.relnamespace = n.oid AND m.relname = 'checkpoint_migrations')

-- name: official_threads_missing
-- retry: safe
-- Of the threads in the official saver's last %(sample)s checkpoint rows (in
-- key order, read backwards on its primary key, so a large table costs no
-- more), how many there are, how many pgcheckpoint's tables lack, and one of those.
SELECT count(*) AS looked_at,
       count(*) FILTER (WHERE NOT m.present) AS missing,
       min(s.thread_id) FILTER (WHERE NOT m.present) AS example
FROM (
    SELECT DISTINCT thread_id FROM (
        SELECT thread_id FROM {schema}.checkpoints ORDER BY thread_id DESC LIMIT %(sample)s
    ) r
) s
CROSS JOIN LATERAL (
    SELECT EXISTS (SELECT FROM {schema}.pgc_checkpoints p WHERE p.thread_id = s.thread_id)
        AS present
) m
