"""Write the named statements the pg_cron procedure runs into `sql/retention.sql`.

The procedure runs inside PostgreSQL, where the statement files of
`sql/queries/` cannot be loaded, so a statement it shares with the Python
code is rendered into it between two marker lines:

    -- statement store_sweep (limit => store_batch): rendered from ...
    -- end of statement store_sweep

as `EXECUTE format($sql$ ... $sql$, schema_name) USING store_batch;`: the
statement as `pgcheckpoint.statements.queries` loads it (fragments in,
comments out), with `{schema}` as `%1$I` (format's quoted identifier) and each
`%(name)s` as a `$n` bound to the plpgsql expression the marker line gives it;
`%%` (a literal %) means the same to format() as to psycopg. The statement
files stay the one source: CI fails when this file and a fresh render differ
(tests/unit/test_retention_sql.py).

Usage (what `make retention-sql` runs):
    python tools/render_retention.py            # rewrite sql/retention.sql
    python tools/render_retention.py --check    # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RETENTION_SQL = ROOT / "sql" / "retention.sql"
_START = re.compile(r"^(?P<indent> *)-- statement (?P<name>\w+) \((?P<binds>[^)]*)\):")
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


class RenderError(Exception):
    """A marker or a statement that cannot be rendered."""


def render(text: str) -> str:
    """`text` with the statement between each pair of marker lines rendered anew."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        start = _START.match(lines[i])
        out.append(lines[i])
        i += 1
        if start is None:
            continue
        name = start["name"]
        end = f"-- end of statement {name}"
        # the marker's comment goes on over the lines that follow it
        while i < len(lines) and lines[i].lstrip().startswith("--") and lines[i].strip() != end:
            out.append(lines[i])
            i += 1
        while i < len(lines) and lines[i].strip() != end:
            i += 1  # the statement rendered before
        if i == len(lines):
            raise RenderError(f"statement {name}: no line {end!r} after its marker")
        out += _execute(name, start["binds"], start["indent"])
        out.append(lines[i])
        i += 1
    return "".join(out)


def _execute(name: str, binds: str, indent: str) -> list[str]:
    from pgcheckpoint.statements.queries import statement_template

    bound = {}
    for part in filter(None, (p.strip() for p in binds.split(","))):
        param, arrow, expression = part.partition("=>")
        if not arrow or not param.strip() or not expression.strip():
            raise RenderError(f"statement {name}: {part!r} is not `param => expression`")
        bound[param.strip()] = expression.strip()
    body = statement_template(name)
    if "$sql$" in body:
        raise RenderError(f"statement {name} holds $sql$, which would end its quoting")
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        param = match.group(1)
        if param not in bound:
            raise RenderError(f"statement {name} takes %({param})s: bind it in its marker line")
        if param not in order:
            order.append(param)
        return f"${order.index(param) + 1}"

    body = _PLACEHOLDER.sub(number, body.replace("{schema}", "%1$I"))
    if "%" in body.replace("%%", "").replace("%1$I", ""):
        raise RenderError(f"statement {name} holds a % that format() would read")
    unused = sorted(set(bound) - set(order))
    if unused:
        raise RenderError(f"statement {name} takes no {', '.join(unused)}")
    pad = indent + "    "
    rendered = [f"{indent}EXECUTE format($sql$\n"]
    rendered += [f"{pad}{line}\n" if line.strip() else "\n" for line in body.splitlines()]
    using = f" USING {', '.join(bound[p] for p in order)}" if order else ""
    rendered.append(f"{indent}$sql$, schema_name){using};\n")
    return rendered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    # the checkout's statements, not those of an installed copy
    sys.path.insert(0, str(ROOT / "src"))
    text = RETENTION_SQL.read_text(encoding="utf-8")
    fresh = render(text)
    if args.check:
        if fresh != text:
            print(f"{RETENTION_SQL} is stale: run `make retention-sql`", file=sys.stderr)
            return 1
        return 0
    if fresh != text:
        RETENTION_SQL.write_text(fresh, encoding="utf-8")
        print(f"wrote {RETENTION_SQL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
