"""Built-in binary formats: IDX (MNIST) and CIFAR-10 files that are truncated, empty,
not gzip, or decompression bombs give one clear error naming the file."""

import gzip
import resource

import numpy as np
import pytest

from jaxfeed import load_dataset
from jaxfeed.data.load.builtin import read_idx


def idx(array, dtype=0x08):
    header = bytes([0, 0, dtype, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    return header + array.astype(np.uint8).tobytes()


def mnist_folder(folder, gz=False, n=3):
    rng = np.random.default_rng(0)
    suffix = ".gz" if gz else ""
    for prefix in ("train", "t10k"):
        images = idx(rng.integers(0, 256, (n, 28, 28)))
        labels = idx(np.arange(n) % 10)
        for stem, data in (
            (f"{prefix}-images-idx3-ubyte", images),
            (f"{prefix}-labels-idx1-ubyte", labels),
        ):
            (folder / (stem + suffix)).write_bytes(gzip.compress(data) if gz else data)
    return folder


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda b: b[:-5], r"header says shape \(3, 28, 28\) \(2352 bytes\) but the file has 2347"),
        (lambda b: b[:10], r"truncated IDX header"),
        (lambda b: b"", r"not an IDX file"),
        (lambda b: b + b"\x00", r"but the file has 2353"),
        (lambda b: b[:3] + b"\xff" + b[4:], r"declares 255 dimensions"),
        (lambda b: b[:2] + b"\x07" + b[3:], r"unknown IDX data type 0x07"),
    ],
)
def test_bad_idx_files_name_the_file(tmp_path, mutate, match):
    mnist_folder(tmp_path)
    target = tmp_path / "train-images-idx3-ubyte"
    target.write_bytes(mutate(target.read_bytes()))
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte.*" + match):
        load_dataset("mnist", data_dir=str(tmp_path))


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda b: b[:-12], r"corrupt or truncated gzip data"),
        (lambda b: b"plain bytes, not gzip", r"is not a gzip file"),
        (lambda b: b[:-8] + bytes([b[-8] ^ 1]) + b[-7:], r"corrupt or truncated gzip data .*CRC"),
    ],
)
def test_bad_gzip_idx_files_name_the_file(tmp_path, mutate, match):
    mnist_folder(tmp_path, gz=True)
    target = tmp_path / "t10k-labels-idx1-ubyte.gz"
    target.write_bytes(mutate(target.read_bytes()))
    with pytest.raises(ValueError, match=r"t10k-labels-idx1-ubyte\.gz.*" + match):
        load_dataset("mnist", data_dir=str(tmp_path))


def test_wrong_item_shape_is_refused_before_reading_the_body(tmp_path):
    mnist_folder(tmp_path)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(idx(np.zeros((2, 4, 4))))
    with pytest.raises(ValueError, match=r"declares shape \(2, 4, 4\); expected \(n, 28, 28\)"):
        load_dataset("mnist", data_dir=str(tmp_path))


def test_label_outside_the_classes_is_refused(tmp_path):
    mnist_folder(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx(np.array([0, 57, 1])))
    with pytest.raises(
        ValueError, match=r"train-labels-idx1-ubyte: label 57 at row 1 is outside 0..9"
    ):
        load_dataset("mnist", data_dir=str(tmp_path))


def test_gzip_bomb_is_refused_without_decompressing_it(tmp_path):
    """1.5 GB of zeros behind a header declaring 3 images: 1.5 MB on disk, refused after one
    block, with memory far below the unpacked size."""
    header = idx(np.zeros((3, 28, 28)))
    bomb = tmp_path / "bomb.gz"
    zeros = gzip.compress(bytes(16 << 20), compresslevel=9)  # one member, reused: fast to build
    bomb.write_bytes(gzip.compress(header) + zeros * 96)  # a valid multi-member gzip of 1.5 GiB
    assert bomb.stat().st_size < 8 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ValueError, match=r"bomb\.gz: data continues past the 2352 bytes"):
        read_idx(bomb, (28, 28))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 64 << 10  # < 64 MiB


def cifar_folder(folder):
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        records = np.concatenate(
            [rng.integers(0, 10, (2, 1)), rng.integers(0, 256, (2, 3072))], axis=1
        ).astype(np.uint8)
        records.tofile(folder / name)


def test_zero_byte_cifar_file_is_refused(tmp_path):
    cifar_folder(tmp_path)
    (tmp_path / "data_batch_3.bin").write_bytes(b"")
    with pytest.raises(ValueError, match=r"data_batch_3\.bin is empty"):
        load_dataset("cifar10", data_dir=str(tmp_path))


def test_truncated_cifar_file_and_bad_label_are_refused(tmp_path):
    cifar_folder(tmp_path)
    target = tmp_path / "test_batch.bin"
    raw = target.read_bytes()
    target.write_bytes(raw[:-1])
    with pytest.raises(ValueError, match=r"test_batch\.bin: size 6145 is not a multiple"):
        load_dataset("cifar10", data_dir=str(tmp_path))
    target.write_bytes(bytes([200]) + raw[1:])
    with pytest.raises(ValueError, match=r"test_batch\.bin: label 200 at row 0 is outside 0..9"):
        load_dataset("cifar10", data_dir=str(tmp_path))
