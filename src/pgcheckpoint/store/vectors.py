"""Semantic search settings: the `index` config, the texts a put embeds, the vector table.

Configured as the official store is (`dims`, `embed`, `fields`,
`ann_index_config` with `kind` hnsw / ivfflat / flat and `vector_type` vector
/ halfvec, `distance_type` l2 / inner_product / cosine). Each put embeds the
texts at its fields (`index=` of the put, else `fields`), all of a batch's
texts in one call, made by the driver before it takes a connection. The
vectors live in `pgc_store_vectors`, which `setup()` creates with the
configured type (`vector_ddl`): the extension is pgvector. Search is exact
(every vector in the search's scope), so filters and offsets hold; the ANN
index is built as configured for what else reads the table.

Example:
    >>> settings = IndexSettings.from_config({"dims": 3, "embed": lambda texts: []})
    >>> settings.distance, settings.vector_type
    ('cosine', 'vector')
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.embeddings import Embeddings
from langgraph.store.base import PutOp, ensure_embeddings, get_text_at_path, tokenize_path
from psycopg import sql

from ..errors import InvalidInputError, PgCheckpointError

__all__ = [
    "VECTOR_TABLE",
    "IndexSettings",
    "PgvectorMissingError",
    "index_name",
    "vector_ddl",
    "vector_literal",
]

# The table of the vectors, beside pgc_store: `setup()` of a store with an `index`
# creates it (`vector_ddl`), not a migration revision.
VECTOR_TABLE = "pgc_store_vectors"

# each distance's operator class (store_search_vector holds the operators)
_DISTANCES = {"cosine": "cosine_ops", "l2": "l2_ops", "inner_product": "ip_ops"}
_KINDS = {"hnsw": ("m", "ef_construction"), "ivfflat": ("lists", "nlist"), "flat": ()}
# pgvector's limits: dimensions an hnsw or ivfflat index takes, the largest halfvec
_INDEXED_DIMS = {"vector": 2000, "halfvec": 4000}
_HALFVEC_MAX = 65504.0


class PgvectorMissingError(PgCheckpointError):
    """The server has no pgvector, which a store with an `index` needs.

    Example:
        >>> isinstance(PgvectorMissingError("x"), PgCheckpointError)
        True
    """


@dataclass(frozen=True)
class IndexSettings:
    """A store's `index` config, checked.

    Example:
        >>> IndexSettings.from_config({"dims": 2, "embed": lambda t: []}).dims
        2
    """

    dims: int
    embeddings: Embeddings | None
    fields: tuple[tuple[str, Any], ...]
    vector_type: str
    distance: str
    kind: str
    params: tuple[tuple[str, int], ...]

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> IndexSettings:
        """Check an `index` config; a clear error for each value that cannot work."""
        dims = config.get("dims")
        if isinstance(dims, bool) or not isinstance(dims, int) or not 0 < dims <= 16000:
            raise InvalidInputError(f"index dims must be an int from 1 to 16000, not {dims!r}")
        ann = dict(config.get("ann_index_config") or {})
        vector_type = ann.pop("vector_type", "vector")
        if vector_type not in ("vector", "halfvec"):
            raise InvalidInputError(
                f"index vector_type must be 'vector' or 'halfvec', not {vector_type!r}"
            )
        distance = config.get("distance_type", "cosine")
        if distance not in _DISTANCES:
            raise InvalidInputError(
                f"index distance_type must be one of {', '.join(_DISTANCES)}, not {distance!r}"
            )
        kind = ann.pop("kind", "hnsw")
        if kind not in _KINDS:
            raise InvalidInputError(f"index kind must be one of {', '.join(_KINDS)}, not {kind!r}")
        if kind != "flat" and dims > _INDEXED_DIMS[vector_type]:
            # refused here, before setup() creates a table that a fixed config would not match
            raise InvalidInputError(
                f"pgvector's {kind} index takes {vector_type} of up to "
                f"{_INDEXED_DIMS[vector_type]} dimensions, not {dims}: use vector_type "
                "'halfvec' (up to 4000) or kind 'flat' (an exact search needs no index)"
            )
        params = []
        for name, value in ann.items():
            if name not in _KINDS[kind]:
                raise InvalidInputError(f"index kind {kind!r} takes no parameter {name!r}")
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidInputError(f"index parameter {name!r} must be a positive int")
            params.append(("lists" if name == "nlist" else name, value))
        fields = config.get("fields") or ["$"]
        if isinstance(fields, str):
            fields = [fields]
        tokenized = tuple((f, f if f == "$" else tokenize_path(f)) for f in fields)
        return cls(
            dims=dims,
            embeddings=ensure_embeddings(config.get("embed")),
            fields=tokenized,
            vector_type=vector_type,
            distance=distance,
            kind=kind,
            params=tuple(params),
        )

    @property
    def column_type(self) -> str:
        """The embedding column's type as `format_type` writes it: `vector(3)`."""
        return f"{self.vector_type}({self.dims})"

    def texts(self, op: PutOp) -> list[tuple[str, str]]:
        """(field, text) of each text a put embeds; none for `index=False` or a delete."""
        if op.value is None or op.index is False:
            return []
        paths = self.fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
        out = []
        for path, tokens in paths:
            found = get_text_at_path(op.value, tokens)
            for i, text in enumerate(found):
                out.append((f"{path}.{i}" if len(found) > 1 else path, text))
        return out

    def checked(self, vectors: Sequence[Sequence[float]], count: int, what: str) -> list[str]:
        """The embeddings as vector literals, after checking their count and dimension.

        Raises:
            InvalidInputError: The embedding function returned another number of
                vectors, a vector of another dimension, a non-finite number, or
                (for halfvec) one beyond ±65504.
        """
        vectors = list(vectors)
        if len(vectors) != count:
            raise InvalidInputError(
                f"the embedding function returned {len(vectors)} vectors for {count} {what}; "
                "it must return one per text"
            )
        literals = [vector_literal(v, self.dims) for v in vectors]
        if self.vector_type == "halfvec" and any(
            abs(float(x)) > _HALFVEC_MAX for v in vectors for x in v
        ):
            raise InvalidInputError(
                f"an embedding holds a number beyond halfvec's range (±{_HALFVEC_MAX:g}); "
                "use vector_type 'vector', or scale the model's vectors"
            )
        return literals


