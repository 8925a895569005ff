"""A PEFT adapter folder read and checked before anything is applied: ``adapter_config.json``
(:func:`read_adapter_config`) and the one file its weights come from (:func:`adapter_weights`).

Every setting is checked for its type and range, and a wrong one is one
:class:`~jaxfeed.models.hub.files.CheckpointError` naming the file, the field, what was expected
and what was found (never an ``AttributeError``, ``TypeError`` or ``re.error``). Settings jaxfeed
cannot follow (DoRA, rsLoRA, per-module ranks, adapters on some layers only, trained biases, ...:
:data:`UNSUPPORTED`) are refused by name; settings that only shaped how PEFT initialised the
adapters (``init_lora_weights``, ``loftq_config``, ...) or record where they came from are read
and ignored, as PEFT ignores them once an adapter is trained.

A string ``target_modules`` is a regular expression that each module name must match whole
(PEFT's ``re.fullmatch``). Python's matcher backtracks, so a pattern such as ``(a+)+$`` can take
longer than the universe on a 40-character name, and a running match cannot be interrupted. A
pattern is therefore held to a subset that matches in polynomial time on the short names of a
model's modules (:func:`check_pattern`): at most :data:`MAX_PATTERN` characters, no quantifier
inside a repeated part, no repeated choice of alternatives, no back-reference, and at most
:data:`MAX_REPEATS` repeats in all (``.*`` counts as one). PEFT's own patterns
(``.*\\.(q_proj|v_proj)``, ``^(?!.*vision).*\\.(q_proj|k_proj)$``,
``model\\.layers\\.\\d+\\.self_attn\\.(q|v)_proj``) are in it. A library with a time bound was
not taken: ``regex`` (whose matches take a ``timeout``) is no dependency of jaxfeed, and RE2's
linear-time matcher lacks the look-arounds PEFT's patterns use.

>>> check_pattern(r".*\\.(q_proj|v_proj)")
>>> check_pattern(r"(a+)+$")
Traceback (most recent call last):
...
ValueError: '(a+)+$' repeats a part that holds a quantifier (a+ inside (...)+): such a pattern can take exponential time; list the module names instead
>>> pattern_matches(r".*\\.(q_proj|v_proj)", "model.layers.0.self_attn.q_proj")
True
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from re import _constants as sre  # CPython's regular-expression parser: the tree re.compile runs
from re import _parser as sre_parse
from typing import Any

from jaxfeed.models.hub.files import CheckpointError, checkpoint_file, read_json
from jaxfeed.models.lora_settings import LoRA, SettingError

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
MAX_PATTERN = 500  # characters of a regular-expression target_modules (PEFT's are under 100)
MAX_REPEATS = 4  # repeats in one pattern: polynomial time, degree at most 4, on names of ~60 chars
# settings jaxfeed cannot follow, with the value that means "off" (any other refuses the adapter)
UNSUPPORTED: dict[str, Any] = {
    "use_dora": False,  # DoRA: a magnitude vector per adapted layer
    "use_rslora": False,  # rank-stabilised scaling, alpha / sqrt(r)
    "rank_pattern": {},  # another rank for some modules
    "alpha_pattern": {},  # another alpha for some modules
    "layers_to_transform": None,  # adapters on some layers only
    "layers_pattern": None,
    "exclude_modules": None,  # modules target_modules matches, left out
    "bias": "none",  # trained biases in the adapter file ("all", "lora_only")
    "lora_bias": False,  # a bias on lora_B
    "target_parameters": None,  # adapters on parameters (mixtures of experts), not modules
    "trainable_token_indices": None,  # trained rows of the embeddings
    "layer_replication": None,  # layers repeated to make a deeper model
    "alora_invocation_tokens": None,  # activated LoRA: adapters on after given tokens only
    "use_qalora": False,  # quantization-aware LoRA (GPTQ)
    "megatron_config": None,  # Megatron's parallel layers
    "use_bdlora": None,  # block-diagonal A or B
    "arrow_config": None,  # routing among several adapters
    "kasa_config": None,  # KaSA: singular values of the base weights truncated
    "monteclora_config": None,  # Monte Carlo sampling on the adapters
}
# what each unsupported setting is, for the refusal
WHAT = {
    "use_dora": "DoRA (weight-decomposed LoRA)", "use_rslora": "rsLoRA's alpha / sqrt(r) scaling",
    "rank_pattern": "per-module ranks", "alpha_pattern": "per-module alphas",
    "layers_to_transform": "adapters on some layers only",
    "layers_pattern": "adapters on some layers only", "exclude_modules": "excluded modules",
    "bias": "trained biases", "lora_bias": "a bias on lora_B",
    "target_parameters": "adapters on parameters rather than modules",
    "trainable_token_indices": "trained embedding rows", "layer_replication": "replicated layers",
    "alora_invocation_tokens": "activated LoRA (aLoRA)", "use_qalora": "QALoRA",
    "megatron_config": "Megatron layers", "use_bdlora": "block-diagonal LoRA",
    "arrow_config": "Arrow routing", "kasa_config": "KaSA", "monteclora_config": "MonteCLoRA",
}  # fmt: skip
# read and ignored: how PEFT initialised the adapters, where they came from, the file's version
IGNORED = ("peft_type", "task_type", "base_model_name_or_path", "revision", "inference_mode",
           "auto_mapping", "peft_version", "init_lora_weights", "loftq_config", "eva_config",
           "corda_config", "lora_ga_config", "velora_config", "runtime_config", "megatron_core",
           "qalora_group_size", "ensure_weight_tying", "fan_in_fan_out")  # fmt: skip
READ = ("r", "lora_alpha", "lora_dropout", "target_modules", "modules_to_save")


@dataclass(frozen=True)
class AdapterConfig:
    """A checked ``adapter_config.json``: ``lora`` (rank, alpha, dropout; targets unset),
    ``targets`` (module names, or a checked regular expression), ``modules_to_save`` (modules
    saved whole beside the adapters), ``base`` (the base model it was made for, maybe None),
    ``path`` (the file) and ``raw`` (the JSON object as read)."""

    path: Path
    lora: LoRA
    targets: tuple[str, ...] | str
    modules_to_save: tuple[str, ...]
    base: str | None
    raw: dict[str, Any]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _wrong(path: Path, field: str, expected: str, value: Any) -> CheckpointError:
    return CheckpointError(f"{path}: {field} must be {expected}, got {_shown(value)}")


def _names(path: Path, field: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _wrong(path, field, "a list of module names (strings)", value)
    return tuple(value)


def _targets(path: Path, value: Any) -> tuple[str, ...] | str:
    """``target_modules``: a non-empty list of names, or a regular expression (checked)."""
    if value == "all-linear":
        raise CheckpointError(
            f"{path}: target_modules 'all-linear' is PEFT's shorthand, resolved to module names "
            "when an adapter is made (a saved adapter lists them); list the adapted modules "
            '(e.g. ["q_proj", "v_proj"])'
        )
    if isinstance(value, str):
        try:
            check_pattern(value)
        except ValueError as err:
            raise CheckpointError(f"{path}: target_modules: {err}") from None
        return value
    names = _names(path, "target_modules", value)
    if not names:
        raise _wrong(path, "target_modules", "module names or a regular expression", value)
    return names


def _number(path: Path, field: str, value: Any, expected: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong(path, field, expected, value)
    return value


def _lora(path: Path, raw: dict[str, Any]) -> LoRA:
    rank = raw.get("r", 8)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise _wrong(path, "r", "a positive integer (the adapters' rank)", rank)
    alpha = _number(path, "lora_alpha", raw.get("lora_alpha", 8), "a number")
    dropout = raw.get("lora_dropout")
    dropout = (
        0.0 if dropout is None else _number(path, "lora_dropout", dropout, "a number in [0, 1)")
    )
    try:
        return LoRA(rank, alpha, None, float(dropout))
    except SettingError as err:  # alpha not finite, not in (0, MAX_ALPHA], dropout out of [0, 1)
        field = {"alpha": "lora_alpha", "dropout": "lora_dropout"}.get(err.argument, err.argument)
        raise CheckpointError(f"{path}: {field}: {err}") from None


def _off(value: Any, off: Any) -> bool:
    """Whether a setting's ``value`` leaves it off (``off``, null, false or empty; a 0 is a
    value, not false: ``layers_to_transform: 0`` is layer 0)."""
    if value is None or value is False or (isinstance(value, dict | list) and not value):
        return True
    return type(value) is type(off) and value == off


def _refuse_unsupported(path: Path, raw: dict[str, Any]) -> None:
    for key, off in UNSUPPORTED.items():
        value = raw.get(key)
        if not _off(value, off):
            raise CheckpointError(
                f"{path}: {key}={_shown(value)} asks for {WHAT[key]}, which jaxfeed cannot "
                f"follow (it loads plain LoRA adapters: {key} {_shown(off)}); load this adapter "
                "with peft, or train one without it"
            )


def read_adapter_config(folder: str | os.PathLike) -> AdapterConfig:
    """``folder``'s ``adapter_config.json`` checked field by field (see the module docstring).

    >>> import tempfile, json
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / CONFIG).write_text(json.dumps({"peft_type": "LORA", "r": 4,
    ...     "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}))
    >>> read_adapter_config(folder).lora.scaling, read_adapter_config(folder).targets
    (2.0, ('q_proj', 'v_proj'))
    >>> _ = (folder / CONFIG).write_text(json.dumps({"peft_type": "LORA", "r": "4"}))
    >>> read_adapter_config(folder)
    Traceback (most recent call last):
    ...
    jaxfeed.models.hub.files.CheckpointError: .../adapter_config.json: r must be a positive integer (the adapters' rank), got '4'
    """
    folder = Path(folder)
    path = folder / CONFIG
    if checkpoint_file(folder, CONFIG) is None:
        raise CheckpointError(f"{folder} has no {CONFIG}: not a PEFT adapter folder")
    raw = read_json(path, "PEFT adapter config")
    if not isinstance(raw, dict):
        raise CheckpointError(
            f"{path} must hold a JSON object (PEFT's adapter settings), got {type(raw).__name__}"
        )
    if raw.get("peft_type") != "LORA":
        raise CheckpointError(
            f"{path}: peft_type must be 'LORA' (jaxfeed loads LoRA adapters), got "
            f"{_shown(raw.get('peft_type'))}"
        )
    _refuse_unsupported(path, raw)
    lora = _lora(path, raw)
    targets = _targets(path, raw.get("target_modules"))
    saved = raw.get("modules_to_save")
    saved = () if saved is None else _names(path, "modules_to_save", saved)
    base = raw.get("base_model_name_or_path")
    return AdapterConfig(path, lora, targets, saved, base if isinstance(base, str) else None, raw)


def adapter_weights(folder: str | os.PathLike) -> Path:
    """The adapter's weights file, ``adapter_model.safetensors``, whatever else ``folder``
    holds (a ``model.safetensors`` beside it is a full model's, never read as the adapter);
    refused when absent, naming what is there."""
    folder = Path(folder)
    found = checkpoint_file(folder, WEIGHTS)
    if found is not None:
        return found
    pickled = sorted(p.name for p in folder.glob("*.bin"))
    if pickled:
        raise CheckpointError(
            f"{folder} has only pickled weights ({', '.join(pickled)}), which jaxfeed never "
            f"unpickles: expected {WEIGHTS} (peft writes it with safe_serialization=True, the "
            "default)"
        )
    others = sorted(p.name for p in folder.glob("*.safetensors"))
    if others:
        raise CheckpointError(
            f"{folder} holds {', '.join(others[:3])} but no {WEIGHTS}: an adapter's weights are "
            f"{WEIGHTS}; a model.safetensors is a whole model's (give its folder as the model, "
            "not as adapter=)"
        )
    raise CheckpointError(f"{folder} has no weights: expected {WEIGHTS}")


# ---------------------------------------------------------------------------------- patterns
_REPEATS = {sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", sre.MAX_REPEAT)}


def _parts(value: Any) -> list[Any]:
    """The sub-patterns inside one parsed item's arguments."""
    if isinstance(value, sre_parse.SubPattern):
        return [value]
    if isinstance(value, tuple | list):
        return [p for v in value for p in _parts(v)]
    return []


def _walk(pattern: str, tree: Any, repeated: bool, count: list[int]) -> None:
    """Refuse what can backtrack without bound in ``tree``; ``repeated``: inside a repeat."""
    for op, av in tree:
        if op in (sre.GROUPREF, sre.GROUPREF_EXISTS):
            raise ValueError(
                f"{pattern!r} refers back to a group: not allowed in target_modules; list the "
                "module names instead"
            )
        if repeated and op is sre.BRANCH:
            raise ValueError(
                f"{pattern!r} repeats a choice of alternatives ((a|ab)*): such a pattern can "
                "take exponential time; list the module names instead"
            )
        if op in _REPEATS and av[1] > 1:
            if repeated:
                raise ValueError(
                    f"{pattern!r} repeats a part that holds a quantifier (a+ inside (...)+): such "
                    "a pattern can take exponential time; list the module names instead"
                )
            count[0] += 1
            _walk(pattern, av[2], True, count)
            continue
        for part in _parts(av):
            _walk(pattern, part, repeated, count)


def check_pattern(pattern: str) -> None:
    """Refuse (``ValueError``, saying why) a regular expression outside the subset that
    matches module names in bounded time (see the module docstring), or that is not one."""
    if len(pattern) > MAX_PATTERN:
        raise ValueError(
            f"a regular expression of {len(pattern)} characters, more than {MAX_PATTERN}; list "
            "the module names instead"
        )
    try:
        tree = sre_parse.parse(pattern)
    except (re.error, OverflowError, RecursionError) as err:
        raise ValueError(f"{_shown(pattern)} is not a regular expression ({err})") from None
    count = [0]
    _walk(pattern, tree, False, count)
    if count[0] > MAX_REPEATS:
        raise ValueError(
            f"{_shown(pattern)} holds {count[0]} repeats (*, +, {{m,n}}), more than "
            f"{MAX_REPEATS}: its matching time grows as the name's length to that power; list "
            "the module names instead"
        )


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    check_pattern(pattern)
    return re.compile(pattern)


def pattern_matches(pattern: str, name: str) -> bool:
    """Whether ``name`` matches the regular expression ``pattern`` whole (PEFT's string
    ``target_modules``), the pattern checked first (:func:`check_pattern`)."""
    return _compiled(pattern).fullmatch(name) is not None


# a tensor name's ending, for an adapter whose tensors jaxfeed does not know (what it holds)
KINDS = {
    "lora_embedding_A": "adapters on an embedding layer",
    "lora_embedding_B": "adapters on an embedding layer",
    "lora_magnitude_vector": "DoRA's magnitude vectors",
    "lora_A.bias": "a bias on the adapters", "lora_B.bias": "a bias on the adapters",
    "trainable_tokens": "trained embedding rows",
}  # fmt: skip


def unknown_tensors(names: list[str]) -> str | None:
    """What the adapter tensors ``names`` (ones no layer takes) hold, when jaxfeed knows the
    kind (adapters on an embedding layer, DoRA's magnitudes, ...), in words; else None."""
    found = sorted({kind for n in names for end, kind in KINDS.items() if end in n})
    return ", ".join(found) or None


__all__ = [
    "CONFIG",
    "MAX_PATTERN",
    "MAX_REPEATS",
    "UNSUPPORTED",
    "WEIGHTS",
    "AdapterConfig",
    "adapter_weights",
    "check_pattern",
    "pattern_matches",
    "read_adapter_config",
    "unknown_tensors",
]
