-- Every statement pgcheckpoint runs, one per name, loaded by `pgcheckpoint.queries`.
-- A block starts with `-- name: NAME` and runs to the next one. `{schema}` is
-- replaced by the quoted schema name; parameters are named (`%(thread_id)s`).
-- Tables: checkpoints (one row per checkpoint), blobs (channel values, one row
-- per channel version), writes (pending writes of a task at a checkpoint).

-- name: put_checkpoint
-- One statement, so a checkpoint and its new channel values commit together.
WITH new_blobs AS (
    INSERT INTO {schema}.pgc_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT %(thread_id)s, %(checkpoint_ns)s, b.channel, b.version, b.type, b.blob
    FROM unnest(%(blob_channels)s::text[], %(blob_versions)s::text[],
                %(blob_types)s::text[], %(blob_values)s::bytea[])
         AS b(channel, version, type, blob)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
)
INSERT INTO {schema}.pgc_checkpoints (
    thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
    type, checkpoint, channel_versions, inline_channels,
    metadata_type, metadata_blob, metadata
)
VALUES (
    %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(parent_checkpoint_id)s, %(run_id)s,
    %(type)s, %(checkpoint)s, %(channel_versions)s, %(inline_channels)s,
    %(metadata_type)s, %(metadata_blob)s, %(metadata)s
)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
    parent_checkpoint_id = EXCLUDED.parent_checkpoint_id,
    run_id = EXCLUDED.run_id,
    type = EXCLUDED.type,
    checkpoint = EXCLUDED.checkpoint,
    channel_versions = EXCLUDED.channel_versions,
    inline_channels = EXCLUDED.inline_channels,
    metadata_type = EXCLUDED.metadata_type,
    metadata_blob = EXCLUDED.metadata_blob,
    metadata = EXCLUDED.metadata

-- name: upsert_writes
-- Special writes (errors, interrupts, resumes) replace an earlier attempt's.
INSERT INTO {schema}.pgc_writes (
    thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
)
SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, %(task_path)s,
       w.idx, w.channel, w.type, w.blob
FROM unnest(%(idxs)s::int[], %(channels)s::text[], %(types)s::text[], %(blobs)s::bytea[])
     AS w(idx, channel, type, blob)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
    channel = EXCLUDED.channel,
    type = EXCLUDED.type,
    blob = EXCLUDED.blob,
    task_path = EXCLUDED.task_path

-- name: insert_writes
-- A task's regular writes are saved once; a retry of the same task keeps the first.
INSERT INTO {schema}.pgc_writes (
    thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
)
SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, %(task_path)s,
       w.idx, w.channel, w.type, w.blob
FROM unnest(%(idxs)s::int[], %(channels)s::text[], %(types)s::text[], %(blobs)s::bytea[])
     AS w(idx, channel, type, blob)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING

-- fragment: checkpoint_tuple_from
-- A checkpoint row with its stored channel values and its pending writes, the
-- writes in `writes_sort_key` order (task_path, task_id, idx).
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
       c.type, c.checkpoint, c.channel_versions, c.metadata_type, c.metadata_blob,
       bl.blob_channels, bl.blob_versions, bl.blob_types, bl.blob_values,
       wr.write_task_ids, wr.write_idxs, wr.write_channels, wr.write_types, wr.write_values
FROM {schema}.pgc_checkpoints c
CROSS JOIN LATERAL (
    SELECT array_agg(b.channel) AS blob_channels, array_agg(b.version) AS blob_versions,
           array_agg(b.type) AS blob_types, array_agg(b.blob) AS blob_values
    FROM jsonb_each_text(c.channel_versions) AS v(channel, version)
    JOIN {schema}.pgc_blobs b
      ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
     AND b.channel = v.channel AND b.version = v.version
) bl
CROSS JOIN LATERAL (
    SELECT array_agg(w.task_id ORDER BY w.task_path, w.task_id, w.idx) AS write_task_ids,
           array_agg(w.idx ORDER BY w.task_path, w.task_id, w.idx) AS write_idxs,
           array_agg(w.channel ORDER BY w.task_path, w.task_id, w.idx) AS write_channels,
           array_agg(w.type ORDER BY w.task_path, w.task_id, w.idx) AS write_types,
           array_agg(w.blob ORDER BY w.task_path, w.task_id, w.idx) AS write_values
    FROM {schema}.pgc_writes w
    WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
      AND w.checkpoint_id = c.checkpoint_id
) wr

