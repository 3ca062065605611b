"""An item's value as stored, and back: the value codec, plus what filters read.

A value is stored as the savers store theirs, through the value codec
(compressed when that pays, sealed with a key, bound to its row): as JSON
text, which keeps key order, NUL characters, unicode and integers of any
size, or, for what JSON cannot hold (a datetime, bytes), the serializer's
bytes. Beside it, `doc` is what filters read, as JSONB: the whole value, or
with a key configured only the fields declared filterable (those stay in the
clear; the rest is sealed). A sealed item's `doc` is checked against the
value it was sealed with on every read: its keys are bound to the seal, its
values compared. `reseal_item` seals a stored value again under the active key
(`pgcheckpoint rotate-key`).

Example:
    >>> encode_json({"b": 1, "a": "x"})
    b'{"b":1,"a":"x"}'
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from ..codec.binding import as_sealer, binding
from ..codec.integrity import projection_keys
from ..codec.labels import PLAINTEXT_LABEL, cipher_label
from ..codec.metadata import json_projection
from ..codec.values import ValueCodec
from ..errors import DecryptionError, InvalidInputError
from .plans import namespace_text

__all__ = [
    "StoredValue",
    "decode_value",
    "encode_json",
    "encode_value",
    "item_binding",
    "reseal_item",
]

# (type, bytes, doc as JSON text) of one item as `store_put` takes it
StoredValue = tuple[str, bytes, str]
# one encoder for every value (json.dumps with options makes one per call)
_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def item_binding(ns: str, key: str) -> bytes:
    """Where an item's value belongs, for the seal (`pgcheckpoint.codec.binding`).

    Example:
        >>> item_binding("a.b", "k")[:4]
        b'item'
    """
    return binding("item", ns, key)


def encode_json(value: Mapping[str, Any]) -> bytes | None:
    """A value as JSON text, or None when JSON cannot hold it (a datetime, bytes).

    Raises:
        InvalidInputError: The value holds NaN or an infinity.

    Example:
        >>> encode_json({"n": 2**70})
        b'{"n":1180591620717411303424}'
    """
    try:
        text = _JSON.encode(value)
    except ValueError as exc:
        raise InvalidInputError(
            f"cannot store the value: {exc} (JSON has no NaN or infinity); store None "
            "or a string instead"
        ) from exc
    except (TypeError, RecursionError):
        return None
    return text.encode("utf-8", "surrogatepass")


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, Mapping):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_non_finite(v) for v in value)
    return False


def _doc_text(value: Mapping[str, Any], text: bytes | None, fields: frozenset[str] | None) -> str:
    if fields is not None:
        value = {k: v for k, v in value.items() if k in fields}
    elif text is not None and b"\\u0000" not in text:
        try:
            return text.decode("utf-8")  # the JSON itself: no surrogate, no NUL escape
        except UnicodeDecodeError:
            pass
    return json.dumps(json_projection(dict(value))[0], ensure_ascii=False)


def encode_value(
    codec: ValueCodec,
    ns: tuple[str, ...],
    key: str,
    value: Any,
    *,
    filterable: frozenset[str] | None,
    max_bytes: int,
) -> StoredValue:
    """An item's (type, bytes, doc) for `store_put`, or a clear error before anything is sent.

    Raises:
        InvalidInputError: The value is no dict, holds NaN, is larger than
            `max_bytes`, or the serializer cannot encode it.

    Example:
        >>> from pgcheckpoint.store.state import StoreState
        >>> encode_value(StoreState().codec, ("a",), "k", {"v": 1},
        ...              filterable=None, max_bytes=100)[0]
        'json'
    """
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"an item's value must be a dict, not {type(value).__name__!r} (key {key!r} in "
            f"namespace {ns!r}); wrap it, e.g. {{'value': ...}}"
        )
    value = dict(value)
    sealing = as_sealer(codec.serde) is not None
    if sealing and filterable is None:
        filterable = frozenset()  # sealed, nothing declared readable
    # the binding only a seal (and an error message) reads
    aad = item_binding(namespace_text(ns), key) if sealing else b""
    text = encode_json(value)
    if text is not None:
        type_, data = "json", text
    else:
        aad = aad or item_binding(namespace_text(ns), key)
        if _has_non_finite(value):
            raise InvalidInputError(
                f"cannot store the value of key {key!r}: it holds NaN or an infinity, which "
                "its filters could not compare; store None or a string instead"
            )
        type_, data = codec.serialize(value, aad)
    if len(data) > max_bytes:
        raise InvalidInputError(
            f"the value of key {key!r} in namespace {ns!r} is {len(data)} bytes, over the "
            f"store's limit of {max_bytes} (max_value_bytes); store large content elsewhere "
            "and keep a reference in the item"
        )
    doc = _doc_text(value, text, filterable)
    # a seal binds the readable fields' names (format 2); a plain value binds nothing
    columns = (projection_keys(json.loads(doc)),) if sealing else ()
    stored_type, stored = codec.pack_value(type_, data, aad, columns)
    return stored_type, stored, doc


def decode_value(
    codec: ValueCodec,
    ns: str,
    key: str,
    type_: str,
    data: bytes,
    doc: Any,
    *,
    sealed: bool,
    deserializer: Callable[[bytes], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The value of a stored item; a sealed one's `doc` checked against it.

    Raises:
        DecryptionError: A sealed value, or its readable fields, were altered.
        UnreadableValueError: The stored bytes cannot be read.

    Example:
        >>> from pgcheckpoint.store.state import StoreState
        >>> decode_value(StoreState().codec, "a", "k", "json", b'{"v":1}', {}, sealed=False)
        {'v': 1}
    """
    aad = item_binding(ns, key)
    inner_type, raw = codec.unpack_value(type_, data, aad, (projection_keys(doc),))
    return _opened(codec, ns, key, type_, inner_type, raw, doc, sealed, deserializer)


