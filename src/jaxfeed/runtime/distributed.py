"""Several processes and hosts on JAX's own multi-controller runtime (``jax.distributed``).

One process per host (or per GPU group) calls :func:`initialize`; JAX's coordinator, collectives
and ``jax.sharding`` do the rest: the ``DataLoader`` reads only this process's rows of each global
batch, and the ``Trainer`` runs one compiled step over the global mesh.

A single host is told from a cluster by the environment alone (:func:`detect_cluster`): one TPU
host (one worker hostname, or host bounds ``1,1,1``), a SLURM job or an Open MPI run of one task,
and a machine none of them describes run as one process without ``jax.distributed``. A cluster
that cannot be reached within ``JAXFEED_INIT_TIMEOUT`` seconds is a :class:`ClusterError` that
names the variables read and what to set, never a hang or a bare ``ConnectionError``.

The processes meet on the coordinator's port before JAX's own start, and keep those connections
until each has joined JAX's job (:class:`_Watch`): a process that stops in between (killed, or its
JAX start failed) can only make JAX abort the others (SIGABRT, a C++ stack trace, once
``JAXFEED_INIT_TIMEOUT`` has passed), so each of them exits at once instead, with status 2 and
one line saying which process stopped.
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax

ENV = ("JAXFEED_COORDINATOR", "JAXFEED_NUM_PROCESSES", "JAXFEED_PROCESS_ID")
TIMEOUT_ENV = "JAXFEED_INIT_TIMEOUT"
DEFAULT_TIMEOUT_S = 120  # how long the processes of a job may take to find each other
HEARTBEAT_ENV = "JAXFEED_HEARTBEAT_TIMEOUT"
DEFAULT_HEARTBEAT_S = 30  # a process silent this long makes the others fail
MAX_SECONDS = 2**31 - 1  # the longest timeout JAX's runtime takes (a C++ int of seconds)
# the variables each launcher sets: the first one present with a value names the job's size
_TPU = ("TPU_WORKER_HOSTNAMES", "TPU_HOST_BOUNDS", "TPU_WORKER_ID")
_SLURM = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
_OMPI = ("OMPI_COMM_WORLD_SIZE",)
_HOW = (
    "to join a multi-process job set JAXFEED_COORDINATOR=HOST:PORT (process 0's address), "
    "JAXFEED_NUM_PROCESSES and JAXFEED_PROCESS_ID"
)


class ClusterError(ValueError):
    """A multi-process job that cannot be joined: the message names the variables read and what
    to set (the command exits with status 2)."""


@dataclass(frozen=True)
class Cluster:
    """A multi-host job described by the environment: its launcher, its processes (None: more
    than one, how many JAX finds out), the variables that said so and the advice for one host."""

    launcher: str
    processes: int | None
    variables: dict[str, str]
    single_host: str

    def describe(self) -> str:
        """``TPU_WORKER_HOSTNAMES=a,b, TPU_WORKER_ID=0``: what was read."""
        return ", ".join(f"{k}={v}" for k, v in self.variables.items())


def detect_cluster(env: Mapping[str, str] | None = None) -> Cluster | None:
    """The multi-host job ``env`` (default: ``os.environ``) describes, or None for one host.

    TPU: more than one name in ``TPU_WORKER_HOSTNAMES``, or ``TPU_HOST_BOUNDS`` over one host;
    SLURM: ``SLURM_STEP_NUM_TASKS``, ``SLURM_NTASKS`` or ``SLURM_NPROCS`` above 1; Open MPI:
    ``OMPI_COMM_WORLD_SIZE`` above 1. Anything else is one host.

    >>> detect_cluster({"TPU_WORKER_HOSTNAMES": "localhost", "TPU_HOST_BOUNDS": "1,1,1"}) is None
    True
    >>> detect_cluster({"TPU_WORKER_HOSTNAMES": "10.0.0.1,10.0.0.2"}).processes
    2
    >>> detect_cluster({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}) is None
    True
    """
    env = os.environ if env is None else env
    return _tpu_cluster(env) or _slurm_cluster(env) or _ompi_cluster(env)


def _tpu_cluster(env: Mapping[str, str]) -> Cluster | None:
    read = {k: env[k] for k in _TPU if env.get(k, "").strip()}
    hosts = [h for h in read.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    bounds = _bounds(read.get("TPU_HOST_BOUNDS", ""))
    counts = [n for n in (len(hosts) or None, bounds) if n is not None]
    if not counts or max(counts) <= 1:
        return None
    advice = (
        "on one TPU host, unset TPU_WORKER_HOSTNAMES (or give it one name) and TPU_HOST_BOUNDS "
        "(or set it to 1,1,1)"
    )
    return Cluster("TPU", max(counts), read, advice)


def _bounds(text: str) -> int | None:
    """The hosts ``TPU_HOST_BOUNDS`` (``2,2,1``) spans, or None when it is not such a list."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        return None
    return math.prod(sizes) if sizes and all(s >= 1 for s in sizes) else None


