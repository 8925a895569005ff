"""Chat templates as checkpoints carry them, and a folder with a word-level tokenizer and a
``tokenizer_config.json`` that holds one (shared by the ``--chat`` tests)."""

import json

from models.hub.lm_checkpoints import word_tokenizer

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


def checkpoint(folder, template=None, *, bos=False, **extra):
    """A folder with a word-level tokenizer (``bos``: that starts every text with ``<s>``, as
    Llama's) and a tokenizer_config.json (with ``template``)."""
    import tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    tok = word_tokenizer()
    if bos:
        tok.post_processor = tokenizers.processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", 1)]
        )
    tok.save(str(folder / "tokenizer.json"))
    settings = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
                "tokenizer_class": "PreTrainedTokenizerFast", **extra}  # fmt: skip
    if template is not None:
        settings["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return folder
