"""Checkpoints to store, built the way LangGraph's conformance suite builds them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

from pgcheckpoint.core.state import SaverState


def with_values(values: Mapping[str, Any], **fields: Any) -> tuple[Checkpoint, dict[str, str]]:
    """A checkpoint whose channels hold `values`, and the new version of each channel.

    Values that are not str, int, float, bool or None are stored as blobs.
    `fields` go to `generate_checkpoint` (`checkpoint_id`, say).
    """
    versions = {ch: SaverState().get_next_version(None, None) for ch in values}
    checkpoint = generate_checkpoint(
        channel_values=dict(values), channel_versions=dict(versions), **fields
    )
    return checkpoint, versions


def config(thread_id: str, checkpoint_id: str | None = None) -> Any:
    """The config of a thread's root namespace, at `checkpoint_id` if given."""
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}
