"""Stored payloads shown as JSON can hold them, or as one short line of text.

Interrupt questions, errors, resume values and channel values come back from
the serializer as any Python object (pydantic models, dataclasses, sets,
bytes); `jsonable` makes JSON of them for `--json` and `summarize` a line
for the tree and a thread's status. A value that stays encrypted shows as
`<encrypted>`, one that cannot be read as `{"unreadable": reason}`, and an
object of a type strict mode does not rebuild as `{"blocked": "module.name"}`.

Example:
    >>> summarize({"question": "approve the plan?", "draft": "x" * 80}, 30)
    '{"question": "approve the pla…'
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import json
import math
import uuid
from collections.abc import Mapping
from typing import Any

from ..codec.strict import Blocked
from .model import SEALED, Unreadable

__all__ = ["jsonable", "summarize"]


def jsonable(value: Any, *, _depth: int = 0) -> Any:
    """A value as JSON can hold it: models dumped, dataclasses as dicts, the rest as text.

    Example:
        >>> jsonable({"a": {1, 2}, "b": b"hi", "c": float("nan")})
        {'a': [1, 2], 'b': {'bytes': 'aGk='}, 'c': 'nan'}
    """
    if _depth > 50:
        return repr(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if value is SEALED:
        return "<encrypted>"
    if isinstance(value, Unreadable):
        return {"unreadable": value.error}
    if isinstance(value, Blocked):
        return {"blocked": value.type_name}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return jsonable(value.value, _depth=_depth + 1)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth=_depth + 1) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        items = [jsonable(v, _depth=_depth + 1) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, default=str))
    if isinstance(value, list | tuple):
        return [jsonable(v, _depth=_depth + 1) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(), _depth=_depth + 1)
        except Exception:  # a model that cannot dump itself is shown as text
            return repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name), _depth=_depth + 1)
            for f in dataclasses.fields(value)
        }
    return repr(value)


def summarize(value: Any, width: int = 60, *, quote: bool = True) -> str:
    """One short line for a payload: JSON text (or a repr for text), cut at `width`.

    `quote=False` leaves text as it is (an error message stored as text).

    Example:
        >>> summarize({"question": "approve the plan?"})
        '{"question": "approve the plan?"}'
    """
    if isinstance(value, str):
        text = repr(value) if quote else value
    elif value is SEALED:
        text = repr(value)  # not JSON text: no string the application stored
    else:
        text = json.dumps(jsonable(value), ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
