-- `pgcheckpoint stats`: row counts, table sizes, the largest threads.

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
-- tables named (schema-qualified, quoted) by the caller; one that does not exist
-- (the store's vector table, before a store with an index is set up) is left
-- out. A table partitioned by thread holds nothing itself: its partitions'
-- sizes add up.
SELECT t.name AS table_name, sum(pg_table_size(p.relid)) AS table_bytes,
       sum(pg_indexes_size(p.relid)) AS index_bytes,
       sum(pg_total_relation_size(p.relid)) AS total_bytes
FROM unnest(%(names)s::text[], %(relations)s::text[]) AS n(name, relation)
CROSS JOIN LATERAL (SELECT n.name, to_regclass(n.relation) AS relation) t
CROSS JOIN LATERAL (
    SELECT t.relation AS relid
    UNION
    SELECT relid FROM pg_partition_tree(t.relation) WHERE isleaf
) p
WHERE t.relation IS NOT NULL
GROUP BY t.name

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

-- name: storage_unreachable
-- prepare: never
-- `pgcheckpoint stats`: rows no read reaches, and their stored size: the
-- checkpoints of subgraph namespaces that hang off no checkpoint that exists
-- (hanging_namespaces), the writes of checkpoints that do not exist, and the
-- values of namespaces with no checkpoint. A prune leaves none of the first kind.
WITH heads AS (
    SELECT thread_id, checkpoint_ns, max(checkpoint_id) AS last_id
    FROM {schema}.pgc_checkpoints
    WHERE strpos(checkpoint_ns, ':') > 0
    GROUP BY thread_id, checkpoint_ns
), parent_rows AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, false AS doomed
    FROM {schema}.pgc_checkpoints
), {hanging_namespaces}, lost_checkpoints AS (
    SELECT {checkpoint_bytes} AS size
    FROM hanging h
    CROSS JOIN LATERAL (
        SELECT * FROM {schema}.pgc_checkpoints c
        WHERE c.thread_id = h.thread_id AND c.checkpoint_ns = h.checkpoint_ns
        OFFSET 0
    ) c
), lost_writes AS (
    SELECT pg_column_size(w.blob) AS size
    FROM {schema}.pgc_writes w
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.pgc_checkpoints c
                      WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns
                        AND c.checkpoint_id = w.checkpoint_id)
       OR EXISTS (SELECT 1 FROM hanging h
                  WHERE h.thread_id = w.thread_id AND h.checkpoint_ns = w.checkpoint_ns)
), lost_blobs AS (
    SELECT coalesce(pg_column_size(b.blob), 0) AS size
    FROM {schema}.pgc_blobs b
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.pgc_checkpoints c
                      WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns)
       OR EXISTS (SELECT 1 FROM hanging h
                  WHERE h.thread_id = b.thread_id AND h.checkpoint_ns = b.checkpoint_ns)
)
SELECT (SELECT count(*) FROM lost_checkpoints) AS checkpoints,
       (SELECT count(*) FROM lost_blobs) AS blobs,
       (SELECT count(*) FROM lost_writes) AS writes,
       coalesce((SELECT sum(size) FROM lost_checkpoints), 0)
       + coalesce((SELECT sum(size) FROM lost_blobs), 0)
       + coalesce((SELECT sum(size) FROM lost_writes), 0) AS bytes

-- name: storage_damaged
-- `pgcheckpoint stats`: rows whose columns are not as pgcheckpoint writes them,
-- which `threads` and `show` mark damaged: checkpoints whose channel_versions
-- is no JSON object or gives a channel a version that is neither text nor a
-- number, or whose metadata is no JSON object; values whose bytes are NULL
-- though their type holds some. With the first threads (by id) they belong to.
-- Bytes that do not decode take decoding to find: `show` names those.
WITH damaged_checkpoints AS (
    SELECT c.thread_id FROM {schema}.pgc_checkpoints c
    WHERE jsonb_typeof(c.channel_versions) <> 'object'
       OR jsonb_path_exists(c.channel_versions,
                            '$.* ? (@.type() != "string" && @.type() != "number")')
       OR jsonb_typeof(c.metadata) <> 'object'
), damaged_blobs AS (
    SELECT b.thread_id FROM {schema}.pgc_blobs b
    WHERE b.blob IS NULL AND b.type NOT IN ('null', 'empty')
)
SELECT (SELECT count(*) FROM damaged_checkpoints) AS checkpoints,
       (SELECT count(*) FROM damaged_blobs) AS blobs,
       ARRAY(SELECT thread_id FROM damaged_checkpoints
             UNION SELECT thread_id FROM damaged_blobs
             ORDER BY thread_id LIMIT %(threads)s) AS thread_ids
