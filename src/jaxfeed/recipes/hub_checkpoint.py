"""The Hub checkpoint of ``--model hf:ORG/NAME`` or ``--model ./folder`` (fine-tuned from the
command): opened, checked against the data and the run, and its model built.

A checkpoint (a Hub id, or a local folder in the Hub's layout: ``config.json``,
``model.safetensors``, ``tokenizer.json``/``preprocessor_config.json``) is resolved and checked
before anything is written to the run folder. The run's kind (:class:`jaxfeed.recipes.kinds.hub.HubKind`
around it) plans with the checkpoint: text runs tokenize with its own ``tokenizer.json`` (copied
into the run folder as data; no tokenizer is trained), image runs are resized to its size and
normalised with its mean and std (on the device, inside the model: :func:`image_model`), audio
runs go through its own front end (AST's filterbank, in the loader's workers); the model is
:func:`jaxfeed.models.from_pretrained` with a head for the data's classes (:func:`build_model`).
``config.json`` records the model id, the resolved commit and the SHA-256 of each file the run
read from the checkpoint; ``--resume`` refuses a checkpoint whose files changed.

>>> FINE_TUNE
{'lr': 5e-05, 'epochs': 3}
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax.numpy as jnp
from flax import nnx

from jaxfeed._base.files import atomic_write
from jaxfeed.models.hub import from_pretrained, preprocessor
from jaxfeed.models.hub.api import CARRIED
from jaxfeed.models.hub.files import Weights, checkpoint_file, read_config, resolve
from jaxfeed.models.hub.registry import family_of
from jaxfeed.models.lora import LoRA
from jaxfeed.recipes.config import ConfigError, RunConfig

PREPROCESSOR_FILE = "preprocessor_config.json"
# files of a checkpoint the run may read (each one present is hashed into config.json; the
# weights are added); a run recorded before some were hashed checks the ones it recorded
RECORDED = ("config.json", "model.safetensors.index.json", *CARRIED)
HASHED_BEFORE = ("config.json", "tokenizer.json", "preprocessor_config.json")
# fine-tuning defaults of the options not given (lr: jaxfeed.recipes.configure; epochs: the
# budget, through HubKind.default_epochs)
FINE_TUNE = {"lr": 5e-5, "epochs": 3}
LORA_LR = 2e-4  # --lora's learning rate when none is given (adapters start at zero: PEFT's usual)
WARMUP_SHARE = 0.1  # of the run's optimizer steps, when --warmup-steps is left at 0
INIT_ARGS = ("ignore_mismatched_sizes", "revision", "dtype", "param_dtype")


@dataclass
class Checkpoint:
    """A resolved checkpoint: where its files are, what it is, and their SHA-256."""

    spec: str
    folder: Path
    repo_id: str | None
    commit: str | None
    config: dict[str, Any]
    files: dict[str, str]

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type"))

    def record(self) -> dict[str, Any]:
        """What the run's ``config.json`` keeps (``resolved["pretrained"]``)."""
        return {
            "model": self.spec,
            "repo_id": self.repo_id,
            "commit": self.commit,
            "folder": str(self.folder),
            "model_type": self.model_type,
            "sha256": dict(self.files),
            "hashed": list(RECORDED),
        }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def open_checkpoint(spec: str, revision: str | None = None) -> Checkpoint:
    """Resolve ``--model`` (a download goes into the ``huggingface_hub`` cache, pinned to its
    commit), read its ``config.json`` and family, and hash its files; one clear error each."""
    try:
        resolved = resolve(spec, revision)
        config = read_config(resolved.folder)
        family_of(config, resolved.folder / "config.json")
        weights = Weights(resolved.folder).files()
        files = {p.name: _sha256(p) for p in weights}
        for extra in RECORDED:
            found = checkpoint_file(resolved.folder, extra)
            if found is not None:
                files[extra] = _sha256(found)
    except ImportError as err:
        raise ConfigError(f"--model {spec}: {err}") from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"--model {spec}: {err}") from None
    return Checkpoint(spec, resolved.folder, resolved.repo_id, resolved.commit, config, files)


