-- Key rotation: count values per key, and re-encrypt them a page at a time: the
-- savers' tables, then the store's items.

-- fragment: rotation_columns_digest
-- An expression: a digest of the columns of checkpoint `c` that a rotation
-- seals into (or binds to) its values; the update applies only where it is
-- unchanged since the page was read.
md5(concat_ws(chr(1), coalesce(c.parent_checkpoint_id, chr(2)),
              coalesce(c.sealed_parent_id, chr(2)), c.channel_versions::text,
              c.inline_channels::text, c.metadata::text))

-- name: count_values_by_cipher
-- Key rotation: how many stored values of each kind have each type. The type's
-- label (which key encrypts it, if any) is read from it in Python
-- (`pgcheckpoint.codec.labels.cipher_label`), the one place that parses it.
SELECT 'checkpoints' AS kind, type, count(*) AS n
FROM {schema}.pgc_checkpoints GROUP BY type
UNION ALL
SELECT 'metadata', metadata_type, count(*)
FROM {schema}.pgc_checkpoints GROUP BY metadata_type
UNION ALL
SELECT 'blobs', type, count(*)
FROM {schema}.pgc_blobs WHERE type <> 'empty' GROUP BY type
UNION ALL
SELECT 'writes', type, count(*)
FROM {schema}.pgc_writes GROUP BY type
UNION ALL
SELECT 'items', type, count(*)
FROM {schema}.pgc_store GROUP BY type

