"""``from_pretrained``, ``preprocessor`` and ``save_pretrained``: Hub checkpoints as NNX models.

A checkpoint is a local folder in the Hub's layout or a Hub id (``hf:org/name``, ``org/name``);
its ``config.json`` ``model_type`` picks the family, its ``architectures`` the default task. The
model is built abstractly (no array allocated), then each weight goes from the safetensors memory
map straight to its device sharding; heads the checkpoint lacks are initialised as
``transformers`` does and reported once (a warning naming them).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxfeed._base.files import atomic_write, temporary_file
from jaxfeed.models.hub.adapters import (
    add_lora,
    block_kernels,
    has_lora,
    load_adapter,
    merged,
    read_adapter,
    save_adapter,
)
from jaxfeed.models.hub.family import LABEL_TASKS, Family, HubConfig
from jaxfeed.models.hub.files import (
    CheckpointError,
    Resolved,
    Weights,
    changed_files,
    checkpoint_file,
    file_stamps,
    read_config,
    resolve,
    write_safetensors,
)
from jaxfeed.models.hub.registry import family_of
from jaxfeed.models.hub.save_folder import replace_checkpoint
from jaxfeed.models.hub.weights import export_weights, load_weights, plan_shardings, variables
from jaxfeed.models.lora import LoRA
from jaxfeed.models.lora_settings import check_adapters
from jaxfeed.models.stacked import locate

# files a saved folder carries over from the checkpoint it came from
CARRIED = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "preprocessor_config.json",
    "generation_config.json",
)
# buffers older checkpoints hold in their layers, which transformers ignores too
BUFFERS = ("rotary_emb.inv_freq", "attn.bias", "attn.masked_bias", "position_ids")


def _num_labels(config: dict) -> int | None:
    labels = config.get("id2label")
    if isinstance(labels, dict) and labels:
        return len(labels)
    value = config.get("num_labels")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _with_labels(config: dict, num_labels: int | None) -> dict:
    """``config`` with ``num_labels``/``id2label``/``label2id`` set for ``num_labels`` classes
    (its own labels kept when their count agrees)."""
    config = dict(config)
    own = _num_labels(config)
    n = num_labels if num_labels is not None else own if own is not None else 2
    if own != n or not isinstance(config.get("id2label"), dict):
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(n)}
        config["label2id"] = {f"LABEL_{i}": i for i in range(n)}
    config["num_labels"] = n
    return config


def _dtype(value: Any, what: str) -> Any:
    if value is None:
        return None
    try:
        return jnp.dtype(value)
    except TypeError as err:
        raise ValueError(
            f"{what} must be a dtype such as 'float32' or 'bfloat16', got {value!r}"
        ) from err


def from_pretrained(
    name_or_path: str | os.PathLike | Resolved,
    *,
    task: str | None = None,
    num_labels: int | None = None,
    dtype: Any = None,
    revision: str | None = None,
    mesh: Any = None,
    sharding: Any = None,
    param_dtype: Any = None,
    ignore_mismatched_sizes: bool = False,
    seed: int = 0,
    lora: LoRA | None = None,
    adapter: str | os.PathLike | None = None,
    quantize: str | None = None,
) -> nnx.Module:
    """An NNX model with the ``task``'s head from a Hub checkpoint: a local folder in the Hub's
    layout, ``hf:org/name``/``org/name`` downloaded into the ``huggingface_hub`` cache at
    ``revision``, or one already resolved (:class:`~jaxfeed.models.hub.files.Resolved`).

    ``task``: ``"sequence-classification"``, ``"token-classification"``, ``"masked-lm"``,
    ``"feature-extraction"``, ... (default: what ``config.json``'s ``architectures`` names).
    ``num_labels``: the classes of a classification head (default: the checkpoint's); a head in
    the checkpoint with another size is refused unless ``ignore_mismatched_sizes=True``, which
    re-initialises it. ``dtype``: the parameters' and computation's dtype (default float32;
    ``param_dtype`` sets the parameters' alone). ``mesh``/``sharding`` (``"replicate"``,
    ``"fsdp"`` or logical axis rules, as the Trainer's): each weight is put straight onto its
    shards. The model is called with ``transformers``' keyword names and returns float32 logits.

    ``lora=LoRA(...)`` adds low-rank adapters initialised as PEFT does (the outputs unchanged);
    ``adapter=`` a PEFT adapter folder or Hub id (``adapter_config.json`` +
    ``adapter_model.safetensors``) loads one onto the checkpoint; ``quantize="int8"`` (with either)
    stores the transformer blocks' frozen linear weights as int8 with per-channel scales
    (:mod:`jaxfeed.models.hub.adapters`).

    The model keeps ``hub_config`` (the config dict, with the labels used), ``hub_task`` and
    ``hub_source`` (:class:`~jaxfeed.models.hub.files.Resolved`) for :func:`save_pretrained`.
    It comes in evaluation mode, as in ``transformers`` (dropout off; ``model.train()`` or the
    Trainer turns it on).

    >>> import tempfile, transformers
    >>> folder = tempfile.mkdtemp()
    >>> config = transformers.BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1,
    ...     num_attention_heads=2, intermediate_size=16)
    >>> transformers.BertForSequenceClassification(config).save_pretrained(folder)
    >>> model = from_pretrained(folder, num_labels=2)
    >>> model(input_ids=jnp.array([[1, 5, 7, 0]]), attention_mask=jnp.array([[1, 1, 1, 0]])).shape
    (1, 2)
    """
    adapter = _check_adapters(lora, adapter, quantize)
    resolved = _resolved(name_or_path, revision)
    folder = resolved.folder
    config = read_config(folder)
    family = family_of(config, folder / "config.json")
    task, config = _task_and_labels(family, config, task, num_labels)
    weights = Weights(folder)
    dtype = _dtype(dtype, "dtype")
    param_dtype = _dtype(param_dtype, "param_dtype") or dtype or jnp.dtype(jnp.float32)
    model = nnx.eval_shape(
        lambda: family.build(
            config,
            task=task,
            num_labels=config.get("num_labels"),
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=nnx.Rngs(seed),
        )
    )
    placement = (sharding, mesh, seed, ignore_mismatched_sizes)
    model.hub_config, model.hub_task = HubConfig(config), task
    late = _hold_back(model) if quantize is not None and (lora or adapter) is not None else {}
    report = _load(model, weights, family, config, task, num_labels, placement, late)
    held = {r.hf for r in family.rules(config, task) if locate(model, r.path)[0] in late}
    _warn_load(folder, task, report, held)
    _keep_source(model, config, task, resolved, weights)
    fill = _late_loader(model, weights, family, config, task, num_labels, placement, late)
    _adapt(model, lora, adapter, quantize, seed, list(report.newly_initialised), fill)
    model.eval()  # as transformers: inference-ready; the Trainer switches to training mode
    return model


def _keep_source(model: Any, config: dict, task: str, resolved: Resolved, weights: Weights) -> None:
    """What :func:`save_pretrained` needs of the checkpoint: its config, task, where it lies and
    which files were read (``hub_files``: a merge of an int8 model reads them again)."""
    model.hub_config = HubConfig(config)
    model.hub_task = task
    model.hub_source = resolved
    model.hub_files = file_stamps(resolved.folder, weights)


def _check_adapters(lora: Any, adapter: Any, quantize: Any) -> Path | None:
    """``lora=``, ``adapter=`` and ``quantize=`` together, and the adapter's settings, before a
    byte of the base's weights is read; the adapter's folder (a Hub id resolved once)."""
    check_adapters(lora, adapter, quantize)
    return None if adapter is None else read_adapter(adapter)[0]


def _resolved(name_or_path: str | os.PathLike | Resolved, revision: str | None) -> Resolved:
    """The checkpoint's folder (and commit): ``name_or_path`` resolved at ``revision``, or as
    already resolved."""
    if not isinstance(name_or_path, Resolved):
        return resolve(name_or_path, revision)
    if revision is not None:
        raise ValueError(
            f"revision={revision!r}: the checkpoint is already resolved (at commit "
            f"{name_or_path.commit}); give its id instead"
        )
    return name_or_path


def _warn_load(folder: Path, task: str, report: Any, held: set[str]) -> None:
    """The load's warnings: new variables, and checkpoint tensors no layer uses (those ``held``
    back for an int8 load, read later one by one, aside)."""
    _warn_new(folder, report, task)
    unused = [n for n in report.unexpected if not any(n == h or n.endswith("." + h) for h in held)]
    _warn_unused(folder, task, unused)


def _warn_unused(folder: Path, task: str, unused: list[str]) -> None:
    """A warning naming the checkpoint tensors of numbered blocks (``encoder.layer.3.…``,
    ``layers.3.…``, ``h.3.…``) that the model does not use, as ``transformers`` warns: a
    ``config.json`` with fewer layers than the weights loads no truncated model silently. (Heads
    of other tasks and a pooler the task does not use are left unsaid.)"""
    unused = [
        n for n in unused if any(p.isdigit() for p in n.split(".")) and not n.endswith(BUFFERS)
    ]
    if not unused:
        return
    more = len(unused) - 6
    warnings.warn(
        f"{folder.name}: {len(unused)} checkpoint tensors of layers are not used by the {task} "
        f"model built from config.json ({', '.join(unused[:6])}"
        f"{f' and {more} more' if more > 0 else ''}): config.json describes fewer layers than "
        "the weights hold; correct it to use them",
        stacklevel=3,
    )


def _warn_new(folder: Path, report: Any, task: str) -> None:
    """One warning naming the variables the checkpoint did not give (a new head)."""
    if not report.newly_initialised:
        return
    shown = ", ".join(report.newly_initialised[:6])
    more = len(report.newly_initialised) - 6
    warnings.warn(
        f"{folder.name}: {shown}{f' and {more} more' if more > 0 else ''} newly initialised "
        f"(not in the checkpoint{'; resized: ' + ', '.join(report.mismatched) if report.mismatched else ''}"
        f"): train the model before using its {task} outputs",
        stacklevel=3,
    )


def _adapt(model: Any, lora: Any, adapter: Any, quantize: Any, seed: int, new: list[str],
           fill: Any) -> None:  # fmt: skip
    """New adapters (``lora``) or a saved one (``adapter``) put on ``model``, maybe over int8."""
    if adapter is not None:
        load_adapter(model, adapter, quantize=quantize, seed=seed, newly_initialised=new,
                     fill=fill)  # fmt: skip
    elif lora is not None:
        add_lora(model, lora, quantize=quantize, seed=seed, newly_initialised=new, fill=fill)


def _hold_back(model: Any) -> dict[str, Any]:
    """The block kernels an int8 load reads one at a time, each just before it is quantized: a
    concrete placeholder now (so the first load neither reads nor initialises them), their
    abstract value kept to restore."""
    late = {}
    for path in block_kernels(model):
        where, var, _ = locate(model, path)  # a stack's kernel: once, for all its layers
        if where not in late:
            late[where] = var.get_value()
            var.set_value(jax.device_put(np.zeros((), late[where].dtype)))  # compiles nothing
    return late


def _late_loader(model: Any, weights: Weights, family: Any, config: dict, task: str,
                 num_labels: Any, placement: tuple, late: dict[str, Any]) -> Any:  # fmt: skip
    """``fill(module path)``: the held-back kernel of that module read from the checkpoint."""
    if not late:
        return None
    rules: dict[str, list] = {}
    for rule in family.rules(config, task):
        rules.setdefault(locate(model, rule.path)[0], []).append(rule)

    def fill(path: str) -> None:
        kernel = locate(model, path + ".kernel")[0]  # a stack's: every layer's tensor
        if kernel not in late:
            return
        variables(model)[kernel].set_value(late.pop(kernel))
        some = _SomeRules(tuple(rules[kernel]), family.prefix)
        _load(model, weights, some, config, task, num_labels, placement)

    return fill


@dataclasses.dataclass(frozen=True)
class _SomeRules:
    """A family whose rules are those of one held-back kernel (a stack's: one per layer)."""

    chosen: tuple
    prefix: str = ""

    def rules(self, config: dict, task: str) -> list:
        return list(self.chosen)


def _task_and_labels(
    family: Any, config: dict[str, Any], task: str | None, num_labels: int | None
) -> tuple[str, dict[str, Any]]:
    """The task (default: the checkpoint's), checked, and the config with the labels used."""
    task = family.task_of(config) if task is None else task
    if task not in family.tasks:
        raise ValueError(
            f"task {task!r} is not available for model_type {config['model_type']!r}; choose "
            f"one of {', '.join(family.tasks)}"
        )
    if num_labels is not None and (
        isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1
    ):
        raise ValueError(f"num_labels must be a positive int, got {num_labels!r}")
    if num_labels is not None and task not in LABEL_TASKS:
        raise ValueError(f"num_labels applies to classification tasks, not to {task!r}")
    if task in LABEL_TASKS:
        config = _with_labels(config, num_labels)
    return task, config


def _load(
    model: nnx.Module,
    weights: Weights,
    family: Any,
    config: dict[str, Any],
    task: str,
    num_labels: int | None,
    placement: tuple,
    late: dict[str, Any] | None = None,
) -> Any:
    """The checkpoint's weights put into ``model`` (``placement``: sharding, mesh, seed,
    ignore_mismatched_sizes) but those of the parameter paths in ``late``; a head of another size
    than ``num_labels`` refused, saying so."""
    sharding, mesh, seed, ignore_mismatched_sizes = placement
    try:
        return load_weights(
            model,
            weights,
            [r for r in family.rules(config, task) if locate(model, r.path)[0] not in (late or {})],
            shardings=plan_shardings(sharding, mesh),
            prefix=family.prefix,
            init_std=float(config.get("initializer_range", 0.02)),
            seed=seed,
            ignore_mismatched=ignore_mismatched_sizes,
        )
    except CheckpointError as err:
        if num_labels is not None and task in LABEL_TASKS and "expects" in str(err):
            raise CheckpointError(
                f"num_labels={num_labels} disagrees with the checkpoint's classification head "
                f"({err}); pass ignore_mismatched_sizes=True to re-initialise the head for "
                f"{num_labels} classes"
            ) from None
        raise


def preprocessor(name_or_path: str | os.PathLike, *, revision: str | None = None) -> Any:
    """What turns raw inputs into the model's inputs: for text checkpoints a
    ``tokenizers.Tokenizer`` from ``tokenizer.json`` with the checkpoint's padding and truncation
    (``model_max_length``, pad token); for image/audio families their preprocessing spec.

    >>> import tempfile
    >>> preprocessor(tempfile.mkdtemp())
    Traceback (most recent call last):
    ...
    jaxfeed.models.hub.files.CheckpointError: ... has no config.json: ...
    """
    resolved = _resolved(name_or_path, revision)
    config = read_config(resolved.folder)
    family = family_of(config, resolved.folder / "config.json")
    if family.preprocessor is not None:
        return family.preprocessor(resolved.folder, config)
    from jaxfeed.models.hub.text import text_preprocessor  # noqa: PLC0415 (optional: the text extra)

    return text_preprocessor(resolved.folder, config)


def _family(model: Any) -> tuple[Family, dict, str]:
    config = getattr(model, "hub_config", None)
    task = getattr(model, "hub_task", None)
    if not isinstance(config, dict) or not isinstance(task, str):
        raise TypeError(
            f"save_pretrained takes a model made by from_pretrained (it keeps hub_config and "
            f"hub_task), got {type(model).__name__}"
        )
    return family_of(config), dict(config), task


def _unquantized(model: Any) -> Any:
    """``model``'s adapters on the full-precision weights of the checkpoint it came from."""
    source, stamps = getattr(model, "hub_source", None), getattr(model, "hub_files", None)
    if not isinstance(source, Resolved) or not isinstance(stamps, tuple):
        raise ValueError("an int8 model merges only with the checkpoint it was loaded from")
    _check_same_files(source, stamps)  # before reading them again
    task, config = model.hub_task, model.hub_config
    labels = config.get("num_labels") if task in LABEL_TASKS else None
    with tempfile.TemporaryDirectory() as tmp:
        save_adapter(model, tmp)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a new head: it comes from the adapter
            full = from_pretrained(source, task=task, num_labels=labels, adapter=tmp,
                                   ignore_mismatched_sizes=True)  # fmt: skip
    _check_same_files(source, stamps, full.hub_files)  # and the files read were those
    return full


def _check_same_files(source: Resolved, stamps: tuple, now: tuple | None = None) -> None:
    """Refuse to merge an int8 model into a checkpoint whose files are not the ones it was loaded
    from (``stamps``; ``now``: those a reload read), naming them and what to do."""
    changed = changed_files(source.folder, stamps) if now is None else (
        [s[0] + " (changed)" for s in sorted(set(now) ^ set(stamps))])  # fmt: skip
    if changed:
        raise CheckpointError(
            f"save_pretrained(merge=True) of an int8 model reads the full-precision weights again "
            f"from {source.folder}, whose files changed since the model was loaded from it: "
            f"{', '.join(dict.fromkeys(changed))}; load the model again from the checkpoint as it "
            "is now, or save the adapter alone (merge=False)"
        )


def save_pretrained(model: Any, path: str | os.PathLike, *, source: str | os.PathLike | None = None,
                    id2label: dict[int, str] | None = None, merge: bool = False) -> Path:  # fmt: skip
    """Write ``model`` (from :func:`from_pretrained`, maybe fine-tuned) as a Hub-format folder:
    ``config.json`` (its architecture, ``num_labels``/``id2label``), ``model.safetensors`` and
    the tokenizer/preprocessor files of the checkpoint it came from (or of ``source``), which
    ``transformers`` loads with the same logits. ``id2label`` names the classes.

    >>> import tempfile, transformers
    >>> folder = tempfile.mkdtemp()
    >>> config = transformers.BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1,
    ...     num_attention_heads=2, intermediate_size=16)
    >>> transformers.BertForMaskedLM(config).save_pretrained(folder)
    >>> out = save_pretrained(from_pretrained(folder), tempfile.mkdtemp())
    >>> sorted(p.name for p in out.iterdir())
    ['config.json', 'model.safetensors']

    A model with LoRA adapters is written as a PEFT adapter folder (``adapter_config.json``,
    ``adapter_model.safetensors``) that ``peft.PeftModel.from_pretrained`` loads; with
    ``merge=True`` as the full checkpoint with the adapters merged in (PEFT's
    ``merge_and_unload``); int8 weights are read again from the checkpoint the model came
    from, so the adapters merge into its full-precision weights.

    A folder that already holds a save (a sharded checkpoint, an adapter, a merged model) is
    replaced whole and at once, its other files kept (:mod:`.save_folder`).
    """
    if has_lora(model) and not merge:
        return save_adapter(model, path)
    if getattr(model, "hub_quantize", None):
        model = _unquantized(model)
    if has_lora(model):
        model = merged(model)
    family, config, task = _family(model)
    out = Path(path)
    src = Path(source) if source is not None else None
    if src is None and isinstance(getattr(model, "hub_source", None), Resolved):
        src = model.hub_source.folder
    carried: dict[str, Path] = {}
    other = src is not None and src.resolve() != out.resolve()
    if other:
        for name in CARRIED:  # checked before a byte is written: a link leading out is refused
            found = checkpoint_file(src, name)
            if found is not None:
                carried[name] = found
    if id2label is not None:
        labels = {str(int(k)): str(v) for k, v in dict(id2label).items()}
        config["id2label"] = labels
        config["label2id"] = {v: int(k) for k, v in labels.items()}
        config["num_labels"] = len(labels)
    config["architectures"] = [family.architecture(task)]
    config.setdefault("dtype", "float32")
    tensors = export_weights(model, family.rules(config, task))
    if task == "feature-extraction" and family.prefix:  # a bare encoder's names have no prefix
        cut = len(family.prefix) + 1
        tensors = {
            k[cut:] if k.startswith(family.prefix + ".") else k: v for k, v in tensors.items()
        }

    def write(into: Path) -> list[str]:
        write_safetensors(into / "model.safetensors", tensors, metadata={"format": "pt"})
        atomic_write(into / "config.json", json.dumps(config, indent=2, sort_keys=True) + "\n")
        for name, found in carried.items():
            tmp = temporary_file(into / name)
            shutil.copyfile(found, tmp)
            os.replace(tmp, into / name)
        return ["model.safetensors", "config.json", *carried]

    # whole, at once: an older checkpoint's shards and index, an adapter, the preprocessing files
    # of another source are replaced, never mixed with this save (models/hub/save_folder.py)
    stale = [n for n in CARRIED if n not in carried] if other else []
    return replace_checkpoint(out, write, stale)