def _slurm_cluster(env: Mapping[str, str]) -> Cluster | None:
    name = next((k for k in _SLURM if env.get(k, "").strip()), None)
    if name is None:
        return None
    tasks = _tasks(env[name])
    if tasks is not None and tasks <= 1:
        return None
    read = {k: env[k] for k in ("SLURM_JOB_ID", name) if k in env}
    advice = f"for one process, run with {name}=1 (srun --ntasks 1)"
    return Cluster("SLURM", tasks, read, advice)


def _ompi_cluster(env: Mapping[str, str]) -> Cluster | None:
    if not env.get(_OMPI[0], "").strip():
        return None
    tasks = _tasks(env[_OMPI[0]])
    if tasks is not None and tasks <= 1:
        return None
    advice = "for one process, run without mpirun (or mpirun -n 1)"
    return Cluster("Open MPI", tasks, {_OMPI[0]: env[_OMPI[0]]}, advice)


def _tasks(text: str) -> int | None:
    """SLURM's ``2`` or ``2(x3)`` (tasks per node): the count, or None when unreadable."""
    head = text.strip().split("(")[0]
    return int(head) if head.isdigit() else None


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    heartbeat_timeout_seconds: int | None = None,
    timeout_seconds: int | None = None,
) -> bool:
    """Join a multi-process JAX job; returns whether one was joined (False: a single process).

    Arguments default to ``JAXFEED_COORDINATOR`` (host:port), ``JAXFEED_NUM_PROCESSES`` and
    ``JAXFEED_PROCESS_ID``; with none of them set and ``num_processes`` not above 1, JAX's own
    cluster detection (TPU pods, SLURM, Open MPI) runs only where :func:`detect_cluster` finds a
    job of several hosts, else this is a no-op. The processes have ``timeout_seconds`` (default
    ``$JAXFEED_INIT_TIMEOUT`` or 120) to find each other, else :class:`ClusterError`; a process
    that stops answering for ``heartbeat_timeout_seconds`` (default ``$JAXFEED_HEARTBEAT_TIMEOUT``
    or 30) makes the others fail instead of waiting forever.

    >>> from jaxfeed.runtime import distributed
    >>> distributed.initialize()  # nothing set: one process
    False
    """
    coordinator_address = coordinator_address or os.environ.get("JAXFEED_COORDINATOR") or None
    if num_processes is None and os.environ.get("JAXFEED_NUM_PROCESSES"):
        num_processes = _int_env("JAXFEED_NUM_PROCESSES")
    if process_id is None and os.environ.get("JAXFEED_PROCESS_ID"):
        process_id = _int_env("JAXFEED_PROCESS_ID")
    explicit = coordinator_address is not None or (num_processes or 1) > 1
    cluster = None if explicit else detect_cluster()
    if not explicit and cluster is None:
        return False
    if explicit:
        if coordinator_address is None or num_processes is None or process_id is None:
            raise ValueError(
                "a multi-process run needs the coordinator address (host:port), the number of processes and "
                "this process's id (flags or JAXFEED_COORDINATOR, JAXFEED_NUM_PROCESSES, JAXFEED_PROCESS_ID)"
            )
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process id {process_id} is outside [0, {num_processes})")
    if jax.distributed.is_initialized():  # joined earlier in this process (a second main())
        return True
    if coordinator_address is not None:
        _port(coordinator_address)
    timeout = _seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, timeout_seconds, "timeout_seconds")
    heartbeat_timeout_seconds = _seconds(
        HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S, heartbeat_timeout_seconds, "heartbeat_timeout_seconds"
    )
    watch = _Watch({}, "")
    try:
        local_devices = None
        if cluster is not None:  # the launcher's own variables say where process 0 listens
            coordinator_address, num_processes, process_id, local_devices = _detected(timeout)
        if coordinator_address is not None and process_id is not None:
            links = _reach(coordinator_address, num_processes or 1, process_id, timeout) or {}
            job = f"the {num_processes}-process job of coordinator {coordinator_address}"
            watch = _Watch(links, job)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # across CPU processes
        jax.distributed.initialize(
            coordinator_address,
            num_processes,
            process_id,
            local_device_ids=local_devices,
            initialization_timeout=timeout,
            heartbeat_timeout_seconds=heartbeat_timeout_seconds,
        )
    except (OSError, RuntimeError, ValueError) as err:  # unreachable, refused, timed out, no DNS
        watch.close()  # the others learn that this process will not join
        if isinstance(err, ClusterError):
            raise
        raise _unreachable(err, cluster, coordinator_address, num_processes, timeout) from err
    except BaseException:
        watch.close()
        raise
    watch.joined()
    return True


def _port(coordinator: str) -> int:
    """The port of ``HOST:PORT``, 1 to 65535; else ``ValueError`` naming the address."""
    host, _, port_text = coordinator.rpartition(":")
    if not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(
            f"the coordinator address must be HOST:PORT with a port from 1 to 65535 "
            f"(JAXFEED_COORDINATOR or --coordinator), got {coordinator!r}"
        )
    return int(port_text)


def _detected(timeout: int) -> tuple[str | None, int | None, int | None, Any]:
    """JAX's own reading of the launcher's variables (coordinator, processes, this process, local
    devices); all None where this JAX has no such reader."""
    try:
        from jax._src import clusters  # noqa: PLC0415 (optional: JAX's private cluster readers)

        detect = clusters.ClusterEnv.auto_detect_unset_distributed_params
        return detect(None, None, None, None, None, timeout)
    except (ImportError, AttributeError, TypeError):
        return None, None, None, None


def _reach(
    coordinator: str, num_processes: int, process_id: int, timeout: int
) -> dict[int, socket.socket]:
    """Meet every process of the job on the coordinator's port before JAX's client starts (one
    that cannot reach the coordinator, or waits for a process that never comes, makes JAX abort
    the process): process 0 listens there until the others have said hello, then lets them go
    and closes the port for JAX's service; the others connect, retrying until ``timeout``
    seconds have passed. Returns the connections, by the other side's process id (process 0:
    every other one; the others: process 0), for :class:`_Watch`. Raises ``OSError`` (refused,
    no such host, timed out, port taken)."""
    host = coordinator.rpartition(":")[0]
    port = _port(coordinator)
    deadline = time.monotonic() + timeout
    if process_id == 0:
        return _meet_peers(port, num_processes - 1, deadline)
    while True:
        try:
            peer = socket.create_connection((host.strip("[]"), port), timeout=5)
            break
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.25)
    try:
        peer.settimeout(max(deadline - time.monotonic(), 1.0))
        peer.sendall(f"jaxfeed {process_id}\n".encode())
        if peer.recv(16) != _GO:
            raise ConnectionError(f"the coordinator at {coordinator} did not answer as jaxfeed's")
    except BaseException:
        peer.close()
        raise
    return {0: peer}


_GO = b"jaxfeed go\n"
_JOINED = b"joined\n"


def _meet_peers(port: int, peers: int, deadline: float) -> dict[int, socket.socket]:
    """Process 0's side of :func:`_reach`: ``peers`` hellos on ``port`` before ``deadline``."""
    waiting: dict[int, socket.socket] = {}
    try:
        with socket.create_server(("", port), reuse_port=False) as server:
            while len(waiting) < peers:
                server.settimeout(max(deadline - time.monotonic(), 0.01))
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    raise TimeoutError(
                        f"{len(waiting)} of the {peers} other processes connected to port {port}"
                    ) from None
                conn.settimeout(5)
                with contextlib.suppress(OSError, ValueError):
                    hello = conn.recv(32).split()
                    if len(hello) == 2 and hello[0] == b"jaxfeed" and int(hello[1]) not in waiting:
                        waiting[int(hello[1])] = conn
                        continue
                conn.close()  # not one of the job's processes
            for conn in waiting.values():
                conn.sendall(_GO)
    except BaseException:
        for conn in waiting.values():
            conn.close()
        raise
    return waiting


