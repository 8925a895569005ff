"""The declared preprocessing of an export: read field by field, refused when malformed."""

import json

import numpy as np
import pytest
from flax import nnx

from jaxfeed import export, load_exported
from jaxfeed.serve.export import ExportError
from jaxfeed.serve.spec import ServingSpec, SpecError, TableColumn

SPEC = ServingSpec(
    kind="table", input_shape=(4,), task="classification", labels=("no", "yes"),
    columns=(TableColumn("area", "numeric", mean=50.0, std=10.0),
             TableColumn("city", "categorical", vocabulary=("oslo", "rome"), impute=True)),
)  # fmt: skip


def test_a_spec_round_trips_and_applies_with_numpy():
    assert ServingSpec.from_dict(json.loads(json.dumps(SPEC.to_dict())), "here") == SPEC
    x = SPEC.model_inputs({"area": [60, 40], "city": ["rome", None]})
    np.testing.assert_array_equal(x, [[1, 0, 1, 0], [-1, 0, 0, 1]])  # a missing city: unknown
    with pytest.raises(SpecError, match="column 'area' is empty or not finite at row 1"):
        SPEC.model_inputs({"area": [60, None], "city": ["rome", "oslo"]})
    with pytest.raises(SpecError, match="the rows have no column 'city'"):
        SPEC.model_inputs({"area": [60]})
    np.testing.assert_allclose(SPEC.outputs(np.array([[0.0, np.log(3.0)]])), [[0.25, 0.75]])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "python"}, "kind must be one of"),
        ({"scale": "__import__('os')"}, "scale must be true or false, got str"),
        ({"columns": [{"name": "a", "kind": "numeric", "std": 0}]}, r"std must be a positive"),
        (
            {"columns": [{"name": "a", "kind": "numeric", "code": "x"}]},
            "unknown column field 'code'",
        ),
        ({"input_shape": [5]}, "make 4 inputs, but input_shape is"),
        ({"labels": []}, "a classification spec needs its labels"),
        ({"version": 99}, "newer than this jaxfeed reads"),
    ],
)
def test_a_malformed_spec_is_refused_naming_the_field(change, message):
    with pytest.raises(SpecError, match=message):
        ServingSpec.from_dict({**SPEC.to_dict(), **change}, "config.json")


def test_an_export_with_a_spec_serves_raw_rows_and_refuses_a_tampered_one(tmp_path):
    model = nnx.Linear(4, 2, rngs=nnx.Rngs(0))
    folder = export(model, tmp_path / "m", example_input=np.zeros((1, 4), np.float32),
                    preprocessing=SPEC)  # fmt: skip
    served = load_exported(folder)
    rows = {"area": [60.0, 30.0], "city": ["rome", "lima"]}
    x = SPEC.model_inputs(rows)
    np.testing.assert_allclose(served.logits(rows), model(x), rtol=1e-6)
    labels, scores = served.predict(rows)
    probabilities = SPEC.outputs(np.asarray(model(x)))
    assert labels == [SPEC.labels[i] for i in probabilities.argmax(-1)]
    np.testing.assert_allclose(scores, probabilities.max(-1), rtol=1e-6)
    np.testing.assert_allclose(served.call(x), model(x), rtol=1e-6)  # the bare function
    config = json.loads((folder / "config.json").read_text())
    config["preprocessing"]["columns"][0]["mean"] = "os.system('x')"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError, match=r"preprocessing.columns\[0\]: mean must be a finite"):
        load_exported(folder)
