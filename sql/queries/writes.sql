-- Saving: a checkpoint with its new channel values, and a task's pending writes.

-- fragment: insert_task_writes
-- The writes of one task at a checkpoint, as put_writes gives them; the
-- statement says what a write already saved under the same key does. Like a
-- put, it holds the thread's maintenance lock shared (pgcheckpoint.locking), so
-- a delete of the thread waits for it; but it only tries the lock, once (an
-- InitPlan): while a delete holds it, nothing is stored.
INSERT INTO {schema}.pgc_writes (
    thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
)
SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, %(task_path)s,
       w.idx, w.channel, w.type, w.blob
FROM unnest(%(idxs)s::int[], %(channels)s::text[], %(types)s::text[], %(blobs)b::bytea[])
     AS w(idx, channel, type, blob)
WHERE (SELECT pg_try_advisory_xact_lock_shared(%(lock_key)s::int8))

-- fragment: insert_task_write
-- The same for a task's only write (most tasks write one channel): its values
-- as parameters, which the server reads faster than one-element arrays.
INSERT INTO {schema}.pgc_writes (
    thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
)
SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, %(task_path)s,
       %(idx)s::int, %(channel)s, %(type)s, %(blob)b::bytea
WHERE (SELECT pg_try_advisory_xact_lock_shared(%(lock_key)s::int8))

-- fragment: namespace_left
-- The `_checked` statements store writes only if a checkpoint of one of the
-- namespaces the core names is there: the core runs them once a put of the
-- namespace found its parent deleted (LangGraph raises a background put's
-- error only when the run ends, and runs on till then), and when it tries
-- again after a delete (wait_for_thread_deletes): else the delete took the
-- thread from under the run. LangGraph may save writes before their
-- checkpoint, so that checkpoint itself may be missing; and a subgraph's first
-- writes may come before any checkpoint of its namespace, so after a delete the
-- core also names the root namespace, which only a delete of the whole thread
-- leaves empty.
AND EXISTS (
    SELECT 1 FROM {schema}.pgc_checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = ANY(%(namespaces)s::text[])
    LIMIT 1 FOR KEY SHARE)

-- fragment: upsert_conflict
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
    channel = EXCLUDED.channel,
    type = EXCLUDED.type,
    blob = EXCLUDED.blob,
    task_path = EXCLUDED.task_path

-- fragment: keep_conflict
-- A regular write saved already stays as it is (the insert_ statements).
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING

-- name: put_checkpoint
-- retry: safe
-- One statement, so a checkpoint and its new channel values commit together. A
-- value that extends an earlier version of its channel is stored as the new
-- items plus `base_version`; the foreign key on it fails the statement if that
-- base was deleted meanwhile, and the core retries with full values.
-- The bytea arrays here and in the writes use binary placeholders (`b`, not `s`):
-- psycopg sends a list of bytes as a text array, each value hex-escaped to twice
-- its size.
-- It first takes the thread's maintenance lock shared (pgcheckpoint.locking),
-- waiting for a delete of the thread to commit, which waits for it in turn;
-- then locks the parent (FOR KEY SHARE, as a foreign key would). A locking read
-- sees the latest committed row. When the parent is missing, nothing is stored
-- and `stored` comes back false if it was deleted: it was in this statement's
-- snapshot (deleted since the statement began, perhaps while it waited for the
-- lock), or a delete recorded an id at or above it for the thread
-- (`pgc_deletions`, written by the delete's own transaction, so in the snapshot
-- whenever the parent is not). A parent missing and never deleted (a thread
-- copied newest-first, a config built by hand) is stored as named.
WITH lock AS MATERIALIZED (
    SELECT pg_advisory_xact_lock_shared(%(lock_key)s::int8)::text AS held
), parent AS MATERIALIZED (
    SELECT 1 FROM {schema}.pgc_checkpoints
    WHERE (SELECT held FROM lock) IS NOT NULL
      AND %(parent_checkpoint_id)s::text IS NOT NULL
      AND thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
      AND checkpoint_id = %(parent_checkpoint_id)s
    FOR KEY SHARE
), guard AS MATERIALIZED (
    SELECT (SELECT held FROM lock) IS NOT NULL AND CASE
        WHEN %(parent_checkpoint_id)s::text IS NULL OR EXISTS (SELECT 1 FROM parent) THEN true
        ELSE NOT EXISTS (
                 SELECT 1 FROM {schema}.pgc_checkpoints
                 WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
                   AND checkpoint_id = %(parent_checkpoint_id)s)
             AND NOT EXISTS (
                 SELECT 1 FROM {schema}.pgc_deletions
                 WHERE thread_id = %(thread_id)s
                   AND checkpoint_id >= %(parent_checkpoint_id)s::text COLLATE "C")
    END AS stored
), new_blobs AS (
    INSERT INTO {schema}.pgc_blobs (thread_id, checkpoint_ns, channel, version, type, blob,
                                    base_version)
    SELECT %(thread_id)s, %(checkpoint_ns)s, b.channel, b.version, b.type, b.blob, b.base_version
    FROM unnest(%(blob_channels)s::text[], %(blob_versions)s::text[],
                %(blob_types)s::text[], %(blob_values)b::bytea[], %(blob_bases)s::text[])
         AS b(channel, version, type, blob, base_version)
    WHERE (SELECT stored FROM guard)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
), new_checkpoint AS (
    INSERT INTO {schema}.pgc_checkpoints (
        thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, sealed_parent_id, run_id,
        type, checkpoint, channel_versions, inline_channels,
        metadata_type, metadata_blob, metadata
    )
    SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(parent_checkpoint_id)s,
           %(sealed_parent_id)s, %(run_id)s, %(type)s, %(checkpoint)s, %(channel_versions)s,
           %(inline_channels)s, %(metadata_type)s, %(metadata_blob)s, %(metadata)s
    WHERE (SELECT stored FROM guard)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
        parent_checkpoint_id = EXCLUDED.parent_checkpoint_id,
        sealed_parent_id = EXCLUDED.sealed_parent_id,
        run_id = EXCLUDED.run_id,
        type = EXCLUDED.type,
        checkpoint = EXCLUDED.checkpoint,
        channel_versions = EXCLUDED.channel_versions,
        inline_channels = EXCLUDED.inline_channels,
        metadata_type = EXCLUDED.metadata_type,
        metadata_blob = EXCLUDED.metadata_blob,
        metadata = EXCLUDED.metadata
)
SELECT stored FROM guard

