-- DeltaChannel history: writes and seed along a checkpoint's parent chain.

-- fragment: walked_checkpoint
-- The row `p` of checkpoint `w` of the walk, looked up by primary key.
CROSS JOIN LATERAL (
    SELECT * FROM {schema}.pgc_checkpoints p
    WHERE p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
      AND p.checkpoint_id = w.checkpoint_id
    LIMIT 1
) p

-- fragment: walked_writes
-- The writes `x` of checkpoint `w` of the walk, looked up by primary key prefix
-- per walked checkpoint. OFFSET 0 keeps the planner from flattening it into a
-- join: on a table without statistics (a new or fast-growing thread, before
-- autovacuum's ANALYZE) it then read every write of the thread once per
-- walked checkpoint.
CROSS JOIN LATERAL (
    SELECT * FROM {schema}.pgc_writes x
    WHERE x.thread_id = %(thread_id)s AND x.checkpoint_ns = %(checkpoint_ns)s
      AND x.checkpoint_id = w.checkpoint_id
    OFFSET 0
) x

-- fragment: delta_history_rows
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
          -- ids are time-ordered: an edited parent column cannot loop
          AND p.checkpoint_id < w.checkpoint_id
        LIMIT 1
    ) p
    WHERE cardinality(n.walking) > 0 AND w.depth < %(max_depth)s
), holders AS (
    -- the few ancestors that store a seed, looked up again only for those
    SELECT w.depth, w.checkpoint_id, w.found, p.channel_versions, p.inline_channels,
           p.type, p.checkpoint
    FROM walk w
    {walked_checkpoint}
    WHERE w.depth > 0 AND cardinality(w.found) > 0
), chain_head(thread_id, checkpoint_ns, channel, version) AS (
    -- the seeds stored as blobs, each with the chain of bases of a delta (delta_chain)
    SELECT %(thread_id)s::text, %(checkpoint_ns)s::text, f.channel,
           h.channel_versions ->> f.channel
    FROM holders h
    CROSS JOIN LATERAL unnest(h.found) AS f(channel)
    WHERE NOT (f.channel = ANY(h.inline_channels))
), {delta_chain}
SELECT 'w' AS kind, w.depth, w.checkpoint_id, x.channel, NULL::text AS version,
       NULL::text AS base_version, x.task_path, x.task_id, x.idx, x.type, x.blob,
       NULL::text[] AS found
FROM walk w
{walked_writes}
WHERE w.depth > 0 AND x.channel = ANY(w.walking)
UNION ALL
-- a seed's pieces, under the one ancestor that found its channel; idx is the
-- piece: 0 the seed itself, the highest the full value
SELECT 's', h.depth, h.checkpoint_id, s.channel, s.version, s.base_version, NULL, NULL,
       s.depth, s.type, s.blob, NULL
FROM chain s
JOIN holders h ON s.channel = ANY(h.found)
WHERE s.depth >= 0
UNION ALL
SELECT 'i', h.depth, h.checkpoint_id, NULL, NULL, NULL, NULL, NULL, NULL,
       h.type, h.checkpoint, h.found
FROM holders h
WHERE h.found && h.inline_channels

-- name: delta_channel_history
-- retry: safe
{delta_history_rows}

-- name: delta_channel_history_sealed
-- retry: safe
-- delta_channel_history with encryption on, with what the client checks the
-- walk by (DeltaHistory.check_walk_op). Longer than the 4 KiB whose parsing
-- psycopg caches, so only an encrypting saver runs it.
-- 'a': each checkpoint of the walk, with the columns the walk went by, in
-- columns of other names (`version` parent_checkpoint_id, `base_version`
-- sealed_parent_id, `task_path` channel_versions and `task_id` inline_channels
-- as JSON), and in `blob` the nonce and tag of its record, which name the
-- record's checked structure in the client's cache.
-- 'x': each write on the way that the walk left out for its channel, with the
-- nonce and tag of its value: the client checks that channel is the sealed one
-- (a write whose channel was edited would otherwise drop out of the history).
{delta_history_rows}
UNION ALL
SELECT 'a', w.depth, w.checkpoint_id, NULL, w.parent_checkpoint_id, p.sealed_parent_id,
       p.channel_versions::text, to_jsonb(p.inline_channels)::text, NULL, p.type,
       substr(p.checkpoint, 1, 12) || substr(p.checkpoint, length(p.checkpoint) - 15),
       w.found
FROM walk w
{walked_checkpoint}
UNION ALL
SELECT 'x', w.depth, w.checkpoint_id, x.channel, NULL, NULL, x.task_path, x.task_id, x.idx,
       x.type, substr(x.blob, 1, 12) || substr(x.blob, length(x.blob) - 15), NULL
FROM walk w
{walked_writes}
WHERE w.depth > 0 AND NOT (x.channel = ANY(w.walking))

-- name: sealed_records
-- retry: safe
-- The sealed records of some checkpoints of one namespace, for the client to
-- check what they say about their rows (DeltaHistory.check_walk_op); a
-- checkpoint that does not exist is left out.
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.type, c.checkpoint
FROM unnest(%(checkpoint_ids)s::text[]) AS k(checkpoint_id)
JOIN {schema}.pgc_checkpoints c
  ON c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
 AND c.checkpoint_id = k.checkpoint_id

-- name: sealed_writes
-- retry: safe
-- Some pending writes of one namespace, by key, for the client to check what
-- their sealed values are bound to (DeltaHistory.check_walk_op).
SELECT x.checkpoint_id, x.task_id, x.idx, x.channel, x.task_path, x.type, x.blob
FROM unnest(%(checkpoint_ids)s::text[], %(task_ids)s::text[], %(idxs)s::int[])
     AS k(checkpoint_id, task_id, idx)
JOIN {schema}.pgc_writes x
  ON x.thread_id = %(thread_id)s AND x.checkpoint_ns = %(checkpoint_ns)s
 AND x.checkpoint_id = k.checkpoint_id AND x.task_id = k.task_id AND x.idx = k.idx