def check_unchanged(saved: dict[str, Any], checkpoint: Checkpoint) -> None:
    """``--resume``: the checkpoint's files are the ones the run started from."""
    before = saved.get("sha256") or {}
    now = dict(checkpoint.files)
    if not saved.get("hashed"):  # a run recorded before every file read was hashed
        now = {
            n: h for n, h in now.items() if n in before or n not in RECORDED or n in HASHED_BEFORE
        }
    changed = sorted(n for n in set(before) | set(now) if before.get(n) != now.get(n))
    if changed:
        shown = ", ".join(
            f"{n} ({'gone' if n not in now else 'new' if n not in before else 'changed'})"
            for n in changed[:5]
        )
        raise ConfigError(
            f"--resume: the checkpoint {saved.get('model')} ({checkpoint.folder}) changed since the "
            f"run started: {shown}; resume with the checkpoint the run was started from (the run "
            "recorded each file's SHA-256), or start a new run (another --out)"
        )


def fine_tune_defaults(config: RunConfig, steps_per_epoch: int) -> tuple[RunConfig, str]:
    """A linear warmup over 10% of the optimizer steps when ``--warmup-steps`` is 0 (``--lr``
    and ``--epochs`` of a pretrained model default to :data:`FINE_TUNE` in
    :func:`jaxfeed.recipes.configure.configure`); the line that sums the fine-tuning up."""
    total = config.epochs * steps_per_epoch
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    if config.warmup_steps == 0:
        warmup = max(1, int(WARMUP_SHARE * total) // config.grad_accum)
        config = dataclasses.replace(config, warmup_steps=warmup)
    return config, (
        f"fine-tuning: --lr {_rate(config.lr)}, --epochs {config.epochs}, --warmup-steps "
        f"{config.warmup_steps} (defaults for a pretrained model: --lr {FINE_TUNE['lr']:g}, "
        f"--epochs {FINE_TUNE['epochs']}, warmup over {WARMUP_SHARE:.0%} of the steps)"
    )


def _rate(lr: float | str) -> str:
    """``--lr`` as the fine-tuning line shows it.

    >>> _rate(5e-05), _rate("auto")
    ('5e-05', 'auto (a range test picks it)')
    """
    return "auto (a range test picks it)" if lr == "auto" else f"{lr:g}"


# ---------------------------------------------------------------------------------- language models
def context_of(checkpoint: Checkpoint) -> int | None:
    """The positions a causal LM takes (``max_position_embeddings``, GPT-2's ``n_positions``)."""
    for key in ("max_position_embeddings", "n_positions"):
        if isinstance(checkpoint.config.get(key), int):
            return int(checkpoint.config[key])
    return None


def config_eos(checkpoint: Checkpoint) -> int | None:
    """The end-of-sequence id a checkpoint's ``config.json`` sets (``eos_token_id``: an id, or
    the first of a list, as Llama 3's), or None."""
    found = checkpoint.config.get("eos_token_id")
    if isinstance(found, list) and found:
        found = found[0]
    return int(found) if isinstance(found, int) and not isinstance(found, bool) else None


def before_fine_tuning(trainer: Any, loader: Any, split: str, record: Any,
                       say: Any) -> dict[str, float] | None:  # fmt: skip
    """The pretrained language model's loss and perplexity on the validation split, before any
    step (a resumed run keeps the figures it recorded); None without a validation split."""
    if record is not None:
        return record.resolved.get("pretrained_eval")
    if loader is None:
        return None
    figures = {k: float(v) for k, v in trainer.evaluate(loader).items()}
    shown = f"{figures['perplexity']:.4f}" if "perplexity" in figures else "?"
    say(f"before fine-tuning: {split} perplexity {shown} (the pretrained model)")
    return figures


def perplexity_line(before: dict[str, Any] | None, best: dict[str, Any] | None,
                    split: str) -> str | None:  # fmt: skip
    """The summary's line that compares the validation perplexity before and after."""
    if not before or not best or "perplexity" not in before or "eval_perplexity" not in best:
        return None
    return (
        f"{split} perplexity: {before['perplexity']:.4f} before fine-tuning (the pretrained "
        f"model), {best['eval_perplexity']:.4f} after (the chosen checkpoint)"
    )


# ---------------------------------------------------------------------------------- images
def image_size(checkpoint: Checkpoint) -> str:
    """``--image-size`` of an image run: the size the checkpoint's preprocessor makes, checked
    against the model (``HxW``)."""
    processor = _image_processor(checkpoint)
    try:
        processor.check_model(checkpoint.config)
    except ValueError as err:
        raise ConfigError(f"--model {checkpoint.spec}: {err}") from None
    h, w = processor.output_size()
    return f"{h}x{w}"


def image_options(checkpoint: Checkpoint, config: RunConfig) -> RunConfig:
    """An image run's ``--image-size`` (the checkpoint's; another one given is refused) and
    ``--image-mode RGB`` (grey images are converted, as the checkpoint's preprocessor does)."""
    size = image_size(checkpoint)
    if config.image_size is not None and config.image_hw() != tuple(map(int, size.split("x"))):
        raise ConfigError(
            f"--image-size {config.image_size}: --model {checkpoint.spec} takes {size} images "
            "(its preprocessor_config.json); drop --image-size"
        )
    if config.image_mode not in (None, "RGB"):
        raise ConfigError(
            f"--image-mode {config.image_mode}: --model {checkpoint.spec} takes RGB images"
        )
    return dataclasses.replace(config, image_size=size, image_mode="RGB")


def _processor(checkpoint: Checkpoint, attribute: str, what: str) -> Any:
    """The checkpoint's preprocessor, which must have ``attribute`` (a ``what`` model's)."""
    try:
        processor = preprocessor(checkpoint.folder)
    except (OSError, ValueError) as err:
        raise ConfigError(f"--model {checkpoint.spec}: {err}") from None
    if not hasattr(processor, attribute):
        raise ConfigError(
            f"--model {checkpoint.spec} is a {checkpoint.model_type} model, not an {what} model; "
            f"the data is {'images' if what == 'image' else what}"
        )
    return processor


def _image_processor(checkpoint: Checkpoint) -> Any:
    return _processor(checkpoint, "image_mean", "image")


def check_data(checkpoint: Checkpoint, kind: str, task: str | None) -> None:
    """The checkpoint's family takes the data's ``kind`` (text, image or audio), whose Hub task
    is ``task`` (``causal-lm`` for a language model; None: no Hub model takes it)."""
    family = family_of(checkpoint.config)
    lm = task == "causal-lm"
    if lm and task not in family.tasks:
        raise ConfigError(
            f"--model {checkpoint.spec} is an encoder ({checkpoint.model_type}): --task lm needs "
            "a causal language model (gpt2, llama, mistral, qwen2, qwen3)"
        )
    if "causal-lm" in family.tasks and not lm:
        raise ConfigError(
            f"--model {checkpoint.spec} is a causal language model ({checkpoint.model_type}): it "
            f"fine-tunes with --task lm on text (a corpus), not on {kind} data for "
            "classification or regression; those take an encoder (bert, roberta, vit...)"
        )
    if task is None or task not in family.tasks:
        raise ConfigError(
            f"--model {checkpoint.spec} ({checkpoint.model_type}) cannot learn from {kind} data "
            f"(its tasks: {', '.join(family.tasks)})"
        )


# ---------------------------------------------------------------------------------- audio


def audio_processor(checkpoint: Checkpoint) -> Any:
    """The AST checkpoint's feature extractor (an audio model's preprocessor)."""
    return _processor(checkpoint, "num_mel_bins", "audio")


def copy_preprocessor(checkpoint: Checkpoint, out: Path) -> None:
    """The checkpoint's ``preprocessor_config.json`` (images, audio) kept in the run folder, as
    data (text runs keep its ``tokenizer.json``)."""
    source = checkpoint_file(checkpoint.folder, PREPROCESSOR_FILE)
    if source is not None:
        atomic_write(Path(out) / PREPROCESSOR_FILE, source.read_bytes())


# ---------------------------------------------------------------------------------- models
def build_model(spec: str, task: str | None, outputs: int, config: RunConfig,
                kind: str) -> Any:  # fmt: skip
    """:func:`~jaxfeed.models.from_pretrained` for the Hub ``task`` of the run's ``kind`` (None:
    no Hub model learns from it), with a head for ``outputs`` classes (a causal LM has none)."""
    init_args = dict(config.model_spec.init_args)
    unknown = sorted(set(init_args) - set(INIT_ARGS))
    if unknown:
        raise ConfigError(
            f"--model.init_args.{unknown[0]}: a Hub model takes only {', '.join(INIT_ARGS)}"
        )
    if task is None:
        raise ConfigError(
            f"--model {spec}: a Hub model learns from text, images or audio, not {kind}"
        )
    heads: dict[str, Any] = {} if task == "causal-lm" else {"num_labels": outputs}
    if config.lora is not None:
        heads["lora"] = LoRA(rank=config.lora, alpha=config.lora_alpha or 2 * config.lora,
                             targets=config.lora_targets, dropout=config.lora_dropout)  # fmt: skip
        heads["quantize"] = config.quantize
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "classifier newly initialised": the run trains it
        try:
            return from_pretrained(spec, task=task, seed=config.seed, **heads, **init_args)
        except (OSError, ValueError, TypeError) as err:
            shown = str(err).replace("ignore_mismatched_sizes=True", "--model.init_args."
                                     "ignore_mismatched_sizes true")  # fmt: skip
            raise ConfigError(f"--model {spec}: {shown}") from None


def image_model(spec: str, model: Any) -> ImageModel:
    """An image checkpoint's model taking the run's ``[0, 1]`` channels-last pixels, normalised
    as its preprocessor says."""
    return ImageModel(model, _image_processor(_light(spec, model)))


def _light(spec: str, model: Any) -> Checkpoint:
    source = model.hub_source
    return Checkpoint(
        spec, source.folder, source.repo_id, source.commit, dict(model.hub_config), {}
    )


def hub_model(model: Any) -> Any:
    """The :func:`from_pretrained` model inside a run's model (for ``save_pretrained``)."""
    return getattr(model, "model", model) if isinstance(model, ImageModel | AudioModel) else model


class ImageModel(nnx.Module):
    """A ViT-like model on ``[0, 1]`` channels-last pixels (grey ones repeated to three
    channels): rescaled and normalised with the checkpoint's mean and std, then
    ``model(pixel_values=...)``."""

    def __init__(self, model: Any, processor: Any) -> None:
        self.model = model
        scale = float(processor.rescale_factor) * 255.0 if processor.do_rescale else 255.0
        mean = processor.image_mean if processor.do_normalize else (0.0,)
        std = processor.image_std if processor.do_normalize else (1.0,)
        self.scale, self.mean, self.std = scale, tuple(mean), tuple(std)

    def __call__(self, x: Any, *, rngs: Any = None) -> Any:
        x = x.astype(jnp.float32) * self.scale
        if x.ndim == 3:
            x = x[..., None]
        if x.shape[-1] == 1:
            x = jnp.repeat(x, 3, axis=-1)
        x = (x - jnp.asarray(self.mean, jnp.float32)) / jnp.asarray(self.std, jnp.float32)
        return self.model(pixel_values=x, rngs=rngs)


class AudioModel(nnx.Module):
    """An AST-like model on the run's ``(frames, mel bins)`` features (its checkpoint's front end
    made them in the loader's workers): ``model(input_values=...)``."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, x: Any, *, rngs: Any = None) -> Any:
        return self.model(input_values=x.astype(jnp.float32), rngs=rngs)