def _opened(
    codec: ValueCodec,
    ns: str,
    key: str,
    type_: str,
    inner_type: str,
    raw: bytes,
    doc: Any,
    sealed: bool,
    deserializer: Callable[[bytes], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An item's value from its unsealed bytes; a sealed one's `doc` checked against it."""
    aad = item_binding(ns, key)
    if inner_type == "json":
        value: dict[str, Any] = (
            deserializer(raw) if deserializer else json.loads(raw.decode("utf-8", "surrogatepass"))
        )
    else:
        value = codec.decode(inner_type, raw, aad)
    if sealed and "+" in type_:
        projected = json_projection({k: value[k] for k in doc if k in value})[0]
        if not isinstance(doc, Mapping) or projected != dict(doc):
            raise DecryptionError(
                f"item {key!r} in namespace {ns!r} (table pgc_store), sealed under key "
                f"{cipher_label(type_)!r}, was altered: its readable fields (column doc) "
                "differ from the sealed value; restore the row from a backup, or delete it"
            )
    return value


def reseal_item(
    codec: ValueCodec,
    ns: str,
    key: str,
    type_: str,
    data: bytes,
    doc: Any,
    *,
    filterable: frozenset[str],
) -> tuple[str, bytes, str | None]:
    """An item's value sealed again by `codec`'s active key: its type, bytes and new `doc`.

    A sealed value is first checked as a read checks it (its seal, and its
    readable fields against it), then sealed again as it is, bound to the
    same item and readable fields: its `doc` stays (None). A value stored in
    clear (read only with `allow_plaintext`) is sealed for the first time,
    and its `doc` cut down to the `filterable` fields (the JSON text returned).

    Raises:
        InvalidInputError: `codec`'s serializer does not encrypt.
        DecryptionError: The value or its readable fields were altered, or it
            is stored in clear and the serializer does not allow plaintext.

    Example:
        >>> reseal_item(codec, "users.u1", "prefs", type_, data, doc,  # doctest: +SKIP
        ...             filterable=frozenset())[0]
        'json+aesgcm2:k2'
    """
    if as_sealer(codec.serde) is None:
        raise InvalidInputError("re-sealing store items needs an encrypting serde (EncryptedSerde)")
    aad = item_binding(ns, key)
    # opened once, and checked as a read checks it; in clear only with allow_plaintext
    inner, raw = codec.unpack_value(type_, data, aad, (projection_keys(doc),))
    value = _opened(codec, ns, key, type_, inner, raw, doc, True)
    new_doc = None
    if cipher_label(type_) == PLAINTEXT_LABEL:
        new_doc = _doc_text(value, None, filterable)
        doc = json.loads(new_doc)
    # sealed again as a put would seal it now (compressed when the serde asks)
    return (*codec.pack_value(inner, raw, aad, (projection_keys(doc),)), new_doc)
