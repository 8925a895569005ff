"""The linear models (``jaxfeed.models.linear``): their features are the same on the host (numpy,
what a fit reads) and on the device (what the trained model computes), images are averaged over
blocks, a bag of n-grams ignores padding and tells apart n-grams of the same tokens in another
order, and both rebuild from their class name (exports, run folders)."""

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxfeed.models.linear import LinearModel, NGramModel, pooled_shape
from jaxfeed.models.registry import model_classes, model_config


def test_a_linear_model_averages_blocks_and_computes_alike_on_host_and_device():
    rng = np.random.default_rng(0)
    model = LinearModel(3, input_shape=(9, 10, 2), pool=3, rngs=nnx.Rngs(0))
    x = rng.random((4, 9, 10, 2)).astype(np.float32)
    host = model.features(x)
    assert isinstance(host, np.ndarray) and host.shape == (4, 3 * 3 * 2)
    expected = x[:, :9, :9].reshape(4, 3, 3, 3, 3, 2).mean(axis=(2, 4)).reshape(4, -1)
    assert np.allclose(host, expected)
    assert np.allclose(np.asarray(model.features(jnp.asarray(x))), host, atol=1e-6)
    w, b = rng.normal(size=(18, 3)), rng.normal(size=3)
    model.set_weights(w, b)
    assert np.allclose(np.asarray(model(jnp.asarray(x))), host @ w + b, atol=1e-5)
    assert pooled_shape((9, 10, 2), 3) == (3, 3, 2) and pooled_shape((5,), 3) == (5,)


def test_a_bag_of_ngrams_ignores_padding_and_word_order_counts():
    model = NGramModel(1000, 2, n=2, buckets=4096, rngs=nnx.Rngs(0))
    ids = np.array([[5, 6, 7, 0, 0], [7, 6, 5, 0, 0], [5, 6, 7, 9, 9]], np.int32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0]], np.int32)
    index, value = model.features(ids, mask)
    device = model.features(jnp.asarray(ids), jnp.asarray(mask))
    assert (np.asarray(device[0]) == index).all() and np.allclose(np.asarray(device[1]), value)
    kept = [set(index[r][value[r] > 0].tolist()) for r in range(3)]
    assert kept[0] == kept[2]  # what lies under the padding takes no part
    assert {5, 6, 7} <= kept[0] and {5, 6, 7} <= kept[1]  # unigrams: the token ids
    assert kept[0] != kept[1]  # the bigrams (5 6), (6 7) against (7 6), (6 5)
    assert np.allclose((value**2).sum(axis=1), 1.0)  # 5 n-grams, each 1/sqrt(5)
    w = np.zeros((4096, 2), np.float32)
    w[list(kept[0] - kept[1]), 1] = 1.0  # the bigrams of the first order only
    model.set_weights(w, [0.0, 0.0])
    logits = np.asarray(model(jnp.asarray(ids), jnp.asarray(mask)))
    assert logits[0, 1] > 0 and logits[1, 1] == 0 and logits[0, 1] == logits[2, 1]


def test_the_linear_models_rebuild_from_their_class_name():
    for model in (
        LinearModel(4, input_shape=(8, 8), pool=2, rngs=nnx.Rngs(0)),
        NGramModel(50, 3, n=3, buckets=128, rngs=nnx.Rngs(0)),
    ):
        saved = model_config(model)
        rebuilt = model_classes()[saved["class"]](**saved["kwargs"], rngs=nnx.Rngs(1))
        assert model_config(rebuilt) == saved
