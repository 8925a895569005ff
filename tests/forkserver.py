"""A fork server for the test suite's ``python -m jaxfeed.cli`` subprocesses (issue 65).

Each ``python -m jaxfeed.cli ...`` the tests start spent ~3.3 CPU s importing JAX, Flax, Optax,
Orbax, PyArrow and jaxfeed before doing anything (~135 of them per run). :func:`run` runs such a
command in a process forked from a server that already imported those modules: the command still
runs in a process of its own (its own pid, exit status, stdout/stderr pipes, cwd, environment,
process group: the caller's, where ``subprocess.run`` puts it), as ``python -m`` runs it
(``runpy``'s own ``-m`` entry, ``sys.argv``/``sys.path[0]``/``__main__`` as ``-m`` sets them, the
interpreter's own exit: traceback and status 1, ``SystemExit``'s codes, -SIGINT for an uncaught
``KeyboardInterrupt``, threads joined and ``atexit`` run), and the caller gets the
``subprocess.CompletedProcess`` (or ``subprocess.TimeoutExpired``) ``subprocess.run`` gives.

The server (one per pytest worker, started at the first call; stopped at the worker's exit, and
it ends by itself when the worker goes) imports :data:`PRELOAD` without starting a JAX backend and
serves only if no backend exists and one Python thread runs then; JAX is never forked with a
backend. Everything else runs as a real subprocess (:func:`why_not_forked` says why): the
server is off or not healthy, ``JAXFEED_TEST_FORKSERVER=0`` is set, the command is not
``[sys.executable, "-m", "jaxfeed.cli", ...]``, or the environment asked for differs from the
server's in a variable read while those modules import (:func:`read_at_import`).

Only the standard library is imported here (the pytest workers import this module; they have JAX
initialised with 8 devices and are never forked).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import gc
import io
import json
import locale
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ENV = "JAXFEED_TEST_FORKSERVER"  # "0": every command runs as a real subprocess
MODULE = "jaxfeed.cli"
PRELOAD = (
    "jax",
    "flax.nnx",
    "optax",
    "orbax.checkpoint",
    "pyarrow",
    "pandas",
    "jsonargparse",
    "jaxfeed.cli",
    "jaxfeed.recipes.configure",
    "jaxfeed.recipes.run",
    "jaxfeed.recipes.train",
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
)  # fmt: skip
# pandas: pyarrow's first pa.array imports it in every train (0.27 CPU s); matplotlib: with it
# imported, a run draws curves.png itself (0.3 CPU s) instead of in a new Python process that
# imports it again (1.4 CPU s; jaxfeed._base.curves.CurvesInBackground)

# Variables read while PRELOAD imports, which a forked command cannot change (it inherits what the
# server read): by prefix, those JAX, XLA, the BLAS and thread libraries, the allocators, Python,
# the loader, Flax/NNX, NumPy, Hugging Face, absl/gRPC/protobuf, TensorFlow's logging, fsspec and
# tqdm (both copy every variable of their prefix at import), pandas, matplotlib (with Pillow,
# pyparsing and the XDG folders) read; by name, the rest a traced import read by name
# (os.environ.__getitem__ during the imports, jaxfeed 2026-05, Python 3.11).
# jaxfeed's own module-level read: JAXFEED_DISABLE_PROGRESS_BARS (_base/settings.py); its other
# JAXFEED_* variables are read when a function runs. PYTHONUNBUFFERED is not among them: the
# forked command builds its stdio from the one asked for.
IMPORT_PREFIXES = (
    "JAX_", "JAX2TF_", "XLA_", "TPU_", "PYTHON", "_PYTHON", "LD_", "OMP_", "MKL_", "OPENBLAS_",
    "GOTO", "NVPL_", "NPY_", "NUMPY_", "MALLOC_", "JE_", "ARROW_", "AWS_", "FLAX_", "NNX_", "HF_",
    "HUGGINGFACE_", "TRANSFORMERS_", "TF_", "CUDA", "NVIDIA_", "ABSL_", "GRPC_", "MSGPACK_",
    "PROTOCOL_BUFFERS_", "FSSPEC_", "TQDM_", "LC_", "ENABLE_ORBAX_", "CLOUDSDK_", "PIP_",
    "PANDAS_", "MPL", "MATPLOTLIB", "PILLOW_", "PYPARSING", "XDG_",
)  # fmt: skip
IMPORT_NAMES = frozenset(
    {
        "LANG", "LANGUAGE", "HOME", "PATH", "TMPDIR", "TEMP", "TMP", "TEST_TMPDIR", "TERM", "PWD",
        "CHECK_VMA", "EAGER_CONSTANT_FOLDING", "IS_SANDBOX", "IN_SPHINX_RUN", "CONTAINER_NAME",
        "CLOUD_SDK_VERSION", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR",
        "GIT_SSL_CAINFO", "HTTPLIB2_CA_CERTS", "NIX_SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS",
        "IPYTHON_TESTING_TIMEOUT_SCALE", "TRAITLETS_APPLICATION_RAISE_CONFIG_FILE_ERROR",
        "RUST_BACKTRACE", "JAXFEED_DISABLE_PROGRESS_BARS", "COLUMNS", "LINES", "SPHINX_BUILD",
    }
)  # fmt: skip
STDIO_NAMES = frozenset({"PYTHONUNBUFFERED"})
# Names under those prefixes that are read only when a command runs, never while PRELOAD imports
# (a traced import reads none of them): a TPU host's cluster variables, which jaxfeed's
# runtime.distributed and JAX's cluster detection read. A command given them still forks
# (test_cli.py's one-TPU-host run was a real subprocess for them: ~3.5 CPU s of imports).
RUN_TIME_NAMES = frozenset({"TPU_WORKER_HOSTNAMES", "TPU_HOST_BOUNDS", "TPU_WORKER_ID"})


def read_at_import(name: str) -> bool:
    """Whether the environment variable ``name`` is read while :data:`PRELOAD` imports.

    >>> read_at_import("JAX_PLATFORMS"), read_at_import("JAXFEED_CACHE")
    (True, False)
    >>> read_at_import("TPU_LIBRARY_PATH"), read_at_import("TPU_WORKER_ID")
    (True, False)
    """
    if name in STDIO_NAMES or name in RUN_TIME_NAMES:
        return False
    return (
        name in IMPORT_NAMES
        or name == "JAXFEED_DISABLE_PROGRESS_BARS"
        or (name.startswith(IMPORT_PREFIXES))
    )


def run(cmd, *, cwd=None, input=None, env=None, timeout=None, text=True):
    """``subprocess.run(cmd, capture_output=True, text=text, cwd=cwd, input=input, env=env,
    timeout=timeout)``, forked from the fork server where that is faithful. The result carries
    ``forked`` (True when it ran there)."""
    cmd = list(cmd)
    why = why_not_forked(cmd, cwd=cwd, env=env)
    server = None if why else _server()
    if server is not None and server.healthy():
        done = server.run(cmd, cwd=cwd, input=input, env=env, timeout=timeout, text=text)
        if done is not None:
            TALLY["forked"] += 1
            return done
        why = "the server refused it"
    TALLY[why or "the server is not healthy"] += 1
    done = subprocess.run(
        cmd, capture_output=True, text=text, cwd=cwd, input=input, env=env, timeout=timeout
    )
    done.forked = False
    return done


def why_not_forked(cmd, *, cwd=None, env=None) -> str | None:
    """Why ``cmd`` runs as a real subprocess (None: it is forked from the server).

    >>> why_not_forked(["ls"])
    'not python -m jaxfeed.cli'
    """
    if os.environ.get(ENV, "1") == "0":
        return f"{ENV}=0"
    if [os.fsdecode(part) for part in cmd[:3]] != [sys.executable, "-m", MODULE]:
        return "not python -m jaxfeed.cli"
    if cwd is not None and not os.path.isdir(cwd):
        return "no such folder"  # subprocess.run raises the error
    server = _server()
    if server is None:
        return _SERVER.get("why", "no server")
    return server.differs(os.environ if env is None else env)


# The server's `python -c`: this file loaded by path, then main(). In a forked command, a
# traceback that reaches the top starts where `python -m`'s does, at runpy's frame (the frames
# of this code above it are dropped: a bare `raise` adds none).
BOOT = """
import importlib.util as u, sys
s = u.spec_from_file_location("_jaxfeed_forkserver", sys.argv[1])
m = u.module_from_spec(s)
s.loader.exec_module(m)
try:
    m.main(sys.argv[2])
except BaseException as e:
    t = e.__traceback__
    while t is not None and t.tb_frame.f_code.co_filename != "<frozen runpy>":
        t = t.tb_next
    e.__traceback__ = t or e.__traceback__
    raise
"""

# The worker's environment as the session set it up (conftest.py), taken when the worker imports
# this module, before any test changed it: the server runs with it, whichever test calls first
# (a first caller's monkeypatched HF_HUB_OFFLINE would otherwise send every later command of
# the worker to a real subprocess).
_SESSION_ENV = dict(os.environ)
#: How this worker's :func:`run` calls ran: ``"forked"`` or why not (conftest.py prints the
#: session's sum: a test that leaves an import-time variable changed shows up there)
TALLY: collections.Counter[str] = collections.Counter()
_SERVER: dict = {}
_LOCK = threading.Lock()


def _server() -> _Client | None:
    """This process's fork server, started at the first call (None if it cannot serve)."""
    if os.environ.get(ENV, "1") == "0":
        return None
    with _LOCK:
        if "client" not in _SERVER and "why" not in _SERVER:
            try:
                _SERVER["client"] = _Client()
            except _Refused as why:
                _SERVER["why"] = str(why)
        return _SERVER.get("client")


class _Refused(Exception):
    """The server did not start, or will not serve."""


class _Client:
    """The pytest worker's side: starts the server, sends it commands."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="jaxfeed-forkserver-")
        self.path = os.path.join(self.folder, "socket")
        self.env = dict(_SESSION_ENV)
        boot = BOOT
        with open(os.path.join(self.folder, "log"), "wb") as log:
            # its own process group (a terminal's Ctrl-C or a test's killpg never reach it),
            # in the worker's session (its children join the worker's group); stdin: a pipe
            # whose end tells it the worker is gone
            self.proc = subprocess.Popen(
                [sys.executable, "-c", boot, __file__, self.path],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=self.env,
                process_group=0,
            )  # fmt: skip
        atexit.register(self.stop)
        ready = self._first_line(timeout=300)
        if not ready.get("ready"):
            self.stop()
            raise _Refused(ready.get("why", "the fork server did not start"))

    def _first_line(self, timeout: float) -> dict:
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                return {"why": f"the fork server was not ready within {timeout} s"}
        line = self.proc.stdout.readline()
        try:
            return json.loads(line)
        except ValueError:
            tail = Path(self.folder, "log").read_text(errors="replace")[-2000:]
            return {"why": f"the fork server ended: {tail}"}

    def healthy(self) -> bool:
        return self.proc.poll() is None

    def differs(self, env) -> str | None:
        """The first import-time variable whose value in ``env`` is not the server's."""
        env = {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()}
        for name in sorted(set(env) | set(self.env)):
            if read_at_import(name) and env.get(name) != self.env.get(name):
                return f"{name} differs from the fork server's (read at import)"
        return None

    def stop(self) -> None:
        """End the server (it exits when its stdin closes) and remove its folder."""
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(Exception):
            self.proc.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def run(self, cmd, *, cwd, input, env, timeout, text):
        """The command forked from the server, or None where the server refused it before
        forking (the caller runs it as a subprocess then)."""
        env = dict(os.environ if env is None else env)
        request = {
            "module": os.fsdecode(cmd[2]),
            "executable": os.fsdecode(cmd[0]),
            "args": [os.fsdecode(part) for part in cmd[3:]],
            "cwd": os.path.abspath(os.fsdecode(cwd if cwd is not None else os.getcwd())),
            "env": {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()},
            "pgid": os.getpgrp(),
            "sid": os.getsid(0),
            "ignored": sorted(_ignored_signals()),
            "mask": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        }
        encoding = "utf-8" if sys.flags.utf8_mode else locale.getencoding()
        if text and input is not None:
            input = input.encode(encoding)
        with _Pipes(input is not None) as pipes:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(self.path)
                body = json.dumps(request).encode()
                socket.send_fds(conn, [struct.pack("!I", len(body)) + body], pipes.for_child())
            except OSError:
                conn.close()
                return None
            pipes.close_child_ends()
            with conn:
                done = _Communication(conn, pipes, input).run(cmd, timeout)
        if done is None:
            return None
        returncode, out, err = done
        if text:
            out, err = (_translate(data, encoding) for data in (out, err))
        result = subprocess.CompletedProcess(cmd, returncode, out, err)
        result.forked = True
        return result


def _ignored_signals() -> set[int]:
    """Signals this process ignores, which a subprocess inherits ignored (SIGPIPE and SIGXFSZ:
    ``subprocess`` resets them, and Python ignores them in every process)."""
    found = set()
    for number in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            if signal.getsignal(number) is signal.SIG_IGN:
                found.add(int(number))
    return found - {signal.SIGPIPE, signal.SIGXFSZ}


def _translate(data: bytes, encoding: str) -> str:
    """Bytes to text as ``subprocess`` gives them in text mode (universal newlines)."""
    return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")


class _Pipes:
    """The command's stdin (a pipe given ``input``, else this process's stdin, as
    ``subprocess.run`` leaves it), stdout and stderr pipes."""

    def __init__(self, with_input: bool) -> None:
        self.stdin = os.pipe() if with_input else None
        self.stdout, self.stderr = os.pipe(), os.pipe()
        self.open = [fd for pair in (self.stdin, self.stdout, self.stderr) if pair for fd in pair]

    def for_child(self) -> list[int]:
        return [self.stdin[0] if self.stdin else 0, self.stdout[1], self.stderr[1]]

    def close_child_ends(self) -> None:
        for fd in self.for_child():
            if fd != 0:
                self.close(fd)

    def close(self, fd: int) -> None:
        if fd in self.open:
            self.open.remove(fd)
            os.close(fd)

    def __enter__(self) -> _Pipes:
        return self

    def __exit__(self, *exc) -> None:
        for fd in list(self.open):
            self.close(fd)


class _Communication:
    """``Popen.communicate`` over the pipes, and the server's messages: the pid, the status."""

    def __init__(self, conn: socket.socket, pipes: _Pipes, input: bytes | None) -> None:
        self.conn, self.pipes, self.pending = conn, pipes, memoryview(input or b"")
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.said = b""
        self.pid = self.returncode = None
        self.refused = False

    def run(self, cmd, timeout):
        """``(returncode, stdout, stderr)`` bytes; None if refused before forking."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            with selectors.DefaultSelector() as sel:
                self._register(sel)
                while sel.get_map() and not self.refused:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise subprocess.TimeoutExpired(
                            cmd, timeout,
                            output=b"".join(self.out) or None, stderr=b"".join(self.err) or None,
                        )  # fmt: skip
                    for key, _ in sel.select(left):
                        key.data(sel, key.fileobj)
        except BaseException:  # a timeout, or the caller interrupted: kill it, as subprocess.run
            self._kill_and_wait()
            raise
        if self.refused:
            return None
        return self.returncode, b"".join(self.out), b"".join(self.err)

    def _register(self, sel) -> None:
        pipes = self.pipes
        sel.register(pipes.stdout[0], selectors.EVENT_READ, self._reader(self.out))
        sel.register(pipes.stderr[0], selectors.EVENT_READ, self._reader(self.err))
        sel.register(self.conn, selectors.EVENT_READ, self._control)
        if pipes.stdin:
            if self.pending:
                os.set_blocking(pipes.stdin[1], False)
                sel.register(pipes.stdin[1], selectors.EVENT_WRITE, self._writer)
            else:
                pipes.close(pipes.stdin[1])

    def _reader(self, into: list[bytes]):
        def read(sel, fd):
            data = os.read(fd, 1 << 16)
            if data:
                into.append(data)
            else:
                sel.unregister(fd)
                self.pipes.close(fd)

        return read

    def _writer(self, sel, fd) -> None:
        try:
            written = os.write(fd, self.pending[: 1 << 16])
        except BrokenPipeError:  # the command did not read it all: as subprocess ignores it
            written = len(self.pending)
        self.pending = self.pending[written:]
        if not self.pending:
            sel.unregister(fd)
            self.pipes.close(fd)

    def _control(self, sel, conn) -> None:
        data = conn.recv(4096)
        if not data:
            sel.unregister(conn)
            if self.returncode is None and not self.refused:
                raise RuntimeError("the fork server closed the connection before the exit status")
            return
        self.said += data
        while b"\n" in self.said:
            line, self.said = self.said.split(b"\n", 1)
            message = json.loads(line)
            self.pid = message.get("pid", self.pid)
            self.refused = "refused" in message
            if "returncode" in message:
                self.returncode = message["returncode"]

    def _kill_and_wait(self) -> None:
        """Have the server kill the command (by its pidfd: never another process that got the
        pid) and wait for its status, as ``subprocess.run`` kills and waits."""
        with contextlib.suppress(OSError):
            self.conn.sendall(b"kill\n")
        self.conn.settimeout(60)
        with contextlib.suppress(OSError, ValueError):
            while self.returncode is None and not self.refused:
                data = self.conn.recv(4096)
                if not data:
                    break
                self.said += data
                while b"\n" in self.said:
                    line, self.said = self.said.split(b"\n", 1)
                    self.returncode = json.loads(line).get("returncode", self.returncode)


# ---- the server: `python -c BOOT forkserver.py SOCKET` -----------------------------------------


def _pidfd_refusal() -> str | None:
    """Why children cannot be watched by pidfds here (None: they can): Python without
    ``os.pidfd_open``, or a kernel or sandbox that refuses the call."""
    if not hasattr(os, "pidfd_open"):
        return "no os.pidfd_open here"
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError as error:
        return f"os.pidfd_open refused: {error}"
    return None


def main(path: str) -> None:
    """Serve on the Unix socket ``path`` until stdin closes or the parent goes; in each forked
    child, return to run the command as ``python -m`` does."""
    parent, inherited = os.getppid(), _ignored_signals()
    said, why = _preload()
    if why is None:
        why = _pidfd_refusal()
    if why is not None:
        print(json.dumps({"ready": False, "why": why}), flush=True)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    child = _Server(listener, parent).serve()
    if child is not None:
        _become(child, said, inherited)


def _preload() -> tuple[tuple[bytes, bytes], str | None]:
    """Import :data:`PRELOAD`, capturing what the imports wrote to fds 1 and 2 (each command
    writes it as its own imports would have): ``((stdout, stderr), why not serving)``."""
    import importlib  # the server's only

    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            for name in PRELOAD:
                importlib.import_module(name)
        except BaseException as failed:  # any failure: refuse to serve
            why = f"importing the modules failed: {failed!r}"
        else:
            why = None
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
        said = []
        for file in (out, err):
            file.seek(0)
            said.append(file.read())
    if why is None:
        why = _not_forkable()
    # What the imports built stays out of the collector's sight: a forked command's collections
    # (and its exit's) would otherwise walk ~176,000 objects, copying the pages they sit on: a
    # command's exit took 0.54 s, 0.17 s frozen (a real process's exit frees what it imported).
    gc.freeze()
    return (said[0], said[1]), why


def _not_forkable() -> str | None:
    """Why this process may not be forked for a command: a JAX backend, or another Python
    thread. (Native threads the imports start, OpenBLAS's pool and jemalloc's background thread,
    handle fork themselves, as they must in any forked Python process.)"""
    try:
        from jax._src import xla_bridge  # the server's only

        backends = dict(xla_bridge._backends)
    except (ImportError, AttributeError) as err:
        return f"cannot tell whether JAX started a backend: {err!r}"
    if backends:
        return f"JAX started a backend while importing: {sorted(backends)}"
    if threading.active_count() != 1:
        return f"{threading.active_count()} Python threads run after the imports"
    return None


class _Server:
    """The accept loop: each request forks a child; the pid goes back at once, the exit status
    when the child ends (watched by a pidfd); a 'kill' or a closed connection kills it."""

    def __init__(self, listener: socket.socket, parent: int) -> None:
        self.listener, self.parent, self.server_pid = listener, parent, os.getpid()
        self.sel = selectors.DefaultSelector()
        self.children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)

    def serve(self):
        """Loop until the worker goes (None: the commands still running are killed, nobody reads
        their output), or return a forked child's request."""
        try:
            return self._loop()
        finally:
            if self.children and os.getpid() == self.server_pid:
                for pidfd in self.children:
                    with contextlib.suppress(OSError):
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)

    def _loop(self):
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.sel.register(0, selectors.EVENT_READ, "parent")
        while os.getppid() == self.parent:
            for key, _ in self.sel.select(1.0):
                if key.data == "parent" and not os.read(0, 4096):
                    return None
                if key.data == "accept":
                    child = self._accept()
                    if child is not None:
                        return child
                elif key.data == "ended":
                    self._ended(key.fileobj)
                elif key.data == "control":
                    self._control(key.fileobj)
        return None

    def _accept(self):
        conn, _ = self.listener.accept()
        conn.settimeout(30)
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError):
            conn.close()
            return None
        if request.get("sid") != os.getsid(0):  # its group is out of reach: a subprocess then
            conn.sendall(b'{"refused": "another session"}\n')
            conn.close()
            for fd in fds:
                os.close(fd)
            return None
        pid = os.fork()
        if pid == 0:
            self._close_in_child(conn)
            request["fds"] = fds
            return request
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = (pid, conn)
        with contextlib.suppress(OSError):  # a caller gone: _control kills the command
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        self.sel.register(pidfd, selectors.EVENT_READ, "ended")
        self.sel.register(conn, selectors.EVENT_READ, "control")
        return None

    def _close_in_child(self, conn: socket.socket) -> None:
        self.sel.close()
        self.listener.close()
        conn.close()
        for pidfd, (_, other) in self.children.items():
            os.close(pidfd)
            other.close()
        self.children = {}

    def _ended(self, pidfd: int) -> None:
        pid, conn = self.children.pop(pidfd)
        self.sel.unregister(pidfd)
        _, status = os.waitpid(pid, 0)
        os.close(pidfd)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn)  # unless the caller closed it already
        with contextlib.suppress(OSError), conn:
            conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
            conn.sendall(b"\n")

    def _control(self, conn: socket.socket) -> None:
        """'kill', or the caller gone (``subprocess.run`` kills its process then): SIGKILL."""
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(conn)
        if b"kill" in data or not data:
            pidfd = next(fd for fd, (_, c) in self.children.items() if c is conn)
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """A request: a 4-byte length, JSON, and the command's stdin, stdout and stderr fds."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    if len(fds) != 3 or len(data) < 4:
        for fd in fds:
            os.close(fd)
        raise ValueError("a request without its three fds")
    size = struct.unpack("!I", data[:4])[0]
    body = data[4:]
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise ValueError("a request cut short")
        body += more
    return json.loads(body), fds


def _become(request: dict, said: tuple[bytes, bytes], inherited: set[int]) -> None:
    """In the forked child: set the process up as ``python -m MODULE ARGS`` would start, then run
    the module as ``-m`` runs it; the interpreter's own exit follows (status, traceback,
    threads, ``atexit``)."""
    import runpy  # the child's only

    import numpy as np  # imported already, with JAX

    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
    for fd in request["fds"]:
        os.close(fd)
    os.setpgid(0, request["pgid"])  # the caller's group, where subprocess.run puts a command
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _signals(inherited, set(request["ignored"]), request["mask"])
    _stdio(bool(request["env"].get("PYTHONUNBUFFERED")))
    np.random.seed()  # each process its own global RNG, as a fresh import seeds it
    main = sys.modules["__main__"].__dict__
    for name in [name for name in main if not name.startswith("__")]:
        del main[name]
    sys.modules.pop("_jaxfeed_forkserver", None)
    if sys.path and sys.path[0] == "":  # -c's entry; -m's is the full path of its cwd
        del sys.path[0]
    if not sys.flags.safe_path:
        sys.path.insert(0, os.getcwd())
    sys.argv = ["-m", *request["args"]]
    sys.orig_argv = [request["executable"], "-m", request["module"], *request["args"]]
    for fd, data in zip((1, 2), said, strict=True):
        if data:
            os.write(fd, data)
    runpy._run_module_as_main(request["module"], alter_argv=True)


def _signals(inherited: set[int], ignored: set[int], mask: list[int]) -> None:
    """The dispositions a subprocess of the caller would start with: what the caller ignores
    stays ignored, the rest as Python sets them (handlers the imports installed are kept)."""
    for number in ignored - inherited:
        signal.signal(number, signal.SIG_IGN)
    for number in inherited - ignored:
        default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
        signal.signal(number, default)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _stdio(unbuffered: bool) -> None:
    """sys.stdin, stdout and stderr on fds 0, 1, 2 as Python's start makes them (its
    ``create_stdio``): buffered stdin; stdout line-buffered on a terminal; stderr line-buffered;
    both write-through and unbuffered under PYTHONUNBUFFERED."""
    streams = []
    for fd, old, name in ((0, sys.stdin, "<stdin>"), (1, sys.stdout, "<stdout>"),
                          (2, sys.stderr, "<stderr>")):  # fmt: skip
        write = fd != 0
        buffering = 0 if unbuffered and write else -1
        buffer = open(fd, "wb" if write else "rb", buffering, closefd=False)  # noqa: SIM115 (sys.std*)
        raw = buffer if buffering == 0 else buffer.raw
        raw.name = name
        stream = io.TextIOWrapper(
            buffer, old.encoding, old.errors, newline="\n",
            line_buffering=not unbuffered and (raw.isatty() or fd == 2),
            write_through=unbuffered,
        )  # fmt: skip
        stream.mode = "w" if write else "r"
        streams.append(stream)
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams
