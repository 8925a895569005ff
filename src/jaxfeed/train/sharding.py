"""The trainer's sharding names, kept at their old path: the plan, its grammar and the meshes
live in :mod:`jaxfeed.runtime.sharding` (where ``models`` can use them too).

>>> from jaxfeed.train.sharding import ShardingPlan
>>> ShardingPlan.parse("fsdp").fsdp
True
"""

from jaxfeed.runtime.sharding import (
    DATA_AXIS,
    FSDP_MIN_SIZE,
    Leaf,
    ShardingError,
    ShardingPlan,
    auto_mesh,
    bytes_per_device,
    data_axis,
    default_mesh,
    make_mesh,
    state_shardings,
)

__all__ = [
    "DATA_AXIS",
    "FSDP_MIN_SIZE",
    "Leaf",
    "ShardingError",
    "ShardingPlan",
    "auto_mesh",
    "bytes_per_device",
    "data_axis",
    "default_mesh",
    "make_mesh",
    "state_shardings",
]
