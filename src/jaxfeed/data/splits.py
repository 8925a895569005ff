"""Split names, as ``datasets.Split`` / ``datasets.NamedSplit`` spell them.

A :class:`NamedSplit` is a ``str`` (so it indexes a ``DatasetDict`` and goes to
``load_dataset(split=)`` as is) that shows itself as `datasets` does.

>>> from jaxfeed import DatasetDict, Split
>>> str(Split.TRAIN), Split.TRAIN == "train"
('train', True)
>>> Split.TEST
NamedSplit('test')
"""

from __future__ import annotations

import re
from typing import Any


class NamedSplit(str):
    """The name of one split (``"train"``, ``"test"``, ...).

    >>> from jaxfeed import NamedSplit
    >>> NamedSplit("train") == "train", str(NamedSplit("train"))
    (True, 'train')
    """

    __slots__ = ()

    def __new__(cls, name: str) -> NamedSplit:
        if not isinstance(name, str):
            # `datasets`' own NamedSplit / Split objects (not str) carry the name in ``_name``
            inner = getattr(name, "_name", None)
            if type(name).__name__.startswith("NamedSplit") and isinstance(inner, str):
                name = inner
            else:
                raise TypeError(f"a split name is a str, got {type(name).__name__}")
        return super().__new__(cls, name)

    def __str__(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"NamedSplit({str.__str__(self)!r})"


class Split:
    """The standard split names; ``Split("x")`` makes a :class:`NamedSplit`.

    >>> from jaxfeed import Split
    >>> Split.TRAIN, Split("dev")
    (NamedSplit('train'), NamedSplit('dev'))
    """

    TRAIN = NamedSplit("train")
    TEST = NamedSplit("test")
    VALIDATION = NamedSplit("validation")
    ALL = NamedSplit("all")

    def __new__(cls, name: str) -> NamedSplit:  # type: ignore[misc]
        return NamedSplit(name)


_NAME = re.compile(r"^\w+(\.\w+)*$")


def reader_split(split: Any) -> NamedSplit | None:
    r"""The ``split=`` of ``Dataset.from_csv``/``from_json``/``from_parquet`` checked as `datasets`
    checks it: a name (a str, or a ``NamedSplit``/``Split`` of jaxfeed or of `datasets`); a split
    expression such as ``"train[:50%]"`` or ``Split.ALL`` is a ``ValueError`` (they select rows of
    a dataset's splits, which only ``load_dataset`` has), never a name that reads every row.

    >>> reader_split(Split.TEST), reader_split(None)
    (NamedSplit('test'), None)
    >>> reader_split("train[:50%]")
    Traceback (most recent call last):
    ...
    ValueError: Split name should match '^\w+(\.\w+)*$'' but got 'train[:50%]'.
    """
    if split is None:
        return None
    name = NamedSplit(split)
    if name == "all":
        raise ValueError(
            "`all` is a special split keyword corresponding to the union of all splits, so cannot "
            "be used as key in ._split_generator()."
        )
    if not _NAME.match(name):
        raise ValueError(f"Split name should match '{_NAME.pattern}'' but got '{name}'.")
    return name


__all__ = ["NamedSplit", "Split"]
