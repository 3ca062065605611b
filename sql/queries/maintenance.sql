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

-- name: hanging_calls
-- prepare: never
-- The subgraph namespaces that hang off the checkpoints about to be deleted,
-- or off none that exists (see hanging_namespaces), given each namespace's
-- newest checkpoint (`heads_*`) and the checkpoints of their parent
-- namespaces (`parent_*`), which the client read under the locks.
WITH heads AS (
    SELECT * FROM unnest(%(heads_thread_ids)s::text[], %(heads_nss)s::text[],
                         %(heads_ids)s::text[]) AS h(thread_id, checkpoint_ns, last_id)
    WHERE h.thread_id = ANY(%(scope_ids)s::text[])
), parent_rows AS (
    SELECT * FROM unnest(%(parent_thread_ids)s::text[], %(parent_nss)s::text[],
                         %(parent_ids)s::text[], %(parent_doomed)s::bool[])
         AS p(thread_id, checkpoint_ns, checkpoint_id, doomed)
), {hanging_namespaces}
SELECT thread_id, checkpoint_ns FROM hanging

-- name: run_checkpoints
-- retry: safe
-- The checkpoints a set of runs created, per thread and namespace.
SELECT thread_id, checkpoint_ns, checkpoint_id
FROM {schema}.pgc_checkpoints
WHERE run_id = ANY(%(run_ids)s::text[])

-- name: thread_heads
-- The newest checkpoint of every namespace of the given threads: the first of
-- each in a backward scan of the primary key (ordered as it is, nothing sorts
-- the thread's rows).
SELECT DISTINCT ON (thread_id, checkpoint_ns) thread_id, checkpoint_ns, checkpoint_id
FROM {schema}.pgc_checkpoints
WHERE thread_id = ANY(%(thread_ids)s::text[])
ORDER BY thread_id DESC, checkpoint_ns DESC, checkpoint_id DESC

-- name: delta_links
-- prepare: never
-- What the rule of what a kept checkpoint needs (pgcheckpoint.core.deletes)
-- reads of the given threads: the checkpoints of each namespace that holds
-- DeltaChannels or a step's sends, each with its parent (NULL unless older, as
-- the history walk goes: an edited parent column cannot loop), of the
-- namespace's DeltaChannels those it has a version of (`delta`) and those it
-- stores a value of (`stored`: inline, or a value in pgc_blobs not marked
-- empty, where the walk of delta_history_rows stops), and whether its parent
-- holds the sends of its step (`sends_parent`: writes to __pregel_tasks, while
-- it has no version of that channel, as a checkpoint older than LangGraph's
-- format v4 reads them). A namespace's DeltaChannels are the channels LangGraph
-- names in counters_since_delta_snapshot in the metadata of any of its
-- checkpoints; in a thread LangGraph.js marked with `delta_writes_versioned`,
-- every channel. A pass over the threads' rows (grouping the marked ones
-- only), and one over their writes, finds those namespaces; their rows are
-- then read by key range (LATERAL), never joined to a set the planner could
-- take for a few rows (a thread its statistics do not know yet) and loop over.
WITH named AS MATERIALIZED (
    -- the namespaces whose checkpoints LangGraph marked, with their DeltaChannels
    SELECT c.thread_id, c.checkpoint_ns,
           coalesce(array_agg(DISTINCT ch) FILTER (WHERE ch IS NOT NULL), '{}') AS channels,
           bool_or(c.metadata ? 'delta_writes_versioned') AS marked
    FROM {schema}.pgc_checkpoints c
    LEFT JOIN LATERAL jsonb_object_keys(
        CASE WHEN jsonb_typeof(c.metadata -> 'counters_since_delta_snapshot') = 'object'
             THEN c.metadata -> 'counters_since_delta_snapshot' ELSE '{}'::jsonb END
    ) AS ch ON true
    WHERE c.thread_id = ANY(%(thread_ids)s::text[])
      AND (c.metadata ? 'counters_since_delta_snapshot' OR c.metadata ? 'delta_writes_versioned')
    GROUP BY c.thread_id, c.checkpoint_ns
), spaces AS (
    SELECT n.thread_id, n.checkpoint_ns, coalesce(max(n.channels), '{}') AS channels,
           bool_or(n.every) AS every
    FROM (
        SELECT thread_id, checkpoint_ns, channels, false AS every FROM named
        UNION ALL
        -- every namespace of a thread LangGraph.js marked
        SELECT DISTINCT c.thread_id, c.checkpoint_ns, NULL::text[], true
        FROM {schema}.pgc_checkpoints c
        WHERE c.thread_id = ANY(%(thread_ids)s::text[])
          AND c.thread_id = ANY(ARRAY(SELECT thread_id FROM named WHERE marked))
        UNION ALL
        -- the namespaces that hold a step's sends
        SELECT DISTINCT w.thread_id, w.checkpoint_ns, NULL::text[], false
        FROM {schema}.pgc_writes w
        WHERE w.thread_id = ANY(%(thread_ids)s::text[]) AND w.channel = '__pregel_tasks'
    ) n
    GROUP BY n.thread_id, n.checkpoint_ns
)
SELECT p.thread_id, p.checkpoint_ns, p.checkpoint_id, p.parent_checkpoint_id, d.delta,
       ARRAY(
           SELECT ch FROM unnest(d.delta) AS ch
           {stored_value_probe}
           WHERE ch = ANY(p.inline_channels) OR stored.hit
       ) AS stored,
       s.hit IS NOT NULL AS sends_parent
