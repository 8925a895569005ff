"""Object storage through fsspec: ``s3://``, ``gs://``, ``hf://``, ``https://`` (and any other
protocol fsspec knows) in ``data_files``, ``load_dataset``, ``load_from_disk`` and ``save_to_disk``.

``storage_options`` (as `datasets` names it) go to the fsspec file system: credentials, endpoint,
anonymous access, an ``ssl`` context for a private CA. The clients are extras: ``pip install
jaxfeed[s3]`` (s3fs), ``jaxfeed[gcs]`` (gcsfs), ``jaxfeed[http]`` (aiohttp, for ``https://``) and
``jaxfeed[hub]`` (huggingface_hub, for ``hf://``); a missing one raises
:class:`~jaxfeed._base.extras.MissingExtraError` naming its extra. ``http(s)://`` is read-only.

A server that cannot be reached, or whose TLS certificate cannot be verified, raises
:class:`ConnectionError` (fsspec's HTTP client reports both as a missing file).

>>> is_remote("s3://bucket/data/train.parquet"), is_remote("/data/train.parquet")
(True, False)
>>> protocol("HTTPS://example.org/train.csv"), protocol("file:///data/train.csv")
('https', None)
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import fsspec

from jaxfeed._base.extras import MissingExtraError

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
EXTRAS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "http": "http",
    "https": "http",
    "hf": "hub",
}
_PACKAGES = {"s3": "s3fs", "gcs": "gcsfs", "http": "aiohttp", "hub": "huggingface_hub"}
READ_ONLY = ("http", "https")  # fsspec can POST files, but web servers are not object stores


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
        fs, path = fsspec.core.url_to_fs(url, **options_for(url, storage_options))
    except ImportError as err:
        scheme = protocol(url) or "file"
        extra = EXTRAS.get(scheme)
        if extra is None:
            raise ImportError(
                f"reading {scheme}:// paths needs an fsspec implementation of this protocol: {err}"
            ) from err
        raise MissingExtraError(
            f"reading {scheme}:// paths needs {_PACKAGES[extra]}, an optional part of jaxfeed: "
            f"pip install 'jaxfeed[{extra}]'"
        ) from err
    except ValueError as err:
        raise ValueError(f"unsupported storage URL {url!r}: {err}") from err
    return fs, path


_SAME = {"gcs": "gs", "gs": "gcs", "http": "https", "https": "http", "s3a": "s3", "s3": "s3a"}


def options_for(url: str, storage_options: dict | None) -> dict[str, Any]:
    """The options for ``url``'s file system. As in `datasets`, ``storage_options`` may be flat
    (for every URL) or hold one dict per protocol (``{"s3": {...}, "hf": {"token": ...}}``):
    flat keys apply to all, the URL's own protocol's dict is merged over them.

    >>> opts = {"hf": {"token": "t"}, "s3": {"anon": True}, "timeout": 5}
    >>> options_for("hf://datasets/u/r/x.csv", opts), options_for("gs://b/x.csv", opts)
    ({'timeout': 5, 'token': 't'}, {'timeout': 5})
    """
    options = dict(storage_options or {})
    known = set(fsspec.available_protocols())
    nested = {k for k, v in options.items() if k in known and isinstance(v, dict)}
    if not nested:
        return options
    scheme = protocol(url) or "file"
    own = options.get(scheme) if scheme in nested else options.get(_SAME.get(scheme, ""))
    flat = {k: v for k, v in options.items() if k not in nested}
    return {**flat, **(own if isinstance(own, dict) else {})}


def with_hub_token(storage_options: dict | None, token: str | bool | None) -> dict | None:
    """``storage_options`` with ``load_dataset(token=)`` added for ``hf://`` URLs only (a flat
    ``token`` means something else to s3fs and gcsfs); an explicit ``hf`` token wins.

    >>> with_hub_token({"anon": True}, "hf_x")
    {'anon': True, 'hf': {'token': 'hf_x'}}
    """
    if token is None:
        return storage_options
    options = dict(storage_options or {})
    options["hf"] = {"token": token, **(options.get("hf") or {})}
    return options


def writable_filesystem(
    url: str, storage_options: dict | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """:func:`filesystem` for writing: ``http(s)://`` is refused (read-only) before any work.

    >>> writable_filesystem("https://example.org/saved/ds")
    Traceback (most recent call last):
    ...
    ValueError: cannot write to 'https://example.org/saved/ds': https:// URLs are read-only in jaxfeed; save to a local folder or to object storage (s3://, gs://, ...) instead
    """
    scheme = protocol(url)
    if scheme in READ_ONLY:
        raise ValueError(
            f"cannot write to {url!r}: {scheme}:// URLs are read-only in jaxfeed; save to a local "
            "folder or to object storage (s3://, gs://, ...) instead"
        )
    return filesystem(url, storage_options)


def listing_filesystem(
    url: str, storage_options: dict | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """:func:`filesystem` for reading a whole folder (``load_from_disk``): ``http(s)://`` has no
    reliable listing, so it is refused with what to do instead.

    >>> listing_filesystem("https://example.org/saved/ds")
    Traceback (most recent call last):
    ...
    ValueError: cannot load the saved folder 'https://example.org/saved/ds': https:// has no file listing; copy the folder to object storage (s3://, gs://, hf://) or a local disk, or load its data files with load_dataset
    """
    scheme = protocol(url)
    if scheme in READ_ONLY:
        raise ValueError(
            f"cannot load the saved folder {url!r}: {scheme}:// has no file listing; copy the "
            "folder to object storage (s3://, gs://, hf://) or a local disk, or load its data "
            "files with load_dataset"
        )
    return filesystem(url, storage_options)


def info(fs: fsspec.AbstractFileSystem, path: str, url: str) -> dict[str, Any] | None:
    """``fs.info(path)``, or None when nothing is at ``path``; an unreachable server or a failed
    TLS verification raises :class:`ConnectionError` instead of passing for a missing file.

    >>> fs, path = filesystem("memory://jaxfeed-doc/a.csv")
    >>> fs.pipe(path, b"x,y")
    >>> info(fs, path, "memory://jaxfeed-doc/a.csv")["size"], info(fs, "/nothing", "memory://nothing")
    (3, None)
    """
    try:
        with _explained(url):
            return fs.info(path)
    except FileNotFoundError:
        return None


_PLAIN = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


@contextmanager
def _explained(url: str) -> Iterator[None]:
    """Turn a client's error into one that says what went wrong with ``url``: a "missing file"
    whose cause is the connection, a TLS failure or an HTTP error other than 404, and a client's
    own connection error (httpx's, aiohttp's), become :class:`ConnectionError` (401 and 403:
    :class:`PermissionError`) naming the URL."""
    try:
        yield
    except FileNotFoundError as err:
        _raise_if_unreachable(url, err.__cause__)
        raise
    except _PLAIN:
        raise
    except OSError as err:
        _raise_if_unreachable(url, err)
        raise
    except Exception as err:
        if _NETWORK & {c.__name__ for c in type(err).__mro__}:
            _unreachable(url, err, "the server could not be reached")
        raise


# Transport errors of clients whose errors are not OSErrors (httpx for huggingface_hub, botocore).
_NETWORK = {"TransportError", "ConnectionError", "ConnectTimeoutError", "ReadTimeoutError"}


def _raise_if_unreachable(url: str, cause: BaseException | None) -> None:
    """Raise a clear error if ``cause`` or one of its causes is about the connection, the TLS
    verification or an HTTP status other than 404."""
    depth = 0
    while cause is not None and depth < 8:  # the explicit chain of causes, bounded
        if isinstance(cause, ssl.SSLError):
            _unreachable(
                url,
                cause,
                "the server's TLS certificate could not be verified; for a private CA pass "
                "storage_options={'ssl': ssl.create_default_context(cafile='ca.pem')}",
            )
        status = getattr(cause, "status", None)
        if status is None:  # httpx-style errors (huggingface_hub) keep it on the response
            status = getattr(getattr(cause, "response", None), "status_code", None)
        if isinstance(status, int):
            if status in (404, 410):
                return
            if status in (401, 403):
                raise PermissionError(
                    f"cannot read {url}: the server answered HTTP {status} (check the "
                    f"credentials in storage_options): {cause}"
                ) from cause
            _unreachable(url, cause, f"the server answered HTTP {status}")
        if isinstance(cause, OSError) and not isinstance(cause, _PLAIN):
            _unreachable(url, cause, "the server could not be reached")
        cause, depth = cause.__cause__, depth + 1


def _unreachable(url: str, cause: BaseException, why: str) -> NoReturn:
    raise ConnectionError(f"cannot read {url}: {why} ({type(cause).__name__}: {cause})") from cause


def unstrip(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The full URL of a path inside ``fs`` (fsspec's glob returns paths without the scheme)."""
    return fs.unstrip_protocol(path)


