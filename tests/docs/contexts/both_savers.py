# A sync `saver` and an `async_saver` over a database with idle threads.
import contextlib
import runpy
from pathlib import Path

import doc_helpers
from doc_helpers import DSN

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

runpy.run_path(str(Path(doc_helpers.__file__).parent / "idle_threads.py"))
_open = contextlib.ExitStack()  # kept open until the block ends
saver = _open.enter_context(PostgresSaver.from_conn_string(DSN))
_stack = contextlib.AsyncExitStack()
async_saver = await _stack.enter_async_context(  # noqa: F704
    AsyncPostgresSaver.from_conn_string(DSN)
)
