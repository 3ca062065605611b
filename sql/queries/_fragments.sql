-- Pieces of statements, included as `{name}` by the other files.
--
-- Every statement pgcheckpoint runs lives in this folder, one per name, loaded by
-- `pgcheckpoint.queries`. A block starts with `-- name: NAME` (a statement) or
-- `-- fragment: NAME` and runs to the next. `{schema}` is the quoted schema name;
-- parameters are named (`%(thread_id)s`). Header lines right after a statement's
-- name state facts the drivers act on:
--   `-- retry: safe`     when the connection is lost while it runs as an op's first
--                        statement, a pooled saver runs it once more on a new one
--                        (a read, or a write that leaves the same rows twice)
--   `-- prepare: never`  never prepared: its generic plan cannot use the parameters
-- Tables: checkpoints (one row per checkpoint), blobs (channel values, one row
-- per channel version), writes (pending writes of a task at a checkpoint).
-- This file holds the pieces that statements of several files share; a piece
-- of one file's statements stands at the top of that file.

-- fragment: sealed_columns
-- What an encrypting saver reads besides, for checkpoint `c` with its writes
-- `wr`, to compare with the sealed record (pgcheckpoint.integrity): the parent
-- it was sealed with, the channels kept inline, the readable metadata, the
-- writes' task paths (bound to their values), and, when the parent column is
-- cleared, whether the sealed parent still exists (a delete clears it;
-- someone without the key must not).
c.sealed_parent_id, c.inline_channels AS sealed_inline_channels,
c.metadata AS sealed_metadata, wr.write_task_paths,
CASE WHEN c.parent_checkpoint_id IS NULL AND c.sealed_parent_id <> '' THEN
    EXISTS (SELECT FROM {schema}.pgc_checkpoints x
            WHERE x.thread_id = c.thread_id AND x.checkpoint_ns = c.checkpoint_ns
              AND x.checkpoint_id = c.sealed_parent_id)
END AS sealed_parent_exists

-- fragment: writes_order
-- The order of writes `w` that LangGraph's `writes_sort_key` gives: task_path,
-- task_id, idx. COLLATE "C" is code-point order, as Python compares strings;
-- the database's own collation may be linguistic (en_US sorts "a" before "B").
w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx

