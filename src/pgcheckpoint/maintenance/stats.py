"""`pgcheckpoint stats`: what the tables hold, read in one op.

Example:
    >>> from pgcheckpoint.maintenance.stats import storage_stats_op
    >>> stats = saver.run(storage_stats_op("public", top=5))  # doctest: +SKIP
    >>> stats.threads, stats.tables["pgc_blobs"]["total_bytes"]  # doctest: +SKIP
    (120, 1048576)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from psycopg import sql

from ..errors import InvalidInputError
from ..ops import Op, Stmt
from ..schema.ddl import TABLES
from ..store.batch import count_op
from ..store.vectors import VECTOR_TABLE
from ..validate import check_count

__all__ = ["StorageStats", "prometheus_text", "storage_stats_op"]

# How many of the threads with damaged rows the stats name.
DAMAGED_THREADS = 5


@dataclass
class StorageStats:
    """What the tables hold: `pgcheckpoint stats`.

    Attributes:
        threads: Threads with at least one checkpoint.
        checkpoints: Rows of `pgc_checkpoints`.
        blobs: Rows of `pgc_blobs` (stored channel values).
        writes: Rows of `pgc_writes` (pending writes).
        oldest: When the oldest checkpoint was saved, or None.
        newest: When the newest checkpoint was saved, or None.
        store: The store's items (`items`, rows of `pgc_store`) and how many
            of them have expired but are not swept yet (`expired`).
        tables: Per table: `table_bytes` (heap and TOAST), `index_bytes`,
            `total_bytes`; the store's vector table too, where it exists.
        largest: The threads whose values take most space, largest first:
            thread_id, checkpoints, blobs, writes, bytes, oldest, newest.
        unreachable: Rows no read reaches, and their stored size (`checkpoints`,
            `blobs`, `writes`, `bytes`): subgraph runs that hang off no checkpoint
            that exists, writes of checkpoints that do not exist, values of
            namespaces with no checkpoint. A prune leaves no subgraph run hanging.
        damaged: Rows whose columns are not as pgcheckpoint writes them (what
            `threads` and `show` mark damaged): `checkpoints` (channel_versions
            or metadata that is no JSON object, a version neither text nor a
            number), `blobs` (a value whose bytes are NULL), and `thread_ids`,
            the first few threads (by id) they belong to.

    Example:
        >>> StorageStats(threads=0, checkpoints=0, blobs=0, writes=0).tables
        {}
    """

    threads: int
    checkpoints: int
    blobs: int
    writes: int
    oldest: datetime | None = None
    newest: datetime | None = None
    store: dict[str, int] = field(default_factory=dict)
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    largest: list[dict[str, Any]] = field(default_factory=list)
    unreachable: dict[str, int] = field(default_factory=dict)
    damaged: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The stats as JSON-ready data (times in ISO 8601).

        Example:
            >>> StorageStats(threads=0, checkpoints=0, blobs=0, writes=0).as_dict()["oldest"]
        """

        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        data = asdict(self)
        data["oldest"], data["newest"] = iso(self.oldest), iso(self.newest)
        for row in data["largest"]:
            row["oldest"], row["newest"] = iso(row["oldest"]), iso(row["newest"])
        return data


