"""The value codec: how a stored value's bytes are made and read back. Internal.

`values.ValueCodec` serialises, compresses and seals every value the savers
store; `binding` says where each belongs (what a seal authenticates, the row
formats); `labels` reads a stored type's label (compression, cipher, key);
`crypto` is `EncryptedSerde` (AES-256-GCM, exported as `pgcheckpoint.EncryptedSerde`);
`integrity` checks the columns a read trusts against a sealed record;
`metadata` is checkpoint metadata as JSONB holds it; `strict` is LangGraph's
serializer in strict mode, for tools that read rows they cannot trust.

Example:
    >>> from pgcheckpoint.codec.labels import cipher_label
    >>> cipher_label("msgpack+aesgcm2:k1")
    'k1'
"""
