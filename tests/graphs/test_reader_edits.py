"""Code outside a graph edits what `get_state` returned: no later step, save or read sees it.

Issue 31, item 1: a DeltaChannel of dataclass notes, a snapshot every third
update; after each turn a caller tags the notes it shows. The notes of the
cached snapshot took the tags, and the next snapshots stored them.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from support.chat import append
from support.savers import open_variant
from support.values import Note

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

from .conftest import GraphRunner

TURNS = 7


class Notes(TypedDict, total=False):
    notes: Annotated[list[Note], DeltaChannel(append, snapshot_frequency=3)]
    turn: int


def take_note(state: Notes) -> Notes:
    return {"notes": [Note(f"n{state['turn']}", [f"n{state['turn']}"])]}


def build() -> StateGraph[Any]:
    builder = StateGraph(Notes)
    builder.add_node("take_note", take_note)
    builder.add_edge(START, "take_note")
    builder.add_edge("take_note", END)
    return builder


async def tag_what_is_shown(runner: GraphRunner) -> list[list[str]]:
    """Seven turns, each followed by a `get_state` whose notes the caller tags."""
    config = {"configurable": {"thread_id": "notes"}}
    runner.compile(build())
    for turn in range(TURNS):
        await runner.invoke({"turn": turn}, config)
        shown = (await runner.get_state(config)).values["notes"]
        assert [note.tags for note in shown] == [[f"n{i}"] for i in range(turn + 1)]
        for note in shown:
            note.tags.append("shown")
        shown.append(Note("added by the caller", []))
    history = await runner.history(config)
    assert all(note.tags == [note.text] for s in history for note in s.values.get("notes", []))
    return [note.tags for note in (await runner.get_state(config)).values["notes"]]


async def test_tags_a_caller_puts_on_shown_notes_are_never_stored(
    runs: tuple[GraphRunner, GraphRunner], saver: PostgresSaver | AsyncPostgresSaver, db_dsn: str
) -> None:
    ours, reference = runs
    expected = [[f"n{i}"] for i in range(TURNS)]
    assert await tag_what_is_shown(reference) == expected
    assert await tag_what_is_shown(ours) == expected
    driver = "async" if ours.is_async else "sync"
    async with open_variant(f"{driver}-conn", db_dsn, serde=saver.serde) as fresh:
        runner = GraphRunner(fresh, ours.is_async)
        runner.compile(build())
        state = await runner.get_state({"configurable": {"thread_id": "notes"}})
    assert [note.tags for note in state.values["notes"]] == expected
