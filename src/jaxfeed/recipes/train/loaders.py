"""A run's device mesh and its loaders: one device, or batches split over the mesh's data axis.

>>> mesh_of(RunConfig()) is None or mesh_of(RunConfig()).size > 1
True
>>> from jaxfeed import Dataset
>>> from jaxfeed.recipes.kinds.registry import KINDS
>>> prep = Preprocessing("array", ["x"], "y", [2])
>>> ds = Dataset.from_dict({"x": [[0.0, 1.0]] * 20, "y": [0, 1] * 10})
>>> loaders = make_loaders(ds, {"validation": ds, "test": None}, prep, KINDS["array"],
...                        RunConfig(batch_size=8), print)
>>> [len(loader) for loader in loaders[:2]], loaders[2], data_devices(None)
([3, 3], None, 1)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec

from jaxfeed import DataLoader
from jaxfeed.recipes.config import ConfigError, RunConfig, parse_mesh_text
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.kinds.image import Augmented
from jaxfeed.recipes.spec import Preprocessing
from jaxfeed.runtime.sharding import ShardingPlan, data_axis, default_mesh, make_mesh


def mesh_of(config: RunConfig) -> Any:
    """The run's device mesh: ``--mesh``, else one ``data`` axis over every device when there
    are several (or a sharding other than replicate asks for one); None for one device."""
    if config.mesh is not None:
        try:
            return make_mesh(parse_mesh_text(config.mesh))
        except ValueError as err:
            raise ConfigError(f"--mesh {config.mesh}: {err}") from None
    if jax.device_count() > 1 or config.sharding != "replicate":
        return default_mesh()
    return None


def data_devices(mesh: Any) -> int:
    """How many devices a batch is split over (the mesh's data axis; 1 without a mesh)."""
    return mesh.shape[data_axis(mesh)] if mesh is not None and mesh.size > 1 else 1


def unused_axes(mesh: Any, sharding: Any) -> list[str]:
    """The axes of ``mesh`` (of more than one device) that neither the batches (the data axis),
    FSDP nor a sharding rule use: :meth:`jaxfeed.runtime.sharding.ShardingPlan.unused_axes`.

    >>> mesh = make_mesh({"data": -1, "model": 2})
    >>> unused_axes(mesh, "fsdp"), unused_axes(mesh, {"mlp": "model"})
    (['model'], [])
    """
    return ShardingPlan.parse(sharding).unused_axes(mesh)


def make_loaders(
    train: Any,
    held: dict[str, Any],
    prep: Preprocessing,
    kind: Kind,
    config: RunConfig,
    say: Callable,
    mesh: Any = None,
) -> tuple:
    """Loaders for one device, or split over the data axis of the mesh (every device of every
    process by default): the train loader, then one per ``held`` split (``{name: dataset or
    None}``; None stays None), with the options of the inputs' ``kind`` (text: buckets or
    packing; audio: the row transform)."""
    kwargs: dict[str, Any] = {"num_workers": config.num_workers, "transform": prep}
    count = 1
    if mesh is not None and mesh.size > 1:
        axis = data_axis(mesh)
        count = mesh.shape[axis]
        if config.batch_size % count:
            raise ConfigError(
                f"--batch-size {config.batch_size} must be a multiple of the {count} devices"
                + (f" of the mesh's data axis {axis!r}" if len(mesh.shape) > 1 else "")
            )
        kwargs["sharding"] = NamedSharding(mesh, PartitionSpec(axis))
    if train.num_rows < config.batch_size and count > 1:
        raise ConfigError(
            f"--batch-size {config.batch_size} is larger than the {train.num_rows} train rows"
        )
    options = kind.loader_options(prep, True)
    # several devices cannot split a last short batch; a packed one is completed with empty rows
    drop_last = count > 1 and "packing" not in options
    train_kwargs = dict(kwargs)
    if config.augment:  # the train batches only: evaluation sees the images as they are
        train_kwargs["transform"] = Augmented(prep, config.augment)
    train_loader = DataLoader(
        train, config.batch_size, shuffle=True, seed=config.seed, drop_last=drop_last,
        **train_kwargs, **options,
    )  # fmt: skip

    # one eval batch size for every held-out split (the trainer pads to its first eval batch)
    rows = [ds.num_rows for ds in held.values() if ds is not None]
    size = min([config.batch_size, *rows])
    size = max(count, size - size % count)

    def held_loader(name: str, ds: Any) -> Any:
        if ds is None:
            return None
        if ds.num_rows < count:  # not one row per device: the split would evaluate nothing
            raise ConfigError(
                f"the {name} split has {ds.num_rows} rows, fewer than the {count} devices that "
                "each evaluation batch is split over: give it more rows (--val-split) or run "
                "on fewer devices"
            )
        drop = count > 1 and (ds.num_rows % size) % count != 0
        if drop:
            say(
                f"note: the last {ds.num_rows % size} {name} rows do not split over "
                f"{count} devices and are skipped"
            )
        options = kind.held_options(prep, -(-ds.num_rows // size))
        return DataLoader(ds, size, drop_last=drop, **kwargs, **options)

    return (train_loader, *(held_loader(name, ds) for name, ds in held.items()))
