"""What telemetry needs from the core and the library, without a database or OpenTelemetry."""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from typing import Any

import pytest

from pgcheckpoint.core.deletes import delete_thread_op
from pgcheckpoint.core.reads import get_tuple_op
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.core.writes import put_writes_op
from pgcheckpoint.drivers.oprun import OpRun
from pgcheckpoint.errors import DecryptionError, InvalidInputError
from pgcheckpoint.maintenance.importer import import_sweep
from pgcheckpoint.maintenance.stats import storage_stats_op
from pgcheckpoint.ops import Stmt
from pgcheckpoint.telemetry.activity import (
    Activity,
    Plain,
    current_activity,
    log_context,
    logger,
    operation_name,
)
from pgcheckpoint.telemetry.config import Telemetry
from pgcheckpoint.telemetry.exceptions import recorded_text, withheld_message

SOURCE = Path(__file__).resolve().parents[2] / "src" / "pgcheckpoint"
# programs that talk to a terminal: the command line, and the demo it runs
PRINTS_ALLOWED = ("cli/", "contrib/demo.py")


def test_an_operation_is_named_after_its_op_or_sweep_function() -> None:
    core = SaverState()
    config = {"configurable": {"thread_id": "t1", "checkpoint_id": "c1"}}
    assert operation_name(get_tuple_op(core, config)) == "get_tuple"
    assert operation_name(put_writes_op(core, config, [("a", 1)], "task")) == "put_writes"
    assert operation_name(delete_thread_op(core, "t1")) == "delete_thread"
    assert operation_name(storage_stats_op()) == "storage_stats"
    assert operation_name(import_sweep(None, None)) == "import"  # type: ignore[arg-type]
    assert operation_name(object()) == "operation"


