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
    (``from jaxfeed import ops`` counts as ``jaxfeed.ops``, ``import jaxfeed`` as ``jaxfeed``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "jaxfeed":
                names.remove("jaxfeed")
                names.update(f"jaxfeed.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


# io's loaders build datasets and sit above Dataset; its readers and writers sit below it
IO_LOADERS = {"jaxfeed.io", "jaxfeed.io.load", "jaxfeed.io.folder", "jaxfeed.io.builtin"}
IO_LOADERS |= {"jaxfeed.io.hub"}
FACES = {"jaxfeed", "jaxfeed.dataset"}  # jaxfeed's names lead to these


def test_dataset_does_not_import_io_loaders():
    for name in ("dataset.py", "core.py"):
        assert not _imports(SRC / name) & IO_LOADERS, name


def test_readers_and_writers_never_reach_dataset():
    """Readers and writers below Dataset return tables: they import neither jaxfeed.dataset nor
    the package's face (whose names lead to it), nor io's loaders (the circle dataset -> jaxfeed
    -> io -> dataset is gone)."""
    below = ["saved.py", "tabular.py", "column.py", "core.py"]
    below += [f"io/{name}.py" for name in ("files", "batches", "validate", "cache")]
    for name in below:
        assert not _imports(SRC / name) & (FACES | IO_LOADERS), name
    assert not (SRC / "io" / "disk.py").exists()  # its reading half is in saved.py


def test_no_import_circle_between_dataset_and_its_operations():
    """core <- ops/parallel/tabular/saved <- iterable <- dataset: nothing below imports above."""
    below = {
        "column.py": {"jaxfeed.core", "jaxfeed.dataset", "jaxfeed.ops"},
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
