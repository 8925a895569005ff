"""Interop with Hugging Face `datasets`: wrap its Arrow table and map its features."""

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")

from jaxfeed import Array2D, ClassLabel, Dataset, Features, Sequence, Value  # noqa: E402


def make_hf():
    features = datasets.Features(
        {
            "image": datasets.Array2D((3, 2), "uint8"),
            "label": datasets.ClassLabel(names=["a", "b"]),
            "tokens": datasets.Sequence(datasets.Value("int32")),
            "text": datasets.Value("string"),
        }
    )
    images = np.arange(5 * 6, dtype=np.uint8).reshape(5, 3, 2)
    return datasets.Dataset.from_dict(
        {
            "image": images,
            "label": [0, 1, 0, 1, 1],
            "tokens": [[1], [2, 3], [], [4], [5, 6]],
            "text": list("abcde"),
        },
        features=features,
    ), images


def test_from_hf_maps_features_and_values():
    hf, images = make_hf()
    ds = Dataset.from_hf(hf)
    assert ds.features["image"] == Array2D((3, 2), "uint8")
    assert ds.features["label"] == ClassLabel(names=["a", "b"])
    assert ds.features["text"] == Value("string")
    assert isinstance(ds.features["tokens"], Sequence)
    np_ds = ds.with_format("numpy")
    np.testing.assert_array_equal(np_ds[:]["image"], images)
    np.testing.assert_array_equal(np_ds[[4, 0]]["image"], images[[4, 0]])
    assert ds[1]["tokens"] == [2, 3]
    assert ds.data is hf.data.table  # no copy
    view = ds._internal.reader.view(
        "image"
    )  # HF's list<list> storage still reads as a zero-copy view
    assert view is not None and np.shares_memory(view.single, np_ds[:]["image"])


def test_from_hf_applies_index_mapping():
    hf, images = make_hf()
    shuffled = hf.shuffle(seed=0)
    ds = Dataset.from_hf(shuffled).with_format("numpy")
    order = shuffled._indices.column(0).to_numpy()
    np.testing.assert_array_equal(ds[:]["image"], images[order])


def test_same_jax_output_as_hf():
    hf, _ = make_hf()
    ours = Dataset.from_hf(hf).with_format("jax")[:3]
    theirs = hf.with_format("jax")[:3]
    for key in ("image", "label"):
        assert ours[key].dtype == theirs[key].dtype
        np.testing.assert_array_equal(np.asarray(ours[key]), np.asarray(theirs[key]))
    assert ours["text"] == theirs["text"]


def test_hf_features_dict_roundtrip():
    hf, _ = make_hf()
    feats = Features.from_dict(hf.features.to_dict())
    assert datasets.Features.from_dict(feats.to_dict()) == hf.features
