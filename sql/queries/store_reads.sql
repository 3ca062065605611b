-- The store's reads (pgcheckpoint.store): gets, searches and namespace listings.
--
-- Items `s` of pgc_store: `ns` is the namespace's labels joined by '.', in the
-- "C" collation (byte order, as Python compares strings); a namespace prefix P
-- is the primary-key range ns >= P AND ns < P || '/', in which only P itself
-- and P || '.' ... belong to it ('/' follows '.'). A search or a listing is one
-- row `q` of a JSON array of specs (pgcheckpoint.store.plans), so a batch's
-- searches are one statement, as are its listings and its gets. A read that
-- refreshes TTLs extends only items that have a TTL and have not expired, and
-- skips a row another transaction holds (its writer sets the TTL anyway): a
-- read never waits for a row lock, so it never takes part in a deadlock.

-- fragment: store_doc
-- The `doc` column of a found item `f`, for a store that seals (it checks a
-- sealed value's readable fields against it); NULL for one that does not,
-- which reads the value alone: neither sent nor parsed.
CASE WHEN %(sealed)s::bool THEN f.doc END AS doc

-- fragment: store_range
-- The items `s` in the namespace range of spec `q` (a prefix of one label or
-- more): a range of the primary key.
SELECT s.* FROM {schema}.pgc_store s
WHERE s.ns >= q.prefix COLLATE "C" AND s.ns < q.hi COLLATE "C"
  AND (s.ns = q.prefix COLLATE "C" OR s.ns >= q.lo COLLATE "C")

-- fragment: store_scope
-- The items `s` in the range of spec `q`, or all of them when it has no prefix:
-- the planner keeps both arms and `q` switches one off. Only for statements
-- that may read the whole table anyway (counts): a search chooses
-- `store_search` or `store_search_all`, as the cost of the table scan arm,
-- counted for every spec, made the planner compile a page of ten (JIT, 25 ms).
SELECT s.* FROM ({store_range}) s WHERE q.prefix IS NOT NULL
UNION ALL
SELECT s.* FROM {schema}.pgc_store s WHERE q.prefix IS NULL

-- fragment: store_specs
-- The specs of a batch's searches (pgcheckpoint.store.plans.search_spec), as rows
-- `q`; LIMIT tells the planner how many (a set function is taken for 100 rows).
-- Its custom plans (one spec) always cost less than the generic one (a tenth
-- of the 100), so such a statement is planned anew at every call.
(SELECT * FROM jsonb_to_recordset(%(specs)s::jsonb) AS q(
    i int, prefix text, lo text, hi text, contains jsonb, conds jsonb,
    lim int, off int, refresh bool, omit bool)
 LIMIT %(count)s) q

-- fragment: store_spec
-- The spec of a statement that runs one search, as row `q` of `store_specs`,
-- each of its fields a parameter: the generic plan reads the same index range
-- as the custom ones, so from the sixth call on a connection the statement is
-- no longer planned (0.2 ms a search, 0.5 ms a search with a query). OFFSET 0
-- keeps the planner from reading the parameters into the range, which custom
-- plans then estimate from the namespace column's histogram: in a large store,
-- a few rows, against the generic plan's default share of the table, so that
-- Postgres kept planning anew at every call (0.3-0.8 ms at 100k items).
(SELECT %(i)s::int AS i, %(prefix)s::text AS prefix, %(lo)s::text AS lo,
        %(hi)s::text AS hi, %(contains)s::jsonb AS contains, %(conds)s::jsonb AS conds,
        %(lim)s::int AS lim, %(off)s::int AS off, %(refresh)s::bool AS refresh,
        %(omit)s::bool AS omit OFFSET 0) q

-- fragment: store_live_spec
-- Item `s` has not expired, or spec `q` lists expired items too (`omit` off).
(NOT q.omit OR s.expires_at IS NULL OR s.expires_at > now())

-- fragment: store_filter_plain
-- The filter of spec `q` on item `s` that has no `conds`: `contains` (scalar
-- equalities, one JSONB containment), and the expiry.
(q.contains IS NULL OR s.doc @> q.contains)
AND {store_live_spec}

-- fragment: store_filter
-- The filter of spec `q` on item `s`: `store_filter_plain`, then each condition
-- `c` of `conds` on the value at path `c.p` of the item's `doc`
-- (pgcheckpoint.store.filters): equality with a missing field read as null (a
-- null `v` too: jsonb_to_recordset makes it NULL), the type and length of a
-- container, and comparisons of two numbers, two strings (code-point order)
-- or two booleans; values of different types never compare.
{store_filter_plain}
AND (q.conds IS NULL OR NOT EXISTS (
    SELECT FROM jsonb_to_recordset(q.conds) AS c(p text[], o text, v jsonb)
    WHERE NOT coalesce(CASE c.o
        WHEN 'eq' THEN coalesce(s.doc #> c.p, 'null') = coalesce(c.v, 'null')
        WHEN 'ne' THEN coalesce(s.doc #> c.p, 'null') <> coalesce(c.v, 'null')
        WHEN 'object' THEN jsonb_typeof(s.doc #> c.p) = 'object'
        WHEN 'array' THEN jsonb_typeof(s.doc #> c.p) = 'array'
                          AND jsonb_array_length(s.doc #> c.p) = c.v::int
        ELSE jsonb_typeof(s.doc #> c.p) = jsonb_typeof(c.v) AND (CASE jsonb_typeof(c.v)
            WHEN 'number' THEN sign((s.doc #> c.p)::numeric - c.v::numeric)::int
            WHEN 'string' THEN CASE
                WHEN (s.doc #>> c.p) COLLATE "C" < (c.v #>> '{}') THEN -1
                WHEN (s.doc #>> c.p) = (c.v #>> '{}') THEN 0
                ELSE 1 END
            WHEN 'boolean' THEN (s.doc #> c.p)::boolean::int - c.v::boolean::int
        END) = ANY (CASE c.o
            WHEN 'gt' THEN ARRAY[1] WHEN 'gte' THEN ARRAY[0, 1]
            WHEN 'lt' THEN ARRAY[-1] WHEN 'lte' THEN ARRAY[-1, 0] END)
    END, false)
))

-- fragment: store_refresh
-- Extends the TTL of the items `found` (ns, key, refresh) read: those that
-- have one and have not expired, skipping rows other transactions hold. Each
-- is looked up by its key (LATERAL), then updated by its row id: a join the
-- planner could choose would read the whole table for a page of ten. The
-- expiry test is an `IS TRUE`, which no index serves, so the key's index finds
-- the row: as a plain comparison, the partial index on expires_at looked as
-- cheap to a planner whose statistics predate the store's TTL items, and it
-- read every such item for each one found (290 ms a search, 30 ms a get, at
-- 100k items).
refreshed AS (
    UPDATE {schema}.pgc_store s
    SET expires_at = now() + s.ttl_minutes * interval '1 minute'
    FROM (
        SELECT x.row_id FROM found f
        CROSS JOIN LATERAL (
            SELECT x.ctid AS row_id FROM {schema}.pgc_store x
            WHERE x.ns = f.ns AND x.key = f.key
              AND x.ttl_minutes IS NOT NULL AND (x.expires_at > now()) IS TRUE
            FOR UPDATE SKIP LOCKED
        ) x
        WHERE f.refresh
    ) l
    WHERE s.ctid = l.row_id
    RETURNING s.ns
)

-- fragment: store_live
-- Item `s` is not expired, or the read returns expired items too.
NOT %(omit_expired)s OR s.expires_at IS NULL OR s.expires_at > now()

-- fragment: store_found
-- The end of a get: the TTL refreshes of the items `found`, which it returns.
{store_refresh}
SELECT f.ns, f.key, f.type, f.value, {store_doc}, f.created_at, f.updated_at FROM found f

-- name: store_get
-- retry: safe
-- Every get of a batch: the items found, in no order (the op matches them to
-- its gets), without those expired when `omit_expired`.
WITH wanted AS (
    SELECT w.ns COLLATE "C" AS ns, w.key COLLATE "C" AS key, bool_or(w.refresh) AS refresh
    FROM unnest(%(nss)s::text[], %(keys)s::text[], %(refresh)s::bool[]) AS w(ns, key, refresh)
    GROUP BY 1, 2
),
found AS (
    SELECT s.ns, s.key, s.type, s.value, s.doc, s.created_at, s.updated_at, w.refresh
    FROM wanted w JOIN {schema}.pgc_store s ON s.ns = w.ns AND s.key = w.key
    WHERE {store_live}
),
{store_found}

-- name: store_get_one
-- retry: safe
-- The one get of a batch (the usual call), its key as parameters: unlike
-- `store_get`, whose custom plans (they know the arrays' length) always cost
-- less than its generic one, Postgres keeps its generic plan from the sixth
-- call on a connection (0.13 ms of planning a get).
WITH found AS (
    SELECT s.ns, s.key, s.type, s.value, s.doc, s.created_at, s.updated_at,
           %(refresh)s::bool AS refresh
    FROM {schema}.pgc_store s
    WHERE s.ns = %(ns)s AND s.key = %(key)s AND ({store_live})
),
{store_found}

-- fragment: store_search_open
-- A search statement is `store_search_open`, its specs (`store_specs`, or
-- `store_spec` for one search), `store_search_lateral`, the rows in scope, then
-- `store_search_close`: each spec's page, newest first, then by namespace and
-- key, so that pages never overlap (a total order).
WITH found AS (
    SELECT q.i, q.refresh, f.*
    FROM

-- fragment: store_search_lateral
    CROSS JOIN LATERAL (
        SELECT s.ns, s.key, s.type, s.value, s.doc, s.created_at, s.updated_at
        FROM (

-- fragment: store_search_close
-- (after the filter, which a statement states: `) s WHERE {store_filter}`)
        ORDER BY s.updated_at DESC, s.ns, s.key
        LIMIT q.lim OFFSET q.off
    ) f
),
{store_refresh}
SELECT f.i, f.ns, f.key, f.type, f.value, {store_doc}, f.created_at, f.updated_at
FROM found f
ORDER BY f.i, f.updated_at DESC, f.ns, f.key

-- name: store_search
-- retry: safe
-- Every search without a query of a batch, under a namespace prefix.
{store_search_open} {store_specs} {store_search_lateral} {store_range}
) s WHERE {store_filter} {store_search_close}

-- name: store_search_all
-- retry: safe
-- Every search without a query of a batch over the whole store (prefix ()).
{store_search_open} {store_specs} {store_search_lateral}
SELECT s.* FROM {schema}.pgc_store s ) s WHERE {store_filter} {store_search_close}

-- name: store_search_one
-- retry: safe
-- The one search of a batch, without a query or conditions past equalities,
-- under a namespace prefix. Its generic plan costs what its custom ones do only
-- without the `conds` subplan (a custom plan drops it when `conds` is NULL).
{store_search_open} {store_spec} {store_search_lateral} {store_range}
) s WHERE {store_filter_plain} {store_search_close}

-- name: store_search_all_one
-- retry: safe
-- `store_search_one` over the whole store.
{store_search_open} {store_spec} {store_search_lateral}
SELECT s.* FROM {schema}.pgc_store s ) s WHERE {store_filter_plain} {store_search_close}

-- fragment: store_vector_open
-- A search with a query is `store_vector_open`, the rows in scope, then
-- `store_vector_close`: the items ranked by their closest vector to the query's
-- (exact: filters and offsets hold whatever the index), then those without a
-- vector; ties by namespace and key. Vectors are compared as `vector` (a
-- `halfvec` column casts), by the store's `distance`. The query's vector is
-- read from its text once (`qv`): as a parameter cast where the distances are,
-- a generic plan parsed it again for every vector compared (0.55 ms of 2.2 for
-- a namespace of 500 items).
WITH found AS (
    SELECT q.refresh, f.*
    FROM {store_spec}
    CROSS JOIN (SELECT %(query)s::text::vector AS embedding OFFSET 0) qv
    CROSS JOIN LATERAL (
        SELECT s.ns, s.key, s.type, s.value, s.doc, s.created_at, s.updated_at, b.dist
        FROM (

-- fragment: store_vector_close
        ) s
        LEFT JOIN LATERAL (
            SELECT min(CASE %(distance)s::text
                WHEN 'l2' THEN v.embedding::vector <-> qv.embedding
                WHEN 'inner_product' THEN v.embedding::vector <#> qv.embedding
                ELSE v.embedding::vector <=> qv.embedding END) AS dist
            FROM {schema}.pgc_store_vectors v
            WHERE v.ns = s.ns AND v.key = s.key
        ) b ON true
        WHERE {store_filter}
        ORDER BY b.dist NULLS LAST, s.ns, s.key
        LIMIT q.lim OFFSET q.off
    ) f
),
{store_refresh}
SELECT f.ns, f.key, f.type, f.value, {store_doc}, f.created_at, f.updated_at,
       CASE %(distance)s::text WHEN 'cosine' THEN 1 - f.dist ELSE -f.dist END AS score
FROM found f
ORDER BY f.dist NULLS LAST, f.ns, f.key

-- name: store_search_vector
-- retry: safe
-- One search with a query, under a namespace prefix.
{store_vector_open} {store_range} {store_vector_close}

-- name: store_search_vector_all
-- retry: safe
-- One search with a query over the whole store.
{store_vector_open} SELECT s.* FROM {schema}.pgc_store s {store_vector_close}

-- fragment: store_walk_next
-- The walk's next namespace `f.ns` and the lowest one it may visit after it
-- (`past`): the namespace itself, or, when spec `q` can `jump` and `f.ns` has
-- more labels than that, the first one above every namespace cut to the same
-- labels (labels hold no '.', and '/' sorts right after it).
SELECT f.ns, CASE
    WHEN q.jump IS NOT NULL AND cardinality(string_to_array(f.ns, '.')) > q.jump
    THEN array_to_string((string_to_array(f.ns, '.'))[1:q.jump], '.') || '/'
    ELSE f.ns END

-- fragment: store_namespaces
-- The namespaces `w.ns` in the range of spec `q` (all of them when it has no
-- prefix), of items that have not expired when `q.omit`, each at least once.
-- First a walk down the primary key, one probe per namespace for the next one
-- above it: at 100k items in 200 namespaces, 200 probes against 100k rows (2
-- against 350 ms). The walk goes from the prefix to `q.hi`; namespaces in
-- between that do not start with the prefix's labels (`lo`) are stepped over.
-- Each probe costs about what reading 2.5 items does, so past 1000 namespaces
-- the walk stops and every item in range is read instead, as a store of many
-- namespaces of an item or two lists faster that way.
WITH RECURSIVE walk(ns, past) AS (
    {store_walk_next} FROM (
        SELECT s.ns FROM {schema}.pgc_store s
        WHERE s.ns >= coalesce(q.prefix, '') COLLATE "C" AND {store_live_spec}
        ORDER BY s.ns LIMIT 1
    ) f
    UNION ALL
    {store_walk_next} FROM walk w CROSS JOIN LATERAL (
        SELECT s.ns FROM {schema}.pgc_store s
        WHERE s.ns > w.ns COLLATE "C" AND s.ns >= w.past COLLATE "C" AND {store_live_spec}
        ORDER BY s.ns LIMIT 1
    ) f
    WHERE q.prefix IS NULL OR f.ns < q.hi COLLATE "C"
), walked AS MATERIALIZED (
    SELECT w.ns FROM walk w WHERE q.prefix IS NULL OR w.ns < q.hi COLLATE "C" LIMIT 1001
)
SELECT w.ns FROM walked w
WHERE (SELECT count(*) FROM walked) <= 1000
  AND (q.prefix IS NULL OR w.ns = q.prefix COLLATE "C" OR w.ns >= q.lo COLLATE "C")
UNION ALL
SELECT s.ns FROM ({store_scope}) s
WHERE (SELECT count(*) FROM walked) > 1000 AND {store_live_spec}

-- name: store_list_namespaces
-- retry: safe
-- Every namespace listing of a batch: each spec's distinct namespaces (cut to
-- `depth` labels), in label order. `pre` and `suf` are the labels a namespace
-- must start or end with (NULL: any one label); `prefix` is the range of the
-- literal labels `pre` starts with.
SELECT q.i, n.labels
FROM (SELECT * FROM jsonb_to_recordset(%(specs)s::jsonb) AS q(
    i int, prefix text, lo text, hi text, pre text[], suf text[], depth int,
    jump int, lim int, off int, omit bool) LIMIT %(count)s) q
CROSS JOIN LATERAL (
    SELECT DISTINCT (CASE WHEN q.depth IS NULL THEN a.parts ELSE a.parts[1:q.depth] END)
           COLLATE "C" AS labels
    FROM (SELECT string_to_array(w.ns, '.') AS parts FROM ({store_namespaces}) w) a
    WHERE (q.pre IS NULL OR cardinality(a.parts) >= cardinality(q.pre) AND NOT EXISTS (
            SELECT FROM unnest(q.pre) WITH ORDINALITY AS p(label, n)
            WHERE p.label IS NOT NULL AND p.label <> a.parts[p.n]))
      AND (q.suf IS NULL OR cardinality(a.parts) >= cardinality(q.suf) AND NOT EXISTS (
            SELECT FROM unnest(q.suf) WITH ORDINALITY AS p(label, n)
            WHERE p.label IS NOT NULL
              AND p.label <> a.parts[cardinality(a.parts) - cardinality(q.suf) + p.n]))
    ORDER BY 1
    LIMIT q.lim OFFSET q.off
) n
ORDER BY q.i, n.labels

-- name: store_count
-- retry: safe
-- How many items a namespace prefix holds (`pgcheckpoint store count`), and how
-- many of them have expired but are not swept yet.
SELECT count(*) AS items,
       count(*) FILTER (WHERE s.expires_at <= now()) AS expired
FROM (SELECT %(prefix)s::text AS prefix, %(lo)s::text AS lo, %(hi)s::text AS hi) q
CROSS JOIN LATERAL ({store_scope}) s
