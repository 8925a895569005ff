"""Functions stay short, the way ``test_layers`` keeps imports going down: no function or method
in ``recipes/`` over 80 lines, none anywhere in ``src/`` over 120, and 80 the target everywhere:
a function outside ``recipes/`` over 80 lines is in ``ALLOWLIST`` with its length, which may only
shrink (a listed function that grew fails, and so does one now at most 80 lines or gone: remove
it from the list).

A function's length is ``end_lineno - lineno + 1`` of its ``def`` (decorators excluded); a nested
function counts inside its parent and on its own (``parent.inner``). Keys are ``"src path::
Qualified.name"``. ``python tests/contracts/test_function_length.py --update`` prints a fresh
``ALLOWLIST`` from the code as it is.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "jaxfeed"
RECIPES = "src/jaxfeed/recipes/"
TARGET = 80  # every function, the recipes' a rule
CEILING = 120  # every function, no exception

# Functions outside recipes/ over TARGET lines, with their length: may only shrink (regenerate
# with --update; those over CEILING break rule 2 as well, until they are split).
ALLOWLIST: dict[str, int] = {}


def function_lengths() -> dict[str, int]:
    """``{"src/jaxfeed/x.py::Class.method": lines}`` for every function and method under src/
    (of two definitions with one name, such as a property's getter and setter, the longer).

    >>> lengths()["src/jaxfeed/cli/__init__.py::main"] > 10  # the tests' cached reading
    True
    """
    out: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        for name, lines in _walk(tree, ""):
            key = f"{rel}::{name}"
            out[key] = max(out.get(key, 0), lines)
    return out


def _walk(node: ast.AST, prefix: str) -> list[tuple[str, int]]:
    """(qualified name, lines) of the functions under ``node``, nested ones too."""
    found = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                found.append((name, child.end_lineno - child.lineno + 1))
            found.extend(_walk(child, f"{name}."))
        else:
            found.extend(_walk(child, prefix))
    return found


def _where(key: str, lines: int) -> str:
    path, name = key.split("::")
    return f"{path}: {name} is {lines} lines"


@functools.cache
def lengths() -> dict[str, int]:
    """:func:`function_lengths`, read once by the worker that runs these tests (not at import:
    every worker of ``make test`` imports this file to collect it)."""
    return function_lengths()


def test_no_recipe_function_over_80_lines():
    """Rule 1: the command's task logic reads as short steps."""
    long = [
        f"{_where(k, n)} (rule 1: at most {TARGET} in recipes/)"
        for k, n in sorted(lengths().items())
        if k.startswith(RECIPES) and n > TARGET
    ]
    assert not long, "\n".join(long)


def test_no_function_over_120_lines():
    """Rule 2: no function anywhere is longer than a screen and a half."""
    long = [
        f"{_where(k, n)} (rule 2: at most {CEILING} anywhere)"
        for k, n in sorted(lengths().items())
        if n > CEILING
    ]
    assert not long, "\n".join(long)


def test_long_functions_are_listed_and_only_shrink():
    """Rule 3: outside recipes/, a function over 80 lines is in ALLOWLIST, no longer than its
    recorded length; one now at most 80 lines, or gone, leaves the list."""
    failures = []
    found = lengths()
    for key, lines in sorted(found.items()):
        if key.startswith(RECIPES) or lines <= TARGET:
            continue
        if key not in ALLOWLIST:
            failures.append(f"{_where(key, lines)} (rule 3: over {TARGET} and not in ALLOWLIST)")
        elif lines > ALLOWLIST[key]:
            failures.append(
                f"{_where(key, lines)} (rule 3: grew past its recorded {ALLOWLIST[key]})"
            )
    for key, recorded in sorted(ALLOWLIST.items()):
        if key not in found:
            path, name = key.split("::")
            failures.append(
                f"{path}: {name}, listed at {recorded} lines, no longer exists (rule 3: remove it "
                "from ALLOWLIST)"
            )
        elif found[key] <= TARGET:
            failures.append(
                f"{_where(key, found[key])}, at most {TARGET} now (rule 3: remove it from "
                "ALLOWLIST)"
            )
    assert not failures, "\n".join(failures)


def allowlist_source() -> str:
    """The ``ALLOWLIST`` assignment for the code as it is (``--update`` prints it)."""
    long = {k: n for k, n in sorted(lengths().items()) if not k.startswith(RECIPES) and n > TARGET}
    rows = "".join(f'    "{k}": {n},\n' for k, n in long.items())
    return f"ALLOWLIST: dict[str, int] = {{\n{rows}}}" if rows else "ALLOWLIST: dict[str, int] = {}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/contracts/test_function_length.py --update")
    print(allowlist_source())
