"""Where arrays go: resolve a device string, a ``jax.Device`` or a ``Sharding`` to a placement."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

Placement = jax.Device | Sharding


def default_device() -> jax.Device:
    """``jax.devices()[0]``; in multi-process JAX, this process's first local device."""
    if jax.process_count() > 1:
        return jax.local_devices()[0]
    return jax.devices()[0]


def device_names(device: jax.Device) -> set[str]:
    """Every spelling that names ``device``: ``"cpu:0"``, ``"CpuDevice(id=0)"``, ``"TFRT_CPU_0"``."""
    names = {str(device), repr(device), f"{device.platform}:{device.id}"}
    if device.platform == "cpu":
        names.add(f"TFRT_CPU_{device.id}")
    if device.platform == "gpu":
        names.add(f"cuda:{device.id}")
    return names


def describe_devices(devices: Sequence[Any] | None = None, processes: int | None = None) -> str:
    """The devices in words, platform and kind: ``1 TPU v5 lite chip``, ``8 CPU devices in 1
    process``, ``2 GPUs (NVIDIA H100 80GB HBM3) in 2 processes`` (default: every device of the job;
    the processes are named when there is more than one device).

    >>> from types import SimpleNamespace as D
    >>> describe_devices([D(platform="tpu", device_kind="TPU v5 lite")], 1)
    '1 TPU v5 lite chip'
    >>> describe_devices([D(platform="cpu", device_kind="cpu")] * 8, 1)
    '8 CPU devices in 1 process'
    >>> describe_devices([D(platform="gpu", device_kind="NVIDIA A100")] * 4, 2)
    '4 GPUs (NVIDIA A100) in 2 processes'
    """
    devices = list(jax.devices() if devices is None else devices)
    processes = jax.process_count() if processes is None else processes
    n = len(devices)
    kinds = sorted({str(d.device_kind) for d in devices})
    kind, platform = " / ".join(kinds), devices[0].platform if devices else "cpu"
    if platform == "tpu":
        unit = "core" if any(k in kind for k in ("TPU v2", "TPU v3")) else "chip"  # 2 per chip
        text = f"{n} {kind if kind.upper().startswith('TPU') else 'TPU ' + kind} {unit}"
    elif platform == "cpu":
        text = f"{n} CPU device"
    else:
        text = f"{n} {platform.upper()}"
    text += "" if n == 1 else "s"
    if platform not in ("tpu", "cpu") and kind:
        text += f" ({kind})"
    if n > 1:
        text += f" in {processes} process{'es' if processes > 1 else ''}"
    return text


def resolve_placement(device: Any) -> Placement:
    """Resolve ``device`` (None, a string, a ``jax.Device`` or a ``Sharding``) to a placement.

    >>> import jax
    >>> from jaxfeed.runtime.devices import resolve_placement
    >>> resolve_placement(str(jax.devices()[0])) == jax.devices()[0]
    True
    """
    if device is None:
        return default_device()
    if isinstance(device, Sharding):
        return device
    if isinstance(device, jax.Device):
        return device
    if isinstance(device, str):
        wanted = device.strip()
        for d in jax.devices():
            if wanted in device_names(d):
                return d
        platform = wanted.lower()
        if platform in ("cpu", "gpu", "cuda", "rocm", "tpu"):
            try:
                devices = jax.devices("gpu" if platform in ("cuda", "rocm") else platform)
            except RuntimeError:
                devices = []
            if devices:
                return (
                    devices[0]
                    if jax.process_count() == 1
                    else jax.local_devices(backend=devices[0].platform)[0]
                )
        # platform:id, as every JAX release can be given it (str(device) was TFRT_CPU_0 before)
        available = ", ".join(repr(f"{d.platform}:{d.id}") for d in jax.devices())
        raise ValueError(f"unknown device {device!r}; available devices: {available}")
    raise ValueError(
        f"device must be a device string, a jax.Device or a jax.sharding.Sharding, got {type(device).__name__}"
    )


