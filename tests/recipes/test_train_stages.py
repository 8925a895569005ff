"""The training recipe's stages (issue 50): one ``Run`` record flows through open, plan, build,
fit and finish; ``config.json`` keeps the keys, in the order, that earlier releases wrote (new
runs, resumed runs carrying values over, early stopping recorded as the run ends). Function lengths
are tests/contracts/test_function_length.py's."""

import json
from pathlib import Path
from types import SimpleNamespace

import jax
import pytest

from jaxfeed.recipes.config import RunConfig, RunRecord
from jaxfeed.recipes.config.model_spec import parse_model
from jaxfeed.recipes.kinds.base import Kind
from jaxfeed.recipes.train import Run, TrainResult, follow_umask, train, unused_axes
from jaxfeed.recipes.train import record as recordmod
from jaxfeed.recipes.train.finish import may_skip_export

HEAD = [
    "format", "version", "jaxfeed", "options", "task", "labels", "preprocess", "best_metric",
    "best_mode", "data_kind", "eval_split", "test_split", "processes", "devices",
    "data_fingerprint",
]  # fmt: skip


def _run(**values) -> Run:
    splits = SimpleNamespace(eval_name="validation", test_name=None, eval=object())
    data = SimpleNamespace(
        task="classification", labels=["a", "b"], splits=splits, source=SimpleNamespace(kind="csv")
    )
    return Run(RunConfig(), Path("run"), True, print, run_data=data, **values)


def _keys(run: Run) -> list[str]:
    return list(json.loads(RunRecord(run.config, run.resolved()).to_json()))


def test_a_new_runs_resolved_values_keep_the_order_earlier_releases_wrote():
    everything = {
        "budget": {}, "pretrained": {}, "lr_finder": {}, "pretrained_eval": {}, "model_code": {},
        "early_stopping": {}, "baselines": {}, "choice": {},
    }  # fmt: skip
    assert _keys(_run(**everything)) == [
        *HEAD, "budget", "pretrained", "class_weights", "lr_logged", "lr_finder",
        "pretrained_eval", "model_code", "early_stopping", "baselines", "choice",
    ]  # fmt: skip
    # None is not recorded, except the class weights and whether the rate is logged
    assert _keys(_run()) == [*HEAD, "class_weights", "lr_logged"]


def test_a_resumed_run_writes_what_it_carries_over_first():
    carried = _run(
        carried=("model_code", "budget", "early_stopping"), model_code=None, budget={},
        early_stopping={}, pretrained={}, pretrained_eval={},
    )  # fmt: skip
    assert _keys(carried) == [
        *HEAD, "model_code", "budget", "early_stopping", "pretrained", "class_weights",
        "lr_logged", "pretrained_eval",
    ]  # fmt: skip
    # a record without early-stopping state: the state the run ends with comes last
    later = _run(carried=("budget",), budget={}, early_stopping={"wait": 0})
    assert _keys(later)[-4:] == ["budget", "class_weights", "lr_logged", "early_stopping"]


def test_config_json_keys_of_a_run_and_its_resume(tmp_path, monkeypatch):
    """A run with early stopping, then resumed: ``config.json``'s keys as earlier releases wrote
    them (the resumed run writes the budget and stopping state it carries over first). Called
    from Python, a run leaves the caller's compiled functions in JAX's caches; the command's
    (``own_process``) empties them once its model is built (counted here, not done: emptying
    this worker's caches would cost every later test of the worker its compiled programs)."""
    out = tmp_path / "run"
    config = RunConfig(data="digits", model="mlp", epochs=1, patience=1, out=str(out), max_steps=4)
    callers = jax.jit(lambda x: 2 * x)
    callers(1.0)
    emptied = []
    monkeypatch.setattr(jax, "clear_caches", lambda: emptied.append(True))
    first = train(config, say=lambda *a, **k: None, verbose=0)
    assert isinstance(first, TrainResult) and first.best is not None
    assert callers._cache_size() == 1 and not emptied
    saved = json.loads((out / "config.json").read_text())
    later = ["budget", "class_weights", "lr_logged", "early_stopping", "baselines"]
    assert list(saved) == [*HEAD, *later]  # a model given: baselines, no choice
    resumed = RunConfig(out=str(out), model="mlp", resume=True, epochs=2, max_steps=8)
    train(resumed, say=lambda *a, **k: None, verbose=0, own_process=True)
    assert emptied == [True]
    again = json.loads((out / "config.json").read_text())
    carried = ["budget", "early_stopping", "baselines"]
    assert list(again) == [*HEAD, *carried, "class_weights", "lr_logged"]
    assert again["data_fingerprint"] == saved["data_fingerprint"]


def test_the_public_names_stay_importable():
    assert callable(train) and callable(follow_umask) and callable(unused_axes)
    assert recordmod.CARRIED_KEYS[:3] == ("model_code", "budget", "early_stopping")


TINY = """
from flax import nnx


class Tiny(nnx.Module):
    def __init__(self, num_classes, input_shape, *, rngs):
        size = 1
        for d in input_shape:
            size *= d
        self.linear = nnx.Linear(size, num_classes, rngs=rngs)

    def __call__(self, x):
        return self.linear(x.reshape((x.shape[0], -1)))
"""


def _untraceable(*args, **kwargs):
    raise RuntimeError("jax.export cannot trace this model")


@pytest.mark.parametrize("model", ["file", "module"])
def test_a_model_of_your_own_that_does_not_export_leaves_a_note(model, tmp_path, monkeypatch):
    """A model of your own (a file, or a module imported by name) that ``jax.export`` cannot
    trace: the run finishes without ``model/`` and says so (eval and predict use checkpoints/).
    A module named ``package.module.Class`` was not recognised as your own: the run failed."""
    (tmp_path / "tiny_net.py").write_text(TINY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(Kind, "export", _untraceable)
    spec = f"{tmp_path / 'tiny_net.py'}:Tiny" if model == "file" else "tiny_net.Tiny"
    out, lines = tmp_path / "run", []
    config = RunConfig(data="digits", model=spec, epochs=1, max_steps=2, out=str(out))
    result = train(config, say=lambda *a, **k: lines.append(" ".join(map(str, a))), verbose=0)
    assert result.best is not None and not (out / "model").exists()
    assert any(
        line.startswith("note: model/ not written (RuntimeError: jax.export") for line in lines
    )


def test_a_built_in_model_that_does_not_export_fails_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(Kind, "export", _untraceable)
    config = RunConfig(data="digits", model="mlp", epochs=1, max_steps=2, out=str(tmp_path / "r"))
    with pytest.raises(RuntimeError, match="cannot trace"):
        train(config, say=lambda *a, **k: None, verbose=0)


def test_which_models_may_skip_the_export():
    """Models of your own only: a Hub checkpoint is jaxfeed's own family, whether named
    ``hf:ORG/NAME`` or by its folder (the old rule, ``:`` in ``--model``, let ``hf:`` ids pass)."""
    names = ("net.py:Net", "pkg.nets.Net", "hf:org/bert", "./bert", "cnn")
    from jaxfeed.recipes.sources.registry import source_for

    skips = [may_skip_export(source_for(parse_model(m))) for m in names]
    assert skips == [True, True, False, False, False]
