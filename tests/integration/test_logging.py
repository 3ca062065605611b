"""The `pgcheckpoint` logger: each record names the operation and the statement it is at."""

from __future__ import annotations

import logging

import pytest
from support.savers import Saver

from pgcheckpoint import AsyncPostgresSaver
from pgcheckpoint.ops import Op, Row, Stmt
from pgcheckpoint.telemetry.activity import logger


def noisy_op(schema: str) -> Op[list[Row]]:
    rows = yield Stmt("version_table_exists", {"schema": schema}, fetch=True)
    logger.info("the version table is there: %s", rows[0]["present"])
    return rows


async def test_a_record_logged_in_an_operation_names_it_and_its_statement(
    saver: Saver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgcheckpoint")
    if isinstance(saver, AsyncPostgresSaver):
        await saver.run(noisy_op(saver.schema), name="check_version")
    else:
        saver.run(noisy_op(saver.schema), name="check_version")
    (record,) = [r for r in caplog.records if "version table" in r.getMessage()]
    assert record.name == "pgcheckpoint"
    assert record.pgcheckpoint_operation == "check_version"
    assert record.pgcheckpoint_statement == "version_table_exists"