FROM spaces n
CROSS JOIN LATERAL (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id,
           CASE WHEN c.parent_checkpoint_id < c.checkpoint_id THEN c.parent_checkpoint_id END
               AS parent_checkpoint_id,
           c.channel_versions, c.inline_channels
    FROM {schema}.pgc_checkpoints c
    WHERE c.thread_id = n.thread_id AND c.checkpoint_ns = n.checkpoint_ns
    OFFSET 0
) p
CROSS JOIN LATERAL (
    SELECT ARRAY(
        SELECT ch FROM jsonb_object_keys(p.channel_versions) AS ch
        WHERE n.every OR ch = ANY(n.channels)
    ) AS delta
) d
LEFT JOIN LATERAL (
    SELECT true AS hit FROM {schema}.pgc_writes w
    WHERE w.thread_id = p.thread_id AND w.checkpoint_ns = p.checkpoint_ns
      AND w.checkpoint_id = p.parent_checkpoint_id AND w.channel = '__pregel_tasks'
      AND NOT p.channel_versions ? '__pregel_tasks'
    LIMIT 1
) s ON true

-- name: bounded_plans
-- Before each of delta_links, hanging_calls, delete_checkpoints and
-- measure_checkpoints, in the same transaction: joins by hashing or merging
-- only, and no JIT, until planner_settings restores what this returns. Their
-- joins pair the rows of a thread with a set derived from them (the
-- checkpoints that go, the values they free); the planner, taking a thread its
-- statistics do not know yet for a few rows, looped over one set for every row
-- of the other (12 s to delete 5,000 namespaces, under the thread's lock). A
-- hash join reads each side once, whatever the estimates. The nested loops of
-- their LATERAL lookups by key stay, priced as disabled: past jit_above_cost,
-- hence no JIT, which would take longer than the statement (2 s at 20,000
-- namespaces) and pays off for none of them.
WITH before AS MATERIALIZED (
    SELECT current_setting('enable_nestloop') AS enable_nestloop, current_setting('jit') AS jit
)
SELECT b.enable_nestloop, b.jit,
       set_config('enable_nestloop', 'off', true) AS nestloop_now,
       set_config('jit', 'off', true) AS jit_now
FROM before b

-- name: planner_settings
-- Restores, for the rest of the transaction, what bounded_plans returned.
SELECT set_config('enable_nestloop', %(enable_nestloop)s, true) AS enable_nestloop,
       set_config('jit', %(jit)s, true) AS jit

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