def expand(pattern: str, storage_options: dict | None = None) -> list[str]:
    """The files matching a remote glob pattern (or the file itself), as full URLs, sorted."""
    fs, path = filesystem(pattern, storage_options)
    # A "?" in an http(s) URL starts its query string (a signed URL's), not a glob.
    wildcards = "*[" if protocol(pattern) in ("http", "https") else "*?["
    if any(ch in path for ch in wildcards):
        with _explained(pattern):
            matches = sorted(p for p in fs.glob(path) if fs.isfile(p))
        return [unstrip(fs, p) for p in matches]
    # info first: on http(s), isdir() downloads the file to look for links in it
    found = info(fs, path, pattern)
    if found is None:
        return []
    if found.get("type") == "directory":
        with _explained(pattern):
            matches = sorted(p for p in fs.find(path) if not _hidden(p[len(path) :]))
        return [unstrip(fs, p) for p in matches]
    return [unstrip(fs, path)]


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/") if part)


def identity(url: str, storage_options: dict | None = None) -> dict[str, Any]:
    """What identifies a remote file's version: its URL, size and ETag or modification time."""
    fs, path = filesystem(url, storage_options)
    found = info(fs, path, url)
    if found is None:
        raise FileNotFoundError(f"no such data file: {url}")
    return {"path": url, "size": found.get("size"), "version": identity_of(found)}


def identity_of(info: dict[str, Any]) -> str | None:
    """The version marker in an fsspec ``info`` dict: ETag, content hash (a Hub file's git
    ``blob_id``) or modification time (an HTTP server's ``Last-Modified``)."""
    keys = (
        "ETag",
        "etag",
        "md5Hash",
        "crc32c",
        "blob_id",
        "LastModified",
        "Last-Modified",
        "mtime",
        "updated",
        "last_commit",
    )
    return next((str(info[k]) for k in keys if info.get(k) is not None), None)
