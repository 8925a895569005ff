"""Several processes and hosts on JAX's own multi-controller runtime (``jax.distributed``).

One process per host (or per GPU group) calls :func:`initialize`; JAX's coordinator, collectives
and ``jax.sharding`` do the rest: the ``DataLoader`` reads only this process's rows of each global
batch, and the ``Trainer`` runs one compiled step over the global mesh.
"""

from __future__ import annotations

import os

import jax

ENV = ("JAXFEED_COORDINATOR", "JAXFEED_NUM_PROCESSES", "JAXFEED_PROCESS_ID")


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    heartbeat_timeout_seconds: int = 30,
) -> bool:
    """Join a multi-process JAX job; returns whether one was joined (False: a single process).

    Arguments default to ``JAXFEED_COORDINATOR`` (host:port), ``JAXFEED_NUM_PROCESSES`` and
    ``JAXFEED_PROCESS_ID``; with none of them set and ``num_processes`` not above 1, JAX's own
    cluster detection (SLURM, TPU pods, ...) is tried only when such an environment is present,
    else this is a no-op. A process that stops answering for ``heartbeat_timeout_seconds`` makes
    the others fail instead of waiting forever.

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
    cluster = any(
        k in os.environ for k in ("SLURM_JOB_ID", "TPU_WORKER_HOSTNAMES", "OMPI_COMM_WORLD_SIZE")
    )
    if not explicit and not cluster:
        return False
    if explicit:
        if coordinator_address is None or num_processes is None or process_id is None:
            raise ValueError(
                "a multi-process run needs the coordinator address (host:port), the number of processes and "
                "this process's id (flags or JAXFEED_COORDINATOR, JAXFEED_NUM_PROCESSES, JAXFEED_PROCESS_ID)"
            )
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process id {process_id} is outside [0, {num_processes})")
    jax.config.update(
        "jax_cpu_collectives_implementation", "gloo"
    )  # CPU collectives across processes
    jax.distributed.initialize(
        coordinator_address,
        num_processes,
        process_id,
        heartbeat_timeout_seconds=heartbeat_timeout_seconds,
    )
    return True


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
