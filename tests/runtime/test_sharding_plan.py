"""The one sharding plan (``jaxfeed.runtime.sharding``): one grammar for the Trainer,
``from_pretrained`` and the command's ``--sharding``; ``from_pretrained``'s placements are the
Trainer's plan's; the unused-axis check is the plan's."""

import jax
import pytest

import jaxfeed.train.sharding as train_sharding
from jaxfeed.models.hub.weights import plan_shardings
from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.config.values import parse_sharding
from jaxfeed.runtime import sharding
from jaxfeed.runtime.sharding import Leaf, ShardingError, ShardingPlan, make_mesh, state_shardings
from jaxfeed.runtime.sharding_grammar import parse_rules

SHAPES = [
    ("w", (8, 4096), ("embed", "model")),  # a logical name that is also a mesh axis
    ("v", (64, 128), ("vocab", "mlp")),
    ("b", (4096,), None),
    ("s", (16,), ("embed",)),
]
SHARDINGS = [
    "replicate",
    "fsdp",
    {"fsdp": True},
    {},
    {"mlp": "model"},
    {"mlp": "model", "fsdp": True},
    {"mlp": ["data", "model"], "embed": None},
    {"mlp": []},
]


@pytest.mark.parametrize("sharding", SHARDINGS)
def test_from_pretrained_places_as_the_trainer_plan(sharding):
    """A dict without rules (``{"fsdp": True}``) used a logical name that is a mesh axis in the
    Trainer's plan but not in ``from_pretrained``'s copy of it."""
    assert len(jax.devices()) == 8
    mesh = make_mesh({"data": 4, "model": 2})
    place = plan_shardings(sharding, mesh)
    plan = ShardingPlan.parse(sharding)
    for name, shape, logical in SHAPES:
        assert place(name, shape, logical).spec == plan.spec(name, shape, logical, mesh), name


def test_from_pretrained_takes_a_plan_and_refuses_other_objects():
    mesh = make_mesh({"data": 8})
    plan = ShardingPlan(fsdp=True, fsdp_min_size=8)
    assert plan_shardings(plan, mesh)("w", (16,), None).spec == jax.sharding.PartitionSpec("data")
    assert plan_shardings(None, None) is None
    assert plan_shardings(None, mesh)("w", (16, 4096), None).spec == jax.sharding.PartitionSpec()
    with pytest.raises(TypeError, match="sharding must be a string or a dict of rules"):
        plan_shardings(3, mesh)
    with pytest.raises(ValueError, match="sharding must be 'replicate', 'fsdp' or a dict"):
        plan_shardings("zero3", mesh)


@pytest.mark.parametrize("sharding", SHARDINGS)
@pytest.mark.parametrize("axes", [{"data": -1, "model": 2}, {"data": 8}, {"model": 2, "data": 2, "x": 2}])  # fmt: skip
def test_unused_axes_is_the_command_check(sharding, axes):
    from jaxfeed.recipes.train import unused_axes

    mesh = make_mesh(axes)
    assert ShardingPlan.parse(sharding).unused_axes(mesh) == unused_axes(mesh, sharding)


def test_unused_axes():
    mesh = make_mesh({"data": -1, "model": 2})
    assert ShardingPlan.parse("fsdp").unused_axes(mesh) == ["model"]
    assert ShardingPlan.parse({"mlp": "model"}).unused_axes(mesh) == []
    assert ShardingPlan.parse({"mlp": ["model"], "embed": None}).unused_axes(mesh) == []
    assert ShardingPlan.parse({"embed": None}).unused_axes(make_mesh({"model": 8})) == []


@pytest.mark.parametrize(
    "value",
    ["zero3", 3, ["fsdp"], {"fsdp": "yes"}, {"mlp": 3}, {"mlp": ""}, {"mlp": ["model", ""]},
     {1: "model"}, {"mlp": {"a": 1}}, {"fsdp": None}],
)  # fmt: skip
def test_one_grammar_refuses_the_same_values_everywhere(value):
    with pytest.raises(ShardingError):
        ShardingPlan.parse(value)
    with pytest.raises(ConfigError):
        parse_sharding(value, "--sharding")
    with pytest.raises((ValueError, TypeError)):  # TypeError: neither a string nor a dict
        plan_shardings(value, make_mesh({"data": 8}))


@pytest.mark.parametrize("value", [*SHARDINGS, {"mlp": ("model",)}])
def test_one_grammar_accepts_the_same_values_everywhere(value):
    fsdp, rules = parse_rules(value)
    plan = ShardingPlan.parse(value)
    assert (plan.fsdp, plan.rules) == (fsdp, rules)
    assert parse_sharding(value, "--sharding") == value
    assert plan_shardings(value, make_mesh({"data": 8})) is not None


def test_the_command_keeps_its_messages():
    with pytest.raises(ConfigError, match=r"^x: sharding rule 'fsdp': expected a mesh axis name, a list of them or null \(fsdp: true or false\), got 'yes'$"):  # fmt: skip
        parse_sharding('{"fsdp": "yes"}', "x")
    with pytest.raises(ConfigError, match=r"^x: sharding must be replicate, fsdp or a dict of logical axis rules \(e\.g\. \{\"mlp\": \"model\"\}\), got 'zero3'$"):  # fmt: skip
        parse_sharding("zero3", "x")
    # the first malformed rule is named, in the order given
    with pytest.raises(ConfigError, match=r"sharding rule 'mlp': .* got 3$"):
        parse_sharding({"mlp": 3, "fsdp": "yes"}, "x")


def test_the_old_path_names_the_same_objects():
    for name in train_sharding.__all__:
        assert getattr(train_sharding, name) is getattr(sharding, name), name
    assert train_sharding.FSDP_MIN_SIZE == 4096
    from jaxfeed.train import ShardingError as public

    assert public is ShardingError


def test_a_logical_name_that_is_a_mesh_axis_splits_over_it_without_a_rule():
    """A parameter annotated ``("embed", "model")`` on a mesh with a ``model`` axis splits its
    second dimension over it though no rule names ``model`` (tensor parallelism by the axis'
    name, whatever the rules for other names); a rule for ``model`` wins."""
    mesh = make_mesh({"data": 4, "model": 2})
    P = jax.sharding.PartitionSpec
    cases = [({"mlp": "model"}, P(None, "model")), ({"embed": None}, P(None, "model")),
             ({}, P(None, "model")), ({"fsdp": True}, P("data", "model")), ({"model": None}, P())]  # fmt: skip
    for rules, spec in cases:
        plan = ShardingPlan.parse(rules)
        assert plan.spec("w", (8, 4096), ("embed", "model"), mesh) == spec, rules
    leaves = [Leaf("w", (8, 4096), ("embed", "model")), Leaf("v", (8, 64), ("embed", None))]
    placed = state_shardings(leaves, ShardingPlan.parse({"embed": None}), mesh)
    assert [s.shard_shape(leaf.shape) for s, leaf in zip(placed, leaves, strict=True)] == [
        (8, 2048),
        (8, 64),
    ]
