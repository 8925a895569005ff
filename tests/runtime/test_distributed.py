"""One host or a cluster, from the environment: ``detect_cluster`` and ``initialize``."""

import jax
import pytest

from jaxfeed.runtime import distributed
from jaxfeed.runtime.distributed import ClusterError, detect_cluster

ONE_TPU_HOST = {  # a single-chip TPU v5e VM's own variables
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_HOST_BOUNDS": "1,1,1",
    "TPU_SKIP_MDS_QUERY": "true",
    "TPU_ACCELERATOR_TYPE": "v5litepod-4",
    "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
    "TPU_WORKER_ID": "0",
}


@pytest.mark.parametrize(
    "env",
    [
        {},
        ONE_TPU_HOST,
        {"TPU_WORKER_HOSTNAMES": "10.0.0.7"},
        {"TPU_HOST_BOUNDS": "1,1,1"},
        {"TPU_WORKER_HOSTNAMES": "localhost,", "TPU_HOST_BOUNDS": "1,1,1"},
        {"SLURM_JOB_ID": "42", "SLURM_NTASKS": "1"},
        {"SLURM_JOB_ID": "42", "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "4"},
        {"SLURM_JOB_ID": "42", "SLURM_NPROCS": "1"},
        {"SLURM_JOB_ID": "42"},  # an allocation's shell: no tasks named
        {"OMPI_COMM_WORLD_SIZE": "1"},
        {"CUDA_VISIBLE_DEVICES": "0,1,2,3"},  # one GPU machine
    ],
)
def test_one_host_is_no_cluster(env):
    assert detect_cluster(env) is None


@pytest.mark.parametrize(
    ("env", "launcher", "processes"),
    [
        ({"TPU_WORKER_HOSTNAMES": "10.0.0.1,10.0.0.2", "TPU_WORKER_ID": "1"}, "TPU", 2),
        ({"TPU_HOST_BOUNDS": "2,2,1"}, "TPU", 4),
        ({"TPU_WORKER_HOSTNAMES": "localhost", "TPU_HOST_BOUNDS": "1,2,1"}, "TPU", 2),
        ({"SLURM_JOB_ID": "42", "SLURM_NTASKS": "8"}, "SLURM", 8),
        ({"SLURM_JOB_ID": "42", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "1"}, "SLURM", 2),
        ({"SLURM_NPROCS": "2(x3)"}, "SLURM", 2),
        ({"OMPI_COMM_WORLD_SIZE": "4"}, "Open MPI", 4),
    ],
)
def test_several_hosts_are_a_cluster(env, launcher, processes):
    cluster = detect_cluster(env)
    assert cluster is not None
    assert (cluster.launcher, cluster.processes) == (launcher, processes)
    assert set(cluster.variables) <= set(env)


def _clear(monkeypatch):
    for name in (*distributed.ENV, "SLURM_JOB_ID", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def test_a_single_tpu_host_runs_as_one_process(monkeypatch):
    _clear(monkeypatch)
    for name, value in ONE_TPU_HOST.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    assert distributed.initialize() is False and jax.process_count() == 1


def test_a_cluster_that_cannot_be_joined_names_what_was_read_and_what_to_set(monkeypatch):
    """The hosts are loopback addresses and the coordinator's port one nothing listens on: the
    test sends nothing off this machine (issue 63: it named 10.255.255.1, which process 1 then
    tried to reach on a TPU VM, where JAX reads these variables)."""
    _clear(monkeypatch)
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "127.0.0.2,127.0.0.3")
    monkeypatch.setenv("TPU_WORKER_ID", "1")
    monkeypatch.setenv("TPU_HOST_BOUNDS", "1,1,1")
    monkeypatch.setenv("JAX_COORDINATOR_PORT", str(_free_port()))  # JAX's own TPU port: closed
    before = jax.config.jax_cpu_collectives_implementation
    try:
        with pytest.raises(ClusterError) as caught:  # not a TPU VM here: JAX finds no coordinator
            distributed.initialize(timeout_seconds=1)
    finally:
        jax.config.update("jax_cpu_collectives_implementation", before)
    message = str(caught.value)
    assert "\n" not in message
    assert "TPU_WORKER_HOSTNAMES=127.0.0.2,127.0.0.3" in message
    assert "unset TPU_WORKER_HOSTNAMES" in message and "JAXFEED_COORDINATOR" in message


def test_the_timeout_must_be_a_positive_number_of_seconds(monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("JAXFEED_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAXFEED_PROCESS_ID", "1")
    monkeypatch.setenv("JAXFEED_COORDINATOR", "127.0.0.1:1")
    monkeypatch.setenv("JAXFEED_INIT_TIMEOUT", "0")
    with pytest.raises(ValueError, match="JAXFEED_INIT_TIMEOUT must be a number of seconds >= 1"):
        distributed.initialize()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("process_id", "cause"),
    [(0, "0 of the 1 other processes connected"), (1, "ConnectionRefusedError")],
)
def test_a_job_whose_processes_do_not_meet_in_time_is_a_cluster_error(
    monkeypatch, process_id, cause
):
    """Process 0 alone, or a process whose coordinator is not there: one error within the
    timeout, before JAX's client starts (which would abort the process)."""
    _clear(monkeypatch)
    port = _free_port()
    with pytest.raises(ClusterError) as caught:
        distributed.initialize(f"127.0.0.1:{port}", 2, process_id, timeout_seconds=1)
    message = str(caught.value)
    assert f"could not join the 2-process job of coordinator 127.0.0.1:{port}" in message
    assert "within 1 s (JAXFEED_INIT_TIMEOUT)" in message and cause in message
    assert "\n" not in message and not jax.distributed.is_initialized()


@pytest.mark.parametrize(("value", "expected"), [(None, 30), ("7", 7)])
def test_the_heartbeat_timeout_is_30_s_or_jaxfeed_heartbeat_timeout(monkeypatch, value, expected):
    """What JAX is given: a process silent this long makes the others fail (the e2e test of a
    killed process sets it short, so the survivor is not waiting 30 s to exit)."""
    _clear(monkeypatch)
    monkeypatch.delenv("JAXFEED_HEARTBEAT_TIMEOUT", raising=False)
    if value is not None:
        monkeypatch.setenv("JAXFEED_HEARTBEAT_TIMEOUT", value)
    given = {}
    monkeypatch.setattr(distributed, "_reach", lambda *args: None)
    monkeypatch.setattr(jax.distributed, "initialize", lambda *args, **kwargs: given.update(kwargs))
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    before = jax.config.jax_cpu_collectives_implementation
    try:
        assert distributed.initialize("127.0.0.1:1", 2, 1) is True
    finally:
        jax.config.update("jax_cpu_collectives_implementation", before)
    assert given["heartbeat_timeout_seconds"] == expected
    monkeypatch.setenv("JAXFEED_HEARTBEAT_TIMEOUT", "0")
    with pytest.raises(ValueError, match="JAXFEED_HEARTBEAT_TIMEOUT must be a number of seconds"):
        distributed.initialize("127.0.0.1:1", 2, 1)


# ---------------------------------------------------------------------------------- issue 63
@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        (
            "JAXFEED_INIT_TIMEOUT",
            "99999999999999",
            "JAXFEED_INIT_TIMEOUT must be a number of seconds",
        ),
        ("JAXFEED_HEARTBEAT_TIMEOUT", str(2**40), "JAXFEED_HEARTBEAT_TIMEOUT must be a number"),
        ("JAXFEED_COORDINATOR", "127.0.0.1:99999", "port from 1 to 65535"),
        ("JAXFEED_COORDINATOR", "127.0.0.1:0", "port from 1 to 65535"),
    ],
)
def test_an_out_of_range_timeout_or_port_is_a_value_error_naming_it(
    monkeypatch, variable, value, said
):
    """D16: out of range, they crashed process 0 with an OverflowError (exit 1) from the socket
    or time calls, or left it waiting for peers it could never meet."""
    _clear(monkeypatch)
    monkeypatch.setenv("JAXFEED_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAXFEED_PROCESS_ID", "0")
    monkeypatch.setenv("JAXFEED_COORDINATOR", f"127.0.0.1:{_free_port()}")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=said) as caught:
        distributed.initialize()
    assert value in str(caught.value) and "\n" not in str(caught.value)
    assert not jax.distributed.is_initialized()


