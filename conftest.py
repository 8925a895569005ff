"""Test set-up: 8 fake CPU devices, configured once before JAX initialises its backend; Ctrl-C as in
a terminal; subprocesses whose whole process group ends with the test."""

import atexit
import contextlib
import gc
import importlib.util
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

# `make test-accelerator` (JAXFEED_TEST_ACCELERATOR=1) runs tests/accelerator on the machine's TPU or
# GPU: JAX picks its platform itself there, and XLA keeps its own options. Everywhere else the
# suite runs on CPU, and the tests marked `accelerator` are skipped (unless
# JAXFEED_ACCELERATOR_TESTS_ON_CPU=1, which runs them on CPU while they are written).
if os.environ.get("JAXFEED_TEST_ACCELERATOR") != "1":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "JAXFEED_CACHE" not in os.environ:  # tests never write to the user's ~/.cache/jaxfeed
    _cache = tempfile.mkdtemp(prefix="jaxfeed-test-cache-")
    os.environ["JAXFEED_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)

# One persistent XLA compilation cache for the session, shared by the xdist workers and by every
# process the tests start (they inherit the environment): the same train steps, models and
# exports compile in many tests and subprocesses, and each compiles once per run. A fresh folder
# per session (removed at exit), so a run never reads entries another version wrote; entries are
# keyed by the program, its options, devices and the jax/jaxlib versions anyway. A maximum size
# turns on JAX's file lock around reads and writes (processes never read a half-written entry).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _xla_cache = tempfile.mkdtemp(prefix="jaxfeed-test-xla-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _xla_cache
    atexit.register(shutil.rmtree, _xla_cache, ignore_errors=True)
# Programs that compile in 0.1 s or more are kept. Not the eager operations below that: keeping
# them too saved 0.6 s of a `jaxfeed train` subprocess, but writing each one made the in-process
# model tests far slower (the whole suite 709 s -> 1067 s).
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(4 << 30))


def _xla_takes(flag: str) -> bool:
    """Whether this jaxlib's XLA takes the flag ``flag`` (an unknown one in XLA_FLAGS aborts every
    process at JAX's start): asked of a short process of its own, once per session."""
    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    probe = [sys.executable, "-c", "import jax; jax.devices()"]
    return subprocess.run(probe, env=env, capture_output=True, timeout=300).returncode == 0


# XLA's CPU backend at optimisation level 1, not the default 2, here and in the processes the tests
# start: the tests check behaviour and values (to tolerances, or bit for bit between runs compiled
# alike), not speed, and level 1 compiles the same programs about 10% faster (tests/models: 109 s
# -> 98 s on 2 workers). Benchmarks and users keep XLA's default. Level 0 is not usable: the CNN's
# training loss turned non-finite at its third step there (XLA 0.10.2's CPU backend). For the same
# reason, fused operations are emitted by XLA's older elemental emitter, not its MLIR fusion
# emitters: a BERT train step on 8 devices then compiled and ran its first step in 3.3 CPU s, not
# 4.9, the CNN's in 2.6, not 4.0 (jaxlib 0.10.2; a jaxlib without that flag keeps its default).
if os.environ.get("JAXFEED_TEST_ACCELERATOR") != "1" and "xla_backend_optimization_level" not in (
    os.environ.get("XLA_FLAGS", "")
):
    flags = [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=1"]
    if _xla_takes("--xla_cpu_use_fusion_emitters=false"):
        flags.append("--xla_cpu_use_fusion_emitters=false")
    os.environ["XLA_FLAGS"] = " ".join(flags).strip()

# Tests of Ctrl-C rely on SIGINT raising KeyboardInterrupt, here and in the processes they start.
# A suite started in the background (`nohup make test &`, CI runners) inherits SIGINT *ignored*:
# Python then installs no handler, and exec'd children inherit the ignored disposition too (a
# handler resets to the default across exec, SIG_IGN does not). Install Python's own handler.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """Collect with bytecode writes on, even under ``PYTHONDONTWRITEBYTECODE``: pytest keeps its
    assertion-rewritten test modules in ``__pycache__`` only where bytecode may be written, and
    without that cache each xdist worker parsed and rewrote all ~180 test files again at every
    run (collection 14.0 -> 10.9 CPU s a worker, jaxfeed's own bytecode already compiled by
    ``make test``). The setting is put back after collection; the processes the tests start
    keep the environment's."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = before


import jax  # noqa: E402 (after the environment JAX reads at its start)

jax.config.update("jax_num_cpu_devices", 8)

# The suites live in folders that mirror the packages (tests/data, tests/loading, ...); their shared
# helpers (cli_helpers, datasets_diff, audio_clips, remote_servers) stay in tests/ itself.
TESTS = Path(__file__).parent / "tests"
sys.path.insert(0, str(TESTS))
import forkserver  # noqa: E402 (from tests/, after the session's environment is set)

# Doctests that compare with transformers' PyTorch models: skipped where torch is not installed
# (make test-latest on Python 3.12+, where no CPU build of torch is at hand).
TORCH_DOCTESTS = ("jaxfeed.models.hub.api.",)


def pytest_collection_finish(session):
    """The objects made so far (the imports, the collected tests: ~220,000 in a worker) are never
    garbage: ``gc.freeze()`` keeps Python's full collections, ~0.25 s each in a worker by
    mid-session, from scanning them again (tests/models' attention and text files: full
    collections 5.7 -> 4.0 s of 47 s)."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    """Every test under tests/e2e (several processes, subprocess runs) carries the ``e2e`` marker;
    :data:`TORCH_DOCTESTS` are skipped without torch.

    For the suite's time on its workers, ``make test`` hands out whole files
    (``--dist loadfile``): a module-scoped fixture (a command run trained once for a file's tests)
    is built once, where tests of one file spread over the workers built it on each (40 s of
    every run in tests/cli/test_cli_hub.py alone). Files go out in collection order
    (``--no-loadscope-reorder``), and the files of the long tests (``slow``, ``e2e``, the
    command's) come first here, in the random order pytest-randomly chose, so no long file starts
    last while the other worker idles. (``--dist loadgroup`` would group only the files with such
    fixtures, but pytest-xdist 3.8 renames the node ids through an attribute pytest 9.2 no longer
    reads, and the groups are lost.)
    """
    e2e, accelerator = TESTS / "e2e", TESTS / "accelerator"
    no_torch = importlib.util.find_spec("torch") is None
    for item in items:
        if e2e in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.e2e)
        if accelerator in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.accelerator)
        if (
            no_torch
            and isinstance(item, pytest.DoctestItem)
            and item.name.startswith(TORCH_DOCTESTS)
        ):
            item.add_marker(pytest.mark.skip(reason="needs torch (transformers' models)"))
    marked = [item for item in items if item.get_closest_marker("accelerator")]
    reason = _no_accelerator() if marked else None
    for item in marked if reason else ():
        item.add_marker(pytest.mark.skip(reason=reason))
    items.sort(key=_handed_out_late)  # stable: the random order stays within each kind


def _no_accelerator() -> str | None:
    """Why the tests marked ``accelerator`` cannot run here, or None. JAX's backend is asked only
    when the platforms are not set to CPU alone (``make test`` sets them: nothing starts)."""
    if os.environ.get("JAXFEED_ACCELERATOR_TESTS_ON_CPU") == "1":
        return None
    platforms = {p.strip() for p in os.environ.get("JAX_PLATFORMS", "").split(",") if p.strip()}
    if platforms and platforms <= {"cpu"}:
        return "needs a TPU or GPU: make test-accelerator on a machine with one"
    if jax.default_backend() not in ("tpu", "gpu"):
        return f"needs a TPU or GPU; JAX's backend here is {jax.default_backend()}"
    return None


def _handed_out_late(item) -> bool:
    """False for the tests that take longest (``slow``, ``e2e``, the command's): handed out first."""
    long = item.get_closest_marker("slow") or item.get_closest_marker("e2e")
    return not (long or TESTS / "cli" in Path(str(item.path)).parents)


# The PyTorch twin of the benchmark CNN needs the `bench` extra, which `make test` does not install.
collect_ignore = ["src/jaxfeed/bench/torch_cnn.py"]
# The deprecated old paths warn when imported (tests/contracts/test_public_paths.py checks them in a
# fresh interpreter); they hold no doctests, so the doctest collector need not import them.
collect_ignore += ["src/jaxfeed/io", "src/jaxfeed/iterable.py", "src/jaxfeed/features"]


class ProcessGroups:
    """Subprocesses each in a new process group (a terminal's Ctrl-C goes to the group:
    ``os.killpg(proc.pid, SIGINT)``); every process left in those groups (workers of workers, a
    launcher's processes) is killed by :meth:`kill_all`."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []

    def __call__(self, cmd, **kwargs) -> subprocess.Popen:
        """``subprocess.Popen(cmd, **kwargs)`` in a new process group."""
        proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
        self.started.append(proc)
        return proc

    def run(self, cmd, *, timeout: float, **kwargs) -> subprocess.CompletedProcess:
        """``subprocess.run(cmd, capture_output=True, text=True, timeout=...)``; on a timeout
        the whole group is killed (``subprocess.run`` kills only the process it started)."""
        proc = self(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def kill_all(self) -> None:
        for proc in self.started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                proc.communicate(timeout=30)


# Tests and benchmarks connect only to this machine's loopback (127.0.0.0/8, ::1): issue 63 found
# the suite reaching for a private-range address. Every connection a Python socket of this
# process opens (socket.connect / connect_ex, and so socket.create_connection, asyncio, ssl,
# http clients; sendto / sendmsg for datagrams) is checked: any other address is refused with
# OffLoopbackError before a packet leaves, and the test that asked fails. Not covered: the
# processes a test starts (a subprocess, Spark's JVM, Ray's workers) and connections made in C
# or C++ (gRPC in JAX's distributed runtime, TensorStore, Py4J's Java side), and name lookups
# (a hostname other than localhost is refused without being resolved, so none is made from here).
OFF_LOOPBACK: list[str] = []  # "test id: address", of the test running now


class OffLoopbackError(PermissionError):
    """A connection of the test suite to an address outside the loopback interface."""


def on_loopback(address) -> bool:
    """Whether a socket address (an (host, port, ...) tuple, or a path for AF_UNIX) is this
    machine's loopback: 127.0.0.0/8, ::1, an IPv4-mapped ::ffff:127.x, "localhost", or an
    unspecified address (0.0.0.0, ::, ""), which connects to this machine."""
    if not isinstance(address, tuple) or not address:
        return True  # AF_UNIX paths, AF_NETLINK and the like: never leave the machine
    host = address[0]
    host = host.decode() if isinstance(host, bytes) else str(host)
    if host in ("", "localhost") or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False  # another hostname: resolving it may already leave the machine
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or ip.is_unspecified or (mapped is not None and mapped.is_loopback)


def _refuse_off_loopback(address) -> None:
    if not on_loopback(address):
        where = os.environ.get("PYTEST_CURRENT_TEST", "outside a test").split(" (")[0]
        OFF_LOOPBACK.append(f"{where}: {address!r}")
        raise OffLoopbackError(
            f"the test suite connects only to loopback (127.0.0.0/8, ::1), not {address!r}: use a "
            "closed loopback port for an address that cannot be reached"
        )


def _guarded(method, address_at):
    def guarded(self, *args, **kwargs):
        if len(args) > address_at:
            _refuse_off_loopback(args[address_at])
        elif "address" in kwargs:
            _refuse_off_loopback(kwargs["address"])
        return method(self, *args, **kwargs)

    guarded.__wrapped__ = method
    return guarded


for _name, _at in (("connect", 0), ("connect_ex", 0), ("sendmsg", 3)):
    setattr(socket.socket, _name, _guarded(getattr(socket.socket, _name), _at))
_sendto = socket.socket.sendto


def _guarded_sendto(self, data, *rest):
    """``sendto(data, address)`` or ``sendto(data, flags, address)``."""
    if rest:
        _refuse_off_loopback(rest[-1])
    return _sendto(self, data, *rest)


socket.socket.sendto = _guarded_sendto


def fail_off_loopback() -> None:
    """Fail the running test when a connection off loopback was tried since the last check."""
    found, OFF_LOOPBACK[:] = list(OFF_LOOPBACK), []
    if found:
        pytest.fail("connected outside loopback: " + "; ".join(found))


@pytest.fixture(autouse=True)
def _loopback_only():
    """Fail the test during which something connected off loopback (a refused connection that
    the code under test caught and retried, or turned into another error, still fails it)."""
    yield
    fail_off_loopback()


# The environment each test file found is put back when its last test and its module fixtures
# are done: a file that changed a variable and left it (ray.init sets PYTHONBREAKPOINT for its
# workers; ``jaxfeed.disable_progress_bars()`` sets JAXFEED_DISABLE_PROGRESS_BARS) changed it
# for every later file of its pytest worker too. The fork server (tests/forkserver.py) then sent
# each later command of that worker to a real subprocess (its import-time variables differed),
# ~5 CPU s a command more, 60 of them in a seed-15 run.
_FILE_ENV: dict[str, Any] = {}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    file = item.nodeid.split("::")[0]
    if _FILE_ENV.get("file") != file:
        _FILE_ENV.update(file=file, env=dict(os.environ))
    try:
        return (yield)
    finally:
        last = nextitem is None or nextitem.nodeid.split("::")[0] != file
        if last and dict(os.environ) != _FILE_ENV["env"]:
            os.environ.clear()
            os.environ.update(_FILE_ENV["env"])


def pytest_sessionfinish(session):
    """An xdist worker hands its fork-server tally to the controller (see below)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["forkserver"] = dict(forkserver.TALLY)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller sums the workers' tallies (pytest-xdist's hook)."""
    for why, count in getattr(node, "workeroutput", {}).get("forkserver", {}).items():
        forkserver.TALLY[why] += count


def pytest_terminal_summary(terminalreporter):
    """One line: how the tests' ``jaxfeed(...)`` commands ran (forked, or why not)."""
    tally = forkserver.TALLY
    if tally:
        real = ", ".join(f"{n} ({why})" for why, n in tally.most_common() if why != "forked")
        terminalreporter.write_line(
            f"commands: {tally['forked']} forked from the fork server"
            + (f"; as subprocesses: {real}" if real else "")
        )


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """Every test leaves SIGINT and SIGTERM handled as it found them. A handler left behind
    (a Ctrl-C helper not put back) makes some later signal test fail, a different one in each
    random order; this fails the test that left it, and puts the handler back for the others."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    left = {s: signal.getsignal(s) for s in before}
    left = {s: h for s, h in left.items() if h is not before[s]}
    for s in left:
        signal.signal(s, before[s])
    if left:
        pytest.fail(
            "the test left "
            + ", ".join(f"{signal.Signals(s).name} handled by {h!r}" for s, h in left.items())
        )


@pytest.fixture
def process_group():
    """A :class:`ProcessGroups`: start subprocesses in their own process groups; whatever the
    test's outcome, every process left in those groups is killed when it ends."""
    groups = ProcessGroups()
    yield groups
    groups.kill_all()
