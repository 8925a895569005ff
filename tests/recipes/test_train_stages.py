"""The training recipe's stages (issue 50): one ``Run`` record flows through open, plan, build,
fit and finish; ``config.json`` keeps the keys, in the order, that earlier releases wrote (new
runs, resumed runs carrying values over, early stopping recorded as the run ends); no function of
the recipe grows past 80 lines."""

import ast
import json
from pathlib import Path
from types import SimpleNamespace

from jaxfeed.recipes.config import RunConfig, RunRecord
from jaxfeed.recipes.train import Run, TrainResult, follow_umask, train, unused_axes
from jaxfeed.recipes.train import record as recordmod

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
        "early_stopping": {},
    }  # fmt: skip
    assert _keys(_run(**everything)) == [
        *HEAD, "budget", "pretrained", "class_weights", "lr_logged", "lr_finder",
        "pretrained_eval", "model_code", "early_stopping",
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


def test_config_json_keys_of_a_run_and_its_resume(tmp_path):
    """A run with early stopping, then resumed: ``config.json``'s keys as earlier releases wrote
    them (the resumed run writes the budget and stopping state it carries over first)."""
    out = tmp_path / "run"
    config = RunConfig(data="digits", epochs=1, patience=1, out=str(out), max_steps=4)
    first = train(config, say=lambda *a, **k: None, verbose=0)
    assert isinstance(first, TrainResult) and first.best is not None
    saved = json.loads((out / "config.json").read_text())
    assert list(saved) == [*HEAD, "budget", "class_weights", "lr_logged", "early_stopping"]
    resumed = RunConfig(out=str(out), resume=True, epochs=2, max_steps=8)
    train(resumed, say=lambda *a, **k: None, verbose=0)
    again = json.loads((out / "config.json").read_text())
    assert list(again) == [*HEAD, "budget", "early_stopping", "class_weights", "lr_logged"]
    assert again["data_fingerprint"] == saved["data_fingerprint"]


def test_the_public_names_stay_importable():
    assert callable(train) and callable(follow_umask) and callable(unused_axes)
    assert recordmod.CARRIED_KEYS == ("model_code", "budget", "early_stopping")


def test_no_function_of_the_training_recipe_is_over_80_lines():
    folder = Path(recordmod.__file__).parent
    long = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long