-- name: rotation_checkpoints_page
-- Key rotation: the next checkpoints, in key order, with a value whose type does
-- not end with `suffix` (the active key's, in row format 2), with the columns
-- their sealed records bind and the channels holding a stored value at their
-- versions (`stored_channels`: what a record not yet in format 2 gains).
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
       c.sealed_parent_id, c.type, c.checkpoint, c.channel_versions, c.inline_channels,
       c.metadata_type, c.metadata_blob, c.metadata, {rotation_columns_digest} AS columns_digest,
       ARRAY(
           SELECT v.channel FROM jsonb_each_text(c.channel_versions) AS v(channel, version)
           WHERE NOT (v.channel = ANY(c.inline_channels))
             AND EXISTS (SELECT FROM {schema}.pgc_blobs b
                         WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
                           AND b.channel = v.channel AND b.version = v.version
                           AND b.type <> 'empty')
       ) AS stored_channels
FROM {schema}.pgc_checkpoints c
WHERE (%(after_thread_id)s::text IS NULL
       OR (c.thread_id, c.checkpoint_ns, c.checkpoint_id)
          > (%(after_thread_id)s::text, %(after_checkpoint_ns)s::text,
             %(after_checkpoint_id)s::text))
  AND (right(c.type, char_length(%(suffix)s)) <> %(suffix)s
       OR right(c.metadata_type, char_length(%(suffix)s)) <> %(suffix)s)
ORDER BY c.thread_id, c.checkpoint_ns, c.checkpoint_id
LIMIT %(limit)s

-- name: rotation_update_checkpoints
-- Key rotation: re-encrypted values go back row by row, only where the row still
-- holds what was read (same types, same sha256 of the values, same columns the
-- new seal binds), so a checkpoint the application saved again meanwhile is
-- never undone.
UPDATE {schema}.pgc_checkpoints c
SET type = u.type, checkpoint = u.checkpoint, metadata_type = u.metadata_type,
    metadata_blob = u.metadata_blob, metadata = coalesce(u.metadata::jsonb, c.metadata),
    sealed_parent_id = u.sealed_parent_id
FROM unnest(%(thread_id)s::text[], %(checkpoint_ns)s::text[], %(checkpoint_id)s::text[],
            %(old_type)s::text[], %(old_digest)s::bytea[], %(old_metadata_type)s::text[],
            %(old_metadata_digest)s::bytea[], %(old_columns_digest)s::text[],
            %(type)s::text[], %(checkpoint)s::bytea[], %(metadata_type)s::text[],
            %(metadata_blob)s::bytea[], %(metadata)s::text[], %(sealed_parent_id)s::text[])
     AS u(thread_id, checkpoint_ns, checkpoint_id, old_type, old_digest, old_metadata_type,
          old_metadata_digest, old_columns_digest, type, checkpoint, metadata_type,
          metadata_blob, metadata, sealed_parent_id)
WHERE c.thread_id = u.thread_id AND c.checkpoint_ns = u.checkpoint_ns
  AND c.checkpoint_id = u.checkpoint_id
  AND c.type = u.old_type AND sha256(c.checkpoint) = u.old_digest
  AND c.metadata_type = u.old_metadata_type AND sha256(c.metadata_blob) = u.old_metadata_digest
  AND {rotation_columns_digest} = u.old_columns_digest
RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id

-- name: rotation_blobs_page
SELECT thread_id, checkpoint_ns, channel, version, base_version, type, blob
FROM {schema}.pgc_blobs
WHERE (%(after_thread_id)s::text IS NULL
       OR (thread_id, checkpoint_ns, channel, version)
          > (%(after_thread_id)s::text, %(after_checkpoint_ns)s::text,
             %(after_channel)s::text, %(after_version)s::text))
  AND type <> 'empty' AND right(type, char_length(%(suffix)s)) <> %(suffix)s
ORDER BY thread_id, checkpoint_ns, channel, version
LIMIT %(limit)s

-- name: rotation_update_blobs
UPDATE {schema}.pgc_blobs b
SET type = u.type, blob = u.blob
FROM unnest(%(thread_id)s::text[], %(checkpoint_ns)s::text[], %(channel)s::text[],
            %(version)s::text[], %(old_type)s::text[], %(old_digest)s::bytea[],
            %(old_base)s::text[], %(type)s::text[], %(blob)s::bytea[])
     AS u(thread_id, checkpoint_ns, channel, version, old_type, old_digest, old_base, type,
          blob)
WHERE b.thread_id = u.thread_id AND b.checkpoint_ns = u.checkpoint_ns
  AND b.channel = u.channel AND b.version = u.version
  AND b.type = u.old_type AND sha256(b.blob) = u.old_digest
  AND b.base_version IS NOT DISTINCT FROM u.old_base
RETURNING b.thread_id, b.checkpoint_ns, b.channel, b.version

-- name: rotation_writes_page
SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, type, blob
FROM {schema}.pgc_writes
WHERE (%(after_thread_id)s::text IS NULL
       OR (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
          > (%(after_thread_id)s::text, %(after_checkpoint_ns)s::text,
             %(after_checkpoint_id)s::text, %(after_task_id)s::text, %(after_idx)s::int))
  AND right(type, char_length(%(suffix)s)) <> %(suffix)s
ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx
LIMIT %(limit)s

-- name: rotation_update_writes
UPDATE {schema}.pgc_writes w
SET type = u.type, blob = u.blob
FROM unnest(%(thread_id)s::text[], %(checkpoint_ns)s::text[], %(checkpoint_id)s::text[],
            %(task_id)s::text[], %(idx)s::int[], %(old_type)s::text[], %(old_digest)s::bytea[],
            %(old_channel)s::text[], %(old_task_path)s::text[], %(type)s::text[],
            %(blob)s::bytea[])
     AS u(thread_id, checkpoint_ns, checkpoint_id, task_id, idx, old_type, old_digest,
          old_channel, old_task_path, type, blob)
WHERE w.thread_id = u.thread_id AND w.checkpoint_ns = u.checkpoint_ns
  AND w.checkpoint_id = u.checkpoint_id AND w.task_id = u.task_id AND w.idx = u.idx
  AND w.type = u.old_type AND sha256(w.blob) = u.old_digest
  AND w.channel = u.old_channel AND w.task_path = u.old_task_path
RETURNING w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx

-- name: rotation_items_page
-- Key rotation: the next store items, in key order, whose value's type does not
-- end with `suffix` (the active key's).
SELECT ns, key, type, value, doc
FROM {schema}.pgc_store
WHERE (%(after_ns)s::text IS NULL OR (ns, key) > (%(after_ns)s::text, %(after_key)s::text))
  AND right(type, char_length(%(suffix)s)) <> %(suffix)s
ORDER BY ns, key
LIMIT %(limit)s

-- name: rotation_update_items
-- Key rotation: re-sealed items go back only where the item still holds what was
-- read (same type, same sha256 of the value, same readable fields), so an item
-- the application put again meanwhile is never undone; its TTL and timestamps
-- stay. The items are locked in key order first, as the store's own writes lock
-- them (sql/queries/store_writes.sql), so a rotation and a batch never wait for
-- each other in a circle.
UPDATE {schema}.pgc_store s
SET type = l.type, value = l.value, doc = coalesce(l.doc::jsonb, s.doc)
FROM (
    SELECT x.ns, x.key, u.old_type, u.old_digest, u.old_doc, u.type, u.value, u.doc
    FROM {schema}.pgc_store x
    JOIN unnest(%(ns)s::text[], %(key)s::text[], %(old_type)s::text[], %(old_digest)s::bytea[],
                %(old_doc)s::text[], %(type)s::text[], %(value)s::bytea[], %(doc)s::text[])
         AS u(ns, key, old_type, old_digest, old_doc, type, value, doc)
      ON x.ns = u.ns COLLATE "C" AND x.key = u.key COLLATE "C"
    ORDER BY x.ns, x.key
    FOR UPDATE OF x
) l
WHERE s.ns = l.ns AND s.key = l.key
  AND s.type = l.old_type AND sha256(s.value) = l.old_digest AND s.doc = l.old_doc::jsonb
RETURNING s.ns, s.key
