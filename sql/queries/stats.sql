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
-- tables named (schema-qualified, quoted) by the caller. A table partitioned by
-- thread holds nothing itself: its partitions' sizes add up.
SELECT t.name AS table_name, sum(pg_table_size(p.relid)) AS table_bytes,
       sum(pg_indexes_size(p.relid)) AS index_bytes,
       sum(pg_total_relation_size(p.relid)) AS total_bytes
FROM unnest(%(names)s::text[], %(relations)s::text[]::regclass[]) AS t(name, relation)
CROSS JOIN LATERAL (
    SELECT t.relation AS relid
    UNION
    SELECT relid FROM pg_partition_tree(t.relation) WHERE isleaf
) p
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
