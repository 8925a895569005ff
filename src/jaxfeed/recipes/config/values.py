"""The checks and parsers of single option values: image sizes, meshes, sharding rules, model,
optimizer and schedule specs, class weights; ``did you mean`` hints. No JAX, no pyarrow."""

from __future__ import annotations

import difflib
import json
import re
import typing
from typing import Any

from jaxfeed.recipes.config.groups import MAX_IMAGE_SIDE, ConfigError
from jaxfeed.recipes.config.model_spec import HUB_PREFIX, is_hub_model
from jaxfeed.recipes.kinds.builtins import BUILTINS
from jaxfeed.runtime.sharding_grammar import ShardingError, parse_rules


def did_you_mean(name: str, known: typing.Iterable[str], *, quote: bool = True) -> str:
    """`` (did you mean 'x'?)`` for the nearest known name, or nothing.

    >>> did_you_mean("lerning_rate", ["lr", "learning_rate"])
    " (did you mean 'learning_rate'?)"
    >>> did_you_mean("Section", ["sections", "section"])  # the same name in another case first
    " (did you mean 'section'?)"
    """
    known = list(known)
    close = [k for k in known if k.casefold() == name.casefold()]
    close = close or difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {close[0]!r}?)" if quote else f" (did you mean {close[0]}?)"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 epoch``, ``3 epochs``, ``1,437 rows``: a count and its noun (``nouns``: an irregular
    plural).

    >>> plural(1, "epoch"), plural(1437, "row"), plural(2, "batch", "batches")
    ('1 epoch', '1,437 rows', '2 batches')
    """
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error never shows a whole value."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'"


BUILTIN_MODELS = tuple(BUILTINS)  # the --model names of jaxfeed's own models
MODEL_FORMS = (
    f"{', '.join(BUILTIN_MODELS)}, FILE.py:ClassName, package.module.ClassName, hf:ORG/NAME or a "
    "checkpoint folder (./folder)"
)


def _model_form(text: str) -> bool:
    """Whether ``--model`` text is one of :data:`MODEL_FORMS`, spelled right (a checkpoint
    folder as :func:`~jaxfeed.recipes.config.model_spec.is_hub_model` tells it).

    >>> _model_form("cnn"), _model_form("net.py:Net"), _model_form("net:Net"), _model_form("vit")
    (True, True, False, False)
    """
    return bool(
        text in BUILTIN_MODELS
        or re.fullmatch(r".+\.py:[A-Za-z_]\w*", text)
        or re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+", text)
        or re.fullmatch(r"hf:[\w.-]+(/[\w.-]+)?(@[\w./-]+)?", text)  # a Hub checkpoint
        or (is_hub_model(text) and not text.startswith(HUB_PREFIX))  # its folder
    )


def _component(name: str, value: Any, where: str) -> str | dict[str, Any]:
    """A name, or ``{class_path, init_args}`` (a name alone when there are no arguments)."""
    if isinstance(value, dict):
        unknown = set(value) - {"class_path", "init_args"}
        if unknown or not isinstance(value.get("class_path"), str):
            raise ConfigError(
                f"{where}: {name} must be a name or {{class_path: NAME, init_args: {{...}}}}, got "
                f"keys {sorted(map(str, value))[:5]}"
            )
        args = value.get("init_args") or {}
        if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
            raise ConfigError(f"{where}: {name}.init_args must map argument names to values")
        path = _component(name, value["class_path"], where)
        return {"class_path": path, "init_args": dict(args)} if args else path
    path = str(value).strip()
    if name == "model" and not _model_form(path):
        raise ConfigError(f"{where}: model must be {MODEL_FORMS}, got {_short(path)}")
    if name in ("optimizer", "schedule") and not re.fullmatch(
        r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*", path
    ):
        raise ConfigError(
            f"{where}: {name} must be the name of an optax {name}, got {_short(path)}"
        )
    return path


def _class_weights(value: Any, where: str) -> str | list[float]:
    if isinstance(value, str):
        if value.strip() == "balanced":
            return "balanced"
        value = value.split(",")
    try:
        weights = [float(v) for v in value]
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where}: class_weights must be balanced or numbers, one per class, got {_short(value)}"
        ) from None
    if not weights or any(not (w >= 0) for w in weights):
        raise ConfigError(f"{where}: class_weights must be numbers >= 0, got {_short(value)}")
    return weights


def parse_image_size(text: str) -> tuple[int, int]:
    """``"N"`` or ``"HxW"`` as ``(height, width)``; anything else raises ``ConfigError``."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", str(text))
    if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(2)) < 1):
        raise ConfigError(
            f"expected N or HxW with positive integers (e.g. 32 or 24x32), got {_short(text)}"
        )
    height = int(m.group(1))
    width = int(m.group(2)) if m.group(2) else height
    if max(height, width) > MAX_IMAGE_SIDE:
        raise ConfigError(f"expected sides of at most {MAX_IMAGE_SIDE} pixels, got {_short(text)}")
    return height, width