class _Watch:
    """The connections the job's processes met on, kept until each side has joined JAX's job:
    the other side closing its end before it said so means it stopped (killed, or its JAX start
    failed), and JAX's start here can then only abort this process once its timeout passes (a
    C++ stack trace); this process exits at once instead, with status 2 and one line. Once this
    side has joined, it tells the others; a side closing after that is JAX's heartbeat's to
    report."""

    def __init__(self, links: dict[int, socket.socket], job: str) -> None:
        self.links, self.job = dict(links), job
        self.done = threading.Event()
        self._selector = selectors.DefaultSelector()
        for process, conn in self.links.items():
            conn.setblocking(False)
            self._selector.register(conn, selectors.EVENT_READ, process)
        self._thread = threading.Thread(target=self._run, name="jaxfeed-join-watch", daemon=True)
        if self.links:
            self._thread.start()

    def _run(self) -> None:
        heard: dict[int, bytes] = {}
        with self._selector:
            while self._selector.get_map():
                for key, _ in self._selector.select(timeout=1.0):
                    process, conn = key.data, key.fileobj
                    try:
                        data = conn.recv(64)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    heard[process] = heard.get(process, b"") + data
                    if data and _JOINED not in heard[process]:
                        continue  # more to come
                    self._selector.unregister(conn)
                    conn.close()
                    if _JOINED not in heard[process] and not self.done.is_set():
                        self._stopped(process)

    def _stopped(self, process: int) -> None:
        who = "process 0 (the coordinator)" if process == 0 else f"process {process}"
        print(
            f"jaxfeed: error: could not join {self.job}: {who} stopped after it met this one, "
            "before JAX's job started (its connection closed): this process stops too (status "
            "2); start every process of the job again",
            file=sys.stderr,
            flush=True,
        )
        os._exit(2)  # JAX's start under way in the main thread could only abort the process

    def joined(self) -> None:
        """This side joined JAX's job: say so to the others (who close first)."""
        self.done.set()
        for conn in self.links.values():
            with contextlib.suppress(OSError):  # closed already: that side is done with it
                conn.send(_JOINED)  # 7 bytes into an empty send buffer: never blocks

    def close(self) -> None:
        """This side will not join (its start failed): the others learn it from the closing."""
        self.done.set()
        for conn in self.links.values():
            with contextlib.suppress(OSError):
                conn.close()


def _unreachable(
    err: BaseException,
    cluster: Cluster | None,
    coordinator: str | None,
    processes: int | None,
    timeout: int,
) -> ClusterError:
    """The one-line error of a job not joined: what was read, what failed, what to set."""
    text = str(err).strip()
    cause = f"{type(err).__name__}: {text.splitlines()[0][:300] if text else 'no message'}"
    if cluster is None:
        where = (
            f"the {processes}-process job of coordinator {coordinator} (JAXFEED_COORDINATOR, "
            "JAXFEED_NUM_PROCESSES, JAXFEED_PROCESS_ID)"
        )
        advice = (
            "start every process with the same JAXFEED_COORDINATOR (process 0's HOST:PORT, "
            "reachable from each host) and JAXFEED_NUM_PROCESSES, or unset them for one process"
        )
    else:
        size = f"{cluster.processes}-host " if cluster.processes else ""
        where = f"the {size}{cluster.launcher} job that {cluster.describe()} describe"
        advice = f"{cluster.single_host}; {_HOW}"
    return ClusterError(
        f"could not join {where} within {timeout} s ({TIMEOUT_ENV}) ({cause}): {advice}"
    )


def _seconds(name: str, default: int, given: int | None = None, argument: str = "") -> int:
    """``given`` (the argument ``argument``), else the environment variable ``name``, else
    ``default``: a whole number of seconds from 1 to :data:`MAX_SECONDS`, or ``ValueError``
    naming where it came from."""
    if given is not None:
        value, source = given, argument
    elif not os.environ.get(name):
        return default
    else:
        value, source = _int_env(name), name
    if not isinstance(value, int) or not 1 <= value <= MAX_SECONDS:
        raise ValueError(
            f"{source} must be a number of seconds >= 1 (at most {MAX_SECONDS}), got {value}"
        )
    return value


def _int_env(name: str) -> int:
    value = os.environ[name]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def is_primary() -> bool:
    """True in process 0, the one that prints and writes run files."""
    return jax.process_index() == 0


def data_mesh() -> jax.sharding.Mesh:
    """A mesh with one ``data`` axis over every device of every process."""
    return jax.make_mesh((jax.device_count(),), ("data",))
