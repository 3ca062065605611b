-- Every statement pgcheckpoint runs, one per name, loaded by `pgcheckpoint.queries`.
-- A block starts with `-- name: NAME` and runs to the next one. `{schema}` is
-- replaced by the quoted schema name; parameters are named (`%(thread_id)s`).
-- Tables: checkpoints (one row per checkpoint), blobs (channel values, one row
-- per channel version), writes (pending writes of a task at a checkpoint).

-- name: put_checkpoint
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
        thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
        type, checkpoint, channel_versions, inline_channels,
        metadata_type, metadata_blob, metadata
    )
    SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(parent_checkpoint_id)s,
           %(run_id)s, %(type)s, %(checkpoint)s, %(channel_versions)s, %(inline_channels)s,
           %(metadata_type)s, %(metadata_blob)s, %(metadata)s
    WHERE (SELECT stored FROM guard)
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
)
SELECT stored FROM guard

-- name: upsert_writes
-- Special writes (errors, interrupts, resumes) replace an earlier attempt's.
INSERT INTO {schema}.pgc_writes (
    thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
)
SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, %(task_path)s,
       w.idx, w.channel, w.type, w.blob
FROM unnest(%(idxs)s::int[], %(channels)s::text[], %(types)s::text[], %(blobs)b::bytea[])
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
FROM unnest(%(idxs)s::int[], %(channels)s::text[], %(types)s::text[], %(blobs)b::bytea[])
     AS w(idx, channel, type, blob)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING

-- fragment: tuple_columns
-- The columns `SaverCore.load_tuple` decodes, from a checkpoint row `c`, its
-- stored values `bl` and its pending writes `wr`.
c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
c.type, c.checkpoint, c.channel_versions, c.metadata_type, c.metadata_blob,
bl.blob_channels, bl.blob_versions, bl.blob_bases, bl.blob_types, bl.blob_values,
wr.write_task_ids, wr.write_idxs, wr.write_channels, wr.write_types, wr.write_values

