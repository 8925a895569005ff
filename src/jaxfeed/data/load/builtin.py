"""Built-in datasets: ``digits`` (bundled with jaxfeed), and ``mnist``, ``fashion_mnist`` and
``cifar10`` read from their original binary files in ``data_dir`` (never the pickled versions)."""

from __future__ import annotations

import gzip
import lzma
import os
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from jaxfeed.data.dataset import Dataset, DatasetDict
from jaxfeed.data.features import Array2D, Array3D, ClassLabel, Features, Image
from jaxfeed.data.formats.cache import cached_dataset, source_identity

BUILTIN = ("digits", "mnist", "fashion_mnist", "cifar10")
BUILTIN_VERSION = 1  # bump when the conversion of a built-in dataset changes
DIGITS_TEST_SIZE = 360  # 20% of 1,797, stratified, seed 0
FASHION_NAMES = [
    "T - shirt / top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]  # fmt: skip
CIFAR10_NAMES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]


def load_builtin(
    name: str,
    config: str | None = None,
    data_dir: str | Path | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    keep_in_memory: bool = False,
) -> DatasetDict:
    """A built-in dataset as a ``DatasetDict`` with ``train`` and ``test`` splits.

    ``mnist``, ``fashion_mnist`` and ``cifar10`` are converted from their files in ``data_dir``
    once, a block of rows at a time, into memory-mapped Arrow files under the cache folder (see
    :func:`jaxfeed.data.formats.cache.cached_dataset`), keyed by the files' paths, sizes and modification
    times; ``keep_in_memory=True`` builds them in RAM instead. ``digits`` (39 KB, bundled) is
    always built in RAM: a cache would cost a disk write and save nothing.
    """
    if name == "digits":
        return digits(image=config == "image")
    memory = {"cache_dir": cache_dir, "keep_in_memory": keep_in_memory}
    if name in ("mnist", "fashion_mnist"):
        return idx_dataset(name, data_dir, **memory)
    if name == "cifar10":
        return cifar10(data_dir, **memory)
    raise ValueError(f"unknown built-in dataset {name!r}; built-in: {', '.join(BUILTIN)}")


def digits(image: bool = False) -> DatasetDict:
    """The 1,797 8x8 handwritten digits of UCI (bundled, 39 KB; the copy scikit-learn ships),
    rescaled from 0..16 to 0..255.

    A fixed stratified split (seed 0) gives 1,437 train and 360 test rows. ``image=True`` stores
    the images as PNG ``Image`` values instead of ``Array2D((8, 8), "uint8")``.

    >>> from jaxfeed import load_dataset
    >>> load_dataset("digits").num_rows
    {'train': 1437, 'test': 360}
    """
    raw, labels = _bundled_digits()
    pixels = np.rint(raw * (255 / 16)).astype(np.uint8)
    features = Features(
        {
            "image": Image() if image else Array2D((8, 8), "uint8"),
            "label": ClassLabel(names=[str(i) for i in range(10)]),
        }
    )
    full = Dataset.from_dict(
        {"image": list(pixels) if image else pixels, "label": labels}, features=features
    )
    split = full.train_test_split(test_size=DIGITS_TEST_SIZE, seed=0, stratify_by_column="label")
    return DatasetDict({k: v.flatten_indices() for k, v in split.items()})


DIGITS_FILE = Path(__file__).parent / "data" / "digits.u8.xz"  # licence: data/DIGITS-LICENSE.txt


def _bundled_digits() -> tuple[np.ndarray, np.ndarray]:
    """``(images (1797, 8, 8) in 0..16, labels)`` from the bundled file."""
    try:
        table = np.frombuffer(lzma.decompress(DIGITS_FILE.read_bytes()), dtype=np.uint8)
    except (OSError, lzma.LZMAError) as err:
        raise OSError(f"the bundled digits data {DIGITS_FILE} cannot be read: {err}") from err
    if table.size != 65 * 1797:
        raise OSError(f"the bundled digits data {DIGITS_FILE} is damaged ({table.size} bytes)")
    table = table.reshape(65, 1797)
    return table[:64].T.reshape(1797, 8, 8).astype(np.float64), table[64].astype(np.int64)


IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
SOURCES = {
    "mnist": "https://ossci-datasets.s3.amazonaws.com/mnist/ (the original files of yann.lecun.com/exdb/mnist)",
    "fashion_mnist": "https://github.com/zalandoresearch/fashion-mnist (data/fashion)",
    "cifar10": "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz (the binary version, extracted)",
}


def _find(data_dir: Path, stem: str) -> Path | None:
    for candidate in (
        stem,
        stem + ".gz",
        stem.replace("-idx", ".idx"),
        stem.replace("-idx", ".idx") + ".gz",
    ):
        for folder in (data_dir, data_dir / "raw"):
            if (folder / candidate).is_file():
                return folder / candidate
    return None


def _require_dir(name: str, data_dir: str | Path | None, expected: list[str]) -> Path:
    hint = f"expected {', '.join(expected)} (optionally .gz); download them from {SOURCES[name]}"
    if data_dir is None:
        raise ValueError(f"load_dataset({name!r}) needs data_dir= pointing at its files: {hint}")
    path = Path(data_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"{name}: data_dir {str(path)!r} is not a folder; {hint}")
    return path


IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IDX_MAX_DIMS = 8  # the format allows 255; real files have 1 (labels) or 3 (images)
GZIP_MAX_RATIO = 1100  # deflate cannot expand more than ~1032:1


BLOCK_BYTES = 8 << 20  # bytes of rows converted at a time (as io.batches.BATCH_BYTES)


