"""The transformers of jaxfeed.models, the next_token loss and token-weighted means, export."""

import functools
import math
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxfeed import DataLoader, Dataset, Packing, Padding, Trainer, export, load_exported
from jaxfeed.models import TransformerClassifier, TransformerLM
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.kinds.registry import kind_of
from jaxfeed.recipes.sources.registry import source_for
from jaxfeed.recipes.train.trainer import RunParts
from jaxfeed.recipes.train.trainer import build_model as build_run_model
from jaxfeed.serve.export import rebuild
from jaxfeed.text import generate, tokenize, train_tokenizer
from jaxfeed.train.generation import compilations
from jaxfeed.train.losses import next_token

SMALL = {"dim": 16, "depth": 2, "num_heads": 2, "max_length": 32}


# XLA's CPU backend at optimisation level 0 (LLVM's), not the suite's 1 (conftest.py), for the
# models' forward passes here: 20 small programs, checked for values to tolerances (1e-5 and up),
# which level 0 compiles about 2.5x faster with the same HLO; values differ from level 1's by
# float rounding (about 1e-6).
_LEVEL_0 = {"xla_backend_optimization_level": 0}


def forward(model, *args, **kwargs):
    """The model (in eval mode: its state is not written back) in one compiled program per
    shape (eager calls compile op by op: slower)."""
    graphdef, state = nnx.split(model)
    return _forward(graphdef, state, *args, **kwargs)


@functools.partial(jax.jit, static_argnums=0, compiler_options=_LEVEL_0)
def _forward(graphdef, state, *args, **kwargs):
    return nnx.merge(graphdef, state)(*args, **kwargs)


@pytest.mark.parametrize(("positions", "pooling"), [("learned", "mean"), ("rotary", "first")])
def test_classifier_padding_changes_nothing(positions, pooling):
    model = TransformerClassifier(40, 3, positions=positions, pooling=pooling, **SMALL,
                                  rngs=nnx.Rngs(0))  # fmt: skip
    model.eval()
    rng = np.random.default_rng(0)
    rows = [rng.integers(1, 40, n) for n in (3, 7, 7)]
    alone = np.stack([np.asarray(forward(model, jnp.asarray(r[None])))[0] for r in rows])
    for left in (False, True):
        ids = np.zeros((3, 9), np.int32)
        mask = np.zeros((3, 9), np.int32)
        for i, r in enumerate(rows):
            where = slice(9 - len(r), 9) if left else slice(0, len(r))
            ids[i, where], mask[i, where] = r, 1
        ids[mask == 0] = 39  # whatever the pad id, padding changes nothing
        padded = np.asarray(forward(model, jnp.asarray(ids), jnp.asarray(mask)))
        np.testing.assert_allclose(padded, alone, atol=1e-5)
    different = np.asarray(forward(model, jnp.asarray(ids), jnp.ones_like(jnp.asarray(mask))))
    assert np.abs(different - alone).max() > 1e-3  # the mask is what keeps padding out


@pytest.mark.parametrize("positions", ["rotary", "learned"])
def test_lm_packed_segments_match_rows_alone(positions):
    lm = TransformerLM(30, positions=positions, **SMALL, rngs=nnx.Rngs(1))
    lm.eval()
    rows = [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12], [13, 14]]
    ds = Dataset.from_dict({"input_ids": rows})
    batch = next(iter(DataLoader(ds, batch_size=2, packing=Packing(length=8))))
    assert int(jnp.max(batch["segment_ids"])) >= 2  # segments really are packed together
    logits = forward(lm, batch["input_ids"], segment_ids=batch["segment_ids"],
                     positions=batch["positions"])  # fmt: skip
    # each row alone (in its own batch row; the zeros after it are later, so a causal model
    # cannot see them): one call
    alone_ids = np.zeros((4, 5), np.int32)
    for i, r in enumerate(rows):
        alone_ids[i, : len(r)] = r
    alone = np.asarray(forward(lm, jnp.asarray(alone_ids)))
    seen = 0
    for b in range(2):
        seg = np.asarray(batch["segment_ids"][b])
        for s in range(1, seg.max() + 1):
            cols = np.flatnonzero(seg == s)
            row = rows.index(np.asarray(batch["input_ids"][b, cols]).tolist())
            np.testing.assert_allclose(logits[b, cols], alone[row, : len(cols)], atol=1e-5)
            seen += len(cols)
    assert seen == 14
    # without segment_ids the rows would see each other: the mask is what matters
    mixed = forward(lm, batch["input_ids"])
    assert float(jnp.abs(mixed - logits).max()) > 1e-3
    # left padding with only an attention_mask: the real tokens are one segment from 0
    ids, mask = jnp.array([[0, 0, 0, 1, 2]]), jnp.array([[0, 0, 0, 1, 1]])
    np.testing.assert_allclose(forward(lm, ids, mask)[0, 3:], alone[0, :2], atol=1e-5)


