"""The package's floors: every first-party import goes down the layer order, no import circle
exists (``TYPE_CHECKING`` imports and a module's import of its own package count), and every import
inside a function says why it is there.

Layers, lowest first (``docs/development/architecture.md`` draws them)::

    _base < runtime < data < loading < train < serve < faces < recipes < bench < cli

``models`` sits on ``runtime`` and imports only itself, ``runtime`` (the sharding plan) and
``_base``. The faces are the modules a user imports by name (``jaxfeed``, ``jaxfeed.transforms``, ``jaxfeed.checkpoint``,
``jaxfeed.serving``, ``jaxfeed.logging``, ``jaxfeed.text``): the library's public API, which the
command's recipes and the benchmarks use as a user's script would, and which nothing below them
imports. ``cli`` is the top: ``jaxfeed bench`` runs the benchmarks. Imports are counted wherever
they stand: at the top, inside a function, or under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import jaxfeed

SRC = Path(jaxfeed.__file__).parent

LAYERS = [
    "_base",
    "runtime",
    "data",
    "loading",
    "train",
    "serve",
    "faces",
    "recipes",
    "bench",
    "cli",
]
LAYER = {name: i for i, name in enumerate(LAYERS)}
LAYER["models"] = LAYER["runtime"]
FACES = {
    "jaxfeed",
    "jaxfeed.transforms",
    "jaxfeed.checkpoint",
    "jaxfeed.serving",
    "jaxfeed.logging",
    "jaxfeed.text",
}
FACE_LAYER = LAYER["faces"]

# Upward imports still to remove; empty once the layout is done, and kept empty.
KNOWN: set[tuple[str, str]] = set()

NOQA = re.compile(r"noqa:\s*PLC0415")
REASON = re.compile(r"\w{3}")


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def layer_of(module: str) -> int:
    if module in FACES:
        return FACE_LAYER
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in LAYER:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS or FACES")
    return LAYER[parts[1]]


def _resolve(node: ast.ImportFrom | ast.Import, module: str) -> list[str]:
    """The first-party modules an import statement loads (a name that is a submodule counts)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "jaxfeed"]
    if node.level:  # relative import
        base = module.split(".")[: -node.level] if module not in FACES else module.split(".")
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "jaxfeed":
        return []
    out = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        out.append(sub if sub in MODULES else target)
    return out


def _in_type_checking(parents: list[ast.AST]) -> bool:
    return any(isinstance(p, ast.If) and "TYPE_CHECKING" in ast.unparse(p.test) for p in parents)


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A source file's syntax tree, parsed once for every test here (read, never changed)."""
    return ast.parse(path.read_text())


@functools.cache
def _imports(module: str) -> tuple[tuple[str, int, str, bool], ...]:
    """(target, line, where, type_only) per first-party import; where is "top" or "function".
    Computed once per module: four tests walk every module's imports."""
    tree = _tree(MODULES[module])
    found = []

    def visit(node: ast.AST, parents: list[ast.AST]) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            in_function = any(
                isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef) for p in parents
            )
            for target in _resolve(node, module):
                found.append(
                    (
                        target,
                        node.lineno,
                        "function" if in_function else "top",
                        _in_type_checking(parents),
                    )
                )
        for child in ast.iter_child_nodes(node):
            visit(child, [*parents, node])

    visit(tree, [])
    return tuple(found)


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_imports_only_go_down():
    upward = set()
    for module in MODULES:
        mine = layer_of(module)
        package = module.split(".")[1] if "." in module else ""
        for target, _, _, _ in _imports(module):
            if target == "jaxfeed" and module not in FACES and not _uses_face_names(module):
                continue  # ``import jaxfeed`` for ``__version__``
            if (
                package == "models" and target.split(".")[1] not in ("models", "runtime", "_base")
            ) or layer_of(target) > mine:
                upward.add((module, target))
    assert upward <= KNOWN, sorted(upward - KNOWN)
    assert not KNOWN - upward, f"fixed, remove from KNOWN: {sorted(KNOWN - upward)}"


def _uses_face_names(module: str) -> bool:
    tree = _tree(MODULES[module])
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "jaxfeed"
            and not node.level
            and any(a.name != "__version__" for a in node.names)
        ):
            return True
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "jaxfeed"
            and node.attr != "__version__"
        ):
            return True
    return False


def _graph(include_functions: bool, include_type_only: bool = False) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for target, _, where, type_only in _imports(module):
            if (type_only and not include_type_only) or target == module or target not in MODULES:
                continue
            if where == "function" and not include_functions:
                continue
            graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            connect(v)
    return out


