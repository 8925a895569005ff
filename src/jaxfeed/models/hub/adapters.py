"""LoRA adapters on Hub models, in PEFT's folder format.

:func:`add_lora` puts a :class:`~jaxfeed.models.lora.LoRALinear` in place of each linear layer
whose checkpoint module name (``model.layers.0.self_attn.q_proj``) a target matches (the name, or
its end after a dot, as PEFT's ``target_modules``), found through the family's weight rules; with
``quantize="int8"`` every linear layer of the transformer blocks is stored as int8.
:func:`save_adapter` writes ``adapter_config.json`` and ``adapter_model.safetensors`` as ``peft``
does (``base_model.model.<module>.lora_A.weight`` ``[rank, in]``, ``lora_B.weight``
``[out, rank]``, a new head under ``modules_to_save``); :func:`load_adapter` reads one, refusing an
adapter for another model, rank or target set. :func:`merged` is PEFT's ``merge_and_unload``.

The default targets (PEFT's per-architecture ``target_modules``) and the module renames of
``transformers`` >= 5 are facts of each family (:class:`~jaxfeed.models.hub.family.Family`'s
``lora_targets`` and ``module_renames``).

>>> default_targets("llama"), default_targets("gpt2")
(('q_proj', 'v_proj'), ('c_attn',))
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from jaxfeed._base.files import atomic_write
from jaxfeed.models.hub.adapter_config import (
    CONFIG,
    WEIGHTS,
    adapter_weights,
    pattern_matches,
    read_adapter_config,
    unknown_tensors,
)
from jaxfeed.models.hub.files import CheckpointError, Weights, resolve, write_safetensors
from jaxfeed.models.hub.registry import family_of
from jaxfeed.models.hub.save_folder import replace_checkpoint
from jaxfeed.models.hub.weights import IDENTITY, TRANSPOSE, Rule, variables
from jaxfeed.models.lora import LoRA, LoRALinear, merge
from jaxfeed.models.stacked import locate, stack_at, unstack

TASK_TYPES = {
    "causal-lm": "CAUSAL_LM",
    "sequence-classification": "SEQ_CLS",
    "token-classification": "TOKEN_CLS",
    "feature-extraction": "FEATURE_EXTRACTION",
}
PREFIX = "base_model.model."


def _hub(model: Any) -> tuple[Any, dict, str]:
    config, task = getattr(model, "hub_config", None), getattr(model, "hub_task", None)
    if not isinstance(config, dict) or not isinstance(task, str):
        raise TypeError(
            f"LoRA adapters go on a model made by from_pretrained, got {type(model).__name__}"
        )
    return family_of(config), config, task


def _module(model: Any, path: str) -> tuple[Any, str | int, Any]:
    """The parent of the module at dotted ``path``, its attribute (or index) there, the module;
    through a layer stack (:class:`~jaxfeed.models.stacked.Stack`) the stacked module, whose
    layer the path's number is (:func:`_layer`)."""
    parent_path, _, last = path.rpartition(".")
    parent = locate(model, parent_path)[1] if parent_path else model
    attr: str | int = int(last) if last.isdigit() else last
    node = parent[attr] if isinstance(attr, int) else getattr(parent, attr)
    return parent, attr, node


def _layer(model: Any, path: str) -> int | None:
    """The layer of a stack that the module at ``path`` is (None: a module of its own)."""
    return locate(model, path)[2]


def _value(var: Any, index: int | None, cache: dict[int, np.ndarray]) -> np.ndarray:
    """A variable's value on the host (a stack's read once), the layer ``index`` of it."""
    if id(var) not in cache:
        cache[id(var)] = np.asarray(jax.device_get(var.get_value()))
    return cache[id(var)] if index is None else cache[id(var)][index]


def _peft_module(family: Any, task: str, hf: str) -> str:
    """The module's name in the ``transformers`` model of ``task`` (a bare encoder has none of
    the base model's prefix)."""
    if task == "feature-extraction" and family.prefix and hf.startswith(family.prefix + "."):
        return hf[len(family.prefix) + 1 :]
    return hf


def default_targets(model_type: str) -> tuple[str, ...]:
    """PEFT's default ``target_modules`` of a ``model_type`` (its family's ``lora_targets``)."""
    return family_of({"model_type": model_type}).lora_targets


def live_name(model_type: str, name: str) -> str:
    """A checkpoint module name as the installed ``transformers`` (and so PEFT) names the module
    (its family's ``module_renames``).

    >>> live_name("vit", "vit.encoder.layer.0.attention.attention.query")
    'vit.layers.0.attention.q_proj'
    """
    for pattern, replacement in family_of({"model_type": model_type}).module_renames:
        new, count = re.subn(pattern, replacement, name)
        if count:
            return new
    return name


