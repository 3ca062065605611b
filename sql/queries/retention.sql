-- Retention sweeps (pgcheckpoint.maintenance.retention): delete idle threads or trim
-- history, a batch of threads per short transaction with locks taken without
-- waiting, safe while the application writes (see the module for the protocol).

-- fragment: idle_threads
-- The given threads whose newest checkpoint (any namespace) is older than `cutoff`,
-- as the statement that includes this sees them.
SELECT t.thread_id FROM unnest(%(thread_ids)s::text[]) AS t(thread_id)
WHERE NOT EXISTS (
    SELECT 1 FROM {schema}.pgc_checkpoints n
    WHERE n.thread_id = t.thread_id AND n.created_at >= %(cutoff)s::timestamptz
)

-- name: retention_cutoff
-- The cutoff of an age-based sweep, on the database's clock.
SELECT now() - %(older_than)s::interval AS cutoff

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

-- name: retention_lock_threads
-- Tries, without waiting, each thread's maintenance lock (the one deletes take,
-- and saves take shared) and its run lock (`lock_thread`), until the end of this
-- transaction; returns the threads this sweep now holds. A thread another
-- sweep, a delete, a save in flight or a guarded run holds is left for a later
-- sweep. The batch gives up a row lock after `lock_timeout`.
WITH settings AS MATERIALIZED (
    SELECT set_config('lock_timeout', %(lock_timeout)s, true) AS lock_timeout
)
SELECT t.thread_id
FROM settings,
     unnest(%(thread_ids)s::text[], %(lock_keys)s::int8[], %(run_lock_keys)s::int8[])
         WITH ORDINALITY AS t(thread_id, lock_key, run_lock_key, n)
WHERE pg_try_advisory_xact_lock(t.lock_key)
  AND pg_try_advisory_xact_lock(t.run_lock_key)
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
    WHERE c.thread_id = ANY(%(thread_ids)s::text[])
), freed AS (
    SELECT DISTINCT c.thread_id, c.checkpoint_ns, v.channel, v.version
    FROM doomed_rows c, jsonb_each_text(c.channel_versions) AS v(channel, version)
), {blobs_to_drop}, doomed_writes AS (
    SELECT pg_column_size(w.blob) AS size
    FROM {schema}.pgc_writes w
    JOIN doomed d ON w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns
                 AND w.checkpoint_id = d.checkpoint_id
    WHERE w.thread_id = ANY(%(thread_ids)s::text[])
), dropped_blobs AS (
    SELECT coalesce(pg_column_size(b.blob), 0) AS size
    FROM {schema}.pgc_blobs b
    JOIN dropped f ON b.thread_id = f.thread_id AND b.checkpoint_ns = f.checkpoint_ns
                  AND b.channel = f.channel AND b.version = f.version
    WHERE b.thread_id = ANY(%(thread_ids)s::text[])
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
