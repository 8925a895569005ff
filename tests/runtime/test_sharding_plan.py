"""The one sharding plan: ``from_pretrained``'s placements are the Trainer's plan's."""

import jax
import pytest

from jaxfeed.models.hub.weights import plan_shardings
from jaxfeed.train.sharding import ShardingPlan, make_mesh

SHAPES = [
    ("w", (8, 4096), ("embed", "model")),  # a logical name that is also a mesh axis
    ("v", (64, 128), ("vocab", "mlp")),
    ("b", (4096,), None),
    ("s", (16,), ("embed",)),
]


@pytest.mark.parametrize(
    "sharding",
    ["replicate", "fsdp", {"fsdp": True}, {}, {"mlp": "model"}, {"mlp": "model", "fsdp": True}],
)
def test_from_pretrained_places_as_the_trainer_plan(sharding):
    """A dict without rules (``{"fsdp": True}``) used a logical name that is a mesh axis in the
    Trainer's plan but not in ``from_pretrained``'s copy of it."""
    assert len(jax.devices()) == 8
    mesh = make_mesh({"data": 4, "model": 2})
    place = plan_shardings(sharding, mesh)
    plan = ShardingPlan.parse(sharding)
    for name, shape, logical in SHAPES:
        assert place(name, shape, logical).spec == plan.spec(name, shape, logical, mesh), name
