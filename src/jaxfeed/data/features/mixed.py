"""``on_mixed_types="use_json"``: where values of one column differ in kind, store ``Json`` there.

As `datasets` does, the places are found in the values themselves: dicts whose keys differ from
row to row (or that are empty), a place holding dicts or lists in some rows and scalars in
others, or scalars Arrow cannot store in one type (``[-1, "foo"]``). Each place is a path of
dict keys and ``0`` for "inside a list"; the feature inferred for the rest of the column gets a
``Json()`` at each path, so the other fields keep their plain types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from jaxfeed.data.features.json import Json, dumps
from jaxfeed.data.features.sequence import Sequence
from jaxfeed.data.features.struct import FeatureLike

Path = list[str | int]
_SCALARS = (bool, int, float, str, bytes)


def json_paths(values: Any, allow_root: bool = True) -> list[Path]:
    """The paths inside ``values`` (one column's Python values) that hold mixed types.

    >>> json_paths([{"a": 0}, {"b": 0}])
    [[]]
    >>> json_paths([[{"a": 1}], [{"a": "x"}]])
    [[0, 'a']]
    """
    found: list[Path] = []
    pending: list[tuple[Path, list]] = [([], list(values))]
    while pending:
        path, content = pending.pop(0)
        content = [x for x in content if x is not None]
        if not content:
            continue
        if all(isinstance(x, Mapping) for x in content):
            keys = set(content[0])
            if (allow_root or path) and (any(set(x) != keys for x in content) or not keys):
                found.append(path)
                continue
            names = dict.fromkeys(k for x in content for k in x)
            pending.extend(([*path, k], [x[k] for x in content if k in x]) for k in names)
        elif all(isinstance(x, list | tuple) for x in content):
            pending.append(([*path, 0], [v for x in content for v in x]))
        elif any(isinstance(x, Mapping | list | tuple) for x in content):
            found.append(path)
        elif all(isinstance(x, _SCALARS) for x in content) and (allow_root or path):
            try:
                pa.array(content, from_pandas=False)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                found.append(path)
    return found


def encode_at(value: Any, path: Path) -> Any:
    """``value`` with the object at ``path`` replaced by its JSON text."""
    if value is None:
        return None
    if not path:
        return dumps(value)
    head, rest = path[0], path[1:]
    if head == 0:
        return [encode_at(v, rest) for v in value]
    if head not in value:
        return value
    return {**value, head: encode_at(value[head], rest)}


def with_json_at(feature: FeatureLike, path: Path) -> FeatureLike:
    """``feature`` with ``Json()`` at ``path``."""
    if not path:
        return Json()
    head, rest = path[0], path[1:]
    if head == 0 and isinstance(feature, Sequence):
        return type(feature)(with_json_at(feature.feature, rest), length=feature.length)
    if isinstance(feature, Mapping) and head in feature:
        return {**feature, head: with_json_at(feature[head], rest)}
    return feature