def test_an_out_of_range_timeout_argument_is_a_value_error_naming_it(monkeypatch):
    _clear(monkeypatch)
    for argument in ("timeout_seconds", "heartbeat_timeout_seconds"):
        with pytest.raises(ValueError, match=f"{argument} must be a number of seconds"):
            distributed.initialize("127.0.0.1:1", 2, 1, **{argument: 10**20})


def test_the_command_refuses_an_out_of_range_timeout_with_exit_2_and_one_line(tmp_path):
    from cli_helpers import jaxfeed

    env = {"JAXFEED_INIT_TIMEOUT": "99999999999999", "JAXFEED_COORDINATOR": "127.0.0.1:1",
           "JAXFEED_NUM_PROCESSES": "2", "JAXFEED_PROCESS_ID": "0"}  # fmt: skip
    done = jaxfeed("train", "--data", "digits", "--out", str(tmp_path / "run"), env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "jaxfeed train: error: JAXFEED_INIT_TIMEOUT must be a number of seconds >= 1 (at most "
        "2147483647), got 99999999999999"
    ]
    assert not (tmp_path / "run").exists()


def _act_as(process_id, port, stopped):
    """The other side of a 2-process job on 127.0.0.1:``port``: it meets the process under test
    as jaxfeed's processes do, then dies (closes) before JAX's job starts; ``stopped`` is set."""
    import socket
    import time

    try:
        if process_id == 1:  # greets process 0, is let go, dies
            deadline = time.monotonic() + 60
            while True:
                try:
                    peer = socket.create_connection(("127.0.0.1", port), timeout=5)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            with peer:
                peer.sendall(b"jaxfeed 1\n")
                assert peer.recv(16) == b"jaxfeed go\n"
        else:  # process 0: meets process 1, lets it go, dies
            with socket.create_server(("127.0.0.1", port)) as server:
                server.settimeout(60)
                conn, _ = server.accept()
                with conn:
                    assert conn.recv(32).startswith(b"jaxfeed 1")
                    conn.sendall(b"jaxfeed go\n")
    finally:
        stopped.set()


