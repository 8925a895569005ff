"""A stack of identical NNX layers stored stacked and run as one ``jax.lax.scan``: the compiled
program holds one layer's code, not one copy per layer, so compile time stays roughly flat in
depth, and the step slices each layer's weights out of the stack (never stacks them).

:class:`Stack` holds ``count`` layers of one graph as one module whose every variable has a
leading ``[count]`` axis (logical axis ``"layers"``), as ``nnx.vmap``/``nnx.scan`` make them and
MaxText keeps them: ``encoder.layers.layer.attention.query.kernel`` is ``[layers, in, out]``.
:func:`run_layers` scans a ``Stack`` over its stacked state (the gradients come back stacked, with
no copy), or runs a list of layers one after the other (layers whose graphs differ, a per-layer
attention window, say). The Hub layout is kept at the boundary: checkpoint rules still name one
layer's tensor (``encoder.layers.3.attention.query.kernel``) and :func:`locate` finds it in a
stack (the variable and the index 3) or in a list.

>>> import jax.numpy as jnp
>>> from flax import nnx
>>> stack = Stack(lambda rngs: nnx.Linear(3, 3, rngs=rngs), 4, rngs=nnx.Rngs(0))
>>> stack.layer.kernel.shape, len(stack)
((4, 3, 3), 4)
>>> x = jnp.ones((2, 3))
>>> scanned = run_layers(stack, x, lambda layer, h, key: layer(h))
>>> looped = run_layers(stack, x, lambda layer, h, key: layer(h), scan=False)
>>> bool(jnp.allclose(scanned, looped, atol=1e-6))
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxfeed.models.attention import KEEP, RESIDUALS, WEIGHTS  # the names remat="attention" keeps
from jaxfeed.runtime.sharding import LAYERS  # a stack's leading axis: kept whole by default

#: What each ``remat`` setting keeps from the forward pass (the rest is recomputed backward):
#: ``"full"`` (or ``True``) keeps only each layer's input; ``"dots"`` also keeps the outputs of
#: matmuls against weights (no batch dimension), so only attention's score matmuls and the
#: elementwise work are recomputed: most of full remat's memory saving for a few percent of time;
#: ``"attention"`` keeps those and the attention weights too (in the values' dtype, see
#: :func:`jaxfeed.models.attention.attend`), so the backward pass recomputes neither the
#: score matmuls nor the softmax, only norms, activations and the hidden layers' dropout masks
#: (the attention's boolean keep mask, :data:`~jaxfeed.models.attention.KEEP`, is kept: drawing
#: it again cost a second pass of random bits).
REMAT_POLICIES: dict[str, Callable | None] = {
    "full": None,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "attention": jax.checkpoint_policies.save_from_both_policies(
        jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
        jax.checkpoint_policies.save_only_these_names(WEIGHTS, KEEP, RESIDUALS),
    ),
}


def remat_policy(remat: bool | str) -> tuple[bool, Callable | None]:
    """``(recompute, policy)`` for a ``remat`` setting: False, True (= ``"full"``) or a name in
    :data:`REMAT_POLICIES`.

    >>> remat_policy(False)
    (False, None)
    >>> remat_policy("full")
    (True, None)
    """
    if remat is False or remat is None:
        return False, None
    name = "full" if remat is True else remat
    if name not in REMAT_POLICIES:
        raise ValueError(
            f"remat={remat!r}: expected True, False or one of {sorted(REMAT_POLICIES)}"
        )
    return True, REMAT_POLICIES[name]


def scan_unroll(scan: bool | int | str) -> int:
    """Layers per scan iteration for a ``scan`` setting: True is 1 (one layer's code, the fastest
    compile), an int ``n`` unrolls ``n`` layers per iteration (XLA can then overlap one layer's
    weights with the previous layer's work; longer compiles), False is 0 (a Python loop).
    ``"auto"`` (the Hub models' default) is 1: on a TPU the loop's compile took minutes (71 s
    against 25 s for BERT-base), and with the weights stored stacked the scan copies nothing on
    either backend.

    >>> scan_unroll(True), scan_unroll(2), scan_unroll(False)
    (1, 2, 0)
    """
    if scan == "auto":
        return 1
    if isinstance(scan, bool):
        return int(scan)
    if not isinstance(scan, int) or scan < 0:
        raise ValueError(
            f"scan={scan!r}: expected True, False, 'auto' or a positive number of layers"
        )
    return scan


class Stack(nnx.Module):
    """``count`` layers made by ``make(rngs)`` (one graph), stored stacked: ``self.layer`` is one
    layer whose variables all have a leading ``[count]`` axis, annotated ``"layers"`` where they
    carry logical axis names. ``len(stack)`` is ``count``; ``stack[i]`` is layer ``i`` as a
    module of its own (a copy: changing it leaves the stack as it was).

    >>> from flax import nnx
    >>> stack = Stack(lambda rngs: nnx.Linear(2, 5, rngs=rngs), 3, rngs=nnx.Rngs(0))
    >>> stack[1].kernel.shape
    (2, 5)
    """

    def __init__(self, make: Callable[[nnx.Rngs], nnx.Module] | None, count: int, *,
                 rngs: nnx.Rngs | None = None, layer: nnx.Module | None = None) -> None:  # fmt: skip
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"a layer stack needs a positive number of layers, got {count!r}")
        self.count = count
        if layer is not None:  # already stacked (Stack.of)
            self.layer = layer
            return

        @nnx.split_rngs(splits=count)
        @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: LAYERS})
        def build(r: nnx.Rngs) -> nnx.Module:
            return make(r)

        self.layer = build(rngs)

    @classmethod
    def of(cls, layers: Sequence[nnx.Module]) -> Stack:
        """The stack of ``layers`` (one graph): their variables stacked, their annotations
        given the leading ``"layers"`` axis."""
        shared = _shared_graph(list(layers))
        if shared is None:
            raise ValueError("layers of different graphs cannot be stacked: keep them in a list")
        graphdef, states = shared
        layer = nnx.merge(graphdef, jax.tree.map(lambda *xs: jnp.stack(xs), *states))
        for _, var in nnx.iter_graph(layer):
            if isinstance(var, nnx.Variable) and var.get_metadata().get("out_sharding"):
                names = tuple(var.get_metadata()["out_sharding"])
                var.set_metadata("out_sharding", (LAYERS, *names))
        return cls(None, len(states), layer=layer)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> nnx.Module:
        if not -self.count <= index < self.count:
            raise IndexError(f"layer {index} of a stack of {self.count}")
        graphdef, state = nnx.split(self.layer)
        return nnx.merge(graphdef, jax.tree.map(lambda x: x[index], state))

    def __iter__(self) -> Iterator[nnx.Module]:
        graphdef, state = nnx.split(self.layer)
        for i in range(self.count):
            yield nnx.merge(graphdef, jax.tree.map(lambda x, i=i: x[i], state))


def stacked_layers(make: Callable[[nnx.Rngs], nnx.Module], count: int,
                   rngs: nnx.Rngs) -> Stack | nnx.List:  # fmt: skip
    """A :class:`Stack` of ``count`` layers (an empty list for none)."""
    return Stack(make, count, rngs=rngs) if count else nnx.List([])


def unstack(stack: Stack) -> nnx.List:
    """The layers of ``stack`` as an ``nnx.List`` of modules of their own (their annotations
    without the ``"layers"`` axis): for layers that must differ (adapters on some of them)."""
    layers = list(stack)
    for layer in layers:
        for _, var in nnx.iter_graph(layer):
            names = (
                var.get_metadata().get("out_sharding") if isinstance(var, nnx.Variable) else None
            )
            if names and next(iter(names)) == LAYERS:
                var.set_metadata("out_sharding", tuple(names)[1:])
    return nnx.List(layers)


def unstack_layers(model: nnx.Module) -> list[str]:
    """Store each :class:`Stack` inside ``model`` as a list of layers, in place (see
    :func:`unstack`); the dotted paths of the stacks converted. The layers then hold weight
    buffers of their own: the layout for decoding on a TPU, where XLA prefetches each layer's
    separate buffers while the layer before it runs (a stack's slices it reads where they lie:
    greedy decoding of a 1.1B Llama at 0.95 of the HBM bound as a list, 0.85 stacked). It needs
    room for a second copy of the layers while it runs: the stack's buffers go once no one else
    holds them.

    >>> class Net(nnx.Module):
    ...     def __init__(self):
    ...         self.layers = Stack(lambda rngs: nnx.Linear(2, 2, rngs=rngs), 3, rngs=nnx.Rngs(0))
    >>> net = Net()
    >>> unstack_layers(net), type(net.layers).__name__, net.layers[2].kernel.shape
    (['layers'], 'List', (2, 2))
    """
    found = stacks(model)
    for where in sorted(found, key=len, reverse=True):  # inner stacks first: paths stay valid
        holder, _, attr = where.rpartition(".")
        parent = locate(model, holder)[1] if holder else model
        layers = unstack(found[where])
        if attr.isdigit():
            parent[int(attr)] = layers
        else:
            setattr(parent, attr, layers)
    return sorted(found)


def locate(model: Any, path: str) -> tuple[str, Any, int | None]:
    """``(the node's own dotted path, the node, the layer index or None)`` of the dotted
    ``path`` naming one layer's module or variable (``"encoder.layers.3.attention.query"``):
    through a :class:`Stack` the number is the index into its stacked variables, through a list
    an item.

    >>> stack = Stack(lambda rngs: nnx.Linear(2, 2, rngs=rngs), 4, rngs=nnx.Rngs(0))
    >>> where, var, index = locate(stack, "2.kernel")
    >>> where, var.shape, index
    ('layer.kernel', (4, 2, 2), 2)
    """
    node, parts, index = model, [], None
    for part in path.split("."):
        if isinstance(node, Stack) and part.isdigit():
            if index is not None:
                raise KeyError(f"{path}: a stack inside a stack")
            index = int(part)
            if index >= node.count:
                raise KeyError(f"{path}: layer {index} of a stack of {node.count}")
            node, part = node.layer, "layer"
        elif part.isdigit():
            node = node[int(part)]
        else:
            if not hasattr(node, part):
                raise KeyError(f"{path}: {type(node).__name__} has no {part!r}")
            node = getattr(node, part)
        parts.append(part)
    return ".".join(parts), node, index


def stack_at(model: Any, path: str) -> str | None:
    """The dotted path of the :class:`Stack` that ``path`` (one layer's module or variable)
    goes through, or None.

    >>> class Net(nnx.Module):
    ...     def __init__(self):
    ...         self.layers = Stack(lambda rngs: nnx.Linear(2, 2, rngs=rngs), 2, rngs=nnx.Rngs(0))
    >>> stack_at(Net(), "layers.1.kernel"), stack_at(Net(), "layers")
    ('layers', None)
    """
    node, parts = model, path.split(".")
    for i, part in enumerate(parts):
        if isinstance(node, Stack) and part.isdigit():
            return ".".join(parts[:i])
        node = node[int(part)] if part.isdigit() else getattr(node, part)
    return None


def stacks(model: Any) -> dict[str, Stack]:
    """The model's layer stacks by dotted path."""
    return {
        ".".join(str(p) for p in path): node
        for path, node in nnx.iter_graph(model)
        if isinstance(node, Stack)
    }


def layer_keys(rngs: nnx.Rngs | None, count: int) -> jax.Array | None:
    """One dropout key per layer from ``rngs`` (None without ``rngs``)."""
    if rngs is None:
        return None
    return jax.random.split(rngs.dropout(), count)


def _shared_graph(layers: Sequence[nnx.Module]) -> tuple[Any, list[Any]] | None:
    """The layers' one graph definition and their states; None when the graphs differ."""
    split = [nnx.split(layer) for layer in layers]
    graphdef = split[0][0]
    if any(g != graphdef for g, _ in split[1:]):
        return None
    return graphdef, [state for _, state in split]


def _rngs(keys: jax.Array | None, i: Any) -> nnx.Rngs | None:
    return None if keys is None else nnx.Rngs(dropout=keys[i])


def _loop(layers: Sequence[nnx.Module], x: Any, call: Callable, keys: Any, recompute: bool,
          policy: Callable | None) -> Any:  # fmt: skip
    for i, layer in enumerate(layers):
        if recompute:
            x = nnx.remat(lambda mod, h, r: call(mod, h, r), policy=policy)(
                layer, x, _rngs(keys, i)
            )
        else:
            x = call(layer, x, _rngs(keys, i))
    return x


def _scan(graphdef: Any, state: Any, x: Any, call: Callable, keys: Any, recompute: bool,
          policy: Callable | None, unroll: int) -> tuple[Any, Any]:  # fmt: skip
    """``call`` over the stacked ``state`` as one scan: each iteration slices one layer. Returns
    the output and the layers' random streams as they advanced (stacked; None without any)."""
    count = jax.tree.leaves(state)[0].shape[0]

    def body(h: Any, inputs: tuple[Any, Any]) -> tuple[Any, Any]:
        layer_state, key = inputs
        layer = nnx.merge(graphdef, layer_state)
        out = call(layer, h, None if key is None else nnx.Rngs(dropout=key))
        streams = nnx.state(layer, nnx.RngState)
        return out, (streams if jax.tree.leaves(streams) else None)

    if recompute:
        body = jax.checkpoint(body, prevent_cse=False, policy=policy)
    return jax.lax.scan(body, x, (state, keys), unroll=min(unroll, count))


def run_layers(layers: Stack | Sequence[nnx.Module], x: Any,
               call: Callable[[nnx.Module, Any, Any], Any], *, rngs: nnx.Rngs | None = None,
               remat: bool | str = False, scan: bool | int | str = True) -> Any:  # fmt: skip
    """``x = call(layer, x, rngs_i)`` for each layer in order. A :class:`Stack` runs as one scan
    over its stacked variables (``scan`` False: a loop over its slices); a list of layers as one
    scan when ``scan`` and they share a graph (their weights stacked inside the step), else as a
    Python loop. ``rngs_i`` is an ``nnx.Rngs`` of that layer's dropout key (None without
    ``rngs``), ``remat`` recomputes each layer in the backward pass (:func:`remat_policy`), an int
    ``scan`` unrolls that many layers per iteration (:func:`scan_unroll`). A stack's layers may
    advance their own random streams (kept after the scan); they change no other state (dropout
    keys come through ``rngs_i``).

    >>> from flax import nnx
    >>> layers = [nnx.Linear(2, 2, rngs=nnx.Rngs(i)) for i in range(3)]
    >>> run_layers(layers, jnp.ones((1, 2)), lambda layer, h, r: layer(h)).shape
    (1, 2)
    """
    recompute, policy = remat_policy(remat)
    unroll = scan_unroll(scan)
    if isinstance(layers, Stack):
        keys = layer_keys(rngs, layers.count)
        graphdef, state = nnx.split(layers.layer)
        if not unroll:
            copies = list(layers)
            x = _loop(copies, x, call, keys, recompute, policy)
            streams = [nnx.state(c, nnx.RngState) for c in copies]
            if jax.tree.leaves(streams[0]):  # the layers' random streams advanced: kept
                nnx.update(layers.layer, jax.tree.map(lambda *xs: jnp.stack(xs), *streams))
            return x
        x, streams = _scan(graphdef, state, x, call, keys, recompute, policy, unroll)
        if streams is not None:  # random streams of the layers (LoRA's dropout) advanced
            nnx.update(layers.layer, streams)
        return x
    layers = list(layers)
    keys = layer_keys(rngs, len(layers))
    shared = _shared_graph(layers) if unroll and len(layers) > 1 else None
    if shared is None:
        return _loop(layers, x, call, keys, recompute, policy)
    graphdef, states = shared
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)
    return _scan(graphdef, stacked, x, call, keys, recompute, policy, unroll)[0]
