"""Spark and Ray: ``from_spark``, ``from_ray`` and ``to_ray`` on a real local Spark (``local[2]``:
executors in their own Python processes) and a real local Ray (two CPUs), with small data.

One Spark session and one Ray instance serve the whole file (starting them costs tens of seconds
on a loaded 2-core machine); the file is skipped without the ``spark`` / ``ray`` extras (or
without Java for Spark). The first section ports `datasets`' own ``from_spark`` tests
(tests/packaged_modules/test_spark.py and test_iterable_dataset.py::test_from_spark_streaming).
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jaxfeed import (
    Array3D,
    Audio,
    ClassLabel,
    Dataset,
    Features,
    Image,
    IterableDataset,
    List,
    Value,
    load_dataset,
)
from jaxfeed._base.extras import MissingExtraError

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors: this interpreter, not python3
    from pyspark.sql import SparkSession

    handlers = _signal_handlers()

    # A short-lived JVM: the client compiler only, the serial collector, no whole-stage code
    # generation (Spark's own speed-up for long jobs), on the loopback interface: the file's
    # processes took 37 CPU seconds instead of 63 (the JVM 13 instead of 33) on the 2-core machine.
    session = (
        SparkSession.builder.master("local[2]")
        .appName("jaxfeed-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "512m")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.codegen.wholeStage", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    _restore(handlers)  # SparkContext leaves its SIGINT handler installed after stop()


@pytest.fixture(scope="module")
def ray_data():
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    pytest.importorskip("ray.data")
    handlers = _signal_handlers()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=200 << 20,
        configure_logging=False,
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray.data
    ray.shutdown()
    _restore(handlers)  # ray.init installs a SIGTERM handler that shutdown() leaves behind


def _materialized(ds):
    """``ds.materialize()`` with its blocks stored in the dataset's order: Ray stores them in the
    order its tasks finish unless the dataset's own context (copied when it was made) has
    ``preserve_order`` (under load block 2 came before block 1, and a stream read from it left
    ``range``'s order). Only the materialization runs with it: reading the blocks back in order
    is ``from_ray``'s own job, tested here."""
    ds.context.execution_options.preserve_order = True
    return ds.materialize()


def _signal_handlers():
    return {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}


def _restore(handlers):
    """Put back the handlers an engine replaced: the tests that run after this file in the same
    process (the trainer's preemption tests among them) expect the interpreter's own."""
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


# ------------------------------------------------------------- ported from `datasets`' tests
# Not ported: test_config_raises_when_invalid_name and test_config_raises_when_invalid_data_files
# (they check datasets' BuilderConfig, which jaxfeed's from_spark has no equivalent of).


def _rows_by_partition(df, partition_order):
    """Each partition's rows, sorted: a repartitioned frame's rows come in the order its shuffle
    blocks are fetched, which may differ from one Spark job to the next."""
    out = []
    for part_id in partition_order:
        partition = df.where(f"SPARK_PARTITION_ID() = {part_id}").collect()
        out.append(sorted((row.asDict() for row in partition), key=lambda r: r["id"]))
    return out


def _chunked(rows, like):
    """``rows`` cut as ``like``'s partitions are, each sorted."""
    out, lo = [], 0
    for part in like:
        out.append(sorted(rows[lo : lo + len(part)], key=lambda r: r["id"]))
        lo += len(part)
    assert lo == len(rows)
    return out


def test_repartition_df_if_needed(spark, tmp_path):
    # datasets repartitions the DataFrame so no shard exceeds max_shard_size; jaxfeed's
    # executors split their output instead: 8-byte ints, 16 bytes a shard -> 50 shards of 2 rows
    df = spark.range(100).repartition(1)
    ds = Dataset.from_spark(df, cache_dir=str(tmp_path), max_shard_size=16)
    assert len(ds.cache_files) == 50
    assert ds["id"][:] == list(range(100))


def test_repartition_df_if_needed_max_num_df_rows(spark, tmp_path):
    df = spark.range(100).repartition(1)
    ds = Dataset.from_spark(df, cache_dir=str(tmp_path), max_shard_size=1)
    assert len(ds.cache_files) == 100  # not more shards than rows


def test_partitions_over_max_shard_size_keep_the_frames_order(spark, tmp_path):
    """Two partitions of 50 rows, each written as several files of 8 rows: the dataset holds
    them in the DataFrame's order (not file 0 of each partition, then file 1 of each, ...)."""
    df = spark.range(0, 100, 1, 2)
    ds = Dataset.from_spark(df, cache_dir=str(tmp_path), max_shard_size=64)
    assert len(ds.cache_files) == 14  # 7 files a partition: 6 of 8 rows, one of 2
    assert ds["id"][:] == list(range(100))


def test_generate_iterable_examples(spark):
    df = spark.range(10).repartition(2)
    ds = IterableDataset.from_spark(df)
    rows = list(ds.shard(2, 1)) + list(ds.shard(2, 0))  # the partitions reversed
    expected = _rows_by_partition(df, [1, 0])
    assert _chunked(rows, expected) == expected


def test_spark_examples_iterable(spark):
    df = spark.range(10).repartition(1)
    ds = IterableDataset.from_spark(df)
    assert ds.num_shards == 1
    assert list(ds) == [{"id": i} for i in range(10)]


def test_spark_examples_iterable_shuffle(spark):
    df = spark.range(30).repartition(3)
    # datasets mocks the generator to reverse the partitions; here: the seeded order of the
    # partitions (the shards), then rows through the shuffle buffer
    shuffled = IterableDataset.from_spark(df).shuffle(seed=0)
    assert shuffled.num_shards == 3
    orders = {tuple(u.shard for u in shuffled._source.order(epoch)) for epoch in range(6)}
    assert all(sorted(o) == [0, 1, 2] for o in orders) and len(orders) > 1
    assert sorted(r["id"] for r in shuffled) == list(range(30))


def test_spark_examples_iterable_shard(spark):
    df = spark.range(20).repartition(4)
    shard_1 = IterableDataset.from_spark(df).shard(num_shards=2, index=0, contiguous=False)
    assert shard_1.num_shards == 2
    expected_1 = _rows_by_partition(df, [0, 2])
    assert _chunked(list(shard_1), expected_1) == expected_1
    shard_2 = IterableDataset.from_spark(df).shard(num_shards=2, index=1, contiguous=False)
    assert shard_2.num_shards == 2
    expected_2 = _rows_by_partition(df, [1, 3])
    assert _chunked(list(shard_2), expected_2) == expected_2


def test_iterable_image_features(spark):
    img_bytes = np.zeros((10, 10, 3), dtype=np.uint8).tobytes()
    df = spark.createDataFrame([(img_bytes,)], "image: binary")
    features = Features({"image": Image(decode=False)})
    item = next(iter(IterableDataset.from_spark(df, features=features)))
    assert item.keys() == {"image"}
    assert item == {"image": {"path": None, "bytes": img_bytes}}


def _png(color: int = 0, size: int = 10) -> bytes:
    import PIL.Image

    buffer = io.BytesIO()
    image = PIL.Image.fromarray(np.full((size, size, 3), color, dtype=np.uint8), "RGB")
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_iterable_image_features_decode(spark):
    import PIL.Image

    df = spark.createDataFrame([(_png(),)], "image: binary")
    dset = IterableDataset.from_spark(df, features=Features({"image": Image()}))
    item = next(iter(dset))
    assert item.keys() == {"image"}
    assert isinstance(item["image"], PIL.Image.Image)


def test_from_spark_streaming(spark):
    data = [("0", 0, 0.0), ("1", 1, 1.0), ("2", 2, 2.0), ("3", 3, 3.0)]
    df = spark.createDataFrame(data, "col_1: string, col_2: int, col_3: float")
    dataset = IterableDataset.from_spark(df)
    assert isinstance(dataset, IterableDataset)
    assert list(dataset) == [
        {"col_1": "0", "col_2": 0, "col_3": 0.0},
        {"col_1": "1", "col_2": 1, "col_3": 1.0},
        {"col_1": "2", "col_2": 2, "col_3": 2.0},
        {"col_1": "3", "col_2": 3, "col_3": 3.0},
    ]


# ------------------------------------------------------------------------- Dataset.from_spark
def test_from_spark_types_order_and_cache(spark, tmp_path):
    import datetime

    rows = [
        (
            i,
            float(i) / 2,
            f"r{i}",
            [i, i + 1],
            (i, f"s{i}"),
            bytes([i]),
            datetime.date(2024, 1, i + 1),
        )
        for i in range(7)
    ]
    schema = "i long, f double, s string, l array<int>, st struct<a:int,b:string>, b binary, d date"
    df = spark.createDataFrame(rows, schema).coalesce(3)  # no shuffle: the same order every job
    ds = Dataset.from_spark(df, cache_dir=str(tmp_path))
    assert ds.split == "train"
    assert ds.features == Features(
        {
            "i": Value("int64"),
            "f": Value("float64"),
            "s": Value("string"),
            "l": List(Value("int32")),
            "st": {"a": Value("int32"), "b": Value("string")},
            "b": Value("binary"),
            "d": Value("date32"),
        }
    )
    assert ds.to_list() == [r.asDict(recursive=True) for r in df.collect()]  # Spark's order
    files = [f["filename"] for f in ds.cache_files]
    assert len(files) == df.rdd.getNumPartitions() and all(
        f.startswith(str(tmp_path)) for f in files
    )
    again = Dataset.from_spark(df, cache_dir=str(tmp_path))
    assert [f["filename"] for f in again.cache_files] == files
    mtimes = [os.stat(f).st_mtime_ns for f in files]
    Dataset.from_spark(df, cache_dir=str(tmp_path), load_from_cache_file=False)
    assert [os.stat(f).st_mtime_ns for f in files] != mtimes  # written again
    memory = Dataset.from_spark(df, cache_dir=str(tmp_path), keep_in_memory=True, split="test")
    assert memory.cache_files == [] and memory.split == "test"
    assert memory.to_list() == ds.to_list()


def test_from_spark_features_cast_and_bad_values_named(spark, tmp_path):
    df = spark.createDataFrame([(_png(9), "cat"), (_png(200), "dog")], "image binary, label string")
    features = Features({"image": Image(), "label": ClassLabel(names=["cat", "dog"])})
    ds = Dataset.from_spark(df, features=features, cache_dir=str(tmp_path))
    assert ds.features == features
    assert ds["label"][:] == [0, 1]
    assert np.asarray(ds[1]["image"])[0, 0].tolist() == [200, 200, 200]
    bad = spark.createDataFrame([(_png(), "bird")], "image binary, label string")
    with pytest.raises(Exception, match="label"):
        Dataset.from_spark(bad, features=features, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="must name exactly"):
        Dataset.from_spark(
            df, features=Features({"label": Value("string")}), cache_dir=str(tmp_path)
        )


@pytest.mark.parametrize(
    ("sql", "column", "hint"),
    [
        ("select map('a', 1) as m", "m", "map_entries"),
        ("select cast(1.5 as decimal(10, 2)) as price", "price", "double or string"),
        ("select named_struct('x', map('a', 1)) as outer", "outer.x", "map"),
    ],
)
def test_from_spark_type_without_feature_names_the_column(spark, tmp_path, sql, column, hint):
    with pytest.raises(TypeError, match=rf"column '{column}'.*{hint}"):
        Dataset.from_spark(spark.sql(sql), cache_dir=str(tmp_path))
    with pytest.raises(TypeError, match=rf"column '{column}'"):
        IterableDataset.from_spark(spark.sql(sql))


def test_from_spark_working_dir_and_empty_frame(spark, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    df = spark.range(5).repartition(2)
    ds = Dataset.from_spark(df, cache_dir=str(tmp_path / "cache"), working_dir=str(work))
    assert sorted(ds["id"][:]) == list(range(5))
    assert list(work.iterdir()) == []  # moved into the cache, the working folder removed
    assert all(f["filename"].startswith(str(tmp_path / "cache")) for f in ds.cache_files)
    empty = Dataset.from_spark(spark.range(3).where("id > 5"), cache_dir=str(tmp_path / "cache"))
    assert empty.num_rows == 0 and empty.features == Features({"id": Value("int64")})


def test_from_spark_says_nothing_of_pyspark_and_pandas(spark, tmp_path):
    """Issue 64, item 12: PySpark 4 warns that it does not fully support pandas >= 3 at each
    ``mapInArrow``; jaxfeed's jobs pass Arrow batches only, so its calls keep quiet."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ds = Dataset.from_spark(spark.range(4).repartition(2), cache_dir=str(tmp_path))
        rows = list(IterableDataset.from_spark(spark.range(3).repartition(1)))
    assert sorted(ds["id"][:]) == list(range(4)) and len(rows) == 3
    assert not [w for w in seen if "pandas" in str(w.message)], [str(w.message) for w in seen]


def test_from_spark_damaged_cache_is_written_again(spark, tmp_path):
    df = spark.range(6).repartition(2)
    ds = Dataset.from_spark(df, cache_dir=str(tmp_path))
    first = Path(ds.cache_files[0]["filename"])
    del ds
    first.write_bytes(first.read_bytes()[:-10])  # truncated
    with pytest.warns(UserWarning, match="writing it again"):
        again = Dataset.from_spark(df, cache_dir=str(tmp_path))
    assert sorted(again["id"][:]) == list(range(6))


def test_iterable_from_spark_resumes(spark):
    df = spark.range(0, 12, 1, numPartitions=3)  # a resumed partition must come in the same order
    ds = IterableDataset.from_spark(df)
    it = iter(ds)
    head = [next(it) for _ in range(5)]
    state = ds.state_dict()
    resumed = IterableDataset.from_spark(df)
    resumed.load_state_dict(state)
    assert head + list(resumed) == list(IterableDataset.from_spark(df))


# ---------------------------------------------------------------------------------- Ray
def _media_dataset() -> Dataset:
    wave = np.sin(np.linspace(0, 20, 800)).astype(np.float32)
    features = Features(
        {
            "label": ClassLabel(names=["cat", "dog"]),
            "image": Image(),
            "audio": Audio(sampling_rate=8000),
            "n": Value("int16"),
        }
    )
    return Dataset.from_dict(
        {
            "label": [0, 1, 1],
            "image": [_png(c) for c in (1, 2, 3)],
            "audio": [{"array": wave * k, "sampling_rate": 8000} for k in (1, 2, 3)],
            "n": [1, 2, 3],
        },
        features=features,
    )


def test_ray_round_trip_keeps_features(ray_data, tmp_path):
    source = _media_dataset()
    ray_ds = source.to_ray()
    assert ray_ds.count() == 3
    back = Dataset.from_ray(ray_ds, cache_dir=str(tmp_path))
    assert back.features == source.features
    assert back.with_format("arrow")[:] == source.with_format("arrow")[:]
    assert back[1]["label"] == 1 and back.features["label"].int2str(1) == "dog"
    assert back.cache_files == [] and list((tmp_path / "ray").iterdir()) == []  # mapped, removed
    streamed = IterableDataset.from_ray(ray_ds)
    assert streamed.features == source.features
    assert [r["n"] for r in streamed] == [1, 2, 3]
    again = IterableDataset.from_dataset(source).to_ray()
    assert Dataset.from_ray(again, cache_dir=str(tmp_path)).features == source.features


def test_ray_pipeline_order_and_materialized_blocks(ray_data, tmp_path):
    ray_ds = ray_data.range(100, override_num_blocks=4).map_batches(
        lambda b: {"id": b["id"], "sq": b["id"] ** 2}, batch_format="numpy"
    )
    ds = Dataset.from_ray(ray_ds, cache_dir=str(tmp_path))
    assert ds["id"][:] == list(range(100)) and ds["sq"][:5] == [0, 1, 4, 9, 16]
    selected = ds.select([5, 3, 1])  # an index mapping goes over as its rows
    assert selected.to_ray().take_all() == [{"id": i, "sq": i * i} for i in (5, 3, 1)]
    blocks = IterableDataset.from_ray(_materialized(ray_data.range(20, override_num_blocks=4)))
    assert blocks.num_shards == 4
    assert [r["id"] for r in blocks.shard(4, 1)] == list(range(5, 10))
    keep = Dataset.from_ray(ray_ds, cache_dir=str(tmp_path), keep_in_memory=True)
    assert keep["sq"][-1] == 99 * 99


def test_ray_blocks_over_max_shard_size_keep_the_order_and_to_ray_each_row_once(
    ray_data, tmp_path, monkeypatch
):
    """from_ray of two blocks of 50 rows written as files of 8 rows keeps the dataset's order;
    to_ray of a dataset over a block's size puts each row into one block, in order."""
    from jaxfeed.data.formats import ray as ray_format

    shards = ray_format.write_ray(ray_data.range(100, override_num_blocks=2),
                                  cache_dir=str(tmp_path), max_shard_size=64)  # fmt: skip
    assert shards.table.column("id").to_pylist() == list(range(100))
    monkeypatch.setattr(ray_format, "BLOCK_BYTES", 25 * 8)  # 25 int64 rows a block
    ray_ds = Dataset.from_dict({"x": list(range(100))}).to_ray()
    assert ray_ds.count() == 100
    assert [r["x"] for r in ray_ds.take_all()] == list(range(100))


def test_ray_tensors_become_arrays(ray_data, tmp_path):
    images = np.arange(4 * 2 * 3 * 3, dtype=np.uint8).reshape(4, 2, 3, 3)
    ray_ds = ray_data.from_numpy(images).map_batches(
        lambda b: {"data": b["data"], "vec": b["data"][:, 0, 0, :].astype(np.float32)},
        batch_format="numpy",
    )
    ds = Dataset.from_ray(ray_ds, cache_dir=str(tmp_path))
    assert ds.features == Features(
        {
            "data": Array3D(shape=(2, 3, 3), dtype="uint8"),
            "vec": List(Value("float32"), length=3),
        }
    )
    assert np.array_equal(ds.with_format("numpy")[:]["data"], images)
    streamed = next(iter(IterableDataset.from_ray(ray_ds).with_format("numpy")))
    assert np.array_equal(streamed["data"], images[0])


def test_ray_type_without_feature_names_the_column(ray_data, tmp_path):
    table = pa.table({"m": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int64()))})
    with pytest.raises(TypeError, match="column 'm'"):
        Dataset.from_ray(ray_data.from_arrow(table), cache_dir=str(tmp_path))


