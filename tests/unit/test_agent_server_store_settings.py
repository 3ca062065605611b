"""What the store factory reads of `LANGGRAPH_STORE`, without a server or a database.

The server hands the factory the `store` block of `langgraph.json` only as
JSON in `LANGGRAPH_STORE`: its `index` (with `embed` a string: a
`provider:model`, a dotted path, or the server's `./file.py:name`) and its
`ttl` (minutes). Each bad value fails the start with a line that names it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from pgcheckpoint import InvalidInputError
from pgcheckpoint.agent_server.store_settings import StoreBlock, load_embed


def block(**config: Any) -> StoreBlock:
    return StoreBlock.from_env({"LANGGRAPH_STORE": json.dumps(config)})


def embed(texts: list[str]) -> list[list[float]]:
    return [[float(len(t))] for t in texts]


def test_no_block_means_no_index_no_ttl_and_no_sweep() -> None:
    assert StoreBlock.from_env({}) == StoreBlock()
    assert block(path="pgcheckpoint.agent_server.store") == StoreBlock()


def test_the_ttl_block_becomes_the_store_s_ttl_config_and_its_sweep_interval() -> None:
    read = block(ttl={"default_ttl": 1.5, "refresh_on_read": False, "sweep_interval_minutes": 2})
    assert read.ttl == {"default_ttl": 1.5, "refresh_on_read": False}
    assert read.sweep_interval == timedelta(minutes=2)
    # the server's defaults: refresh on read, a sweep every 5 minutes
    assert block(ttl={}).ttl == {"refresh_on_read": True}
    assert block(ttl={"default_ttl": 5}).sweep_interval == timedelta(minutes=5)


def test_the_sweep_seconds_variable_wins_and_zero_turns_the_sweeper_off() -> None:
    config = json.dumps({"ttl": {"default_ttl": 5}})
    fast = StoreBlock.from_env({"LANGGRAPH_STORE": config, "PGCHECKPOINT_TTL_SWEEP_SECONDS": "1"})
    assert fast.sweep_interval == timedelta(seconds=1)
    off = StoreBlock.from_env({"LANGGRAPH_STORE": config, "PGCHECKPOINT_TTL_SWEEP_SECONDS": "0"})
    assert off.sweep_interval is None and off.ttl == {"default_ttl": 5.0, "refresh_on_read": True}


def test_filterable_fields_come_comma_separated() -> None:
    read = StoreBlock.from_env({"PGCHECKPOINT_STORE_FILTERABLE": " kind, owner ,,"})
    assert read.filterable == ("kind", "owner")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[1]", "LANGGRAPH_STORE must be a JSON object"),
        ("{", "LANGGRAPH_STORE is not valid JSON"),
        ('{"ttl": 5}', "store.ttl must be a JSON object"),
        ('{"ttl": {"default_ttl": -1}}', "store.ttl.default_ttl must be a positive number"),
        ('{"ttl": {"default_ttl": "1h"}}', "store.ttl.default_ttl must be a positive number"),
        ('{"ttl": {"sweep_interval_minutes": 0}}', "store.ttl.sweep_interval_minutes must be"),
        ('{"ttl": {"refresh_on_read": "yes"}}', "refresh_on_read must be true or false"),
        ('{"ttl": {"strategy": "delete"}}', "store.ttl has no 'strategy'"),
        ('{"index": [3]}', "store.index must be a JSON object"),
        ('{"index": {"dims": 3}}', "store.index needs dims and embed"),
        ('{"index": {"dims": 3, "embed": 7}}', "store.index.embed must be a string"),
        ('{"index": {"dims": 3, "embed": "embed"}}', "neither 'provider:model' nor a dotted"),
        ('{"index": {"dims": 3, "embed": "no_such_module.embed"}}', "cannot import"),
        ('{"index": {"dims": 3, "embed": "json.no_such"}}', "'json' has no embedding function"),
        ('{"index": {"dims": 3, "embed": "./missing.py:embed"}}', "no file"),
    ],
)
def test_a_bad_block_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        StoreBlock.from_env({"LANGGRAPH_STORE": text})


def test_embed_loads_from_a_dotted_path_and_from_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = block(index={"dims": 1, "embed": f"{__name__}.embed", "fields": ["text"]})
    assert read.index == {"dims": 1, "embed": embed, "fields": ["text"]}
    (tmp_path / "embeddings.py").write_text(
        "def embed(texts):\n    return [[1.0, 2.0] for _ in texts]\n"
    )
    monkeypatch.chdir(tmp_path)  # the server's folder: the file path is relative to it
    loaded = load_embed("./embeddings.py:embed")
    assert loaded(["a"]) == [[1.0, 2.0]]


def test_a_provider_string_stays_for_langchain_or_says_what_to_install() -> None:
    try:
        import langchain.embeddings  # noqa: F401
    except ImportError:
        with pytest.raises(InvalidInputError, match="needs the langchain package"):
            load_embed("openai:text-embedding-3-small")
    else:
        assert load_embed("openai:text-embedding-3-small") == "openai:text-embedding-3-small"


def test_loading_an_embed_imports_none_of_the_server_s_packages(tmp_path: Path) -> None:
    (tmp_path / "embeddings.py").write_text("def embed(texts):\n    return []\n")
    code = (
        "import sys; from pgcheckpoint.agent_server.store_settings import StoreBlock; "
        "StoreBlock.from_env({'LANGGRAPH_STORE': "
        '\'{"index": {"dims": 2, "embed": "./embeddings.py:embed"}}\'}); '
        "StoreBlock.from_env({'LANGGRAPH_STORE': "
        '\'{"index": {"dims": 2, "embed": "embeddings.embed"}}\'}); '
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph_api', 'langgraph_runtime', 'langgraph_runtime_inmem', 'langgraph_sdk', "
        "'langgraph_cli')))"
    )
    env = {"PYTHONPATH": f"{Path(__file__).resolve().parents[2] / 'src'}:{tmp_path}"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
