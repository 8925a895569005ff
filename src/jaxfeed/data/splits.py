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


class NamedSplit(str):
    """The name of one split (``"train"``, ``"test"``, ...).

    >>> from jaxfeed import NamedSplit
    >>> NamedSplit("train") == "train", str(NamedSplit("train"))
    (True, 'train')
    """

    __slots__ = ()

    def __new__(cls, name: str) -> NamedSplit:
        if not isinstance(name, str):
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


__all__ = ["NamedSplit", "Split"]
