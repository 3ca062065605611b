"""What telemetry records of an exception: its text with ids on, its type and frames without.

An exception's message may name a thread, a checkpoint or a task in any
escaping (`repr`, JSON, doubled backslashes, cut short) or quote a piece of a
value, and its stack trace ends with that message and shows source lines. So
with ids off (the default of `Telemetry`) a span records none of that text:
the exception's type, a fixed description (the first line of the error's
docstring for pgcheckpoint's own errors), and a stack trace of code only,
each frame's file, line and function. With `Telemetry(thread_ids=True)` it
records the message and stack trace as Python formats them.

Example:
    >>> from pgcheckpoint.errors import InvalidInputError
    >>> message, stack = recorded_text(InvalidInputError("'alice' is bad"), thread_ids=False)
    >>> message.split(" (")[0]
    'An argument cannot be stored; nothing was written.'
"""

from __future__ import annotations

import traceback

__all__ = ["recorded_text", "type_name", "withheld_message"]

# What a span records of an exception's message with ids off.
_WITHHELD = "message not recorded without Telemetry(thread_ids=True)"
# The most frames of one exception a stack trace recorded with ids off lists.
_MAX_FRAMES = 64
# The most exceptions of a chain (causes, contexts) it lists.
_MAX_CHAIN = 8


def type_name(exc: BaseException) -> str:
    """The qualified name of an exception's type: what telemetry records of it by default.

    Example:
        >>> from pgcheckpoint.errors import DecryptionError
        >>> type_name(ValueError()), type_name(DecryptionError("x"))
        ('ValueError', 'pgcheckpoint.errors.DecryptionError')
    """
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def recorded_text(exc: BaseException, *, thread_ids: bool) -> tuple[str, str]:
    """The message and stack trace a span records of `exc`.

    Example:
        >>> message, stack = recorded_text(KeyError("alice"), thread_ids=False)
        >>> "alice" in message + stack
        False
    """
    if not thread_ids:
        return withheld_message(exc), _frames(exc)
    try:
        message = str(exc)
    except Exception:  # a __str__ that raises
        message = withheld_message(exc)
    try:
        stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:
        stack = _frames(exc)
    return message, stack


def withheld_message(exc: BaseException) -> str:
    """What a span records as an exception's message with ids off: fixed text, per type.

    Example:
        >>> from pgcheckpoint.errors import DecryptionError
        >>> withheld_message(DecryptionError("thread 'alice'")).startswith("A stored value")
        True
    """
    # pgcheckpoint's errors say what happened in their docstring's first line
    cls = type(exc)
    if cls.__module__.startswith("pgcheckpoint.") and cls.__doc__:
        return f"{cls.__doc__.strip().splitlines()[0]} ({_WITHHELD})"
    return _WITHHELD


def _frames(exc: BaseException) -> str:
    # A stack trace of code only, causes first: each frame's file, line and
    # function, each exception's type; no message, and no source line (a
    # literal id in the caller's code would be one).
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and len(chain) < _MAX_CHAIN and all(link is not e for e in chain):
        chain.append(link)
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    blocks = []
    for link in reversed(chain):
        frames = list(traceback.walk_tb(link.__traceback__))
        lines = ["Traceback (most recent call last):\n"]
        if len(frames) > _MAX_FRAMES:
            lines.append(f"  ... {len(frames) - _MAX_FRAMES} earlier frames\n")
            frames = frames[-_MAX_FRAMES:]
        for frame, lineno in frames:
            code = frame.f_code
            lines.append(f'  File "{code.co_filename}", line {lineno}, in {code.co_name}\n')
        lines.append(f"{type_name(link)}\n")
        blocks.append("".join(lines))
    return "\nwhich led to:\n\n".join(blocks)
