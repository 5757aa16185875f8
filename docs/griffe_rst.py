"""A griffe extension for the API pages: the package's docstrings use two reST habits.

``:class:`Name``` (and ``:meth:``, ``:func:``, ...) becomes the code span ``Name``, and a
paragraph ending in ``::`` (an example follows) ends in ``:``; the indented block after it
is already a Markdown code block. Loaded by mkdocs.yml; never imported by the package.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|attr|exc|data|mod|obj):`~?\.?([^`]+)`")
_LITERAL_INTRO = re.compile(r"::$", re.MULTILINE)


def markdown_from_rst(text: str) -> str:
    """Rewrite the reST roles and ``::`` literal-block markers of ``text``."""
    return _LITERAL_INTRO.sub(":", _ROLE.sub(r"`\1`", text))


class RestHabits(griffe.Extension):
    """Rewrites every docstring of the loaded package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Walk the package (not aliases: their targets are walked where defined)."""
        pending: list[griffe.Object] = [pkg]
        while pending:
            obj = pending.pop()
            if obj.docstring is not None:
                obj.docstring.value = markdown_from_rst(obj.docstring.value)
            pending.extend(m for m in obj.members.values() if isinstance(m, griffe.Object))
