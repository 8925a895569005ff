"""Built-in datasets: ``digits`` (bundled with jaxfeed), and ``mnist``, ``fashion_mnist`` and
``cifar10`` read from their original binary files in ``data_dir`` (never the pickled versions)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from jaxfeed.features import Array2D, Array3D, ClassLabel, Features, Image

BUILTIN = ("digits", "mnist", "fashion_mnist", "cifar10")
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


def load_builtin(name: str, config: str | None = None, data_dir: str | Path | None = None) -> Any:
    """A built-in dataset as a ``DatasetDict`` with ``train`` and ``test`` splits."""
    if name == "digits":
        return digits(image=config == "image")
    if name in ("mnist", "fashion_mnist"):
        return idx_dataset(name, data_dir)
    if name == "cifar10":
        return cifar10(data_dir)
    raise ValueError(f"unknown built-in dataset {name!r}; built-in: {', '.join(BUILTIN)}")


def digits(image: bool = False) -> Any:
    """The 1,797 8x8 handwritten digits of UCI (bundled, 39 KB; the copy scikit-learn ships),
    rescaled from 0..16 to 0..255.

    A fixed stratified split (seed 0) gives 1,437 train and 360 test rows. ``image=True`` stores
    the images as PNG ``Image`` values instead of ``Array2D((8, 8), "uint8")``.

    >>> from jaxfeed import load_dataset
    >>> load_dataset("digits").num_rows
    {'train': 1437, 'test': 360}
    """
    from jaxfeed.dataset import Dataset, DatasetDict

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
    import lzma

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


def read_idx(path: Path, item_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """An IDX file (the MNIST format, optionally gzipped): big-endian header, then the array.

    The header is read first and checked (and its item shape against ``item_shape``); then exactly
    the bytes it declares are read, so a small ``.gz`` that unpacks to far more is refused after
    one extra block, not decompressed whole. Truncated files, trailing data, bad gzip streams and
    CRC errors raise ``ValueError`` naming the file.
    """
    path = Path(path)
    with open(path, "rb") as raw:
        gzipped = path.suffix == ".gz"
        if gzipped and raw.read(2) != b"\x1f\x8b":
            raise ValueError(f"{path} is not a gzip file (its name ends in .gz)")
        raw.seek(0)
        try:
            with gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw as f:
                size = path.stat().st_size
                return _read_idx(
                    f, path, item_shape, None if gzipped else size, size if gzipped else None
                )
        except (EOFError, gzip.BadGzipFile, zlib.error) as err:
            raise ValueError(f"{path}: corrupt or truncated gzip data ({err})") from None


def _read_idx(
    f: Any,
    path: Path,
    item_shape: tuple[int, ...] | None,
    file_size: int | None,
    compressed: int | None = None,
) -> np.ndarray:
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
        raise ValueError(f"{path}: truncated IDX header ({4 + len(dims)} of {4 + 4 * ndim} bytes)")
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
    out = np.empty(expected, dtype=np.uint8)
    view, done = memoryview(out), 0
    while done < expected:
        n = f.readinto(view[done : done + (16 << 20)])
        if not n:
            raise ValueError(
                f"{path}: header says shape {shape} ({expected} bytes) but the data ends after {done}"
            )
        done += n
    if f.read(1):
        raise ValueError(
            f"{path}: data continues past the {expected} bytes its header declares (shape {shape})"
        )
    return out.view(dtype).reshape(shape).astype(dtype.newbyteorder("="))


def _check_labels(labels: np.ndarray, n: int, path: Path) -> None:
    bad = (labels < 0) | (labels >= n)
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"{path}: label {int(labels[row])} at row {row} is outside 0..{n - 1}")


def idx_dataset(name: str, data_dir: str | Path | None) -> Any:
    from jaxfeed.dataset import Dataset, DatasetDict

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
    for split, (images_stem, labels_stem) in IDX_FILES.items():
        images = read_idx(_find(root, images_stem), (28, 28))
        labels = read_idx(_find(root, labels_stem), ())
        _check_labels(labels, len(names), _find(root, labels_stem))
        if images.ndim != 3 or images.shape[1:] != (28, 28) or len(labels) != len(images):
            raise ValueError(
                f"{name} {split}: images {images.shape} and labels {labels.shape} do not match"
            )
        splits[split] = Dataset.from_dict(
            {"image": images, "label": labels.astype(np.int64)}, features=features
        )
    return DatasetDict(splits)


CIFAR_TRAIN = [f"data_batch_{i}.bin" for i in range(1, 6)]
CIFAR_TEST = ["test_batch.bin"]


def cifar10(data_dir: str | Path | None) -> Any:
    """CIFAR-10 from the binary version: records of 1 label byte + 3,072 pixel bytes (CHW)."""
    from jaxfeed.dataset import Dataset, DatasetDict

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
        records = []
        for f in files:
            raw = np.fromfile(root / f, dtype=np.uint8)
            if raw.size == 0:
                raise ValueError(f"{root / f} is empty; expected 3,073-byte records")
            if raw.size % 3073:
                raise ValueError(
                    f"{root / f}: size {raw.size} is not a multiple of 3,073-byte records"
                )
            records.append(raw.reshape(-1, 3073))
            _check_labels(records[-1][:, 0], len(names), root / f)
        data = np.concatenate(records)
        images = data[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        labels = data[:, 0].astype(np.int64)
        splits[split] = Dataset.from_dict(
            {"img": np.ascontiguousarray(images), "label": labels}, features=features
        )
    return DatasetDict(splits)
