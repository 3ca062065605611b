"""The pg_cron procedure runs the store's sweep statement as `sql/queries/` defines it.

`sql/retention.sql` runs inside PostgreSQL and cannot load the statement files:
`tools/render_retention.py` writes the statements it shares into it, and these
tests fail when the file and a fresh render differ. What the procedure does is
tested on a database in tests/integration/test_retention.py.
"""

from __future__ import annotations

import pytest
from render_retention import RETENTION_SQL, RenderError, render

from pgcheckpoint.resources import sql_dir
from pgcheckpoint.store.batch import SWEEP_BATCH

MARKER = "    -- statement store_sweep (limit => store_batch): the sweep\n"
END = "    -- end of statement store_sweep\n"


def test_the_checked_in_procedure_equals_a_fresh_render() -> None:
    text = RETENTION_SQL.read_text(encoding="utf-8")
    assert render(text) == text, "sql/retention.sql is stale: run `make retention-sql`"
    # the file the package ships is that one
    assert (sql_dir() / "retention.sql").read_text(encoding="utf-8") == text


def test_the_procedure_sweeps_in_pages_of_the_stores_size() -> None:
    text = RETENTION_SQL.read_text(encoding="utf-8")
    assert f"store_batch CONSTANT int := {SWEEP_BATCH};" in text


def test_a_render_puts_the_statement_between_its_markers_as_format_takes_it() -> None:
    rendered = render(f"BEGIN\n{MARKER}    stale text\n{END}END\n")
    lines = rendered.splitlines()
    assert lines[:3] == ["BEGIN", MARKER.rstrip("\n"), "    EXECUTE format($sql$"]
    assert "        DELETE FROM %1$I.pgc_store s" in lines
    assert "            LIMIT $1" in lines
    assert lines[-3:] == ["    $sql$, schema_name) USING store_batch;", END.rstrip("\n"), "END"]
    assert "stale text" not in rendered and "{schema}" not in rendered
    assert render(rendered) == rendered


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (MARKER, "no line '-- end of statement store_sweep'"),
        (MARKER.replace("limit", "max"), r"takes %\(limit\)s: bind it"),
        (MARKER.replace("limit => store_batch", "limit => n, extra => 1"), "takes no extra"),
        (MARKER.replace("limit => store_batch", "limit store_batch"), "not `param => expr"),
    ],
)
def test_a_marker_that_cannot_be_rendered_says_why(text: str, message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render(text + END if "no line" not in message else text)
