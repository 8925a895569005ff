"""``jaxfeed generate FOLDER PROMPT --chat``: the prompt rendered by the checkpoint's chat
template (encoded without adding special tokens, as ``apply_chat_template(tokenize=True)``) and
the reply printed alone; a checkpoint without a template, or one that fails to render, is one
line, exit 2."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from cli_helpers import run_main
from jaxfeed.models import from_pretrained, preprocessor
from jaxfeed.text import generate
from models.hub.chat_templates import CHATML, checkpoint
from models.hub.lm_checkpoints import save_checkpoint


@pytest.fixture(scope="module")
def chat_ckpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hub") / "tiny-chat"
    save_checkpoint("gpt2", folder)  # absolute positions: a second <s> changes the reply
    return checkpoint(folder, "<s>{{ messages[0]['content'] }} t9{% if add_generation_prompt %}"
                              " t10{% endif %}", bos=True)  # fmt: skip


def test_chat_renders_the_template_and_prints_the_reply(chat_ckpt, capsys):
    args = ["--temperature", "0", "--max-new-tokens", "5"]
    status, out, err = run_main(capsys, "generate", str(chat_ckpt), "t5 t6", "--chat", *args)
    assert status == 0, err
    model, tok = from_pretrained(chat_ckpt), preprocessor(chat_ckpt)
    # <s> from the template only: the tokenizer adds nothing more
    expected = generate(model, tok, "<s>t5 t6 t9 t10", 5, temperature=0, add_special_tokens=False)
    assert out == expected + "\n"
    assert expected != generate(model, tok, "t5 t6", 5, temperature=0)
    assert expected != generate(model, tok, "<s>t5 t6 t9 t10", 5, temperature=0)  # <s> <s> t5...
    status, out, err = run_main(capsys, "generate", str(chat_ckpt), "t5 t6", "--chat", "--json",
                                *args)  # fmt: skip
    assert status == 0 and json.loads(out) == [{"prompt": "t5 t6", "text": expected}]


def test_chat_without_a_template_or_with_a_broken_one_is_refused(chat_ckpt, tmp_path, capsys):
    plain = tmp_path / "plain"
    save_checkpoint("llama", plain)
    checkpoint(plain)
    capsys.readouterr()  # transformers' progress bars
    status, _, err = run_main(capsys, "generate", str(plain), "t5", "--chat")
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--chat: {plain} has no chat template" in err
    broken = checkpoint(tmp_path / "broken", CHATML.replace("{% endfor %}", ""))
    save_checkpoint("llama", broken)
    capsys.readouterr()
    status, _, err = run_main(capsys, "generate", str(broken), "t5", "--chat")
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--chat: the chat template of {broken} failed to render: TemplateSyntaxError" in err
