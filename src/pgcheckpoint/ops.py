"""What an operation is: statements yielded, rows received, no I/O.

An `Op` is a generator. It yields `Stmt`s (a statement of `sql/queries/` by
name, with its parameters), receives the rows of each, and returns the
operation's result. A statement that fails raises its psycopg error at the
op's `yield`, where the op may handle it. A `Sweep` yields whole ops, each run
in a transaction of its own, and receives each op's result (or its error).
`PostgresSaver.run(op)` / `run_each(sweep)` and their async twins are the one
way to run either (`pgcheckpoint.drivers.oprun` holds the rule for starting an
op over after a lost connection). This module imports nothing of the package:
every layer may use it.

Example:
    >>> from pgcheckpoint.ops import Stmt
    >>> Stmt("thread_heads", {"thread_ids": ["t1"]}, fetch=True).name
    'thread_heads'
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["On", "Op", "Row", "Stmt", "Sweep"]

T = TypeVar("T")
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Stmt:
    """One named statement to run, with its parameters.

    Attributes:
        name: The statement's name in `sql/queries/`.
        params: Named parameters.
        fetch: Whether the operation needs the rows back.
        count: Whether it needs only how many rows the statement affected (an
            INSERT without RETURNING): it gets one empty row per row, and no row
            is sent back or decoded.

    Example:
        >>> Stmt("delete_thread", {"thread_id": "t1"}).fetch
        False
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    fetch: bool = False
    count: bool = False


Op = Generator[Stmt, list[Row], T]


@dataclass(frozen=True, slots=True)
class On:
    """An op a sweep runs on another saver: the importer reads its source this way.

    Attributes:
        saver: The saver (sync or async, like the one running the sweep) to run it on.
        op: The op.

    Example:
        >>> On(source_saver, read_page_op(...))  # doctest: +SKIP
    """

    saver: Any
    op: Op[Any]


# What a sweep yields (an op, or an op for another saver), what it receives
# back (each op's result), and what it returns.
Sweep = Generator["Op[Any] | On", Any, T]
