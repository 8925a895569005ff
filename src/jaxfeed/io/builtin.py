"""Built-in datasets: ``digits`` (bundled with jaxfeed), and ``mnist``, ``fashion_mnist`` and
``cifar10`` read from their original binary files in ``data_dir`` (never the pickled versions)."""

from __future__ import annotations

import gzip
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


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (the MNIST format): big-endian header, then the array."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if data[2] not in dtypes:
        raise ValueError(f"{path}: unknown IDX data type 0x{data[2]:02x}")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(dtypes[data[2]])
    expected = int(np.prod(shape)) * dtype.itemsize
    body = data[4 + 4 * ndim :]
    if len(body) != expected:
        raise ValueError(
            f"{path}: header says shape {shape} ({expected} bytes) but the file has {len(body)}"
        )
    return np.frombuffer(body, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))


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
        images = read_idx(_find(root, images_stem))
        labels = read_idx(_find(root, labels_stem))
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
        listed = [line.strip() for line in meta.read_text().splitlines() if line.strip()]
        if len(listed) == 10:
            names = listed
    features = Features({"img": Array3D((32, 32, 3), "uint8"), "label": ClassLabel(names=names)})
    splits = {}
    for split, files in (("train", CIFAR_TRAIN), ("test", CIFAR_TEST)):
        records = []
        for f in files:
            raw = np.fromfile(root / f, dtype=np.uint8)
            if raw.size % 3073:
                raise ValueError(
                    f"{root / f}: size {raw.size} is not a multiple of 3,073-byte records"
                )
            records.append(raw.reshape(-1, 3073))
        data = np.concatenate(records)
        images = data[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        labels = data[:, 0].astype(np.int64)
        splits[split] = Dataset.from_dict(
            {"img": np.ascontiguousarray(images), "label": labels}, features=features
        )
    return DatasetDict(splits)
