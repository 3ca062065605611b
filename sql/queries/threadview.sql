-- What `pgcheckpoint threads` and `show` read: recent threads, pages of checkpoints.

-- fragment: inspect_checkpoint_facts
-- `pgcheckpoint show` / `threads`: checkpoint `c` with what can be told without
-- reading its channel values: its parent's record (whose versions_seen says
-- which nodes ran), the channels holding a value now, the channels whose version
-- differs from the parent's with the stored size of the new version, the values
-- that decide whether a barrier or Send packets trigger nodes (with the bases of
-- a delta, oldest first), and the writes saved against it (sizes; payloads only
-- for the special writes: errors, interrupts, resumes, whose idx is negative).
-- A damaged row must not stop the page or the list of threads: channel_versions
-- that is no JSON object (jsonb_each_text raises on one) counts as no channels
-- here, and the client, which gets the column as it is, says what is wrong.
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.run_id,
       c.created_at, c.type, c.checkpoint, c.channel_versions, c.metadata_type,
       c.metadata_blob, c.metadata, {sealed_columns},
       octet_length(c.checkpoint) + octet_length(c.metadata_blob) AS record_bytes,
       p.type AS parent_type, p.checkpoint AS parent_checkpoint,
       (SELECT count(DISTINCT x.task_id) FROM {schema}.pgc_writes x
        WHERE x.thread_id = c.thread_id AND x.checkpoint_ns = c.checkpoint_ns
          AND x.checkpoint_id = c.parent_checkpoint_id
          AND starts_with(x.task_path, '~__pregel_push')) AS parent_push_tasks,
       ch.available_channels, ch.changed_channels, ch.changed_versions, ch.changed_stored,
       ch.changed_bytes,
       tr.blob_channels AS trigger_channels, tr.blob_versions AS trigger_versions,
       tr.blob_bases AS trigger_bases, tr.blob_types AS trigger_types,
       tr.blob_values AS trigger_blobs,
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
    SELECT CASE WHEN jsonb_typeof(c.channel_versions) = 'object' THEN c.channel_versions
                ELSE '{}'::jsonb END AS versions
) cv
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
    FROM jsonb_each_text(cv.versions) AS v(channel, version)
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
    WITH RECURSIVE chain_head(thread_id, checkpoint_ns, channel, version) AS (
        SELECT c.thread_id, c.checkpoint_ns, v.channel, v.version
        FROM jsonb_each_text(cv.versions) AS v(channel, version)
        WHERE v.channel = '__pregel_tasks' OR starts_with(v.channel, 'join:')
    ), {delta_chain}
    -- a cleared channel ('empty') holds no value to decode
    {chain_arrays}
      AND type <> 'empty'
) tr
{ordered_writes}

-- fragment: thread_summaries
-- The end of a statement whose CTE `walk(thread_id, n)` names threads: each with
-- its counts, stored size and the facts of its latest root checkpoint, by `n`.
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
{thread_summaries}

-- name: inspect_threads_by_id
-- The threads named, in the order given, as inspect_recent_threads lists them
-- (`threads --metadata` with a key, once the sealed metadata chose them).
WITH walk(thread_id, n) AS (
    SELECT t.thread_id, t.n FROM unnest(%(thread_ids)s::text[]) WITH ORDINALITY AS t(thread_id, n)
)
{thread_summaries}

-- name: inspect_metadata_page
-- `threads --metadata` with a key: a page of checkpoints, newest first, after
-- the one (created_at, thread_id, checkpoint_ns, checkpoint_id) the page before
-- ended with, of threads not matched yet, with their metadata (readable and
-- sealed) for the client to decrypt and match. The created_at index is read
-- backwards from where the page before ended (the first page: from the newest);
-- rows saved at the same time are ordered by their key.
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.created_at, c.metadata_type,
       c.metadata_blob, c.metadata, c.metadata AS sealed_metadata
FROM {schema}.pgc_checkpoints c
WHERE (%(since)s::timestamptz IS NULL OR c.created_at >= %(since)s)
  AND c.created_at <= coalesce(%(after_at)s::timestamptz, 'infinity')
  AND (c.created_at < coalesce(%(after_at)s::timestamptz, 'infinity')
       OR (c.thread_id, c.checkpoint_ns, c.checkpoint_id)
          < (%(after_thread)s::text, %(after_ns)s::text, %(after_id)s::text))
  AND NOT (c.thread_id = ANY(%(matched)s::text[]))
ORDER BY c.created_at DESC, c.thread_id DESC, c.checkpoint_ns DESC, c.checkpoint_id DESC
LIMIT %(limit)s

-- name: inspect_server_in_recovery
-- Whether the server is a standby (in recovery): advisory locks are not
-- replicated, so a standby cannot tell which thread locks the primary's
-- sessions hold.
SELECT pg_catalog.pg_is_in_recovery() AS in_recovery

-- name: inspect_thread_lock_holders
-- Which of the given thread-lock keys (pgcheckpoint.locking, one-bigint advisory
-- locks) a session holds now.
SELECT k.key, l.pid AS holder_pid
FROM unnest(%(keys)s::int8[]) AS k(key)
JOIN pg_catalog.pg_locks l
  ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
 AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
 AND (l.classid::int8 << 32 | l.objid::int8) = k.key

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
