-- Saving: a checkpoint with its new channel values, and a task's pending writes.

-- fragment: insert_task_writes
-- The writes of one task at a checkpoint, as put_writes gives them; the
-- statement says what a write already saved under the same key does.
INSERT INTO {schema}.pgc_writes (
    thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
)
SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, %(task_path)s,
       w.idx, w.channel, w.type, w.blob
FROM unnest(%(idxs)s::int[], %(channels)s::text[], %(types)s::text[], %(blobs)b::bytea[])
     AS w(idx, channel, type, blob)

-- name: put_checkpoint
-- retry: safe
-- One statement, so a checkpoint and its new channel values commit together. A
-- value that extends an earlier version of its channel is stored as the new
-- items plus `base_version`; the foreign key on it fails the statement if that
-- base was deleted meanwhile, and the core retries with full values.
-- The bytea arrays here and in the writes use binary placeholders (`b`, not `s`):
-- psycopg sends a list of bytes as a text array, each value hex-escaped to twice
-- its size.
-- The parent is locked first (FOR KEY SHARE, as a foreign key would), so a put
-- and a delete of its parent (retention, prune) take turns. A locking read sees
-- the latest committed row: when the parent is missing, even deleted after this
-- statement began, nothing is stored and `stored` comes back false.
WITH parent AS MATERIALIZED (
    SELECT 1 FROM {schema}.pgc_checkpoints
    WHERE %(parent_checkpoint_id)s::text IS NOT NULL
      AND thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
      AND checkpoint_id = %(parent_checkpoint_id)s
    FOR KEY SHARE
), guard AS MATERIALIZED (
    SELECT %(parent_checkpoint_id)s::text IS NULL OR EXISTS (SELECT 1 FROM parent) AS stored
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
-- Special writes (errors, interrupts, resumes) replace an earlier attempt's.
{insert_task_writes}
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
    channel = EXCLUDED.channel,
    type = EXCLUDED.type,
    blob = EXCLUDED.blob,
    task_path = EXCLUDED.task_path

-- name: insert_writes
-- retry: safe
-- A task's regular writes are saved once; a retry of the same task keeps the first.
{insert_task_writes}
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING
