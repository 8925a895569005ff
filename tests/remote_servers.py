"""HTTP servers on 127.0.0.1 for the object-storage tests: a static file server (HTTP or HTTPS)
with byte ranges, and a fake Hugging Face Hub that answers the requests ``HfFileSystem`` makes.

Both serve from a dict ``{path: bytes}`` that a test may change, count the bytes they send per
path, and run in a daemon thread until the ``serve`` context exits. Nothing here reaches the
network: the servers listen on loopback only, on a port the OS picks.

>>> with serve(StaticFiles({"a.txt": b"hello"})) as url:
...     import urllib.request
...     request = urllib.request.Request(url + "/a.txt", headers={"Range": "bytes=1-3"})
...     urllib.request.urlopen(request).read()
b'ell'
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import ssl
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class Files:
    """The files a server serves, their versions, and what it has sent (bytes, ranges)."""

    def __init__(self, files: dict[str, bytes]):
        self.files = dict(files)
        self.mtimes: dict[str, float] = {}
        self.sent: dict[str, int] = defaultdict(int)  # body bytes sent per path
        self.ranges: list[tuple[str, str | None]] = []  # (path, Range header) per GET
        self.requests: list[tuple[str, str]] = []  # (method, path with query) of every request
        self.lock = threading.Lock()
        self.listings = False
        self.etags = True  # False: Last-Modified only, as ``python -m http.server``

    def put(self, path: str, data: bytes, mtime: float | None = None) -> None:
        with self.lock:
            self.files[path] = data
            if mtime is not None:
                self.mtimes[path] = mtime

    def reset_counts(self) -> None:
        with self.lock:
            self.sent.clear()
            self.ranges.clear()
            self.requests.clear()

    @staticmethod
    def oid(data: bytes) -> str:
        """The git blob id of ``data``, as the Hub reports it."""
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    store: Files

    def log_message(self, format, *args):  # quiet
        pass

    def _record(self) -> None:
        with self.store.lock:
            self.store.requests.append((self.command, self.path))

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_file(self, path: str, data: bytes, headers: dict) -> None:
        """``data`` whole, or the part a ``Range: bytes=a-b`` header asks for (206)."""
        size = len(data)
        asked = self.headers.get("Range")
        headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream", **headers}
        status, body = 200, data
        if asked:
            m = _RANGE.match(asked.strip())
            if m is None or m.group(1) == m.group(2) == "":
                self._send(416, headers={"Content-Range": f"bytes */{size}"})
                return
            if m.group(1) == "":  # the last N bytes
                start, stop = max(0, size - int(m.group(2))), size
            else:
                start = int(m.group(1))
                stop = min(size, int(m.group(2)) + 1) if m.group(2) else size
            if start >= size:
                self._send(416, headers={"Content-Range": f"bytes */{size}"})
                return
            status, body = 206, data[start:stop]
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
        if self.command == "GET":
            with self.store.lock:
                self.store.sent[path] += len(body)
                self.store.ranges.append((path, asked))
        self._send(status, body, headers)


class StaticFiles:
    """A read-only static file server (like a CDN or ``python -m http.server`` with ranges):
    GET and HEAD with ``Range``, ``ETag`` and ``Last-Modified``; other methods get 405."""

    def __init__(self, files: dict[str, bytes], listings: bool = False):
        self.store = Files(files)
        self.store.listings = listings  # answer folder URLs (ending in "/") with an HTML index

    def handler(self) -> type[BaseHTTPRequestHandler]:
        store = self.store

        class Handler(_Handler):
            def do_GET(self):
                self.store = store
                self._record()
                path = unquote(urlsplit(self.path).path).lstrip("/")
                data = store.files.get(path)
                if data is None and store.listings and (path == "" or path.endswith("/")):
                    self._send_index(path)
                    return
                if data is None:
                    self._send(404, b"not found")
                    return
                mtime = store.mtimes.get(path, 1_700_000_000.0)
                headers = {"Last-Modified": formatdate(mtime, usegmt=True)}
                if store.etags:
                    headers["ETag"] = f'"{Files.oid(data)}"'
                self._send_file(path, data, headers)

            do_HEAD = do_GET

            def _send_index(self, folder: str) -> None:
                """An HTML index of a folder, as ``python -m http.server`` writes one."""
                names = set()
                for p in store.files:
                    if p.startswith(folder):
                        head, sep, _ = p[len(folder) :].partition("/")
                        names.add(head + sep)  # a file, or a subfolder with its "/"
                names = sorted(names)
                if not names:
                    self._send(404, b"not found")
                    return
                links = "".join(f'<li><a href="{n}">{n}</a></li>' for n in names)
                body = f"<html><body><ul>{links}</ul></body></html>".encode()
                self._send(200, body, {"Content-Type": "text/html; charset=utf-8"})

            def _refuse(self):
                self.store = store
                self._record()
                self.close_connection = True  # the request body is left unread
                self._send(405, b"read-only", {"Allow": "GET, HEAD", "Connection": "close"})

            do_PUT = do_POST = do_DELETE = _refuse

        return Handler


class FakeHub:
    """A fake Hugging Face Hub: one or more dataset repos at revision ``main``, answering only
    what ``huggingface_hub.HfFileSystem`` asks when it reads. Not the Hub: no auth, no commits,
    no Xet, one revision.

    - ``GET /api/datasets/{repo}[/revision/{rev}]``: repo info (``id``, ``sha``)
    - ``GET /api/datasets/{repo}/tree/{rev}[/{dir}]?recursive=``: a folder's entries
    - ``POST /api/datasets/{repo}/paths-info/{rev}`` (form ``paths=``): entries of given paths
    - ``GET|HEAD /datasets/{repo}/resolve/{rev}/{path}``: file bytes, with ``Range``

    Errors carry the ``X-Error-Code`` header the client maps to its exceptions. A repo named in
    ``tokens`` is private: it answers 401 unless the request carries ``Bearer <its token>``.
    """

    REVISION = "main"
    SHA = "0123456789abcdef0123456789abcdef01234567"

    def __init__(self, repos: dict[str, dict[str, bytes]], tokens: dict[str, str] | None = None):
        self.repos = {name: Files(files) for name, files in repos.items()}
        self.tokens = dict(tokens or {})  # private repos: the token each needs
        self.log = Files({})  # every request, whichever the repo

    def handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(_Handler):
            store = hub.log

            def _error(self, status: int, code: str, message: str) -> None:
                body = json.dumps({"error": message}).encode()
                self._send(status, body, {"X-Error-Code": code, "Content-Type": "application/json"})

            def _json(self, value) -> None:
                self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

            def _repo(self, repo: str, revision: str | None) -> Files | None:
                files = hub.repos.get(repo)
                token = hub.tokens.get(repo)
                if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
                    # as the Hub: a private repo is "not found" (401) to those without access
                    self._error(401, "RepoNotFound", f"Repository {repo} not found")
                    return None
                if files is None:
                    self._error(404, "RepoNotFound", f"Repository {repo} not found")
                elif revision not in (None, hub.REVISION, hub.SHA):
                    self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                    return None
                return files

            def do_GET(self):
                self._record()
                url = urlsplit(self.path)
                path = unquote(url.path)
                query = parse_qs(url.query)
                if m := re.fullmatch(r"/api/datasets/([^/]+/[^/]+)(?:/revision/([^/]+))?", path):
                    if self._repo(m.group(1), m.group(2)) is not None:
                        self._json({"id": m.group(1), "sha": hub.SHA, "private": False})
                elif m := re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path):
                    files = self._repo(m.group(1), m.group(2))
                    if files is None:
                        return
                    recursive = query.get("recursive", ["False"])[0].lower() == "true"
                    entries = _tree(files, (m.group(3) or "").strip("/"), recursive)
                    if entries is None:
                        self._error(404, "EntryNotFound", f"{m.group(3)} does not exist")
                    else:
                        self._json(entries)
                elif m := re.fullmatch(r"/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
                    files = self._repo(m.group(1), m.group(2))
                    if files is None:
                        return
                    data = files.files.get(m.group(3))
                    if data is None:
                        self._error(404, "EntryNotFound", f"{m.group(3)} does not exist")
                        return
                    self.store = files  # count bytes per repo
                    self._send_file(
                        m.group(3),
                        data,
                        {"ETag": f'"{Files.oid(data)}"', "X-Repo-Commit": hub.SHA},
                    )
                else:
                    self._error(404, "EntryNotFound", f"no route for {path}")

            do_HEAD = do_GET

            def do_POST(self):
                self._record()
                path = unquote(urlsplit(self.path).path)
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/paths-info/([^/]+)", path)
                if m is None:
                    self._error(404, "EntryNotFound", f"no route for {path}")
                    return
                files = self._repo(m.group(1), m.group(2))
                if files is None:
                    return
                out = []
                for wanted in form.get("paths", []):
                    wanted = wanted.strip("/")
                    if wanted in files.files:
                        out.append(_file_entry(wanted, files.files[wanted]))
                    elif any(p.startswith(wanted + "/") for p in files.files):
                        out.append(_dir_entry(wanted))
                self._json(out)

        return Handler


def _file_entry(path: str, data: bytes) -> dict:
    return {"type": "file", "path": path, "size": len(data), "oid": Files.oid(data)}


def _dir_entry(path: str) -> dict:
    return {"type": "directory", "path": path, "oid": hashlib.sha1(path.encode()).hexdigest()}


def _tree(files: Files, folder: str, recursive: bool) -> list[dict] | None:
    """The entries under ``folder`` (its children, or all descendants), or None if no folder."""
    prefix = folder + "/" if folder else ""
    inside = sorted(p for p in files.files if p.startswith(prefix))
    if folder and not inside:
        return None
    entries: dict[str, dict] = {}
    for path in inside:
        parts = path[len(prefix) :].split("/")
        depth = len(parts) if recursive else 1
        for i in range(1, min(depth, len(parts) - 1) + 1):  # the folders on the way
            sub = prefix + "/".join(parts[:i])
            entries.setdefault(sub, _dir_entry(sub))
        if recursive or len(parts) == 1:
            entries[path] = _file_entry(path, files.files[path])
    return list(entries.values())


def closed_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serve(app: StaticFiles | FakeHub, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """Run ``app`` on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), app.handler())
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    scheme = "https" if tls is not None else "http"
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
