import io
import json
import multiprocessing
import threading
import time

import jax
import numpy as np
import PIL.Image
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxfeed import Array2D, ClassLabel, DataLoader, Dataset, DecodeError, Features, Image, Value


def make_ds(n=50):
    return Dataset.from_dict(
        {
            "x": np.arange(n * 4, dtype=np.uint8).reshape(n, 2, 2),
            "id": np.arange(n),
            "label": np.arange(n) % 3,
            "name": [f"r{i}" for i in range(n)],
        },
        features=Features(
            {
                "x": Array2D((2, 2), "uint8"),
                "id": Value("int64"),
                "label": ClassLabel(num_classes=3),
                "name": Value("string"),
            }
        ),
    )


def ids(batches):
    return [np.asarray(b["id"]).tolist() for b in batches]


def test_batches_types_and_len():
    loader = DataLoader(make_ds(), batch_size=16)
    batches = list(loader)
    assert len(loader) == 4 and [len(b["id"]) for b in batches] == [16, 16, 16, 2]
    first = batches[0]
    assert (
        isinstance(first["x"], jax.Array)
        and first["x"].dtype == np.uint8
        and first["x"].shape == (16, 2, 2)
    )
    assert first["label"].dtype == np.int32 and first["id"].dtype == np.int32
    assert first["name"][:2] == ["r0", "r1"]
    assert sum(ids(batches), []) == list(range(50))
    assert len(DataLoader(make_ds(), batch_size=16, drop_last=True)) == 3


def test_shuffle_is_deterministic_and_exactly_once_per_epoch():
    a = DataLoader(make_ds(), batch_size=8, shuffle=True, seed=1)
    b = DataLoader(make_ds(), batch_size=8, shuffle=True, seed=1)
    epoch0, epoch1 = ids(a), ids(a)
    assert epoch0 == ids(b) and epoch1 == ids(b)
    for epoch in (epoch0, epoch1):
        assert sorted(sum(epoch, [])) == list(range(50))
    assert epoch0 != epoch1 and sum(epoch0, []) != list(range(50))
    assert ids(DataLoader(make_ds(), batch_size=8, shuffle=True, seed=2)) != epoch0
    assert a.epoch == 2
    dropped = DataLoader(make_ds(), batch_size=8, shuffle=True, seed=1, drop_last=True)
    assert ids(dropped) == epoch0[:-1]


@pytest.mark.parametrize("prefetch", [0, 3])
def test_resume_at_every_position(prefetch):
    def augment(batch, rng):
        return {**batch, "noise": rng.integers(0, 1000, len(batch["id"]))}

    def loader():
        return DataLoader(
            make_ds(23), batch_size=5, shuffle=True, seed=7, transform=augment, prefetch=prefetch
        )

    reference = loader()
    stream = [
        (np.asarray(b["id"]).tolist(), np.asarray(b["noise"]).tolist())
        for _ in range(2)
        for b in reference
    ]
    per_epoch = len(reference)
    for k in range(2 * per_epoch + 1):
        first = loader()
        it = iter(first)
        for _ in range(k):
            if _ and _ % per_epoch == 0:
                it = iter(first)
            next(it)
        state = json.loads(json.dumps(first.state_dict()))
        first.close()
        second = loader()
        second.load_state_dict(state)
        rest = []
        while len(rest) < 2 * per_epoch - k:
            rest += [
                (np.asarray(b["id"]).tolist(), np.asarray(b["noise"]).tolist()) for b in second
            ]
        assert rest[: 2 * per_epoch - k] == stream[k:], k


@pytest.mark.parametrize("transform", [None, dict], ids=["placed-ahead", "prefetch-thread"])
def test_prefetched_batches_are_not_consumed(transform):
    # a transform runs the prefetch thread; without one the iterating thread places ahead
    loader = DataLoader(make_ds(), batch_size=4, prefetch=6, transform=transform)
    it = iter(loader)
    next(it), next(it)
    end = time.monotonic() + 30  # until the producer is as far ahead as it may go
    while loader.debug_info()["read_ahead"] < 6 and time.monotonic() < end:
        time.sleep(0.01)
    assert loader.debug_info()["read_ahead"] == 6 == loader.debug_info()["read_ahead_bound"]
    assert loader.state_dict()["batches_consumed"] == 2
    resumed = DataLoader(make_ds(), batch_size=4)
    resumed.load_state_dict(loader.state_dict())
    assert np.asarray(next(iter(resumed))["id"]).tolist() == [8, 9, 10, 11]


def test_numeric_prefetch_places_ahead_without_a_thread():
    # nothing to decode or transform: the iterating thread places the batches ahead itself
    def prefetch_threads():
        return {t for t in threading.enumerate() if t.name == "jaxfeed-prefetch"}

    before = prefetch_threads()
    expected = ids(DataLoader(make_ds(), batch_size=8, shuffle=True, seed=3, prefetch=0))
    loader = DataLoader(make_ds(), batch_size=8, shuffle=True, seed=3, prefetch=2)
    it = iter(loader)
    first = ids([next(it), next(it)])
    assert prefetch_threads() <= before
    assert first == expected[:2] and loader.state_dict()["batches_consumed"] == 2
    assert first + ids(it) == expected
    resumed = DataLoader(make_ds(), batch_size=8, shuffle=True, seed=3, prefetch=2)
    resumed.load_state_dict({**loader.state_dict(), "epoch": 0, "batches_consumed": 3})
    assert ids(resumed) == expected[3:]


def test_numeric_batch_error_comes_in_its_turn():
    # batch 2 fails while batch 0 is returned; batches 0 and 1 still come first
    ds = Dataset.from_dict({"v": np.array([0] * 9 + [2**40] + [0] * 6, dtype=np.int64)})
    loader = DataLoader(ds, batch_size=4, prefetch=2)
    it = iter(loader)
    assert [np.asarray(next(it)["v"]).tolist() for _ in range(2)] == [[0] * 4] * 2
    with pytest.raises(OverflowError, match="column 'v', row 9"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert loader.state_dict()["batches_consumed"] == 2


def test_state_mismatch_is_rejected():
    state = DataLoader(make_ds(50), batch_size=4).state_dict()
    with pytest.raises(ValueError, match="num_rows is 50 in the state but 40 here"):
        DataLoader(make_ds(40), batch_size=4).load_state_dict(state)
    with pytest.raises(ValueError, match="batch_size is 4 in the state but 8 here"):
        DataLoader(make_ds(50), batch_size=8).load_state_dict(state)


def test_sharding_over_8_devices():
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    loader = DataLoader(make_ds(64), batch_size=16, sharding=sharding, shuffle=True)
    for batch in loader:
        assert batch["x"].sharding == sharding
        assert [s.data.shape for s in batch["x"].addressable_shards] == [(2, 2, 2)] * 8
        assert len({s.device for s in batch["id"].addressable_shards}) == 8
    with pytest.raises(ValueError, match="batch_size 12 cannot be split over the 8 devices"):
        DataLoader(make_ds(64), batch_size=12, sharding=sharding)
    with pytest.raises(ValueError, match=r"the last batch has 4 rows.*set drop_last=True"):
        DataLoader(make_ds(36), batch_size=16, sharding=sharding)


def test_device_placement():
    dev = jax.devices()[5]
    batch = next(iter(DataLoader(make_ds(), batch_size=4, device=str(dev))))
    assert batch["x"].devices() == {dev} and batch["x"].committed


def test_argument_errors():
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        DataLoader(make_ds(), batch_size=0)
    with pytest.raises(ValueError, match=r"columns \['nope'\] are not in the dataset"):
        DataLoader(make_ds(), batch_size=4, columns=["nope"])
    with pytest.raises(ValueError, match="fewer than one batch of 64, and drop_last=True"):
        DataLoader(make_ds(), batch_size=64, drop_last=True)
    with pytest.raises(ValueError, match="not both"):
        DataLoader(
            make_ds(),
            batch_size=4,
            device="cpu:0",
            sharding=NamedSharding(Mesh(np.array(jax.devices()), ("d",)), PartitionSpec("d")),
        )
    with pytest.raises(TypeError, match="DataLoader needs a jaxfeed Dataset"):
        DataLoader(42, batch_size=4)


def test_columns_and_generic_sources():
    batch = next(iter(DataLoader(make_ds(), batch_size=4, columns=["id"])))
    assert list(batch) == ["id"]

    class Squares:
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return {"x": np.float32(i * i), "v": np.full(3, i, np.int16)}

    batches = list(DataLoader(Squares(), batch_size=4))
    assert np.asarray(batches[0]["x"]).tolist() == [0, 1, 4, 9] and batches[2]["v"].shape == (2, 3)


def test_hf_dataset_input():
    datasets = pytest.importorskip("datasets")
    hf = datasets.Dataset.from_dict({"x": np.arange(12, dtype=np.float32), "y": list(range(12))})
    batches = list(DataLoader(hf, batch_size=5, shuffle=True, seed=0))
    assert sorted(sum((np.asarray(b["y"]).tolist() for b in batches), [])) == list(range(12))


def image_ds(n=24, corrupt=None):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (n, 6, 6), dtype=np.uint8)
    images = []
    for i, a in enumerate(pixels):
        buffer = io.BytesIO()
        PIL.Image.fromarray(a).save(buffer, format="PNG")
        images.append(b"junk" if i == corrupt else buffer.getvalue())
    return Dataset.from_dict(
        {"image": images, "id": np.arange(n)},
        features=Features({"image": Image(), "id": Value("int64")}),
    ), pixels


