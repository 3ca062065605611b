-- Reading checkpoints: one by id or the latest, and listing them with their values.

-- fragment: listed_columns
-- A `list` row: a checkpoint row `c` and its pending writes `wr`; `listed_values`
-- fetches the stored values of a whole page at once.
c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
c.type, c.checkpoint, c.channel_versions, c.metadata_type, c.metadata_blob,
wr.write_task_ids, wr.write_idxs, wr.write_channels, wr.write_types, wr.write_values

-- fragment: versions_object
-- An expression: row `c`'s channel_versions when it is a JSON object, else NULL
-- (no channels), so that a row edited outside pgcheckpoint reaches the core,
-- which refuses it with an error that names it, instead of failing the statement.
CASE WHEN jsonb_typeof(c.channel_versions) = 'object' THEN c.channel_versions END

-- fragment: blob_columns
-- The stored values `bl` of `checkpoint_tuple_from`.
bl.blob_channels, bl.blob_versions, bl.blob_bases, bl.blob_types, bl.blob_values

-- fragment: checkpoint_tuple_from
-- The rest of a statement that selects `listed_columns` and `blob_columns` (the
-- columns `SaverCore.load_tuple` decodes): a checkpoint row with its stored
-- channel values (delta_chain) and its pending writes.
FROM {schema}.pgc_checkpoints c
CROSS JOIN LATERAL (
    WITH RECURSIVE chain_head(thread_id, checkpoint_ns, channel, version) AS (
        SELECT c.thread_id, c.checkpoint_ns, v.channel, c.channel_versions ->> v.channel
        FROM unnest(ARRAY(SELECT jsonb_object_keys({versions_object}))) AS v(channel)
    ), {delta_chain}
    {chain_arrays}
) bl
{ordered_writes}

-- fragment: list_page
-- The end of the subquery that picks a `list` page from checkpoints `p`: the
-- optional filters, which stay static (a NULL parameter switches its predicate
-- off), then the `limit` newest.
(%(checkpoint_id)s::text IS NULL OR p.checkpoint_id = %(checkpoint_id)s)
AND (%(before)s::text IS NULL OR p.checkpoint_id < %(before)s)
AND (%(filter)s::jsonb IS NULL OR p.metadata @> %(filter)s)
ORDER BY p.checkpoint_id DESC
LIMIT %(limit)s

-- fragment: latest_checkpoint
-- The newest id first (an InitPlan reading the index backwards, one entry),
-- then that row by primary key, as checkpoint_by_id: with ORDER BY ... LIMIT 1
-- on the joined rows, the generic plan's estimate (every checkpoint of the
-- thread times the value lookups) stayed above the custom plans', so Postgres
-- planned the statement anew at every call (0.2 ms). Not max(): where the
-- statistics do not know the thread yet (a new table, a thread that grew since
-- the last ANALYZE), the planner aggregated every checkpoint of the thread
-- instead (0.7 ms at 650 checkpoints, growing with the thread).
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
  AND c.checkpoint_id = (
      SELECT m.checkpoint_id FROM {schema}.pgc_checkpoints m
      WHERE m.thread_id = %(thread_id)s AND m.checkpoint_ns = %(checkpoint_ns)s
      ORDER BY m.checkpoint_id DESC
      LIMIT 1
  )

-- fragment: checkpoint_by_id
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
  AND c.checkpoint_id = %(checkpoint_id)s

-- name: get_latest_checkpoint
-- retry: safe
SELECT {listed_columns}, {blob_columns}
{checkpoint_tuple_from}
{latest_checkpoint}

-- name: get_checkpoint_by_id
-- retry: safe
SELECT {listed_columns}, {blob_columns}
{checkpoint_tuple_from}
{checkpoint_by_id}

-- name: get_latest_checkpoint_sealed
-- retry: safe
-- The `_sealed` statements are their plain ones with `sealed_columns`, run by
-- an encrypting saver only: a plain saver's statements send nothing more.
SELECT {listed_columns}, {blob_columns}, {sealed_columns}
{checkpoint_tuple_from}
{latest_checkpoint}

-- name: get_checkpoint_by_id_sealed
-- retry: safe
SELECT {listed_columns}, {blob_columns}, {sealed_columns}
{checkpoint_tuple_from}
{checkpoint_by_id}

-- fragment: all_threads_page
-- `list` across threads (no thread in the config). The page is chosen first, on
-- the checkpoints table alone, and only its rows get their writes: a prepared
-- statement's generic plan (from its sixth run) cannot see which filters are
-- off, and would otherwise gather the writes of every matching checkpoint
-- before applying the limit. The list statements share their page as a
-- fragment, not as a common table expression, which took the planner 30 us
-- more: list_thread_checkpoints is planned at every call (its custom plans
-- cost less than its generic one).
FROM (
    SELECT p.*
    FROM {schema}.pgc_checkpoints p
    WHERE (%(checkpoint_ns)s::text IS NULL OR p.checkpoint_ns = %(checkpoint_ns)s)
      AND {list_page}
) c
{ordered_writes}
ORDER BY c.checkpoint_id DESC