-- name: upsert_writes
-- retry: safe
-- Special writes (errors, interrupts, resumes) replace an earlier attempt's. No
-- row affected: a delete held the thread. The core reads the row count (no
-- RETURNING: nothing to send back and decode).
{insert_task_writes}
{upsert_conflict}

-- name: upsert_writes_checked
-- retry: safe
{insert_task_writes}
{namespace_left}
{upsert_conflict}

-- name: insert_writes
-- retry: safe
-- A task's regular writes are saved once; a retry of the same task keeps the
-- first. No row affected: a delete held the thread, or they were saved already.
{insert_task_writes}
{keep_conflict}

-- name: insert_writes_checked
-- retry: safe
{insert_task_writes}
{namespace_left}
{keep_conflict}

-- name: upsert_write
-- retry: safe
-- upsert_writes for a task's only write.
{insert_task_write}
{upsert_conflict}

-- name: upsert_write_checked
-- retry: safe
{insert_task_write}
{namespace_left}
{upsert_conflict}

-- name: insert_write
-- retry: safe
-- insert_writes for a task's only write.
{insert_task_write}
{keep_conflict}

-- name: insert_write_checked
-- retry: safe
{insert_task_write}
{namespace_left}
{keep_conflict}

-- name: task_writes_or_namespace
-- After writes that stored nothing on their second try: whether the task's
-- writes are there (an earlier try saved them), and whether a checkpoint of one
-- of the namespaces is, as namespace_left asks (else a delete took it).
SELECT EXISTS (
           SELECT 1 FROM {schema}.pgc_writes
           WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
             AND checkpoint_id = %(checkpoint_id)s AND task_id = %(task_id)s
       ) AS written,
       EXISTS (
           SELECT 1 FROM {schema}.pgc_checkpoints
           WHERE thread_id = %(thread_id)s AND checkpoint_ns = ANY(%(namespaces)s::text[])
       ) AS found

-- name: wait_for_thread_saves
-- Waits until no save of the thread is in flight (they hold its maintenance
-- lock shared): takes the lock, until the end of this statement's transaction.
SELECT pg_advisory_xact_lock(%(lock_key)s::int8)::text AS waited

-- name: wait_for_thread_deletes
-- Waits until no delete holds the thread's maintenance lock; holds it shared
-- until the end of the transaction, so that no delete comes in between.
SELECT pg_advisory_xact_lock_shared(%(lock_key)s::int8)::text AS waited

-- name: forget_orphan_writes
-- retry: safe
-- After a put found its parent gone: the writes that tasks saved meanwhile for
-- the missing parent, or for the refused checkpoint, belong to no checkpoint;
-- and in a namespace left without any checkpoint (the thread was deleted under
-- the run), neither do those of checkpoints the run had yet to save. Run after
-- wait_for_thread_saves, in a snapshot that sees the writes that were in flight.
DELETE FROM {schema}.pgc_writes w
WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
  AND (w.checkpoint_id = ANY(%(checkpoint_ids)s::text[])
       OR NOT EXISTS (SELECT 1 FROM {schema}.pgc_checkpoints n
                      WHERE n.thread_id = w.thread_id AND n.checkpoint_ns = w.checkpoint_ns))
  AND NOT EXISTS (SELECT 1 FROM {schema}.pgc_checkpoints c
                  WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns
                    AND c.checkpoint_id = w.checkpoint_id)