def _reference_next_token(logits, ids, segments, mask):
    """A plain Python loop: mean over every valid (t, t+1) pair of -log softmax."""
    total, count = 0.0, 0
    logp = np.asarray(jax.nn.log_softmax(logits.astype(np.float64), axis=-1))
    for b in range(ids.shape[0]):
        for t in range(ids.shape[1] - 1):
            target = ids[b, t + 1]
            if not (mask[b, t] and mask[b, t + 1]) or target == -100:
                continue
            if segments[b, t] != segments[b, t + 1] or segments[b, t + 1] == 0:
                continue
            total -= logp[b, t, target]
            count += 1
    return total / count, count


def test_next_token_loss_equals_reference_on_a_packed_batch():
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 11, (3, 9)).astype(np.int32)
    segments = np.array([[1, 1, 1, 2, 2, 2, 2, 0, 0], [1, 1, 2, 2, 3, 3, 3, 3, 3],
                         [1, 1, 1, 1, 1, 1, 0, 0, 0]], np.int32)  # fmt: skip
    mask = (segments > 0).astype(np.int32)
    ids[1, 6] = -100  # a target to ignore (transformers' convention)
    logits = rng.normal(size=(3, 9, 11)).astype(np.float32)
    batch = {"input_ids": jnp.asarray(ids), "segment_ids": jnp.asarray(segments),
             "attention_mask": jnp.asarray(mask)}  # fmt: skip
    objective = next_token("input_ids")
    per_row = np.asarray(objective.per_example(jnp.asarray(logits), batch))
    weight = np.asarray(objective.weight(jnp.asarray(logits), batch))
    expected, count = _reference_next_token(logits, ids, segments, mask)
    assert weight.tolist() == [5.0, 5.0, 5.0] and count == 15
    assert math.isclose(float((per_row * weight).sum() / weight.sum()), expected, rel_tol=1e-5)
    for b in range(3):  # each row's own mean over its tokens
        row, _ = _reference_next_token(logits[b : b + 1], ids[b : b + 1], segments[b : b + 1],
                                       mask[b : b + 1])  # fmt: skip
        assert math.isclose(float(per_row[b]), row, rel_tol=1e-5)


def _trainer_eval(model, batches, **kwargs):
    trainer = Trainer(model, optax.sgd(0.0), verbose=0, **kwargs)
    return trainer.evaluate(batches)


def test_token_losses_are_averaged_over_real_tokens_not_rows():
    """Two batches, one heavily padded: the eval loss is the reference mean over all real pairs,
    and perplexity / token_accuracy are over tokens too (not the mean of the batches' means)."""
    lm = TransformerLM(20, **SMALL, rngs=nnx.Rngs(2))
    rng = np.random.default_rng(4)
    batches, refs = [], []
    for real in (8, 2):  # batch 2 is mostly padding
        ids = rng.integers(1, 20, (2, 8)).astype(np.int32)
        mask = np.zeros((2, 8), np.int32)
        mask[:, :real] = 1
        batches.append({"input_ids": ids, "attention_mask": mask})
    lm.eval()
    total, count, hits = 0.0, 0, 0
    for b in batches:
        logits = np.asarray(
            forward(lm, jnp.asarray(b["input_ids"]), jnp.asarray(b["attention_mask"]))
        )
        mean, n = _reference_next_token(logits, b["input_ids"], b["attention_mask"],
                                        b["attention_mask"])  # fmt: skip
        total, count = total + mean * n, count + n
        for i in range(2):
            for t in range(7):
                if b["attention_mask"][i, t + 1]:
                    hits += int(logits[i, t].argmax() == b["input_ids"][i, t + 1])
        refs.append(mean)
    result = _trainer_eval(lm, batches, loss="next_token", inputs=("input_ids", "attention_mask"))
    assert sorted(result) == ["loss", "perplexity", "token_accuracy"]
    assert math.isclose(result["loss"], total / count, rel_tol=1e-5)
    assert not math.isclose(result["loss"], sum(refs) / 2, rel_tol=1e-3)  # not per batch
    assert math.isclose(result["perplexity"], math.exp(total / count), rel_tol=1e-5)
    assert math.isclose(result["token_accuracy"], hits / count, rel_tol=1e-6)


