-- Pieces of statements, included as `{name}` by the other files.
--
-- Every statement pgcheckpoint runs lives in this folder, one per name, loaded by
-- `pgcheckpoint.queries`. A block starts with `-- name: NAME` (a statement) or
-- `-- fragment: NAME` and runs to the next. `{schema}` is the quoted schema name;
-- parameters are named (`%(thread_id)s`). Header lines right after a statement's
-- name state facts the drivers act on:
--   `-- retry: safe`     when the connection is lost while it runs as an op's first
--                        statement, a pooled saver runs it once more on a new one
--                        (a read, or a write that leaves the same rows twice)
--   `-- prepare: never`  never prepared: its generic plan cannot use the parameters
-- Tables: checkpoints (one row per checkpoint), blobs (channel values, one row
-- per channel version), writes (pending writes of a task at a checkpoint).

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

-- fragment: listed_columns
-- A `list` row: the columns of `tuple_columns` but the stored values, which
-- `listed_values` fetches for the whole page at once.
c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
c.type, c.checkpoint, c.channel_versions, c.metadata_type, c.metadata_blob,
wr.write_task_ids, wr.write_idxs, wr.write_channels, wr.write_types, wr.write_values

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

-- fragment: idle_threads
-- The given threads whose newest checkpoint (any namespace) is older than `cutoff`,
-- as the statement that includes this sees them.
SELECT t.thread_id FROM unnest(%(thread_ids)s::text[]) AS t(thread_id)
WHERE NOT EXISTS (
    SELECT 1 FROM {schema}.pgc_checkpoints n
    WHERE n.thread_id = t.thread_id AND n.created_at >= %(cutoff)s::timestamptz
)
