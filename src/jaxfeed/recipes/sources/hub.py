"""``--model hf:ORG/NAME`` (or a checkpoint folder): :class:`HubSource`, the model source of a
Hub checkpoint. It owns the opened checkpoint (its folder at one commit,
:mod:`~jaxfeed.recipes.sources.hub_checkpoint`): it opens it once at the revision the run asks
for, hands the input kind what the checkpoint fixes of the inputs (its tokenizer, image size or
audio front end: :class:`~jaxfeed.recipes.sources.hub_checkpoint.Pretrained`), builds the model
from that folder and commit on the run's mesh and sharding, with a head for the data, LoRA
adapters and int8 weights; it owns the fine-tuning defaults (:data:`FINE_TUNE`, :data:`LORA_LR`,
applied at one moment by :meth:`HubSource.defaults`), records the checkpoint, says its lines,
keeps its preprocessor file, and measures a language model before fine-tuning.

>>> FINE_TUNE, LORA_LR
({'lr': 5e-05, 'epochs': 3}, 0.0002)
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import jax.numpy as jnp
from flax import nnx

from jaxfeed.models.hub import from_pretrained
from jaxfeed.models.lora_settings import LoRA, SettingError, check_adapters
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.sources import hub_checkpoint as checkpoints
from jaxfeed.recipes.sources.base import ModelSource, check_lora_companions
from jaxfeed.recipes.sources.hub_checkpoint import Checkpoint, Pretrained
from jaxfeed.train.freeze import trainable_paths

# fine-tuning defaults of the options a run leaves out
FINE_TUNE = {"lr": 5e-5, "epochs": 3}
LORA_LR = 2e-4  # --lora's learning rate when none is given (adapters start at zero: PEFT's usual)
LORA_FEW_STEPS = 100  # fewer optimizer steps with --lora: the run says it may move the model little
LORA_HIGHER_LR = 1e-3  # the rate that note suggests when the run's is lower
WARMUP_SHARE = 0.1  # of the run's optimizer steps, when --warmup-steps is not given
INIT_ARGS = ("ignore_mismatched_sizes", "revision", "dtype", "param_dtype")
# the flags of LoRA's settings, by the argument jaxfeed.models.lora_settings names
LORA_FLAGS = {"rank": "--lora", "alpha": "--lora-alpha", "targets": "--lora-targets",
              "dropout": "--lora-dropout", "quantize": "--quantize", "adapter": "--lora"}  # fmt: skip


class HubSource(ModelSource):
    """A Hub checkpoint, fine-tuned (see the module docstring). ``checkpoint``: opened by
    :meth:`open` (a new or resumed run) or :meth:`from_record` (a saved run, at its commit).

    >>> from jaxfeed.recipes.config.model_spec import parse_model
    >>> source = HubSource(parse_model("hf:org/m"))
    >>> source.default_lr(), source.default_epochs()
    (5e-05, (3, "a pretrained model's default"))
    """

    name = "hub"

    def __init__(self, spec: Any, checkpoint: Checkpoint | None = None) -> None:
        super().__init__(spec)
        self.checkpoint = checkpoint
        self.lora: LoRA | None = None  # the run's adapters (--lora), once checked
        self.quantize: str | None = None
        self._inputs: Pretrained | None = None

    @classmethod
    def from_record(cls, spec: Any, resolved: dict[str, Any], verify: bool = False) -> HubSource:
        """A saved run's source: its checkpoint reopened at the commit it recorded
        (``resolved["pretrained"]``); ``verify``: its files hashed and checked against the
        record (export), else not (eval and predict restore the run's weights over it)."""
        source = cls(spec)
        saved = resolved.get("pretrained")
        if isinstance(saved, dict):
            source.checkpoint = checkpoints.reopen(saved, hashed=verify)
            if verify:
                checkpoints.check_unchanged(saved, source.checkpoint)
        return source

    # ------------------------------------------------------------------ before anything is read
    def check_options(self, config: RunConfig) -> None:
        """``--lora`` and its companions, checked by the library's own rules
        (:mod:`jaxfeed.models.lora_settings`) and refused naming the flag; ``--model.init_args``
        limited to what a Hub model takes."""
        check_lora_companions(config)
        unknown = sorted(set(self._init_args()) - set(INIT_ARGS))
        if unknown:
            raise ConfigError(
                f"--model.init_args.{unknown[0]}: a Hub model takes only {', '.join(INIT_ARGS)}"
            )
        if config.lora is None:
            return
        try:
            self.lora = LoRA(rank=config.lora, alpha=config.lora_alpha,
                             targets=config.lora_targets, dropout=config.lora_dropout)  # fmt: skip
            check_adapters(self.lora, None, config.quantize)
        except SettingError as err:
            flag = LORA_FLAGS.get(err.argument, "--lora")
            raise ConfigError(f"{flag}: {err}") from None
        self.quantize = config.quantize

    def absolute(self, model: Any) -> Any:
        """A checkpoint folder's path made absolute (a Hub id stays as given)."""
        spec = self.spec
        if spec.path is None or "/" not in spec.path:
            return model
        local = Path(spec.path).expanduser()
        if not local.is_dir():
            return model
        resolved = str(local.resolve())
        return {**model, "class_path": resolved} if isinstance(model, dict) else resolved

    def open(self, config: RunConfig, record: Any, policy: Any) -> None:
        """Resolve the checkpoint at ``--model.init_args.revision`` (the one the run trains from,
        records and hashes); a resumed run's reopened at the commit it recorded, its files
        checked against the record."""
        saved = record.resolved.get("pretrained") if record is not None else None
        if isinstance(saved, dict):  # a resumed run: the checkpoint at the commit it recorded
            self.checkpoint = checkpoints.reopen(saved, hashed=True)
            checkpoints.check_unchanged(saved, self.checkpoint)
            return
        revision = self._init_args().get("revision")
        self.checkpoint = checkpoints.open_checkpoint(self.spec.text, revision)

    def _init_args(self) -> dict[str, Any]:
        return dict(self.spec.init_args) if self.spec is not None else {}

    # ------------------------------------------------------------------ planning
    def before_plan(self, kind: Any, config: RunConfig, resumed: bool) -> RunConfig:
        """The checkpoint takes the data's kind (text, images, audio); the kind sets what the
        checkpoint fixes of its options (an image size)."""
        assert self.checkpoint is not None
        checkpoints.check_data(self.checkpoint, kind.name, kind.hub_task)
        return kind.before_plan(config, resumed, self.inputs())

    def inputs(self) -> Pretrained:
        """The checkpoint's preprocessor, context and special ids, read once."""
        if self._inputs is None:
            assert self.checkpoint is not None
            self._inputs = checkpoints.pretrained_inputs(self.checkpoint)
        return self._inputs

    def default_lr(self) -> float:
        return LORA_LR if self.lora is not None else FINE_TUNE["lr"]

    def default_whose(self) -> str:
        return "LoRA adapters'" if self.lora is not None else "a pretrained model's"

    def default_epochs(self) -> tuple[int, str] | None:
        return FINE_TUNE["epochs"], "a pretrained model's default"

    def defaults(self, config: RunConfig, given: frozenset[str],
                 steps: int) -> tuple[RunConfig, list[str]]:  # fmt: skip
        """``--lr`` (:data:`FINE_TUNE`'s, or :data:`LORA_LR` for adapters) and a linear warmup over
        :data:`WARMUP_SHARE` of the optimizer steps when not given (``--epochs``: the budget's
        :meth:`default_epochs`); the line that sums the fine-tuning up."""
        config, _ = super().defaults(config, given, steps)
        epochs = config.epochs if "epochs" in given else FINE_TUNE["epochs"]
        total = epochs * steps
        if config.max_steps is not None:
            total = min(total, config.max_steps)
        if "warmup_steps" not in given:
            warmup = max(1, int(WARMUP_SHARE * total) // config.grad_accum)
            config = dataclasses.replace(config, warmup_steps=warmup)
        whose = "LoRA adapters on a pretrained model" if self.lora else "a pretrained model"
        line = (
            f"fine-tuning: --lr {_rate(config.lr)}, --epochs {epochs}, --warmup-steps "
            f"{config.warmup_steps} (defaults for {whose}: --lr {self.default_lr():g}, --epochs "
            f"{FINE_TUNE['epochs']}, warmup over {WARMUP_SHARE:.0%} of the steps)"
        )
        steps_run = total // config.grad_accum
        if self.lora is None or steps_run >= LORA_FEW_STEPS:
            return config, [line]
        low = isinstance(config.lr, float) and config.lr < LORA_HIGHER_LR
        return config, [line, (
            f"note: {steps_run} optimizer steps are few for LoRA: the adapters start at zero, so "
            f"the model starts as the checkpoint and at --lr {_rate(config.lr)} moves little in "
            f"{steps_run} steps; if the validation loss barely moves, give more --epochs"
            + (f" or a higher --lr ({LORA_HIGHER_LR:g} is common)" if low else "")
        )]  # fmt: skip

    # ------------------------------------------------------------------ the model
    def build_model(self, run: Any, config: RunConfig) -> Any:
        """:func:`~jaxfeed.models.from_pretrained` of the opened checkpoint (its folder at its
        commit) for the Hub task of the run's kind, with a head for the run's outputs (a causal LM
        has none), the run's adapters, laid out on the run's mesh by its sharding; an image or
        audio model wrapped to take the run's inputs."""
        kind, checkpoint = run.kind, self.checkpoint
        assert checkpoint is not None
        text = self.spec.text
        if config.api == "linen":
            raise ConfigError(f"--api linen: --model {text} is an nnx model from the Hub")
        task = kind.hub_task
        if task is None:
            raise ConfigError(
                f"--model {text}: a Hub model learns from text, images or audio, not {kind.name}"
            )
        options: dict[str, Any] = {} if task == "causal-lm" else {"num_labels": run.outputs}
        if config.lora is not None:
            if self.lora is None:
                self.check_options(config)
            options.update(lora=self.lora, quantize=self.quantize)
        mesh = getattr(run, "mesh", None)
        spec = config.model_spec  # as the run resolved it
        init_args = {k: v for k, v in spec.init_args.items() if k != "revision"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "classifier newly initialised": the run trains it
            try:
                model = from_pretrained(
                    checkpoint.resolved, task=task, seed=config.seed, mesh=mesh,
                    sharding=config.sharding if mesh is not None else None, **options, **init_args,
                )  # fmt: skip
            except (OSError, ValueError, TypeError) as err:
                shown = str(err).replace("ignore_mismatched_sizes=True", "--model.init_args."
                                         "ignore_mismatched_sizes true")  # fmt: skip
                raise ConfigError(f"--model {text}: {shown}") from None
        if task == "image-classification":
            return ImageModel(model, self.inputs().processor_with("image_mean", "image"))
        if task == "audio-classification":
            return AudioModel(model)
        return model

    def model_lines(self, model: Any) -> list[str]:
        """A run with adapters says so: :func:`adapters_line`."""
        inner = hub_model(model)
        lora = getattr(inner, "hub_lora", None)
        if lora is None:
            return []
        modules = getattr(inner, "hub_lora_modules", ())
        return [adapters_line(model, lora, len(modules), getattr(inner, "hub_quantize", None))]

    def trainer_options(self, config: RunConfig) -> dict[str, Any]:
        """The adapters (and a new head) train, the checkpoint stays frozen."""
        return {"trainable": "lora"} if config.lora is not None else {}

    # ------------------------------------------------------------------ what the run keeps
    def record(self) -> dict[str, Any] | None:
        """What ``config.json`` keeps of the checkpoint (``resolved["pretrained"]``)."""
        return None if self.checkpoint is None else self.checkpoint.record()

    def lines(self) -> list[str]:
        """``pretrained: bert from ORG/NAME at COMMIT``."""
        return [] if self.checkpoint is None else [self.checkpoint.line()]

    def write_files(self, out: Path) -> None:
        """The checkpoint's ``preprocessor_config.json`` kept in the run folder, as data."""
        if self.checkpoint is not None:
            checkpoints.copy_preprocessor(self.checkpoint, out)

    def summary_lines(self, before: dict[str, Any] | None, best: dict[str, Any] | None,
                      split: str | None) -> list[str]:  # fmt: skip
        line = perplexity_line(before, best, split)
        return [] if line is None else [line]

    def before_fine_tuning(self, trainer: Any, loader: Any, split: str | None, record: Any,
                           say: Any) -> dict[str, float] | None:  # fmt: skip
        """A language model's loss and perplexity on the validation split, before any step (a
        resumed run keeps the figures it recorded); None for other tasks or without a
        validation split."""
        if trainer is None or getattr(trainer.model, "hub_task", None) != "causal-lm":
            return None
        if record is not None:
            return record.resolved.get("pretrained_eval")
        if loader is None:
            return None
        figures = {k: float(v) for k, v in trainer.evaluate(loader).items()}
        shown = f"{figures['perplexity']:.4f}" if "perplexity" in figures else "?"
        say(f"before fine-tuning: {split} perplexity {shown} (the pretrained model)")
        return figures


def adapters_line(model: Any, lora: Any, layers: int, quantize: str | None) -> str:
    """``LoRA: rank 4, alpha 8 ...``: the adapters' settings, the parameters that train of all
    (those ``Trainer(trainable="lora")`` selects), and the frozen weights' bytes, with how many
    of them ``--quantize int8`` holds as int8."""
    chosen = trainable_paths(model, "lora")
    total = trained = frozen = int8 = 0
    for path, node in nnx.iter_graph(model):
        if not isinstance(node, nnx.Param):
            continue
        value = node[...]
        size = int(value.size)
        total += size
        if ".".join(str(p) for p in path) in chosen:
            trained += size
        else:
            frozen += size * value.dtype.itemsize
            int8 += size if value.dtype == jnp.int8 else 0
    dropout = f", dropout {lora.dropout:g}" if lora.dropout else ""
    head = " and the new head" if getattr(hub_model(model), "trainable_with_lora", ()) else ""
    line = (
        f"LoRA: rank {lora.rank}, alpha {lora.alpha:g} (the update scaled by {lora.scaling:g})"
        f"{dropout}, on {', '.join(lora.targets)} ({layers} layers); {trained:,} of {total:,} "
        f"parameters train ({trained / max(total, 1):.2%}: the adapters{head}); "
        f"{total - trained:,} frozen in {_bytes(frozen)}"
    )
    if quantize and int8:
        line += (
            f", {int8:,} of them (the blocks' linear weights) {quantize} (--quantize): "
            f"{_bytes(int8)} with per-channel scales beside, {_bytes(4 * int8)} in float32"
        )
    return line


def _bytes(n: float) -> str:
    """``1.5 KB``, ``3.0 MB``: bytes for the output.

    >>> _bytes(512), _bytes(1536), _bytes(3 << 20)
    ('512 B', '1.5 KB', '3.0 MB')
    """
    for unit in ("B", "KB", "MB"):
        if n < 1024:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _rate(lr: float | str | None) -> str:
    """``--lr`` as the fine-tuning line shows it.

    >>> _rate(5e-05), _rate("auto")
    ('5e-05', 'auto (a range test picks it)')
    """
    return "auto (a range test picks it)" if lr == "auto" else f"{lr:g}"


def perplexity_line(before: dict[str, Any] | None, best: dict[str, Any] | None,
                    split: str | None) -> str | None:  # fmt: skip
    """The summary's line that compares the validation perplexity before and after."""
    if not before or not best or "perplexity" not in before or "eval_perplexity" not in best:
        return None
    return (
        f"{split} perplexity: {before['perplexity']:.4f} before fine-tuning (the pretrained "
        f"model), {best['eval_perplexity']:.4f} after (the chosen checkpoint)"
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


__all__ = [
    "FINE_TUNE",
    "LORA_LR",
    "AudioModel",
    "HubSource",
    "ImageModel",
    "hub_model",
    "perplexity_line",
]
