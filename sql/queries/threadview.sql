-- What `pgcheckpoint threads` and `show` read: recent threads, pages of checkpoints.

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
