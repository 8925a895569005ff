"""Griffe extension for the API reference: doctest examples in docstrings become code blocks.

jaxfeed's docstrings hold ``>>>`` examples in their body (they run as doctests). Rendered as
Markdown, a line such as ``>>> ds[:2]["x"]`` would read as a link reference; fenced as ``pycon``
it is highlighted code, prompts and outputs as written. RST roles (``:class:`X```) lose their
role and keep the name as code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`~?([^`]+)`")


def fence_doctests(text: str) -> str:
    """Wrap each run of ``>>>`` lines and their outputs in a ```` ```pycon ```` fence.

    >>> print(fence_doctests("Example:\\n\\n>>> 1 + 1\\n2\\n\\nDone."))
    Example:
    <BLANKLINE>
    ```pycon
    >>> 1 + 1
    2
    ```
    <BLANKLINE>
    Done.
    """
    out: list[str] = []
    in_block = False
    indent = ""
    in_fence = False
    for line in text.splitlines():
        stripped = line.lstrip()
        if not in_block and stripped.startswith("```"):
            in_fence = not in_fence
        if in_fence:
            out.append(line)
            continue
        if not in_block and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            out.append(f"{indent}```pycon")
            in_block = True
        elif in_block and not stripped:
            out.append(f"{indent}```")
            in_block = False
        out.append(line)
    if in_block:
        out.append(f"{indent}```")
    return ROLE.sub(r"`\1`", "\n".join(out))


class DoctestFences(griffe.Extension):
    """Rewrite every docstring once it is loaded (see :func:`fence_doctests`)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
