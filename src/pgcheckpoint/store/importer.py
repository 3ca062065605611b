"""Copying the official store's items and vectors into pgcheckpoint's store, page by page.

`import_sweep` reads the official `store` table (and `store_vectors`, when
both stores have vectors) of a schema in pages of (prefix, key) order and
writes each page in one transaction: every value re-encoded through this
store's codec (so a key seals it), with its timestamps and TTL. An item the
pgcheckpoint store already holds stays as it is: it was written after the
switch. The namespaces are stored the same way by both (labels joined by
`.`), so nothing is renamed. Safe to run again: a second run copies nothing.

Example:
    >>> sweep = import_sweep(StoreState(), page_size=500)  # doctest: +SKIP
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from ..errors import PgCheckpointError
from ..ops import Op, Stmt, Sweep
from .plans import namespace_labels
from .state import StoreState
from .values import encode_value
from .vectors import VECTOR_TABLE

__all__ = ["ImportReport", "import_sweep"]


@dataclass
class ImportReport:
    """What an import copied.

    Example:
        >>> ImportReport().items
        0
    """

    items: int = 0
    kept: int = 0
    vectors: int = 0
    failed: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (for `--json`)."""
        return {
            "items": self.items,
            "kept": self.kept,
            "vectors": self.vectors,
            "failed": self.failed,
        }


def _tables_op(schema: str) -> Op[dict[str, Any]]:
    names = {
        "store": sql.Identifier(schema, "store").as_string(None),
        "vectors": sql.Identifier(schema, "store_vectors").as_string(None),
        "ours": sql.Identifier(schema, VECTOR_TABLE).as_string(None),
    }
    rows = yield Stmt("store_official_tables", names, fetch=True)
    return dict(rows[0])


def _page_op(
    state: StoreState, after: tuple[str, str], limit: int, vectors: bool, report: ImportReport
) -> Op[tuple[str, str] | None]:
    rows = yield Stmt(
        "store_official_page",
        {"after_prefix": after[0], "after_key": after[1], "limit": limit},
        fetch=True,
    )
    if not rows:
        return None
    columns: dict[str, list[Any]] = {
        k: []
        for k in ("nss", "keys", "types", "values", "docs", "created", "updated", "expires", "ttls")
    }
    for row in rows:
        try:
            value = json.loads(row["value"])
            type_, data, doc = encode_value(
                state.codec,
                namespace_labels(row["prefix"]),
                row["key"],
                value,
                filterable=state.filterable,
                max_bytes=state.max_value_bytes,
            )
        except PgCheckpointError as exc:
            report.failed[f"{row['prefix']}/{row['key']}"] = str(exc)
            continue
        for name, item in zip(
            columns,
            (
                row["prefix"],
                row["key"],
                type_,
                data,
                doc,
                row["created_at"],
                row["updated_at"],
                row["expires_at"],
                row["ttl_minutes"],
            ),
            strict=True,
        ):
            columns[name].append(item)
    copied = yield Stmt("store_import", columns, fetch=True)
    report.items += len(copied)
    report.kept += len(columns["nss"]) - len(copied)
    if vectors and copied:
        found = yield Stmt(
            "store_official_vectors",
            {"nss": [r["ns"] for r in copied], "keys": [r["key"] for r in copied]},
            fetch=True,
        )
        if found:
            yield Stmt(
                "store_import_vectors",
                {
                    "v_nss": [r["prefix"] for r in found],
                    "v_keys": [r["key"] for r in found],
                    "v_fields": [r["field_name"] for r in found],
                    "v_embeddings": [r["embedding"] for r in found],
                },
            )
            report.vectors += len(found)
    last = rows[-1]
    return str(last["prefix"]), str(last["key"])


def import_sweep(state: StoreState, *, page_size: int = 500) -> Sweep[ImportReport]:
    """Copy every item (and vector) of the official store; each page one transaction.

    Raises:
        PgCheckpointError: The schema has no official `store` table, or its
            vectors have another number of dimensions than this store's.
    """
    tables = yield _tables_op(state.schema)
    if not tables["store"]:
        raise PgCheckpointError(
            f"schema {state.schema!r} has no table 'store' of langgraph-checkpoint-postgres's "
            "PostgresStore to import; pass the schema that holds it (--schema)"
        )
    vectors = bool(tables["vectors"] and tables["our_vectors"])
    if vectors and tables["their_dims"] != tables["our_dims"]:
        # checked before the first page: a vector of another size fails its page's insert
        raise PgCheckpointError(
            f"the official store's vectors have {tables['their_dims']} dimensions and this "
            f"store's {tables['our_dims']}: vectors keep the size of the model that made them, "
            f"so set this store's index dims to {tables['their_dims']} (drop pgc_store_vectors "
            "and run setup() again to change it), then import"
        )
    report = ImportReport()
    after: tuple[str, str] | None = ("", "")
    while after is not None:
        after = yield _page_op(state, after, page_size, vectors, report)
    return report
