-- Whole threads: delete, and copy (in SQL, or page by page through the client).

-- name: delete_threads
-- Deletes threads whole, under their maintenance locks (see maintenance.sql).
WITH deleted_writes AS (
    DELETE FROM {schema}.pgc_writes WHERE thread_id = ANY(%(thread_ids)s::text[])
), deleted_blobs AS (
    DELETE FROM {schema}.pgc_blobs WHERE thread_id = ANY(%(thread_ids)s::text[])
)
DELETE FROM {schema}.pgc_checkpoints WHERE thread_id = ANY(%(thread_ids)s::text[])

-- name: lock_thread_for_saving
-- retry: safe
-- A copy writes to its target as a put does: with the target's maintenance
-- lock held shared (pgcheckpoint.locking), so a delete of it waits for the copy.
SELECT pg_advisory_xact_lock_shared(%(lock_key)s::int8)::text AS locked

-- name: copy_thread
-- Copies rows server-side; nothing already at the target is overwritten.
WITH copied_blobs AS (
    INSERT INTO {schema}.pgc_blobs (thread_id, checkpoint_ns, channel, version, type, blob,
                                    base_version)
    SELECT %(target_thread_id)s, checkpoint_ns, channel, version, type, blob, base_version
    FROM {schema}.pgc_blobs WHERE thread_id = %(source_thread_id)s
    ON CONFLICT DO NOTHING
), copied_writes AS (
    INSERT INTO {schema}.pgc_writes (
        thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
    )
    SELECT %(target_thread_id)s, checkpoint_ns, checkpoint_id, task_id, task_path, idx,
           channel, type, blob
    FROM {schema}.pgc_writes WHERE thread_id = %(source_thread_id)s
    ON CONFLICT DO NOTHING
)
INSERT INTO {schema}.pgc_checkpoints (
    thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, sealed_parent_id, run_id,
    type, checkpoint, channel_versions, inline_channels,
    metadata_type, metadata_blob, metadata, created_at
)
SELECT %(target_thread_id)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
       sealed_parent_id, run_id, type, checkpoint, channel_versions, inline_channels,
       metadata_type, metadata_blob, metadata, created_at
FROM {schema}.pgc_checkpoints WHERE thread_id = %(source_thread_id)s
ON CONFLICT DO NOTHING

-- name: thread_checkpoints_page
-- retry: safe
-- copy_thread through the client (values sealed to their thread): one page of a
-- thread's checkpoints in key order. JSON and arrays go as text, to come back as is.
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, sealed_parent_id, run_id, type,
       checkpoint, channel_versions::text AS channel_versions,
       to_jsonb(inline_channels)::text AS inline_channels,
       metadata_type, metadata_blob, metadata::text AS metadata, created_at
FROM {schema}.pgc_checkpoints
WHERE thread_id = %(thread_id)s
  AND (%(after_ns)s::text IS NULL
       OR (checkpoint_ns, checkpoint_id) > (%(after_ns)s::text, %(after_id)s::text))
ORDER BY checkpoint_ns, checkpoint_id
LIMIT %(limit)s

-- name: thread_writes_of_checkpoints
-- The pending writes of the listed checkpoints of a thread.
SELECT w.checkpoint_ns, w.checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.blob
FROM unnest(%(checkpoint_nss)s::text[], %(checkpoint_ids)s::text[])
     AS k(checkpoint_ns, checkpoint_id)
JOIN {schema}.pgc_writes w
  ON w.thread_id = %(thread_id)s AND w.checkpoint_ns = k.checkpoint_ns
 AND w.checkpoint_id = k.checkpoint_id

-- name: insert_copied_rows
-- One page of a thread the client re-sealed for its new thread id; like
-- copy_thread, nothing already at the target is overwritten.
WITH copied_blobs AS (
    INSERT INTO {schema}.pgc_blobs (thread_id, checkpoint_ns, channel, version, type, blob,
                                    base_version)
    SELECT %(thread_id)s, b.checkpoint_ns, b.channel, b.version, b.type, b.blob, b.base_version
    FROM unnest(%(blob_checkpoint_ns)s::text[], %(blob_channel)s::text[],
                %(blob_version)s::text[], %(blob_type)s::text[], %(blob_blob)s::bytea[],
                %(blob_base_version)s::text[])
         AS b(checkpoint_ns, channel, version, type, blob, base_version)
    ON CONFLICT DO NOTHING
), copied_writes AS (
    INSERT INTO {schema}.pgc_writes (
        thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
    )
    SELECT %(thread_id)s, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.task_path, w.idx,
           w.channel, w.type, w.blob
    FROM unnest(%(write_checkpoint_ns)s::text[], %(write_checkpoint_id)s::text[],
                %(write_task_id)s::text[], %(write_task_path)s::text[], %(write_idx)s::int[],
                %(write_channel)s::text[], %(write_type)s::text[], %(write_blob)s::bytea[])
         AS w(checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
    ON CONFLICT DO NOTHING
)
INSERT INTO {schema}.pgc_checkpoints (
    thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, sealed_parent_id, run_id,
    type, checkpoint, channel_versions, inline_channels,
    metadata_type, metadata_blob, metadata, created_at
)
SELECT %(thread_id)s, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
       c.sealed_parent_id, c.run_id, c.type, c.checkpoint, c.channel_versions::jsonb,
       ARRAY(SELECT jsonb_array_elements_text(c.inline_channels::jsonb)),
       c.metadata_type, c.metadata_blob, c.metadata::jsonb, c.created_at
FROM unnest(%(checkpoint_ns)s::text[], %(checkpoint_id)s::text[],
            %(parent_checkpoint_id)s::text[], %(sealed_parent_id)s::text[], %(run_id)s::text[],
            %(type)s::text[], %(checkpoint)s::bytea[], %(channel_versions)s::text[],
            %(inline_channels)s::text[], %(metadata_type)s::text[], %(metadata_blob)s::bytea[],
            %(metadata)s::text[], %(created_at)s::timestamptz[])
     AS c(checkpoint_ns, checkpoint_id, parent_checkpoint_id, sealed_parent_id, run_id, type,
          checkpoint, channel_versions, inline_channels, metadata_type, metadata_blob, metadata,
          created_at)
ON CONFLICT DO NOTHING