-- fragment: ordered_writes
-- The pending writes of checkpoint `c` as parallel arrays, in `writes_order`. A
-- statement selects the columns it uses: the planner leaves the others out of
-- the plan, so they are neither computed nor sent. The writes are sorted once,
-- in the subquery, which the aggregates read in that order (Postgres keeps a
-- subquery's order for aggregates of a level without a join); an ORDER BY in
-- each aggregate sorted them once per column.
CROSS JOIN LATERAL (
    SELECT array_agg(w.task_id) AS write_task_ids,
           array_agg(w.task_path) AS write_task_paths,
           array_agg(w.idx) AS write_idxs,
           array_agg(w.channel) AS write_channels,
           array_agg(w.type) AS write_types,
           array_agg(w.blob) AS write_values,
           array_agg(octet_length(w.blob)) AS write_bytes,
           -- the payloads of the special writes only: errors, interrupts, resumes
           array_agg(CASE WHEN w.idx < 0 THEN w.blob END) AS write_payloads
    FROM (
        SELECT w.task_id, w.task_path, w.idx, w.channel, w.type, w.blob
        FROM {schema}.pgc_writes w
        WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
          AND w.checkpoint_id = c.checkpoint_id
        ORDER BY {writes_order}
    ) w
) wr

-- fragment: delta_chain
-- A common table expression, `chain`: the stored pieces of the channel values
-- that the statement's CTE `chain_head` (thread_id, checkpoint_ns, channel,
-- version) names. Depth 0 is a value itself; one stored as a delta is followed
-- by its base at depth 1, and so on down to the full value. A head enters as a
-- row at depth -1 that only names the version to read, so one lookup serves
-- every depth: readers keep `depth >= 0`. Each piece is looked up by primary key
-- (LATERAL ... LIMIT 1): with plain joins the planner hash-joined a sequential
-- scan of the blobs at every step of the chain (4 ms at turn 80 of a chat, and
-- the whole table when the thread's rows are not in its statistics yet).
-- This walk suits the values of one checkpoint. The values of many
-- (listed_values, blobs_to_drop) share their pieces and go a level at a time
-- instead (level_walk): a recursion per piece from that many heads costs past
-- jit_above_cost.
chain(thread_id, checkpoint_ns, channel, version, base_version, type, blob, depth) AS (
    SELECT h.thread_id, h.checkpoint_ns, h.channel, NULL::text, h.version, NULL::text,
           NULL::bytea, -1
    FROM chain_head h
    UNION ALL
    SELECT p.thread_id, p.checkpoint_ns, p.channel, b.version, b.base_version, b.type, b.blob,
           p.depth + 1
    FROM chain p
    CROSS JOIN LATERAL (
        SELECT b.version, b.base_version, b.type, b.blob
        FROM {schema}.pgc_blobs b
        WHERE b.thread_id = p.thread_id AND b.checkpoint_ns = p.checkpoint_ns
          AND b.channel = p.channel AND b.version = p.base_version
          -- a base is older than its delta: an edited base_version cannot loop
          AND coalesce(b.version < p.version, true)
        LIMIT 1
    ) b
)

-- fragment: chain_arrays
-- The pieces of `chain` (delta_chain) as parallel arrays, grouped by channel:
-- each channel's full value first, then the deltas on it, sorted once for all
-- the arrays (as in ordered_writes). A statement may add `AND ...` to the
-- WHERE clause.
SELECT array_agg(channel) AS blob_channels,
       array_agg(version) AS blob_versions,
       array_agg(base_version) AS blob_bases,
       array_agg(type) AS blob_types,
       array_agg(blob) AS blob_values
FROM (SELECT * FROM chain ORDER BY channel, depth DESC) chain
WHERE depth >= 0

-- fragment: level_walk
-- Common table expressions `level` and `reached`: the bases of the stored values
-- that the statement's CTE `level_head` (thread_id, checkpoint_ns, channel,
-- version) names, walked a level at a time without reading any value's bytes.
-- `level` holds a depth and the keys of one level in parallel arrays; the next
-- level is the bases of those stored as deltas. `reached` is every key the walk
-- reached (the heads and their bases), once. One row per level keeps the
-- planner's estimate small (it guesses ten rounds of ten times the rows of a
-- recursion, and past jit_above_cost it JIT-compiles the plan: 50 ms to 1 s per
-- call).
level(depth, thread_ids, checkpoint_nss, channels, versions) AS (
    SELECT 0, array_agg(thread_id), array_agg(checkpoint_ns), array_agg(channel),
           array_agg(version)
    FROM level_head
    UNION ALL
    SELECT l.depth + 1, x.thread_ids, x.checkpoint_nss, x.channels, x.versions
    FROM level l
    CROSS JOIN LATERAL (
        SELECT array_agg(k.thread_id) AS thread_ids, array_agg(k.checkpoint_ns) AS checkpoint_nss,
               array_agg(k.channel) AS channels, array_agg(b.base_version) AS versions
        FROM unnest(l.thread_ids, l.checkpoint_nss, l.channels, l.versions)
             AS k(thread_id, checkpoint_ns, channel, version)
        CROSS JOIN LATERAL (
            SELECT b.base_version FROM {schema}.pgc_blobs b
            WHERE b.thread_id = k.thread_id AND b.checkpoint_ns = k.checkpoint_ns
              AND b.channel = k.channel AND b.version = k.version
            LIMIT 1
        ) b
        -- a base this level walks already (it holds both a value and its base)
        -- is not walked twice: the chains of one channel overlap; and a base is
        -- older than its delta, so an edited base_version cannot loop
        WHERE b.base_version IS NOT NULL AND b.base_version < k.version
          AND NOT EXISTS (
              SELECT FROM unnest(l.thread_ids, l.checkpoint_nss, l.channels, l.versions)
                   AS s(thread_id, checkpoint_ns, channel, version)
              WHERE s.thread_id = k.thread_id AND s.checkpoint_ns = k.checkpoint_ns
                AND s.channel = k.channel AND s.version = b.base_version
          )
    ) x
    WHERE x.channels IS NOT NULL AND l.depth < %(max_depth)s
), reached AS (
    SELECT DISTINCT k.thread_id, k.checkpoint_ns, k.channel, k.version
    FROM level l
    CROSS JOIN LATERAL unnest(l.thread_ids, l.checkpoint_nss, l.channels, l.versions)
         AS k(thread_id, checkpoint_ns, channel, version)
)

