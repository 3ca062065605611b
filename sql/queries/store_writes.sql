-- The store's writes (pgcheckpoint.store): puts, deletes, the TTL sweep, vectors.
--
-- Every statement that locks items locks them in (ns, key) order, in one pass
-- (INSERT ... SELECT ... ORDER BY locks each row as it inserts or updates
-- it), and touches an item's vectors only under the item's lock: two batches
-- over the same keys wait for each other, never in a circle. A batch that
-- puts and deletes runs `store_put` with the deletes as tombstones (type
-- 'deleted', visible to no one else), then `store_drop_tombstones`, in one
-- transaction, so that its locks are taken in that one pass too.

-- fragment: store_replace
-- An item put again replaces the stored one; `created_at` stays.
ON CONFLICT (ns, key) DO UPDATE
SET type = excluded.type, value = excluded.value, doc = excluded.doc, updated_at = now(),
    expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes

-- fragment: store_upsert
-- Inserts or replaces (`store_replace`) the items of the parallel arrays.
INSERT INTO {schema}.pgc_store AS s (ns, key, type, value, doc, expires_at, ttl_minutes)
SELECT i.ns, i.key, i.type, i.value, i.doc::jsonb,
       now() + i.ttl * interval '1 minute', i.ttl
FROM unnest(%(nss)s::text[], %(keys)s::text[], %(types)s::text[], %(values)b::bytea[],
            %(docs)s::text[], %(ttls)s::float8[]) AS i(ns, key, type, value, doc, ttl)
ORDER BY i.ns COLLATE "C", i.key COLLATE "C"
{store_replace}

-- fragment: store_upsert_one
-- `store_upsert` of one item, its columns as parameters: a put alone in its
-- batch (the usual call) skips unnesting six arrays and sorting one row.
INSERT INTO {schema}.pgc_store AS s (ns, key, type, value, doc, expires_at, ttl_minutes)
VALUES (%(ns)s, %(key)s, %(type)s, %(value)b, %(doc)s::jsonb,
        now() + %(ttl)s::float8 * interval '1 minute', %(ttl)s::float8)
{store_replace}

-- name: store_put
-- Puts items (and, as tombstones, the deletes of a mixed batch).
{store_upsert}

-- name: store_put_one
-- Puts one item.
{store_upsert_one}

-- fragment: store_vectors_of_up
-- The start of the DELETE of the vectors of the items `up` just put; the
-- statement adds which of them go.
DELETE FROM {schema}.pgc_store_vectors v
    USING up
    WHERE v.ns = up.ns AND v.key = up.key

-- name: store_put_vectors
-- Puts items with their vectors: every item put loses the vectors it had that
-- are not among the new ones (a put with index=False loses them all), and the
-- new ones are written, after the item's row is locked (they join `up`).
WITH up AS (
    {store_upsert}
    RETURNING s.ns, s.key
),
gone AS (
    {store_vectors_of_up}
      AND NOT EXISTS (
        SELECT FROM unnest(%(v_nss)s::text[], %(v_keys)s::text[], %(v_fields)s::text[])
            AS n(ns, key, field)
        WHERE n.ns COLLATE "C" = v.ns AND n.key COLLATE "C" = v.key AND n.field = v.field)
)
INSERT INTO {schema}.pgc_store_vectors AS v (ns, key, field, embedding)
SELECT n.ns, n.key, n.field, n.embedding::vector  -- a halfvec column casts
FROM unnest(%(v_nss)s::text[], %(v_keys)s::text[], %(v_fields)s::text[],
            %(v_embeddings)s::text[]) AS n(ns, key, field, embedding)
JOIN up ON up.ns = n.ns COLLATE "C" AND up.key = n.key COLLATE "C"
ORDER BY n.ns COLLATE "C", n.key COLLATE "C", n.field
ON CONFLICT (ns, key, field) DO UPDATE SET embedding = excluded.embedding

-- name: store_put_vectors_one
-- `store_put_vectors` of one item: its vectors are the fields given, in
-- parallel arrays (none for a put with index=False); it loses the others.
-- 0.3-0.4 ms less than the statement of arrays at 100k items.
WITH up AS (
    {store_upsert_one}
    RETURNING s.ns, s.key
),
gone AS (
    {store_vectors_of_up} AND v.field <> ALL (%(v_fields)s::text[])
)
INSERT INTO {schema}.pgc_store_vectors AS v (ns, key, field, embedding)
SELECT up.ns, up.key, n.field, n.embedding::vector  -- a halfvec column casts
FROM up
CROSS JOIN unnest(%(v_fields)s::text[], %(v_embeddings)s::text[]) AS n(field, embedding)
ORDER BY n.field
ON CONFLICT (ns, key, field) DO UPDATE SET embedding = excluded.embedding

-- name: store_drop_tombstones
-- Deletes the tombstones `store_put` just wrote for a mixed batch's deletes
-- (rows this transaction locked already).
DELETE FROM {schema}.pgc_store s
USING unnest(%(nss)s::text[], %(keys)s::text[]) AS k(ns, key)
WHERE s.ns = k.ns COLLATE "C" AND s.key = k.key COLLATE "C" AND s.type = 'deleted'