def replicated(placement: Placement) -> Placement:
    """The placement for values without a batch dimension: the same devices, no split."""
    if isinstance(placement, jax.Device | SingleDeviceSharding):
        return placement
    if isinstance(placement, NamedSharding):
        return NamedSharding(placement.mesh, PartitionSpec())
    devices = sorted(placement.device_set, key=lambda d: d.id)
    mesh = jax.sharding.Mesh(np.array(devices), ("devices",))
    return NamedSharding(mesh, PartitionSpec())


def batch_divisor(placement: Placement) -> int:
    """How many shards the batch dimension is split into (1 for a single device)."""
    if isinstance(placement, jax.Device):
        return 1
    if isinstance(placement, NamedSharding):
        spec = placement.spec
        if not spec or spec[0] is None:
            return 1
        axes = spec[0] if isinstance(spec[0], tuple) else (spec[0],)
        return int(np.prod([placement.mesh.shape[a] for a in axes]))
    return 1 if placement.is_fully_replicated else len(placement.device_set)


# ---------------------------------------------------------------------------------- transfers
# `jax.device_put` spends ~70 us of Python per call on a small CPU machine, which dominates a
# 128-row batch. jaxlib's `batched_device_put` (what `device_put` ends in) takes ~8 us. We call it
# directly for plain numpy arrays in canonical dtypes and fall back to `jax.device_put` whenever it
# is unavailable or the input is anything else. JAXFEED_PLAIN_DEVICE_PUT=1 turns the fast path off.
_fast_put: Any = None


def _load_fast_put() -> Any:
    global _fast_put
    if _fast_put is None:
        _fast_put = False
        if os.environ.get("JAXFEED_PLAIN_DEVICE_PUT", "") not in ("", "0"):
            return _fast_put
        try:
            from jax._src import core, dtypes  # noqa: PLC0415 (optional: private JAX API)
            from jax._src.lib import xla_client  # noqa: PLC0415 (optional: private JAX API)

            _fast_put = (xla_client.batched_device_put, core.ShapedArray, dtypes.canonicalize_dtype)
        except (ImportError, AttributeError):
            _fast_put = False
    return _fast_put


def backends_initialized() -> bool:
    """Whether JAX has started its backends (after which XLA flags no longer take effect).

    JAX has no public API for this: ``jax._src.xla_bridge.backends_are_initialized`` is used when
    present; without it the answer is ``True`` (the safe side: the caller treats flags set now as
    too late). :func:`private_api_paths` says which path runs.

    >>> isinstance(backends_initialized(), bool)
    True
    """
    probe = _backends_probe()
    return True if probe is None else bool(probe())


def _backends_probe() -> Callable[[], bool] | None:
    try:
        from jax._src import xla_bridge  # noqa: PLC0415 (optional: private JAX API)

        return xla_bridge.backends_are_initialized
    except (ImportError, AttributeError):
        return None


def private_api_paths() -> dict[str, str]:
    """Which path each use of JAX's private API takes on the installed JAX: the private one, or
    its public fallback. A JAX release that moves one shows here (and in its test), not as a
    slowdown or a wrong answer.

    >>> sorted(private_api_paths())
    ['backends_initialized', 'device_put']
    """
    return {
        "device_put": "jaxlib batched_device_put" if _load_fast_put() else "jax.device_put",
        "backends_initialized": "jax._src.xla_bridge" if _backends_probe() else "assumed True",
    }


def _shard_indices(sharding: Sharding, shape: tuple[int, ...]) -> tuple[list, list]:
    key = (sharding, shape)
    hit = _INDEX_CACHE.get(key)
    if hit is None:
        mapping = sharding.addressable_devices_indices_map(shape)
        hit = (list(mapping.keys()), list(mapping.values()))
        if len(_INDEX_CACHE) > 256:
            _INDEX_CACHE.clear()
        _INDEX_CACHE[key] = hit
    return hit