@pytest.mark.parametrize(
    "workers", [(0, "process"), (2, "thread"), pytest.param((2, "process"), marks=pytest.mark.slow)]
)
def test_image_decoding_in_workers(workers):
    ds, pixels = image_ds()
    num_workers, mode = workers
    loader = DataLoader(
        ds, batch_size=8, shuffle=True, seed=0, num_workers=num_workers, worker_mode=mode
    )
    for batch in loader:
        assert batch["image"].dtype == np.uint8 and batch["image"].shape == (8, 6, 6)
        np.testing.assert_array_equal(np.asarray(batch["image"]), pixels[np.asarray(batch["id"])])
    loader.close()
    assert not multiprocessing.active_children()


@pytest.mark.parametrize(
    "workers", [(0, "process"), (2, "thread"), pytest.param((2, "process"), marks=pytest.mark.slow)]
)
def test_decode_error_surfaces_with_row_and_cleans_up(workers):
    ds, _ = image_ds(corrupt=13)
    before = threading.active_count()
    loader = DataLoader(ds, batch_size=8, num_workers=workers[0], worker_mode=workers[1])
    with pytest.raises(DecodeError, match="column 'image', row 13"):
        list(loader)
    assert loader.debug_info()["backend"] is None and not multiprocessing.active_children()
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == before


def test_transform_error_surfaces():
    def bad(batch):
        raise RuntimeError("boom in transform")

    with pytest.raises(RuntimeError, match="boom in transform"):
        next(iter(DataLoader(make_ds(), batch_size=4, transform=bad)))


def test_break_and_gc_leave_no_threads_or_processes():
    before = threading.active_count()
    ds, _ = image_ds()
    loader = DataLoader(ds, batch_size=4, prefetch=2, num_workers=2, worker_mode="thread")
    for _ in loader:
        break
    loader.close()  # the worker threads live as long as the loader (started once, not per epoch)
    assert threading.active_count() == before
    loader = DataLoader(make_ds(), batch_size=4, prefetch=4)
    it = iter(loader)
    next(it)
    del it, loader
    assert threading.active_count() == before


@pytest.mark.slow
def test_break_keeps_worker_processes_until_close():
    ds, _ = image_ds()
    loader = DataLoader(ds, batch_size=4, num_workers=2, worker_mode="process")
    for _ in loader:
        break
    pids = {p.pid for p in multiprocessing.active_children()}
    assert len(pids) == 2  # started once per loader, kept for the next epoch
    assert len(list(loader)) == 6
    assert {p.pid for p in multiprocessing.active_children()} == pids
    loader.close()
    assert not multiprocessing.active_children()


