"""`rotate_key`: the key rotation sweep on a sync saver of its own, in one call.

Example:
    >>> from pgcheckpoint import rotate_key
    >>> rotate_key(DSN, dry_run=True).to_rotate  # doctest: +SKIP
    1200
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ..codec.crypto import EncryptedSerde
from ..errors import InvalidInputError
from ..maintenance.rotation import DEFAULT_BATCH_SIZE, Progress, RotationReport, rotation_sweep
from ..validate import libpq_dsn
from .saver import PostgresSaver

__all__ = ["rotate_key"]


@contextmanager
def _saver(
    conn: str | Connection[Any] | ConnectionPool[Any], serde: EncryptedSerde, schema: str
) -> Iterator[PostgresSaver]:
    if isinstance(conn, str):
        with Connection.connect(
            libpq_dsn(conn), autocommit=True, prepare_threshold=0, row_factory=dict_row
        ) as opened:
            yield PostgresSaver(opened, serde=serde, schema=schema)
    else:
        yield PostgresSaver(conn, serde=serde, schema=schema)


def rotate_key(
    conn: str | Connection[Any] | ConnectionPool[Any],
    serde: EncryptedSerde | None = None,
    *,
    schema: str = "public",
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    progress: Progress | None = None,
    store_filterable: Iterable[str] = (),
) -> RotationReport:
    """Re-encrypt every stored value under the active key, in batches.

    The checkpoints, their metadata, values and writes, and the store's
    items. Safe while the application runs: each row is rewritten only if it
    still holds what was read. Interrupted, it resumes when called again.
    Once `remaining` is empty, keys other than the active one can be removed.
    Configure every writer with the new key first, or values they save under
    an old key remain.

    Args:
        conn: A conninfo string, a psycopg `Connection` or a `ConnectionPool`.
        serde: The keys: the active one encrypts, every other one decrypts
            (default: `EncryptedSerde.from_env()`).
        schema: The Postgres schema holding the tables.
        batch_size: Rows read and rewritten per round trip.
        dry_run: Only count the values per key id.
        progress: Called with (values done, values to do) after each batch.
        store_filterable: The fields a store item stored in clear keeps
            readable once sealed (the store's `filterable`; only with
            `allow_plaintext`): the rest of its readable copy goes.

    Raises:
        DecryptionError: A value cannot be decrypted with the keys given
            (nothing after it is rotated; the message names the row).

    Example:
        >>> serde = EncryptedSerde(keys={"k2": new_key, "k1": old_key})  # doctest: +SKIP
        >>> rotate_key(DSN, serde).remaining  # doctest: +SKIP
        {}
    """
    serde = EncryptedSerde.from_env() if serde is None else serde
    if not isinstance(serde, EncryptedSerde):
        raise InvalidInputError(f"rotate_key needs an EncryptedSerde, not {type(serde).__name__}")
    with _saver(conn, serde, schema) as saver:
        sweep = rotation_sweep(
            saver,
            batch_size=batch_size,
            dry_run=dry_run,
            progress=progress,
            store_filterable=store_filterable,
        )
        report: RotationReport = saver.run_each(sweep, name="rotate_key")
    return report
