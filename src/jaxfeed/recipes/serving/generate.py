"""``jaxfeed generate RUN``: continuations of prompts by a run's language model, as trained (its
tokenizer, context and end ids; a run fine-tuned from a Hub checkpoint as the checkpoint
generates, with its chat template for ``--chat``: :mod:`jaxfeed.recipes.serving.hub_generate`)."""

from __future__ import annotations

from jaxfeed.recipes.config import ConfigError
from jaxfeed.recipes.serving.hub_generate import chat_prompts, check_reply_ends
from jaxfeed.recipes.serving.saved import read_saved
from jaxfeed.recipes.serving.text_serve import lm_trainer
from jaxfeed.recipes.text.tokenizer import attach_tokenizer
from jaxfeed.text import decode_layout
from jaxfeed.text import generate as generate_tokens


def generate(
    run_dir: str,
    prompts: list[str],
    *,
    max_new_tokens: int = 50,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    checkpoint: str = "best",
    trust_code: bool = False,
    stop: list[str] | None = None,
    chat: bool = False,
) -> list[str]:
    """Continuations of ``prompts`` by the run's language model (:func:`jaxfeed.text.generate`
    on the restored checkpoint), each ended before the first of the ``stop`` texts it holds
    (line breaks included: nothing stops at a line end unless ``stop`` says so; a row stops
    decoding once its text holds one); a prompt that does not fit the model's context with
    ``max_new_tokens`` more is refused naming it. A run fine-tuned from a Hub checkpoint
    generates as the checkpoint does (its context, end ids, special tokens); ``chat`` renders
    each prompt with the checkpoint's chat template (:mod:`jaxfeed.recipes.serving.hub_generate`)."""
    saved = read_saved(run_dir, trust_code=trust_code)
    run, record, prep = saved.out, saved.record, saved.prep
    saved.kind.check_generates(run, saved.task)
    attach_tokenizer(prep, run)
    for i, prompt in enumerate(prompts):
        if not prompt:
            raise ConfigError(f"prompt {i} is empty")
    hub = record.resolved.get("pretrained")
    if chat:
        if not isinstance(hub, dict):
            raise ConfigError(
                f"--chat: {run} trained its own language model, which has no chat template (a run "
                "fine-tuned from a Hub checkpoint that has one takes --chat); drop --chat"
            )
        prompts = chat_prompts(hub.get("folder") or hub["model"], str(hub["model"]), prompts)
    if not isinstance(hub, dict):
        init_args = record.options.model_spec.init_args if record.options.model_spec else {}
        context = int(init_args.get("max_length", prep.max_length))
        for i, prompt in enumerate(prompts):
            n = len(prep.tokenizer.encode(prompt, add_special_tokens=False).ids)
            if n + max_new_tokens > context:
                raise ConfigError(
                    f"prompt {i} ({prompt[:40]!r}) is {n} token{'' if n == 1 else 's'}; with --max-new-tokens "
                    f"{max_new_tokens} that is more than the model's context of {context} tokens "
                    "(the run's --seq-len): shorten the prompt or ask fewer new tokens"
                )
    trainer, _ = lm_trainer(saved, checkpoint)
    decode_layout(trainer.model)  # on a TPU: per-layer weight buffers, which decode faster
    if chat:
        check_reply_ends(trainer.model, prep.tokenizer, stop, str(hub["model"]))
    try:
        return list(
            generate_tokens(
                trainer.model, prep.tokenizer, list(prompts), max_new_tokens=max_new_tokens,
                temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                stop=stop or None,
                add_special_tokens=False if chat else None,
            )
        )  # fmt: skip
    except ValueError as err:  # a prompt too long for a Hub model's context, and the like
        raise ConfigError(str(err)) from None


__all__ = ["generate"]
