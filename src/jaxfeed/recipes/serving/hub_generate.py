"""``jaxfeed generate hf:ORG/NAME PROMPT`` (or a local folder in the Hub's layout): continuations
by a pretrained causal language model, without a run: ``from_pretrained(..., task="causal-lm")``,
the checkpoint's tokenizer, and :func:`jaxfeed.text.generate` (its ``generation_config.json``
end-of-sequence ids and stop strings included).

``--chat`` (here and on a run fine-tuned from a checkpoint) renders the checkpoint's chat
template (``chat_template.jinja``, else ``chat_template`` in ``tokenizer_config.json``; a Jinja
template, read as text and rendered in jinja2's immutable sandbox as ``transformers``'
``apply_chat_template`` renders it: ``messages=[{"role": "user", "content": PROMPT}]``,
``add_generation_prompt=True``, the special tokens by name) and continues the rendered text.
It renders in a process of its own with bounds on its output, memory and time
(:mod:`jaxfeed.recipes.serving.chat_sandbox`). A checkpoint that names no end-of-sequence token is refused with ``--chat`` unless ``--stop``
is given (:func:`check_reply_ends`): nothing would end the reply.

>>> render_chat("{{ bos_token }}[{{ messages[0]['content'] }}]{% if add_generation_prompt %}>"
...             "{% endif %}", {"bos_token": "<s>"}, "hi", "tiny")
'<s>[hi]>'
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.serving import chat_sandbox
from jaxfeed.recipes.serving.chat_sandbox import MAX_CHARS, MEMORY_BYTES

TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                  "mask_token")  # fmt: skip
RENDER_SECONDS = 10.0  # the longest a chat template may take to render
MAX_TEMPLATE_CHARS = 1 << 20  # a chat template's own size (real ones are a few KB)


JINJA_FLOOR = (3, 1, 6)


def _version(text: str) -> tuple[int, ...]:
    """``"3.1.6"`` as ``(3, 1, 6)`` (a suffix such as ``.dev0`` ignored)."""
    parts = []
    for part in text.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def is_pretrained(source: str) -> bool:
    """Whether ``source`` names a Hub checkpoint (``hf:ORG/NAME``, or a folder whose
    ``config.json`` has a ``model_type`` and which is not a jaxfeed run) rather than a run."""
    if source.startswith("hf:"):
        return True
    folder = Path(source)
    config = folder / "config.json"
    if not config.is_file() or (folder / "checkpoints").exists():
        return False
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "model_type" in data


def _token(value: Any) -> str | None:
    """A special token of ``tokenizer_config.json``: a string, or an ``AddedToken`` dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def chat_template(folder: str | Path, name: str) -> tuple[str, dict[str, str]]:
    """The chat template of the checkpoint in ``folder`` and the special tokens it is rendered
    with; a :class:`ConfigError` naming ``name`` when it has none."""
    folder = Path(folder)
    settings: dict[str, Any] = {}
    from jaxfeed.models.hub.files import read_checkpoint_json, read_checkpoint_text  # import cost

    try:  # every checkpoint file is read through models.hub.files (links outside refused)
        settings = read_checkpoint_json(folder, TOKENIZER_CONFIG, "tokenizer config") or {}
        template = read_checkpoint_text(folder, TEMPLATE_FILE)
    except (OSError, ValueError) as err:
        raise ConfigError(f"--chat: {err}") from None
    if template is None:
        found = settings.get("chat_template")
        if isinstance(found, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in found if isinstance(t, dict)}
            found = named.get("default")
        template = found if isinstance(found, str) else None
    if not template:
        raise ConfigError(
            f"--chat: {name} has no chat template (no chat_template in its {TOKENIZER_CONFIG}, "
            f"no {TEMPLATE_FILE}); drop --chat to continue the prompt as plain text"
        )
    if len(template) > MAX_TEMPLATE_CHARS:
        raise ConfigError(
            f"--chat: the chat template of {name} has {len(template):,} characters, more than "
            f"{MAX_TEMPLATE_CHARS:,}: refused; drop --chat to continue the prompt as plain text"
        )
    specials = {k: t for k in SPECIAL_TOKENS if (t := _token(settings.get(k))) is not None}
    return template, specials


def render_chat(template: str, specials: dict[str, str], prompt: str, name: str) -> str:
    """``template`` rendered for one user message ``prompt`` (:func:`render_chats`)."""
    return render_chats(template, specials, [prompt], name)[0]


