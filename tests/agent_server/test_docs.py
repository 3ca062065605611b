"""The blocks of docs/agent-server.md marked `server`, run against the real server.

tests/docs runs the other blocks of the docs; these need `langgraph dev`:
- a `json` block is a `langgraph.json`: a server starts with it beside the
  example's graph (and the page's `python` blocks, as the files their `id`
  names), and a refund stops at its interrupt and resumes; with a `store`
  block, the decision is in the store, whose TTL the factory sweeps and whose
  index searches by query (on `vector_db_dsn`'s server, which has pgvector;
  tests/integration/test_agent_server_store_factory.py checks the error a
  server without it stops with);
- the `text` block is the line a server that cannot reach its database ends
  its log with;
- a `console` block's commands run on the database of a server that stopped a
  thread at its interrupt (`$THREAD_ID`), and print what the block shows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.agent_server import AgentServer, free_port, running, server_env, server_folder
from support.docblocks import ROOT, Block, console_steps, normalise, output_matches, parse

from .conftest import client_of, table_rows

BLOCKS = [b for b in parse(ROOT / "docs" / "agent-server.md") if b.kind == "server"]


def of_lang(lang: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang == lang]


def test_the_page_has_a_block_of_each_kind() -> None:
    assert len(of_lang("json")) >= 2 and of_lang("text") and of_lang("console")
    assert {b.lang for b in BLOCKS} == {"json", "text", "console", "python"}
    assert all(b.id and b.id.endswith(".py") for b in of_lang("python"))


async def stopped_thread(server: AgentServer) -> str:
    async with client_of(server.url) as client:
        thread_id = (await client.threads.create())["thread_id"]
        paused = await client.runs.wait(thread_id, "refunds", input={"amount": 250})
        assert [i["value"] for i in paused["__interrupt__"]] == ["refund 250 EUR?"]
    return str(thread_id)


@pytest.mark.parametrize("block", of_lang("json"), ids=lambda b: b.name)
async def test_a_langgraph_json_of_the_page_serves(
    block: Block, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    config = json.loads(block.text)
    folder = server_folder(tmp_path / "server", config=config)
    for source in of_lang("python"):
        (folder / str(source.id)).write_text(source.text)
    store = config.get("store") or {}
    db_dsn: str = request.getfixturevalue("vector_db_dsn" if "index" in store else "db_dsn")
    with running(folder, server_env(db_dsn)) as server:
        thread_id = await stopped_thread(server)
        async with client_of(server.url) as client:
            done = await client.runs.wait(thread_id, "refunds", command={"resume": "approved"})
            assert done["paid"] is True
            if store:
                item = await client.store.get_item(["refunds"], thread_id)
                assert item["value"]["decision"] == "approved"
            if "index" in store:
                await client.store.put_item(["docs"], "a", {"text": "aaaa"})
                await client.store.put_item(["docs"], "c", {"text": "cccc"})
                found = await client.store.search_items(["docs"], query="ccc")
                assert [i["key"] for i in found["items"]] == ["c", "a"]
        ttl = config["checkpointer"].get("ttl")
        if ttl:
            started = "ttl sweeper: trimming threads idle for 10080 min to their latest checkpoint"
            assert f"{started}, every 3600 s" in server.output()
        if "ttl" in store:
            assert "store ttl sweeper: deleting expired items every 3600 s" in server.output()
            (row,) = table_rows(
                db_dsn, "SELECT ttl_minutes FROM pgc_store WHERE key = %s", (thread_id,)
            )
            assert row["ttl_minutes"] == store["ttl"]["default_ttl"]


def test_a_server_without_its_database_ends_with_the_line_the_page_shows(tmp_path: Path) -> None:
    (block,) = of_lang("text")
    shown = block.text.strip()
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/app"  # nothing listens there
    server = AgentServer(server_folder(tmp_path / "server"), server_env(dsn))
    with pytest.raises(RuntimeError, match="langgraph dev exited"):
        server.start()
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in server.output().splitlines()]
    (printed,) = [line for line in lines if "DatabaseUnreachableError:" in line]
    # `...` stands for what libpq says; numbers (the port) may differ
    pattern = ".*".join(re.escape(normalise(part)) for part in shown.split("..."))
    assert re.fullmatch(pattern, normalise(printed)), printed
    assert server.stop(signal.SIGKILL) is not None  # it had exited


@pytest.mark.parametrize("block", of_lang("console"), ids=lambda b: b.name)
async def test_the_commands_print_what_the_page_shows(
    block: Block, db_dsn: str, tmp_path: Path
) -> None:
    env: dict[str, Any] = server_env(db_dsn)
    with running(server_folder(tmp_path / "server"), env) as server:
        thread_id = await stopped_thread(server)
    env["THREAD_ID"] = thread_id
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    for command, shown in console_steps(block.text):
        done = subprocess.run(
            ["bash", "-c", command],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert output_matches(shown, done.stdout.splitlines()), (
            f"`{command}` printed\n{done.stdout}\nnot what the page shows:\n" + "\n".join(shown)
        )
