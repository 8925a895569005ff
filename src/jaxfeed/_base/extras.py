"""Optional parts of jaxfeed and the extra that installs each.

The core install (``pip install jaxfeed``) brings what datasets, the loader and the trainer need.
Audio decoding (``jaxfeed[audio]``: soundfile, soxr), the Hugging Face Hub (``jaxfeed[hub]``),
pandas (``jaxfeed[pandas]``), TensorBoard logs (``jaxfeed[tensorboard]``), Spark (``jaxfeed[spark]``:
``from_spark``) and Ray (``jaxfeed[ray]``: ``from_ray``, ``to_ray``) are extras; using one
that is missing raises :class:`MissingExtraError` naming the extra.

>>> require("json", "none", "reading JSON").__name__
'json'
>>> require("no_such_module_xyz", "audio", "decoding audio")
Traceback (most recent call last):
...
jaxfeed._base.extras.MissingExtraError: decoding audio needs no_such_module_xyz, an optional part of jaxfeed: pip install 'jaxfeed[audio]'
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` (``what`` needs it), or raise :class:`MissingExtraError` naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        if getattr(err, "name", module) not in (None, module, module.split(".")[0]):
            raise  # the module is there but one of its own imports failed: show that
        raise MissingExtraError(
            f"{what} needs {module.split('.')[0]}, an optional part of jaxfeed: "
            f"pip install 'jaxfeed[{extra}]'"
        ) from err
