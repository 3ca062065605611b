-- pgcheckpoint_prune: retention from inside PostgreSQL, for teams that schedule
-- jobs with pg_cron rather than cron. The `pgcheckpoint prune` command does the
-- same from outside and also offers keep_latest for DeltaChannel threads,
-- --keep-last, a dry run and progress.
--
-- Install (once, and again after upgrading pgcheckpoint), with a role that owns
-- or may delete from the pgcheckpoint tables:
--
--     psql "$DATABASE_URL" -f retention.sql
--
-- Schedule (pg_cron; every night at 03:17, threads idle for 30 days):
--
--     SELECT cron.schedule('pgcheckpoint-prune', '17 3 * * *',
--                          $$CALL pgcheckpoint_prune('30 days')$$);
--
-- Arguments:
--   older_than   a thread whose newest checkpoint (any namespace) is older goes
--   strategy     'delete' (default): delete such threads whole;
--                'keep_latest': keep each one's newest checkpoint per namespace
--                and delete the rest of its history, with the subgraph call
--                namespaces that ran from what it deletes (a checkpointer=True
--                subgraph's namespace, without a task id, keeps its newest).
--                Threads that use a DeltaChannel are skipped by keep_latest
--                here (a kept checkpoint needs older ones for its history):
--                prune those with `pgcheckpoint prune --strategy keep_latest`
--   max_threads  look at most at this many threads per call (default 1000)
--   schema_name  the schema of the pgcheckpoint tables (default 'public')
--   report       OUT: what the call did, as JSON (CALL shows it)
--   sweep_store  then delete the store's expired items (PostgresStore TTLs in
--                pgc_store), as `pgcheckpoint prune` does (default true; pass
--                it by name: sweep_store => false)
--
-- Safe while the application runs, as the Python sweep (pgcheckpoint.maintenance.retention):
-- one transaction per thread (COMMIT inside the procedure, so CALL it on its
-- own, not inside BEGIN ... COMMIT); a thread another sweep, a prune or a
-- guarded run (lock_thread) holds is skipped, not waited for; the age is
-- checked again under the lock, by the statement that deletes; a thread
-- written to meanwhile is rolled back and skipped; a thread whose deletion
-- conflicts with a concurrent put (a foreign-key violation, a deadlock, a lock
-- held over 10 s) is rolled back and counted as failed. Skipped and failed
-- threads are tried again by the next call. The store's expired items go
-- after the threads, 1000 per transaction, by the statement the store's
-- sweep_ttl() runs (store_sweep of sql/queries/store_writes.sql, rendered into
-- this file by `make retention-sql`): items a writer holds (a put renewing one)
-- are skipped, not waited for, and left for the next call.
--
-- Lock keys (one-bigint advisory locks), as in pgcheckpoint.locking: the first 8
-- bytes of sha256(class NUL schema NUL thread_id), for the classes
--   'pgcheckpoint/maintenance-lock'  deletes (exclusive) and saves (shared)
--   'pgcheckpoint/thread-lock'       a thread's run (lock_thread)

-- The procedure before sweep_store: CREATE OR REPLACE would leave it beside
-- this one, and a CALL would then match both. (What was granted or revoked on
-- it goes with it.)
DROP PROCEDURE IF EXISTS pgcheckpoint_prune(interval, text, int, text, jsonb);

CREATE OR REPLACE PROCEDURE pgcheckpoint_prune(
    older_than interval,
    strategy text DEFAULT 'delete',
    max_threads int DEFAULT 1000,
    schema_name text DEFAULT 'public',
    -- after report, so that a CALL of an earlier release's positional form,
    -- report (NULL) included, means what it meant
    INOUT report jsonb DEFAULT NULL,
    sweep_store boolean DEFAULT true
)
LANGUAGE plpgsql
AS $procedure$
DECLARE
    maintenance_lock CONSTANT text := 'pgcheckpoint/maintenance-lock';
    run_lock CONSTANT text := 'pgcheckpoint/thread-lock';
    store_batch CONSTANT int := 1000;
    cutoff timestamptz;
    thread text;
    gone record;
    written boolean;
    examined int := 0;
    pruned int := 0;
    skipped int := 0;
    failed int := 0;
    unsupported int := 0;
    checkpoints bigint := 0;
    writes bigint := 0;
    blobs bigint := 0;
    store_items bigint;
    swept bigint;
