"""The package-internal interface of Dataset, and the layering it protects."""

import ast
from pathlib import Path

import jax
import numpy as np

import jaxfeed
from jaxfeed import Dataset

SRC = Path(jaxfeed.__file__).parent
PRIVATE = {"_derive", "_indices", "_table_rows", "_reader", "_cache_dir", "_format", "_table"}


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, function-level and ``TYPE_CHECKING`` ones included
    (``from jaxfeed.data import ops`` counts as ``jaxfeed.data.ops``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


DATA = SRC / "data"

# The floors inside jaxfeed.data: what each part must not import (a name counts with its
# submodules). Readers and writers return tables and never build a Dataset; the Dataset facade
# never needs load_dataset; only the facade and the loaders above it know the facade.
NOT_ABOVE = {
    "column.py": {"jaxfeed.data.core", "jaxfeed.data.dataset", "jaxfeed.data.ops"},
    "core.py": {"jaxfeed.data.dataset", "jaxfeed.data.ops", "jaxfeed.data.iterable"},
    "formats": {"jaxfeed.data.dataset", "jaxfeed.data.load", "jaxfeed.data.iterable"},
    "ops": {"jaxfeed.data.dataset", "jaxfeed.data.iterable", "jaxfeed.data.load"},
    "iterable": {"jaxfeed.data.dataset", "jaxfeed.data.load"},
    "dataset.py": {"jaxfeed.data.load"},
}


def test_data_floors():
    """core <- formats/ops <- iterable <- dataset <- load: nothing below imports above, and no
    part below the facade imports the package's face (``from jaxfeed import Dataset``)."""
    for name, above in NOT_ABOVE.items():
        files = sorted((DATA / name).rglob("*.py")) if (DATA / name).is_dir() else [DATA / name]
        for path in files:
            imported = _imports(path)
            found = {m for m in imported for a in above if m == a or m.startswith(a + ".")}
            assert not found, (path.relative_to(SRC), found)
            assert not _uses_face(path), path.relative_to(SRC)


def _uses_face(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "jaxfeed" and not node.level:
            return True
        if isinstance(node, ast.Import) and any(a.name == "jaxfeed" for a in node.names):
            return True
    return False


def test_no_module_reads_dataset_private_attributes():
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name in ("dataset.py", "core.py"):  # the Dataset classes themselves
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in PRIVATE
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} .{node.attr}")
    assert not offenders, offenders


def test_internal_view_reads_and_derives():
    ds = Dataset.from_dict({"x": [10, 11, 12, 13]}).with_format("numpy").select([3, 1])
    inner = ds._internal
    assert inner.indices.tolist() == [3, 1]
    assert inner.table_rows(slice(0, 2)).tolist() == [3, 1]
    assert inner.arrow().column("x").to_pylist() == [13, 11]
    assert inner.read(slice(0, 2))["x"].tolist() == [13, 11]
    out = inner.derive(ds.data, indices=np.array([0]))
    assert out.format["type"] == "numpy" and out["x"].tolist() == [10]


def test_formatters_serialise_their_own_options():
    device = jax.devices()[0]
    ds = Dataset.from_dict({"x": [1]}).with_format("jax", device=device, dtype=np.float16)
    assert ds._internal.format_state() == {
        "_format_type": "jax",
        "_format_columns": None,
        "_format_kwargs": {"device": str(device), "dtype": "float16"},
        "_output_all_columns": False,
    }
    assert Dataset.from_dict({"x": [1]})._internal.format_state()["_format_kwargs"] == {}
