-- Thread locks: advisory locks that let one worker at a time run a thread.

-- fragment: thread_lock_held
-- Thread locks (pgcheckpoint.locking) are one-bigint advisory locks: pg_locks
-- shows the key's high 32 bits in classid and its low 32 bits in objid, with
-- objsubid = 1, whether a session or a transaction holds it.
l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
  AND (l.classid::int8 << 32 | l.objid::int8) = %(key)s::int8

-- fragment: thread_lock_holder_pid
SELECT l.pid FROM pg_catalog.pg_locks l WHERE {thread_lock_held} LIMIT 1

-- name: try_thread_lock
-- prepare: never
-- Try once; when taken, name the session holding it (NULL if it just let go).
-- A session that already holds the lock before trying is shared with another
-- client (a pooler): trying would succeed, as advisory locks are re-entrant,
-- so it does not try. Nor does it when the server session is not the one the
-- connection announced (`client_pid`): behind a pooler the lock is taken in
-- a transaction (`in_transaction`) that pins the session until the release,
-- and an idle transaction must not be ended by idle_in_transaction_session_timeout.
WITH mine AS MATERIALIZED (
    SELECT pg_backend_pid() AS backend_pid,
           coalesce(%(client_pid)s::int4 <> pg_backend_pid(), false) AS pooled,
           EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                   WHERE l.pid = pg_backend_pid() AND {thread_lock_held}) AS already_held,
           CASE WHEN %(in_transaction)s
                THEN set_config('idle_in_transaction_session_timeout', '0', true) END AS idle
), attempt AS MATERIALIZED (
    SELECT m.backend_pid, m.pooled, m.already_held,
           CASE WHEN m.already_held OR m.pooled THEN false
                WHEN %(in_transaction)s THEN pg_try_advisory_xact_lock(%(key)s::int8)
                ELSE pg_try_advisory_lock(%(key)s::int8) END AS locked
    FROM mine m
)
SELECT a.already_held, a.pooled, a.locked, a.backend_pid,
       CASE WHEN NOT a.locked AND NOT a.pooled THEN ({thread_lock_holder_pid}) END AS holder_pid
FROM attempt a

-- name: begin_thread_lock_transaction
-- prepare: never
-- Behind a pooler: the transaction that holds the lock for the guarded block.
BEGIN

-- name: end_thread_lock_transaction
-- prepare: never
-- Ends the transaction that holds the lock, and with it the lock.
ROLLBACK

-- name: wait_thread_lock
-- prepare: never
-- Wait in the server's lock queue for at most lock_timeout ms ('0': no limit),
-- raising lock_not_available (55P03) when it runs out. set_config(..., true)
-- lasts until the end of this statement's own transaction (autocommit), or of
-- the one that holds the lock, and the materialized CTE is read before the
-- select list asks for the lock.
WITH wait AS MATERIALIZED (
    SELECT set_config('lock_timeout', %(lock_timeout)s, true) AS lock_timeout
)
SELECT pg_backend_pid() AS backend_pid,
       CASE WHEN %(in_transaction)s THEN pg_advisory_xact_lock(%(key)s::int8)::text
            ELSE pg_advisory_lock(%(key)s::int8)::text END AS locked
FROM wait

-- name: thread_lock_holder
-- prepare: never
-- The session holding a thread's lock, after a wait for it ran out.
SELECT ({thread_lock_holder_pid}) AS holder_pid

-- name: thread_lock_check
-- prepare: never
-- Whether the session that runs this holds the lock: a pooler may run each
-- statement on another server session.
SELECT pg_backend_pid() AS backend_pid, EXISTS (
    SELECT 1 FROM pg_catalog.pg_locks l WHERE l.pid = pg_backend_pid() AND {thread_lock_held}
) AS held

-- name: unlock_thread
-- prepare: never
-- False (with a server WARNING) when this session does not hold the lock, NULL
-- when this is not the session that took it: never release the lock another
-- client holds on a shared session.
SELECT CASE WHEN pg_backend_pid() = %(backend_pid)s
            THEN pg_advisory_unlock(%(key)s::int8) END AS unlocked

-- name: begin_ttl_sweep
-- prepare: never
-- The transaction that holds the TTL sweeper's lock (pgcheckpoint.agent_server)
-- while its sweep runs on other connections.
BEGIN

-- name: try_ttl_sweep_lock
-- prepare: never
-- Try once to become the schema's one TTL sweeper, until this transaction ends.
-- The transaction stays idle while the sweep runs: idle_in_transaction_session_timeout
-- must not end it (and with it the lock) meanwhile.
WITH idle AS MATERIALIZED (
    SELECT set_config('idle_in_transaction_session_timeout', '0', true) AS idle
)
SELECT pg_try_advisory_xact_lock(%(key)s::int8) AS locked FROM idle

-- name: end_ttl_sweep
-- prepare: never
-- Ends the sweeper's transaction, and with it the lock.
ROLLBACK
