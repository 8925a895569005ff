"""Where jaxfeed deliberately refuses a value that `datasets` silently changes.

Each case runs on both libraries: `datasets` returns a changed value (checked here, so the table
in the README stays true), jaxfeed raises a clear error naming the column and row.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from datasets_diff import datasets, jaxfeed


def store(lib, values, feature):
    return lib.Dataset.from_dict({"x": values}, features=lib.Features({"x": feature(lib)}))


CASES = [
    # (id, values, feature, what datasets stores, jaxfeed's error)
    (
        "str-into-bool",
        ["True", "False"],
        lambda lib: lib.Value("bool"),
        [True, True],
        r"column 'x', row 0: expected a bool value",
    ),
    ("fraction-into-int", [1, 2.5], lambda lib: lib.Value("int64"), [1, 2], r"column 'x', row 1"),
    (
        "float16-overflow",
        [1.0, 1e6],
        lambda lib: lib.Value("float16"),
        [1.0, float("inf")],
        r"column 'x', row 1: expected a float16 value \(it overflows to inf\)",
    ),
    (
        "float32-overflow",
        [1.0, 1e300],
        lambda lib: lib.Value("float32"),
        [1.0, float("inf")],
        r"column 'x', row 1: .*overflows to inf",
    ),
    (
        "float32-overflow-in-lists",
        [[1.0], [1.0, 1e300]],
        lambda lib: lib.List(lib.Value("float32")),
        [[1.0], [1.0, float("inf")]],
        r"column 'x', row 1: .*overflows to inf",
    ),
]


@pytest.mark.parametrize(
    ("values", "feature", "hf_stored", "error"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_stored_values_that_would_change(values, feature, hf_stored, error):
    assert store(datasets, values, feature)["x"] == hf_stored
    with pytest.raises(jaxfeed.FeatureError, match=error):
        store(jaxfeed, values, feature)


def test_narrowing_float_casts_that_overflow():
    hf = datasets.Dataset.from_dict({"x": [1.0, 1e300]}).cast_column("x", datasets.Value("float32"))
    assert hf["x"] == [1.0, float("inf")]
    ds = jaxfeed.Dataset.from_dict({"x": [1.0, 1e300]})
    with pytest.raises(jaxfeed.FeatureError, match=r"column 'x', row 1"):
        ds.cast_column("x", jaxfeed.Value("float32"))
    with pytest.raises(jaxfeed.FeatureError, match=r"column 'x', row 0"):
        jaxfeed.Dataset.from_dict(
            {"x": np.array([7e4])}, features=jaxfeed.Features({"x": jaxfeed.Value("float16")})
        )
    # Precision loss alone is not refused (float64 -> float32 rounds, as everywhere).
    assert jaxfeed.Dataset.from_dict({"x": [0.1]}).cast_column("x", jaxfeed.Value("float32"))["x"][
        0
    ] == np.float32(0.1)


def test_ints_past_int32_in_the_jax_format():
    hf = datasets.Dataset.from_dict({"x": [2**40]}).with_format("jax")
    assert int(hf[0]["x"]) == 0  # wrapped around
    ds = jaxfeed.Dataset.from_dict({"x": [1, 2**40]}).with_format("jax")
    with pytest.raises(
        OverflowError, match=r"column 'x', row 1: value 1099511627776 does not fit int32"
    ):
        ds[:]


@pytest.mark.parametrize(
    ("pixels", "wrapped"),
    [
        (np.array([[2**40, 1]], dtype=np.int64), [[0, 1]]),  # (H, W): int32
        (np.array([[[256, 1, 2]]], dtype=np.int64), [[[0, 1, 2]]]),  # (H, W, C): uint8
    ],
    ids=["gray-int32", "colour-uint8"],
)
def test_int64_image_pixels_that_would_wrap(pixels, wrapped):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = datasets.Dataset.from_dict(
            {"i": [pixels]}, features=datasets.Features({"i": datasets.Image()})
        )
        assert hf.with_format("numpy")[0]["i"].tolist() == wrapped  # downcast, wrapped around
    with pytest.raises(jaxfeed.FeatureError, match=r"column 'i', row 0: .*do not fit"):
        jaxfeed.Dataset.from_dict(
            {"i": [pixels]}, features=jaxfeed.Features({"i": jaxfeed.Image()})
        )


def test_map_rows_with_keys_the_first_row_did_not_return():
    def first_empty(row):
        return {} if row["x"] == 1 else {"y": row["x"]}

    hf = datasets.Dataset.from_dict({"x": [1, 2, 3]}).map(first_empty)
    assert hf.column_names == ["x"]  # the "y" values of rows 1 and 2 are dropped
    with pytest.raises(KeyError, match=r"map: row 1 returned keys \['y'\], but row 0 returned"):
        jaxfeed.Dataset.from_dict({"x": [1, 2, 3]}).map(first_empty)


@pytest.mark.parametrize(
    ("feature", "values"),
    [
        (lambda lib: lib.ClassLabel(names=["a", "b"]), [0, None]),
        (lambda lib: lib.Array2D((1, 2), "float32"), [[[1.0, 2.0]], None]),
    ],
    ids=["class-label", "array2d"],
)
def test_missing_values_in_the_jax_format(feature, values):
    feats = lambda lib: lib.Features({"y": feature(lib)})  # noqa: E731
    hf = datasets.Dataset.from_dict({"y": values}, features=feats(datasets))
    assert np.isnan(np.asarray(hf.with_format("numpy")[:]["y"], dtype=float)[1]).all()
    jf = jaxfeed.Dataset.from_dict({"y": values}, features=feats(jaxfeed))
    assert np.isnan(np.asarray(jf.with_format("numpy")[:]["y"], dtype=float)[1]).all()
    with pytest.raises(ValueError, match=r"column 'y', row 1: the value is missing"):
        jf.with_format("jax")[:]
