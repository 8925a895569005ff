import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxfeed import Array2D, Dataset, Features, Sequence, Value


def test_dtype_rules(transfer_path):
    ds = Dataset.from_dict(
        {
            "u8": np.arange(4, dtype=np.uint8),
            "i64": np.arange(4, dtype=np.int64),
            "f16": np.arange(4, dtype=np.float16),
            "f64": np.arange(4, dtype=np.float64),
            "b": np.array([True, False, True, False]),
            "img": np.zeros((4, 2, 2), np.uint8),
        }
    ).with_format("jax")
    batch = ds[:4]
    assert batch["u8"].dtype == jnp.int32
    assert batch["i64"].dtype == jnp.int32
    assert batch["f16"].dtype == jnp.float32
    assert batch["f64"].dtype == jnp.float32
    assert batch["b"].dtype == jnp.bool_
    assert batch["img"].dtype == jnp.int32 and batch["img"].shape == (4, 2, 2)


def test_dtype_override():
    ds = Dataset.from_dict({"x": [1, 2], "y": [0.5, 1.5]}).with_format("jax", dtype=jnp.float16)
    batch = ds[:2]
    assert batch["x"].dtype == jnp.float16 and batch["y"].dtype == jnp.float16


@pytest.mark.parametrize("dtype", ["uint32", "uint64", "int64"])
def test_integers_that_do_not_fit_int32_raise(dtype):
    values = np.array([1, 2, 2**31 + 5], dtype=dtype)
    ds = Dataset.from_dict({"x": values}, features=Features({"x": Value(dtype)})).with_format("jax")
    np.testing.assert_array_equal(ds[:2]["x"], [1, 2])
    with pytest.raises(
        OverflowError, match=r"column 'x', row 2: value 2147483653 does not fit int32"
    ):
        ds[:3]
    with pytest.raises(OverflowError, match="column 'x', row 2"):
        ds[[0, 2]]
    with pytest.raises(OverflowError, match="does not fit int32"):
        ds[2]


def test_x64_keeps_int64_and_rejects_huge_uint64():
    jax.config.update("jax_enable_x64", True)
    try:
        ds = Dataset.from_dict(
            {"x": np.array([1, 2**40], np.int64), "u": np.array([1, 2**63 + 1], np.uint64)},
            features=Features({"x": Value("int64"), "u": Value("uint64")}),
        ).with_format("jax", columns=["x"])
        assert ds[:2]["x"].dtype == jnp.int64 and int(ds[1]["x"]) == 2**40
        with pytest.raises(OverflowError, match="column 'u', row 1"):
            ds.with_format("jax")[:2]
    finally:
        jax.config.update("jax_enable_x64", False)


def test_device_object_and_strings(transfer_path):
    dev = jax.devices()[3]
    ds = Dataset.from_dict({"x": [[1, 2], [3, 4]]})
    for spec in (dev, str(dev), "cpu:3", "TFRT_CPU_3"):
        out = ds.with_format("jax", device=spec)[:2]["x"]
        assert out.devices() == {dev} and out.committed
    assert ds.with_format("jax", device="cpu")[0]["x"].devices() == {jax.devices()[0]}
    with pytest.raises(ValueError, match="unknown device 'gpu:7'; available devices: 'cpu:0'"):
        ds.with_format("jax", device="gpu:7")
    with pytest.raises(ValueError, match="device must be a device string"):
        ds.with_format("jax", device=3)


def test_one_device_transfer_per_batch(monkeypatch):
    import jaxfeed.runtime.devices

    calls = []
    real = jaxfeed.runtime.devices.device_put

    def counting(leaves, placements, *args):
        calls.append(len(leaves))
        return real(leaves, placements, *args)

    monkeypatch.setattr(jaxfeed.runtime.devices, "device_put", counting)
    ds = Dataset.from_dict(
        {"a": np.zeros((8, 3), np.float32), "b": list(range(8)), "c": [[1], [1, 2]] * 4}
    ).with_format("jax")
    for _ in ds.iter(batch_size=4):
        pass
    assert calls == [6, 6]  # one call per batch: a, b and the 4 ragged rows of c


@pytest.fixture(params=["fast", "public"])
def transfer_path(request, monkeypatch):
    """Run a test through jaxlib's direct transfer and through the public jax.device_put."""
    import jaxfeed.runtime.devices

    if request.param == "public":
        monkeypatch.setattr(jaxfeed.runtime.devices, "_fast_put", False)
    else:
        monkeypatch.setattr(jaxfeed.runtime.devices, "_fast_put", None)
        assert jaxfeed.runtime.devices._load_fast_put(), (
            "jaxlib's batched_device_put is not reachable"
        )
    return request.param


def test_sharding_over_8_devices(transfer_path):
    devices = jax.devices()
    assert len(devices) == 8
    mesh = Mesh(np.array(devices), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    images = np.arange(16 * 4 * 4, dtype=np.uint8).reshape(16, 4, 4)
    ds = Dataset.from_dict(
        {"image": images, "label": list(range(16)), "name": [str(i) for i in range(16)]},
        features=Features(
            {"image": Array2D((4, 4), "uint8"), "label": Value("int64"), "name": Value("string")}
        ),
    ).with_format("jax", device=sharding)
    batch = ds[:16]
    assert batch["image"].sharding == sharding
    assert [s.data.shape for s in batch["image"].addressable_shards] == [(2, 4, 4)] * 8
    np.testing.assert_array_equal(np.asarray(batch["image"]), images)
    assert batch["name"][:2] == ["0", "1"]
    row = ds[3]
    assert row["image"].sharding.is_fully_replicated
    np.testing.assert_array_equal(np.asarray(row["image"]), images[3])
    with pytest.raises(
        ValueError, match="a batch of 10 rows cannot be split evenly over the 8 devices"
    ):
        ds[:10]
    assert [b["label"].shape for b in ds.iter(batch_size=8)] == [(8,), (8,)]


def test_ragged_and_nested_to_jax():
    feats = Features(
        {
            "seq": Sequence(Value("float64")),
            "nested": {"a": Value("int64"), "b": Sequence(Value("int8"))},
        }
    )
    ds = Dataset.from_dict(
        {"seq": [[1.0], [2.0, 3.0]], "nested": [{"a": 1, "b": [1, 2]}, {"a": 2, "b": []}]},
        features=feats,
    ).with_format("jax")
    batch = ds[:2]
    assert [x.shape for x in batch["seq"]] == [(1,), (2,)]
    assert batch["seq"][1].dtype == jnp.float32
    assert batch["nested"][0]["a"].dtype == jnp.int32
    assert batch["nested"][1]["b"].shape == (0,)


def test_nulls_in_numbers():
    ds = Dataset.from_dict({"x": [1, None, 3]})
    out = ds.with_format("numpy")[:3]["x"]
    assert out.dtype == np.float64 and np.isnan(out[1])
    assert ds.with_format("jax")[:3]["x"].dtype == jnp.float32


def test_numpy_format_keeps_stored_dtype():
    ds = Dataset.from_dict({"x": np.arange(3, dtype=np.uint8)}).with_format("numpy")
    assert ds[:3]["x"].dtype == np.uint8
