"""The sync driver is generated from the async one and must not drift from it."""

from __future__ import annotations

import textwrap

import async_to_sync as tool
import pytest


def generate(source: str) -> str:
    """The generated text without its header."""
    text = tool.generate(textwrap.dedent(source).lstrip(), name="thing_async.py")
    return text.removeprefix(tool.header(tool.Path("thing_async.py")))


@pytest.mark.parametrize(
    ("source", "target"), tool.PAIRS, ids=[target.name for _, target in tool.PAIRS]
)
def test_each_sync_driver_is_generated_from_its_async_source(
    source: tool.Path, target: tool.Path
) -> None:
    assert target.read_text(encoding="utf-8") == tool.twin_of(source), (
        f"src/pgcheckpoint/drivers/{target.name} differs from what {source.name} generates: "
        f"edit {source.name}, then run `make sync-twin`"
    )


@pytest.mark.parametrize(
    ("source", "target"), tool.PAIRS, ids=[target.name for _, target in tool.PAIRS]
)
def test_every_definition_of_a_source_has_a_sync_twin(source: tool.Path, target: tool.Path) -> None:
    problems = tool.twin_problems(
        source.read_text(encoding="utf-8"), target.read_text(encoding="utf-8")
    )
    assert problems == []


def test_every_phrase_swapped_in_docstrings_is_in_its_source() -> None:
    for source, _ in tool.PAIRS:
        phrases = tool.DOC_PHRASES.get(source.name, [])
        assert tool.stale_phrases(source.read_text(encoding="utf-8"), phrases) == []


def test_no_source_needs_a_comment_marker() -> None:
    # what differs between the two kinds lives in _acompat.py, not in comments
    for source, _ in tool.PAIRS:
        text = source.read_text(encoding="utf-8")
        assert "async-only" not in text and "sync-only" not in text and "# sync:" not in text


def test_the_compat_twins_come_from_acompat() -> None:
    names = tool.compat_names()
    assert names["ALock"] == "Lock"
    assert names["atry_acquire"] == "try_acquire"
    assert names["arun_blocking"] == "run_blocking"


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
        from collections.abc import AsyncIterator
        from contextlib import asynccontextmanager

        from psycopg import AsyncConnection, Error
        from psycopg_pool import AsyncConnectionPool

        from ._acompat import ALock, arun_blocking
        from .runner_async import AsyncRunner


        class Saver(AsyncRunner):
            def __init__(self, pool: AsyncConnectionPool[Connection]) -> None:
                self.lock = ALock()

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
                await arun_blocking(print, rows, status, sep="")
                return open_pool(self.pool, asynchronous=True)
    """)
    assert "async" not in out
    assert "await" not in out
    assert "from ._acompat import Lock, run_blocking\n" in out
    assert "from .runner import Runner\n" in out
    assert "from psycopg import Connection, Error\n" in out  # sorted again
    assert "class Saver(Runner):" in out
    assert "self.lock = Lock()" in out
    assert "    @contextmanager\n    def connection(self) -> Iterator[Connection]:" in out
    assert 'with Connection.connect("") as conn:' in out
    assert "conn.set_autocommit(True)" in out
    assert 'rows = [r for r in conn.stream("SELECT 1")]' in out
    assert 'for row in conn.stream("SELECT 2"):' in out
    assert 'status = conn.execute("SELECT 3").statusmessage' in out
    assert 'run_blocking(print, rows, status, sep="")' in out
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


@pytest.mark.parametrize(
    ("source", "named"),
    [
        ("from psycopg import AsyncRawCursor\n", "AsyncRawCursor"),
        ("import asyncio\nasyncio.sleep(1)\n", "asyncio"),
        ("from asyncio import sleep\n", "asyncio"),
    ],
)
def test_what_no_rule_covers_stops_the_tool(source: str, named: str) -> None:
    with pytest.raises(tool.GenerateError, match=named):
        tool.generate(source)


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
