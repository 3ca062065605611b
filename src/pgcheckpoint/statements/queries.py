"""Named SQL statements, loaded once from the files of `sql/queries/`.

Each file holds the statements of one subsystem; `_fragments.sql` the pieces
they share. A block starts with `-- name: NAME` (a statement) or
`-- fragment: NAME` (a piece other blocks include as `{NAME}`), and `{schema}`
becomes the quoted schema, once the fragments are in: a schema named
`x{level_walk}` stays a name. Its `%` signs are doubled, as statements run with
psycopg's placeholders. Header lines right after a statement's name state facts
the drivers act on: `-- retry: safe` and `-- prepare: never`.

Example:
    >>> from pgcheckpoint.statements.queries import Queries
    >>> q = Queries("tenant_a")
    >>> 'FROM "tenant_a".pgc_checkpoints' in q["thread_heads"]
    True
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache

from psycopg import sql

from ..resources import sql_dir
from ..validate import check_schema

__all__ = ["Queries", "Statement", "retry_safe", "statement_names", "statement_template"]

_BLOCK = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)
_FACT = re.compile(r"-- (retry|prepare): (\w+)\s*$")
_FACTS = {("retry", "safe"), ("prepare", "never")}


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement as its file defines it.

    Attributes:
        name: Its name.
        body: Its SQL, with `{schema}` and `{fragment}` placeholders.
        file: The file of `sql/queries/` that defines it.
        retry_safe: Marked `-- retry: safe`.
        prepare: False when marked `-- prepare: never`, else True: prepared at its
            first execution on a connection, as `prepare_threshold=0` does, whatever
            threshold the caller's connection has (with psycopg's default, 5, each
            statement is parsed and planned anew at its first five calls on each
            connection). A connection
            with `prepare_threshold=None` (pgbouncer users) prepares nothing.

    Example:
        >>> _blocks()[0]["put_checkpoint"].retry_safe
        True
    """

    name: str
    body: str
    file: str
    retry_safe: bool = False
    prepare: bool = True


def _facts(name: str, body: str) -> tuple[bool, bool]:
    retry, prepare = False, True
    for line in body.splitlines():
        match = _FACT.match(line.strip())
        if match is None:
            break
        if match.groups() not in _FACTS:
            raise ValueError(f"sql statement {name!r} has an unknown header line {line!r}")
        if match.group(1) == "retry":
            retry = True
        else:
            prepare = False
    return retry, prepare


@cache
def _blocks() -> tuple[dict[str, Statement], dict[str, str]]:
    statements: dict[str, Statement] = {}
    fragments: dict[str, str] = {}
    for path in sorted((sql_dir() / "queries").glob("*.sql")):
        parts = _BLOCK.split(path.read_text(encoding="utf-8"))
        for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
            if name in statements or name in fragments:
                raise ValueError(f"sql block {name!r} is defined twice (again in {path.name})")
            body = body.strip()
            if kind == "fragment":
                fragments[name] = body
            else:
                retry, prepare = _facts(name, body)
                statements[name] = Statement(name, body, path.name, retry, prepare)
    return statements, fragments


@cache
def _expanded() -> dict[str, str]:
    """Every statement without comments, its fragments included, `{schema}` left in."""
    statements, fragments = _blocks()
    bodies = {name: _uncommented(body) for name, body in fragments.items()}
    out = {}
    for name, stmt in statements.items():
        text = stmt.body
        # fragments may include fragments: expand until nothing changes
        for _ in range(len(bodies) + 1):
            expanded = text
            for frag, frag_body in bodies.items():
                expanded = expanded.replace("{" + frag + "}", frag_body)
            if expanded == text:
                break
            text = expanded
        out[name] = _uncommented(text)
    return out


def statement_template(name: str) -> str:
    """A statement's SQL as `Queries` renders it, but with `{schema}` left in.

    Its fragments are in and its comments out. For SQL that runs a statement
    another way: the pg_cron procedure of `sql/retention.sql` runs
    `store_sweep` through `EXECUTE format(...)` (tools/render_retention.py).

    Example:
        >>> statement_template("store_sweep").splitlines()[0]
        'DELETE FROM {schema}.pgc_store s'
    """
    try:
        return _expanded()[name]
    except KeyError:
        raise KeyError(f"no SQL statement named {name!r} in sql/queries/") from None


def statement_names() -> frozenset[str]:
    """The names of every statement in `sql/queries/`.

    Example:
        >>> "put_checkpoint" in statement_names()
        True
    """
    return frozenset(_blocks()[0])


@cache
def retry_safe(name: str) -> bool:
    """Whether statement `name` is marked `-- retry: safe`.

    Example:
        >>> retry_safe("get_latest_checkpoint"), retry_safe("delete_checkpoints")
        (True, False)
    """
    found = _blocks()[0].get(name)
    return found is not None and found.retry_safe


def _uncommented(text: str) -> str:
    # The comments are for the files' readers: sent, they made most long
    # statements pass psycopg's 4 KiB limit for caching a statement's parsed
    # placeholders (70 us a call for delta_channel_history). Fragments lose
    # theirs before they are included, as some are included mid-line.
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


class Queries(Mapping[str, str]):
    """The statements rendered for one schema, by name.

    Each starts with a comment naming it (`-- pgcheckpoint: NAME`), which
    `pg_stat_activity` and `pg_stat_statements` show; the files' other comments
    are left out. `prepare` holds, per name, the `prepare=` to execute it with.

    Args:
        schema: The Postgres schema holding the tables; any name PostgreSQL
            accepts (`pgcheckpoint.validate.check_schema`).

    Example:
        >>> Queries()["schema_revision"].splitlines()[0]
        '-- pgcheckpoint: schema_revision'
    """

    def __init__(self, schema: str = "public") -> None:
        schema = check_schema(schema)
        # the name goes in last, so nothing in it is read as a placeholder
        schema_sql = sql.Identifier(schema).as_string(None).replace("%", "%%")
        self.schema = schema
        self._rendered: dict[str, str] = {}
        self.prepare: dict[str, bool] = {}
        for name, text in _expanded().items():
            self._rendered[name] = f"-- pgcheckpoint: {name}\n" + text.replace(
                "{schema}", schema_sql
            )
            self.prepare[name] = _blocks()[0][name].prepare

    def __getitem__(self, name: str) -> str:
        try:
            return self._rendered[name]
        except KeyError:
            raise KeyError(f"no SQL statement named {name!r} in sql/queries/") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._rendered)

    def __len__(self) -> int:
        return len(self._rendered)
