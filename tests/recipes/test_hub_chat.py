"""``--chat``: a checkpoint's chat template rendered as ``transformers``' ``apply_chat_template``
renders it (one user message, the generation prompt, the special tokens by name), in jinja2's
sandbox; a checkpoint without one, and a template that fails to render, are one clear error, and
so is one that passes a bound (its output, memory or time: rendered in a process of its own)."""

import re
import time

import pytest

from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.serving import hub_generate
from jaxfeed.recipes.serving.hub_generate import TEMPLATE_FILE, chat_prompts, chat_template
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


BOUNDS = {  # a template that renders too much, allocates too much at once, or never ends
    "long": ("{% for i in range(100000) %}{% for j in range(1000) %}x{% endfor %}{% endfor %}",
             r"renders more than 1,000,000 characters for prompt 1"),
    "repeat": ("{{ 'x' * 10**10 }}", "needs more than 1 GiB of memory to render"),
    "ljust": ("{{ messages[0]['content'].ljust(10**10) }}", "needs more than 1 GiB of memory"),
    "doubling": ("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
                 "needs more than 1 GiB of memory|took more than 1 s"),  # which first: the load
    "loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
              r"took more than 1 s to render \(a loop that runs too long\?\)"),
}  # fmt: skip


def test_a_template_gets_bounded_time_memory_and_output(tmp_path, monkeypatch):
    for name, (template, message) in BOUNDS.items():
        # the time bound short for the endless loop; for the others, long enough that their own
        # bound is met first on a loaded machine (the 1M characters took over 1 s at load 11)
        monkeypatch.setattr(hub_generate, "RENDER_SECONDS", 1.0 if name == "loops" else 5.0)
        if name == "long":  # the first prompt renders within bounds: the second is named
            template = "{% if messages[0]['content'] == 'b' %}" + template + "{% endif %}"
        folder = checkpoint(tmp_path / name, template)
        start = time.monotonic()
        with pytest.raises(ConfigError) as err:
            chat_prompts(folder, name, ["a", "b"])
        text = str(err.value)
        assert text.startswith(f"--chat: the chat template of {name} "), text
        assert re.search(message, text) and "refused; fix the template or drop --chat" in text, text
        assert time.monotonic() - start < 8, name
    folder = checkpoint(tmp_path / "huge", "x" * (hub_generate.MAX_TEMPLATE_CHARS + 1))
    with pytest.raises(ConfigError, match=r"chat template of huge has 1,048,577 characters, more"):
        chat_prompts(folder, "huge", ["a"])