def test_a_per_token_loss_function_is_averaged_over_real_tokens():
    def per_token(outputs, batch):  # (batch, length): the model's value at each token
        return outputs

    class Echo(nnx.Module):
        def __init__(self):
            self.scale = nnx.Param(jnp.ones(()))

        def __call__(self, x, attention_mask):
            return x.astype(jnp.float32) * self.scale

    x = np.array([[1, 2, 3, 100], [4, 100, 100, 100]], np.int32)
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], np.int32)
    result = _trainer_eval(Echo(), [{"x": x, "attention_mask": mask, "label": np.zeros(2)}],
                           loss=per_token, inputs=("x", "attention_mask"))  # fmt: skip
    assert result["loss"] == pytest.approx((1 + 2 + 3 + 4) / 4)


def test_next_token_names_token_ids_outside_the_vocabulary():
    lm = TransformerLM(10, **SMALL, rngs=nnx.Rngs(0))
    ids = np.array([[1, 2, 3], [4, 57, 6]], np.int32)
    with pytest.raises(  # the input ids are checked first: the id, its column and place
        ValueError,
        match=r"token id 57 in column 'input_ids' \(row 1 of the batch, position 1\) in the "
        r"eval data is outside the model's vocabulary of 10 ids",
    ):
        _trainer_eval(lm, [{"input_ids": ids}], loss="next_token", inputs="input_ids")


def _sentiment(n, seed):
    """Token rows whose label is whether 'good' tokens (1..4) outnumber 'bad' ones (5..8);
    filler tokens 9..29; ragged lengths."""
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for _ in range(n):
        label = int(rng.integers(0, 2))
        length = int(rng.integers(4, 12))
        row = rng.integers(9, 30, length)
        cues = rng.integers(1, 5, 3) if label else rng.integers(5, 9, 3)
        row[rng.choice(length, 3, replace=False)] = cues
        rows.append(row.tolist())
        labels.append(label)
    return Dataset.from_dict({"input_ids": rows, "label": labels})


def test_classifier_and_lm_learn_through_the_trainer():
    train = _sentiment(256, 0)
    model = TransformerClassifier(30, 2, dropout_rate=0.0, **SMALL, rngs=nnx.Rngs(0))
    trainer = Trainer(model, optax.adam(3e-3), inputs=("input_ids", "attention_mask"), verbose=0)
    loader = DataLoader(train, 32, shuffle=True, padding=Padding(lengths=(12,)))
    history = trainer.fit(loader, DataLoader(_sentiment(128, 1), 64, padding=Padding(lengths=(12,))),
                          epochs=6)  # fmt: skip
    assert history[-1]["train_loss"] < 0.5 * history[0]["train_loss"]
    assert history[-1]["eval_accuracy"] >= 0.9


def test_lm_learns_through_the_trainer_and_generates_compiled_once():
    """A corpus where every text runs up the alphabet to 'h' and ends: after training, greedy
    decoding continues a prompt to 'h' and stops at <eos>; one program for every call."""
    texts = Dataset.from_dict({"text": ["abcdefgh"[s:] for s in range(7)] * 150})
    tok = train_tokenizer(texts, "text", vocab_size=262, kind="bpe")
    corpus = tokenize(texts, tok, "text", remove_columns=True)
    lm = TransformerLM(tok.get_vocab_size(), **SMALL, rngs=nnx.Rngs(0))
    columns = ("input_ids", "segment_ids", "positions")  # as Packing writes them
    trainer = Trainer(lm, optax.adam(1e-2), loss="next_token", verbose=0,
                      inputs={c: c for c in columns})  # fmt: skip
    history = trainer.fit(DataLoader(corpus, 8, shuffle=True, packing=Packing(length=32)), epochs=3)
    first, last = history[0], history[-1]
    assert last["train_loss"] < 0.2 * first["train_loss"]
    assert last["train_perplexity"] < 1.3  # every next token is determined within a text
    assert last["train_token_accuracy"] > 0.95

    before = compilations()
    assert generate(lm, tok, ["cde", "ab"], max_new_tokens=12, temperature=0) == ["fgh", "cdefgh"]
    assert generate(lm, tok, "bc", max_new_tokens=12, temperature=0) == "defgh"
    # sampling restricted to one token is greedy; the same seed gives the same text
    assert generate(lm, tok, ["cde", "a"], 12, temperature=1.0, top_k=1, seed=5) == [
        "fgh",
        "bcdefgh",
    ]
    assert generate(lm, tok, ["cde", "a"], 12, temperature=0.7, top_p=1e-3) == ["fgh", "bcdefgh"]
    sampled = generate(lm, tok, ["d", "f"], 12, temperature=3.0, seed=1)
    assert sampled == generate(lm, tok, ["d", "f"], 12, temperature=3.0, seed=1)
    # one program for a batch of 2 and a buffer of 8 + 12, another for the batch of 1
    assert compilations() - before == 2
    with pytest.raises(ValueError, match=r"prompt 1 .* has \d+ tokens; .* context of 32 tokens"):
        generate(lm, tok, ["a", "abcdefgh" * 8], max_new_tokens=4)