def test_the_engines_tutorial_composites_transparent_images_as_the_command_does(ray_data, tmp_path):
    """Issue 64, item 5: the tutorial read icons with ``read_images(mode="RGB")``, which drops
    the alpha channel: dark glyphs on a transparent background became dark on black. Its cell
    (run here as written, on two icons) reads them with alpha and composites them with the
    command's helper: the pixels ``jaxfeed train`` decodes from the same files (its image kind's
    background, Pillow's resize), to within a level (Ray resizes before compositing)."""
    import json

    import PIL.Image

    from jaxfeed.recipes.kinds.image import image_choice
    from jaxfeed.serving import ServingSpec

    notebook = json.loads((ROOT / "docs" / "tutorials" / "engines.ipynb").read_text())
    cell = next("".join(c["source"]) for c in notebook["cells"] if "def to_rows(" in
                "".join(c["source"]))  # fmt: skip
    paths = []
    for label, axis in (("horizontal", 0), ("vertical", 1)):
        (tmp_path / "images" / label).mkdir(parents=True)
        icon = np.zeros((64, 64, 4), np.uint8)  # transparent black, dark opaque stripes
        icon[::8, :] = (30, 40, 50, 255)
        paths.append(tmp_path / "images" / label / "0.png")
        PIL.Image.fromarray(icon.transpose(1, 0, 2) if axis else icon).save(paths[-1])
    import ray

    exec(cell, {"__name__": "__main__", "work": tmp_path, "ray": ray, "PIL": PIL, "np": np})
    written = load_dataset("parquet", data_files=str(tmp_path / "prepared" / "images" / "*.parquet"),
                           split="train")  # fmt: skip
    ours = {row["label"]: np.asarray(PIL.Image.open(io.BytesIO(row["image"])).convert("RGB"))
            for row in written.to_list()}  # fmt: skip
    folder = Dataset.from_dict({"image": [str(p) for p in paths]}).cast_column("image", Image())
    mode, _, _, background = image_choice(folder, "image", (32, 32))
    assert (mode, background) == ("RGB", (255, 255, 255))
    spec = ServingSpec(kind="image", input_shape=(32, 32, 3), task="classification",
                       labels=("horizontal", "vertical"), image_mode=mode, image_size=(32, 32),
                       image_background=background)  # fmt: skip
    arrays, counts = spec.read_images([str(p) for p in paths])
    command = spec.fit_images(arrays)
    assert counts["composited"] == 2 and command.mean() > 150  # mostly white
    for label, expected in enumerate(command):
        assert np.abs(ours[label].astype(int) - expected).max() <= 2, label


