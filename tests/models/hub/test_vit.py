"""ViT from Hub checkpoints: logits equal to transformers' PyTorch model, the image preprocessor
equal to ViTImageProcessor, the save_pretrained round trip, and sizes the model cannot take."""

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from jaxfeed import Trainer  # noqa: E402
from jaxfeed.models.hub import from_pretrained, preprocessor, save_pretrained  # noqa: E402
from jaxfeed.models.hub.image_processing import ImageProcessor  # noqa: E402

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 37, "image_size": 32, "patch_size": 8}  # fmt: skip
TOL = 1e-4


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A ViTForImageClassification (3 labels) and a bare ViTModel, saved by transformers, their
    weights moved from the small initial ones so that activations are O(1) (the exact GELU then
    differs from its tanh form well above the tolerance)."""
    torch.manual_seed(0)
    config = transformers.ViTConfig(**TINY, num_labels=3)
    root = tmp_path_factory.mktemp("vit")
    models = {}
    for name, cls in (("classifier", transformers.ViTForImageClassification),
                      ("bare", transformers.ViTModel)):  # fmt: skip
        model = cls(config).eval()
        with torch.no_grad():
            for param in model.parameters():
                param.add_(0.2 * torch.randn_like(param))
        model.save_pretrained(root / name)
        models[name] = model
    return root, models


def pixels(batch=3, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, 3, 32, 32)).astype(np.float32)


def torch_out(model, x):
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(x))


def max_diff(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def test_image_classification_logits_equal_pytorch(checkpoints):
    root, models = checkpoints
    model = from_pretrained(root / "classifier")
    assert model.hub_task == "image-classification"
    x = pixels()
    reference = torch_out(models["classifier"], x).logits.numpy()
    logits = model(pixel_values=jnp.asarray(x))
    assert logits.shape == (3, 3) and logits.dtype == jnp.float32
    assert max_diff(logits, reference) < TOL
    # channels-last pixel_values give the same logits
    assert max_diff(model(pixel_values=jnp.asarray(x.transpose(0, 2, 3, 1))), reference) < TOL


def test_bare_encoder_hidden_states_and_pooler_equal_pytorch(checkpoints):
    root, models = checkpoints
    model = from_pretrained(root / "bare")
    assert model.hub_task == "feature-extraction"
    x = pixels(2, seed=1)
    out = torch_out(models["bare"], x)
    hidden = model(pixel_values=jnp.asarray(x))
    assert hidden.shape == (2, 1 + 16, 32)
    assert max_diff(hidden, out.last_hidden_state.numpy()) < TOL
    pooled = model(pixel_values=jnp.asarray(x), output="pooler_output")
    assert max_diff(pooled, out.pooler_output.numpy()) < TOL


def test_bare_checkpoint_gets_a_new_head_and_keeps_its_encoder(checkpoints):
    """Fine-tuning from a ViTModel checkpoint (as google/vit-base-patch16-224-in21k is): the
    encoder is loaded, the classifier is initialised and said so once."""
    root, models = checkpoints
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = from_pretrained(root / "bare", task="image-classification", num_labels=4)
    said = [str(w.message) for w in caught if "newly initialised" in str(w.message)]
    assert len(said) == 1 and "classifier.weight" in said[0]
    x = pixels(2, seed=2)
    hidden = model.vit(jnp.asarray(x), None)
    assert max_diff(hidden, torch_out(models["bare"], x).last_hidden_state.numpy()) < TOL
    assert model(pixel_values=jnp.asarray(x)).shape == (2, 4)


def test_save_pretrained_loads_in_transformers_with_equal_logits(checkpoints, tmp_path):
    root, _ = checkpoints
    model = from_pretrained(root / "classifier")
    # move the weights away from the checkpoint's, so the round trip carries jaxfeed's values
    params = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda a: a * 1.01, params))
    out = save_pretrained(model, tmp_path / "saved")
    reloaded = transformers.ViTForImageClassification.from_pretrained(out).eval()
    x = pixels(2, seed=3)
    assert max_diff(model(pixel_values=jnp.asarray(x)), torch_out(reloaded, x).logits.numpy()) < TOL


def test_every_weight_has_logical_axis_names(checkpoints):
    root, _ = checkpoints
    model = from_pretrained(root / "classifier")
    for path, param in nnx.iter_graph(model):
        if isinstance(param, nnx.Param):
            names = param.get_metadata().get("out_sharding")
            assert names is not None and len(names) == param[...].ndim, path
    assert model.classifier.kernel.get_metadata()["out_sharding"] == ("embed", "classes")


def save_processor(folder, **kwargs):
    processor = transformers.ViTImageProcessorPil(**kwargs)
    processor.save_pretrained(folder)
    return processor


@pytest.mark.parametrize(
    "kwargs",
    [
        {"size": {"height": 32, "width": 32}},
        {
            "size": {"shortest_edge": 41},
            "do_center_crop": True,
            "resample": 3,
            "crop_size": {"height": 32, "width": 32},
            "image_mean": [0.485, 0.456, 0.406],
            "image_std": [0.229, 0.224, 0.225],
        },
    ],
)
def test_preprocessor_equals_vit_image_processor(checkpoints, tmp_path, kwargs):
    root, models = checkpoints
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((root / "classifier" / name).read_bytes())
    reference = save_processor(folder, **kwargs)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in ((48, 40, 3), (29, 35, 3))]
    expected = reference(images, return_tensors="np")["pixel_values"]
    proc = preprocessor(folder)
    assert isinstance(proc, ImageProcessor)
    got = proc(images)["pixel_values"]
    assert got.shape == expected.shape == (2, 3, 32, 32)
    assert max_diff(got, expected) < 1e-5
    # raw images -> jaxfeed -> logits, against transformers' processor -> PyTorch model
    logits = from_pretrained(folder)(pixel_values=jnp.asarray(got))
    assert max_diff(logits, torch_out(models["classifier"], expected).logits.numpy()) < TOL
    assert proc(images, channels_last=True)["pixel_values"].shape == (2, 32, 32, 3)


@pytest.mark.parametrize(
    ("size", "message"),
    [
        (20, r"20x20 images.*20 is not a multiple of config.json's patch_size 8"),
        (24, r"24x24 images.*image_size is 32x32"),
    ],
)
def test_preprocessor_size_the_model_cannot_take_is_refused(checkpoints, tmp_path, size, message):
    root, _ = checkpoints
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_bytes((root / "classifier" / "config.json").read_bytes())
    save_processor(folder, size={"height": size, "width": size})
    with pytest.raises(ValueError, match=r"preprocessor_config.json asks for " + message):
        preprocessor(folder)


def test_missing_preprocessor_config_is_named(checkpoints):
    root, _ = checkpoints
    with pytest.raises(ValueError, match=r"has no preprocessor_config\.json"):
        preprocessor(root / "classifier")


def test_pixel_values_of_another_size_are_refused(checkpoints):
    root, _ = checkpoints
    model = from_pretrained(root / "classifier")
    with pytest.raises(
        ValueError, match=r"32x32 images \(config.json image_size\) with 3 channels"
    ):
        model(pixel_values=jnp.zeros((1, 3, 24, 24)))
    with pytest.raises(ValueError, match=r"smaller than one 8x8 patch"):
        model(pixel_values=jnp.zeros((1, 3, 4, 32)), interpolate_pos_encoding=True)


@pytest.mark.parametrize("hw", [(48, 48), (40, 56), (16, 16)])
def test_interpolated_positions_equal_pytorch(checkpoints, hw):
    """Other image sizes with interpolate_pos_encoding=True: bicubic position embeddings as
    PyTorch's interpolate computes them."""
    root, models = checkpoints
    x = np.random.default_rng(5).standard_normal((2, 3, *hw)).astype(np.float32)
    with torch.no_grad():
        reference = models["classifier"](pixel_values=torch.from_numpy(x),
                                         interpolate_pos_encoding=True).logits.numpy()  # fmt: skip
    logits = from_pretrained(root / "classifier")(pixel_values=jnp.asarray(x),
                                                  interpolate_pos_encoding=True)  # fmt: skip
    assert max_diff(logits, reference) < TOL


