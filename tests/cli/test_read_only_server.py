"""A command that writes, pointed at a server that takes no writes, says so in one line."""

from __future__ import annotations

import base64

import pytest

from pgcheckpoint.cli import EXIT_FAILED, main

# what a hot standby answers to a write; a session with this default answers the same
READ_ONLY = "-c default_transaction_read_only=on"


@pytest.mark.parametrize(
    "command",
    [
        ["prune", "--keep-last", "1"],
        ["rotate-key", "--allow-plaintext"],
        ["downgrade", "base"],
    ],
    ids=lambda c: c[0],
)
def test_a_write_on_a_read_only_server_names_the_primary(
    db_dsn: str,
    threads: dict[str, str],
    command: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGOPTIONS", READ_ONLY)
    monkeypatch.setenv("PGCHECKPOINT_AES_KEYS", "k1:" + base64.b64encode(bytes(range(32))).decode())
    assert main([*command, "--dsn", db_dsn]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "ReadOnlySqlTransaction" in err
    assert "point --dsn at the primary" in err
