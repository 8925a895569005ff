"""``--chat``: a checkpoint's chat template rendered as ``transformers``' ``apply_chat_template``
renders it (one user message, the generation prompt, the special tokens by name), in jinja2's
sandbox; a checkpoint without one, and a template that fails to render, are one clear error."""

import pytest

from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.hub_generate import TEMPLATE_FILE, chat_prompts, chat_template
from models.hub.chat_templates import CHATML, LLAMA3, checkpoint


@pytest.mark.parametrize("template", [CHATML, LLAMA3], ids=["chatml", "llama3"])
def test_rendered_as_transformers_renders_it(tmp_path, template):
    transformers = pytest.importorskip("transformers")
    folder = checkpoint(tmp_path / "ckpt", template)
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    prompts = ["t5 t6", "  what is t7?  "]
    expected = [
        tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                tokenize=False)
        for p in prompts
    ]  # fmt: skip
    assert chat_prompts(folder, "ckpt", prompts) == expected
    assert expected[0] != "t5 t6"  # the template did something


def test_a_template_file_wins_and_named_templates_take_the_default(tmp_path):
    folder = checkpoint(tmp_path / "ckpt", "{{ 'from the config' }}")
    (folder / TEMPLATE_FILE).write_text("[{{ messages[0]['content'] }}]")
    assert chat_prompts(folder, "ckpt", ["hi"]) == ["[hi]"]
    named = [
        {"name": "tool_use", "template": "tools"},
        {"name": "default", "template": "<{{ eos_token }}>"},
    ]
    folder = checkpoint(tmp_path / "named", named, eos_token={"content": "</s>"})
    assert chat_template(folder, "named") == ("<{{ eos_token }}>", {"bos_token": "<s>",
                                             "eos_token": "</s>", "pad_token": "<pad>"})  # fmt: skip


def test_no_template_and_templates_that_fail_are_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"--chat: plain has no chat template \(no chat_template"):
        chat_prompts(checkpoint(tmp_path / "plain"), "plain", ["hi"])
    bare = tmp_path / "bare"  # no tokenizer_config.json at all
    bare.mkdir()
    with pytest.raises(ConfigError, match="bare has no chat template"):
        chat_prompts(bare, "bare", ["hi"])
    cases = {
        "raise": ("{{ raise_exception('only system roles') }}", "TemplateError: only system roles"),
        "syntax": ("{% for m in messages %}{{ m }}", "TemplateSyntaxError"),
        "undefined": ("{{ messages[0].nothing.deeper }}", "UndefinedError"),
        "escape": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "SecurityError"),
        "mutate": ("{{ messages.append(1) }}", "SecurityError"),  # the immutable sandbox
    }
    for name, (template, message) in cases.items():
        folder = checkpoint(tmp_path / name, template)
        with pytest.raises(ConfigError) as err:
            chat_prompts(folder, name, ["hi"])
        text = str(err.value)
        assert text.startswith(f"--chat: the chat template of {name} failed to render: "), text
        assert message in text and "\n" not in text, text
