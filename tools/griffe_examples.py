"""A griffe extension for `make docs`: the docstrings' `Example:` sections read as examples.

The house style titles a docstring's examples `Example:`; griffe's Google
parser knows `Examples:` as the section of doctest examples and takes
`Example:` for an admonition of Markdown text, where `>>>` lines would be
prose. The API reference renders them as code after this renames the title.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_TITLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(Extension):  # type: ignore[misc]  # griffe comes with the docs extra
    """Rename `Example:` to `Examples:` in every docstring griffe loads."""

    def on_object(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _TITLE.sub(r"\1Examples:", obj.docstring.value)
