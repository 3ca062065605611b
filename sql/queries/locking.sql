-- Thread locks: session advisory locks that let one worker at a time run a thread.

-- fragment: thread_lock_holder_pid
-- Thread locks (pgcheckpoint.locking) are session advisory locks (lock_class, key)
-- held on a connection reserved for one guarded run. Keys are cast to int4 so
-- the two-key functions are called; pg_locks shows them as classid/objid oids
-- with objsubid = 2.
SELECT l.pid FROM pg_catalog.pg_locks l
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
  AND l.classid = %(lock_class)s::int4::oid AND l.objid = %(key)s::int4::oid
LIMIT 1

-- name: try_thread_lock
-- Try once; when taken, name the session holding it (NULL if it just let go).
-- A session that already holds the lock before trying is shared with another
-- client (a pooler in transaction mode): trying would succeed, as advisory
-- locks are re-entrant, so it does not try.
WITH mine AS MATERIALIZED (
    SELECT EXISTS (
        SELECT 1 FROM pg_catalog.pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.pid = pg_backend_pid()
          AND l.database = (SELECT oid FROM pg_catalog.pg_database
                            WHERE datname = current_database())
          AND l.classid = %(lock_class)s::int4::oid AND l.objid = %(key)s::int4::oid
    ) AS already_held
), attempt AS MATERIALIZED (
    SELECT m.already_held,
           CASE WHEN m.already_held THEN false
                ELSE pg_try_advisory_lock(%(lock_class)s::int4, %(key)s::int4) END AS locked
    FROM mine m
)
SELECT a.already_held, a.locked, pg_backend_pid() AS backend_pid,
       CASE WHEN NOT a.locked THEN ({thread_lock_holder_pid}) END AS holder_pid
FROM attempt a

-- name: wait_thread_lock
-- Wait in the server's lock queue for at most lock_timeout ms ('0': no limit),
-- raising lock_not_available (55P03) when it runs out. set_config(..., true)
-- lasts until the end of this statement's own transaction (autocommit), and the
-- materialized CTE is read before the select list asks for the lock.
WITH wait AS MATERIALIZED (
    SELECT set_config('lock_timeout', %(lock_timeout)s, true) AS lock_timeout
)
SELECT pg_backend_pid() AS backend_pid,
       pg_advisory_lock(%(lock_class)s::int4, %(key)s::int4)::text AS locked
FROM wait

-- name: thread_lock_holder
-- The session holding a thread's lock, after a wait for it ran out.
SELECT ({thread_lock_holder_pid}) AS holder_pid

-- name: thread_lock_check
-- Whether the session that runs this holds the lock: a pooler in transaction
-- mode may run each statement on another server session.
SELECT pg_backend_pid() AS backend_pid, EXISTS (
    SELECT 1 FROM pg_catalog.pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
      AND l.pid = pg_backend_pid()
      AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
      AND l.classid = %(lock_class)s::int4::oid AND l.objid = %(key)s::int4::oid
) AS held

-- name: unlock_thread
-- False (with a server WARNING) when this session does not hold the lock, NULL
-- when this is not the session that took it: behind a pooler, never release
-- the lock another client holds on this session.
SELECT CASE WHEN pg_backend_pid() = %(backend_pid)s
            THEN pg_advisory_unlock(%(lock_class)s::int4, %(key)s::int4) END AS unlocked
