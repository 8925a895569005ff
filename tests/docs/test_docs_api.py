"""The API reference covers every public name, and every public name has a runnable example.

The reference pages (docs/reference/*.md) hold mkdocstrings directives: ``::: jaxfeed.NAME`` for
each top-level name, ``::: jaxfeed.MODULE`` for a whole submodule (which renders its exports).
The examples are the ``>>>`` lines of the docstrings, which run as doctests
(``--doctest-modules`` over src/jaxfeed).
"""

import importlib
import importlib.util
import inspect
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
SUBMODULES = (
    "jaxfeed.transforms",
    "jaxfeed.train",
    "jaxfeed.text",
    "jaxfeed.models",
    "jaxfeed.checkpoint",
    "jaxfeed.serving",
    "jaxfeed.recipes",
)


def exports(module_name: str) -> list[str]:
    """``__all__``, or else the public functions and classes the module defines itself."""
    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        names = list(module.__all__)
    else:
        names = [
            n
            for n, obj in vars(module).items()
            if not n.startswith("_")
            and (inspect.isfunction(obj) or inspect.isclass(obj))
            and obj.__module__ == module_name
        ]
    return sorted(n for n in names if not n.startswith("__"))


def directives() -> set[str]:
    found = set()
    for page in REFERENCE.glob("*.md"):
        found |= set(re.findall(r"^::: ([\w.]+)", page.read_text(), flags=re.M))
    return found


def public_objects() -> list[tuple[str, object]]:
    out = []
    for module_name in ("jaxfeed", *SUBMODULES):
        module = importlib.import_module(module_name)
        for n in exports(module_name):
            obj = getattr(module, n)
            if inspect.ismodule(obj):
                continue
            out.append((f"{module_name}.{n}", obj))
    return out


def test_every_top_level_name_has_a_directive():
    missing = [n for n in exports("jaxfeed") if f"jaxfeed.{n}" not in directives()]
    assert not missing, f"add '::: jaxfeed.NAME' to docs/reference/jaxfeed.md for {missing}"


def test_every_submodule_is_rendered_with_its_exports():
    found = directives()
    for module_name in SUBMODULES:
        assert module_name in found, f"docs/reference needs '::: {module_name}'"
        assert exports(module_name), module_name


def test_every_public_function_and_class_has_a_docstring_with_an_example():
    missing = [
        qualified
        for qualified, obj in public_objects()
        if (inspect.isfunction(obj) or inspect.isclass(obj))
        and ">>>" not in (inspect.getdoc(obj) or "")
    ]
    assert not missing, f"no docstring example (>>>) in {missing}"


@pytest.mark.parametrize("notebook", sorted((ROOT / "docs").rglob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_are_stored_without_outputs(notebook):
    # the build executes them (mkdocs-jupyter, execute: true, cache: false): an output stored
    # in the file would be shown without having been produced by this version of the code
    nb = json.loads(notebook.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{notebook.name}: cell {i} has stored outputs"
            assert cell.get("execution_count") is None, f"{notebook.name}: cell {i} was run"


def test_the_command_page_renders_every_subcommands_help():
    from jaxfeed.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    page = (ROOT / "docs" / "guide" / "command.md").read_text()
    rendered = set(re.findall(r"^<!-- jaxfeed-help:([ \w-]*)-->$", page, flags=re.M))
    assert {c.strip() for c in rendered} >= {"", *sub.choices}


def test_the_help_hook_renders_the_parsers_help():
    spec = importlib.util.spec_from_file_location("cli_help", ROOT / "tools/docs/cli_help.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = hook.render("before\n<!-- jaxfeed-help: eval -->\nafter")
    assert page.startswith("before\n```text\n$ jaxfeed eval --help\nusage: jaxfeed eval")
    assert "--checkpoint" in page and page.endswith("```\nafter")
    with pytest.raises(RuntimeError, match="exited with 2"):
        hook.help_text("no-such-command")