-- name: get_latest_checkpoint
{checkpoint_tuple_from}
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
ORDER BY c.checkpoint_id DESC
LIMIT 1

-- name: get_checkpoint_by_id
{checkpoint_tuple_from}
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
  AND c.checkpoint_id = %(checkpoint_id)s

-- name: list_checkpoints
-- Optional filters stay static: a NULL parameter switches its predicate off.
{checkpoint_tuple_from}
WHERE (%(thread_id)s::text IS NULL OR c.thread_id = %(thread_id)s)
  AND (%(checkpoint_ns)s::text IS NULL OR c.checkpoint_ns = %(checkpoint_ns)s)
  AND (%(checkpoint_id)s::text IS NULL OR c.checkpoint_id = %(checkpoint_id)s)
  AND (%(before)s::text IS NULL OR c.checkpoint_id < %(before)s)
  AND (%(filter)s::jsonb IS NULL OR c.metadata @> %(filter)s)
ORDER BY c.checkpoint_id DESC
LIMIT %(limit)s

-- name: delete_thread
WITH deleted_writes AS (
    DELETE FROM {schema}.pgc_writes WHERE thread_id = %(thread_id)s
), deleted_blobs AS (
    DELETE FROM {schema}.pgc_blobs WHERE thread_id = %(thread_id)s
)
DELETE FROM {schema}.pgc_checkpoints WHERE thread_id = %(thread_id)s

-- name: delete_threads
WITH deleted_writes AS (
    DELETE FROM {schema}.pgc_writes WHERE thread_id = ANY(%(thread_ids)s::text[])
), deleted_blobs AS (
    DELETE FROM {schema}.pgc_blobs WHERE thread_id = ANY(%(thread_ids)s::text[])
)
DELETE FROM {schema}.pgc_checkpoints WHERE thread_id = ANY(%(thread_ids)s::text[])

-- name: copy_thread
-- Copies rows server-side; nothing already at the target is overwritten.
WITH copied_blobs AS (
    INSERT INTO {schema}.pgc_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT %(target_thread_id)s, checkpoint_ns, channel, version, type, blob
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
    thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
    type, checkpoint, channel_versions, inline_channels,
    metadata_type, metadata_blob, metadata, created_at
)
SELECT %(target_thread_id)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
       type, checkpoint, channel_versions, inline_channels,
       metadata_type, metadata_blob, metadata, created_at
FROM {schema}.pgc_checkpoints WHERE thread_id = %(source_thread_id)s
ON CONFLICT DO NOTHING

-- name: lock_threads_for_maintenance
-- Serialises maintenance of one thread (prune, delete_for_runs) in this transaction.
-- Taken in sorted order, so two maintenance runs never deadlock on each other.
SELECT count(pg_advisory_xact_lock(%(lock_class)s, hashtext(s.t))) AS locked
FROM (SELECT t FROM unnest(%(thread_ids)s::text[]) AS t ORDER BY t) AS s

-- name: run_checkpoints
-- The checkpoints a set of runs created, per thread and namespace.
SELECT thread_id, checkpoint_ns, checkpoint_id
FROM {schema}.pgc_checkpoints
WHERE run_id = ANY(%(run_ids)s::text[])

-- name: thread_heads
-- The newest checkpoint of every namespace of the given threads.
SELECT DISTINCT ON (thread_id, checkpoint_ns) thread_id, checkpoint_ns, checkpoint_id
FROM {schema}.pgc_checkpoints
WHERE thread_id = ANY(%(thread_ids)s::text[])
ORDER BY thread_id, checkpoint_ns, checkpoint_id DESC

