"""The graphs and data of `make bench`: a chat, an agent loop, and their replay.

Everything is deterministic: message text comes from a seeded generator, ids are
fixed, and the fake LLM and tool answer from the conversation's length. A chat is
recorded once on a `RecordingSaver` (which keeps the calls it got) and replayed
into each saver, so both savers store exactly the same checkpoints, ids and
versions.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    copy_checkpoint,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition

MESSAGE_BYTES = 500
_VOCABULARY = (
    "the of and to in is you that it he was for on are as with his they at be this have "
    "from or one had by word but not what all were we when your can said there use an each "
    "which she do how their if will up other about out many then them these so some her "
    "would make like him into time has look two more write go see number no way could people "
    "my than first water been call who its now find long down day did get come made may part "
    "checkpoint thread graph agent tool query result order invoice customer account refund"
)
_WORDS = _VOCABULARY.split()


def text(seed: int, size: int = MESSAGE_BYTES) -> str:
    """Prose-like text of `size` characters; compresses about as well as real chat."""
    rng = random.Random(seed)
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def human(turn: int, size: int = MESSAGE_BYTES) -> HumanMessage:
    return HumanMessage(content=text(1_000_003 * turn + 1, size), id=f"human-{turn}")


# -- the chat: one reply per human message, 2 messages a turn ----------------------


class PlainChat(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


class DeltaChat(TypedDict):
    messages: Annotated[list[BaseMessage], DeltaChannel(_messages_delta_reducer)]


def chat_graph(
    checkpointer: BaseCheckpointSaver[Any] | None,
    *,
    delta: bool = False,
    message_bytes: int = MESSAGE_BYTES,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    def reply(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(content=text(7 * n + 2, message_bytes), id=f"ai-{n}")]}

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(DeltaChat if delta else PlainChat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=checkpointer)


# -- the agent loop: human, agent, tools, agent --------------------------------------


@tool
def lookup(query: str) -> str:
    """Look something up (deterministic fake)."""
    return text(len(query) * 31 + 5)


def _agent(state: dict[str, Any]) -> dict[str, Any]:
    messages = state["messages"]
    n = len(messages)
    if messages[-1].type == "tool":
        return {"messages": [AIMessage(content=text(11 * n + 3), id=f"ai-{n}")]}
    call = {"name": "lookup", "args": {"query": text(13 * n, 120)}, "id": f"call-{n}"}
    return {"messages": [AIMessage(content=text(17 * n, 300), tool_calls=[call], id=f"ai-{n}")]}


def agent_graph(
    checkpointer: BaseCheckpointSaver[Any] | None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(PlainChat)
    builder.add_node("agent", _agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def turn_input(turn: int) -> dict[str, Any]:
    return {"messages": [human(turn)]}


def config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


# -- recording and replay -----------------------------------------------------------


@dataclass(frozen=True)
class Put:
    config: RunnableConfig
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    new_versions: ChannelVersions
    turn: int


@dataclass(frozen=True)
class PutWrites:
    config: RunnableConfig
    writes: Sequence[tuple[str, Any]]
    task_id: str
    task_path: str
    turn: int


Call = Put | PutWrites


class RecordingSaver(BaseCheckpointSaver[str]):
    """Keeps every `put` and `put_writes` it gets, in order, as Python objects.

    It answers `get_tuple` from those objects without serialising anything (an
    `InMemorySaver` would spend half the recording in msgpack), which is all a
    graph needs to go on; `DeltaChannel` history comes from the base class's walk.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self.turn = 0
        self._checkpoints: dict[str, tuple[Checkpoint, CheckpointMetadata, str | None]] = {}
        self._writes: dict[str, list[tuple[tuple[str, str, int], PendingWrite]]] = {}
        self._latest: str | None = None

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        # LangGraph hands over a copy of its checkpoint (copy_checkpoint), kept as is
        metadata = get_serializable_checkpoint_metadata(config, metadata)
        self.calls.append(Put(config, checkpoint, metadata, dict(new_versions), self.turn))
        parent = config["configurable"].get("checkpoint_id")
        self._checkpoints[checkpoint["id"]] = (checkpoint, metadata, parent)
        self._latest = checkpoint["id"]
        return {
            **config,
            "configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]},
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.calls.append(PutWrites(config, list(writes), task_id, task_path, self.turn))
        stored = self._writes.setdefault(config["configurable"]["checkpoint_id"], [])
        for idx, (channel, value) in enumerate(writes):
            key = writes_sort_key(task_path, task_id, WRITES_IDX_MAP.get(channel, idx))
            stored.append((key, (task_id, channel, value)))

    # string versions, as every real saver makes (the base class counts in ints)
    get_next_version = InMemorySaver.get_next_version

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        checkpoint_id = conf.get("checkpoint_id") or self._latest
        if checkpoint_id not in self._checkpoints:
            return None
        checkpoint, metadata, parent = self._checkpoints[checkpoint_id]
        thread = {"thread_id": conf["thread_id"], "checkpoint_ns": conf.get("checkpoint_ns", "")}
        writes = sorted(self._writes.get(checkpoint_id, []), key=lambda w: w[0])
        return CheckpointTuple(
            {"configurable": {**thread, "checkpoint_id": checkpoint_id}},
            copy_checkpoint(checkpoint),
            metadata,
            {"configurable": {**thread, "checkpoint_id": parent}} if parent else None,
            [w for _, w in writes],
        )


@dataclass
class Recording:
    """A chat run on a `RecordingSaver`: the calls, and the final messages to compare."""

    calls: list[Call]
    turns: int
    delta: bool
    final_messages: list[BaseMessage]

    def upto(self, turns: int) -> list[Call]:
        return [c for c in self.calls if c.turn <= turns]

    def puts(self) -> list[Put]:
        return [c for c in self.calls if isinstance(c, Put)]


def record_chat(turns: int, *, delta: bool) -> Recording:
    saver = RecordingSaver()
    graph = chat_graph(saver, delta=delta)
    conf = config("recorded")
    for turn in range(1, turns + 1):
        saver.turn = turn
        graph.invoke(turn_input(turn), conf)
    final = graph.get_state(conf).values["messages"]
    return Recording(saver.calls, turns, delta, final)


def record_agent(turns: int) -> list[Call]:
    """The saver calls of an agent-loop thread of `turns` turns, to replay as history."""
    saver = RecordingSaver()
    graph = agent_graph(saver)
    for turn in range(1, turns + 1):
        saver.turn = turn
        graph.invoke(turn_input(turn), config("recorded-agent"))
    return saver.calls


def _retarget(conf: RunnableConfig, thread_id: str) -> RunnableConfig:
    return {"configurable": {**conf["configurable"], "thread_id": thread_id}}


def replay(saver: BaseCheckpointSaver[Any], calls: Sequence[Call], thread_id: str) -> None:
    for call in calls:
        if isinstance(call, Put):
            saver.put(
                _retarget(call.config, thread_id),
                call.checkpoint,
                call.metadata,
                call.new_versions,
            )
        else:
            saver.put_writes(
                _retarget(call.config, thread_id), call.writes, call.task_id, call.task_path
            )


def snapshot_cycle(recording: Recording) -> tuple[str, str]:
    """Checkpoint ids near the end of a DeltaChannel chat: (best, worst) for get_state.

    Best: the newest checkpoint that stores a snapshot of `messages` (no replay).
    Worst: the newest one with the most writes to replay since its snapshot.
    """
    puts = recording.puts()
    best = next(p for p in reversed(puts) if "messages" in p.checkpoint["channel_values"])

    def since_snapshot(p: Put) -> int:
        counters = p.metadata.get("counters_since_delta_snapshot") or {}  # type: ignore[misc]
        value = counters.get("messages") if isinstance(counters, dict) else None
        return int(value[0]) if value else 0

    worst = max(reversed(puts), key=since_snapshot)
    return best.checkpoint["id"], worst.checkpoint["id"]
