"""Where the async drivers and their sync twins differ, once, in both forms.

The sync modules of this folder are generated from their async sources
(`*_async.py`) by `tools/async_to_sync.py`, which drops `async` and `await` and
renames: `AsyncX` -> `X`, a function `aNAME` the source defines -> `NAME`, a
module `x_async` -> `x`, and each async name below -> its twin (`ALock` ->
`Lock`, `atry_acquire` -> `try_acquire`). Whatever else differs between the
two kinds lives here, so a source needs no comment markers and both twins are
plain code that ruff and mypy check.

Example:
    >>> import threading
    >>> from pgcheckpoint.drivers._acompat import try_acquire
    >>> try_acquire(threading.BoundedSemaphore(1))
    True
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = [
    "ABoundedSemaphore",
    "ALock",
    "BoundedSemaphore",
    "Lock",
    "aacquire_within",
    "acquire_within",
    "arun_blocking",
    "atry_acquire",
    "run_blocking",
    "try_acquire",
]

T = TypeVar("T")

Lock = threading.Lock
ALock = asyncio.Lock
BoundedSemaphore = threading.BoundedSemaphore
ABoundedSemaphore = asyncio.BoundedSemaphore


def run_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call `fn` (the sync twin of running it in a worker thread)."""
    return fn(*args, **kwargs)


async def arun_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call a blocking `fn` in a worker thread, so the event loop goes on meanwhile."""
    return await asyncio.to_thread(fn, *args, **kwargs)


def try_acquire(semaphore: threading.BoundedSemaphore) -> bool:
    """Take `semaphore` if it is free right now; whether it was."""
    return semaphore.acquire(blocking=False)


async def atry_acquire(semaphore: asyncio.BoundedSemaphore) -> bool:
    """Take `semaphore` if it is free right now; whether it was."""
    if semaphore.locked():
        return False
    await semaphore.acquire()  # free: returns without giving the loop a turn
    return True


def acquire_within(semaphore: threading.BoundedSemaphore, timeout: float) -> bool:
    """Take `semaphore`, waiting up to `timeout` seconds; whether it was taken."""
    return semaphore.acquire(timeout=timeout)


async def aacquire_within(semaphore: asyncio.BoundedSemaphore, timeout: float) -> bool:
    """Take `semaphore`, waiting up to `timeout` seconds; whether it was taken."""
    waiting: Awaitable[Any] = semaphore.acquire()
    try:
        await asyncio.wait_for(waiting, timeout)
    except asyncio.TimeoutError:
        return False
    return True