def prometheus_text(stats: StorageStats, schema: str = "public") -> str:
    """The stats in Prometheus' text format, for node_exporter's textfile collector.

    Gauges labelled with the schema (and the table): threads, rows, bytes of
    data and of indexes, the store's expired items not swept yet, and the
    times of the oldest and newest checkpoint (left out while there is none).
    The largest threads are left out: thread ids are personal data in many
    applications, and one series each is too many.

    Example:
        >>> text = prometheus_text(StorageStats(threads=2, checkpoints=9, blobs=4, writes=1))
        >>> text.splitlines()[2]
        'pgcheckpoint_threads{schema="public"} 2'
    """
    of_schema = f'schema="{_label(schema)}"'

    def per_table(values: dict[str, int]) -> list[tuple[str, float]]:
        return [(f'{of_schema},table="{_label(table)}"', n) for table, n in values.items()]

    rows = {"pgc_checkpoints": stats.checkpoints, "pgc_blobs": stats.blobs}
    rows["pgc_writes"] = stats.writes
    rows["pgc_store"] = stats.store.get("items", 0)
    damaged = {"pgc_checkpoints": stats.damaged.get("checkpoints", 0)}
    damaged["pgc_blobs"] = stats.damaged.get("blobs", 0)
    data = {table: sizes.get("table_bytes", 0) for table, sizes in stats.tables.items()}
    indexes = {table: sizes.get("index_bytes", 0) for table, sizes in stats.tables.items()}
    families: list[tuple[str, str, list[tuple[str, float]]]] = [
        ("threads", "Threads with at least one checkpoint", [(of_schema, stats.threads)]),
        ("table_rows", "Rows of each table", per_table(rows)),
        ("table_data_bytes", "Bytes of each table on disk, TOAST included", per_table(data)),
        ("table_index_bytes", "Bytes of the indexes of each table on disk", per_table(indexes)),
        ("damaged_rows", "Rows not as pgcheckpoint writes them", per_table(damaged)),
        (
            "store_expired_items",
            "Store items whose TTL has run out, not swept yet",
            [(of_schema, stats.store.get("expired", 0))],
        ),
    ]
    for end, when in (("oldest", stats.oldest), ("newest", stats.newest)):
        if when is not None:
            what = f"When the {end} checkpoint was saved, in seconds since the epoch"
            samples = [(of_schema, when.timestamp())]
            families.append((f"{end}_checkpoint_timestamp_seconds", what, samples))
    lines = []
    for name, what, samples in families:
        lines += [f"# HELP pgcheckpoint_{name} {what}", f"# TYPE pgcheckpoint_{name} gauge"]
        lines += [f"pgcheckpoint_{name}{{{labels}}} {_number(v)}" for labels, v in samples]
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def storage_stats_op(schema: str = "public", *, top: int = 10) -> Op[StorageStats]:
    """Read what the tables hold: rows, bytes on disk, activity, the largest threads.

    Example:
        >>> next(storage_stats_op()).name
        'storage_counts'
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise InvalidInputError(f"top must be a non-negative int, not {top!r}")
    check_count("top", top)
    rows = yield Stmt("storage_counts", fetch=True)
    stats = StorageStats(**{k: v for k, v in rows[0].items()})
    stats.store = yield from count_op(())
    tables = [*TABLES, VECTOR_TABLE]
    sizes = yield Stmt(
        "storage_table_sizes",
        {
            "names": tables,
            "relations": [sql.Identifier(schema, t).as_string(None) for t in tables],
        },
        fetch=True,
    )
    measured = {r["table_name"]: r for r in sizes}
    stats.tables = {  # in the order of `tables`
        t: {k: int(measured[t][k]) for k in ("table_bytes", "index_bytes", "total_bytes")}
        for t in tables
        if t in measured
    }
    lost = yield Stmt("storage_unreachable", fetch=True)
    stats.unreachable = {k: int(v) for k, v in lost[0].items()}
    damaged = yield Stmt("storage_damaged", {"threads": DAMAGED_THREADS}, fetch=True)
    stats.damaged = {
        "checkpoints": int(damaged[0]["checkpoints"]),
        "blobs": int(damaged[0]["blobs"]),
        "thread_ids": list(damaged[0]["thread_ids"] or ()),
    }
    if top:
        largest = yield Stmt("storage_largest_threads", {"limit": top}, fetch=True)
        stats.largest = [
            {
                "thread_id": r["thread_id"],
                **{k: int(r[k]) for k in ("checkpoints", "blobs", "writes", "bytes")},
                "oldest": r["oldest"],
                "newest": r["newest"],
            }
            for r in largest
        ]
    return stats
