"""What telemetry needs from the core and the library, without a database or OpenTelemetry."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from pgcheckpoint.core.deletes import delete_thread_op
from pgcheckpoint.core.reads import get_tuple_op
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.core.writes import put_writes_op
from pgcheckpoint.drivers.oprun import OpRun
from pgcheckpoint.maintenance.importer import import_sweep
from pgcheckpoint.maintenance.stats import storage_stats_op
from pgcheckpoint.ops import Stmt
from pgcheckpoint.telemetry.activity import Activity, current_activity, logger, operation_name

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