@pytest.mark.parametrize("process_id", [0, 1])
def test_a_process_that_dies_after_meeting_the_others_stops_them_with_exit_2_and_one_line(
    process_group, tmp_path, process_id
):
    """D10: process 0's peer greets it and dies before JAX's job starts: JAX's start in process 0
    aborted it (SIGABRT, a C++ stack trace) once JAXFEED_INIT_TIMEOUT had passed. Now it exits
    at once with status 2 and one line naming the process that stopped; so does process 1 when
    process 0 dies so."""
    import os
    import sys
    import threading
    import time

    port = _free_port()
    stopped = threading.Event()
    other = threading.Thread(target=_act_as, args=(1 - process_id, port, stopped), daemon=True)
    other.start()
    env = {**os.environ, "JAXFEED_INIT_TIMEOUT": "60"}
    argv = [sys.executable, "-m", "jaxfeed.cli", "train", "--data", "digits", "--out",
            str(tmp_path / "run"), "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
            "--process-id", str(process_id)]  # fmt: skip
    start = time.monotonic()
    result = process_group.run(argv, timeout=120, env=env)
    took = time.monotonic() - start
    assert stopped.wait(5)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if "jaxfeed" in line or "Check" in line]
    who = "process 1" if process_id == 0 else "process 0 (the coordinator)"
    assert lines == [
        f"jaxfeed: error: could not join the 2-process job of coordinator 127.0.0.1:{port}: {who} "
        "stopped after it met this one, before JAX's job started (its connection closed): this "
        "process stops too (status 2); start every process of the job again"
    ], result.stderr[-3000:]
    assert "Check failure" not in result.stderr
    assert took < 50  # at once, not once JAXFEED_INIT_TIMEOUT (60 s) has passed
