"""Export any model: StableHLO + safetensors + JSON, served at any batch size, verified on load."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from tests.train.article_models import article_models

from jaxfeed import DataLoader, Dataset, Trainer, export, load_dataset, load_exported
from jaxfeed.models import CNN, MLP
from jaxfeed.serve.export import ExportError, rebuild
from jaxfeed.train import scale_images


class TwoInputs(nnx.Module):
    def __init__(self, *, rngs):
        self.a = nnx.Linear(4, 3, rngs=rngs)
        self.b = nnx.Linear(2, 3, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x, extra):
        return self.drop(self.a(x) + self.b(extra))


def test_article_nnx_model_exports_and_serves_any_batch_size(tmp_path):
    NNXModel, _ = article_models(8, 1)
    model = NNXModel(10, rngs=nnx.Rngs(0))
    x = np.random.default_rng(0).random((5, 8, 8, 1), dtype=np.float32)
    path = export(
        model, tmp_path / "article", example_input=x[:1], extra={"labels": list("abcdefghij")}
    )
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json",
        "model.safetensors",
        "model.stablehlo",
    ]
    served = load_exported(path)
    model.eval()
    for n in (1, 5):
        np.testing.assert_allclose(served(x[:n]), model(x[:n]), rtol=1e-5, atol=1e-5)
    assert served.config["labels"][2] == "c" and served.config["model"]["class"] == "NNXModel"
    assert served.config["inputs"] == [
        {"argument": None, "shape": [None, 8, 8, 1], "dtype": "float32"}
    ]
    fresh = load_exported(path, like=NNXModel(10, rngs=nnx.Rngs(7)))
    fresh.eval()
    np.testing.assert_allclose(fresh(x), model(x), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"must have shape \(batch, 8, 8, 1\), got \(5, 8, 8\)"):
        served(x[..., 0])


def test_trained_models_export_through_the_trainer(tmp_path):
    digits = load_dataset("digits")
    loader = DataLoader(digits["train"], 64)
    batch = next(iter(DataLoader(digits["test"], 16)))
    _, LinenModel = article_models(8, 1)

    def preprocess(b):
        return {**scale_images(b), "image": scale_images(b)["image"][..., None]}

    trainer = Trainer.from_linen(LinenModel(10), optax.adam(1e-3), preprocess=preprocess, verbose=0)
    trainer.fit(loader, epochs=1)
    served = load_exported(export(trainer, tmp_path / "linen"))  # preprocess compiled in
    assert served.config["compiled_preprocess"] == {"compiled": True, "columns": ["image"]}
    np.testing.assert_allclose(served(batch["image"]), trainer.predict(batch), atol=1e-6)
    variables = load_exported(tmp_path / "linen", like=trainer.variables)
    assert set(variables) == {"params", "batch_stats"}

    rng = np.random.default_rng(0)
    data = Dataset.from_dict({"x": rng.normal(size=(32, 4)).astype(np.float32),
                              "b": rng.normal(size=(32, 2)).astype(np.float32),
                              "y": rng.integers(0, 3, 32)})  # fmt: skip
    two = Trainer(
        TwoInputs(rngs=nnx.Rngs(0)),
        optax.adam(1e-2),
        inputs={"x": "x", "extra": "b"},
        targets="y",
        verbose=0,
    )
    two.fit(DataLoader(data, 16), epochs=1)
    served = load_exported(export(two, tmp_path / "two"))
    rows = data.with_format("numpy")[:7]
    unlabelled = {
        "x": jnp.asarray(rows["x"]),
        "b": jnp.asarray(rows["b"]),
    }  # predict needs no targets
    np.testing.assert_allclose(served(x=rows["x"], extra=rows["b"]), two.predict(unlabelled),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_builtin_models_keep_their_registry_entry(tmp_path):
    model = CNN(10, (8, 8, 1), rngs=nnx.Rngs(0))
    path = export(model, tmp_path / "cnn")
    rebuilt, config = rebuild(path)
    assert type(rebuilt) is CNN and config["model"]["kwargs"]["input_shape"] == [8, 8, 1]
    x = np.ones((3, 8, 8, 1), np.float32)
    model.eval()
    np.testing.assert_allclose(rebuilt(x), model(x), rtol=1e-6)
    np.testing.assert_allclose(load_exported(path)(x), model(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ExportError, match="not a built-in one"):
        rebuild(
            export(
                nnx.Linear(2, 2, rngs=nnx.Rngs(0)),
                tmp_path / "lin",
                example_input=np.ones((1, 2), np.float32),
            )
        )


def test_export_never_deletes_user_data_and_follows_the_umask(tmp_path):
    model = MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(0))
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="is not a jaxfeed export: refusing"):
        export(model, user)
    assert (user / "notes.txt").read_text() == "precious"
    (tmp_path / "file").write_text("keep")
    with pytest.raises(FileExistsError):
        export(model, tmp_path / "file")
    assert (tmp_path / "file").read_text() == "keep"
    old = os.umask(0o022)
    try:
        first = export(model, tmp_path / "model")
        second = export(MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(1)), tmp_path / "model")  # replaces
    finally:
        os.umask(old)
    assert first == second and sorted(os.listdir(tmp_path)) == ["file", "mine", "model"]
    assert os.stat(second).st_mode & 0o777 == 0o755
    assert {os.stat(p).st_mode & 0o777 for p in second.iterdir()} == {0o644}
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(
        load_exported(second)(x), MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(1))(x), rtol=1e-6
    )


def test_corrupted_or_malformed_exports_are_refused(tmp_path):
    model = MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(0))
    path = export(model, tmp_path / "m")
    weights = (path / "model.safetensors").read_bytes()
    config = (path / "config.json").read_text()

    flipped = bytearray(weights)
    flipped[-5] ^= 0xFF  # inside the last tensor's data
    (path / "model.safetensors").write_bytes(bytes(flipped))
    with pytest.raises(
        ExportError, match=r"model.safetensors: weight '.*' does not match its recorded checksum"
    ):
        load_exported(path)
    with pytest.raises(ExportError, match="checksum"):
        load_exported(path, like=MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(0)))

    from safetensors.numpy import load, save

    tensors = load(weights)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].astype(np.int32)
    (path / "model.safetensors").write_bytes(save(tensors))
    with pytest.raises(ExportError, match=rf"weight '{name}' is int32"):
        load_exported(path)
    meta = json.loads(config)  # a config rewritten to agree: the function's signature still refuses
    import hashlib

    meta["tensors"][name].update(
        dtype="int32", sha256=hashlib.sha256(tensors[name].tobytes()).hexdigest()
    )
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ExportError, match=rf"weight '{name}' is int32; the model takes float32"):
        load_exported(path)

    (path / "model.safetensors").write_bytes(weights)
    for bad in ("{not json", json.dumps({"format": "jaxfeed-export", "version": 2, "model": "CNN"}),
                json.dumps({**json.loads(config), "tensors": {"x": 1}})):  # fmt: skip
        (path / "config.json").write_text(bad)
        with pytest.raises(ExportError) as err:
            load_exported(path)
        assert "config.json" in str(err.value) and "\n" not in str(err.value)
    (path / "config.json").write_text(config)
    (path / "model.safetensors").write_bytes(weights[:40])
    with pytest.raises(ExportError, match=r"model\.safetensors: not a readable safetensors file"):
        load_exported(path)
    (path / "model.safetensors").write_bytes(weights)
    assert load_exported(path)(jnp.ones((1, 4))).shape == (1, 3)


class Pixels(nnx.Module):
    """A user model on float images; the preprocess below builds them from flat uint8 rows."""

    def __init__(self, *, rngs):
        self.conv = nnx.Conv(1, 4, (3, 3), rngs=rngs)
        self.head = nnx.Linear(4, 3, rngs=rngs)

    def __call__(self, x):
        return self.head(nnx.relu(self.conv(x)).mean(axis=(1, 2)))


def test_a_trainers_preprocess_is_compiled_into_the_export(tmp_path):
    rng = np.random.default_rng(0)
    data = Dataset.from_dict({"image": rng.integers(0, 256, (48, 36), dtype=np.uint8),
                              "gain": rng.uniform(0.5, 2, (48, 1)).astype(np.float32),
                              "label": rng.integers(0, 3, 48).astype(np.int64)})  # fmt: skip
    mean, std = 120.0, 70.0

    def preprocess(b):  # standardised, reshaped and scaled by another column; labels cast
        image = (b["image"].astype(jnp.float32) - mean) / std * b["gain"]
        return {**b, "image": image.reshape(-1, 6, 6, 1), "label": b["label"].astype(jnp.int32)}

    # a jitted preprocess: the export looks into its jaxpr for the columns the model reads
    trainer = Trainer(
        Pixels(rngs=nnx.Rngs(0)), optax.adam(1e-2), preprocess=jax.jit(preprocess), verbose=0
    )
    trainer.fit(DataLoader(data, 16), epochs=2)
    served = load_exported(export(trainer, tmp_path / "pixels"))
    # the model reads two raw columns now: keyword arguments named by them
    assert served.config["compiled_preprocess"] == {"compiled": True, "columns": ["gain", "image"]}
    assert served.inputs == [{"argument": "gain", "shape": [None, 1], "dtype": "float32"},
                             {"argument": "image", "shape": [None, 36], "dtype": "uint8"}]  # fmt: skip
    rows = data.with_format("numpy")[:11]
    raw = {"image": rows["image"], "gain": rows["gain"]}
    want = np.asarray(trainer.predict({**raw, "label": rows["label"]}))
    np.testing.assert_allclose(served(**raw), want, atol=1e-6)
    np.testing.assert_allclose(served(image=raw["image"][:1], gain=raw["gain"][:1]), want[:1],
                               atol=1e-6)  # fmt: skip

    named = load_exported(export(trainer, tmp_path / "named", extra={"labels": ["a", "b", "c"]}))
    labels, scores = named.predict(**raw)  # class names and probabilities
    probabilities = np.exp(want) / np.exp(want).sum(-1, keepdims=True)
    assert labels == [["a", "b", "c"][i] for i in want.argmax(-1)]
    np.testing.assert_allclose(scores, probabilities.max(-1), atol=1e-6)
    with pytest.raises(TypeError, match=r"declares no preprocessing"):
        served.predict(**raw)  # no class names: the outputs only

    # the model alone, on preprocessed inputs, when asked
    bare = load_exported(export(trainer, tmp_path / "bare", compile_preprocess=False))
    assert "compiled_preprocess" not in bare.config
    image = np.asarray(preprocess({**raw, "label": rows["label"]})["image"])
    np.testing.assert_allclose(bare(image), want, atol=1e-6)

    # a Trainer that has seen no batch: a built-in model's input_shape, float32; else it asks
    fresh = Trainer(MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(0)), optax.sgd(0.1), inputs="x",
                    preprocess=lambda b: {**b, "x": b["x"] * 2}, verbose=0)  # fmt: skip
    doubled = load_exported(export(fresh, tmp_path / "fresh"))
    x = np.ones((2, 4), np.float32)
    fresh.model.eval()
    np.testing.assert_allclose(doubled(x), fresh.model(2 * x), atol=1e-6)
    unknown = Trainer(Pixels(rngs=nnx.Rngs(0)), optax.sgd(0.1), verbose=0)
    with pytest.raises(ValueError, match=r"has seen no batch needs example_input="):
        export(unknown, tmp_path / "unknown")

    # a preprocess jax.export cannot serialise is refused, saying which part and what to do
    def host(b):
        x = jax.pure_callback(np.asarray, jax.ShapeDtypeStruct(b["image"].shape, jnp.uint8),
                              b["image"], vmap_method="broadcast_all")  # fmt: skip
        return preprocess({**b, "image": x})

    trainer.core.spec.preprocess = host  # as if the Trainer had been built with it
    with pytest.raises(ValueError, match=r"the Trainer's preprocess cannot be compiled into the "
                       r"export of Pixels .*preprocessing=.*compile_preprocess=False"):  # fmt: skip
        export(trainer, tmp_path / "host")
    assert not (tmp_path / "host").exists()
