"""``--model`` decoded once: :class:`ModelSpec`, what every later step of a run reads (no step
parses the option's text again). No JAX, no pyarrow.

* ``builtin``: a name of :data:`jaxfeed.recipes.kinds.builtins.BUILTINS` (``cnn``, ``mlp``...);
* ``hub``: ``hf:ORG/NAME`` or a local checkpoint folder (a path with a ``/`` or starting with
  ``.``/``~``, and no ``:``);
* ``file``: ``FILE.py:ClassName``, a model class of your own in a file;
* ``module``: ``package.module.ClassName``, one importable by name.

>>> parse_model("cnn")
ModelSpec(source='builtin', name='cnn', init_args={}, path=None)
>>> parse_model({"class_path": "net.py:Net", "init_args": {"width": 8}})
ModelSpec(source='file', name='Net', init_args={'width': 8}, path='net.py')
>>> spec = parse_model("hf:google/vit-base-patch16-224")
>>> spec.source, spec.text, spec.short
('hub', 'hf:google/vit-base-patch16-224', 'vit-base-patch16-224')
>>> parse_model(None) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from jaxfeed.recipes.kinds.builtins import BUILTINS

HUB_PREFIX = "hf:"
Source = Literal["builtin", "hub", "file", "module"]


@dataclass(frozen=True)
class ModelSpec:
    """The run's ``--model``: where the model comes from (``source``), its ``name`` (a built-in's
    name, a Hub id or folder as given, a class name), ``--model.init_args`` and ``path`` (the
    ``.py`` file of a ``file`` model; the folder of a local checkpoint)."""

    source: Source
    name: str
    init_args: dict[str, Any] = field(default_factory=dict, hash=False)
    path: str | None = None

    @property
    def text(self) -> str:
        """``--model`` as given (without init_args): the name errors and records show.

        >>> parse_model("m.py:Net").text, parse_model("pkg.nets.Net").text
        ('m.py:Net', 'pkg.nets.Net')
        """
        if self.source == "file":
            return f"{self.path}:{self.name}"
        if self.source == "hub" and self.path is not None:
            return self.path
        return self.name

    @property
    def short(self) -> str:
        """The model's part of a default run folder name: a checkpoint's last path part, a
        file's class name, else the name as given."""
        if self.source == "hub":
            return Path(self.text.removeprefix(HUB_PREFIX)).name
        return self.name

    def names_builtin(self, name: str) -> bool:
        """Whether ``--model`` is jaxfeed's built-in model ``name``.

        >>> parse_model("cnn").names_builtin("cnn"), parse_model("net.py:cnn").names_builtin("cnn")
        (True, False)
        """
        return self.source == "builtin" and self.name == name


def is_hub_model(text: Any) -> bool:
    """Whether ``--model`` text names a Hub checkpoint: ``hf:ORG/NAME``, or a local folder (a path
    with a ``/`` or starting with ``.``/``~``, and no ``:``).

    >>> is_hub_model("hf:google/vit-base-patch16-224"), is_hub_model("cnn"), is_hub_model("m.py:Net")
    (True, False, False)
    """
    if not isinstance(text, str) or not text:
        return False
    if text.startswith(HUB_PREFIX):
        return True
    return ":" not in text and ("/" in text or text.startswith((".", "~")))


def parse_model(value: Any) -> ModelSpec | None:
    """``--model`` (a name, or ``{class_path, init_args}``) as a :class:`ModelSpec`; None when it
    is not given (the input kind's default model then: :mod:`jaxfeed.recipes.kinds`)."""
    if value is None:
        return None
    if isinstance(value, dict):
        text, init_args = value["class_path"], dict(value.get("init_args") or {})
    else:
        text, init_args = value, {}
    text = str(text)
    if is_hub_model(text):
        path = None if text.startswith(HUB_PREFIX) else text
        return ModelSpec("hub", text, init_args, path)
    if ":" in text:
        file, _, name = text.rpartition(":")
        return ModelSpec("file", name, init_args, file)
    if text in BUILTINS:
        return ModelSpec("builtin", text, init_args)
    return ModelSpec("module", text, init_args)


__all__ = ["HUB_PREFIX", "ModelSpec", "is_hub_model", "parse_model"]