def test_iterable_from_ray_resumes(ray_data):
    ray_ds = _materialized(ray_data.range(30, override_num_blocks=3))
    ds = IterableDataset.from_ray(ray_ds)
    it = iter(ds)
    head = [next(it) for _ in range(7)]
    resumed = IterableDataset.from_ray(ray_ds)
    resumed.load_state_dict(ds.state_dict())
    assert [r["id"] for r in head + list(resumed)] == list(range(30))


# --------------------------------------------------------- the same map on jaxfeed, Ray, Spark
def test_map_on_jaxfeed_ray_and_spark_gives_the_same_rows(spark, ray_data, tmp_path):
    def add_length(batch: dict) -> dict:
        """The guide's ``map``: a batch of lists (jaxfeed, Spark) or of numpy arrays (Ray).
        Defined here, so Ray and Spark ship it by value (their workers cannot import tests)."""
        texts = [str(t) for t in batch["text"]]
        return {"text": texts, "length": [len(t.split()) for t in texts]}

    texts = [f"row {i} " + "word " * (i % 5) for i in range(40)]
    local = Dataset.from_dict({"text": texts}).map(add_length, batched=True)

    on_ray = ray_data.from_items([{"text": t} for t in texts]).map_batches(
        add_length, batch_format="numpy"
    )
    from_ray = Dataset.from_ray(on_ray, cache_dir=str(tmp_path))

    def on_arrow(batches):
        for b in batches:
            yield pa.RecordBatch.from_pydict(add_length(b.to_pydict()))

    on_spark = spark.createDataFrame([(t,) for t in texts], "text string").mapInArrow(
        on_arrow, "text string, length long"
    )
    from_spark = Dataset.from_spark(on_spark, cache_dir=str(tmp_path))
    assert local.to_list() == from_ray.to_list() == from_spark.to_list()


