"""Threads the official saver's tables hold and pgcheckpoint's do not.

Switching from langgraph-checkpoint-postgres is one import line, but what the
official saver wrote stays in its tables (`checkpoints`, `checkpoint_blobs`,
`checkpoint_writes`), which pgcheckpoint does not read: until `pgcheckpoint
import-langgraph` copies them, those threads look empty. `setup()`,
`pgcheckpoint migrate` and each saver's first read look for such threads with
`official_threads_op` (one small statement; a second, bounded one when the
official tables are there) and warn on the `pgcheckpoint` logger, naming the
command.

Example:
    >>> from pgcheckpoint.core.official import official_threads_op
    >>> next(official_threads_op("public")).name
    'official_tables_readable'
"""

from __future__ import annotations

from dataclasses import dataclass

from ..commands import schema_option
from ..ops import Op, Stmt
from ..telemetry.activity import Plain, log_context, logger

__all__ = ["SAMPLE_ROWS", "OfficialThreads", "official_threads_op", "warn_official_threads"]

# Checkpoint rows of the official table looked at (its last ones in key order):
# enough to see an import that never ran or stopped half way, bounded on big tables.
SAMPLE_ROWS = 10_000


@dataclass(frozen=True)
class OfficialThreads:
    """Threads of the official saver that pgcheckpoint's tables lack.

    Attributes:
        schema: The schema holding both savers' tables.
        looked_at: Threads looked at (those of the last `SAMPLE_ROWS` rows).
        missing: How many of them pgcheckpoint's tables lack.
        example: One of those.

    Example:
        >>> found = OfficialThreads("public", looked_at=3, missing=2, example="t1")
        >>> "pgcheckpoint import-langgraph" in found.message()
        True
    """

    schema: str
    looked_at: int
    missing: int
    example: str

    def message(self) -> str:
        """The warning, with the command that copies the threads.

        Example:
            >>> OfficialThreads("tenant_a", 5, 5, "t1").message().endswith(
            ...     "--schema tenant_a --from-schema tenant_a`")
            True
        """
        return _WARNING % self._warning_args()

    def _warning_args(self) -> tuple[object, ...]:
        # the example is a thread id: a log record withholds it unless ids are on
        option = schema_option(self.schema)
        command = f"pgcheckpoint import-langgraph{option}"
        if option:
            command += option.replace("--schema", "--from-schema", 1)
        return Plain(self.schema), self.missing, self.looked_at, self.example, Plain(command)


_WARNING = (
    "the tables of langgraph-checkpoint-postgres in schema %r hold threads that "
    "pgcheckpoint's tables do not (%d of the %d looked at, e.g. %r): pgcheckpoint does "
    "not read those tables, so these threads look empty; copy them with `%s`"
)


def official_threads_op(schema: str) -> Op[OfficialThreads | None]:
    """Look for threads the official saver's tables in `schema` hold and pgcheckpoint's lack.

    None when there are no official tables (or this role may not read them),
    or every thread looked at is in pgcheckpoint's tables too.

    Example:
        >>> next(official_threads_op("tenant_a")).params
        {'schema': 'tenant_a'}
    """
    rows = yield Stmt("official_tables_readable", {"schema": schema}, fetch=True)
    if not rows:
        return None
    rows = yield Stmt("official_threads_missing", {"sample": SAMPLE_ROWS}, fetch=True)
    if not rows or not rows[0]["missing"]:
        return None
    row = rows[0]
    return OfficialThreads(schema, int(row["looked_at"]), int(row["missing"]), row["example"])


def warn_official_threads(found: OfficialThreads | None, *, thread_ids: bool = False) -> None:
    """Log the warning for what `official_threads_op` found, if anything.

    `thread_ids`: the saver's `Telemetry(thread_ids=True)`, which lets the
    record show the example thread.

    Example:
        >>> warn_official_threads(None)
    """
    if found is not None:
        extra = log_context("official_threads", thread_ids=thread_ids)
        logger.warning(_WARNING, *found._warning_args(), extra=extra)
