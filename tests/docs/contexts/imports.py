# What a state definition imports, and a DeltaChannel reducer.
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict


def reducer(current: list[Any] | None, writes: Sequence[list[Any]]) -> list[Any]:
    return [*(current or []), *(item for batch in writes for item in batch)]


assert Annotated and TypedDict
