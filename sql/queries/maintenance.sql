-- delete_thread, prune and delete_for_runs: lock threads, find what kept
-- checkpoints need, delete, and check that nothing of a deleted thread is left.

-- name: read_committed
-- retry: safe
-- A delete's transaction re-reads what changed under its locks, statement by statement.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED

-- name: lock_threads_for_maintenance
-- Takes the maintenance lock (pgcheckpoint.locking.maintenance_lock_key) of each
-- thread until the end of this transaction, waiting for it: for other deletes
-- of the thread, and for the saves in flight, which hold it shared; saves that
-- come later wait for this transaction. Taken in key order, so two deletes of
-- several threads each never wait for each other in a circle.
SELECT count(pg_advisory_xact_lock(s.k)) AS locked
FROM (SELECT DISTINCT k FROM unnest(%(keys)s::int8[]) AS k ORDER BY k) AS s

-- name: thread_rows_left
-- Of the given threads, those with a row left in any table, in a new snapshot.
SELECT t.thread_id
FROM unnest(%(thread_ids)s::text[]) AS t(thread_id)
WHERE EXISTS (SELECT 1 FROM {schema}.pgc_checkpoints c WHERE c.thread_id = t.thread_id)
   OR EXISTS (SELECT 1 FROM {schema}.pgc_writes w WHERE w.thread_id = t.thread_id)
   OR EXISTS (SELECT 1 FROM {schema}.pgc_blobs b WHERE b.thread_id = t.thread_id)

-- name: hanging_checkpoints
-- prepare: never
-- The checkpoints of the subgraph namespaces (of the threads `scope_ids`) that
-- hang off the listed checkpoints about to be deleted, or off none that exists
-- (see hanging_namespaces).
WITH RECURSIVE doomed AS (
    SELECT * FROM unnest(%(thread_ids)s::text[], %(checkpoint_nss)s::text[],
                         %(checkpoint_ids)s::text[]) AS d(thread_id, checkpoint_ns, checkpoint_id)
), {hanging_namespaces}
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id
FROM hanging h
JOIN {schema}.pgc_checkpoints c
  ON c.thread_id = h.thread_id AND c.checkpoint_ns = h.checkpoint_ns
WHERE c.thread_id = ANY(%(scope_ids)s::text[])

-- name: run_checkpoints
-- retry: safe
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

-- name: rebuild_dependencies
-- prepare: never
-- Every checkpoint a set of kept checkpoints needs to be rebuilt: walks each one's
-- parent chain for as long as one of its DeltaChannels (named by LangGraph in the
-- metadata's counters_since_delta_snapshot) has no stored value there, down to
-- the ancestor that stores one. The kept checkpoints come back at depth 0.
-- `thread_id = ANY` keeps the walk, on tables partitioned by thread, to the
-- partitions of the listed threads.
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
    WHERE p.thread_id = ANY(%(thread_ids)s::text[])
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
     -- ids are time-ordered: an edited parent column cannot loop
     AND p.checkpoint_id < w.checkpoint_id
    WHERE cardinality(w.pending) > 0 AND w.depth < %(max_depth)s
      AND p.thread_id = ANY(%(thread_ids)s::text[])
)
SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM walk

-- name: delete_checkpoints
-- Deletes the listed checkpoints with their writes, then the blobs no remaining
-- checkpoint of those namespaces reads (directly, or as the base of a delta); a
-- kept checkpoint whose parent went is left without one. Checkpoints go before
-- blobs (the blobs to free come from the deleted rows): a put locks its parent
-- first, then the bases of its deltas, so taking them in that order never
-- deadlocks with one. Returns what went. Each table's rows are also kept to the
-- listed threads (`thread_id = ANY`), which a join alone does not tell the
-- planner: on tables partitioned by thread it reads only those threads' partitions.
WITH RECURSIVE doomed AS (
    SELECT * FROM unnest(%(thread_ids)s::text[], %(checkpoint_nss)s::text[],
                         %(checkpoint_ids)s::text[]) AS d(thread_id, checkpoint_ns, checkpoint_id)
), deleted_writes AS (
    DELETE FROM {schema}.pgc_writes w USING doomed d
    WHERE w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns
      AND w.checkpoint_id = d.checkpoint_id AND w.thread_id = ANY(%(thread_ids)s::text[])
    RETURNING pg_column_size(w.blob) AS size
), deleted AS (
    DELETE FROM {schema}.pgc_checkpoints c USING doomed d
    WHERE c.thread_id = d.thread_id AND c.checkpoint_ns = d.checkpoint_ns
      AND c.checkpoint_id = d.checkpoint_id AND c.thread_id = ANY(%(thread_ids)s::text[])
    RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.channel_versions,
              {checkpoint_bytes} AS size
), orphaned AS (
    UPDATE {schema}.pgc_checkpoints c SET parent_checkpoint_id = NULL
    FROM deleted d
    WHERE c.thread_id = d.thread_id AND c.checkpoint_ns = d.checkpoint_ns
      AND c.parent_checkpoint_id = d.checkpoint_id
      AND c.thread_id = ANY(%(thread_ids)s::text[])
), freed AS (
    SELECT DISTINCT d.thread_id, d.checkpoint_ns, v.channel, v.version
    FROM deleted d, jsonb_each_text(d.channel_versions) AS v(channel, version)
), {blobs_to_drop}, deleted_blobs AS (
    DELETE FROM {schema}.pgc_blobs b USING dropped f
    WHERE b.thread_id = f.thread_id AND b.checkpoint_ns = f.checkpoint_ns
      AND b.channel = f.channel AND b.version = f.version
      AND b.thread_id = ANY(%(thread_ids)s::text[])
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
