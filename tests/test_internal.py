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
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_dataset_does_not_import_io():
    for name in ("dataset.py", "core.py"):
        assert not {m for m in _imports(SRC / name) if m.startswith("jaxfeed.io")}


def test_no_import_circle_between_dataset_and_its_operations():
    """core <- ops/parallel/tabular/saved <- iterable <- dataset: nothing below imports above."""
    below = {
        "core.py": {"jaxfeed.dataset", "jaxfeed.ops", "jaxfeed.iterable", "jaxfeed.parallel"},
        "ops": {"jaxfeed.dataset", "jaxfeed.iterable"},
        "parallel.py": {"jaxfeed.dataset", "jaxfeed.ops", "jaxfeed.iterable"},
        "tabular.py": {"jaxfeed.dataset", "jaxfeed.ops"},
        "saved.py": {"jaxfeed.dataset", "jaxfeed.ops"},
        "iterable": {"jaxfeed.dataset"},
    }
    for name, above in below.items():
        files = sorted((SRC / name).rglob("*.py")) if (SRC / name).is_dir() else [SRC / name]
        for path in files:
            found = {m for m in _imports(path) for a in above if m == a or m.startswith(a + ".")}
            assert not found, (path.relative_to(SRC), found)


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
