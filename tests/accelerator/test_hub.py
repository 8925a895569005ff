"""Hub checkpoints on the accelerator: an encoder fine-tuned by ``jaxfeed train`` and exported in
the Hub's format, loaded sharded (``fsdp``) onto the chips' mesh, and a causal LM's greedy
``generate`` agreeing with the same model's on CPU (a helper process with JAX_PLATFORMS=cpu)."""

import csv
import json
import os
import random
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from accelerator_helpers import ON_CPU, on, random_checkpoint, save_wordpiece, word_tokenizer
from flax import nnx

from hub_checkpoints import VOCAB
from jaxfeed import Trainer, load_exported
from jaxfeed.cli import main
from jaxfeed.models import from_pretrained
from jaxfeed.text import decode_layout, generate

BERT = {"model_type": "bert", "vocab_size": len(VOCAB), "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 24, "num_labels": 2}  # fmt: skip
LLAMA = {"model_type": "llama", "vocab_size": 97, "bos_token_id": 1, "eos_token_id": 2,
         "pad_token_id": 0, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
         "rms_norm_eps": 1e-6}  # fmt: skip
# f32 matmuls on a TPU run in fewer bf16 passes than on CPU unless asked for full precision
TOLERANCE = 1e-4 if ON_CPU else 2e-2


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hub") / "tiny-bert"
    random_checkpoint(folder, BERT, "sequence-classification")
    save_wordpiece(folder, VOCAB)
    return folder


def ids(batch: int = 8, length: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    tokens = rng.integers(5, len(VOCAB), (batch, length))
    tokens[:, 0] = 2  # [CLS]
    return {"input_ids": tokens.astype(np.int32), "attention_mask": np.ones_like(tokens, np.int32)}


def test_a_hub_encoder_fine_tunes_and_exports(bert, tmp_path, capsys, platform):
    rng, data = random.Random(0), tmp_path / "reviews.csv"
    with open(data, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["review", "stars"])
        for _ in range(128):
            label = rng.choice(["neg", "pos"])
            words = [f"w{rng.randint(20, 44)}" for _ in range(rng.randint(2, 5))]
            words.append(f"w{rng.randint(5, 9) if label == 'pos' else rng.randint(10, 14)}")
            writer.writerow([" ".join(words), label])
    run, hf = tmp_path / "run", tmp_path / "hf"
    assert main(["train", "--data", str(data), "--text-column", "review", "--label-column",
                 "stars", "--model", str(bert), "--batch-size", "16", "--epochs", "2",
                 "--out", str(run)]) == 0  # fmt: skip
    assert main(["export", str(run), "--format", "hf", "--out", str(hf)]) == 0
    capsys.readouterr()
    assert json.loads((hf / "config.json").read_text())["id2label"] == {"0": "neg", "1": "pos"}
    model = from_pretrained(hf)
    batch = ids()
    mine = model(**{k: jnp.asarray(v) for k, v in batch.items()})
    on(platform, mine)
    served = load_exported(run / "model")  # the run's own export, of its best step
    np.testing.assert_allclose(
        np.asarray(served(**batch)), np.asarray(mine), atol=TOLERANCE, rtol=TOLERANCE
    )


def test_fsdp_loads_onto_the_chips_mesh_and_trains(bert, platform):
    whole = from_pretrained(bert)
    model = from_pretrained(bert, sharding="fsdp")
    devices = set(jax.devices())
    for leaf in jax.tree_util.tree_leaves(nnx.state(model)):
        assert set(leaf.devices()) == devices
    batch = {k: jnp.asarray(v) for k, v in ids().items()}
    np.testing.assert_allclose(
        np.asarray(model(**batch)), np.asarray(whole(**batch)), atol=TOLERANCE, rtol=TOLERANCE
    )
    trainer = Trainer(model, optax.adamw(1e-3), inputs={"input_ids": "input_ids",
                      "attention_mask": "attention_mask"}, sharding="fsdp", verbose=0)  # fmt: skip
    labelled = {**ids(), "label": np.arange(8) % 2}
    trainer.fit([labelled] * 2, epochs=1)
    assert np.isfinite(trainer.history[-1]["train_loss"])
    on(platform, trainer.predict(labelled))


CPU_GENERATE = textwrap.dedent(
    """
    import json, sys
    import tokenizers
    from jaxfeed.models import from_pretrained
    from jaxfeed.text import generate
    folder, prompts = sys.argv[1], json.loads(sys.argv[2])
    tok = tokenizers.Tokenizer.from_file(folder + "/tokenizer.json")
    model = from_pretrained(folder, task="causal-lm")
    print(json.dumps(generate(model, tok, prompts, 8, temperature=0)))
    """
)


def test_a_causal_lm_generates_what_it_generates_on_cpu(tmp_path, platform):
    folder = tmp_path / "tiny-llama"
    random_checkpoint(folder, LLAMA, "causal-lm", scale=3.0)
    tok = word_tokenizer(LLAMA["vocab_size"])
    tok.save(str(folder / "tokenizer.json"))
    prompts = ["t5 t17 t33", "t40 t41"]
    model = from_pretrained(folder, task="causal-lm")
    with jax.default_matmul_precision("highest"):  # as CPU computes float32
        texts = generate(model, tok, prompts, 8, temperature=0)
        assert generate(model, tok, prompts, 8, temperature=0) == texts
    assert all(len(t.split()) == 8 for t in texts)
    assert decode_layout(model) == ["layers"]  # on the chip: per-layer buffers, as generate's
    with jax.default_matmul_precision("highest"):
        assert generate(model, tok, prompts, 8, temperature=0) == texts
    helper = subprocess.run(
        [sys.executable, "-c", CPU_GENERATE, str(folder), json.dumps(prompts)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert helper.returncode == 0, helper.stderr[-3000:]
    assert json.loads(helper.stdout.strip().splitlines()[-1]) == texts
