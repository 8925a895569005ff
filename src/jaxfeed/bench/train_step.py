"""Train-step speed of the article's CIFAR-10 CNN: jaxfeed's Trainer against hand-written loops.

One CIFAR-shaped batch (128 x 32 x 32 x 3, float32) and AdamW for everyone:

* jaxfeed ``Trainer`` step (``jax.jit`` over the split NNX state, donated buffers);
* a hand-written ``jax.jit`` step on the same CNN (Flax's functional loop), to isolate overhead;
* a hand-written Linen ``jax.jit`` step as in the article (``TrainState`` with ``batch_stats`` and a
  dropout key, ``nn.max_pool``);
* a hand-written NNX ``nnx.jit`` step as in the article (``nnx.Optimizer``, ``nnx.MultiMetric``);
* the article's NNX model through the ``Trainer`` (dropout from the module's own ``nnx.Rngs``),
  next to its fastest hand-written step (split once, ``jax.jit``, donated state);
* PyTorch eager, and ``torch.compile`` when it works here.

Then a whole epoch through the loader (10,000 CIFAR-shaped uint8 rows): the share of the epoch
spent waiting for data.

Then the transformers (:mod:`jaxfeed.bench.transformer_step`): the Trainer's step against a
hand-written ``jax.jit`` step on the same ``TransformerClassifier`` and ``TransformerLM``.

Run: ``python benchmarks/train_step.py [--quick] [--transformers]``; ``python benchmarks/train_step.py --xla-flags``
sweeps XLA's CPU options (:mod:`jaxfeed.bench.xla_flags`).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import optax
from flax import nnx
from flax.training import train_state

from jaxfeed import Array3D, ClassLabel, DataLoader, Dataset, Features, Trainer
from jaxfeed.bench import transformer_step, xla_flags
from jaxfeed.bench._common import machine, save_json
from jaxfeed.bench._steps import BATCH, SHAPE, ms_per_step, torch_cases, trainer_case
from jaxfeed.models import CNN
from jaxfeed.train import scale_images


# ---------------------------------------------------------------------------------- the article's code
class ArticleLinen(nn.Module):
    num_classes: int
    dropout_rate: float = 0.5

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Conv(32, (3, 3))(x)
        x = nn.relu(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
        x = nn.Conv(64, (3, 3))(x)
        x = nn.relu(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(128)(x))
        x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
        return nn.Dense(self.num_classes)(x)


class LinenState(train_state.TrainState):
    batch_stats: Any
    dropout_key: jax.Array


def linen_case(x, y, tx):
    model = ArticleLinen(10)
    params_key, dropout_key = jax.random.split(jax.random.key(0))
    variables = model.init(params_key, x, train=False)
    state = LinenState.create(
        apply_fn=model.apply, params=variables["params"], tx=tx,
        batch_stats=variables["batch_stats"], dropout_key=dropout_key,
    )  # fmt: skip

    @jax.jit
    def train_step(state, x, y):
        dropout_train_key = jax.random.fold_in(state.dropout_key, state.step)

        def loss_fn(params):
            logits, updates = state.apply_fn(
                {"params": params, "batch_stats": state.batch_stats}, x, train=True,
                rngs={"dropout": dropout_train_key}, mutable=["batch_stats"],
            )  # fmt: skip
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
            return loss, (logits, updates)

        (loss, (logits, updates)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        state = state.apply_gradients(grads=grads).replace(batch_stats=updates["batch_stats"])
        return state, loss, (logits.argmax(-1) == y).mean()

    holder = {"state": state}

    def run(n):
        for _ in range(n):
            holder["state"], loss, _ = train_step(holder["state"], x, y)
        jax.block_until_ready(loss)

    return run


class ArticleNNX(nnx.Module):
    def __init__(self, num_classes: int, dropout_rate: float = 0.5, *, rngs: nnx.Rngs) -> None:
        self.conv1 = nnx.Conv(3, 32, kernel_size=(3, 3), rngs=rngs)
        self.bn1 = nnx.BatchNorm(32, momentum=0.9, rngs=rngs)
        self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs)
        self.bn2 = nnx.BatchNorm(64, momentum=0.9, rngs=rngs)
        self.linear1 = nnx.Linear(4096, 128, rngs=rngs)
        self.dropout = nnx.Dropout(dropout_rate, rngs=rngs)
        self.linear2 = nnx.Linear(128, num_classes, rngs=rngs)

    def __call__(self, x):
        x = nn.max_pool(self.bn1(nnx.relu(self.conv1(x))), (2, 2), strides=(2, 2))
        x = nn.max_pool(self.bn2(nnx.relu(self.conv2(x))), (2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))
        return self.linear2(self.dropout(nnx.relu(self.linear1(x))))


def nnx_case(x, y, tx):
    model = ArticleNNX(10, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"))
    model.train()

    @nnx.jit
    def train_step(model, optimizer, metrics, x, y):
        def loss_fn(model):
            logits = model(x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits

        (loss, logits), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
        metrics.update(loss=loss, logits=logits, labels=y)
        optimizer.update(model, grads)
        return loss

    def run(n):
        for _ in range(n):
            loss = train_step(model, optimizer, metrics, x, y)
        jax.block_until_ready(loss)

    return run


def same_model_case(x, y, tx):
    """The functional loop of Flax's performance guide (split once, ``jax.jit``, merge inside) on
    jaxfeed's own CNN: what the Trainer's step costs beyond the model itself."""
    model = CNN(10, input_shape=SHAPE, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))
    key = jax.random.key(0)

    @jax.jit
    def train_step(state, x, y, step):
        model, optimizer = nnx.merge(graphdef, state)
        model.train()

        def loss_fn(model):
            logits = model(x, rngs=nnx.Rngs(dropout=jax.random.fold_in(key, step)))
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    holder = {"state": state, "step": 0}

    def run(n):
        for _ in range(n):
            holder["state"], loss = train_step(holder["state"], x, y, holder["step"])
            holder["step"] += 1
        jax.block_until_ready(loss)

    return run


def jaxfeed_case(x, y, tx, model=None):
    """The Trainer's compiled step (jaxfeed's CNN by default, or ``model``)."""
    model = model if model is not None else CNN(10, input_shape=SHAPE, rngs=nnx.Rngs(0))
    return trainer_case(Trainer(model, tx, verbose=0), {"image": x, "label": y})


def article_functional_case(x, y, tx):
    """The article's NNX model in Flax's functional loop (split once, ``jax.jit``, merge inside,
    donated state): the fastest hand-written step for it; dropout from the module's own Rngs."""
    model = ArticleNNX(10, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))

    def train_step(state, x, y):
        model, optimizer = nnx.merge(graphdef, state)
        model.train()

        def loss_fn(model):
            logits = model(x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    step = jax.jit(train_step, donate_argnums=(0,))
    holder = {"state": state}

    def run(n):
        for _ in range(n):
            holder["state"], loss = step(holder["state"], x, y)
        jax.block_until_ready(loss)

    return run


def epoch_wait(rows: int) -> dict[str, float]:
    """One epoch of Trainer.fit through the DataLoader: the share of time spent waiting for data."""
    rng = np.random.default_rng(0)
    ds = Dataset.from_dict(
        {
            "image": rng.integers(0, 256, (rows, *SHAPE), dtype=np.uint8),
            "label": rng.integers(0, 10, rows),
        },
        features=Features({"image": Array3D(SHAPE, "uint8"), "label": ClassLabel(num_classes=10)}),
    )
    loader = DataLoader(ds, BATCH, shuffle=True, drop_last=True)
    trainer = Trainer(
        CNN(10, input_shape=SHAPE, rngs=nnx.Rngs(0)),
        optax.adamw(1e-3),
        preprocess=scale_images,
        verbose=0,
    )
    trainer.fit(loader, epochs=1)  # compile
    history = trainer.fit(loader, epochs=3)
    last = history[-1]
    return {"epoch_seconds": last["seconds"], "data_wait_fraction": last["data_wait"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--xla-flags",
        action="store_true",
        help="sweep XLA CPU options instead (jaxfeed.bench.xla_flags; --rounds N)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="with --xla-flags")
    parser.add_argument(
        "--transformers",
        action="store_true",
        help="only the transformer classifier and LM (jaxfeed.bench.transformer_step)",
    )
    args = parser.parse_args()
    if args.xla_flags:
        xla_flags.sweep(args.rounds, steps=5, tolerance=1e-4)
        return
    steps, repeats = (3, 1) if args.quick else (10, 5)
    if args.transformers:
        print(f"({machine()}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r})")
        rows = transformer_step.run(steps, repeats)
        print(f"wrote {save_json('train_step_transformers', {'results': rows})}")
        return
    rng = np.random.default_rng(0)
    x_np = rng.random((BATCH, *SHAPE), dtype=np.float32)
    y_np = rng.integers(0, 10, BATCH).astype(np.int32)
    x, y = jax.device_put(x_np), jax.device_put(y_np)
    tx = optax.adamw(1e-3, weight_decay=1e-4)
    print(
        f"Train step, CNN on {BATCH}x{'x'.join(map(str, SHAPE))}, AdamW ({machine()}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r})"
    )
    cases = {
        "jaxfeed Trainer step": jaxfeed_case(x, y, tx),
        "hand-written jax.jit step, same CNN": same_model_case(x, y, tx),
        "hand-written Linen jax.jit step": linen_case(x, y, tx),
        "hand-written NNX nnx.jit step": nnx_case(x, y, tx),
        "jaxfeed Trainer, article NNX model": jaxfeed_case(
            x, y, tx, ArticleNNX(10, rngs=nnx.Rngs(0))
        ),
        "hand-written jax.jit step, article NNX": article_functional_case(x, y, tx),
        **torch_cases(x_np, y_np),
    }
    results = [
        {"name": name, "ms_per_step": ms} for name, ms in ms_per_step(cases, steps, repeats).items()
    ]
    ours = results[0]["ms_per_step"]
    print(f"\n{'implementation':<36}{'ms/step':>10}{'this / jaxfeed':>16}")
    for r in results:
        r["ratio_to_jaxfeed"] = r["ms_per_step"] / ours
        print(f"{r['name']:<36}{r['ms_per_step']:>10.1f}{r['ratio_to_jaxfeed']:>15.2f}x")
    by_name = {r["name"]: r["ms_per_step"] for r in results}
    best_hand = min(
        by_name["hand-written NNX nnx.jit step"], by_name["hand-written jax.jit step, article NNX"]
    )
    article_ratio = by_name["jaxfeed Trainer, article NNX model"] / best_hand
    print(
        f"\narticle's NNXModel: Trainer step / best hand-written step = {article_ratio:.2f} "
        "(<= 1.00: no slower)"
    )
    transformers = transformer_step.run(steps, repeats)
    wait = epoch_wait(2_560 if args.quick else 10_240)
    print(
        f"\nwhole epoch through the loader: {wait['epoch_seconds']:.2f} s, waiting for data {wait['data_wait_fraction']:.1%}"
    )
    print(
        f"wrote {save_json('train_step', {'batch': BATCH, 'shape': SHAPE, 'results': results, 'article_trainer_vs_best_hand_written': article_ratio, 'epoch': wait, 'transformers': transformers, 'xla_flags': os.environ.get('XLA_FLAGS', '')})}"
    )


if __name__ == "__main__":
    main()