-- fragment: stored_value_probe
-- `stored.hit` is true when checkpoint `p` has a value of channel `ch` in
-- pgc_blobs. A LATERAL probe, not EXISTS: the planner turns an EXISTS here into
-- a hashed scan of the thread's every blob, once per ancestor.
LEFT JOIN LATERAL (
    SELECT true AS hit FROM {schema}.pgc_blobs b
    WHERE b.thread_id = p.thread_id AND b.checkpoint_ns = p.checkpoint_ns
      AND b.channel = ch AND b.version = p.channel_versions ->> ch
      AND b.type <> 'empty'
    LIMIT 1
) stored ON true

-- fragment: checkpoint_bytes
-- An expression: the stored size of the values of the checkpoints row `c`.
(pg_column_size(c.checkpoint) + pg_column_size(c.metadata_blob)
 + pg_column_size(c.metadata) + pg_column_size(c.channel_versions))

-- fragment: blobs_to_drop
-- Common table expressions shared by delete_checkpoints and its dry run: given
-- `doomed` (the checkpoints that go) and `freed` (the values they read), `dropped`
-- is the values that no other checkpoint of their namespaces reads, directly or
-- as the base of a delta.
level_head AS (
    -- the values the other checkpoints of those namespaces read
    SELECT c.thread_id, c.checkpoint_ns, v.channel, v.version
    FROM (SELECT DISTINCT thread_id, checkpoint_ns FROM doomed) n
    JOIN {schema}.pgc_checkpoints c
      ON c.thread_id = n.thread_id AND c.checkpoint_ns = n.checkpoint_ns
     AND c.thread_id = ANY(%(thread_ids)s::text[])
    CROSS JOIN LATERAL jsonb_each_text(c.channel_versions) AS v(channel, version)
    WHERE NOT EXISTS (
        SELECT 1 FROM doomed d
        WHERE d.thread_id = c.thread_id AND d.checkpoint_ns = c.checkpoint_ns
          AND d.checkpoint_id = c.checkpoint_id
    )
), {level_walk}, dropped AS (
    SELECT f.thread_id, f.checkpoint_ns, f.channel, f.version
    FROM freed f
    WHERE NOT EXISTS (
        SELECT 1 FROM reached k
        WHERE k.thread_id = f.thread_id AND k.checkpoint_ns = f.checkpoint_ns
          AND k.channel = f.channel AND k.version = f.version
    )
)

