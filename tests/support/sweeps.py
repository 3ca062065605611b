"""Running a sweep without a database: each op it yields answered with canned rows.

`run_sweep` does what `run_each` does (`pgcheckpoint.drivers.runner_async`):
it runs every op the sweep yields, sends its result back, or throws its error
in, and unwraps `On(saver, op)`. Each op is answered by a script of its own, a
list of replies, one per statement: rows, or an exception raised at that
statement's `yield`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pgcheckpoint.ops import On, Op, Stmt, Sweep
from pgcheckpoint.statements.queries import statement_names

Script = list[Any]


@dataclass
class Ran:
    """One op the sweep yielded: its statements, the saver it ran on, how it ended."""

    stmts: list[Stmt] = field(default_factory=list)
    on: Any = None  # the saver of an `On(saver, op)`, None for the sweep's own
    error: BaseException | None = None

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stmts]

    def stmt(self, name: str) -> Stmt:
        """The op's one statement named `name`."""
        (found,) = [s for s in self.stmts if s.name == name]
        return found


def run_op(op: Op[Any], script: Script, ran: Ran) -> Any:
    """Run one op on its script, recording its statements in `ran`; return its result.

    Fails when a statement has no name in `sql/queries/`, when the op asks for
    more statements than the script answers, or when it ends before using them all.
    """
    replies = list(script)
    try:
        stmt = next(op)
        while True:
            assert isinstance(stmt, Stmt), f"an op yielded {stmt!r}, not a Stmt"
            assert stmt.name in statement_names(), f"no statement named {stmt.name!r}"
            ran.stmts.append(stmt)
            if not replies:
                raise AssertionError(f"the op asked for more than its script: {stmt}")
            reply = replies.pop(0)
            stmt = op.throw(reply) if isinstance(reply, BaseException) else op.send(reply)
    except StopIteration as done:
        assert not replies, f"the op ended with {len(replies)} replies of its script unused"
        return done.value


def run_sweep(sweep: Sweep[Any], scripts: list[Script]) -> tuple[list[Ran], Any]:
    """Run a sweep, each op it yields on the next script; return what ran and its result.

    An op's error (an exception the script raised that the op let through, or
    one the op raised itself) is thrown into the sweep, as `run_each` does; the
    sweep's own error propagates. Fails when the sweep yields more ops than
    there are scripts, or ends before using them all.
    """
    ran: list[Ran] = []
    scripts = list(scripts)
    try:
        step = next(sweep)
        while True:
            if not scripts:
                raise AssertionError(f"the sweep ran more ops than scripted: {step!r}")
            this = Ran()
            ran.append(this)
            op = step
            if isinstance(step, On):
                this.on, op = step.saver, step.op
            try:
                result = run_op(op, scripts.pop(0), this)
            except AssertionError:
                raise
            except Exception as exc:
                this.error = exc
                step = sweep.throw(exc)
            else:
                step = sweep.send(result)
    except StopIteration as done:
        assert not scripts, f"the sweep ended with {len(scripts)} scripts unused"
        return ran, done.value