def test_dataloader_of_a_stream_is_a_dataloader():
    """Promise: ``DataLoader(...)`` always returns a DataLoader, also for an IterableDataset (it is
    then the streaming loader, which has no len())."""
    from jaxfeed import IterableDataset
    from jaxfeed.loading.stream_loader import StreamingDataLoader

    stream = IterableDataset.from_dataset(make_ds(10))
    loader = DataLoader(stream, batch_size=4, shuffle=True, seed=1)
    assert isinstance(loader, DataLoader) and type(loader) is StreamingDataLoader
    assert issubclass(StreamingDataLoader, DataLoader) and not hasattr(loader, "__len__")
    assert loader.batch_size == 4 and loader.seed == 1 and loader.epoch == 0
    assert sorted(i for b in loader for i in np.asarray(b["id"]).tolist()) == list(range(10))
    with loader:
        assert isinstance(DataLoader(make_ds(), batch_size=4), DataLoader)
    assert type(DataLoader(make_ds(), batch_size=4)) is DataLoader


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"batch_size": True}, ValueError, "batch_size must be a positive int, got True"),
        ({"batch_size": 4, "prefetch": -1}, ValueError, "prefetch must be an int >= 0, got -1"),
        ({"batch_size": 4, "num_workers": -2}, ValueError, "num_workers must be an int >= 0"),
        ({"batch_size": 4, "worker_mode": "fork"}, ValueError, "worker_mode must be 'process'"),
        ({"batch_size": 4, "device": "cpu", "sharding": object()}, ValueError, "not both"),
        ({"batch_size": 4, "timeout": 0}, ValueError, "timeout must be a number of seconds > 0"),
        ({"batch_size": 4, "transform": 3}, TypeError, "transform must be a function, got int"),
        ({"batch_size": 4, "padding": 8}, TypeError, "padding must be a jaxfeed.Padding"),
        ({"batch_size": 4, "bucket_by_length": 1}, ValueError, "bucket_by_length must be True"),
        ({"batch_size": 4, "sharding": "data"}, ValueError, "sharding must be a jax.sharding"),
    ],
)
def test_loader_options_are_checked_once_for_both_loaders(kwargs, error, message):
    """LoaderOptions holds the argument checks: the map-style and the streaming loader raise the
    same errors as LoaderOptions itself (a stream refuses timeout= before any check)."""
    from jaxfeed import IterableDataset, Packing
    from jaxfeed.loading.options import LoaderOptions

    with pytest.raises(error, match=message):
        LoaderOptions(**kwargs)
    stream = IterableDataset.from_dataset(make_ds())
    for dataset in (make_ds(), stream) if "timeout" not in kwargs else (make_ds(),):
        with pytest.raises(error, match=message):
            DataLoader(dataset, **kwargs)
    with pytest.raises(ValueError, match="packing= makes rows of one fixed length"):
        LoaderOptions(batch_size=4, packing=Packing(length=8), bucket_by_length=True)


def test_loader_options_keep_normalised_values():
    from jaxfeed import Padding
    from jaxfeed.loading.options import LoaderOptions

    options = LoaderOptions(batch_size=np.int64(8), seed=np.int32(3), timeout=2, drop_last=1)
    assert (options.batch_size, options.seed, options.timeout, options.drop_last) == (
        8,
        3,
        2.0,
        True,
    )
    assert type(options.batch_size) is int and options.padding is None
    assert LoaderOptions(batch_size=8, bucket_by_length=True).padding == Padding()
    assert LoaderOptions(batch_size=8, num_workers="auto").num_workers == "auto"
    with pytest.raises(AttributeError):
        options.batch_size = 4  # frozen
    loader = DataLoader(make_ds(), batch_size=8, num_workers="auto", bucket_by_length=False)
    assert isinstance(loader.options, LoaderOptions) and loader.num_workers >= 1
