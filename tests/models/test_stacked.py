"""Layer stacks stored stacked (``jaxfeed.models.stacked.Stack``): one variable ``[layers, ...]`` per
weight annotated ``"layers"``, found from one layer's path, kept whole by the sharding plan, turned
into a list and back, and layers' random streams (LoRA's dropout) advancing from call to call."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxfeed.models.lora import LoRA, LoRALinear
from jaxfeed.models.nnx import axes
from jaxfeed.models.stacked import Stack, locate, run_layers, stack_at, unstack
from jaxfeed.runtime.sharding import ShardingPlan, make_mesh


def _linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(8, 8, kernel_metadata=axes("embed", "mlp"), bias_metadata=axes("mlp"),
                      rngs=rngs)  # fmt: skip


class Net(nnx.Module):
    def __init__(self, count: int = 16) -> None:
        self.layers = Stack(_linear, count, rngs=nnx.Rngs(0))


def test_variables_are_stacked_and_annotated():
    net = Net(4)
    kernel = net.layers.layer.kernel
    assert kernel.get_value().shape == (4, 8, 8)
    assert kernel.get_metadata()["out_sharding"] == ("layers", "embed", "mlp")
    assert not np.array_equal(np.asarray(kernel[...][0]), np.asarray(kernel[...][1]))


def test_locate_finds_one_layer_in_a_stack_and_in_a_list():
    net = Net(4)
    assert locate(net, "layers.3.kernel")[0::2] == ("layers.layer.kernel", 3)
    assert stack_at(net, "layers.3.kernel") == "layers"
    with pytest.raises(KeyError, match="layer 4 of a stack of 4"):
        locate(net, "layers.4.kernel")
    kernel = np.asarray(net.layers.layer.kernel[...])
    net.layers = unstack(net.layers)
    where, var, index = locate(net, "layers.3.kernel")
    assert (where, index) == ("layers.3.kernel", None)
    np.testing.assert_array_equal(np.asarray(var[...]), kernel[3])
    assert var.get_metadata()["out_sharding"] == ("embed", "mlp")
    again = Stack.of(list(net.layers))
    np.testing.assert_array_equal(np.asarray(again.layer.kernel[...]), kernel)
    assert again.layer.kernel.get_metadata()["out_sharding"] == ("layers", "embed", "mlp")


def test_fsdp_never_splits_the_layers_axis_unless_a_rule_says_so():
    mesh = make_mesh({"data": 8})
    var = Net(16).layers.layer.kernel
    logical = var.get_metadata()["out_sharding"]
    spec = ShardingPlan.parse("fsdp").spec("k", (128, 64, 8), logical, mesh)
    assert spec == jax.sharding.PartitionSpec(None, "data")  # the largest free axis, not layers
    whole = ShardingPlan.parse("fsdp").spec("k", (128, 3, 33), logical, mesh)
    assert whole == jax.sharding.PartitionSpec()  # only the layers axis divides: kept whole
    ruled = ShardingPlan.parse({"layers": "data"}).spec("k", (128, 3, 33), logical, mesh)
    assert ruled == jax.sharding.PartitionSpec("data")


def test_stacked_random_streams_advance_from_call_to_call():
    """LoRA's dropout keeps a random stream per layer: inside the scan each layer draws from its
    own, and the streams come back advanced, so the next call drops other inputs."""

    def make(rngs: nnx.Rngs) -> nnx.Module:
        return _linear(rngs)

    stack = Stack(make, 3, rngs=nnx.Rngs(0))
    layer = LoRALinear(stack.layer, LoRA(rank=2, dropout=0.5), key=jax.random.key(1))
    layer.lora_b.set_value(jnp.ones_like(layer.lora_b[...]))
    stack.layer = layer
    x = jnp.ones((4, 8))
    for scan in (True, False):
        first = run_layers(stack, x, lambda m, h, r: m(h), scan=scan)
        second = run_layers(stack, x, lambda m, h, r: m(h), scan=scan)
        assert not np.allclose(np.asarray(first), np.asarray(second))
    assert layer.dropout.rngs.count[...].tolist() == [4, 4, 4]
