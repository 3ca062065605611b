"""Running the core's ops without a database: each statement answered with canned rows."""

from __future__ import annotations

from typing import Any

from pgcheckpoint.ops import Op, Stmt
from pgcheckpoint.queries import statement_names


def drive(op: Op[Any], replies: list[Any]) -> tuple[list[Stmt], Any]:
    """Run an op on canned replies: each a list of rows, or an exception raised at the yield.

    Returns the statements the op asked for, one per reply used, and its result.
    Fails when a statement has no name in `sql/queries/`, or when the op asks
    for more statements than there are replies.
    """
    sent: list[Stmt] = []
    try:
        stmt = next(op)
        for reply in replies:
            sent.append(stmt)
            assert stmt.name in statement_names(), f"no statement named {stmt.name!r}"
            stmt = op.throw(reply) if isinstance(reply, BaseException) else op.send(reply)
        raise AssertionError(f"the op asked for more than the canned replies: {stmt}")
    except StopIteration as done:
        return sent, done.value
