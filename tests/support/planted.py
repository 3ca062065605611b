"""Stored values that run code when LangGraph's default msgpack reader decodes them.

LangGraph's `JsonPlusSerializer`, outside strict mode, rebuilds a msgpack
extension by importing the module it names and calling the function: bytes
planted in a table by anyone who can write to it run as whoever reads them.
The payload here names two such calls, each creating a file, so a test sees
whether anything ran.
"""

from __future__ import annotations

from pathlib import Path

import ormsgpack

# LangGraph's extension code for "call module.name(*args)".
_CALL_WITH_ARGS = 1


def planted_value(marker: Path) -> bytes:
    """msgpack bytes whose permissive decoding creates `marker` (and `marker.open`).

    One entry runs `os.system("touch marker")`, the other `builtins.open(marker.open, "w")`.
    """
    return ormsgpack.packb(
        {
            "question": ormsgpack.Ext(
                _CALL_WITH_ARGS, ormsgpack.packb(["os", "system", [f"touch {marker}"]])
            ),
            "note": ormsgpack.Ext(
                _CALL_WITH_ARGS, ormsgpack.packb(["builtins", "open", [f"{marker}.open", "w"]])
            ),
        }
    )


def code_ran(marker: Path) -> bool:
    """Whether decoding a `planted_value(marker)` ran any of its calls."""
    return marker.exists() or Path(f"{marker}.open").exists()
