"""Every place that takes a connection string takes the forms people write.

The test server's conninfo is turned into a SQLAlchemy-style URL, and, on the
embedded server (`PGCHECKPOINT_TEST_DSN=embedded`, a step of `.ci/run`), its
host is a Unix-socket directory, carried in the URL's query.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from support.cli import cli_env
from support.dsn import url_of

from pgcheckpoint import AsyncPostgresSaver, EncryptedSerde, PostgresSaver, rotate_key
from pgcheckpoint.resources import migrations_dir
from pgcheckpoint.schema.migrate import current, head, upgrade


def forms(dsn: str) -> list[str]:
    return [dsn, url_of(dsn), url_of(dsn, "postgresql+psycopg")]


@pytest.mark.parametrize("pool", [False, True], ids=["conn", "pool"])
def test_the_sync_saver_opens_from_each_form(db_dsn: str, pool: bool) -> None:
    for n, dsn in enumerate(forms(db_dsn)):
        with PostgresSaver.from_conn_string(dsn, pool=pool) as saver:
            stored = saver.put(
                generate_config(f"t{n}"), generate_checkpoint(), generate_metadata(), {}
            )
            assert saver.get_tuple(stored) is not None


@pytest.mark.parametrize("pool", [False, True], ids=["conn", "pool"])
async def test_the_async_saver_opens_from_each_form(db_dsn: str, pool: bool) -> None:
    for n, dsn in enumerate(forms(db_dsn)):
        async with AsyncPostgresSaver.from_conn_string(dsn, pool=pool) as saver:
            stored = await saver.aput(
                generate_config(f"t{n}"), generate_checkpoint(), generate_metadata(), {}
            )
            assert await saver.aget_tuple(stored) is not None


def test_migrations_and_key_rotation_take_each_form(empty_db_dsn: str) -> None:
    url = url_of(empty_db_dsn, "postgresql+psycopg")
    assert upgrade(url) is None
    assert current(url) == head()
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()  # setup() opens its own connection from the saver's
    report = rotate_key(url, EncryptedSerde(keys={"k1": bytes(32)}), dry_run=True)
    assert report.to_rotate == 0


def test_plain_alembic_takes_a_database_url(empty_db_dsn: str) -> None:
    ini = str(migrations_dir() / "alembic.ini")
    url = url_of(empty_db_dsn, "postgresql+psycopg")
    done = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", ini, "upgrade", "head"],
        env=cli_env(DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert current(empty_db_dsn) == head()
