"""The sync driver is generated from the async one and must not drift from it."""

from __future__ import annotations

import textwrap

import async_to_sync as tool
import pytest


def generate(source: str) -> str:
    """The generated text without its header."""
    return tool.generate(textwrap.dedent(source).lstrip()).removeprefix(tool.HEADER)


def test_saver_py_is_generated_from_aio_py() -> None:
    generated = tool.generate(tool.SOURCE.read_text(encoding="utf-8"))
    assert tool.TARGET.read_text(encoding="utf-8") == generated, (
        "src/pgcheckpoint/saver.py differs from what aio.py generates: edit aio.py, "
        "then run `make sync-twin`"
    )


def test_every_definition_of_aio_py_has_a_sync_twin_in_saver_py() -> None:
    problems = tool.twin_problems(
        tool.SOURCE.read_text(encoding="utf-8"), tool.TARGET.read_text(encoding="utf-8")
    )
    assert problems == []


def test_every_phrase_swapped_in_docstrings_is_in_aio_py() -> None:
    assert tool.stale_phrases(tool.SOURCE.read_text(encoding="utf-8")) == []


# -- the rules, on small sources ------------------------------------------------------------


def test_an_a_prefixed_async_method_loses_its_prefix_everywhere() -> None:
    out = generate('''
        class Counter:
            async def acount(self) -> int:
                """Count the rows.

                Example:
                    >>> await counter.acount()
                    3
                """
                return await self.arun("count")

            async def arun(self, name: str) -> int:
                return len(name)

            async def total(self) -> int:
                # twice `acount`, for the demo
                return await self.acount() + (await self.acount())
    ''')
    assert "acount" not in out and "arun" not in out
    assert "    def count(self) -> int:" in out
    assert "    def run(self, name: str) -> int:" in out
    assert "    def total(self) -> int:" in out  # no prefix, name kept
    assert '        return self.run("count")' in out
    assert "            >>> counter.count()\n            3\n" in out
    assert "        # twice `count`, for the demo" in out
    assert "return self.count() + (self.count())" in out


def test_async_syntax_becomes_sync() -> None:
    out = generate("""
        import asyncio
        from collections.abc import AsyncIterator
        from contextlib import asynccontextmanager

        from psycopg import AsyncConnection, Error
        from psycopg_pool import AsyncConnectionPool


        class Saver:
            def __init__(self, pool: AsyncConnectionPool[Connection]) -> None:
                self.lock = asyncio.Lock()

            @asynccontextmanager
            async def connection(self) -> AsyncIterator[AsyncConnection]:
                async with self.lock:
                    async with await AsyncConnection.connect("") as conn:
                        yield conn

            async def names(self) -> list[str]:
                async with self.connection() as conn:
                    await conn.set_autocommit(True)
                    rows = [r async for r in conn.stream("SELECT 1")]
                    async for row in conn.stream("SELECT 2"):
                        rows.append(row)
                    status = (await conn.execute("SELECT 3")).statusmessage
                await asyncio.to_thread(print, rows, status, sep="")
                return open_pool(self.pool, asynchronous=True)
    """)
    assert "async" not in out
    assert "await" not in out
    assert "import threading\n" in out
    assert "from psycopg import Connection, Error\n" in out  # sorted again
    assert "self.lock = threading.Lock()" in out
    assert "    @contextmanager\n    def connection(self) -> Iterator[Connection]:" in out
    assert 'with Connection.connect("") as conn:' in out
    assert "conn.autocommit = True" in out
    assert 'rows = [r for r in conn.stream("SELECT 1")]' in out
    assert 'for row in conn.stream("SELECT 2"):' in out
    assert 'status = conn.execute("SELECT 3").statusmessage' in out
    assert 'print(rows, status, sep="")' in out
    assert "return open_pool(self.pool)" in out


@pytest.fixture
def saver_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(tool.NAMES, "AsyncSaver", "Saver")