def test_config_image_size_not_a_multiple_of_the_patch_is_refused(tmp_path):
    config = {"model_type": "vit", **TINY, "image_size": 30}
    (tmp_path / "config.json").write_text(json.dumps(config))
    from jaxfeed.models.hub.vit import FAMILY

    with pytest.raises(ValueError, match="image_size height 30 is not a multiple of patch_size 8"):
        FAMILY.build(config, task="image-classification", num_labels=2, dtype=None,
                     param_dtype=jnp.float32, rngs=nnx.Rngs(0))  # fmt: skip


def flat_params(model):
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    return {".".join(map(str, k)): np.asarray(v.get_value()) for k, v in flat}


def test_fine_tunes_with_the_trainer_head_only_with_remat(checkpoints):
    root, _ = checkpoints
    plain, model = from_pretrained(root / "classifier"), from_pretrained(root / "classifier")
    before = flat_params(model)
    batch = {"pixel_values": pixels(8, seed=4), "label": np.arange(8) % 3}
    losses = {}
    for name, m, remat in (("plain", plain, False), ("remat", model, True)):
        trainer = Trainer(m, optax.adamw(1e-2), inputs={"pixel_values": "pixel_values"},
                          trainable="head", remat=remat, verbose=0)  # fmt: skip
        for _ in range(3):
            trainer.fit([batch], epochs=trainer.epoch + 1)
        losses[name] = [h["train_loss"] for h in trainer.history]
    assert model.vit.encoder.remat and not plain.vit.encoder.remat
    assert losses["remat"][-1] < losses["remat"][0]
    np.testing.assert_allclose(losses["remat"], losses["plain"], rtol=1e-5)
    after = flat_params(model)
    changed = {k for k in before if not np.array_equal(before[k], after[k])}
    assert changed == {"classifier.kernel", "classifier.bias"}


def test_image_processor_takes_float_grayscale_and_channels_first_images():
    proc = ImageProcessor(size={"height": 16, "width": 16}, do_convert_rgb=True)
    rng = np.random.default_rng(6)
    rgb = rng.integers(0, 256, (24, 20, 3), dtype=np.uint8)
    as_uint8 = proc(rgb)["pixel_values"]
    # float images are resized without quantising: equal to the uint8 path up to its rounding
    as_float = proc(rgb.astype(np.float32))["pixel_values"]
    assert max_diff(as_float, as_uint8) <= 1 / 255 / 0.5 + 1e-6
    # channels-first input, and a grayscale image converted to RGB
    assert max_diff(proc(rgb.transpose(2, 0, 1))["pixel_values"], as_uint8) == 0
    gray = proc(rgb[..., 0])["pixel_values"]
    assert gray.shape == (1, 3, 16, 16) and max_diff(gray[:, 0], gray[:, 2]) == 0
    with pytest.raises(ValueError, match=r"image 1: expected \(height, width"):
        proc([rgb, np.zeros((5, 6, 7, 8))])