def _normalised(model_type: str, key: str) -> str:
    """A PEFT tensor name with its module named as :func:`live_name` does (old adapters)."""
    body = key[len(PREFIX) :] if key.startswith(PREFIX) else key
    for suffix in (".lora_A.weight", ".lora_B.weight", ".weight", ".bias"):
        if body.endswith(suffix):
            return PREFIX + live_name(model_type, body[: -len(suffix)]) + suffix
    return key


def linear_modules(model: Any) -> dict[str, tuple[str, bool, str]]:
    """The model's linear layers by module name (as the installed ``transformers`` model of its
    task names them): ``{name: (model path, fan_in_fan_out, checkpoint module name)}``."""
    family, config, task = _hub(model)
    model_type = str(config.get("model_type"))
    out = {}
    for rule in family.rules(config, task):
        if not (rule.hf.endswith(".weight") and rule.path.endswith(".kernel")):
            continue
        if rule.transform not in (TRANSPOSE, IDENTITY):
            continue
        path = rule.path[: -len(".kernel")]
        _, _, node = _module(model, path)
        if isinstance(node, nnx.Linear | LoRALinear):
            name = _peft_module(family, task, rule.hf[: -len(".weight")])
            out[live_name(model_type, name)] = (path, rule.transform is IDENTITY, name)
    return out


def matches(name: str, targets: tuple[str, ...] | str) -> bool:
    """Whether PEFT's ``target_modules`` select module ``name``: a list matches a name or its end
    after a dot, a string is a regular expression the whole name must match.

    >>> matches("model.layers.0.self_attn.q_proj", ("q_proj",)), matches("a.xq_proj", ("q_proj",))
    (True, False)
    """
    if isinstance(targets, str):  # checked: no pattern that backtracks without bound
        return pattern_matches(targets, name)
    return any(name == t or name.endswith("." + t) for t in targets)


def _targets(model_type: str, lora: LoRA, names: list[str]) -> tuple[str, ...]:
    """``names``: every linear layer's module name, live and in the checkpoint."""
    targets = lora.targets if lora.targets is not None else default_targets(model_type)
    short = sorted({n.rsplit(".", 1)[-1] for n in names})
    for t in targets:
        if not any(matches(n, (t,)) for n in names):
            raise ValueError(
                f"LoRA target {t!r} matches no linear layer of this {model_type} model; its "
                f"layers are named {', '.join(short)}"
            )
    return tuple(targets)


