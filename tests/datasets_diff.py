"""Helpers for the differential tests: run one snippet on `datasets` and on jaxfeed, compare.

A snippet is a function of the library module (``lib.Dataset``, ``lib.Features``, ...). Its
results are normalised to plain, typed structures (numpy arrays keep dtype and shape, numpy
scalars their type, features their JSON layout, datasets their features, columns and rows) and
must be equal.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

# The differential tests encode the behaviour of datasets 5.2 (the version jaxfeed follows; pinned in
# constraints.txt). make test-min's floors (pyarrow 21) resolve the dev extra to datasets 5.0, whose
# behaviour differs in places jaxfeed does not follow: there they are skipped, with this reason.
datasets = pytest.importorskip("datasets", minversion="5.2")
datasets.disable_progress_bars()

import jaxfeed  # noqa: E402

LIBS = {"datasets": datasets, "jaxfeed": jaxfeed}


def norm(x: Any) -> Any:
    """A comparable, typed form of a result of either library."""
    kind = type(x).__name__
    if kind in ("Dataset",) and hasattr(x, "features"):
        return (
            "Dataset",
            norm(x.features),
            x.num_rows,
            list(x.column_names),
            norm(x.with_format(None)[:] if x.num_rows else {}),
        )
    if kind in ("DatasetDict", "IterableDatasetDict"):
        return (kind, {k: norm(v) for k, v in x.items()})
    if kind == "Features" or (isinstance(x, dict) and x and _all_features(x)):
        return ("Features", _features_dict(x))
    if kind == "Column":
        return ("Column", norm(list(x)))
    if _is_feature(x):
        return ("Feature", _feature_dict(x))
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            return ("ndarray", "O", x.shape, [norm(v) for v in x])
        return ("ndarray", x.dtype.str, x.shape, _floats(x.tolist()))
    if isinstance(x, np.generic):
        return (type(x).__name__, _floats(x.item()))
    if isinstance(x, pa.Table):
        return ("Table", norm(x.to_pydict()))
    if isinstance(x, pa.ChunkedArray | pa.Array):
        return ("Arrow", str(x.type), norm(x.to_pylist()))
    if kind == "DataFrame":
        return ("DataFrame", list(x.columns), [norm(list(x[c])) for c in x.columns])
    if kind == "Series":
        return ("Series", norm(list(x)))
    if hasattr(x, "getpixel") and hasattr(x, "mode"):  # PIL image
        return ("PIL", x.mode, x.size, np.asarray(x).tolist())
    if isinstance(x, dict):
        return {k: norm(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return type(x).__name__, [norm(v) for v in x]
    if isinstance(x, float):
        return ("float", "nan" if math.isnan(x) else x)
    return x


def _floats(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return value


def _is_feature(x: Any) -> bool:
    return type(x).__module__.startswith(
        ("datasets.features", "jaxfeed.data.features")
    ) and hasattr(x, "_type")


def _all_features(x: dict) -> bool:
    return all(
        _is_feature(v) or (isinstance(v, dict) and v and _all_features(v)) for v in x.values()
    )


def _feature_dict(f: Any) -> Any:
    if isinstance(f, dict):
        return {k: _feature_dict(v) for k, v in f.items()}
    out = dict(f.to_dict()) if hasattr(f, "to_dict") else _hf_feature_dict(f)
    return json.loads(json.dumps(out))


def _hf_feature_dict(f: Any) -> Any:
    return datasets.Features({"f": f}).to_dict()["f"]


def _features_dict(feats: Any) -> dict:
    if type(feats).__module__.startswith("datasets"):
        out = datasets.Features(feats).to_dict()
    else:
        out = jaxfeed.Features(feats).to_dict()
    return json.loads(json.dumps(out))  # tuples (datasets' shapes) as lists


def run_both(snippet) -> tuple[Any, Any]:
    return snippet(datasets), snippet(jaxfeed)


def same(snippet) -> Any:
    """Run ``snippet`` on both libraries and assert equal normalised results; return jaxfeed's."""
    hf, jf = run_both(snippet)
    assert norm(jf) == norm(hf), f"\njaxfeed:  {norm(jf)!r}\ndatasets: {norm(hf)!r}"
    return jf


def same_error(snippet) -> tuple[BaseException, BaseException]:
    """Both libraries raise, with the same exception type (jaxfeed's may be a subclass)."""
    errors = []
    for lib in (datasets, jaxfeed):
        try:
            snippet(lib)
        except Exception as err:
            errors.append(err)
        else:
            errors.append(None)
    hf, jf = errors
    assert hf is not None, "datasets did not raise"
    assert jf is not None, f"jaxfeed did not raise (datasets raised {hf!r})"
    assert isinstance(jf, type(hf)), f"jaxfeed raised {jf!r}, datasets raised {hf!r}"
    return hf, jf