def test_transformers_export_with_symbolic_batch_and_length(tmp_path):
    model = TransformerClassifier(50, 3, **SMALL, rngs=nnx.Rngs(0))
    lm = TransformerLM(50, **SMALL, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    for net, name in ((model, "classifier"), (lm, "lm")):
        folder = export(net, tmp_path / name)
        served = load_exported(folder)
        assert [i["shape"] for i in served.inputs] == [[None, None], [None, None]]
        net.eval()
        for batch, length in ((1, 5), (3, 11)):
            ids = rng.integers(1, 50, (batch, length)).astype(np.int32)
            mask = np.ones_like(ids)
            mask[0, length - 2 :] = 0
            np.testing.assert_allclose(served(ids, mask), forward(net, ids, mask), atol=1e-5)
        rebuilt, config = rebuild(folder)
        assert config["model"]["class"] == type(net).__name__
        assert config["model"]["kwargs"] == net.config()
        np.testing.assert_allclose(forward(rebuilt, ids, mask), forward(net, ids, mask), atol=1e-6)
    with pytest.raises(ValueError, match=r"shape \(batch, length\)"):
        served(np.zeros((2, 3, 1), np.int32), np.zeros((2, 3, 1), np.int32))


def test_model_arguments_are_checked():
    with pytest.raises(ValueError, match="pooling must be one of"):
        TransformerClassifier(10, 2, pooling="max", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="positions must be one of"):
        TransformerLM(10, positions="sinusoid", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="multiple of num_heads"):
        TransformerLM(10, dim=10, num_heads=3, rngs=nnx.Rngs(0))
    model = TransformerClassifier(10, 2, **{**SMALL, "max_length": 4}, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="longer than the model's max_length 4"):
        model(jnp.zeros((1, 6), jnp.int32))


def test_classifier_as_a_regressor():
    """num_classes=1 and loss="mse": one value per row against float targets."""
    model = TransformerClassifier(10, 1, **{**SMALL, "depth": 1}, rngs=nnx.Rngs(0))
    ids = np.array([[1, 2, 3], [4, 5, 0]], np.int32)
    batch = {
        "input_ids": ids,
        "attention_mask": (ids > 0).astype(np.int32),
        "y": np.array([0.5, 2.0]),
    }
    result = _trainer_eval(model, [batch], loss="mse", metrics=["mae"], targets="y",
                           inputs=("input_ids", "attention_mask"))  # fmt: skip
    model.eval()
    out = np.asarray(forward(model, jnp.asarray(ids), jnp.asarray(batch["attention_mask"])))
    assert out.shape == (2, 1)
    assert result["loss"] == pytest.approx(float(np.mean((out[:, 0] - batch["y"]) ** 2)), rel=1e-5)
    assert result["mae"] == pytest.approx(float(np.mean(np.abs(out[:, 0] - batch["y"]))), rel=1e-5)


def build_model(config, prep, outputs, seed):
    """The model the command builds for ``config`` and ``prep`` (its kind's and source's)."""
    parts = RunParts(config, prep, kind_of(prep), source_for(config.model_spec), outputs)
    return build_run_model(parts)


def test_cli_registry_builds_the_transformers_by_name():
    prep = SimpleNamespace(kind="text", input_shape=(16,), vocab_size=50, max_length=24)
    small = {"class_path": "transformer", "init_args": {"dim": 8, "depth": 1, "num_heads": 2}}
    # abstract models (nnx.eval_shape): the command's code runs and its initialisers' program
    # is traced, not compiled (about 2 CPU s a model); nothing here reads a weight
    model = nnx.eval_shape(lambda: build_model(RunConfig(model=small), prep, 3, 0))
    assert isinstance(model, TransformerClassifier)
    assert (model.vocab_size, model.num_classes, model.max_length) == (50, 3, 24)
    spec = {"class_path": "transformer_lm", "init_args": {"dim": 8, "depth": 1, "max_length": 8}}
    lm = nnx.eval_shape(lambda: build_model(RunConfig(model=spec), prep, 3, 0))
    assert isinstance(lm, TransformerLM) and lm.config()["dim"] == 8 and lm.max_length == 8
    with pytest.raises(ConfigError, match="--model transformer needs text"):
        build_model(
            RunConfig(model="transformer"), SimpleNamespace(kind="image", input_shape=(8, 8)), 3, 0
        )
    with pytest.raises(ConfigError, match="transformer_lm takes no argument 'nope'"):
        build_model(
            RunConfig(model={"class_path": "transformer_lm", "init_args": {"nope": 1}}), prep, 3, 0
        )