-- fragment: thread_every_namespace_page
-- `all_threads_page` of one thread, every namespace (a config without
-- checkpoint_ns). The thread is a plain equality, as in `one_thread_page`.
FROM (
    SELECT p.*
    FROM {schema}.pgc_checkpoints p
    WHERE p.thread_id = %(thread_id)s AND {list_page}
) c
{ordered_writes}
ORDER BY c.checkpoint_id DESC

-- fragment: one_thread_page
-- `all_threads_page` of one thread and namespace, the usual call. The thread is a
-- plain equality, so a generic plan still reads only that thread's index range
-- (`$1 IS NULL OR thread_id = $1` would read every thread's checkpoints).
FROM (
    SELECT p.*
    FROM {schema}.pgc_checkpoints p
    WHERE p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
      AND {list_page}
) c
{ordered_writes}
ORDER BY c.checkpoint_id DESC

-- name: list_checkpoints
-- retry: safe
SELECT {listed_columns}
{all_threads_page}

-- name: list_thread_every_namespace
-- retry: safe
SELECT {listed_columns}
{thread_every_namespace_page}

-- name: list_thread_checkpoints
-- retry: safe
SELECT {listed_columns}
{one_thread_page}

-- name: list_checkpoints_sealed
-- retry: safe
SELECT {listed_columns}, {sealed_columns}
{all_threads_page}

-- name: list_thread_every_namespace_sealed
-- retry: safe
SELECT {listed_columns}, {sealed_columns}
{thread_every_namespace_page}

-- name: list_thread_checkpoints_sealed
-- retry: safe
SELECT {listed_columns}, {sealed_columns}
{one_thread_page}

-- name: listed_values
-- The stored values of some checkpoints (a `list` page, a page of a thread
-- being copied), each once: the channel versions the checkpoints name, and the
-- chains of bases of those stored as deltas ('v' rows). The checkpoints of a
-- long chat share most of their messages (one full value and its deltas),
-- which one row per checkpoint would send again in each; the client puts each
-- checkpoint's chains together (`Reads.listed_values_op`). Also which of the
-- checkpoints exist ('c' rows): one deleted since its page was read is left
-- out, as if it had been deleted before; one that exists in this statement's
-- snapshot has all its values here.
-- The walk over delta bases (level_walk) carries no bytes; each blob is read
-- once, at the end. `thread_id = ANY` repeats what the join says, so that on
-- tables partitioned by thread a page reads only its threads' partitions.
WITH RECURSIVE listed AS MATERIALIZED (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.channel_versions,
           c.inline_channels
    FROM unnest(%(thread_ids)s::text[], %(checkpoint_nss)s::text[], %(checkpoint_ids)s::text[])
         AS k(thread_id, checkpoint_ns, checkpoint_id)
    JOIN {schema}.pgc_checkpoints c
      ON c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns
     AND c.checkpoint_id = k.checkpoint_id
    WHERE c.thread_id = ANY(%(thread_ids)s::text[])
), level_head AS (
    SELECT c.thread_id, c.checkpoint_ns, v.channel, v.version
    FROM listed c
    CROSS JOIN LATERAL jsonb_each_text({versions_object}) AS v(channel, version)
    WHERE NOT (v.channel = ANY(c.inline_channels))
), {level_walk}
SELECT 'v' AS kind, b.thread_id, b.checkpoint_ns, NULL::text AS checkpoint_id, b.channel,
       b.version, b.base_version, b.type, b.blob
FROM reached k
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

-- name: parent_sends
-- retry: safe
-- The sends of the checkpoints older than LangGraph's format v4 whose parents
-- are given: the parents' writes to __pregel_tasks (pgcheckpoint.core.sends),
-- in `writes_order`. Run only for such checkpoints. `thread_id = ANY` repeats
-- what the join says, as in listed_values, for tables partitioned by thread.
SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.task_path, w.idx,
       w.channel, w.type, w.blob
FROM unnest(%(thread_ids)s::text[], %(checkpoint_nss)s::text[], %(checkpoint_ids)s::text[])
     AS k(thread_id, checkpoint_ns, checkpoint_id)
JOIN {schema}.pgc_writes w
  ON w.thread_id = k.thread_id AND w.checkpoint_ns = k.checkpoint_ns
 AND w.checkpoint_id = k.checkpoint_id AND w.channel = '__pregel_tasks'
WHERE w.thread_id = ANY(%(thread_ids)s::text[])
ORDER BY {writes_order}