def vector_literal(vector: Sequence[float], dims: int) -> str:
    """A vector as pgvector's text form, checked: `[1.0,2.0]`.

    Example:
        >>> vector_literal([1, 0.5], 2)
        '[1.0,0.5]'
    """
    values = [float(x) for x in vector]
    if len(values) != dims:
        raise InvalidInputError(
            f"an embedding has {len(values)} dimensions, the store's index {dims}; set "
            "index dims to the model's"
        )
    if not all(math.isfinite(x) for x in values):
        raise InvalidInputError("an embedding holds NaN or an infinity")
    return "[" + ",".join(repr(x) for x in values) + "]"


def index_name(settings: IndexSettings) -> str | None:
    """The name of the vector table's ANN index, or None for `flat` (no index).

    Example:
        >>> index_name(IndexSettings.from_config({"dims": 2, "embed": lambda t: []}))
        'pgc_store_vectors_hnsw_vector_cosine_ops'
    """
    if settings.kind == "flat":
        return None
    return f"{VECTOR_TABLE}_{settings.kind}_{settings.vector_type}_{_DISTANCES[settings.distance]}"


def vector_ddl(schema: str, settings: IndexSettings) -> list[sql.Composed]:
    """The statements that create the vector table and its index (idempotent).

    Example:
        >>> settings = IndexSettings.from_config({"dims": 2, "embed": lambda t: []})
        >>> len(vector_ddl("public", settings))
        2
    """
    s = sql.Identifier(schema)
    table = sql.SQL(
        "CREATE TABLE IF NOT EXISTS {s}.{v} ("
        ' ns text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL, field text NOT NULL,'
        " embedding {t} NOT NULL, PRIMARY KEY (ns, key, field),"
        " FOREIGN KEY (ns, key) REFERENCES {s}.pgc_store (ns, key) ON DELETE CASCADE)"
    ).format(s=s, v=sql.Identifier(VECTOR_TABLE), t=sql.SQL(settings.column_type))
    out = [table]
    name = index_name(settings)
    if name is not None:
        ops = f"{settings.vector_type}_{_DISTANCES[settings.distance]}"
        with_: sql.Composable = sql.SQL("")
        if settings.params:
            with_ = sql.SQL(" WITH ({})").format(
                sql.SQL(", ").join(
                    sql.SQL("{} = {}").format(sql.Identifier(k), sql.Literal(v))
                    for k, v in settings.params
                )
            )
        out.append(
            sql.SQL(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {s}.{v}"
                " USING {kind} (embedding {ops}){with_}"
            ).format(
                name=sql.Identifier(name),
                s=s,
                v=sql.Identifier(VECTOR_TABLE),
                kind=sql.SQL(settings.kind),
                ops=sql.SQL(ops),
                with_=with_,
            )
        )
    return out
