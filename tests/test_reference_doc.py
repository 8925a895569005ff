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