def test_a_record_names_the_operation_and_statement_in_progress(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pgcheckpoint")

    def checking_op():  # type: ignore[no-untyped-def]
        rows = yield Stmt("version_table_exists", {"schema": "public"}, fetch=True)
        logger.info("checked")
        rows = yield Stmt("schema_revision", fetch=True)
        return rows

    logger.info("before")
    with Activity(subject=checking_op()) as sweep:
        with Activity("check") as activity:
            run = OpRun(checking_op(), activity=activity)
            assert run.send([{"present": True}]).name == "schema_revision"
            assert current_activity() is activity
        assert current_activity() is sweep
        logger.warning("after the op")
    fields = [(r.pgcheckpoint_operation, r.pgcheckpoint_statement) for r in caplog.records]
    assert fields == [
        (None, None),
        ("check", "version_table_exists"),
        # a sweep's record names the statement its last op was at
        ("checking", "schema_revision"),
    ]


def _calls(name: str) -> list[tuple[Path, ast.Call]]:
    found = []
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called == name:
                    found.append((path, node))
    return found


def test_the_library_prints_nothing_outside_the_command_line() -> None:
    printing = [
        f"{path.relative_to(SOURCE)}:{call.lineno}"
        for path, call in _calls("print")
        if not str(path.relative_to(SOURCE)).startswith(PRINTS_ALLOWED)
    ]
    assert printing == []


def test_the_library_logs_through_the_pgcheckpoint_logger_only() -> None:
    names = {
        (str(path.relative_to(SOURCE)), ast.unparse(call.args[0]) if call.args else "")
        for path, call in _calls("getLogger")
    }
    assert names == {("telemetry/activity.py", "'pgcheckpoint'")}


def test_only_the_otel_module_imports_opentelemetry() -> None:
    importing = set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            if any(m.partition(".")[0] == "opentelemetry" for m in modules):
                importing.add(str(path.relative_to(SOURCE)))
    assert importing == {"telemetry/otel.py"}


# -- what a log record shows ----------------------------------------------------------


class _Hostile:
    """An argument whose text is an id."""

    def __str__(self) -> str:
        return "alice@example.com"

    __repr__ = __str__


def _logged(caplog: pytest.LogCaptureFixture, *args: object, **kwargs: Any) -> logging.LogRecord:
    caplog.clear()
    logger.warning(*args, **kwargs)
    (record,) = caplog.records
    return record


def test_a_record_withholds_every_argument_that_could_name_a_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pgcheckpoint")
    try:
        raise DecryptionError("thread 'alice@example.com' failed authentication")
    except DecryptionError as exc:
        error = exc
    record = _logged(
        caplog,
        "thread %r, %s rows in %.1f s (%s), %s, %s, %s",
        "alice@example.com",
        3,
        0.25,
        Plain("put_checkpoint"),
        error,
        _Hostile(),
        {"thread_id": "alice@example.com"},
        exc_info=error,
    )
    assert record.getMessage() == (
        "thread <withheld>, 3 rows in 0.2 s (put_checkpoint), "
        "pgcheckpoint.errors.DecryptionError, <withheld>, <withheld> "
        "[pgcheckpoint.errors.DecryptionError; traceback withheld]"
    )
    assert "alice" not in caplog.text
    # an object logged as the message, and arguments by name
    assert _logged(caplog, _Hostile()).getMessage() == "<withheld>"
    named = _logged(caplog, "%(thread)s at %(n)d", {"thread": "alice@example.com", "n": 2})
    assert named.getMessage() == "<withheld> at 2"


def test_a_record_shows_the_ids_of_an_operation_whose_saver_records_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pgcheckpoint")
    with Activity("put", thread_ids=True):
        assert _logged(caplog, "thread %r", "alice").getMessage() == "thread 'alice'"
    with Activity("put"):
        assert _logged(caplog, "thread %r", "alice").getMessage() == "thread <withheld>"
    # outside an operation, as its saver says
    extra = log_context("lock_thread", "unlock_thread", thread_ids=True)
    assert _logged(caplog, "thread %r", "alice", extra=extra).getMessage() == "thread 'alice'"
    assert _logged(caplog, "thread %r", "alice").getMessage() == "thread <withheld>"


def _module_strings(tree: ast.Module) -> set[str]:
    # names bound at module level to a string literal, or to a dict of them
    def text(node: ast.expr | None) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    return {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        and (
            text(node.value)
            or (isinstance(node.value, ast.Dict) and all(map(text, node.value.values)))
        )
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def test_every_log_message_of_the_library_is_constant_text() -> None:
    # the data goes in the arguments, which a record withholds with ids off;
    # an f-string message would carry it past that
    levels = {"debug", "info", "warning", "error", "exception", "critical", "log"}
    bad = []
    for path in SOURCE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = _module_strings(tree)
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in levels
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "logger"
            ):
                continue
            args = node.args[1:] if node.func.attr == "log" else node.args
            message = args[0] if args else None
            constant = isinstance(message, ast.Constant) and isinstance(message.value, str)
            if isinstance(message, ast.Subscript):  # a message of a dict of them
                message = message.value
            named = isinstance(message, ast.Name) and message.id in constants
            if not (constant or named):
                bad.append(f"{path.relative_to(SOURCE)}:{node.lineno}")
    assert bad == []


# -- what a span records of an exception ----------------------------------------------


def test_with_ids_off_an_exception_is_recorded_by_its_type_and_frames_only() -> None:
    def store(thread_id: str) -> None:
        try:
            {}[thread_id]
        except KeyError as exc:
            raise InvalidInputError(f"cannot store {thread_id!r}") from exc

    with pytest.raises(InvalidInputError) as caught:
        store("CORP\\alice")
    message, stack = recorded_text(caught.value, thread_ids=False)
    assert message == withheld_message(caught.value)
    assert message.startswith("An argument cannot be stored; nothing was written.")
    assert "alice" not in message + stack
    assert "{}[thread_id]" not in stack  # no source line: a literal id could be one
    assert stack.index("KeyError") < stack.index("pgcheckpoint.errors.InvalidInputError")
    assert "in store" in stack
    # with ids on, as Python formats it
    message, stack = recorded_text(caught.value, thread_ids=True)
    assert message == "cannot store 'CORP\\\\alice'" and "{}[thread_id]" in stack


def test_an_exception_whose_text_cannot_be_made_is_recorded_all_the_same() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    message, stack = recorded_text(Broken(), thread_ids=True)
    assert message == withheld_message(Broken()) and "Broken" in stack


def test_the_thread_ids_setting_takes_a_bool_only() -> None:
    with pytest.raises(InvalidInputError, match=r"thread_ids must be True or False, not str$"):
        Telemetry(thread_ids="no")  # type: ignore[arg-type]
    assert Telemetry(thread_ids=True).thread_ids is True


def test_a_lock_threads_id_of_any_type_changes_no_outcome() -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    provider = sdk.TracerProvider()

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    telemetry = Telemetry(thread_ids=True, tracer_provider=provider)
    try:
        with telemetry.observe(name="lock_thread", thread_id=Unprintable()) as activity:  # type: ignore[arg-type]
            assert current_activity() is activity
        assert current_activity() is None
    finally:
        provider.shutdown()
