"""The public API stays where users found it: the 50 names of ``jaxfeed`` and the documented
modules (faces over the layered packages). The old undocumented paths of the layout before
(``jaxfeed.io``, ``jaxfeed.iterable``, ``jaxfeed.features``) are removed rather than kept for one
release with a warning, the package being not yet released: their names are ``jaxfeed``'s."""

import importlib.util

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


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_old_paths_are_gone_and_their_names_are_the_faces(old):
    """The old module paths have no module (a folder left holding only ``__pycache__`` is an
    empty namespace); every name they gave is on ``jaxfeed``."""
    spec = importlib.util.find_spec(old)
    assert spec is None or spec.origin is None, f"{old} still exists: {spec.origin}"
    for name in OLD_PATHS[old]:
        assert getattr(jaxfeed, name) is not None, name