_INDEX_CACHE: dict = {}
_AVALS: dict = {}
_SINGLE: dict = {}


def device_put(
    leaves: list[np.ndarray], placements: list[Placement], copy: bool = False
) -> list[jax.Array]:
    """Move numpy arrays to their placements (a device or a fully addressable sharding).

    ``copy=True`` never lets a CPU array alias the host memory (which the caller will reuse).

    >>> import jax, numpy as np
    >>> from jaxfeed.runtime.devices import device_put
    >>> [x] = device_put([np.ones(3, np.float32)], [jax.devices()[0]])
    >>> x.devices() == {jax.devices()[0]}
    True
    """
    fast = _load_fast_put()
    if fast and (not _PUBLIC_ONLY or _PUBLIC_ONLY.isdisjoint(placements)):  # no hashing per batch
        try:
            return [_put_one(x, p, fast, copy) for x, p in zip(leaves, placements, strict=True)]
        except Exception:
            out = _public_put(leaves, placements, copy)  # bad input raises here: it says why
            # the private path failed where the public one worked (jaxlib's batched_device_put
            # raised bad_function_call for a sharding over a data=4,model=2 mesh): these
            # placements take the public path from now on, the others keep the private one
            _PUBLIC_ONLY.update(placements)
            return out
    return _public_put(leaves, placements, copy)


#: Placements :func:`device_put` puts with ``jax.device_put`` (the private path failed on them).
_PUBLIC_ONLY: set[Placement] = set()


def _public_put(
    leaves: list[np.ndarray], placements: list[Placement], copy: bool
) -> list[jax.Array]:
    if copy:
        return jax.device_put(leaves, placements, may_alias=False)
    return jax.device_put(leaves, placements)


# dtypes that every setting of jax_enable_x64 keeps as they are (checked without asking jax:
# canonicalize_dtype costs ~1 us, a third of putting a 256-row column)
_ALWAYS_CANONICAL = frozenset(
    np.dtype(t)
    for t in ("bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32")
)


def _put_one(x: np.ndarray, placement: Placement, fast: Any, copy: bool = False) -> jax.Array:
    put, shaped_array, canonicalize = fast
    if type(x) is not np.ndarray or (
        x.dtype not in _ALWAYS_CANONICAL and canonicalize(x.dtype) != x.dtype
    ):
        return (
            jax.device_put(x, placement, may_alias=False) if copy else jax.device_put(x, placement)
        )
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    # Avals and single-device shardings are immutable: made once per shape / device (each costs
    # as much as the transfer of a small batch).
    key = (x.shape, x.dtype)
    aval = _AVALS.get(key)
    if aval is None:
        if len(_AVALS) > 1024:
            _AVALS.clear()
        aval = _AVALS[key] = shaped_array(x.shape, x.dtype)
    if isinstance(placement, jax.Device):
        sharding = _SINGLE.get(placement)
        if sharding is None:
            sharding = _SINGLE[placement] = SingleDeviceSharding(placement)
        return put(aval, sharding, [x], [placement], True, copy)
    devices, indices = _shard_indices(placement, x.shape)
    return put(aval, placement, [x[i] for i in indices], devices, True, copy)


