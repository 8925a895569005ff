"""Compiled train / eval / predict steps for NNX and Linen models, as pure functions of a state.

Each "core" turns a model and an optax transformation into a pytree ``state`` plus three
functions compiled once with ``jax.jit``: the NNX graph is split once (``nnx.split``) and merged
inside the trace, so no Python graph traversal runs per step, and the state buffers are donated.

A step also adds the batch's metric sums into an accumulator that stays on the device, so the host
reads metrics only when it reports them: ``loss`` (sum of per-example losses), ``correct``,
``count`` and ``first_bad`` (the first global step whose loss was not finite, or -1).
Rows past ``n`` (the padding of a short last batch) are masked out of losses and metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

Batch = dict[str, jax.Array]
LossFn = Callable[[jax.Array, jax.Array], jax.Array]


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Per-example softmax cross-entropy with integer labels."""
    return optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), labels.astype(jnp.int32)
    )


LOSSES: dict[str, LossFn] = {"cross_entropy": cross_entropy}


def empty_sums() -> dict[str, jax.Array]:
    return {
        "loss": jnp.zeros((), jnp.float32),
        "correct": jnp.zeros((), jnp.int32),
        "count": jnp.zeros((), jnp.int32),
        "first_bad": jnp.full((), -1, jnp.int32),
    }


def _add_sums(sums, per_example, logits, targets, n, step):
    mask = jnp.arange(per_example.shape[0]) < n
    loss = jnp.sum(jnp.where(mask, per_example, 0.0))
    correct = jnp.sum(jnp.where(mask, jnp.argmax(logits, axis=-1) == targets, False))
    bad = ~jnp.isfinite(loss)
    return {
        "loss": sums["loss"] + loss,
        "correct": sums["correct"] + correct.astype(jnp.int32),
        "count": sums["count"] + n,
        "first_bad": jnp.where((sums["first_bad"] < 0) & bad, step, sums["first_bad"]),
    }


class NNXCore:
    """An ``nnx.Module`` and an ``nnx.Optimizer`` as one split state."""

    def __init__(self, model: Any, tx: optax.GradientTransformation, loss: LossFn, preprocess: Callable,
                 inputs: str, targets: str, seed: int) -> None:  # fmt: skip
        from flax import nnx

        self.model = model
        self.optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
        self.graphdef, self.state = nnx.split((model, self.optimizer))
        graphdef = self.graphdef
        base_key = jax.random.key(seed)

        def train_step(state, sums, batch, n, step):
            model, optimizer = nnx.merge(graphdef, state)
            model.train()
            batch = preprocess(batch)
            x, y = batch[inputs], batch[targets]
            key = jax.random.fold_in(base_key, step)

            def loss_fn(model):
                logits = model(x, rngs=nnx.Rngs(dropout=key))
                per_example = loss(logits, y)
                mask = jnp.arange(per_example.shape[0]) < n
                return jnp.sum(jnp.where(mask, per_example, 0.0)) / jnp.maximum(n, 1), (
                    logits,
                    per_example,
                )

            (_, (logits, per_example)), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
            optimizer.update(model, grads)
            return nnx.state((model, optimizer)), _add_sums(sums, per_example, logits, y, n, step)

        def eval_step(state, sums, batch, n):
            model, _ = nnx.merge(graphdef, state)
            model.eval()
            batch = preprocess(batch)
            logits = model(batch[inputs])
            return _add_sums(sums, loss(logits, batch[targets]), logits, batch[targets], n, -1)

        def predict_step(state, batch):
            model, _ = nnx.merge(graphdef, state)
            model.eval()
            return model(preprocess(batch)[inputs])

        self.train_step = jax.jit(train_step, donate_argnums=(0, 1))
        self.eval_step = jax.jit(eval_step, donate_argnums=(1,))
        self.predict_step = jax.jit(predict_step)

    def write_back(self) -> None:
        """Put the trained state into the user's model and optimizer objects (copies, so the next
        donated step cannot invalidate them)."""
        from flax import nnx

        nnx.update((self.model, self.optimizer), jax.tree.map(jnp.copy, self.state))

    def params(self) -> Any:
        from flax import nnx

        return nnx.state(self.model, nnx.Param)


class LinenCore:
    """A Linen module with ``params``, optional ``batch_stats`` and an optax state, as the article
    keeps them in a ``TrainState`` (the dropout key is derived from the seed and the step)."""

    def __init__(self, module: Any, variables: dict, tx: optax.GradientTransformation, loss: LossFn,
                 preprocess: Callable, inputs: str, targets: str, seed: int) -> None:  # fmt: skip
        self.module = module
        params = variables["params"]
        self.state = {
            "params": params,
            "batch_stats": variables.get("batch_stats", {}),
            "opt_state": tx.init(params),
        }
        base_key = jax.random.key(seed)

        def apply(state, x, train, key=None):
            variables = {"params": state["params"]}
            if state["batch_stats"]:
                variables["batch_stats"] = state["batch_stats"]
            if not train:
                return module.apply(variables, x, train=False), state["batch_stats"]
            out, updates = module.apply(
                variables, x, train=True, rngs={"dropout": key}, mutable=["batch_stats"]
            )
            return out, updates.get("batch_stats", state["batch_stats"])

        def train_step(state, sums, batch, n, step):
            batch = preprocess(batch)
            x, y = batch[inputs], batch[targets]
            key = jax.random.fold_in(base_key, step)

            def loss_fn(params):
                logits, batch_stats = apply({**state, "params": params}, x, True, key)
                per_example = loss(logits, y)
                mask = jnp.arange(per_example.shape[0]) < n
                mean = jnp.sum(jnp.where(mask, per_example, 0.0)) / jnp.maximum(n, 1)
                return mean, (logits, per_example, batch_stats)

            (_, (logits, per_example, batch_stats)), grads = jax.value_and_grad(
                loss_fn, has_aux=True
            )(state["params"])
            updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
            new = {
                "params": optax.apply_updates(state["params"], updates),
                "batch_stats": batch_stats,
                "opt_state": opt_state,
            }
            return new, _add_sums(sums, per_example, logits, y, n, step)

        def eval_step(state, sums, batch, n):
            batch = preprocess(batch)
            logits, _ = apply(state, batch[inputs], False)
            return _add_sums(sums, loss(logits, batch[targets]), logits, batch[targets], n, -1)

        def predict_step(state, batch):
            return apply(state, preprocess(batch)[inputs], False)[0]

        self.train_step = jax.jit(train_step, donate_argnums=(0, 1))
        self.eval_step = jax.jit(eval_step, donate_argnums=(1,))
        self.predict_step = jax.jit(predict_step)

    def write_back(self) -> None:
        pass  # Linen modules hold no state: read ``trainer.variables``

    def params(self) -> Any:
        return self.state["params"]
