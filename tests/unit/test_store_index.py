"""A store's `index` config: what pgvector cannot do is refused before setup, and clearly."""

from __future__ import annotations

from typing import Any

import pytest

from pgcheckpoint.errors import InvalidInputError
from pgcheckpoint.store.vectors import IndexSettings


def settings(dims: int, **ann: Any) -> IndexSettings:
    config = {"dims": dims, "embed": lambda texts: [], "ann_index_config": ann}
    return IndexSettings.from_config(config)


@pytest.mark.parametrize(
    ("dims", "ann"),
    [
        (2000, {}),
        (2000, {"kind": "ivfflat"}),
        (4000, {"vector_type": "halfvec"}),
        (4000, {"kind": "ivfflat", "vector_type": "halfvec"}),
        (16000, {"kind": "flat"}),
        (16000, {"kind": "flat", "vector_type": "halfvec"}),
    ],
)
def test_dimensions_pgvector_indexes_are_taken(dims: int, ann: dict[str, Any]) -> None:
    assert settings(dims, **ann).dims == dims


@pytest.mark.parametrize(
    ("dims", "ann", "limit"),
    [
        (2001, {}, "vector of up to 2000"),
        (3072, {"kind": "ivfflat"}, "vector of up to 2000"),
        (4001, {"vector_type": "halfvec"}, "halfvec of up to 4000"),
    ],
)
def test_dimensions_over_the_index_limit_are_refused_saying_what_fits(
    dims: int, ann: dict[str, Any], limit: str
) -> None:
    with pytest.raises(InvalidInputError, match=f"{limit} dimensions, not {dims}.*'flat'"):
        settings(dims, **ann)


def test_a_halfvec_embedding_beyond_its_range_is_refused() -> None:
    half = settings(2, vector_type="halfvec")
    assert half.checked([[65504.0, -65504.0]], 1, "texts") == ["[65504.0,-65504.0]"]
    with pytest.raises(InvalidInputError, match="beyond halfvec's range"):
        half.checked([[70000.0, 1.0]], 1, "texts")
    # a vector column holds it
    assert settings(2).checked([[70000.0, 1.0]], 1, "texts") == ["[70000.0,1.0]"]