def _package_edges_removed(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's ``__init__`` that re-exports its submodules is not a cycle with them."""
    out = {}
    for module, targets in graph.items():
        out[module] = {t for t in targets if not module.startswith(t + ".")}
    return out


def test_no_import_circles():
    """No circle among the first-party imports, wherever they stand (top-level, inside functions,
    under ``TYPE_CHECKING``), a module's import of the ``__init__`` of its own package included:
    ``epochs`` imported ``loader`` for an annotation while ``loader`` imported ``epochs``, and
    ``cli/commands.py`` imported ``EXAMPLES`` from ``jaxfeed.cli``, which imports it."""
    circles = _cycles(_graph(include_functions=True, include_type_only=True))
    assert not circles, f"import circles (break each with a module both sides import): {circles}"


def test_no_module_imports_its_own_package():
    """A module never imports a name from the ``__init__`` of a package that holds it (``from
    jaxfeed.cli import EXAMPLES`` in ``jaxfeed/cli/commands.py``): a package's ``__init__`` is
    what imports its modules, so the name belongs in a module both import. Not counted:
    ``jaxfeed`` itself (the face, whose names load on first use) and a ``__main__`` module (run
    with ``python -m``, never imported by its package)."""
    found = []
    for module, path in MODULES.items():
        if path.name == "__main__.py":
            continue
        for target, line, where, type_only in _imports(module):
            if target != "jaxfeed" and module.startswith(target + "."):
                kind = "TYPE_CHECKING" if type_only else where
                found.append(f"{path.relative_to(SRC.parent)}:{line} imports {target} ({kind})")
    assert not found, found


def import_depth() -> int:
    """The longest chain of module-level first-party imports, in modules (a package
    ``__init__`` that re-exports its modules is not a level of its own)."""
    graph = _package_edges_removed(_graph(include_functions=False))
    packages = {m for m, path in MODULES.items() if path.name == "__init__.py"}
    depth: dict[str, int] = {}

    def walk(v: str) -> int:
        if v not in depth:
            depth[v] = 0
            below = max((walk(w) for w in graph[v]), default=0)
            depth[v] = below + (0 if v in packages else 1)
        return depth[v]

    return max(walk(v) for v in graph)


def test_import_depth_stays_shallow():
    """22 modules at the layout's landing (20 before it: the splits of ops and iterable added
    hops inside data), 24 once the engines and the saved-run readers stacked up in recipes, 22
    again once recipes/ was sorted by concern (the run's data loaded beside its record, not
    under its folder's helpers; the saved-run reader above the kinds): a chain that grows past
    22 means a module reaches too far down."""
    assert import_depth() <= 22


def test_function_level_imports_say_why():
    """A first-party import inside a function carries a trailing comment saying why: the import
    cost it defers or the circle it avoids (ruff's PLC0415 asks the same of every import outside
    the command and the benchmarks, which defer their imports as a rule)."""
    silent = []
    for module, path in MODULES.items():
        rel = str(path.relative_to(SRC.parent))
        lines = path.read_text().splitlines()
        tree = _tree(path)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom) and _resolve(inner, module):
                    text = " ".join(lines[inner.lineno - 1 : inner.end_lineno])
                    comment = text.split("#", 1)[1] if "#" in text else ""
                    if not REASON.search(NOQA.sub("", comment)):
                        silent.append(f"{rel}:{inner.lineno}")
    assert not silent, silent


def test_modules_stay_small_or_say_why():
    """No module over 800 lines without a one-line reason in its docstring ("Long because ...")."""
    long = []
    for module, path in MODULES.items():
        lines = path.read_text().count("\n")
        if lines > 800:
            doc = ast.get_docstring(_tree(path)) or ""
            if "long because" not in doc.lower():
                long.append(f"{module} ({lines} lines)")
    assert not long, long


SIZES = Path(__file__).with_name("module_sizes.json")  # the modules over 800 lines, as they are


def test_long_modules_do_not_grow():
    """The module-size ratchet: a module over 800 lines may not grow past its recorded size, and
    one that shrinks records its new size (``python tests/contracts/test_layers.py --update``
    writes them): a long module is split, not extended."""
    recorded = json.loads(SIZES.read_text())
    found = {
        str(path.relative_to(SRC)): path.read_text().count("\n")
        for path in MODULES.values()
        if path.read_text().count("\n") > 800
    }
    grown = [f"{m}: {n} lines, recorded {recorded.get(m, 800)}" for m, n in found.items()
             if n > recorded.get(m, 800)]  # fmt: skip
    shrunk = [f"{m}: {found.get(m, '800 or fewer')} lines now, recorded {n} (--update)"
              for m, n in recorded.items() if found.get(m, 0) < n]  # fmt: skip
    assert not grown, f"long modules grew (split them instead): {grown}"
    assert not shrunk, f"long modules shrank: record it (--update): {shrunk}"


def _package_of(path: Path) -> str:
    """``jaxfeed.loading.workers`` for ``.../jaxfeed/loading/workers/build.py``."""
    return ".".join(("jaxfeed", *path.relative_to(SRC).parent.parts))


def test_private_names_stay_in_their_package():
    """A leading underscore means private to the package (folder) that defines the name: its
    modules may import it, no other package's may (architecture.md's rule)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        mine = _package_of(path)
        for node in ast.walk(_tree(path)):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxfeed")):
                continue
            module = node.module or ""
            for alias in node.names:
                name = alias.name
                if not name.startswith("_") or name.startswith("__"):
                    continue
                folder = SRC.joinpath(*module.split(".")[1:])
                submodule = (folder / f"{name}.py").is_file() or (folder / name).is_dir()
                owner = module if submodule else module.rpartition(".")[0]
                if folder.is_dir() and not submodule:  # a name from a package's __init__
                    owner = module
                if mine != owner and not mine.startswith(owner + "."):
                    found.append(f"{path.relative_to(SRC)}: {name} from {module}")
    assert not found, f"private names imported from another package: {found}"


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--update"]:  # record the long modules as they are (after a split)
        sizes = {str(p.relative_to(SRC)): p.read_text().count("\n") for p in MODULES.values()}
        long = {m: n for m, n in sorted(sizes.items()) if n > 800}
        SIZES.write_text(json.dumps(long, indent=1) + "\n")
        print(f"recorded {len(long)} modules over 800 lines in {SIZES}")