BEGIN
    IF older_than IS NULL OR older_than <= interval '0' THEN
        RAISE EXCEPTION 'pgcheckpoint_prune: older_than must be a positive interval, not %',
            coalesce(older_than::text, 'NULL');
    END IF;
    IF strategy IS NULL OR strategy NOT IN ('delete', 'keep_latest') THEN
        RAISE EXCEPTION 'pgcheckpoint_prune: unknown strategy %; use ''delete'' or ''keep_latest''',
            coalesce(quote_literal(strategy), 'NULL');
    END IF;
    IF sweep_store IS NULL THEN
        RAISE EXCEPTION 'pgcheckpoint_prune: sweep_store must be true or false, not NULL';
    END IF;
    IF max_threads IS NULL OR max_threads < 1 THEN
        RAISE EXCEPTION 'pgcheckpoint_prune: max_threads must be at least 1, not %',
            coalesce(max_threads::text, 'NULL');
    END IF;
    IF to_regclass(format('%I.pgc_checkpoints', schema_name)) IS NULL THEN
        RAISE EXCEPTION 'pgcheckpoint_prune: schema % has no pgcheckpoint tables; pass '
            'schema_name => ''...'', or run `pgcheckpoint migrate`', quote_literal(schema_name);
    END IF;
    cutoff := now() - older_than;

    FOR thread IN EXECUTE format(
        'SELECT thread_id FROM %I.pgc_checkpoints GROUP BY thread_id '
        'HAVING max(created_at) < $1 ORDER BY thread_id LIMIT $2', schema_name)
        USING cutoff, max_threads
    LOOP
        examined := examined + 1;
        IF NOT (pg_try_advisory_xact_lock(('x' || left(encode(sha256(
                    convert_to(maintenance_lock, 'UTF8') || '\x00'::bytea
                    || convert_to(schema_name, 'UTF8') || '\x00'::bytea
                    || convert_to(thread, 'UTF8')), 'hex'), 16))::bit(64)::int8)
                AND pg_try_advisory_xact_lock(('x' || left(encode(sha256(
                    convert_to(run_lock, 'UTF8') || '\x00'::bytea
                    || convert_to(schema_name, 'UTF8') || '\x00'::bytea
                    || convert_to(thread, 'UTF8')), 'hex'), 16))::bit(64)::int8)) THEN
            skipped := skipped + 1;
            COMMIT;  -- lets go of the lock it may have taken
            CONTINUE;
        END IF;
        PERFORM set_config('lock_timeout', '10s', true);
        gone := NULL;
        BEGIN
            IF strategy = 'delete' THEN
                -- Checkpoints first: a put locks its parent, so this waits for a
                -- put in flight, and a later put finds its parent gone.
                EXECUTE format($sql$
                    WITH doomed AS MATERIALIZED (
                        SELECT $1::text AS thread_id
                        WHERE NOT EXISTS (
                            SELECT 1 FROM %1$I.pgc_checkpoints
                            WHERE thread_id = $1 AND created_at >= $2)
                    ), deleted AS (
                        DELETE FROM %1$I.pgc_checkpoints c USING doomed d
                        WHERE c.thread_id = d.thread_id
                        RETURNING c.thread_id
                    ), gone AS (
                        SELECT DISTINCT thread_id FROM deleted
                    ), deleted_writes AS (
                        DELETE FROM %1$I.pgc_writes w USING gone g
                        WHERE w.thread_id = g.thread_id RETURNING 1
                    ), deleted_blobs AS (
                        DELETE FROM %1$I.pgc_blobs b USING gone g
                        WHERE b.thread_id = g.thread_id RETURNING 1
                    )
                    SELECT (SELECT count(*) FROM deleted) AS checkpoints,
                           (SELECT count(*) FROM deleted_writes) AS writes,
                           (SELECT count(*) FROM deleted_blobs) AS blobs,
                           0::bigint AS delta_threads, 0::bigint AS left_over
                    $sql$, schema_name) INTO gone USING thread, cutoff;
            ELSE
                -- Joins by hashing only, as the sweep's delete_checkpoints: the
                -- planner, taking a thread its statistics do not know yet for a
                -- few rows, looped over one set of its rows for each row of
                -- another. No JIT either (the nested loops kept are priced as
                -- disabled). Every table is read for the thread only.
                PERFORM set_config('enable_nestloop', 'off', true), set_config('jit', 'off', true);
                -- keep_latest: the newest checkpoint of each namespace stays, with
                -- its writes and the values it reads (and the bases of values
                -- stored as deltas), unless its namespace is a subgraph call
                -- that ran from a deleted checkpoint; the rules of
                -- delete_checkpoints and hanging_namespaces in sql/queries/, and
                -- of what a kept checkpoint needs in pgcheckpoint.core.deletes
                -- (a thread with DeltaChannels is left whole).
                EXECUTE format($sql$
                    WITH RECURSIVE idle AS MATERIALIZED (
                        SELECT NOT EXISTS (
                            SELECT 1 FROM %1$I.pgc_checkpoints
                            WHERE thread_id = $1 AND created_at >= $2) AS idle
                    ), delta_thread AS MATERIALIZED (
                        -- the DeltaChannels of delta_links in sql/queries/
                        SELECT EXISTS (
                            SELECT 1 FROM %1$I.pgc_checkpoints c
                            WHERE c.thread_id = $1
                              AND (c.metadata ? 'delta_writes_versioned'
                                   OR jsonb_typeof(c.metadata -> 'counters_since_delta_snapshot')
                                      = 'object'
                                      AND c.metadata -> 'counters_since_delta_snapshot'
                                          <> '{}'::jsonb)
                        ) AS uses_deltas
                    ), heads AS MATERIALIZED (
                        SELECT DISTINCT ON (c.checkpoint_ns) c.checkpoint_ns, c.checkpoint_id,
                               c.parent_checkpoint_id,
                               c.channel_versions ? '__pregel_tasks' AS has_sends
                        FROM %1$I.pgc_checkpoints c
                        WHERE c.thread_id = $1
                        ORDER BY c.checkpoint_ns DESC, c.checkpoint_id DESC
                    ), trimmed AS MATERIALIZED (
                        -- all but each namespace's newest, and the parent that holds
                        -- the sends of a newest older than format v4
                        SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id
                        FROM %1$I.pgc_checkpoints c
                        JOIN heads h ON h.checkpoint_ns = c.checkpoint_ns
                        WHERE c.thread_id = $1
                          AND (SELECT idle FROM idle)
                          AND NOT (SELECT uses_deltas FROM delta_thread)
                          AND c.checkpoint_id < h.checkpoint_id
                          AND NOT (c.checkpoint_id = h.parent_checkpoint_id
                                   AND NOT h.has_sends
                                   AND EXISTS (
                                       SELECT 1 FROM %1$I.pgc_writes w
                                       WHERE w.thread_id = $1
                                         AND w.checkpoint_ns = c.checkpoint_ns
                                         AND w.checkpoint_id = c.checkpoint_id
                                         AND w.channel = '__pregel_tasks'))
                    ), spaces AS (
                        SELECT c.checkpoint_ns,
                               CASE WHEN strpos(c.checkpoint_ns, '|') = 0 THEN ''
                                    ELSE left(c.checkpoint_ns, length(c.checkpoint_ns)
                                              - strpos(reverse(c.checkpoint_ns), '|'))
                               END AS parent_ns,
                               max(c.checkpoint_id) AS last_id,
                               min(c.checkpoint_id) FILTER (WHERE t.checkpoint_id IS NULL)
                                   AS first_kept
                        FROM %1$I.pgc_checkpoints c
                        LEFT JOIN trimmed t ON t.checkpoint_ns = c.checkpoint_ns
                                           AND t.checkpoint_id = c.checkpoint_id
                        WHERE c.thread_id = $1 AND EXISTS (SELECT 1 FROM trimmed)
                        GROUP BY c.checkpoint_ns
                    ), linked AS (
                        SELECT n.checkpoint_ns, n.parent_ns, n.last_id,
                               (SELECT h.metadata -> 'parents' ->> n.parent_ns
                                FROM %1$I.pgc_checkpoints h
                                WHERE h.thread_id = $1 AND h.checkpoint_ns = n.checkpoint_ns
                                  AND h.checkpoint_id = n.last_id) AS parent_id
                        FROM spaces n
                        WHERE strpos(n.checkpoint_ns, ':') > 0
                    ), hanging(checkpoint_ns) AS (
                        SELECT n.checkpoint_ns
                        FROM linked n
                        LEFT JOIN spaces p ON p.checkpoint_ns = n.parent_ns
                        WHERE CASE
                            WHEN EXISTS (SELECT 1 FROM trimmed t
                                         WHERE t.checkpoint_ns = n.parent_ns
                                           AND t.checkpoint_id = n.parent_id) THEN true
                            WHEN EXISTS (SELECT 1 FROM %1$I.pgc_checkpoints k
                                         WHERE k.thread_id = $1
                                           AND k.checkpoint_ns = n.parent_ns
                                           AND k.checkpoint_id = n.parent_id) THEN false
                            ELSE p.first_kept IS NULL
                                 OR n.last_id COLLATE "C" < p.first_kept COLLATE "C"
                        END
                        UNION
                        SELECT n.checkpoint_ns
                        FROM linked n JOIN hanging h ON h.checkpoint_ns = n.parent_ns
                    ), doomed AS MATERIALIZED (
                        SELECT thread_id, checkpoint_ns, checkpoint_id FROM trimmed
                        UNION
                        SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id
                        FROM hanging h
                        JOIN %1$I.pgc_checkpoints c
                          ON c.thread_id = $1 AND c.checkpoint_ns = h.checkpoint_ns
                    ), deleted_writes AS (
                        DELETE FROM %1$I.pgc_writes w USING doomed d
                        WHERE w.thread_id = $1 AND w.thread_id = d.thread_id
                          AND w.checkpoint_ns = d.checkpoint_ns
                          AND w.checkpoint_id = d.checkpoint_id
                        RETURNING 1
                    ), deleted AS (
                        DELETE FROM %1$I.pgc_checkpoints c USING doomed d
                        WHERE c.thread_id = $1 AND c.thread_id = d.thread_id
                          AND c.checkpoint_ns = d.checkpoint_ns
                          AND c.checkpoint_id = d.checkpoint_id
                        RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id,
                                  c.channel_versions
                    ), orphaned AS (
                        UPDATE %1$I.pgc_checkpoints c SET parent_checkpoint_id = NULL
                        FROM deleted d
                        WHERE c.thread_id = $1 AND c.thread_id = d.thread_id
                          AND c.checkpoint_ns = d.checkpoint_ns
                          AND c.parent_checkpoint_id = d.checkpoint_id
                    ), freed AS (
                        SELECT DISTINCT d.thread_id, d.checkpoint_ns, v.channel, v.version
                        FROM deleted d, jsonb_each_text(d.channel_versions) AS v(channel, version)
                    ), kept AS (
                        SELECT c.thread_id, c.checkpoint_ns, v.channel, v.version
                        FROM %1$I.pgc_checkpoints c,
                             jsonb_each_text(c.channel_versions) AS v(channel, version)
                        WHERE c.thread_id = $1
                          AND NOT EXISTS (
                              SELECT 1 FROM doomed d
                              WHERE d.checkpoint_ns = c.checkpoint_ns
                                AND d.checkpoint_id = c.checkpoint_id)
                        UNION
                        SELECT b.thread_id, b.checkpoint_ns, b.channel, b.base_version
                        FROM kept k
                        JOIN %1$I.pgc_blobs b
                          ON b.thread_id = k.thread_id AND b.checkpoint_ns = k.checkpoint_ns
                         AND b.channel = k.channel AND b.version = k.version
                        WHERE b.thread_id = $1 AND b.base_version IS NOT NULL
                    ), deleted_blobs AS (
                        DELETE FROM %1$I.pgc_blobs b USING freed f
                        WHERE b.thread_id = $1 AND b.thread_id = f.thread_id
                          AND b.checkpoint_ns = f.checkpoint_ns
                          AND b.channel = f.channel AND b.version = f.version
                          AND NOT EXISTS (
                              SELECT 1 FROM kept k
                              WHERE k.thread_id = f.thread_id
                                AND k.checkpoint_ns = f.checkpoint_ns
                                AND k.channel = f.channel AND k.version = f.version)
                        RETURNING 1
                    )
                    SELECT (SELECT count(*) FROM deleted) AS checkpoints,
                           (SELECT count(*) FROM deleted_writes) AS writes,
                           (SELECT count(*) FROM deleted_blobs) AS blobs,
                           (SELECT count(*) FROM delta_thread WHERE uses_deltas
                              AND (SELECT idle FROM idle)) AS delta_threads,
                           -- what should be left: this snapshot's checkpoints, less those deleted
                           (SELECT count(*) FROM %1$I.pgc_checkpoints WHERE thread_id = $1)
                           - (SELECT count(*) FROM deleted) AS left_over
                    $sql$, schema_name) INTO gone USING thread, cutoff;
            END IF;
        EXCEPTION WHEN foreign_key_violation OR deadlock_detected OR lock_not_available THEN
            failed := failed + 1;
            ROLLBACK;
            CONTINUE;
        END;
        IF gone.delta_threads > 0 THEN
            unsupported := unsupported + 1;
        END IF;
        IF gone.checkpoints > 0 THEN
            -- In a new snapshot: was the thread written to while this deleted?
            EXECUTE format(CASE strategy
                WHEN 'delete' THEN
                    'SELECT EXISTS (SELECT 1 FROM %1$I.pgc_checkpoints WHERE thread_id = $1)'
                    ' OR EXISTS (SELECT 1 FROM %1$I.pgc_writes WHERE thread_id = $1)'
                ELSE
                    'SELECT (SELECT count(*) FROM %1$I.pgc_checkpoints WHERE thread_id = $1)'
                    ' <> $2'
                END, schema_name) INTO written USING thread, gone.left_over;
            IF written THEN
                skipped := skipped + 1;
                ROLLBACK;
                CONTINUE;
            END IF;
            pruned := pruned + 1;
            checkpoints := checkpoints + gone.checkpoints;
            writes := writes + gone.writes;
            blobs := blobs + gone.blobs;
        END IF;
        COMMIT;
    END LOOP;

    -- A schema migrated before the store (revision 0005) has no items to sweep.
    IF sweep_store AND to_regclass(format('%I.pgc_store', schema_name)) IS NOT NULL THEN
        store_items := 0;
        LOOP
            -- statement store_sweep (limit => store_batch): rendered from
            -- sql/queries/store_writes.sql by `make retention-sql`; do not edit
            EXECUTE format($sql$
                DELETE FROM %1$I.pgc_store s
                USING (
                    SELECT x.ns, x.key FROM %1$I.pgc_store x
                    WHERE x.expires_at <= now()
                    ORDER BY x.ns, x.key
                    LIMIT $1
                    FOR UPDATE SKIP LOCKED
                ) l
                WHERE s.ns = l.ns AND s.key = l.key
            $sql$, schema_name) USING store_batch;
            -- end of statement store_sweep
            GET DIAGNOSTICS swept = ROW_COUNT;
            store_items := store_items + swept;
            COMMIT;
            EXIT WHEN swept < store_batch;
        END LOOP;
    END IF;

    report := jsonb_build_object(
        'strategy', strategy, 'cutoff', cutoff, 'examined', examined, 'threads', pruned,
        'checkpoints', checkpoints, 'writes', writes, 'blobs', blobs,
        'skipped', skipped, 'failed', failed, 'delta_threads_not_pruned', unsupported,
        'store_items', store_items);
    RAISE LOG 'pgcheckpoint_prune: %', report;
END
$procedure$;

COMMENT ON PROCEDURE pgcheckpoint_prune(interval, text, int, text, jsonb, boolean) IS
    'pgcheckpoint retention: delete threads idle for longer than older_than (strategy '
    '''delete''), or keep their latest checkpoint per namespace (''keep_latest'', threads '
    'without DeltaChannel data), then the store''s expired items (sweep_store). See '
    'sql/retention.sql in the pgcheckpoint package.';