def _new_head(model: Any, newly: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The model paths and checkpoint module names of the head trained and saved with the
    adapters (PEFT's ``modules_to_save``): a newly initialised one, and for the classification
    task types the ``classifier``/``score`` modules PEFT always saves."""
    family, config, task = _hub(model)
    rules = family.rules(config, task)
    by_hf = {r.hf: r.path for r in rules}
    modules = {n.rsplit(".", 1)[0] for n in newly if n in by_hf}
    if TASK_TYPES.get(task) in ("SEQ_CLS", "TOKEN_CLS"):
        modules |= {r.hf.rsplit(".", 1)[0] for r in rules
                    if r.hf.rsplit(".", 1)[0].rsplit(".", 1)[-1] in ("classifier", "score")}  # fmt: skip
    paths = {by_hf.get(n, n) for n in newly}
    paths |= {r.path for r in rules if r.hf.rsplit(".", 1)[0] in modules}
    return tuple(sorted(paths)), tuple(sorted(modules))


def _in_block(name: str) -> bool:
    """A module of the repeated transformer blocks (``...layers.3.mlp.up_proj``): int8 material."""
    return re.search(r"\.\d+\.", name) is not None


def block_kernels(model: Any) -> list[str]:
    """The kernel paths of the linear layers ``quantize="int8"`` stores as int8 (those of the
    transformer blocks)."""
    return [m[0] + ".kernel" for m in linear_modules(model).values() if _in_block(m[2])]


def add_lora(model: Any, lora: LoRA, *, quantize: str | None = None, seed: int = 0,
             newly_initialised: list[str] = (), fill: Any = None) -> tuple[str, ...]:  # fmt: skip
    """Put adapters on ``model``'s linear layers that ``lora.targets`` match (and int8 weights
    in the transformer blocks when ``quantize="int8"``); return the adapted module names. The
    model keeps ``hub_lora`` (the setting, targets resolved), ``hub_lora_modules`` and
    ``trainable_with_lora`` (the paths of a newly initialised head, trained with the adapters).
    ``fill(path)``, when given, loads a layer's kernel just before it is wrapped (and quantized):
    a checkpoint's blocks then never exist in full precision all at once."""
    if not isinstance(lora, LoRA):
        raise TypeError(f"lora= takes a jaxfeed.models.LoRA, got {type(lora).__name__}")
    _family, config, _task = _hub(model)
    modules = linear_modules(model)
    every = [*modules, *(m[2] for m in modules.values())]
    targets = _targets(str(config.get("model_type")), lora, every)
    head_paths, head_modules = _new_head(model, list(newly_initialised))
    choice = {name: _choice(name, path, old, targets, head_paths, quantize)
              for name, (path, _, old) in modules.items()}  # fmt: skip
    if _unstack_mixed(model, modules, choice):  # layers of a stack that must differ
        modules = linear_modules(model)
    key, adapted, done = jax.random.key(seed), [], set()
    for i, (name, (path, fan_in_fan_out, _)) in enumerate(modules.items()):
        wanted, in_block = choice[name]
        if not wanted and not in_block:
            continue
        parent, attr, node = _module(model, path)
        if (id(parent), attr) in done:  # a stack's module, wrapped with its first layer
            adapted += [name] if wanted else []
            continue
        done.add((id(parent), attr))
        if fill is not None:
            fill(path)
        parent, attr, node = _module(model, path)
        try:
            new = LoRALinear(node, lora if wanted else None, key=jax.random.fold_in(key, i),
                             quantize=quantize if in_block else None,
                             fan_in_fan_out=fan_in_fan_out)  # fmt: skip
        except ValueError as err:
            layer = getattr(err, "layer", None)  # a stack's layer: its own name, not the first's
            where = name if layer is None else re.sub(r"\.\d+\.", f".{layer}.", name, count=1)
            raise ValueError(f"{where}: {err}") from None
        if isinstance(attr, int):
            parent[attr] = new
        else:
            setattr(parent, attr, new)
        if wanted:
            adapted.append(name)
    model.hub_lora = LoRA(lora.rank, lora.alpha, targets, lora.dropout)
    model.hub_lora_modules = tuple(adapted)
    model.hub_quantize = quantize
    model.trainable_with_lora = tuple(head_paths)
    model.hub_modules_to_save = head_modules
    return tuple(adapted)


def _choice(name: str, path: str, old: str, targets: Any, head_paths: tuple[str, ...],
            quantize: str | None) -> tuple[bool, bool]:  # fmt: skip
    """Whether the linear layer gets adapters, and whether it is stored as int8."""
    wanted = matches(name, targets) or matches(old, targets)
    in_block = _in_block(old) and not any(path.startswith(h + ".") or path == h for h in head_paths)
    return wanted, bool(quantize) and in_block


def _unstack_mixed(model: Any, modules: dict, choice: dict) -> bool:
    """Put the layers of each stack whose layers must differ (adapters on some of them only)
    into a list of their own; whether any was."""
    seen: dict[tuple[int, Any], set] = {}
    paths: dict[tuple[int, Any], str] = {}
    for name, (path, _, _) in modules.items():
        if _layer(model, path) is None:
            continue
        parent, attr, _ = _module(model, path)
        seen.setdefault((id(parent), attr), set()).add(choice[name])
        paths[id(parent), attr] = path
    mixed = {stack_at(model, paths[k]) for k, v in seen.items() if len(v) > 1}
    for where in sorted(mixed - {None}):
        holder, _, attr = where.rpartition(".")
        parent = locate(model, holder)[1] if holder else model
        setattr(parent, attr, unstack(getattr(parent, attr)))
    return bool(mixed - {None})


def has_lora(model: Any) -> bool:
    """Whether ``model`` carries adapters (:func:`add_lora`)."""
    return isinstance(getattr(model, "hub_lora", None), LoRA)


# ---------------------------------------------------------------------------------- PEFT files
def adapter_config(model: Any, base_model_name_or_path: str | None = None) -> dict[str, Any]:
    """The ``adapter_config.json`` PEFT writes for ``model``'s adapters."""
    _, _, task = _hub(model)
    lora = model.hub_lora
    fan = any(m[1] for n, m in linear_modules(model).items() if n in model.hub_lora_modules)
    source = getattr(model, "hub_source", None)
    if base_model_name_or_path is None and source is not None:
        base_model_name_or_path = source.repo_id or str(source.folder)
    return {
        "peft_type": "LORA",
        "task_type": TASK_TYPES.get(task),
        "base_model_name_or_path": base_model_name_or_path,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "target_modules": sorted({n.rsplit(".", 1)[-1] for n in model.hub_lora_modules}),
        "bias": "none",
        "fan_in_fan_out": bool(fan),
        "modules_to_save": list(model.hub_modules_to_save) or None,
        "init_lora_weights": True,
        "inference_mode": True,
        "use_dora": False,
        "use_rslora": False,
    }


def adapter_tensors(model: Any) -> dict[str, np.ndarray]:
    """The adapter's tensors by PEFT's names (``[rank, in]`` A, ``[out, rank]`` B, the new
    head's weights), float32 numpy."""
    family, _config, task = _hub(model)
    modules = linear_modules(model)
    out: dict[str, np.ndarray] = {}
    read: dict[int, np.ndarray] = {}
    for name in model.hub_lora_modules:
        path = modules[name][0]
        _, _, layer = _module(model, path)
        index = _layer(model, path)
        a = _value(layer.lora_a, index, read).astype(np.float32)
        b = _value(layer.lora_b, index, read).astype(np.float32)
        out[f"{PREFIX}{name}.lora_A.weight"] = np.ascontiguousarray(a.T)
        out[f"{PREFIX}{name}.lora_B.weight"] = np.ascontiguousarray(b.T)
    for rule in _head_rules(model):
        value = np.asarray(jax.device_get(variables(model)[rule.path].get_value()))
        name = _peft_module(family, task, rule.hf)
        out[PREFIX + name] = np.ascontiguousarray(rule.transform.to_hf(value))
    return out


def _head_rules(model: Any) -> list[Rule]:
    family, config, task = _hub(model)
    heads = model.hub_modules_to_save
    return [r for r in family.rules(config, task) if r.hf.rsplit(".", 1)[0] in heads]


def save_adapter(model: Any, folder: str | os.PathLike, *,
                 base_model_name_or_path: str | None = None) -> Path:  # fmt: skip
    """Write ``model``'s adapters as a PEFT folder (``adapter_config.json``,
    ``adapter_model.safetensors``) that ``peft.PeftModel.from_pretrained`` loads; a model or
    adapter saved in ``folder`` before is replaced whole (:mod:`.save_folder`)."""
    if not has_lora(model):
        raise ValueError("the model has no LoRA adapters (from_pretrained(..., lora=LoRA()))")
    tensors, config = adapter_tensors(model), adapter_config(model, base_model_name_or_path)

    def write(out: Path) -> list[str]:
        write_safetensors(out / WEIGHTS, tensors, metadata={"format": "pt"})
        atomic_write(out / CONFIG, json.dumps(config, indent=2, sort_keys=True) + "\n")
        return [WEIGHTS, CONFIG]

    # whole, at once: a model or adapter saved there before is replaced, never mixed with this one
    return replace_checkpoint(folder, write)


def read_adapter(name_or_path: str | os.PathLike,
                 revision: str | None = None) -> tuple[Path, dict[str, Any], LoRA]:  # fmt: skip
    """An adapter folder (or Hub id), its ``adapter_config.json`` and the :class:`LoRA` it
    describes; refuses what jaxfeed cannot follow, naming the file and the setting
    (:func:`~jaxfeed.models.hub.adapter_config.read_adapter_config`)."""
    folder = resolve(name_or_path, revision).folder
    config = read_adapter_config(folder)
    adapter_weights(folder)
    return folder, config.raw, config.lora


def load_adapter(model: Any, name_or_path: str | os.PathLike, *, quantize: str | None = None,
                 revision: str | None = None, seed: int = 0, newly_initialised: list[str] = (),
                 fill: Any = None) -> Any:  # fmt: skip
    """Put the PEFT adapter at ``name_or_path`` onto ``model`` (from ``from_pretrained``);
    refuses an adapter with missing or extra tensors, or tensors of another shape (an adapter
    for another base model, rank or target set), naming the tensor and the file."""
    folder = resolve(name_or_path, revision).folder
    config = read_adapter_config(folder)
    file = adapter_weights(folder)  # adapter_model.safetensors, whatever else the folder holds
    targets, lora, base = config.targets, config.lora, config.base
    modules = linear_modules(model)
    chosen = [n for n, m in modules.items() if matches(n, targets) or matches(m[2], targets)]
    if not chosen:
        raise CheckpointError(
            f"{config.path}: target_modules {targets!r} match no layer of this "
            f"{model.hub_config.get('model_type')} model (the adapter was made for {base!r})"
        )
    names = tuple(sorted({n.rsplit(".", 1)[-1] for n in chosen}))
    add_lora(model, LoRA(lora.rank, lora.alpha, names, lora.dropout), quantize=quantize,
             seed=seed, newly_initialised=list(newly_initialised), fill=fill)  # fmt: skip
    _fill(model, Weights.of_file(file), file, base, list(config.modules_to_save))
    return model


def _fill(model: Any, weights: Weights, file: Path, base: Any, saved: list[str]) -> None:
    """Set the adapters (and saved head) from ``weights``; every tensor used exactly once."""
    family, config, task = _hub(model)
    modules = linear_modules(model)
    expected: dict[str, tuple[Any, str, Any, int | None]] = {}
    for name in model.hub_lora_modules:
        path = modules[name][0]
        _, _, layer = _module(model, path)
        index = _layer(model, path)
        expected[f"{PREFIX}{name}.lora_A.weight"] = (layer.lora_a, "T", None, index)
        expected[f"{PREFIX}{name}.lora_B.weight"] = (layer.lora_b, "T", None, index)
    for rule in family.rules(config, task):
        module = rule.hf.rsplit(".", 1)[0]
        if saved and any(matches(module, (s,)) for s in saved):
            _, var, index = locate(model, rule.path)
            expected[PREFIX + _peft_module(family, task, rule.hf)] = (
                var,
                "rule",
                rule.transform,
                index,
            )
    heads = {n[len(PREFIX) :].rsplit(".", 1)[0] for n, e in expected.items() if e[1] == "rule"}
    model.hub_modules_to_save = tuple(sorted(heads | set(model.hub_modules_to_save)))
    model.trainable_with_lora = tuple(sorted(
        {e[2] for e in _saved_paths(family, config, task, heads)} | set(model.trainable_with_lora)
    ))  # fmt: skip
    model_type = str(config.get("model_type"))
    by_name = {_normalised(model_type, n): n for n in weights.names()}
    present = set(by_name)
    missing = sorted(set(expected) - present)
    extra = sorted(present - set(expected))
    made_for = f" (made for {base!r})" if base else ""
    kind = unknown_tensors(extra)
    if kind:  # tensors of a kind jaxfeed cannot apply: named, not a mere mismatch
        raise CheckpointError(
            f"{file} holds {kind} ({', '.join(extra[:3])}), which jaxfeed cannot apply (it "
            "loads LoRA adapters on linear layers); load this adapter with peft"
        )
    if missing or extra:
        parts = [f"missing {', '.join(missing[:3])}" if missing else "",
                 f"extra {', '.join(extra[:3])}" if extra else ""]  # fmt: skip
        raise CheckpointError(
            f"{file}{made_for} does not fit this model: {'; '.join(p for p in parts if p)}"
        )
    stacked: dict[int, tuple[Any, np.ndarray]] = {}  # a stack's variable, set once
    for name, (var, how, transform, index) in expected.items():
        host = np.asarray(weights.get(by_name[name]))
        value = host.T if how == "T" else transform.to_jax(host)
        want = tuple(var.get_value().shape)[0 if index is None else 1 :]
        if tuple(value.shape) != want:
            raise CheckpointError(
                f"{file}{made_for}: tensor {name!r} has shape {list(host.shape)}, this model's "
                f"layer needs {list(want if how != 'T' else want[::-1])} (another base model or "
                "rank)"
            )
        old = var.get_value()
        if index is None:
            var.set_value(jax.device_put(value.astype(old.dtype), old.sharding))
            continue
        if id(var) not in stacked:
            stacked[id(var)] = (var, np.array(jax.device_get(old)))
        stacked[id(var)][1][index] = value
    for var, value in stacked.values():
        var.set_value(jax.device_put(value, var.get_value().sharding))


def _saved_paths(family: Any, config: dict, task: str, heads: set[str]) -> list[tuple]:
    return [(r.hf, r.transform, r.path) for r in family.rules(config, task)
            if _peft_module(family, task, r.hf).rsplit(".", 1)[0] in heads]  # fmt: skip


def merged(model: Any) -> Any:
    """A copy of ``model`` with each adapted (or int8) layer merged back into a plain linear
    layer, ``W + A B * alpha / rank`` (PEFT's ``merge_and_unload``); the copy keeps the hub
    attributes but no ``hub_lora``."""
    out = nnx.clone(model)
    for path, _, _ in linear_modules(out).values():
        parent, attr, node = _module(out, path)
        if isinstance(node, LoRALinear):
            layer = merge(node)
            if isinstance(attr, int):
                parent[attr] = layer
            else:
                setattr(parent, attr, layer)
    out.hub_lora = None
    return out


__all__ = [
    "adapter_config",
    "adapter_tensors",
    "add_lora",
    "default_targets",
    "has_lora",
    "linear_modules",
    "load_adapter",
    "matches",
    "merged",
    "read_adapter",
    "save_adapter",
]