-- fragment: tuple_writes
-- The pending writes of checkpoint `c`, in `writes_sort_key` order (task_path,
-- task_id, idx). COLLATE "C" is code-point order, as Python compares strings;
-- the database's own collation may be linguistic (en_US sorts "a" before "B").
CROSS JOIN LATERAL (
    SELECT array_agg(w.task_id ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_task_ids,
           array_agg(w.idx ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_idxs,
           array_agg(w.channel ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_channels,
           array_agg(w.type ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_types,
           array_agg(w.blob ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_values
    FROM {schema}.pgc_writes w
    WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
      AND w.checkpoint_id = c.checkpoint_id
) wr

-- fragment: checkpoint_tuple_from
-- A checkpoint row with its stored channel values and its pending writes. A
-- value stored as a delta comes with its chain of bases, oldest (the full
-- value) first. Each piece is looked up by primary key (LATERAL ... LIMIT 1):
-- with plain joins the planner hash-joined a sequential scan of the blobs at
-- every step of the chain (4 ms at turn 80 of a chat, and the whole table
-- when the thread's rows are not in its statistics yet).
SELECT {tuple_columns}
FROM {schema}.pgc_checkpoints c
CROSS JOIN LATERAL (
    WITH RECURSIVE piece(channel, version, base_version, type, blob, depth) AS (
        SELECT b.channel, b.version, b.base_version, b.type, b.blob, 0
        FROM unnest(ARRAY(SELECT jsonb_object_keys(c.channel_versions))) AS v(channel)
        CROSS JOIN LATERAL (
            SELECT b.channel, b.version, b.base_version, b.type, b.blob
            FROM {schema}.pgc_blobs b
            WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
              AND b.channel = v.channel AND b.version = c.channel_versions ->> v.channel
            LIMIT 1
        ) b
        UNION ALL
        SELECT b.channel, b.version, b.base_version, b.type, b.blob, p.depth + 1
        FROM piece p
        CROSS JOIN LATERAL (
            SELECT b.channel, b.version, b.base_version, b.type, b.blob
            FROM {schema}.pgc_blobs b
            WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
              AND b.channel = p.channel AND b.version = p.base_version
            LIMIT 1
        ) b
    )
    SELECT array_agg(channel ORDER BY channel, depth DESC) AS blob_channels,
           array_agg(version ORDER BY channel, depth DESC) AS blob_versions,
           array_agg(base_version ORDER BY channel, depth DESC) AS blob_bases,
           array_agg(type ORDER BY channel, depth DESC) AS blob_types,
           array_agg(blob ORDER BY channel, depth DESC) AS blob_values
    FROM piece
) bl
{tuple_writes}

-- name: get_latest_checkpoint
{checkpoint_tuple_from}
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
ORDER BY c.checkpoint_id DESC
LIMIT 1

-- name: get_checkpoint_by_id
{checkpoint_tuple_from}
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
  AND c.checkpoint_id = %(checkpoint_id)s

-- fragment: listed_columns
-- A `list` row: the columns of `tuple_columns` but the stored values, which
-- `listed_values` fetches for the whole page at once.
c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
c.type, c.checkpoint, c.channel_versions, c.metadata_type, c.metadata_blob,
wr.write_task_ids, wr.write_idxs, wr.write_channels, wr.write_types, wr.write_values

-- name: list_checkpoints
-- Optional filters stay static: a NULL parameter switches its predicate off. The
-- page is chosen first, on the checkpoints table alone, and only its rows get
-- their writes: a prepared statement's generic plan (from its sixth run)
-- cannot see which filters are off, and would otherwise gather the writes of
-- every matching checkpoint before applying the limit.
SELECT {listed_columns}
FROM (
    SELECT p.*
    FROM {schema}.pgc_checkpoints p
    WHERE (%(thread_id)s::text IS NULL OR p.thread_id = %(thread_id)s)
      AND (%(checkpoint_ns)s::text IS NULL OR p.checkpoint_ns = %(checkpoint_ns)s)
      AND (%(checkpoint_id)s::text IS NULL OR p.checkpoint_id = %(checkpoint_id)s)
      AND (%(before)s::text IS NULL OR p.checkpoint_id < %(before)s)
      AND (%(filter)s::jsonb IS NULL OR p.metadata @> %(filter)s)
    ORDER BY p.checkpoint_id DESC
    LIMIT %(limit)s
) c
{tuple_writes}
ORDER BY c.checkpoint_id DESC

-- name: list_thread_checkpoints
-- `list_checkpoints` of one thread and namespace, the usual call. The thread is a
-- plain equality, so a generic plan still reads only that thread's index range
-- (`$1 IS NULL OR thread_id = $1` would read every thread's checkpoints).
SELECT {listed_columns}
FROM (
    SELECT p.*
    FROM {schema}.pgc_checkpoints p
    WHERE p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
      AND (%(checkpoint_id)s::text IS NULL OR p.checkpoint_id = %(checkpoint_id)s)
      AND (%(before)s::text IS NULL OR p.checkpoint_id < %(before)s)
      AND (%(filter)s::jsonb IS NULL OR p.metadata @> %(filter)s)
    ORDER BY p.checkpoint_id DESC
    LIMIT %(limit)s
) c
{tuple_writes}
ORDER BY c.checkpoint_id DESC

-- fragment: base_level_step
-- The recursive term of a walk over the bases of stored values a level at a
-- time: the CTE `level` holds a depth and the keys of one level in parallel
-- arrays (thread_ids, checkpoint_nss, channels, versions); the next level is
-- the bases of those stored as deltas. One row per level keeps the planner's
-- estimate small (it guesses ten rounds of ten times the rows of a recursion,
-- and past jit_above_cost it JIT-compiles the plan: 50 ms to 1 s per call).
SELECT l.depth + 1, x.thread_ids, x.checkpoint_nss, x.channels, x.versions
FROM level l
CROSS JOIN LATERAL (
    SELECT array_agg(b.thread_id) AS thread_ids, array_agg(b.checkpoint_ns) AS checkpoint_nss,
           array_agg(b.channel) AS channels, array_agg(b.base_version) AS versions
    FROM unnest(l.thread_ids, l.checkpoint_nss, l.channels, l.versions)
         AS k(thread_id, checkpoint_ns, channel, version)
    CROSS JOIN LATERAL (
        SELECT b.thread_id, b.checkpoint_ns, b.channel, b.base_version
        FROM {schema}.pgc_blobs b
        WHERE b.thread_id = k.thread_id AND b.checkpoint_ns = k.checkpoint_ns
          AND b.channel = k.channel AND b.version = k.version
        LIMIT 1
    ) b
    -- a base this level walks already (it holds both a value and its base)
    -- is not walked twice: the chains of one channel overlap
    WHERE b.base_version IS NOT NULL
      AND NOT EXISTS (
          SELECT FROM unnest(l.thread_ids, l.checkpoint_nss, l.channels, l.versions)
               AS s(thread_id, checkpoint_ns, channel, version)
          WHERE s.thread_id = b.thread_id AND s.checkpoint_ns = b.checkpoint_ns
            AND s.channel = b.channel AND s.version = b.base_version
      )
) x
WHERE x.channels IS NOT NULL AND l.depth < %(max_depth)s

-- fragment: level_keys
-- Every key a `level` walk (base_level_step) reached, once.
SELECT DISTINCT k.thread_id, k.checkpoint_ns, k.channel, k.version
FROM level l
CROSS JOIN LATERAL unnest(l.thread_ids, l.checkpoint_nss, l.channels, l.versions)
     AS k(thread_id, checkpoint_ns, channel, version)

-- name: listed_values
-- The stored values of some checkpoints (a `list` page, a page of a thread
-- being copied), each once: the channel versions the checkpoints name, and the
-- chains of bases of those stored as deltas ('v' rows). The checkpoints of a
-- long chat share most of their messages (one full value and its deltas),
-- which one row per checkpoint would send again in each. Also which of the
-- checkpoints exist ('c' rows): one deleted since its page was read is left
-- out, as if it had been deleted before; one that exists in this statement's
-- snapshot has all its values here.
-- The walk over delta bases (base_level_step) carries no bytes; each blob is
-- read once, at the end.
WITH RECURSIVE listed AS MATERIALIZED (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.channel_versions,
           c.inline_channels
    FROM unnest(%(thread_ids)s::text[], %(checkpoint_nss)s::text[], %(checkpoint_ids)s::text[])
         AS k(thread_id, checkpoint_ns, checkpoint_id)
    JOIN {schema}.pgc_checkpoints c
      ON c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns
     AND c.checkpoint_id = k.checkpoint_id
), level(depth, thread_ids, checkpoint_nss, channels, versions) AS (
    SELECT 0, array_agg(c.thread_id), array_agg(c.checkpoint_ns), array_agg(v.channel),
           array_agg(v.version)
    FROM listed c
    CROSS JOIN LATERAL jsonb_each_text(c.channel_versions) AS v(channel, version)
    WHERE NOT (v.channel = ANY(c.inline_channels))
    UNION ALL
    {base_level_step}
), wanted AS (
    {level_keys}
)
SELECT 'v' AS kind, b.thread_id, b.checkpoint_ns, NULL::text AS checkpoint_id, b.channel,
       b.version, b.base_version, b.type, b.blob
FROM wanted k
CROSS JOIN LATERAL (
    SELECT b.thread_id, b.checkpoint_ns, b.channel, b.version, b.base_version, b.type, b.blob
    FROM {schema}.pgc_blobs b
    WHERE b.thread_id = k.thread_id AND b.checkpoint_ns = k.checkpoint_ns
      AND b.channel = k.channel AND b.version = k.version
    LIMIT 1
) b
UNION ALL
SELECT 'c', c.thread_id, c.checkpoint_ns, c.checkpoint_id, NULL, NULL, NULL, NULL, NULL
FROM listed c

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
    thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
    type, checkpoint, channel_versions, inline_channels,
    metadata_type, metadata_blob, metadata, created_at
)
SELECT %(target_thread_id)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
       type, checkpoint, channel_versions, inline_channels,
       metadata_type, metadata_blob, metadata, created_at
FROM {schema}.pgc_checkpoints WHERE thread_id = %(source_thread_id)s
ON CONFLICT DO NOTHING

-- name: thread_checkpoints_page
-- copy_thread through the client (values sealed to their thread): one page of a
-- thread's checkpoints in key order. JSON and arrays go as text, to come back as is.
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, checkpoint,
       channel_versions::text AS channel_versions,
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
    thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
    type, checkpoint, channel_versions, inline_channels,
    metadata_type, metadata_blob, metadata, created_at
)
SELECT %(thread_id)s, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.run_id,
       c.type, c.checkpoint, c.channel_versions::jsonb,
       ARRAY(SELECT jsonb_array_elements_text(c.inline_channels::jsonb)),
       c.metadata_type, c.metadata_blob, c.metadata::jsonb, c.created_at
FROM unnest(%(checkpoint_ns)s::text[], %(checkpoint_id)s::text[],
            %(parent_checkpoint_id)s::text[], %(run_id)s::text[], %(type)s::text[],
            %(checkpoint)s::bytea[], %(channel_versions)s::text[], %(inline_channels)s::text[],
            %(metadata_type)s::text[], %(metadata_blob)s::bytea[], %(metadata)s::text[],
            %(created_at)s::timestamptz[])
     AS c(checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, checkpoint,
          channel_versions, inline_channels, metadata_type, metadata_blob, metadata, created_at)
ON CONFLICT DO NOTHING

-- name: count_values_by_cipher
-- Key rotation: what encrypts each stored value, per kind. `cipher` is the last
-- `+` part of the type (`aesgcm:<key id>`, `aes` for LangGraph's own format,
-- anything else or NULL for a value stored unencrypted).
SELECT 'checkpoints' AS kind, substring(type from '[+]([^+]*)$') AS cipher, count(*) AS n
FROM {schema}.pgc_checkpoints GROUP BY 2
UNION ALL
SELECT 'metadata', substring(metadata_type from '[+]([^+]*)$'), count(*)
FROM {schema}.pgc_checkpoints GROUP BY 2
UNION ALL
SELECT 'blobs', substring(type from '[+]([^+]*)$'), count(*)
FROM {schema}.pgc_blobs WHERE type <> 'empty' GROUP BY 2
UNION ALL
SELECT 'writes', substring(type from '[+]([^+]*)$'), count(*)
FROM {schema}.pgc_writes GROUP BY 2

-- name: rotation_checkpoints_page
-- Key rotation: the next checkpoints, in key order, with a value whose type does
-- not end with `suffix` (the active key's).
SELECT thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, metadata_type, metadata_blob
FROM {schema}.pgc_checkpoints
WHERE (%(after_thread_id)s::text IS NULL
       OR (thread_id, checkpoint_ns, checkpoint_id)
          > (%(after_thread_id)s::text, %(after_checkpoint_ns)s::text,
             %(after_checkpoint_id)s::text))
  AND (right(type, char_length(%(suffix)s)) <> %(suffix)s
       OR right(metadata_type, char_length(%(suffix)s)) <> %(suffix)s)
ORDER BY thread_id, checkpoint_ns, checkpoint_id
LIMIT %(limit)s

-- name: rotation_update_checkpoints
-- Key rotation: re-encrypted values go back row by row, only where the row still
-- holds what was read (same types, same sha256 of the values), so a checkpoint the
-- application saved again meanwhile is never undone.
UPDATE {schema}.pgc_checkpoints c
SET type = u.type, checkpoint = u.checkpoint, metadata_type = u.metadata_type,
    metadata_blob = u.metadata_blob, metadata = coalesce(u.metadata::jsonb, c.metadata)
FROM unnest(%(thread_id)s::text[], %(checkpoint_ns)s::text[], %(checkpoint_id)s::text[],
            %(old_type)s::text[], %(old_digest)s::bytea[], %(old_metadata_type)s::text[],
            %(old_metadata_digest)s::bytea[], %(type)s::text[], %(checkpoint)s::bytea[],
            %(metadata_type)s::text[], %(metadata_blob)s::bytea[], %(metadata)s::text[])
     AS u(thread_id, checkpoint_ns, checkpoint_id, old_type, old_digest, old_metadata_type,
          old_metadata_digest, type, checkpoint, metadata_type, metadata_blob, metadata)
WHERE c.thread_id = u.thread_id AND c.checkpoint_ns = u.checkpoint_ns
  AND c.checkpoint_id = u.checkpoint_id
  AND c.type = u.old_type AND sha256(c.checkpoint) = u.old_digest
  AND c.metadata_type = u.old_metadata_type AND sha256(c.metadata_blob) = u.old_metadata_digest
RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id

-- name: rotation_blobs_page
SELECT thread_id, checkpoint_ns, channel, version, type, blob
FROM {schema}.pgc_blobs
WHERE (%(after_thread_id)s::text IS NULL
       OR (thread_id, checkpoint_ns, channel, version)
          > (%(after_thread_id)s::text, %(after_checkpoint_ns)s::text,
             %(after_channel)s::text, %(after_version)s::text))
  AND type <> 'empty' AND right(type, char_length(%(suffix)s)) <> %(suffix)s
ORDER BY thread_id, checkpoint_ns, channel, version
LIMIT %(limit)s

-- name: rotation_update_blobs
UPDATE {schema}.pgc_blobs b
SET type = u.type, blob = u.blob
FROM unnest(%(thread_id)s::text[], %(checkpoint_ns)s::text[], %(channel)s::text[],
            %(version)s::text[], %(old_type)s::text[], %(old_digest)s::bytea[],
            %(type)s::text[], %(blob)s::bytea[])
     AS u(thread_id, checkpoint_ns, channel, version, old_type, old_digest, type, blob)
WHERE b.thread_id = u.thread_id AND b.checkpoint_ns = u.checkpoint_ns
  AND b.channel = u.channel AND b.version = u.version
  AND b.type = u.old_type AND sha256(b.blob) = u.old_digest
RETURNING b.thread_id, b.checkpoint_ns, b.channel, b.version

-- name: rotation_writes_page
SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, type, blob
FROM {schema}.pgc_writes
WHERE (%(after_thread_id)s::text IS NULL
       OR (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
          > (%(after_thread_id)s::text, %(after_checkpoint_ns)s::text,
             %(after_checkpoint_id)s::text, %(after_task_id)s::text, %(after_idx)s::int))
  AND right(type, char_length(%(suffix)s)) <> %(suffix)s
ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx
LIMIT %(limit)s

-- name: rotation_update_writes
UPDATE {schema}.pgc_writes w
SET type = u.type, blob = u.blob
FROM unnest(%(thread_id)s::text[], %(checkpoint_ns)s::text[], %(checkpoint_id)s::text[],
            %(task_id)s::text[], %(idx)s::int[], %(old_type)s::text[], %(old_digest)s::bytea[],
            %(type)s::text[], %(blob)s::bytea[])
     AS u(thread_id, checkpoint_ns, checkpoint_id, task_id, idx, old_type, old_digest, type, blob)
WHERE w.thread_id = u.thread_id AND w.checkpoint_ns = u.checkpoint_ns
  AND w.checkpoint_id = u.checkpoint_id AND w.task_id = u.task_id AND w.idx = u.idx
  AND w.type = u.old_type AND sha256(w.blob) = u.old_digest
RETURNING w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx

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

-- fragment: stored_value_probe
-- `stored.hit` is true when checkpoint `p` has a value of channel `ch` in
-- pgc_blobs. A LATERAL probe, not EXISTS: the planner turns an EXISTS here into
-- a hashed scan of the thread's every blob, once per ancestor.
LEFT JOIN LATERAL (
    SELECT true AS hit FROM {schema}.pgc_blobs b
    WHERE b.thread_id = p.thread_id AND b.checkpoint_ns = p.checkpoint_ns
      AND b.channel = ch AND b.version = p.channel_versions ->> ch
      AND b.type <> 'empty'
    LIMIT 1
) stored ON true

-- name: rebuild_dependencies
-- Every checkpoint a set of kept checkpoints needs to be rebuilt: walks each one's
-- parent chain for as long as one of its DeltaChannels (named by LangGraph in the
-- metadata's counters_since_delta_snapshot) has no stored value there, down to
-- the ancestor that stores one. The kept checkpoints come back at depth 0.
WITH RECURSIVE walk(thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, depth, pending) AS (
    SELECT p.thread_id, p.checkpoint_ns, p.checkpoint_id, p.parent_checkpoint_id, 0,
           ARRAY(
               SELECT ch FROM jsonb_object_keys(
                   CASE WHEN jsonb_typeof(p.metadata -> 'counters_since_delta_snapshot') = 'object'
                        THEN p.metadata -> 'counters_since_delta_snapshot' ELSE '{}'::jsonb END
               ) AS ch
               {stored_value_probe}
               WHERE p.channel_versions ? ch
                 AND NOT (ch = ANY(p.inline_channels))
                 AND stored.hit IS NULL
           )
    FROM {schema}.pgc_checkpoints p
    JOIN unnest(%(thread_ids)s::text[], %(checkpoint_nss)s::text[], %(checkpoint_ids)s::text[])
         AS k(thread_id, checkpoint_ns, checkpoint_id)
      ON p.thread_id = k.thread_id AND p.checkpoint_ns = k.checkpoint_ns
     AND p.checkpoint_id = k.checkpoint_id
    UNION ALL
    SELECT p.thread_id, p.checkpoint_ns, p.checkpoint_id, p.parent_checkpoint_id, w.depth + 1,
           ARRAY(
               SELECT ch FROM unnest(w.pending) AS ch
               {stored_value_probe}
               WHERE NOT (ch = ANY(p.inline_channels)) AND stored.hit IS NULL
           )
    FROM walk w
    JOIN {schema}.pgc_checkpoints p
      ON p.thread_id = w.thread_id AND p.checkpoint_ns = w.checkpoint_ns
     AND p.checkpoint_id = w.parent_checkpoint_id
    WHERE cardinality(w.pending) > 0 AND w.depth < %(max_depth)s
)
SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM walk

-- fragment: checkpoint_bytes
-- An expression: the stored size of the values of the checkpoints row `c`.
(pg_column_size(c.checkpoint) + pg_column_size(c.metadata_blob)
 + pg_column_size(c.metadata) + pg_column_size(c.channel_versions))

-- fragment: blobs_to_drop
-- Common table expressions shared by delete_checkpoints and its dry run: given
-- `doomed` (the checkpoints that go) and `freed` (the values they read), `dropped`
-- is the values that no other checkpoint of their namespaces reads, directly or
-- as the base of a delta.
kept_refs AS (
    SELECT c.thread_id, c.checkpoint_ns, v.channel, v.version
    FROM (SELECT DISTINCT thread_id, checkpoint_ns FROM doomed) n
    CROSS JOIN LATERAL (
        SELECT c.* FROM {schema}.pgc_checkpoints c
        WHERE c.thread_id = n.thread_id AND c.checkpoint_ns = n.checkpoint_ns
    ) c
    CROSS JOIN LATERAL jsonb_each_text(c.channel_versions) AS v(channel, version)
    WHERE NOT EXISTS (
        SELECT 1 FROM doomed d
        WHERE d.thread_id = c.thread_id AND d.checkpoint_ns = c.checkpoint_ns
          AND d.checkpoint_id = c.checkpoint_id
    )
), level(depth, thread_ids, checkpoint_nss, channels, versions) AS (
    SELECT 0, array_agg(thread_id), array_agg(checkpoint_ns), array_agg(channel),
           array_agg(version)
    FROM kept_refs
    UNION ALL
    {base_level_step}
), kept AS (
    {level_keys}
), dropped AS (
    SELECT f.thread_id, f.checkpoint_ns, f.channel, f.version
    FROM freed f
    WHERE NOT EXISTS (
        SELECT 1 FROM kept k
        WHERE k.thread_id = f.thread_id AND k.checkpoint_ns = f.checkpoint_ns
          AND k.channel = f.channel AND k.version = f.version
    )
)

-- name: delete_checkpoints
-- Deletes the listed checkpoints with their writes, then the blobs no remaining
-- checkpoint of those namespaces reads (directly, or as the base of a delta); a
-- kept checkpoint whose parent went is left without one. Checkpoints go before
-- blobs (the blobs to free come from the deleted rows): a put locks its parent
-- first, then the bases of its deltas, so taking them in that order never
-- deadlocks with one. Returns what went.
WITH RECURSIVE doomed AS (
    SELECT * FROM unnest(%(thread_ids)s::text[], %(checkpoint_nss)s::text[],
                         %(checkpoint_ids)s::text[]) AS d(thread_id, checkpoint_ns, checkpoint_id)
), deleted_writes AS (
    DELETE FROM {schema}.pgc_writes w USING doomed d
    WHERE w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns
      AND w.checkpoint_id = d.checkpoint_id
    RETURNING pg_column_size(w.blob) AS size
), deleted AS (
    DELETE FROM {schema}.pgc_checkpoints c USING doomed d
    WHERE c.thread_id = d.thread_id AND c.checkpoint_ns = d.checkpoint_ns
      AND c.checkpoint_id = d.checkpoint_id
    RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.channel_versions,
              {checkpoint_bytes} AS size
), orphaned AS (
    UPDATE {schema}.pgc_checkpoints c SET parent_checkpoint_id = NULL
    FROM deleted d
    WHERE c.thread_id = d.thread_id AND c.checkpoint_ns = d.checkpoint_ns
      AND c.parent_checkpoint_id = d.checkpoint_id
), freed AS (
    SELECT DISTINCT d.thread_id, d.checkpoint_ns, v.channel, v.version
    FROM deleted d, jsonb_each_text(d.channel_versions) AS v(channel, version)
), {blobs_to_drop}, deleted_blobs AS (
    DELETE FROM {schema}.pgc_blobs b USING dropped f
    WHERE b.thread_id = f.thread_id AND b.checkpoint_ns = f.checkpoint_ns
      AND b.channel = f.channel AND b.version = f.version
    RETURNING coalesce(pg_column_size(b.blob), 0) AS size
)
SELECT (SELECT count(*) FROM deleted) AS checkpoints,
       (SELECT count(*) FROM deleted_writes) AS writes,
       (SELECT count(*) FROM deleted_blobs) AS blobs,
       coalesce((SELECT sum(size) FROM deleted), 0)
       + coalesce((SELECT sum(size) FROM deleted_writes), 0)
       + coalesce((SELECT sum(size) FROM deleted_blobs), 0) AS bytes

-- name: thread_checkpoint_ids
SELECT thread_id, checkpoint_ns, checkpoint_id
FROM {schema}.pgc_checkpoints
WHERE thread_id = ANY(%(thread_ids)s::text[])

-- name: delta_channel_history
-- One round trip: walks the target's parent chain inside Postgres, per channel
-- down to the nearest ancestor that stores a value for it, and returns the
-- writes on the way ('w') and the stored seeds ('s' from blobs, 'i' for values
-- kept inline in their checkpoint, whose channels `found` lists). At each
-- ancestor, `walking` holds the channels not found below it (its writes count
-- for them) and `found` those of them it stores; each is probed once.
WITH RECURSIVE walk(checkpoint_id, parent_checkpoint_id, depth, walking, found) AS (
    SELECT c.checkpoint_id, c.parent_checkpoint_id, 0, %(channels)s::text[], ARRAY[]::text[]
    FROM {schema}.pgc_checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
      AND c.checkpoint_id = %(checkpoint_id)s
    UNION ALL
    SELECT p.checkpoint_id, p.parent_checkpoint_id, w.depth + 1, n.walking,
           ARRAY(
               SELECT ch FROM unnest(n.walking) AS ch
               {stored_value_probe}
               WHERE ch = ANY(p.inline_channels) OR stored.hit
           )
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT ARRAY(SELECT ch FROM unnest(w.walking) AS ch WHERE NOT (ch = ANY(w.found)))
            AS walking
    ) n
    -- LATERAL ... LIMIT 1 lookups by primary key keep every key column in the
    -- index condition, also in a prepared statement's generic plan (a plain
    -- join there scanned the whole thread at each step).
    CROSS JOIN LATERAL (
        SELECT * FROM {schema}.pgc_checkpoints p
        WHERE p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
          AND p.checkpoint_id = w.parent_checkpoint_id
        LIMIT 1
    ) p
    WHERE cardinality(n.walking) > 0 AND w.depth < %(max_depth)s
), holders AS (
    -- the few ancestors that store a seed, looked up again only for those
    SELECT w.depth, w.checkpoint_id, w.found, p.channel_versions, p.inline_channels,
           p.type, p.checkpoint
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT * FROM {schema}.pgc_checkpoints p
        WHERE p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
          AND p.checkpoint_id = w.checkpoint_id
        LIMIT 1
    ) p
    WHERE w.depth > 0 AND cardinality(w.found) > 0
), seed(depth, checkpoint_id, channel, version, base_version, piece, type, blob) AS (
    -- A stored seed, with the chain of bases when it is a delta (piece 0 is the
    -- seed itself, the highest piece the full value).
    SELECT h.depth, h.checkpoint_id, b.channel, b.version, b.base_version, 0, b.type, b.blob
    FROM holders h
    CROSS JOIN LATERAL unnest(h.found) AS f(channel)
    JOIN LATERAL (
        SELECT * FROM {schema}.pgc_blobs b
        WHERE b.thread_id = %(thread_id)s AND b.checkpoint_ns = %(checkpoint_ns)s
          AND b.channel = f.channel AND b.version = h.channel_versions ->> f.channel
        LIMIT 1
    ) b ON true
    WHERE NOT (f.channel = ANY(h.inline_channels))
    UNION ALL
    SELECT s.depth, s.checkpoint_id, b.channel, b.version, b.base_version, s.piece + 1,
           b.type, b.blob
    FROM seed s
    CROSS JOIN LATERAL (
        SELECT * FROM {schema}.pgc_blobs b
        WHERE b.thread_id = %(thread_id)s AND b.checkpoint_ns = %(checkpoint_ns)s
          AND b.channel = s.channel AND b.version = s.base_version
        LIMIT 1
    ) b
)
SELECT 'w' AS kind, w.depth, w.checkpoint_id, x.channel, NULL::text AS version,
       NULL::text AS base_version, x.task_path, x.task_id, x.idx, x.type, x.blob,
       NULL::text[] AS found
FROM walk w
JOIN {schema}.pgc_writes x
  ON x.thread_id = %(thread_id)s AND x.checkpoint_ns = %(checkpoint_ns)s
 AND x.checkpoint_id = w.checkpoint_id AND x.channel = ANY(w.walking)
WHERE w.depth > 0
UNION ALL
SELECT 's', s.depth, s.checkpoint_id, s.channel, s.version, s.base_version, NULL, NULL,
       s.piece, s.type, s.blob, NULL
FROM seed s
UNION ALL
SELECT 'i', h.depth, h.checkpoint_id, NULL, NULL, NULL, NULL, NULL, NULL,
       h.type, h.checkpoint, h.found
FROM holders h
WHERE h.found && h.inline_channels

-- name: schema_revision
-- The Alembic revision the database is at, or no row.
SELECT version_num FROM {schema}.pgcheckpoint_alembic_version

-- name: version_table_exists
-- Whether the schema has pgcheckpoint's version table; asked before reading it,
-- so the check itself never fails on a database that was never migrated.
SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relname = 'pgcheckpoint_alembic_version'
) AS present

-- Import from langgraph-checkpoint-postgres (pgcheckpoint.importer). Statements
-- named lg_* read the official saver's tables, and there `{schema}` is the
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

-- name: lg_pending_sends
-- Before checkpoint format v4 the sends of a step were writes to the TASKS
-- channel of the parent checkpoint, in `writes_sort_key` order.
SELECT w.checkpoint_ns, w.checkpoint_id, w.type, w.blob
FROM unnest(%(checkpoint_nss)s::text[], %(checkpoint_ids)s::text[])
     AS k(checkpoint_ns, checkpoint_id)
JOIN {schema}.checkpoint_writes w
  ON w.thread_id = %(thread_id)s AND w.checkpoint_ns = k.checkpoint_ns
 AND w.checkpoint_id = k.checkpoint_id AND w.channel = '__pregel_tasks'
ORDER BY w.checkpoint_ns, w.checkpoint_id,
         w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx

-- fragment: thread_lock_holder_pid
-- Thread locks (pgcheckpoint.locking) are session advisory locks (lock_class, key)
-- held on a connection reserved for one guarded run. Keys are cast to int4 so
-- the two-key functions are called; pg_locks shows them as classid/objid oids
-- with objsubid = 2.
SELECT l.pid FROM pg_catalog.pg_locks l
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
  AND l.classid = %(lock_class)s::int4::oid AND l.objid = %(key)s::int4::oid
LIMIT 1

-- name: try_thread_lock
-- Try once; when taken, name the session holding it (NULL if it just let go).
-- A session that already holds the lock before trying is shared with another
-- client (a pooler in transaction mode): trying would succeed, as advisory
-- locks are re-entrant, so it does not try.
WITH mine AS MATERIALIZED (
    SELECT EXISTS (
        SELECT 1 FROM pg_catalog.pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.pid = pg_backend_pid()
          AND l.database = (SELECT oid FROM pg_catalog.pg_database
                            WHERE datname = current_database())
          AND l.classid = %(lock_class)s::int4::oid AND l.objid = %(key)s::int4::oid
    ) AS already_held
), attempt AS MATERIALIZED (
    SELECT m.already_held,
           CASE WHEN m.already_held THEN false
                ELSE pg_try_advisory_lock(%(lock_class)s::int4, %(key)s::int4) END AS locked
    FROM mine m
)
SELECT a.already_held, a.locked, pg_backend_pid() AS backend_pid,
       CASE WHEN NOT a.locked THEN ({thread_lock_holder_pid}) END AS holder_pid
FROM attempt a

-- name: wait_thread_lock
-- Wait in the server's lock queue for at most lock_timeout ms ('0': no limit),
-- raising lock_not_available (55P03) when it runs out. set_config(..., true)
-- lasts until the end of this statement's own transaction (autocommit), and the
-- materialized CTE is read before the select list asks for the lock.
WITH wait AS MATERIALIZED (
    SELECT set_config('lock_timeout', %(lock_timeout)s, true) AS lock_timeout
)
SELECT pg_backend_pid() AS backend_pid,
       pg_advisory_lock(%(lock_class)s::int4, %(key)s::int4)::text AS locked
FROM wait

-- name: thread_lock_holder
-- The session holding a thread's lock, after a wait for it ran out.
SELECT ({thread_lock_holder_pid}) AS holder_pid

-- name: thread_lock_check
-- Whether the session that runs this holds the lock: a pooler in transaction
-- mode may run each statement on another server session.
SELECT pg_backend_pid() AS backend_pid, EXISTS (
    SELECT 1 FROM pg_catalog.pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
      AND l.pid = pg_backend_pid()
      AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
      AND l.classid = %(lock_class)s::int4::oid AND l.objid = %(key)s::int4::oid
) AS held

-- name: unlock_thread
-- False (with a server WARNING) when this session does not hold the lock, NULL
-- when this is not the session that took it: behind a pooler, never release
-- the lock another client holds on this session.
SELECT CASE WHEN pg_backend_pid() = %(backend_pid)s
            THEN pg_advisory_unlock(%(lock_class)s::int4, %(key)s::int4) END AS unlocked

-- fragment: inspect_checkpoint_facts
-- `pgcheckpoint show` / `threads`: checkpoint `c` with what can be told without
-- reading its channel values: its parent's record (whose versions_seen says
-- which nodes ran), the channels holding a value now, the channels whose version
-- differs from the parent's with the stored size of the new version, the values
-- that decide whether a barrier or Send packets trigger nodes (with the bases of
-- a delta, oldest first), and the writes saved against it (sizes; payloads only
-- for the special writes: errors, interrupts, resumes, whose idx is negative).
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.run_id,
       c.created_at, c.type, c.checkpoint, c.channel_versions, c.metadata_type,
       c.metadata_blob, c.metadata,
       octet_length(c.checkpoint) + octet_length(c.metadata_blob) AS record_bytes,
       p.type AS parent_type, p.checkpoint AS parent_checkpoint,
       (SELECT count(DISTINCT x.task_id) FROM {schema}.pgc_writes x
        WHERE x.thread_id = c.thread_id AND x.checkpoint_ns = c.checkpoint_ns
          AND x.checkpoint_id = c.parent_checkpoint_id
          AND starts_with(x.task_path, '~__pregel_push')) AS parent_push_tasks,
       ch.available_channels, ch.changed_channels, ch.changed_versions, ch.changed_stored,
       ch.changed_bytes,
       tr.trigger_channels, tr.trigger_versions, tr.trigger_types, tr.trigger_blobs,
       wr.write_task_ids, wr.write_task_paths, wr.write_idxs, wr.write_channels,
       wr.write_types, wr.write_bytes, wr.write_payloads
FROM {schema}.pgc_checkpoints c
-- Lookups by primary key are LATERAL ... LIMIT 1, which the planner cannot
-- flatten into a join: on a table it has no statistics for yet (a thread just
-- written) it would otherwise scan a whole thread for each checkpoint.
LEFT JOIN LATERAL (
    SELECT p.type, p.checkpoint, p.channel_versions
    FROM {schema}.pgc_checkpoints p
    WHERE p.thread_id = c.thread_id AND p.checkpoint_ns = c.checkpoint_ns
      AND p.checkpoint_id = c.parent_checkpoint_id
    LIMIT 1
) p ON true
CROSS JOIN LATERAL (
    SELECT array_agg(v.channel ORDER BY v.channel) FILTER (
               WHERE v.channel = ANY(c.inline_channels) OR b.type <> 'empty'
           ) AS available_channels,
           array_agg(v.channel ORDER BY v.channel) FILTER (WHERE s.changed) AS changed_channels,
           array_agg(v.version ORDER BY v.channel) FILTER (WHERE s.changed) AS changed_versions,
           array_agg(
               CASE WHEN v.channel = ANY(c.inline_channels) THEN 'inline'
                    WHEN b.type IS NULL OR b.type = 'empty' THEN 'cleared'
                    WHEN b.base_version IS NOT NULL THEN 'delta'
                    ELSE 'blob' END
               ORDER BY v.channel
           ) FILTER (WHERE s.changed) AS changed_stored,
           array_agg(b.size ORDER BY v.channel) FILTER (WHERE s.changed) AS changed_bytes
    FROM jsonb_each_text(c.channel_versions) AS v(channel, version)
    LEFT JOIN LATERAL (
        SELECT b.type, b.base_version, octet_length(b.blob) AS size
        FROM {schema}.pgc_blobs b
        WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
          AND b.channel = v.channel AND b.version = v.version
        LIMIT 1
    ) b ON true
    CROSS JOIN LATERAL (
        SELECT (p.channel_versions ->> v.channel) IS DISTINCT FROM v.version AS changed
    ) s
) ch
CROSS JOIN LATERAL (
    WITH RECURSIVE piece(channel, version, base_version, type, blob, depth) AS (
        SELECT b.channel, b.version, b.base_version, b.type, b.blob, 0
        FROM jsonb_each_text(c.channel_versions) AS v(channel, version)
        CROSS JOIN LATERAL (
            SELECT b.channel, b.version, b.base_version, b.type, b.blob
            FROM {schema}.pgc_blobs b
            WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
              AND b.channel = v.channel AND b.version = v.version AND b.type <> 'empty'
            LIMIT 1
        ) b
        WHERE v.channel = '__pregel_tasks' OR starts_with(v.channel, 'join:')
        UNION ALL
        SELECT b.channel, b.version, b.base_version, b.type, b.blob, piece.depth + 1
        FROM piece
        CROSS JOIN LATERAL (
            SELECT b.channel, b.version, b.base_version, b.type, b.blob
            FROM {schema}.pgc_blobs b
            WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
              AND b.channel = piece.channel AND b.version = piece.base_version
            LIMIT 1
        ) b
    )
    SELECT array_agg(channel ORDER BY channel, depth DESC) AS trigger_channels,
           array_agg(version ORDER BY channel, depth DESC) AS trigger_versions,
           array_agg(type ORDER BY channel, depth DESC) AS trigger_types,
           array_agg(blob ORDER BY channel, depth DESC) AS trigger_blobs
    FROM piece
) tr
CROSS JOIN LATERAL (
    SELECT array_agg(w.task_id ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_task_ids,
           array_agg(w.task_path ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_task_paths,
           array_agg(w.idx ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_idxs,
           array_agg(w.channel ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_channels,
           array_agg(w.type ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_types,
           array_agg(octet_length(w.blob)
                     ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_bytes,
           array_agg(CASE WHEN w.idx < 0 THEN w.blob END
                     ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS write_payloads
    FROM {schema}.pgc_writes w
    WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
      AND w.checkpoint_id = c.checkpoint_id
) wr

-- name: inspect_recent_threads
-- The `limit` threads with the most recent checkpoints, newest first, each with
-- its counts, stored size and the facts of its latest root checkpoint. The walk
-- reads the created_at index backwards, skipping threads already found, so it
-- touches only rows newer than the last thread listed. A metadata filter
-- matches a thread when one of its checkpoints contains any of `filters`.
WITH RECURSIVE walk(thread_id, created_at, seen, n) AS (
    (SELECT c.thread_id, c.created_at, ARRAY[c.thread_id], 1
     FROM {schema}.pgc_checkpoints c
     WHERE (%(since)s::timestamptz IS NULL OR c.created_at >= %(since)s)
       AND (%(filters)s::jsonb[] IS NULL OR c.metadata @> ANY(%(filters)s::jsonb[]))
     ORDER BY c.created_at DESC
     LIMIT 1)
    UNION ALL
    SELECT nx.thread_id, nx.created_at, w.seen || nx.thread_id, w.n + 1
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT c.thread_id, c.created_at
        FROM {schema}.pgc_checkpoints c
        WHERE c.created_at <= w.created_at AND NOT (c.thread_id = ANY(w.seen))
          AND (%(since)s::timestamptz IS NULL OR c.created_at >= %(since)s)
          AND (%(filters)s::jsonb[] IS NULL OR c.metadata @> ANY(%(filters)s::jsonb[]))
        ORDER BY c.created_at DESC
        LIMIT 1
    ) nx
    WHERE w.n < %(limit)s
)
SELECT h.*, w.n, w.thread_id, s.checkpoints, s.namespaces, s.last_activity,
       s.record_bytes + bl.bytes + wb.bytes AS size_bytes
FROM walk w
CROSS JOIN LATERAL (
    SELECT count(*) AS checkpoints, count(DISTINCT checkpoint_ns) AS namespaces,
           max(created_at) AS last_activity,
           sum(octet_length(checkpoint) + octet_length(metadata_blob)
               + pg_column_size(metadata) + pg_column_size(channel_versions)) AS record_bytes
    FROM {schema}.pgc_checkpoints WHERE thread_id = w.thread_id
) s
CROSS JOIN LATERAL (
    SELECT coalesce(sum(octet_length(blob)), 0) AS bytes
    FROM {schema}.pgc_blobs WHERE thread_id = w.thread_id
) bl
CROSS JOIN LATERAL (
    SELECT coalesce(sum(octet_length(blob)), 0) AS bytes
    FROM {schema}.pgc_writes WHERE thread_id = w.thread_id
) wb
LEFT JOIN LATERAL (
    {inspect_checkpoint_facts}
    WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = ''
    ORDER BY c.checkpoint_id DESC
    LIMIT 1
) h ON true
ORDER BY w.n

-- name: inspect_thread_lock_holders
-- Which of the given thread-lock keys (pgcheckpoint.locking) a session holds now.
SELECT k.key, l.pid AS holder_pid
FROM unnest(%(keys)s::int4[]) AS k(key)
JOIN pg_catalog.pg_locks l
  ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
 AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
 AND l.classid = %(lock_class)s::int4::oid AND l.objid = k.key::oid

-- name: inspect_namespace_counts
-- How many checkpoints a namespace of a thread has, and how many are newer than `until`.
SELECT count(*) AS total,
       count(*) FILTER (WHERE checkpoint_id > %(until)s::text) AS newer
FROM {schema}.pgc_checkpoints
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s

-- name: inspect_thread_page
-- One page of a namespace's checkpoints, newest first, at or before `until`.
{inspect_checkpoint_facts}
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
  AND (%(until)s::text IS NULL OR c.checkpoint_id <= %(until)s)
ORDER BY c.checkpoint_id DESC
LIMIT %(limit)s

-- name: inspect_later_children
-- Children of listed checkpoints that are newer than a page ending at `until`.
SELECT parent_checkpoint_id, checkpoint_id, metadata ->> 'source' AS source
FROM {schema}.pgc_checkpoints
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
  AND checkpoint_id > %(until)s
  AND parent_checkpoint_id = ANY(%(checkpoint_ids)s::text[])

-- name: inspect_child_namespaces
-- Subgraph namespaces directly below `checkpoint_ns` that ran from one of the
-- listed checkpoints (LangGraph records it in metadata `parents`; a namespace
-- whose metadata JSONB lacks it, kept encrypted, is returned for the client to
-- decide), each with its number of checkpoints and the facts of its newest.
WITH heads AS (
    SELECT DISTINCT ON (c.checkpoint_ns) c.checkpoint_ns, c.checkpoint_id, c.metadata
    FROM {schema}.pgc_checkpoints c
    -- every collation sorts '' first: the range skips the root's rows in the index
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns > ''
      AND c.checkpoint_ns <> %(checkpoint_ns)s
      AND starts_with(c.checkpoint_ns, %(prefix)s)
      AND strpos(substr(c.checkpoint_ns, char_length(%(prefix)s) + 1), '|') = 0
    ORDER BY c.checkpoint_ns, c.checkpoint_id DESC
), attached AS (
    SELECT h.checkpoint_ns, h.checkpoint_id FROM heads h
    WHERE h.metadata -> 'parents' ->> %(checkpoint_ns)s = ANY(%(checkpoint_ids)s::text[])
       OR NOT (h.metadata ? 'parents')
)
SELECT f.*,
       (SELECT count(*) FROM {schema}.pgc_checkpoints n
        WHERE n.thread_id = %(thread_id)s AND n.checkpoint_ns = a.checkpoint_ns) AS checkpoints
FROM attached a
CROSS JOIN LATERAL (
    {inspect_checkpoint_facts}
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = a.checkpoint_ns
      AND c.checkpoint_id = a.checkpoint_id
) f
ORDER BY f.checkpoint_id

-- name: inspect_thread_namespaces
-- Every namespace of a thread with its number of checkpoints (for error messages).
SELECT checkpoint_ns, count(*) AS checkpoints
FROM {schema}.pgc_checkpoints
WHERE thread_id = %(thread_id)s
GROUP BY checkpoint_ns
ORDER BY checkpoint_ns

-- name: inspect_resolve_checkpoint
-- The checkpoints of a namespace whose id is `checkpoint_id` or ends with it, newest first.
SELECT checkpoint_id
FROM {schema}.pgc_checkpoints
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
  AND (checkpoint_id = %(checkpoint_id)s
       OR right(checkpoint_id, char_length(%(checkpoint_id)s)) = %(checkpoint_id)s)
ORDER BY checkpoint_id = %(checkpoint_id)s DESC, checkpoint_id DESC
LIMIT 5

-- Retention (pgcheckpoint.retention): sweeps that delete old threads or trim
-- history, a batch of threads per short transaction, safe while the
-- application writes (see the module for the protocol).

-- name: retention_cutoff
-- The cutoff of an age-based sweep, on the database's clock.
SELECT now() - %(older_than)s::interval AS cutoff

-- fragment: idle_threads
-- The given threads whose newest checkpoint (any namespace) is older than `cutoff`,
-- as the statement that includes this sees them.
SELECT t.thread_id FROM unnest(%(thread_ids)s::text[]) AS t(thread_id)
WHERE NOT EXISTS (
    SELECT 1 FROM {schema}.pgc_checkpoints n
    WHERE n.thread_id = t.thread_id AND n.created_at >= %(cutoff)s::timestamptz
)

-- name: retention_count_candidates
-- How many threads a sweep will look at, for its progress: those whose newest
-- checkpoint is older than `cutoff`, or with more than `keep_last` checkpoints
-- in a namespace (NULL switches a condition off). One pass over the table.
SELECT count(*) AS threads FROM (
    SELECT thread_id
    FROM (
        SELECT thread_id, max(created_at) AS newest, count(*) AS checkpoints
        FROM {schema}.pgc_checkpoints
        GROUP BY thread_id, checkpoint_ns
    ) AS per_namespace
    GROUP BY thread_id
    HAVING (%(cutoff)s::timestamptz IS NULL OR max(newest) < %(cutoff)s::timestamptz)
       AND (%(keep_last)s::int IS NULL OR max(checkpoints) > %(keep_last)s::int)
) AS candidates

-- name: retention_candidates
-- The next threads a sweep looks at, in thread_id order from `start` (after it
-- when `exclusive`), with the conditions of retention_count_candidates. Walks
-- the primary key one thread at a time (a loose index scan): a call reads the
-- threads it returns and those it passes over, not the whole table. Rows come
-- in walk order; the sweep goes on after the last one.
WITH RECURSIVE walk(thread_id) AS (
    (SELECT thread_id FROM {schema}.pgc_checkpoints
     WHERE thread_id >= %(start)s::text ORDER BY thread_id LIMIT 1)
    UNION ALL
    SELECT (SELECT c.thread_id FROM {schema}.pgc_checkpoints c
            WHERE c.thread_id > w.thread_id ORDER BY c.thread_id LIMIT 1)
    FROM walk w
    WHERE w.thread_id IS NOT NULL
)
SELECT w.thread_id
FROM walk w
WHERE w.thread_id IS NOT NULL
  AND NOT (%(exclusive)s AND w.thread_id = %(start)s::text)
  AND (%(cutoff)s::timestamptz IS NULL OR NOT EXISTS (
      SELECT 1 FROM {schema}.pgc_checkpoints c
      WHERE c.thread_id = w.thread_id AND c.created_at >= %(cutoff)s::timestamptz))
  AND (%(keep_last)s::int IS NULL OR EXISTS (
      SELECT 1 FROM {schema}.pgc_checkpoints c
      WHERE c.thread_id = w.thread_id
      GROUP BY c.checkpoint_ns HAVING count(*) > %(keep_last)s::int))
LIMIT %(limit)s

-- name: retention_read_committed
-- A sweep's batch re-reads what changed under its locks, statement by statement.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED

-- name: retention_lock_threads
-- Tries, without waiting, each thread's maintenance lock (the one prune and
-- delete_for_runs take) and its run lock (`lock_thread`), until the end of this
-- transaction; returns the threads this sweep now holds. A thread another
-- sweep, a prune or a guarded run holds is left for a later sweep. The batch
-- gives up a row lock after `lock_timeout` (a put holds its parent's briefly).
WITH settings AS MATERIALIZED (
    SELECT set_config('lock_timeout', %(lock_timeout)s, true) AS lock_timeout
)
SELECT t.thread_id
FROM settings,
     unnest(%(thread_ids)s::text[], %(run_lock_keys)s::int4[]) WITH ORDINALITY
         AS t(thread_id, run_lock_key, n)
WHERE pg_try_advisory_xact_lock(%(lock_class)s::int4, hashtext(t.thread_id))
  AND pg_try_advisory_xact_lock(%(run_lock_class)s::int4, t.run_lock_key)
ORDER BY t.n

-- name: retention_delete_threads
-- Deletes whole the given threads that are still idle (see idle_threads), after
-- the sweep took their locks. Checkpoints go first: a put locks its parent
-- checkpoint, so this waits for a put in flight (the sweep then sees its new
-- checkpoint and rolls back), and a put that comes later finds its parent gone
-- and stores nothing. One row per deleted thread, with what went.
WITH doomed AS MATERIALIZED (
    {idle_threads}
), deleted AS (
    DELETE FROM {schema}.pgc_checkpoints c USING doomed d
    WHERE c.thread_id = d.thread_id
    RETURNING c.thread_id, {checkpoint_bytes} AS size
), gone AS (
    SELECT thread_id, count(*) AS checkpoints, sum(size) AS bytes
    FROM deleted GROUP BY thread_id
), deleted_writes AS (
    DELETE FROM {schema}.pgc_writes w USING gone g
    WHERE w.thread_id = g.thread_id
    RETURNING w.thread_id, pg_column_size(w.blob) AS size
), deleted_blobs AS (
    DELETE FROM {schema}.pgc_blobs b USING gone g
    WHERE b.thread_id = g.thread_id
    RETURNING b.thread_id, coalesce(pg_column_size(b.blob), 0) AS size
)
SELECT g.thread_id, g.checkpoints, coalesce(w.n, 0) AS writes, coalesce(b.n, 0) AS blobs,
       g.bytes + coalesce(w.bytes, 0) + coalesce(b.bytes, 0) AS bytes
FROM gone g
LEFT JOIN (SELECT thread_id, count(*) AS n, sum(size) AS bytes
           FROM deleted_writes GROUP BY thread_id) w USING (thread_id)
LEFT JOIN (SELECT thread_id, count(*) AS n, sum(size) AS bytes
           FROM deleted_blobs GROUP BY thread_id) b USING (thread_id)

-- name: retention_measure_threads
-- What retention_delete_threads would delete, without deleting (a dry run).
WITH doomed AS MATERIALIZED (
    {idle_threads}
)
SELECT g.thread_id, g.checkpoints, coalesce(w.n, 0) AS writes, coalesce(b.n, 0) AS blobs,
       g.bytes + coalesce(w.bytes, 0) + coalesce(b.bytes, 0) AS bytes
FROM (SELECT c.thread_id, count(*) AS checkpoints, sum({checkpoint_bytes}) AS bytes
      FROM {schema}.pgc_checkpoints c JOIN doomed d USING (thread_id)
      GROUP BY c.thread_id) g
LEFT JOIN (SELECT w.thread_id, count(*) AS n, sum(pg_column_size(w.blob)) AS bytes
           FROM {schema}.pgc_writes w JOIN doomed d USING (thread_id)
           GROUP BY w.thread_id) w USING (thread_id)
LEFT JOIN (SELECT b.thread_id, count(*) AS n,
                  sum(coalesce(pg_column_size(b.blob), 0)) AS bytes
           FROM {schema}.pgc_blobs b JOIN doomed d USING (thread_id)
           GROUP BY b.thread_id) b USING (thread_id)

-- name: retention_ranked_checkpoints
-- The checkpoints of the given threads (those still idle; NULL cutoff: all),
-- each with its rank in its namespace, 1 for the newest (the order of `list`).
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id,
       row_number() OVER (PARTITION BY c.thread_id, c.checkpoint_ns
                          ORDER BY c.checkpoint_id DESC) AS rank
FROM {schema}.pgc_checkpoints c
WHERE c.thread_id = ANY(%(thread_ids)s::text[])
  AND (%(cutoff)s::timestamptz IS NULL OR c.thread_id IN ({idle_threads}))

-- name: measure_checkpoints
-- What delete_checkpoints would delete for the same list, without deleting (a
-- dry run), from the same rules (blobs_to_drop).
WITH RECURSIVE doomed AS (
    SELECT * FROM unnest(%(thread_ids)s::text[], %(checkpoint_nss)s::text[],
                         %(checkpoint_ids)s::text[]) AS d(thread_id, checkpoint_ns, checkpoint_id)
), doomed_rows AS (
    SELECT c.* FROM {schema}.pgc_checkpoints c
    JOIN doomed d ON c.thread_id = d.thread_id AND c.checkpoint_ns = d.checkpoint_ns
                 AND c.checkpoint_id = d.checkpoint_id
), freed AS (
    SELECT DISTINCT c.thread_id, c.checkpoint_ns, v.channel, v.version
    FROM doomed_rows c, jsonb_each_text(c.channel_versions) AS v(channel, version)
), {blobs_to_drop}, doomed_writes AS (
    SELECT pg_column_size(w.blob) AS size
    FROM {schema}.pgc_writes w
    JOIN doomed d ON w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns
                 AND w.checkpoint_id = d.checkpoint_id
), dropped_blobs AS (
    SELECT coalesce(pg_column_size(b.blob), 0) AS size
    FROM {schema}.pgc_blobs b
    JOIN dropped f ON b.thread_id = f.thread_id AND b.checkpoint_ns = f.checkpoint_ns
                  AND b.channel = f.channel AND b.version = f.version
)
SELECT (SELECT count(*) FROM doomed_rows) AS checkpoints,
       (SELECT count(*) FROM doomed_writes) AS writes,
       (SELECT count(*) FROM dropped_blobs) AS blobs,
       coalesce((SELECT sum({checkpoint_bytes}) FROM doomed_rows c), 0)
       + coalesce((SELECT sum(size) FROM doomed_writes), 0)
       + coalesce((SELECT sum(size) FROM dropped_blobs), 0) AS bytes

-- name: retention_changed_threads
-- In a new snapshot, after a batch's deletes: the threads written to since the
-- batch read them, whose deletes must be rolled back (a put in flight committed
-- first, or writes landed on a thread being deleted whole). `checkpoints` is
-- how many each thread should have left; `whole`: the threads were deleted
-- whole, so no write of theirs may remain either.
SELECT k.thread_id
FROM unnest(%(thread_ids)s::text[], %(checkpoints)s::int8[]) AS k(thread_id, checkpoints)
WHERE (SELECT count(*) FROM {schema}.pgc_checkpoints c WHERE c.thread_id = k.thread_id)
      <> k.checkpoints
   OR (%(whole)s AND EXISTS (
       SELECT 1 FROM {schema}.pgc_writes w WHERE w.thread_id = k.thread_id))

-- name: storage_counts
-- `pgcheckpoint stats`: rows per table, and the oldest and newest checkpoint.
SELECT (SELECT count(DISTINCT thread_id) FROM {schema}.pgc_checkpoints) AS threads,
       (SELECT count(*) FROM {schema}.pgc_checkpoints) AS checkpoints,
       (SELECT count(*) FROM {schema}.pgc_blobs) AS blobs,
       (SELECT count(*) FROM {schema}.pgc_writes) AS writes,
       (SELECT min(created_at) FROM {schema}.pgc_checkpoints) AS oldest,
       (SELECT max(created_at) FROM {schema}.pgc_checkpoints) AS newest

-- name: storage_table_sizes
-- `pgcheckpoint stats`: the space each table takes on disk (TOAST included), for
-- tables named (schema-qualified, quoted) by the caller.
SELECT t.name AS table_name, pg_table_size(t.relation) AS table_bytes,
       pg_indexes_size(t.relation) AS index_bytes,
       pg_total_relation_size(t.relation) AS total_bytes
FROM unnest(%(names)s::text[], %(relations)s::text[]::regclass[]) AS t(name, relation)

-- name: storage_largest_threads
-- `pgcheckpoint stats`: the threads whose stored values take the most bytes.
SELECT thread_id, sum(checkpoints) AS checkpoints, sum(blobs) AS blobs,
       sum(writes) AS writes, sum(bytes) AS bytes,
       min(oldest) AS oldest, max(newest) AS newest
FROM (
    SELECT c.thread_id, count(*) AS checkpoints, 0 AS blobs, 0 AS writes,
           sum({checkpoint_bytes}) AS bytes, min(c.created_at) AS oldest,
           max(c.created_at) AS newest
    FROM {schema}.pgc_checkpoints c GROUP BY c.thread_id
    UNION ALL
    SELECT b.thread_id, 0, count(*), 0, sum(coalesce(pg_column_size(b.blob), 0)), NULL, NULL
    FROM {schema}.pgc_blobs b GROUP BY b.thread_id
    UNION ALL
    SELECT w.thread_id, 0, 0, count(*), sum(pg_column_size(w.blob)), NULL, NULL
    FROM {schema}.pgc_writes w GROUP BY w.thread_id
) AS per_table
GROUP BY thread_id
ORDER BY sum(bytes) DESC, thread_id
LIMIT %(limit)s