@pytest.mark.usefixtures("saver_names")
def test_docstrings_comments_and_strings_follow_the_renames() -> None:
    out = generate('''
        """`AsyncSaver`: for asyncio code."""


        class AsyncSaver:
            """Wraps an AsyncConnection or an `AsyncConnectionPool`.

            Example:
                >>> async with AsyncSaver.open(DSN) as saver:  # doctest: +SKIP
                ...     [t async for t in saver.alist()]
            """

            async def alist(self) -> list[int]:
                raise ValueError("pass an AsyncConnection, not an AsyncIterator")  # an AsyncSaver
    ''')
    assert '"""`Saver`: for synchronous code."""' in out
    assert "class Saver:" in out
    assert "Wraps a Connection or a `ConnectionPool`." in out
    assert ">>> with Saver.open(DSN) as saver:  # doctest: +SKIP\n" in out
    assert "...     [t for t in saver.list()]\n" in out
    assert '"pass a Connection, not an Iterator"' in out  # "an Iterator" keeps its "n"
    assert "# a Saver" in out


def test_markers_leave_out_or_put_in_lines() -> None:
    out = generate("""
        from .blocking import SyncFromThreads  # sync: from .core import SaverCore


        class Saver(SyncFromThreads):
            async def get(self) -> int:
                self.loop = get_loop()  # async-only
                # sync-only: return self.fetch_now()
                # async-only: begin
                async with self.later() as x:
                    return await x
                # async-only: end
    """)
    assert out.splitlines() == [
        "from .core import SaverCore",
        "",
        "",
        "class Saver(SyncFromThreads):",
        "    def get(self) -> int:",
        "        return self.fetch_now()",
    ]


@pytest.mark.parametrize(
    ("source", "named"),
    [
        ("from psycopg import AsyncRawCursor\n", "AsyncRawCursor"),
        ("import asyncio\nasyncio.sleep(1)\n", "asyncio.sleep"),
        ("async def f(c):\n    x = await c.set_autocommit(True)\n", "set_autocommit"),
    ],
)
def test_what_no_rule_covers_stops_the_tool(source: str, named: str) -> None:
    with pytest.raises(tool.GenerateError, match=named):
        tool.generate(source)


def test_async_code_in_async_only_lines_needs_no_rule() -> None:
    out = generate("""
        import asyncio


        async def f() -> None:
            await asyncio.sleep(1)  # async-only
            print(asyncio.Lock)
    """)
    assert "sleep" not in out and "print(threading.Lock)" in out


# -- the twin check, on small pairs ---------------------------------------------------------

ASYNC_SOURCE = '''
class AsyncSaver:
    async def acount(self) -> int:
        """How many rows.

        Example:
            >>> await saver.acount()
        """
        return 1
'''


@pytest.mark.parametrize(
    ("sync_source", "problem"),
    [
        # what the line-by-line generator let through: a sync method named `acount`
        ('class Saver:\n    def acount(self) -> int:\n        """How many rows."""\n', "acount"),
        ('class Saver:\n    async def count(self) -> int:\n        """How many."""\n', "async"),
        ('class Saver:\n    def count(self) -> int:\n        """>>> await s.count()"""\n', "await"),
        ('class Saver:\n    def count(self) -> int:\n        """Same as `acount`."""\n', "acount"),
        ("class Saver:\n    def count(self) -> int:\n        return 1\n", "docstring"),
        ('class Saver:\n    def counted(self) -> int:\n        """How many."""\n', "no sync twin"),
        (
            'class Saver:\n    def count(self) -> int:\n        """How many."""\n'
            "        return self.acount()\n",
            "acount",
        ),
    ],
)
@pytest.mark.usefixtures("saver_names")
def test_twin_check_names_what_has_no_sync_counterpart(sync_source: str, problem: str) -> None:
    problems = tool.twin_problems(ASYNC_SOURCE, sync_source)
    assert any(problem in p for p in problems), problems


@pytest.mark.usefixtures("saver_names")
def test_twin_check_passes_the_generated_twin() -> None:
    assert tool.twin_problems(ASYNC_SOURCE, tool.generate(ASYNC_SOURCE)) == []
