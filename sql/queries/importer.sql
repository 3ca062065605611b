-- Import from langgraph-checkpoint-postgres (pgcheckpoint.maintenance.importer).
-- These statements read the official saver's tables, and here `{schema}` is the
-- schema of those tables; the import writes through insert_copied_rows.

-- name: lg_source_tables
SELECT table_name::text AS table_name FROM information_schema.tables
WHERE table_schema = %(schema)s AND table_name = ANY(%(tables)s::text[])

-- name: lg_migration_version
SELECT max(v) AS v FROM {schema}.checkpoint_migrations

-- name: lg_count_threads
SELECT count(DISTINCT thread_id) AS threads FROM {schema}.checkpoints

-- name: lg_thread_ids
SELECT DISTINCT thread_id FROM {schema}.checkpoints
WHERE %(after)s::text IS NULL OR thread_id > %(after)s
ORDER BY thread_id
LIMIT %(limit)s

-- name: lg_checkpoints_page
-- One page of a thread's checkpoints in key order (the checkpoint is JSONB).
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata
FROM {schema}.checkpoints
WHERE thread_id = %(thread_id)s
  AND (%(after_ns)s::text IS NULL
       OR (checkpoint_ns, checkpoint_id) > (%(after_ns)s::text, %(after_id)s::text))
ORDER BY checkpoint_ns, checkpoint_id
LIMIT %(limit)s

-- name: lg_blobs
-- The stored channel values of the given (namespace, channel, version) keys.
SELECT b.checkpoint_ns, b.channel, b.version, b.type, b.blob
FROM unnest(%(checkpoint_nss)s::text[], %(channels)s::text[], %(versions)s::text[])
     AS k(checkpoint_ns, channel, version)
JOIN {schema}.checkpoint_blobs b
  ON b.thread_id = %(thread_id)s AND b.checkpoint_ns = k.checkpoint_ns
 AND b.channel = k.channel AND b.version = k.version

-- name: lg_writes_of_checkpoints
SELECT w.checkpoint_ns, w.checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.blob
FROM unnest(%(checkpoint_nss)s::text[], %(checkpoint_ids)s::text[])
     AS k(checkpoint_ns, checkpoint_id)
JOIN {schema}.checkpoint_writes w
  ON w.thread_id = %(thread_id)s AND w.checkpoint_ns = k.checkpoint_ns
 AND w.checkpoint_id = k.checkpoint_id
