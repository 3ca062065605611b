"""The type label of a stored value: what its `type` column says about compression and keys.

A stored value's type is the inner serializer's type followed by `+` parts:
`+zstd` when it was compressed, then, when it was encrypted, the cipher's part:
`aesgcm2:<key id>` (row format 2, every value pgcheckpoint seals now),
`aesgcm:<key id>` (row format 1, pgcheckpoint 0.1.0) or `aes` (LangGraph's own
`EncryptedSerializer`). `cipher_label` reads the last part into the label the
command line and the errors show. This module is the one place that parses
the format; SQL groups rows by their whole type and leaves the parsing here.

Example:
    >>> from pgcheckpoint.codec.labels import cipher_label
    >>> cipher_label("msgpack+zstd+aesgcm2:k1")
    'k1'
"""

from __future__ import annotations

from ..errors import DecryptionError

__all__ = [
    "COMPRESS_SUFFIX",
    "EAX_NAME",
    "FORMAT_1_LABEL",
    "GCM_FORMAT_1_PREFIX",
    "GCM_PREFIX",
    "KEYS_ENV",
    "LANGGRAPH_EAX_LABEL",
    "LANGGRAPH_KEY_ENV",
    "PLAINTEXT_LABEL",
    "cipher_label",
    "unkeyed_read_error",
]

# The stored type of a compressed value ends with this (before any cipher part).
COMPRESS_SUFFIX = "+zstd"
# The cipher part of row format 2 (every value sealed now), and of format 1 (0.1.0).
GCM_PREFIX = "aesgcm2:"
GCM_FORMAT_1_PREFIX = "aesgcm:"
# LangGraph's `EncryptedSerializer.from_pycryptodome_aes()` marks values "+aes".
EAX_NAME = "aes"
PLAINTEXT_LABEL = "(plaintext)"
LANGGRAPH_EAX_LABEL = "(langgraph-eax)"
# The label of values a key sealed in row format 1: "k1 (0.1.0)".
FORMAT_1_LABEL = "{} (0.1.0)"
# Where the keys of each kind of label come from (named in errors).
KEYS_ENV = "PGCHECKPOINT_AES_KEYS"
LANGGRAPH_KEY_ENV = "LANGGRAPH_AES_KEY"


def cipher_label(type_: str | None) -> str:
    """Which key a stored value's type says it is encrypted under, and how.

    Returns the key id, the key id followed by ` (0.1.0)` for a value sealed in
    row format 1 (by pgcheckpoint 0.1.0), `"(langgraph-eax)"` for LangGraph's
    own format, or `"(plaintext)"`.

    Example:
        >>> cipher_label("msgpack+aesgcm2:k1"), cipher_label("msgpack+zstd+aesgcm:k1")
        ('k1', 'k1 (0.1.0)')
        >>> cipher_label("msgpack+zstd")
        '(plaintext)'
    """
    _, sep, last = (type_ or "").rpartition("+")
    if sep and last.startswith(GCM_PREFIX):
        return last[len(GCM_PREFIX) :]
    if sep and last.startswith(GCM_FORMAT_1_PREFIX):
        return FORMAT_1_LABEL.format(last[len(GCM_FORMAT_1_PREFIX) :])
    if sep and last == EAX_NAME:
        return LANGGRAPH_EAX_LABEL
    return PLAINTEXT_LABEL


def unkeyed_read_error(type_: str, where: str) -> DecryptionError | None:
    """The error for an encrypted value read by a saver without the encrypting serde.

    None when the type names no cipher this package knows. `where` names the
    row. The serializer's own error ("Unknown serialization type") would not
    say that a key is missing, nor which.

    Example:
        >>> "PGCHECKPOINT_AES_KEYS" in str(unkeyed_read_error("msgpack+aesgcm2:k1", "a row"))
        True
    """
    label = cipher_label(type_)
    if label == LANGGRAPH_EAX_LABEL:
        written, env = "by LangGraph's EncryptedSerializer", LANGGRAPH_KEY_ENV
    elif type_.rpartition("+")[2].startswith((GCM_FORMAT_1_PREFIX, GCM_PREFIX)):
        written, env = f"under key {label!r}", KEYS_ENV
    else:
        return None
    return DecryptionError(
        f"cannot read the {where}: it is encrypted {written} (type "
        f"{type_!r}) and this saver has no key; pass serde=EncryptedSerde.from_env() to "
        f"the saver, with {env} set as for the application that wrote it"
    )
