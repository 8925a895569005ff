"""The choice of a run's model between its default and the linear baseline
(``recipes/train/candidates``), in this process: which figure decides, and a run folder whose
swap of checkpoints was cut short, completed by the next reader (``recipes/run.settle_choice``)
or left alone when ``config.json`` never recorded the choice."""

import pytest

from jaxfeed.recipes.config import ConfigError, RunConfig, RunRecord
from jaxfeed.recipes.run import CHOSEN, settle_choice
from jaxfeed.recipes.train.candidates import _decide


@pytest.mark.parametrize(
    ("mine", "theirs", "expected"),
    [
        ({"eval_accuracy": 0.8, "eval_loss": 0.9}, {"eval_accuracy": 0.7, "eval_loss": 0.5},
         (True, "eval_accuracy")),  # more accurate: chosen, whatever the loss
        ({"eval_accuracy": 0.7, "eval_loss": 0.1}, {"eval_accuracy": 0.8, "eval_loss": 0.5},
         (False, "eval_accuracy")),
        ({"eval_accuracy": 0.75, "eval_loss": 0.4}, {"eval_accuracy": 0.75, "eval_loss": 0.5},
         (True, "eval_loss")),  # tied accuracy: the loss decides
        ({"eval_accuracy": 0.75, "eval_loss": 0.6}, {"eval_accuracy": 0.75000001, "eval_loss": 0.5},
         (False, "eval_loss")),  # float32 sums of the same count: a tie
        ({"eval_accuracy": 1.0, "eval_loss": 0.2}, {"eval_accuracy": 1.0, "eval_loss": 0.2},
         (True, "eval_accuracy")),  # tied on both: the simpler model
        ({"eval_accuracy": 0.9}, {"eval_loss": 0.2}, None),  # a figure missing: no choice
    ],
)  # fmt: skip
def test_the_accuracy_decides_then_the_loss_then_the_simpler_model(mine, theirs, expected):
    assert _decide("classification", mine, theirs) == expected


def test_a_regression_is_decided_on_its_loss():
    assert _decide("regression", {"eval_loss": 0.30}, {"eval_loss": 0.31}) == (True, "eval_loss")
    assert _decide("regression", {"eval_loss": 0.32}, {"eval_loss": 0.31}) == (False, "eval_loss")


def _folder(tmp_path, choice):
    run = tmp_path / "run"
    for folder in ("checkpoints/10", f"{CHOSEN}/10"):
        (run / folder).mkdir(parents=True)
    (run / "checkpoints" / "10" / "which").write_text("mlp")
    (run / CHOSEN / "10" / "which").write_text("linear")
    resolved = {} if choice is None else {"choice": choice}
    return run, RunRecord(RunConfig(), resolved)


CHOICE = {"candidates": ["mlp", "linear"], "chosen": "linear", "kept": "candidates/mlp/checkpoints"}


def test_a_recorded_choice_is_completed_by_the_next_reader(tmp_path):
    run, record = _folder(tmp_path, dict(CHOICE))
    settle_choice(run, record)
    assert (run / "checkpoints" / "10" / "which").read_text() == "linear"
    assert (run / "candidates/mlp/checkpoints/10/which").read_text() == "mlp"
    assert not (run / CHOSEN).exists()
    settle_choice(run, record)  # settled: nothing more to do
    assert (run / "checkpoints" / "10" / "which").read_text() == "linear"
    # cut short between the two renames: the chosen model still takes its place
    run2, record2 = _folder(tmp_path / "b", dict(CHOICE))
    (run2 / "candidates" / "mlp").mkdir(parents=True)
    (run2 / "checkpoints").rename(run2 / "candidates" / "mlp" / "checkpoints")
    settle_choice(run2, record2)
    assert (run2 / "checkpoints" / "10" / "which").read_text() == "linear"


def test_a_choice_config_json_never_recorded_leaves_the_checkpoints_alone(tmp_path):
    run, record = _folder(tmp_path, None)
    settle_choice(run, record)
    assert (run / "checkpoints" / "10" / "which").read_text() == "mlp"  # the stale one ignored
    assert (run / CHOSEN).is_dir()
    undecided = {"candidates": ["mlp", "linear"]}
    settle_choice(run, RunRecord(RunConfig(), {"choice": undecided}))
    assert (run / "checkpoints" / "10" / "which").read_text() == "mlp"


def test_a_kept_folder_outside_the_run_is_refused(tmp_path):
    run, _ = _folder(tmp_path, None)
    outside = RunRecord(RunConfig(), {"choice": {**CHOICE, "kept": "../elsewhere"}})
    with pytest.raises(ConfigError, match=r"choice.kept '../elsewhere' is outside the run"):
        settle_choice(run, outside)
