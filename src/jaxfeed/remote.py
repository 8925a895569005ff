"""Object storage through fsspec: ``s3://``, ``gs://``, ``hf://``, ``https://`` (and any other
protocol fsspec knows) in ``data_files``, ``load_dataset``, ``load_from_disk`` and ``save_to_disk``.

``storage_options`` (as `datasets` names it) go to the fsspec file system: credentials, endpoint,
anonymous access. The clients are extras: ``pip install jaxfeed[s3]`` (s3fs), ``jaxfeed[gcs]``
(gcsfs), ``jaxfeed[http]`` (aiohttp); ``hf://`` uses ``huggingface_hub``, a core dependency.

>>> is_remote("s3://bucket/data/train.parquet"), is_remote("/data/train.parquet")
(True, False)
"""

from __future__ import annotations

import os
import re
from typing import Any

import fsspec

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "http": "http", "https": "http"}
_PACKAGES = {"s3": "s3fs", "gcs": "gcsfs", "http": "aiohttp"}


def protocol(path: str | os.PathLike) -> str | None:
    """The URL scheme of ``path`` (``"s3"``, ``"gs"``...), or None for a local path."""
    m = _URL.match(str(path))
    if m is None or m.group(1).lower() == "file":
        return None
    return m.group(1).lower()


def is_remote(path: Any) -> bool:
    """Whether ``path`` is a URL that fsspec must open (not a local path or ``file://``)."""
    return isinstance(path, str) and protocol(path) is not None


def filesystem(
    url: str, storage_options: dict | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """``(file system, path within it)`` for ``url``; a missing client names the extra to install."""
    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except ImportError as err:
        scheme = protocol(url) or "file"
        extra = EXTRAS.get(scheme)
        hint = (
            f"pip install 'jaxfeed[{extra}]' (it installs {_PACKAGES[extra]})"
            if extra
            else "install the fsspec implementation for this protocol"
        )
        raise ImportError(f"reading {scheme}:// paths needs an extra package: {hint}") from err
    except ValueError as err:
        raise ValueError(f"unsupported storage URL {url!r}: {err}") from err
    return fs, path


def unstrip(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The full URL of a path inside ``fs`` (fsspec's glob returns paths without the scheme)."""
    return fs.unstrip_protocol(path)


def expand(pattern: str, storage_options: dict | None = None) -> list[str]:
    """The files matching a remote glob pattern (or the file itself), as full URLs, sorted."""
    fs, path = filesystem(pattern, storage_options)
    if any(ch in path for ch in "*?["):
        matches = sorted(p for p in fs.glob(path) if fs.isfile(p))
    elif fs.isdir(path):
        matches = sorted(p for p in fs.find(path) if not _hidden(p[len(path) :]))
    elif fs.exists(path):
        matches = [path]
    else:
        matches = []
    return [unstrip(fs, p) for p in matches]


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/") if part)


def identity(url: str, storage_options: dict | None = None) -> dict[str, Any]:
    """What identifies a remote file's version: its URL, size and ETag or modification time."""
    fs, path = filesystem(url, storage_options)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such data file: {url}") from None
    return {"path": url, "size": info.get("size"), "version": identity_of(info)}


def identity_of(info: dict[str, Any]) -> str | None:
    """The version marker in an fsspec ``info`` dict: ETag, hash or modification time."""
    keys = ("ETag", "etag", "md5Hash", "crc32c", "LastModified", "mtime", "updated", "last_commit")
    return next((str(info[k]) for k in keys if info.get(k) is not None), None)
