-- Reading checkpoints: one by id or the latest, and listing them with their values.

-- name: get_latest_checkpoint
-- retry: safe
{checkpoint_tuple_from}
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
ORDER BY c.checkpoint_id DESC
LIMIT 1

-- name: get_checkpoint_by_id
-- retry: safe
{checkpoint_tuple_from}
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
  AND c.checkpoint_id = %(checkpoint_id)s

-- name: list_checkpoints
-- retry: safe
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
-- retry: safe
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
