"""The public API stays where users found it: the 50 names of ``jaxfeed``, the documented modules
(faces over the layered packages), and the old undocumented paths, which still import for one
release with a ``DeprecationWarning``."""

import json
import subprocess
import sys

import pytest

import jaxfeed
import jaxfeed.checkpoint
import jaxfeed.logging
import jaxfeed.models
import jaxfeed.serving
import jaxfeed.text
import jaxfeed.train
import jaxfeed.transforms
from jaxfeed.loading import augment, spectrogram
from jaxfeed.serve import export as export_module
from jaxfeed.serve import spec
from jaxfeed.train import checkpoint

PUBLIC = {
    "Array2D", "Array3D", "Array4D", "Array5D", "Audio", "ClassLabel", "Column", "DataLoader",
    "Dataset", "DatasetDict", "DecodeError", "EarlyStopping", "FeatureError", "Features",
    "History", "Image", "IterableDataset", "IterableDatasetDict", "Json", "LargeList", "List",
    "NamedSplit", "Packing", "Padding", "Sequence", "Split", "Trainer", "Translation",
    "TranslationVariableLanguages", "Value", "__version__", "are_progress_bars_disabled",
    "concatenate_datasets", "disable_caching", "disable_progress_bar", "disable_progress_bars",
    "enable_caching", "enable_progress_bar", "enable_progress_bars", "export",
    "get_dataset_config_names", "get_dataset_split_names", "interleave_datasets",
    "is_caching_enabled", "is_progress_bar_enabled", "load_dataset", "load_exported",
    "load_from_disk", "logging", "plot_history", "split_dataset_by_node",
}  # fmt: skip


def test_the_face_keeps_its_fifty_names():
    assert set(jaxfeed.__all__) == PUBLIC and len(PUBLIC) == 51  # 50 names and __version__
    for name in PUBLIC:
        assert getattr(jaxfeed, name) is not None, name


def test_export_is_the_function_and_its_module_lives_in_serve():
    assert callable(jaxfeed.export) and jaxfeed.export is export_module.export
    assert jaxfeed.load_exported is export_module.load_exported
    from jaxfeed import export

    assert export is export_module.export


def test_documented_modules_are_faces_of_the_same_objects():
    for name in jaxfeed.transforms.__all__:
        source = spectrogram if name == "log_mel" else augment
        assert getattr(jaxfeed.transforms, name) is getattr(source, name), name
    for name in jaxfeed.checkpoint.__all__:
        assert getattr(jaxfeed.checkpoint, name) is getattr(checkpoint, name), name
    for name in jaxfeed.serving.__all__:
        assert getattr(jaxfeed.serving, name) is getattr(spec, name), name
    assert callable(jaxfeed.text.tokenize) and callable(jaxfeed.text.generate)
    assert jaxfeed.train.Trainer is jaxfeed.Trainer
    assert jaxfeed.models.MLP.__name__ == "MLP"


OLD_PATHS = {
    "jaxfeed.iterable": ["IterableDataset", "IterableDatasetDict", "split_dataset_by_node"],
    "jaxfeed.io": ["Dataset", "DatasetDict", "load_dataset", "load_from_disk"],
    "jaxfeed.features": ["Features", "Value", "Image", "ClassLabel", "Sequence"],
}

# One fresh interpreter for all the import checks (a module warns once, when first imported):
# first the package and its documented modules, with a moved-path warning made an error, then each
# old path, recording its warnings and whether it gives the face's objects.
PROBE = """
import importlib, json, warnings
warnings.filterwarnings("error", message=".*moved to jaxfeed", category=DeprecationWarning)
import jaxfeed
from jaxfeed import Dataset, DataLoader, Trainer, load_dataset, export
import jaxfeed.transforms, jaxfeed.checkpoint, jaxfeed.serving, jaxfeed.text
import jaxfeed.cli, jaxfeed.recipes.train
warnings.resetwarnings()
out = {}
for old, names in OLD_PATHS.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    out[old] = {
        "warnings": [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)],
        "same": [getattr(module, n) is getattr(jaxfeed, n) for n in names],
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe():
    code = f"OLD_PATHS = {OLD_PATHS!r}\n{PROBE}"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]  # the package warned about itself
    return json.loads(result.stdout)


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_old_paths_import_with_a_deprecation_warning(probe, old):
    """The old path gives the same objects as the face, and says once where they moved."""
    assert len(probe[old]["warnings"]) == 1, probe[old]
    assert f"{old} moved to jaxfeed.data" in probe[old]["warnings"][0]
    assert all(probe[old]["same"]), probe[old]