-- name: store_delete
-- Deletes items (their vectors go with them), locking them in key order first.
DELETE FROM {schema}.pgc_store s
USING (
    SELECT x.ns, x.key FROM {schema}.pgc_store x
    JOIN unnest(%(nss)s::text[], %(keys)s::text[]) AS k(ns, key)
      ON x.ns = k.ns COLLATE "C" AND x.key = k.key COLLATE "C"
    ORDER BY x.ns, x.key
    FOR UPDATE OF x
) l
WHERE s.ns = l.ns AND s.key = l.key

-- name: store_sweep
-- Deletes up to `limit` expired items, skipping rows other transactions hold
-- (a put is renewing them, or another sweep has them).
DELETE FROM {schema}.pgc_store s
USING (
    SELECT x.ns, x.key FROM {schema}.pgc_store x
    WHERE x.expires_at <= now()
    ORDER BY x.ns, x.key
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) l
WHERE s.ns = l.ns AND s.key = l.key

-- name: store_vector_column
-- retry: safe
-- What `setup()` of a store with an index finds: the type of the vector column,
-- if the table exists ('vector(3)', 'halfvec(3)'), whether its ANN index (named
-- with its schema; NULL for none) exists, and whether the extension is there or
-- can be created.
SELECT (SELECT format_type(a.atttypid, a.atttypmod)
        FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = to_regclass(%(table)s) AND a.attname = 'embedding'
          AND NOT a.attisdropped) AS column_type,
       to_regclass(%(index)s::text) IS NOT NULL AS indexed,
       EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'vector') AS installed,
       EXISTS (SELECT FROM pg_catalog.pg_available_extensions WHERE name = 'vector')
           AS available

-- name: store_official_tables
-- retry: safe
-- Which of the official store's tables exist (named with their schema), and
-- whether this store has its vector table; the dimensions of the vectors of
-- both (a pgvector column's typmod).
SELECT to_regclass(%(store)s) IS NOT NULL AS store,
       to_regclass(%(vectors)s) IS NOT NULL AS vectors,
       to_regclass(%(ours)s) IS NOT NULL AS our_vectors,
       (SELECT a.atttypmod FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = to_regclass(%(vectors)s) AND a.attname = 'embedding'
          AND NOT a.attisdropped) AS their_dims,
       (SELECT a.atttypmod FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = to_regclass(%(ours)s) AND a.attname = 'embedding'
          AND NOT a.attisdropped) AS our_dims

-- name: store_official_page
-- retry: safe
-- A page of the official store's items (table `store`), after (prefix, key).
SELECT o.prefix, o.key, o.value::text AS value, o.created_at, o.updated_at, o.expires_at,
       o.ttl_minutes::float8 AS ttl_minutes
FROM {schema}.store o
WHERE (o.prefix, o.key) > (%(after_prefix)s::text, %(after_key)s::text)
ORDER BY o.prefix, o.key
LIMIT %(limit)s

-- name: store_official_vectors
-- retry: safe
-- The official store's vectors (table `store_vectors`) of a page of items.
SELECT o.prefix, o.key, o.field_name, o.embedding::text AS embedding
FROM {schema}.store_vectors o
JOIN unnest(%(nss)s::text[], %(keys)s::text[]) AS k(ns, key) ON o.prefix = k.ns AND o.key = k.key

-- name: store_import
-- Copies items from the official store with their timestamps and TTLs; an item
-- already in pgc_store (written by pgcheckpoint, so newer) stays.
INSERT INTO {schema}.pgc_store AS s
    (ns, key, type, value, doc, created_at, updated_at, expires_at, ttl_minutes)
SELECT i.ns, i.key, i.type, i.value, i.doc::jsonb, coalesce(i.created_at, now()),
       coalesce(i.updated_at, now()), i.expires_at, i.ttl
FROM unnest(%(nss)s::text[], %(keys)s::text[], %(types)s::text[], %(values)b::bytea[],
            %(docs)s::text[], %(created)s::timestamptz[], %(updated)s::timestamptz[],
            %(expires)s::timestamptz[], %(ttls)s::float8[])
    AS i(ns, key, type, value, doc, created_at, updated_at, expires_at, ttl)
ORDER BY i.ns COLLATE "C", i.key COLLATE "C"
ON CONFLICT (ns, key) DO NOTHING
RETURNING s.ns, s.key

-- name: store_import_vectors
-- Copies the official store's vectors of the items `store_import` copied.
INSERT INTO {schema}.pgc_store_vectors (ns, key, field, embedding)
SELECT n.ns, n.key, n.field, n.embedding::vector  -- a halfvec column casts
FROM unnest(%(v_nss)s::text[], %(v_keys)s::text[], %(v_fields)s::text[],
            %(v_embeddings)s::text[]) AS n(ns, key, field, embedding)
ORDER BY n.ns COLLATE "C", n.key COLLATE "C", n.field
ON CONFLICT (ns, key, field) DO NOTHING