def parse_colour(text: str) -> tuple[int, int, int]:
    """A colour as ``(r, g, b)``: a name Pillow knows (``white``, ``black``, ``grey``...),
    ``#RRGGBB``, ``#RGB`` or ``R,G,B``; anything else raises ``ConfigError``.

    >>> parse_colour("white"), parse_colour("#ff8000"), parse_colour("0, 128, 255")
    ((255, 255, 255), (255, 128, 0), (0, 128, 255))
    """
    import PIL.ImageColor

    value = str(text).strip()
    m = re.fullmatch(r"(\d{1,3})\s*,\s*(\d{1,3})\s*,\s*(\d{1,3})", value)
    if m and all(int(v) <= 255 for v in m.groups()):
        r, g, b = (int(v) for v in m.groups())
        return r, g, b
    try:
        rgb = PIL.ImageColor.getrgb(value)
    except ValueError:
        raise ConfigError(
            f"expected a colour: a name (white, black, ...), #RRGGBB or R,G,B with values in "
            f"0..255, got {_short(text)}"
        ) from None
    return int(rgb[0]), int(rgb[1]), int(rgb[2])


def parse_mesh_text(text: str, where: str = "--mesh") -> dict[str, int]:
    """``"data=4,model=2"`` as ``{"data": 4, "model": 2}`` (checked; no JAX needed).

    >>> parse_mesh_text("data=-1,model=2")
    {'data': -1, 'model': 2}
    """
    axes: dict[str, int] = {}
    for part in str(text).split(","):
        m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=\s*(-1|[1-9]\d*)\s*", part)
        if not m or m.group(1) in axes:
            raise ConfigError(
                f"{where}: mesh must be NAME=SIZE pairs separated by commas, each name once "
                f"(e.g. data=4,model=2; one size may be -1), got {text!r}"
            )
        axes[m.group(1)] = int(m.group(2))
    if list(axes.values()).count(-1) > 1:
        raise ConfigError(f"{where}: at most one mesh axis may have size -1, got {text!r}")
    return axes


def parse_sharding(value: Any, where: str) -> str | dict[str, Any]:
    """``replicate``, ``fsdp``, or a dict (or its JSON text) of logical axis rules: each a mesh
    axis name, a list of them or null, and ``"fsdp": true|false`` (the grammar of
    :func:`jaxfeed.runtime.sharding_grammar.parse_rules`, checked without JAX).

    >>> parse_sharding('{"mlp": "model", "fsdp": true}', "flag")
    {'mlp': 'model', 'fsdp': True}
    """
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError as err:
            raise ConfigError(f"{where}: sharding rules are not valid JSON: {err}") from None
        except RecursionError:
            raise ConfigError(f"{where}: sharding rules are nested too deeply") from None
    try:
        parse_rules(value)
    except ShardingError as err:
        if not err.rule:
            raise ConfigError(
                f"{where}: sharding must be replicate, fsdp or a dict of logical axis rules "
                f'(e.g. {{"mlp": "model"}}), got {value!r}'
            ) from None
        key = err.rule[0]
        raise ConfigError(
            f"{where}: sharding rule {key!r}: expected a mesh axis name, a list of them or "
            f"null{' (fsdp: true or false)' if key == 'fsdp' else ''}, got {value[key]!r}"
        ) from None
    return value if isinstance(value, str) else dict(value)