-- name: rebuild_dependencies
-- Every checkpoint a set of kept checkpoints needs to be rebuilt: walks each one's
-- parent chain for as long as one of its DeltaChannels (named by LangGraph in the
-- metadata's counters_since_delta_snapshot) has no stored value there, down to
-- the ancestor that stores one. The kept checkpoints come back at depth 0.
WITH RECURSIVE walk(thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, depth, pending) AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, 0,
           ARRAY(
               SELECT ch FROM jsonb_object_keys(
                   CASE WHEN jsonb_typeof(c.metadata -> 'counters_since_delta_snapshot') = 'object'
                        THEN c.metadata -> 'counters_since_delta_snapshot' ELSE '{}'::jsonb END
               ) AS ch
               WHERE c.channel_versions ? ch
                 AND NOT (ch = ANY(c.inline_channels))
                 AND NOT EXISTS (
                     SELECT 1 FROM {schema}.pgc_blobs b
                     WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
                       AND b.channel = ch AND b.version = c.channel_versions ->> ch
                       AND b.type <> 'empty'
                 )
           )
    FROM {schema}.pgc_checkpoints c
    JOIN unnest(%(thread_ids)s::text[], %(checkpoint_nss)s::text[], %(checkpoint_ids)s::text[])
         AS k(thread_id, checkpoint_ns, checkpoint_id)
      ON c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns
     AND c.checkpoint_id = k.checkpoint_id
    UNION ALL
    SELECT p.thread_id, p.checkpoint_ns, p.checkpoint_id, p.parent_checkpoint_id, w.depth + 1,
           ARRAY(
               SELECT ch FROM unnest(w.pending) AS ch
               WHERE NOT (ch = ANY(p.inline_channels))
                 AND NOT EXISTS (
                     SELECT 1 FROM {schema}.pgc_blobs b
                     WHERE b.thread_id = p.thread_id AND b.checkpoint_ns = p.checkpoint_ns
                       AND b.channel = ch AND b.version = p.channel_versions ->> ch
                       AND b.type <> 'empty'
                 )
           )
    FROM walk w
    JOIN {schema}.pgc_checkpoints p
      ON p.thread_id = w.thread_id AND p.checkpoint_ns = w.checkpoint_ns
     AND p.checkpoint_id = w.parent_checkpoint_id
    WHERE cardinality(w.pending) > 0 AND w.depth < %(max_depth)s
)
SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM walk

-- name: delete_checkpoints
-- Deletes the listed checkpoints with their writes, then the blobs no remaining
-- checkpoint of those namespaces refers to; a kept checkpoint whose parent went
-- is left without one.
WITH doomed AS (
    SELECT * FROM unnest(%(thread_ids)s::text[], %(checkpoint_nss)s::text[],
                         %(checkpoint_ids)s::text[]) AS d(thread_id, checkpoint_ns, checkpoint_id)
), deleted_writes AS (
    DELETE FROM {schema}.pgc_writes w USING doomed d
    WHERE w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns
      AND w.checkpoint_id = d.checkpoint_id
), deleted AS (
    DELETE FROM {schema}.pgc_checkpoints c USING doomed d
    WHERE c.thread_id = d.thread_id AND c.checkpoint_ns = d.checkpoint_ns
      AND c.checkpoint_id = d.checkpoint_id
    RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.channel_versions
), orphaned AS (
    UPDATE {schema}.pgc_checkpoints c SET parent_checkpoint_id = NULL
    FROM deleted d
    WHERE c.thread_id = d.thread_id AND c.checkpoint_ns = d.checkpoint_ns
      AND c.parent_checkpoint_id = d.checkpoint_id
), freed AS (
    SELECT DISTINCT d.thread_id, d.checkpoint_ns, v.channel, v.version
    FROM deleted d, jsonb_each_text(d.channel_versions) AS v(channel, version)
)
DELETE FROM {schema}.pgc_blobs b USING freed f
WHERE b.thread_id = f.thread_id AND b.checkpoint_ns = f.checkpoint_ns
  AND b.channel = f.channel AND b.version = f.version
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.pgc_checkpoints c
      WHERE c.thread_id = f.thread_id AND c.checkpoint_ns = f.checkpoint_ns
        AND c.channel_versions ->> f.channel = f.version
        AND NOT EXISTS (
            SELECT 1 FROM doomed d
            WHERE d.thread_id = c.thread_id AND d.checkpoint_ns = c.checkpoint_ns
              AND d.checkpoint_id = c.checkpoint_id
        )
  )

