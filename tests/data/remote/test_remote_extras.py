"""A missing object-storage client names the jaxfeed extra that installs it.

The client is made missing the way an install without it is: its module cannot be imported, and
fsspec has not registered its file system class yet."""

import sys

import pytest

from jaxfeed import Dataset, load_dataset, load_from_disk
from jaxfeed._base.extras import MissingExtraError


def hide(monkeypatch, scheme: str, *modules: str) -> None:
    registry = sys.modules["fsspec.registry"]
    monkeypatch.delitem(registry._registry, scheme, raising=False)  # forget a loaded class
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)  # `import name` now raises ImportError


@pytest.mark.parametrize(
    ("url", "modules", "package", "extra"),
    [
        ("s3://bucket/train.parquet", ["s3fs"], "s3fs", "s3"),
        ("gs://bucket/train.parquet", ["gcsfs"], "gcsfs", "gcs"),
        ("gcs://bucket/train.parquet", ["gcsfs"], "gcsfs", "gcs"),
        ("https://example.org/train.parquet", ["aiohttp"], "aiohttp", "http"),
        ("hf://datasets/user/repo/train.parquet", ["huggingface_hub"], "huggingface_hub", "hub"),
    ],
)
def test_a_missing_client_names_its_extra(monkeypatch, url, modules, package, extra):
    scheme = url.split("://")[0]
    if scheme == "https":  # fsspec's http module imports aiohttp when it is first imported
        monkeypatch.delitem(sys.modules, "fsspec.implementations.http", raising=False)
    hide(monkeypatch, scheme, *modules)
    message = rf"{scheme}:// paths needs {package}, .*pip install 'jaxfeed\[{extra}\]'"
    with pytest.raises(MissingExtraError, match=message):
        load_dataset("parquet", data_files=url)
    with pytest.raises(MissingExtraError, match=message):
        load_dataset(url, streaming=True)
    if scheme not in ("http", "https"):  # refused before any import (read-only, no listing)
        with pytest.raises(MissingExtraError, match=message):
            load_from_disk(url)
        with pytest.raises(MissingExtraError, match=message):
            Dataset.from_dict({"x": [1]}).save_to_disk(url)


def test_an_unknown_protocol_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unsupported storage URL 'nosuch://b/x\.parquet'"):
        load_dataset("parquet", data_files="nosuch://b/x.parquet")
