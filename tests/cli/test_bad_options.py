"""Options out of range end in one line and exit 2, never a traceback."""

from __future__ import annotations

import pytest

from pgcheckpoint.cli import EXIT_USAGE, main


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["prune", "--older-than", "99999999999999w"], "longer than 1000 years"),
        (["prune", "--older-than", "1001000d"], "longer than 1000 years"),
        (["prune", "--keep-last", "99999999999"], "at most 2147483647"),
        (["prune", "--keep-last", "5", "--batch-size", "99999999999"], "at most 2147483647"),
        (["prune", "--keep-last", "5", "--max-seconds", "nan"], "not a number of seconds"),
        (["prune", "--keep-last", "5", "--max-seconds", "inf"], "not a number of seconds"),
        (["threads", "--since", "99999999999d"], "more than 1000 years"),
        (["threads", "--limit", "99999999999"], "at most 2147483647"),
        (["show", "t", "--limit", "0"], "at least 1"),
        (["stats", "--top", "99999999999"], "at most 2147483647"),
        (["migrate", "--lock-timeout", "nan"], "not a number of seconds"),
        (["migrate", "--lock-timeout", "-1"], "not a number of seconds"),
        (["rotate-key", "--batch-size", "99999999999"], "at most 2147483647"),
        (["import-langgraph", "--batch-size", "0"], "at least 1"),
    ],
)
def test_out_of_range_options_exit_2_with_one_line(
    command: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--dsn", "postgresql://nobody@127.0.0.1:1/none"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert says in err
    assert "Traceback" not in err
