"""`StoreState`: what every store operation shares, with no connection.

The value codec (the savers' own: a `serde` that encrypts, such as
`EncryptedSerde`, seals every item's value bound to its row), the fields kept
readable for filters when sealing, the index settings, and the statements
rendered for this schema.

Example:
    >>> StoreState().queries["store_get"].splitlines()[0]
    '-- pgcheckpoint: store_get'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ..codec.binding import as_sealer
from ..codec.values import ValueCodec
from ..errors import InvalidInputError
from ..statements.queries import Queries
from .vectors import IndexSettings

__all__ = ["DEFAULT_MAX_VALUE_BYTES", "StoreState", "omit_expired"]

# The largest serialised value a put takes (PostgreSQL's JSONB stops at 255 MiB).
DEFAULT_MAX_VALUE_BYTES = 64 * 1024 * 1024


def omit_expired(ttl_config: Mapping[str, Any] | None) -> bool:
    """Whether reads leave out items that have expired but are not swept yet.

    Yes, unless the TTL config says `omit_expired: False`.

    Example:
        >>> omit_expired(None), omit_expired({"omit_expired": False})
        (True, False)
    """
    return bool((ttl_config or {}).get("omit_expired", True))


class StoreState:
    """A store's settings, shared by its ops.

    Args:
        schema: The Postgres schema of the tables.
        serde: The serializer of values JSON cannot hold; an encrypting one
            (`EncryptedSerde`) seals every value.
        index: The official `index` config, for semantic search.
        filterable: With a sealing serde, the top-level fields kept readable
            for filters (unencrypted); every other field is sealed.
        deserializer: Reads a value's JSON bytes (the official argument).

    Example:
        >>> StoreState().sealed
        False
    """

    def __init__(
        self,
        *,
        schema: str = "public",
        serde: SerializerProtocol | None = None,
        index: Mapping[str, Any] | None = None,
        filterable: Iterable[str] | None = None,
        deserializer: Callable[[bytes], dict[str, Any]] | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    ) -> None:
        self.codec = ValueCodec()
        self.codec.serde = serde if serde is not None else JsonPlusSerializer()
        self.sealed = as_sealer(self.codec.serde) is not None
        if isinstance(filterable, str):
            raise InvalidInputError("filterable must be a list of field names, not one string")
        self.filterable: frozenset[str] | None = (
            frozenset(filterable or ()) if self.sealed else None
        )
        self.index = IndexSettings.from_config(index) if index else None
        self.deserializer = deserializer
        self.max_value_bytes = max_value_bytes
        self.schema = schema
        self.queries = Queries(schema)
