"""What the store factory reads of `LANGGRAPH_STORE`: the `index` and `ttl` blocks, checked.

The server hands the `store` block of `langgraph.json` (`path`, `index`,
`ttl`) to the factory only as the JSON of `LANGGRAPH_STORE`. `index.embed` is
a string there: a `provider:model` of LangChain's `init_embeddings`
(`openai:text-embedding-3-small`), a dotted path to an embedding function or
`Embeddings` object (`my_app.embeddings.embed`), or, as the server writes it,
a file and a name (`./embeddings.py:embed`, from the folder the server runs
in). This module loads it itself: it never imports the server's packages.

Example:
    >>> block = StoreBlock.from_env({"LANGGRAPH_STORE": '{"ttl": {"default_ttl": 60}}'})
    >>> block.ttl, block.sweep_interval
    ({'default_ttl': 60.0, 'refresh_on_read': True}, datetime.timedelta(seconds=300))
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from langgraph.store.base import TTLConfig

from ..errors import InvalidInputError
from .settings import DEFAULT_SWEEP_MINUTES, _json, _minutes, sweep_seconds

__all__ = ["FILTERABLE_VARIABLE", "STORE_BLOCK", "StoreBlock", "load_embed"]

STORE_BLOCK = "LANGGRAPH_STORE"
# With encryption, the top-level fields of a value kept readable for filters.
FILTERABLE_VARIABLE = "PGCHECKPOINT_STORE_FILTERABLE"


@dataclass(frozen=True)
class StoreBlock:
    """The `index` and `ttl` of the `store` block, ready for `AsyncPostgresStore`.

    Attributes:
        index: The `index` config with `embed` loaded, or None (no semantic search).
        ttl: The `ttl` config (`default_ttl` in minutes, `refresh_on_read`), or
            None: items put with a ttl of their own then expire unswept.
        sweep_interval: Time between two sweeps of expired items
            (`sweep_interval_minutes`, default 5, or
            `PGCHECKPOINT_TTL_SWEEP_SECONDS`); None when nothing sweeps.
        filterable: `PGCHECKPOINT_STORE_FILTERABLE` (comma-separated): with
            encryption, the top-level fields kept readable for filters.

    Example:
        >>> StoreBlock.from_env({}).index is None
        True
    """

    index: Mapping[str, Any] | None = None
    ttl: TTLConfig | None = None
    sweep_interval: timedelta | None = None
    filterable: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StoreBlock:
        """Read `LANGGRAPH_STORE`; a bad value says which key of the block it is.

        Example:
            >>> block = '{"ttl": {"default_ttl": 5, "sweep_interval_minutes": 1}}'
            >>> StoreBlock.from_env({"LANGGRAPH_STORE": block}).sweep_interval
            datetime.timedelta(seconds=60)
        """
        env = os.environ if environ is None else environ
        text = (env.get(STORE_BLOCK) or "").strip()
        config = _json(text, STORE_BLOCK) if text else {}
        if not isinstance(config, Mapping):
            raise InvalidInputError(f"{STORE_BLOCK} must be a JSON object, not {text!r}")
        index = config.get("index")
        if index is not None:
            index = _index(index)
        names = (env.get(FILTERABLE_VARIABLE) or "").split(",")
        filterable = tuple(name.strip() for name in names if name.strip())
        block = config.get("ttl")
        if block is None:
            return cls(index=index, filterable=filterable)
        ttl, every = _ttl(block)
        interval: timedelta | None = every
        seconds = sweep_seconds(env)
        if seconds is not None:
            interval = timedelta(seconds=seconds) if seconds else None
        return cls(index=index, ttl=ttl, sweep_interval=interval, filterable=filterable)


def _index(block: Any) -> dict[str, Any]:
    if not isinstance(block, Mapping):
        raise InvalidInputError(f"store.index must be a JSON object, not {block!r}")
    index = dict(block)
    if "dims" not in index or "embed" not in index:
        raise InvalidInputError("store.index needs dims and embed (and may name fields)")
    index["embed"] = load_embed(index["embed"])
    return index


def _ttl(block: Any) -> tuple[TTLConfig, timedelta]:
    if not isinstance(block, Mapping):
        raise InvalidInputError(f"store.ttl must be a JSON object, not {block!r}")
    unknown = set(block) - {"default_ttl", "refresh_on_read", "sweep_interval_minutes"}
    if unknown:
        raise InvalidInputError(
            f"store.ttl has no {sorted(unknown)[0]!r}: it takes default_ttl, refresh_on_read "
            "and sweep_interval_minutes"
        )
    ttl: TTLConfig = {}
    if block.get("default_ttl") is not None:
        ttl["default_ttl"] = _minutes(block["default_ttl"], "store.ttl.default_ttl") / timedelta(
            minutes=1
        )
    refresh = block.get("refresh_on_read", True)
    if not isinstance(refresh, bool):
        raise InvalidInputError(f"store.ttl.refresh_on_read must be true or false, not {refresh!r}")
    ttl["refresh_on_read"] = refresh
    every = block.get("sweep_interval_minutes")
    if every is None:
        return ttl, timedelta(minutes=DEFAULT_SWEEP_MINUTES)
    return ttl, _minutes(every, "store.ttl.sweep_interval_minutes")


def load_embed(spec: Any) -> Any:
    """The embedding of `index.embed`: loaded from a dotted path or a file, or left to LangChain.

    A `provider:model` string stays a string, which the store's
    `ensure_embeddings` hands to LangChain's `init_embeddings` (the
    `langchain` package and the provider's).

    Example:
        >>> load_embed("json.dumps").__name__
        'dumps'
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidInputError(
            f"store.index.embed must be a string ('provider:model', a dotted path or "
            f"'./file.py:name'), not {spec!r}"
        )
    spec = spec.strip()
    if ".py:" in spec:
        return _from_file(spec)
    if ":" in spec:
        try:
            importlib.import_module("langchain.embeddings")
        except ImportError:
            raise InvalidInputError(
                f"store.index.embed {spec!r} names a LangChain provider, which needs the "
                "langchain package and the provider's (pip install langchain langchain-openai, "
                "say); or give a dotted path to an embedding function"
            ) from None
        return spec
    module_name, _, name = spec.rpartition(".")
    if not module_name:
        raise InvalidInputError(
            f"store.index.embed {spec!r} is neither 'provider:model' nor a dotted path "
            "such as my_app.embeddings.embed"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInputError(
            f"store.index.embed {spec!r}: cannot import {module_name!r} ({exc})"
        ) from None
    return _attribute(module, name, spec)


def _from_file(spec: str) -> Any:
    path_text, _, name = spec.rpartition(":")
    path = Path(path_text).resolve()
    module_spec = importlib.util.spec_from_file_location(f"_pgcheckpoint_embed_{path.stem}", path)
    if module_spec is None or module_spec.loader is None or not path.is_file():
        raise InvalidInputError(f"store.index.embed {spec!r}: no file {str(path)!r}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return _attribute(module, name, spec)


def _attribute(module: Any, name: str, spec: str) -> Any:
    found = getattr(module, name, None)
    if found is None or not (callable(found) or hasattr(found, "embed_documents")):
        raise InvalidInputError(
            f"store.index.embed {spec!r}: {module.__name__!r} has no embedding function "
            f"or Embeddings object named {name!r}"
        )
    return found