def row_placer(
    columns: dict[str, Any], placement: Placement
) -> Callable[[int, int], dict[str, jax.Array]] | None:
    """A function putting rows ``start:stop`` of every column on ``placement``, for batches cut
    from the same columns: checks, avals and sharding done once, not per batch (~1 us a column
    less than :func:`put_tree`). None unless the placement is one device and every column is a
    C-contiguous numpy array in a dtype JAX keeps; use :func:`put_tree` then.

    >>> import jax, numpy as np
    >>> from jaxfeed.runtime.devices import row_placer
    >>> place = row_placer({"x": np.arange(8, dtype=np.int32)}, jax.devices()[0])
    >>> place(2, 5)["x"].tolist()
    [2, 3, 4]
    """
    fast = _load_fast_put()
    if not fast or not isinstance(placement, jax.Device):
        return None
    if not all(
        type(v) is np.ndarray and v.dtype in _ALWAYS_CANONICAL and v.flags.c_contiguous
        for v in columns.values()
    ):
        return None
    put, shaped_array, _ = fast
    sharding = _SINGLE.get(placement)
    if sharding is None:
        sharding = _SINGLE[placement] = SingleDeviceSharding(placement)
    devices = [placement]
    names = list(columns)
    arrays = list(columns.values())
    avals: dict[int, list] = {}

    def place(start: int, stop: int) -> dict[str, jax.Array]:
        n = stop - start
        shapes = avals.get(n)
        if shapes is None:
            shapes = avals[n] = [shaped_array((n, *a.shape[1:]), a.dtype) for a in arrays]
        return {
            k: put(aval, sharding, [a[start:stop]], devices, True, False)
            for k, a, aval in zip(names, arrays, shapes, strict=True)
        }

    return place


def check_divisible(rows: int, placement: Placement) -> None:
    """Raise ``ValueError`` when a batch of ``rows`` cannot be split over ``placement``'s devices."""
    divisor = batch_divisor(placement)
    if divisor > 1 and rows % divisor:
        raise ValueError(
            f"a batch of {rows} rows cannot be split evenly over the {divisor} devices of the "
            f"sharding; use a batch size divisible by {divisor} (or drop the last batch)"
        )


class _Slot:
    """Marks where a device array goes back into the output tree."""


_SLOT = _Slot()


def put_tree(
    tree: dict[str, Any], placement: Placement, batched: bool, copy: bool = False
) -> dict[str, Any]:
    """Move every numpy leaf of a batch dict to ``placement`` in one transfer call.

    Top-level arrays are split along their first (batch) axis when ``batched`` and the placement
    is a sharding; nested leaves (ragged rows, dict values) are replicated. Strings, bytes and None
    stay as they are. In multi-process JAX, a sharding spanning other processes' devices takes this
    process's rows and assembles global arrays with ``jax.make_array_from_process_local_data``.
    """
    if isinstance(placement, jax.Device) and all(type(v) is np.ndarray for v in tree.values()):
        fast = _load_fast_put()  # the common case, a dict of arrays for one device: no tree walk
        if fast:
            try:
                return {k: _put_one(v, placement, fast, copy) for k, v in tree.items()}
            except Exception:
                global _fast_put
                _fast_put = False
    leaves: list[np.ndarray] = []
    where: list[Any] = []
    flat = replicated(placement)
    split = placement if batched else flat
    out = {
        k: _collect(v, leaves, where, split if isinstance(v, np.ndarray) else flat)
        for k, v in tree.items()
    }
    if not leaves:
        return out
    if all(isinstance(w, jax.Device) or w.is_fully_addressable for w in where):
        placed = device_put(leaves, where, copy)
    else:
        placed = [
            jax.make_array_from_process_local_data(w, np.array(x) if copy else x)
            if not w.is_fully_addressable
            else device_put([x], [w], copy)[0]
            for x, w in zip(leaves, where, strict=True)
        ]
    return _fill(out, iter(placed))


def _collect(value: Any, leaves: list, where: list, placement: Any) -> Any:
    if isinstance(value, np.ndarray):
        leaves.append(value)
        where.append(placement)
        return _SLOT
    if isinstance(value, list):
        return [_collect(v, leaves, where, placement) for v in value]
    if isinstance(value, dict):
        return {k: _collect(v, leaves, where, placement) for k, v in value.items()}
    return value


def _fill(value: Any, placed: Any) -> Any:
    if value is _SLOT:
        return next(placed)
    if isinstance(value, list):
        return [_fill(v, placed) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, placed) for k, v in value.items()}
    return value