-- fragment: hanging_namespaces
-- Common table expressions ending in `hanging(thread_id, checkpoint_ns)`: the
-- subgraph namespaces that hang off no checkpoint left once the doomed ones
-- are deleted; they go with them, so that a prune leaves nothing no read
-- reaches. The statement's CTEs name what this reads: `heads(thread_id,
-- checkpoint_ns, last_id)` the newest checkpoint of each subgraph namespace in
-- question, and `parent_rows(thread_id, checkpoint_ns, checkpoint_id, doomed)`
-- every checkpoint of their parent namespaces, with whether it goes.
-- A subgraph call's namespace (`node:task|node:task`) ran from a checkpoint of
-- its parent namespace (the part before the last `|`): the one its newest
-- checkpoint names in metadata `parents`. When that name is missing or unknown
-- (metadata kept encrypted), its checkpoint ids decide: ids grow with time and
-- a subgraph's checkpoints are younger than the one it ran from, so a namespace
-- older than every checkpoint its parent namespace keeps ran from none of them.
-- A namespace below one that hangs hangs too. The namespace of a
-- `checkpointer=True` subgraph has no task id (no `:`): its history outlives
-- each call and the next call goes on from its latest checkpoint, so it never
-- hangs.
-- No step joins two sets of rows: taking a thread its statistics do not know
-- yet for a few rows, the planner looped over one set for each row of the
-- other (7 s for 12,000 namespaces). Rows are looked up by key (a subquery per
-- row), and sets matched by sorting them together (window functions).
links AS (
    -- each subgraph call's namespace with its newest checkpoint, and the
    -- checkpoint of its parent namespace that one names
    SELECT n.thread_id, n.checkpoint_ns, n.parent_ns, n.last_id, h.parent_id
    FROM (
        SELECT thread_id, checkpoint_ns, last_id,
               CASE WHEN strpos(checkpoint_ns, '|') = 0 THEN ''
                    ELSE left(checkpoint_ns,
                              length(checkpoint_ns) - strpos(reverse(checkpoint_ns), '|'))
               END AS parent_ns
        FROM heads
        WHERE strpos(checkpoint_ns, ':') > 0
    ) n
    LEFT JOIN LATERAL (
        SELECT h.metadata -> 'parents' ->> n.parent_ns AS parent_id
        FROM {schema}.pgc_checkpoints h
        WHERE h.thread_id = n.thread_id AND h.checkpoint_ns = n.checkpoint_ns
          AND h.checkpoint_id = n.last_id
        LIMIT 1
    ) h ON true
), judged AS (
    -- each link with whether the checkpoint it names is saved and goes, and the
    -- oldest checkpoint its parent namespace keeps: one sort of the links and
    -- parent_rows by key serves the three windows
    SELECT j.kind, j.thread_id, j.child_ns, j.child_last,
           bool_or(j.kind = 's') OVER k AS found,
           bool_or(j.kind = 's' AND j.doomed) OVER k AS doomed,
           min(j.checkpoint_id COLLATE "C") FILTER (WHERE j.kind = 's' AND NOT j.doomed)
               OVER (PARTITION BY j.thread_id, j.checkpoint_ns) AS first_kept
    FROM (
        SELECT 's' AS kind, thread_id, checkpoint_ns, checkpoint_id, doomed,
               NULL::text AS child_ns, NULL::text AS child_last
        FROM parent_rows
        UNION ALL
        SELECT 'l', thread_id, parent_ns, parent_id, NULL, checkpoint_ns, last_id
        FROM links
    ) j
    WINDOW k AS (PARTITION BY j.thread_id, j.checkpoint_ns, j.checkpoint_id)
), cut AS (
    -- the namespaces that ran from no checkpoint left
    SELECT thread_id, child_ns AS checkpoint_ns
    FROM judged
    WHERE kind = 'l' AND CASE
        WHEN doomed THEN true
        WHEN found THEN false
        ELSE first_kept IS NULL OR child_last COLLATE "C" < first_kept
    END
), hanging(thread_id, checkpoint_ns) AS (
    -- those, and the namespaces below one of them: each namespace is sorted
    -- with the cut ones by each of its ancestors (its name up to each `|`)
    SELECT DISTINCT a.thread_id, a.checkpoint_ns
    FROM (
        SELECT a.thread_id, a.checkpoint_ns,
               bool_or(a.cut) OVER (PARTITION BY a.thread_id, a.ancestor) AS below_cut
        FROM (
            SELECT thread_id, checkpoint_ns, checkpoint_ns AS ancestor, true AS cut
            FROM cut
            UNION ALL
            SELECT l.thread_id, l.checkpoint_ns, p.ancestor, false
            FROM links l
            CROSS JOIN LATERAL unnest(ARRAY(
                SELECT array_to_string((string_to_array(l.checkpoint_ns, '|'))[1:i], '|')
                FROM generate_series(1, length(l.checkpoint_ns)
                                        - length(replace(l.checkpoint_ns, '|', ''))) AS i
            )) AS p(ancestor)
        ) a
    ) a
    WHERE a.below_cut
)
