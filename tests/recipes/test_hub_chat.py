"""``--chat``: a checkpoint's chat template rendered as ``transformers``' ``apply_chat_template``
renders it (one user message, the generation prompt, the special tokens by name), in jinja2's
sandbox; a checkpoint without one, and a template that fails to render, are one clear error."""

import json

import pytest

from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.hub_generate import TEMPLATE_FILE, chat_prompts, chat_template

# ChatML (Qwen2) and a Llama 3 style template: namespace, loop controls, raise_exception, a
# system message by default, {% generation %} blocks
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are helpful.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA3 = (
    "{% set ns = namespace(n=0) %}{{ bos_token }}"
    "{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}"
    "{{ raise_exception('roles are user or assistant') }}{% endif %}"
    "{% set ns.n = ns.n + 1 %}{% if m['content'] == 'skip' %}{% continue %}{% endif %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] | trim }}{% endgeneration %}"
    "{% else %}{{ m['content'] | trim }}{% endif %}{{ eos_token }}{% endfor %}"
    "{% if tools is not none %}TOOLS{% endif %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def checkpoint(folder, template=None, **extra):
    """A folder with a word-level tokenizer and a tokenizer_config.json (with ``template``)."""
    from models.hub.lm_checkpoints import word_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    word_tokenizer().save(str(folder / "tokenizer.json"))
    settings = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
                "tokenizer_class": "PreTrainedTokenizerFast", **extra}  # fmt: skip
    if template is not None:
        settings["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return folder


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
