"""Named SQL statements, loaded once from `sql/queries.sql`.

A block starts with `-- name: NAME` (a statement) or `-- fragment: NAME` (a
piece other blocks include as `{NAME}`). `{schema}` becomes the quoted schema.

Example:
    >>> from pgcheckpoint.queries import Queries
    >>> q = Queries("tenant_a")
    >>> 'FROM "tenant_a".pgc_checkpoints' in q["thread_heads"]
    True
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache

from psycopg import sql

from .resources import sql_dir

_BLOCK = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)


@cache
def _blocks() -> tuple[dict[str, str], dict[str, str]]:
    text = (sql_dir() / "queries.sql").read_text(encoding="utf-8")
    statements: dict[str, str] = {}
    fragments: dict[str, str] = {}
    parts = _BLOCK.split(text)
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        target = statements if kind == "name" else fragments
        if name in statements or name in fragments:
            raise ValueError(f"sql block {name!r} is defined twice in queries.sql")
        target[name] = body.strip()
    return statements, fragments


def statement_names() -> frozenset[str]:
    """The names of every statement in `queries.sql`.

    Example:
        >>> "put_checkpoint" in statement_names()
        True
    """
    return frozenset(_blocks()[0])


def _uncommented(text: str) -> str:
    # The comments in queries.sql are for its readers: sent, they made most long
    # statements pass psycopg's 4 KiB limit for caching a statement's parsed
    # placeholders (70 us a call for delta_channel_history). Fragments lose
    # theirs before they are included, as some are included mid-line.
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


def _tagged(name: str, text: str) -> str:
    # one line naming the statement stays, for pg_stat_activity and pg_stat_statements
    return f"-- pgcheckpoint: {name}\n" + _uncommented(text)


class Queries(Mapping[str, str]):
    """The statements rendered for one schema, by name.

    Each starts with a comment naming it (`-- pgcheckpoint: NAME`), which
    `pg_stat_activity` and `pg_stat_statements` show; the other comments of
    `queries.sql` are left out.

    Args:
        schema: The Postgres schema holding the tables.

    Example:
        >>> Queries()["schema_revision"].splitlines()[0]
        '-- pgcheckpoint: schema_revision'
    """

    def __init__(self, schema: str = "public") -> None:
        statements, fragments = _blocks()
        schema_sql = sql.Identifier(schema).as_string(None)
        rendered_fragments = {
            name: _uncommented(body.replace("{schema}", schema_sql))
            for name, body in fragments.items()
        }
        self.schema = schema
        self._rendered: dict[str, str] = {}
        for name, body in statements.items():
            text = body.replace("{schema}", schema_sql)
            # fragments may include fragments: expand until nothing changes
            for _ in range(len(rendered_fragments) + 1):
                expanded = text
                for frag, frag_body in rendered_fragments.items():
                    expanded = expanded.replace("{" + frag + "}", frag_body)
                if expanded == text:
                    break
                text = expanded
            self._rendered[name] = _tagged(name, text)

    def __getitem__(self, name: str) -> str:
        try:
            return self._rendered[name]
        except KeyError:
            raise KeyError(f"no SQL statement named {name!r} in queries.sql") from None

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._rendered)

    def __len__(self) -> int:
        return len(self._rendered)
