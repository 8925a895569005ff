"""``jaxfeed.models.lora``: int8 weights keep what a float model would show (issue 63, D11)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from jaxfeed.models import LoRA, from_pretrained
from jaxfeed.models.hub.files import write_safetensors
from jaxfeed.models.lora import quantize_int8
from models.hub.lm_checkpoints import save_tiny

pytest.importorskip("qwix")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_weight_is_not_quantized_into_a_finite_one(bad):
    kernel = jnp.ones((3, 4)).at[1, 2].set(bad)
    with pytest.raises(ValueError, match=r"holds 1 NaN or infinite value: int8 cannot hold them"):
        quantize_int8(kernel)


def test_int8_loading_names_the_layer_whose_weight_is_nan(tmp_path):
    """The float model's logits were NaN, the int8 model's finite and plausible."""
    folder = save_tiny(tmp_path / "llama")
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.1.mlp.up_proj.weight"][3, 5] = np.nan
    write_safetensors(folder / "model.safetensors", tensors)
    with pytest.raises(ValueError, match=r"model.layers.1.mlp.up_proj: its weight holds 1 NaN"):
        from_pretrained(folder, lora=LoRA(rank=2), quantize="int8")