def test_a_folder_the_executors_do_not_share_is_refused(tmp_path):
    """On a master other than local[...], one task writes a probe file where the driver looks:
    executors that write elsewhere (here: nowhere) make from_spark refuse the folder by name."""
    from types import SimpleNamespace

    from jaxfeed.data.formats.spark import check_reachable

    job = SimpleNamespace(collect=lambda: [])
    rdd = SimpleNamespace(mapPartitions=lambda function: job)
    context = SimpleNamespace(master="spark://elsewhere:7077", parallelize=lambda *a: rdd)
    frame = SimpleNamespace(sparkSession=SimpleNamespace(sparkContext=context))
    with pytest.raises(ValueError, match=rf"cannot write into {tmp_path}"):
        check_reachable(frame, tmp_path)
    context.master = "local[2]"  # one machine: nothing to check
    check_reachable(frame, tmp_path)


# -------------------------------------------------------------------- without the extras
@pytest.mark.parametrize(
    ("module", "call", "extra"),
    [
        ("pyspark", lambda: Dataset.from_spark(object()), "spark"),
        ("pyspark", lambda: IterableDataset.from_spark(object()), "spark"),
        ("ray", lambda: Dataset.from_ray(object()), "ray"),
        ("ray", lambda: Dataset.from_dict({"x": [1]}).to_ray(), "ray"),
        ("ray", lambda: IterableDataset.from_ray(object()), "ray"),
    ],
)
def test_missing_extra_names_it(monkeypatch, module, call, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import pyspark / ray fails
    with pytest.raises(MissingExtraError, match=rf"jaxfeed\[{extra}\]"):
        call()


# ----------------------------------------------------------------- issue 63: faults of engines
def test_from_ray_of_a_dataset_filtered_to_no_rows(ray_data, tmp_path):
    """D15: a Ray Dataset filtered to no rows (its blocks empty, without columns) failed with a
    KeyError inside a Ray task; now a dataset without rows, with the columns Ray knows."""
    features = Features({"id": Value("int64")})
    empty = ray_data.range(10, override_num_blocks=2).filter(lambda row: row["id"] > 100)
    ds = Dataset.from_ray(empty, cache_dir=str(tmp_path))
    assert ds.num_rows == 0 and ds.features == features
    assert list(IterableDataset.from_ray(empty)) == []
    half = ray_data.range(10, override_num_blocks=2).filter(lambda row: row["id"] >= 5)
    assert Dataset.from_ray(half, cache_dir=str(tmp_path))["id"][:] == [5, 6, 7, 8, 9]
    assert [r["id"] for r in IterableDataset.from_ray(half)] == [5, 6, 7, 8, 9]
    done = empty.materialize()  # Ray no longer knows its columns: they must be given
    with pytest.raises(
        ValueError, match=r"has no rows, and Ray does not know its columns: pass features="
    ):
        Dataset.from_ray(done, cache_dir=str(tmp_path))
    given = Dataset.from_ray(done, features=features, cache_dir=str(tmp_path))
    assert given.num_rows == 0 and given.features == features
    assert list(IterableDataset.from_ray(done, features=features)) == []


def test_from_spark_never_shares_a_cache_entry_between_two_dataframes(spark, tmp_path, monkeypatch):
    """D07: the cache was keyed by the DataFrame's 32-bit semanticHash(): two different
    DataFrames whose hashes collide (here: made equal) read one entry, the first's rows."""
    cache = str(tmp_path)
    for make in (
        lambda v: spark.createDataFrame([(v,)], "x int"),  # an RDD of local rows
        lambda v: spark.sql(f"select * from values ({v}) as t(x)"),  # a local relation
    ):
        first, second = make(1), make(2)
        monkeypatch.setattr(second, "semanticHash", first.semanticHash)  # a collision
        ds = Dataset.from_spark(first, cache_dir=cache)
        assert ds["x"][:] == [1]
        assert Dataset.from_spark(second, cache_dir=cache)["x"][:] == [2]
        again = Dataset.from_spark(
            first, cache_dir=cache
        )  # the same DataFrame still maps its files
        assert again.cache_files == ds.cache_files and again["x"][:] == [1]


def _one_line(err):
    text = str(err.value)
    assert "\n" not in text.strip(), text
    return text


def test_a_failed_spark_job_or_a_stopped_session_is_one_line_naming_the_cause(
    spark, tmp_path, monkeypatch
):
    """D25: an executor's error surfaced as "An exception was thrown from the Python worker"
    (or a Py4J "An error occurred while calling o298.javaToPython") and a Java stack trace; now
    one line with the executor's own error, or saying the session is stopped."""
    from pyspark.sql import functions as F

    bad = spark.createDataFrame([("bird",)], "label string")
    with pytest.raises(ValueError) as err:
        features = Features({"label": ClassLabel(names=["cat"])})
        Dataset.from_spark(bad, features=features, cache_dir=str(tmp_path))
    assert _one_line(err).startswith("Dataset.from_spark: a Spark executor failed: FeatureError: ")
    assert "column 'label', row 0" in str(err.value) and "'bird'" in str(err.value)
    zero = F.udf(lambda x: 1 // (x - x), "long")
    boom = spark.range(3).select(zero("id").alias("y"))
    for what, call in (
        ("Dataset.from_spark", lambda: Dataset.from_spark(boom, cache_dir=str(tmp_path))),
        ("IterableDataset.from_spark", lambda: list(IterableDataset.from_spark(boom))),
    ):
        with pytest.raises(RuntimeError) as err:
            call()
        assert _one_line(err).startswith(
            f"{what}: a Spark executor failed: ZeroDivisionError: integer division"
        )
    # stopped: what SparkContext.stop() clears on the Python side (the shared session lives on)
    df = spark.range(3)
    monkeypatch.setattr(spark.sparkContext, "_jsc", None)
    monkeypatch.setattr(type(spark.sparkContext), "_active_spark_context", None)
    for what, call in (
        ("Dataset.from_spark", lambda: Dataset.from_spark(df, cache_dir=str(tmp_path))),
        ("IterableDataset.from_spark", lambda: list(IterableDataset.from_spark(df))),
    ):
        with pytest.raises(RuntimeError) as err:
            call()
        assert _one_line(err).startswith(f"{what}: the DataFrame's Spark session is stopped")


def test_executors_need_not_find_jaxfeed_in_spark_s_python(spark, tmp_path, monkeypatch):
    """Also (issue 63): run as .venv/bin/python without the venv activated, Spark's executors
    started python3 from PATH, which cannot import jaxfeed: a Java stack trace ending in
    ModuleNotFoundError. On a local master they now run this interpreter; on a cluster, where
    they run Spark's PYSPARK_PYTHON, one line says to set it."""
    from jaxfeed.data.formats import spark as spark_module

    blocked = tmp_path / "blocked" / "jaxfeed"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'jaxfeed'\", name='jaxfeed')\n"
    )
    python3 = tmp_path / "bin" / "python3"  # a Python that has pyspark and pyarrow, not jaxfeed
    python3.parent.mkdir()
    python3.write_text(
        f'#!/bin/sh\nPYTHONPATH="{blocked.parent}:$PYTHONPATH" exec "{sys.executable}" "$@"\n'
    )
    python3.chmod(0o755)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", str(python3))
    cache = str(tmp_path / "cache")
    assert sorted(Dataset.from_spark(spark.range(4), cache_dir=cache)["id"][:]) == [0, 1, 2, 3]
    assert [r["id"] for r in IterableDataset.from_spark(spark.range(3))] == [0, 1, 2]
    assert spark.sparkContext.pythonExec == str(python3)  # the user's setting, left as it was
    monkeypatch.setattr(spark_module, "runs_here", lambda sc: False)  # a cluster's executors
    with pytest.raises(RuntimeError) as err:
        Dataset.from_spark(spark.range(5), cache_dir=cache)
    assert _one_line(err) == (
        f"Dataset.from_spark: Spark's executors run {python3}, which cannot import jaxfeed: set "
        f"PYSPARK_PYTHON to a Python that has jaxfeed and pyarrow (as {sys.executable}) before "
        "the Spark session starts"
    )