def read_idx(path: Path, item_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """An IDX file (the MNIST format, optionally gzipped): big-endian header, then the array.

    The header is read first and checked (and its item shape against ``item_shape``); then exactly
    the bytes it declares are read, so a small ``.gz`` that unpacks to far more is refused after
    one extra block, not decompressed whole. Truncated files, trailing data, bad gzip streams and
    CRC errors raise ``ValueError`` naming the file. :func:`open_idx` reads it block by block.
    """
    with open_idx(path, item_shape) as reader:
        return reader.read_all()


@contextmanager
def open_idx(path: Path, item_shape: tuple[int, ...] | None = None) -> Iterator[IdxReader]:
    """An :class:`IdxReader` of ``path`` whose header has been read and checked."""
    path = Path(path)
    with open(path, "rb") as raw:
        gzipped = path.suffix == ".gz"
        if gzipped and raw.read(2) != b"\x1f\x8b":
            raise ValueError(f"{path} is not a gzip file (its name ends in .gz)")
        raw.seek(0)
        try:
            with gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw as f:
                size = path.stat().st_size
                yield IdxReader(
                    f, path, item_shape, None if gzipped else size, size if gzipped else None
                )
        except (EOFError, gzip.BadGzipFile, zlib.error) as err:
            raise ValueError(f"{path}: corrupt or truncated gzip data ({err})") from None


class IdxReader:
    """The rows of an open IDX file, read in blocks after its header (``shape``, ``dtype``)."""

    def __init__(
        self,
        f: Any,
        path: Path,
        item_shape: tuple[int, ...] | None,
        file_size: int | None,
        compressed: int | None = None,
    ) -> None:
        head = f.read(4)
        if len(head) < 4 or head[0] != 0 or head[1] != 0:
            raise ValueError(f"{path} is not an IDX file (bad magic number)")
        if head[2] not in IDX_DTYPES:
            raise ValueError(f"{path}: unknown IDX data type 0x{head[2]:02x}")
        ndim = head[3]
        if not 1 <= ndim <= IDX_MAX_DIMS:
            raise ValueError(
                f"{path}: IDX header declares {ndim} dimensions (expected 1..{IDX_MAX_DIMS})"
            )
        dims = f.read(4 * ndim)
        if len(dims) < 4 * ndim:
            raise ValueError(
                f"{path}: truncated IDX header ({4 + len(dims)} of {4 + 4 * ndim} bytes)"
            )
        shape = tuple(int.from_bytes(dims[4 * i : 4 * i + 4], "big") for i in range(ndim))
        if item_shape is not None and shape[1:] != item_shape:
            raise ValueError(
                f"{path}: IDX header declares shape {shape}; expected (n, {', '.join(map(str, item_shape))})"
                if item_shape
                else f"{path}: IDX header declares shape {shape}; expected (n,)"
            )
        dtype = np.dtype(IDX_DTYPES[head[2]])
        expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
        header = 4 + 4 * ndim
        if compressed is not None and expected > GZIP_MAX_RATIO * compressed:
            raise ValueError(
                f"{path}: header declares shape {shape} ({expected} bytes), more than a gzip file of "
                f"{compressed} bytes can hold"
            )
        if file_size is not None and file_size - header != expected:
            raise ValueError(
                f"{path}: header says shape {shape} ({expected} bytes) but the file has {file_size - header}"
            )
        self.f, self.path, self.shape, self.dtype, self.expected = f, path, shape, dtype, expected
        self.row_bytes = int(np.prod(shape[1:], dtype=object)) * dtype.itemsize

    def blocks(self, rows: int | None = None) -> Iterator[np.ndarray]:
        """The array in blocks of ``rows`` rows (default: about ``BLOCK_BYTES``), native byte
        order; then checks that nothing follows the declared data."""
        rows = rows or max(1, BLOCK_BYTES // max(1, self.row_bytes))
        done = 0
        for lo in range(0, self.shape[0], rows):
            n = min(rows, self.shape[0] - lo)
            out = np.empty(n * self.row_bytes, dtype=np.uint8)
            view, got = memoryview(out), 0
            while got < len(out):
                k = self.f.readinto(view[got : got + (16 << 20)])
                if not k:
                    raise ValueError(
                        f"{self.path}: header says shape {self.shape} ({self.expected} bytes) but "
                        f"the data ends after {done + got}"
                    )
                got += k
            done += got
            yield (
                out.view(self.dtype)
                .reshape((n, *self.shape[1:]))
                .astype(self.dtype.newbyteorder("="))
            )
        if self.f.read(1):
            raise ValueError(
                f"{self.path}: data continues past the {self.expected} bytes its header declares "
                f"(shape {self.shape})"
            )

    def read_all(self) -> np.ndarray:
        parts = list(self.blocks(max(1, self.shape[0])))
        if not parts:
            return np.empty(self.shape, dtype=self.dtype.newbyteorder("="))
        return parts[0]


def _check_labels(labels: np.ndarray, n: int, path: Path, offset: int = 0) -> None:
    bad = (labels < 0) | (labels >= n)
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"{path}: label {int(labels[row])} at row {offset + row} is outside 0..{n - 1}"
        )


def idx_dataset(
    name: str,
    data_dir: str | Path | None,
    *,
    cache_dir: str | os.PathLike | None = None,
    keep_in_memory: bool = False,
) -> DatasetDict:
    expected = [stem for pair in IDX_FILES.values() for stem in pair]
    root = _require_dir(name, data_dir, expected)
    missing = [stem for stem in expected if _find(root, stem) is None]
    if missing:
        raise FileNotFoundError(
            f"{name}: missing {', '.join(missing)} in {root}; expected {', '.join(expected)} "
            f"(optionally .gz); download them from {SOURCES[name]}"
        )
    names = [str(i) for i in range(10)] if name == "mnist" else FASHION_NAMES
    features = Features({"image": Array2D((28, 28), "uint8"), "label": ClassLabel(names=names)})
    splits = {}
    for split, stems in IDX_FILES.items():
        images, labels = (_find(root, stem) for stem in stems)

        def batches(
            split: str = split, images: Path = images, labels: Path = labels
        ) -> Iterator[pa.RecordBatch]:
            ids = read_idx(labels, ())
            _check_labels(ids, len(names), labels)
            with open_idx(images, (28, 28)) as reader:
                if reader.shape[0] != len(ids):
                    raise ValueError(
                        f"{name} {split}: images {reader.shape} and labels {ids.shape} do not match"
                    )
                lo = 0
                for block in reader.blocks():
                    rows = {"image": block, "label": ids[lo : lo + len(block)].astype(np.int64)}
                    lo += len(block)
                    yield from Dataset.from_dict(rows, features=features).data.to_batches()

        splits[split] = _build(
            name, split, [images, labels], batches, features, cache_dir, keep_in_memory
        )
    return DatasetDict(splits)


def _build(
    name: str,
    split: str,
    files: list[Path],
    batches: Callable[[], Iterator[pa.RecordBatch]],
    features: Features,
    cache_dir: str | os.PathLike | None,
    keep_in_memory: bool,
) -> Dataset:
    """One split: in RAM, or through the cache keyed by its files and features."""
    if keep_in_memory:
        return Dataset(pa.Table.from_batches(list(batches()), features.arrow_schema), features)
    payload = {
        "builtin": name,
        "builtin_version": BUILTIN_VERSION,
        "split": split,
        "features": features.to_dict(),
        "files": [source_identity(str(f)) for f in files],
    }
    lineage = {**payload, "files": [os.path.abspath(f) for f in files]}
    cached = cached_dataset(
        payload, batches, features, cache_dir, sources=[str(f) for f in files], lineage=lineage
    )
    return Dataset._from_cached(cached)


CIFAR_TRAIN = [f"data_batch_{i}.bin" for i in range(1, 6)]
CIFAR_TEST = ["test_batch.bin"]
CIFAR_RECORD = 3073  # 1 label byte + 32 x 32 x 3 pixel bytes


def cifar10(
    data_dir: str | Path | None,
    *,
    cache_dir: str | os.PathLike | None = None,
    keep_in_memory: bool = False,
) -> DatasetDict:
    """CIFAR-10 from the binary version: records of 1 label byte + 3,072 pixel bytes (CHW)."""
    expected = CIFAR_TRAIN + CIFAR_TEST
    root = _require_dir("cifar10", data_dir, expected)
    if not (root / CIFAR_TEST[0]).is_file() and (root / "cifar-10-batches-bin").is_dir():
        root = root / "cifar-10-batches-bin"
    missing = [f for f in expected if not (root / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"cifar10: missing {', '.join(missing)} in {root}; expected {', '.join(expected)}; "
            f"download {SOURCES['cifar10']}"
        )
    names = CIFAR10_NAMES
    meta = root / "batches.meta.txt"
    if meta.is_file():
        try:
            text = meta.read_bytes().decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{meta} is not valid UTF-8 (byte {err.start})") from None
        listed = [line.strip() for line in text.splitlines() if line.strip()]
        if len(listed) == 10:
            names = listed
    features = Features({"img": Array3D((32, 32, 3), "uint8"), "label": ClassLabel(names=names)})
    splits = {}
    for split, files in (("train", CIFAR_TRAIN), ("test", CIFAR_TEST)):
        paths = [root / f for f in files]
        for path in paths:  # sizes first: a bad file is named before anything is converted
            size = path.stat().st_size
            if size == 0:
                raise ValueError(f"{path} is empty; expected 3,073-byte records")
            if size % CIFAR_RECORD:
                raise ValueError(f"{path}: size {size} is not a multiple of 3,073-byte records")

        def batches(paths: list[Path] = paths) -> Iterator[pa.RecordBatch]:
            per_block = max(1, BLOCK_BYTES // CIFAR_RECORD)
            for path in paths:
                with open(path, "rb") as f:
                    row = 0
                    while True:
                        raw = np.frombuffer(f.read(per_block * CIFAR_RECORD), dtype=np.uint8)
                        if not raw.size:
                            break
                        if raw.size % CIFAR_RECORD:  # the file changed since its size was read
                            raise ValueError(
                                f"{path}: size is not a multiple of 3,073-byte records"
                            )
                        records = raw.reshape(-1, CIFAR_RECORD)
                        _check_labels(records[:, 0], len(names), path, row)
                        row += len(records)
                        images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
                        rows = {
                            "img": np.ascontiguousarray(images),
                            "label": records[:, 0].astype(np.int64),
                        }
                        yield from Dataset.from_dict(rows, features=features).data.to_batches()

        splits[split] = _build(
            "cifar10",
            split,
            [*paths, meta] if meta.is_file() else paths,
            batches,
            features,
            cache_dir,
            keep_in_memory,
        )
    return DatasetDict(splits)