def render_chats(template: str, specials: dict[str, str], prompts: list[str],
                 name: str) -> list[str]:  # fmt: skip
    """``template`` rendered for each user message in ``prompts`` with the generation prompt,
    in jinja2's immutable sandbox (nothing in a template reaches Python beyond it), in a
    process of its own (:mod:`jaxfeed.recipes.serving.chat_sandbox`) with bounds: at most
    :data:`~jaxfeed.recipes.serving.chat_sandbox.MAX_CHARS` characters a prompt, 1 GiB of memory and
    :data:`RENDER_SECONDS` seconds; Ctrl-C stops it. A template that fails to render or passes
    a bound is a :class:`ConfigError` naming ``name``."""
    _check_jinja()
    request = {"template": template, "specials": specials, "prompts": list(prompts),
               "max_chars": MAX_CHARS, "seconds": RENDER_SECONDS}  # fmt: skip
    command = [sys.executable, "-P", str(Path(chat_sandbox.__file__))]
    try:  # subprocess.run kills the child on a timeout and on Ctrl-C (KeyboardInterrupt)
        done = subprocess.run(command, input=json.dumps(request).encode("utf-8"),
                              capture_output=True, timeout=RENDER_SECONDS)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"--chat: the chat template of {name} took more than {RENDER_SECONDS:g} s to render "
            "(a loop that runs too long?): refused; fix the template or drop --chat"
        ) from None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        answer = {"error": "crash", "message": "", "prompt": 0}
    if "texts" in answer:
        return answer["texts"]
    what = {
        "render": f"failed to render: {answer['message']}",
        "size": f"renders more than {MAX_CHARS:,} characters for prompt {answer['prompt']}",
        "memory": f"needs more than {MEMORY_BYTES >> 30} GiB of memory to render",
    }.get(answer["error"], f"stopped its rendering process (exit {done.returncode})")
    if answer["error"] != "render":
        what += ": refused; fix the template or drop --chat"
    raise ConfigError(f"--chat: the chat template of {name} {what}")


def _check_jinja() -> None:
    """jinja2 importable, and recent enough (earlier sandboxes have known escapes)."""
    try:
        import jinja2  # optional: the hub extra
    except ImportError:
        raise ConfigError(
            "--chat needs jinja2 (chat templates are Jinja), an optional part: "
            "pip install 'jaxfeed[hub]'"
        ) from None
    if _version(jinja2.__version__) < JINJA_FLOOR:
        raise ConfigError(
            f"--chat needs jinja2 >= 3.1.6 (earlier sandboxes have known escapes; this is "
            f"{jinja2.__version__}): pip install -U 'jaxfeed[hub]'"
        )


def check_reply_ends(model: Any, tokenizer: Any, stop: list[str] | None, name: str) -> None:
    """``--chat`` needs to see where the assistant's reply ends: an end-of-sequence id (the
    ``eos_token_id`` of the checkpoint's ``generation_config.json`` or ``config.json``, else its
    tokenizer's ``<eos>``, ``</s>``, ``<|endoftext|>``...) or a stop string (``--stop``, or the
    checkpoint's ``stop_strings``). With none, the reply would run on past the end of its turn
    to ``--max-new-tokens``: a :class:`ConfigError` naming ``name`` and what to give, raised
    before any token is generated. (Plain generation without an end runs to
    ``--max-new-tokens``, as ``transformers`` does.)"""
    from jaxfeed.train.generation import EOS_TOKENS, end_ids, stop_strings  # import cost: JAX

    try:
        if end_ids(model, tokenizer) or stop_strings(model, stop or None):
            return
    except ValueError as err:  # a malformed eos_token_id or stop string
        raise ConfigError(str(err)) from None
    raise ConfigError(
        f"--chat: {name} has no end-of-sequence token (no eos_token_id in its "
        f"generation_config.json or config.json, none of {', '.join(EOS_TOKENS)} in its "
        "tokenizer.json) and no stop_strings, so nothing would end the assistant's reply: it "
        "would run on past its turn to --max-new-tokens. Give --stop TEXT (plain text that ends "
        "a reply; special tokens are not in the decoded text), or use a checkpoint whose "
        "tokenizer or generation_config.json names an end-of-sequence token"
    )


def chat_prompts(folder: str | Path, name: str, prompts: list[str]) -> list[str]:
    """Each prompt as one user message rendered by the checkpoint's chat template."""
    template, specials = chat_template(folder, name)
    return render_chats(template, specials, prompts, name)


def generate_pretrained(source: str, prompts: list[str], *, max_new_tokens: int = 50,
                        temperature: float = 1.0, top_k: int | None = None,
                        top_p: float | None = None, seed: int = 0,
                        stop: list[str] | None = None, chat: bool = False) -> list[str]:  # fmt: skip
    """Continuations of ``prompts`` by the checkpoint ``source`` (``chat``: replies to them, as
    user messages in its chat template); bad checkpoints, prompts too long for the context and
    the like are one-line :class:`ConfigError`s."""
    from jaxfeed.models import from_pretrained, preprocessor  # import cost: JAX, Flax
    from jaxfeed.models.hub.files import resolve  # import cost: the Hub layer
    from jaxfeed.text import decode_layout, generate  # import cost: JAX

    for i, prompt in enumerate(prompts):
        if not prompt:
            raise ConfigError(f"prompt {i} is empty")
    try:
        if chat:  # the template checked before the model is loaded
            prompts = chat_prompts(resolve(source).folder, source, list(prompts))
        model = from_pretrained(source, task="causal-lm")
        decode_layout(model)  # on a TPU: per-layer weight buffers, which decode faster
        tokenizer = preprocessor(source)
        if chat:
            check_reply_ends(model, tokenizer, stop, source)
        return list(
            generate(model, tokenizer, list(prompts), max_new_tokens=max_new_tokens,
                     temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                     stop=stop, add_special_tokens=False if chat else None)
        )  # fmt: skip
    except ValueError as err:  # CheckpointError is one; generate's input errors too
        raise ConfigError(str(err)) from None
    except (OSError, ImportError) as err:  # offline, not found, a missing extra: as train says
        raise ConfigError(f"{source}: {err}") from None
