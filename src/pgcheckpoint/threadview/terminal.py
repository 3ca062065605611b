"""Text from the database, made safe to print on a terminal.

Thread ids, namespaces, metadata and values are whatever the application
stored. Printed raw, an escape sequence in one sets the terminal's title,
clears lines or hides text, and a bidi control reorders what follows.
`printable` shows every control and format character as an escape (`\\x1b`,
`\\u202e`) instead; `json_text` does the same inside JSON strings, which stay
valid JSON for the same data; `shell_quote` writes a value as a shell word
that a user can paste back (`$'\\x1b...'` when it holds such characters).

Example:
    >>> printable("t\\x1b]0;pwned\\x07")
    't\\\\x1b]0;pwned\\\\x07'
"""

from __future__ import annotations

import json
import shlex
import unicodedata
from typing import Any

__all__ = ["json_text", "printable", "shell_quote"]

# Format characters that render as part of their neighbours: kept as they are.
_JOINERS = frozenset({"\u200c", "\u200d"})
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _unsafe(char: str) -> bool:
    return unicodedata.category(char) in _UNSAFE and char not in _JOINERS


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, *, keep: str = "") -> str:
    """`text` with control and format characters shown as escapes (but those in `keep`).

    Example:
        >>> printable("a\\u202eb\\nc", keep="\\n")
        'a\\\\u202eb\\nc'
    """
    if text.isprintable() and not any(c in keep for c in text):
        return text
    return "".join(c if c in keep or not _unsafe(c) else _escape(c) for c in text)


def json_text(data: Any, *, indent: int | None = None) -> str:
    """`data` as JSON whose strings carry no raw control or format character.

    `json.dumps` escapes C0 controls; the others (DEL, C1 controls such as the
    one-byte CSI, bidi controls, line separators) go as `\\uXXXX` escapes too.

    Example:
        >>> json_text({"id": "a\\x9bb"})
        '{"id": "a\\\\u009bb"}'
    """
    text = json.dumps(data, ensure_ascii=False, indent=indent, default=str)
    if text.isprintable():
        return text
    return "".join(json.dumps(c)[1:-1] if _unsafe(c) and c not in "\n" else c for c in text)


def shell_quote(text: str) -> str:
    """`text` as one shell word to paste back into a command.

    Example:
        >>> shell_quote("a b"), shell_quote("a\\x1bb")
        ("'a b'", "$'a\\\\x1bb'")
    """
    if printable(text) == text:
        return shlex.quote(text)
    body = "".join(_escape(c) if _unsafe(c) else "\\" + c if c in "\\'" else c for c in text)
    return f"$'{body}'"
