"""`pgcheckpoint rotate-key`: its options, and the keys it needs before it connects.

The command run end to end on a database, under concurrent writes, is in
tests/integration/test_encryption.py with the rotation it drives.
"""

from __future__ import annotations

import argparse

import pytest

from pgcheckpoint.cli import main, rotation


def test_rotate_key_command_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    rotation.register(parser.add_subparsers())
    args = parser.parse_args(["rotate-key", "--dry-run", "--batch-size", "7", "--dsn", "x"])
    assert args.dry_run and args.batch_size == 7 and args.dsn == "x"
    assert args.handler is rotation.rotate_key_command
    with pytest.raises(SystemExit):
        parser.parse_args(["rotate-key", "--batch-size", "0"])


def test_rotate_key_command_without_keys_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PGCHECKPOINT_AES_KEYS", raising=False)
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    assert main(["rotate-key", "--dsn", "postgresql://nobody@127.0.0.1:1/x"]) == 2
    assert "PGCHECKPOINT_AES_KEYS" in capsys.readouterr().err
