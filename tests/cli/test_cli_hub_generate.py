"""``jaxfeed generate FOLDER PROMPT`` on a Hub-format causal LM checkpoint (no run): the library's
continuation, printed; a prompt too long for the context is one line, exit 2."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from cli_helpers import run_main
from jaxfeed.models import from_pretrained
from jaxfeed.text import generate
from models.hub.lm_checkpoints import save_checkpoint, word_tokenizer


def test_generate_from_a_hub_folder(tmp_path, capsys):
    folder = tmp_path / "tiny-llama"
    save_checkpoint("llama", folder)
    word_tokenizer().save(str(folder / "tokenizer.json"))
    prompts = ["t5 t17 t33", "t40 t41"]
    status, out, err = run_main(capsys, "generate", str(folder), *prompts, "--temperature", "0",
                                "--max-new-tokens", "6", "--json")  # fmt: skip
    assert status == 0, err
    expected = generate(from_pretrained(folder), word_tokenizer(), prompts, 6, temperature=0)
    assert [row["text"] for row in json.loads(out)] == expected
    assert all(len(text.split()) == 6 for text in expected)
    status, _, err = run_main(capsys, "generate", str(folder), "t5", "--max-new-tokens", "200")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "max_new_tokens=200 is more than the 127 tokens left" in err