-- name: thread_checkpoint_ids
SELECT thread_id, checkpoint_ns, checkpoint_id
FROM {schema}.pgc_checkpoints
WHERE thread_id = ANY(%(thread_ids)s::text[])

-- name: delta_channel_history
-- One round trip: walks the target's parent chain inside Postgres, per channel
-- down to the nearest ancestor that stores a value for it, and returns the
-- writes on the way ('w') and the stored seeds ('s' from blobs, 'i' for values
-- kept inline in their checkpoint, whose channels `found` lists).
WITH RECURSIVE walk(checkpoint_id, parent_checkpoint_id, depth, walking, found, pending) AS (
    SELECT c.checkpoint_id, c.parent_checkpoint_id, 0,
           ARRAY[]::text[], ARRAY[]::text[], %(channels)s::text[]
    FROM {schema}.pgc_checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
      AND c.checkpoint_id = %(checkpoint_id)s
    UNION ALL
    SELECT p.checkpoint_id, p.parent_checkpoint_id, w.depth + 1, w.pending, s.found,
           ARRAY(SELECT ch FROM unnest(w.pending) AS ch WHERE NOT (ch = ANY(s.found)))
    FROM walk w
    JOIN {schema}.pgc_checkpoints p
      ON p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
     AND p.checkpoint_id = w.parent_checkpoint_id
    CROSS JOIN LATERAL (
        SELECT ARRAY(
            SELECT ch FROM unnest(w.pending) AS ch
            WHERE ch = ANY(p.inline_channels)
               OR EXISTS (
                   SELECT 1 FROM {schema}.pgc_blobs b
                   WHERE b.thread_id = p.thread_id AND b.checkpoint_ns = p.checkpoint_ns
                     AND b.channel = ch AND b.version = p.channel_versions ->> ch
                     AND b.type <> 'empty'
               )
        ) AS found
    ) s
    WHERE cardinality(w.pending) > 0 AND w.depth < %(max_depth)s
)
SELECT 'w' AS kind, w.depth, w.checkpoint_id, x.channel, NULL::text AS version,
       x.task_path, x.task_id, x.idx, x.type, x.blob, NULL::text[] AS found
FROM walk w
JOIN {schema}.pgc_writes x
  ON x.thread_id = %(thread_id)s AND x.checkpoint_ns = %(checkpoint_ns)s
 AND x.checkpoint_id = w.checkpoint_id AND x.channel = ANY(w.walking)
WHERE w.depth > 0
UNION ALL
SELECT 's', w.depth, w.checkpoint_id, b.channel, b.version, NULL, NULL, NULL,
       b.type, b.blob, NULL
FROM walk w
JOIN {schema}.pgc_checkpoints p
  ON p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
 AND p.checkpoint_id = w.checkpoint_id
JOIN {schema}.pgc_blobs b
  ON b.thread_id = p.thread_id AND b.checkpoint_ns = p.checkpoint_ns
 AND b.channel = ANY(w.found) AND b.version = p.channel_versions ->> b.channel
 AND NOT (b.channel = ANY(p.inline_channels))
WHERE w.depth > 0
UNION ALL
SELECT 'i', w.depth, w.checkpoint_id, NULL, NULL, NULL, NULL, NULL,
       p.type, p.checkpoint, w.found
FROM walk w
JOIN {schema}.pgc_checkpoints p
  ON p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
 AND p.checkpoint_id = w.checkpoint_id
WHERE w.depth > 0 AND w.found && p.inline_channels

-- name: schema_revision
-- The Alembic revision the database is at, or no row.
SELECT version_num FROM {schema}.pgcheckpoint_alembic_version
