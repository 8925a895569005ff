"""Every example of the HF "Use with JAX" guide (../shared/reference), with the import swapped.

Today's JAX prints ``Array`` where the guide shows ``DeviceArray``, and names devices ``cpu:0``.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxfeed import Array2D, ClassLabel, Dataset, DatasetDict, Features


def assert_array(x, expected, dtype):
    assert isinstance(x, jax.Array)
    assert x.dtype == dtype
    np.testing.assert_array_equal(np.asarray(x), np.asarray(expected))


def test_dataset_format_jax():
    data = [[1, 2], [3, 4]]
    ds = Dataset.from_dict({"data": data})
    ds = ds.with_format("jax")
    row = ds[0]
    assert list(row) == ["data"]
    assert_array(row["data"], [1, 2], jnp.int32)
    assert_array(ds[:2]["data"], [[1, 2], [3, 4]], jnp.int32)
    assert repr(ds[0]) == "{'data': Array([1, 2], dtype=int32)}"


def test_datasetdict_format_jax():
    data = {"train": {"data": [[1, 2], [3, 4]]}, "test": {"data": [[5, 6], [7, 8]]}}
    dds = DatasetDict.from_dict(data)
    dds = dds.with_format("jax")
    assert_array(dds["train"][:2]["data"], [[1, 2], [3, 4]], jnp.int32)
    assert_array(dds["test"][:2]["data"], [[5, 6], [7, 8]], jnp.int32)


def test_format_applies_on_access_only():
    ds = Dataset.from_dict({"data": [[1, 2], [3, 4]]})
    formatted = ds.with_format("jax")
    assert ds.format["type"] is None  # with_format returns a new dataset
    assert formatted.format["type"] == "jax"
    assert ds[0] == {"data": [1, 2]}


def test_device_string():
    data = [[1, 2], [3, 4]]
    ds = Dataset.from_dict({"data": data})
    device = str(jax.devices()[0])
    assert device == "cpu:0"
    ds = ds.with_format("jax", device=device)
    assert_array(ds[0]["data"], [1, 2], jnp.int32)
    assert ds[0]["data"].devices() == {jax.devices()[0]}
    assert ds[0]["data"].device == jax.devices()[0]


def test_default_device():
    ds = Dataset.from_dict({"data": [[1, 2]]}).with_format("jax")
    assert ds[0]["data"].devices() == {jax.devices()[0]}


def test_nd_fixed_shape_inferred():
    data = [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    ds = Dataset.from_dict({"data": data})
    ds = ds.with_format("jax")
    assert_array(ds[0]["data"], [[1, 2], [3, 4]], jnp.int32)
    assert ds[:2]["data"].shape == (2, 2, 2)


def test_nd_varying_shape():
    data = [[[1, 2], [3]], [[4, 5, 6], [7, 8]]]
    ds = Dataset.from_dict({"data": data})
    ds = ds.with_format("jax")
    row = ds[0]["data"]
    assert isinstance(row, list) and len(row) == 2
    assert_array(row[0], [1, 2], jnp.int32)
    assert_array(row[1], [3], jnp.int32)
    assert repr(ds[0]) == "{'data': [Array([1, 2], dtype=int32), Array([3], dtype=int32)]}"


def test_array2d_feature():
    data = [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    features = Features({"data": Array2D(shape=(2, 2), dtype="int32")})
    ds = Dataset.from_dict({"data": data}, features=features)
    ds = ds.with_format("jax")
    assert_array(ds[0]["data"], [[1, 2], [3, 4]], jnp.int32)
    assert_array(ds[:2]["data"], data, jnp.int32)
    assert ds[:2]["data"].shape == (2, 2, 2)


def test_class_label():
    labels = [0, 0, 1]
    features = Features({"label": ClassLabel(names=["negative", "positive"])})
    ds = Dataset.from_dict({"label": labels}, features=features)
    ds = ds.with_format("jax")
    assert_array(ds[:3]["label"], [0, 0, 1], jnp.int32)


def test_strings_and_binary_unchanged():
    ds = Dataset.from_dict({"text": ["a", "b"], "raw": [b"x", b"y"]}).with_format("jax")
    assert ds[0] == {"text": "a", "raw": b"x"}
    assert ds[:2] == {"text": ["a", "b"], "raw": [b"x", b"y"]}


def test_training_loop_iter():
    images = np.arange(10 * 4 * 4, dtype=np.uint8).reshape(10, 4, 4)
    ds = Dataset.from_dict(
        {"image": images, "label": list(range(10))},
        features=Features({"image": Array2D((4, 4), "uint8"), "label": ClassLabel(num_classes=10)}),
    ).with_format("jax")
    seen = []
    for _epoch in range(2):
        for batch in ds.iter(batch_size=4):
            x, y = batch["image"], batch["label"]
            assert x.shape[1:] == (4, 4) and x.shape[0] == y.shape[0]
            seen.append(np.asarray(y))
    np.testing.assert_array_equal(np.concatenate(seen[:3]), np.arange(10))
    assert [len(s) for s in seen[:3]] == [4, 4, 2]


def test_image_feature(tmp_path):
    import PIL.Image

    from jaxfeed import Image

    path = tmp_path / "image.png"
    PIL.Image.fromarray(np.full((51, 52, 3), 255, np.uint8)).save(path)
    images = [str(path)] * 10
    features = Features({"image": Image()})
    ds = Dataset.from_dict({"image": images}, features=features)
    ds = ds.with_format("jax")
    assert ds[0]["image"].shape == (51, 52, 3)
    assert_array(ds[0]["image"], np.full((51, 52, 3), 255), jnp.uint8)
    assert ds[:2]["image"].shape == (2, 51, 52, 3)
    assert ds[:2]["image"].dtype == jnp.uint8


def test_audio_feature(tmp_path):
    import soundfile

    from jaxfeed import Audio

    path = tmp_path / "audio.wav"
    samples = (np.sin(np.arange(4410) / 10) * 0.1).astype(np.float32)
    soundfile.write(path, samples, 44100, subtype="FLOAT")
    audio = [str(path)] * 10
    features = Features({"audio": Audio()})
    ds = Dataset.from_dict({"audio": audio}, features=features)
    ds = ds.with_format("jax")
    assert_array(ds[0]["audio"]["array"], samples, jnp.float32)
    assert_array(ds[0]["audio"]["sampling_rate"], 44100, jnp.int32)


def test_load_dataset_ylecun_mnist_from_the_hub_cache(tmp_path, monkeypatch):
    """`load_dataset("ylecun/mnist")`, served from a Hub cache written here (no network)."""
    import io

    import huggingface_hub.constants
    import PIL.Image
    import pytest

    datasets = pytest.importorskip("datasets")
    from jaxfeed import load_dataset

    rng = np.random.default_rng(0)
    snapshot = tmp_path / "datasets--ylecun--mnist" / "snapshots" / ("a" * 40)
    (tmp_path / "datasets--ylecun--mnist" / "refs").mkdir(parents=True)
    (tmp_path / "datasets--ylecun--mnist" / "refs" / "main").write_text("a" * 40)
    (snapshot / "mnist").mkdir(parents=True)
    hf_features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=[str(i) for i in range(10)])}
    )
    for split, n in (("train", 8), ("test", 2)):
        pngs = []
        for a in rng.integers(0, 256, (n, 28, 28), dtype=np.uint8):
            buffer = io.BytesIO()
            PIL.Image.fromarray(a).save(buffer, format="PNG")
            pngs.append({"bytes": buffer.getvalue(), "path": None})
        hf = datasets.Dataset.from_dict({"image": pngs, "label": [5] * n}, features=hf_features)
        hf.to_parquet(str(snapshot / "mnist" / f"{split}-00000-of-00001.parquet"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)

    ds = load_dataset("ylecun/mnist", cache_dir=str(tmp_path))
    ds = ds.with_format("jax")
    row = ds["train"][0]
    assert row["image"].shape == (28, 28) and row["image"].dtype == jnp.uint8
    assert_array(row["label"], 5, jnp.int32)
    for _epoch in range(2):
        for batch in ds["train"].iter(batch_size=4):
            x, y = batch["image"], batch["label"]
            assert x.shape == (4, 28, 28) and y.shape == (4,)
