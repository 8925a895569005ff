"""The budget that follows the data (issue 40): batch size, run length, patience and BatchNorm
momentum chosen from the train rows when the options leave them open; given options win."""

from types import SimpleNamespace

import pytest

from jaxfeed.recipes.config import RunConfig, budget


def test_a_small_set_gets_a_small_batch_and_a_floor_of_steps():
    config = budget.auto_batch(RunConfig(model="audio_cnn"), rows=108)
    assert config.batch_size == 16
    config, plan = budget.resolve(config, True, rows=108, batches=7, selection=True)
    assert config.epochs == 29 and plan.steps >= budget.STEP_FLOOR
    assert config.patience == 6  # a fifth of the epochs
    momentum = config.component("model")[1]["momentum"]
    assert momentum == plan.momentum and momentum**7 <= 0.011  # settled within an epoch
    line = plan.describe(config.monitor)
    assert line.startswith("budget: 108 train rows: batch 16 (about a tenth of the rows)")
    assert "at most 29 epochs = 203 steps (a floor of 200 optimizer steps)" in line
    assert "early stopping after 6 epochs (42 steps) without improvement on validation loss" in line
    assert plan.to_dict()["chosen"] == ["batch_size", "epochs", "patience", "momentum"]


def test_a_larger_set_keeps_the_old_defaults():
    config = budget.auto_batch(RunConfig(model="mlp"), rows=1437)
    config, plan = budget.resolve(config, True, rows=1437, batches=23, selection=True)
    assert (config.batch_size, config.epochs, config.patience) == (64, 10, 3)
    assert plan.momentum is None and config.model == "mlp"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"epochs": 3}, (3, None)),  # the run's length given: no early stopping unless asked
        ({"max_steps": 500}, (72, None)),  # --max-steps alone: enough epochs to reach it
        ({"patience": 2}, (29, 2)),
        ({"epochs": 4, "patience": 1}, (4, 1)),
    ],
)
def test_given_options_win(given, expected):
    config = RunConfig(model="cnn", batch_size=16, **given)
    config, plan = budget.resolve(config, False, rows=108, batches=7, selection=True)
    assert (config.epochs, config.patience) == expected
    assert "batch_size" not in plan.chosen and config.batch_size == 16
    given_momentum = RunConfig(model={"class_path": "cnn", "init_args": {"momentum": 0.99}})
    config, plan = budget.resolve(given_momentum, False, rows=108, batches=7, selection=True)
    assert config.component("model")[1] == {"momentum": 0.99} and plan.momentum is None


def test_no_validation_split_no_early_stopping_and_devices_round_the_batch():
    config, _ = budget.resolve(RunConfig(batch_size=8), True, rows=50, batches=7, selection=False)
    assert config.patience is None
    assert budget.auto_batch(RunConfig(), rows=108, devices=8).batch_size == 16
    assert budget.auto_batch(RunConfig(), rows=60, devices=8).batch_size == 8
    assert budget.auto_batch(RunConfig(), rows=10, devices=4).batch_size == 8


def test_early_stopping_replays_the_history_on_resume():
    trainer = SimpleNamespace(
        history=[{"epoch": 1, "eval_loss": 1.0}, {"epoch": 2, "eval_loss": 1.2}],
        stop_training=False,
    )
    stop = budget.ResumableEarlyStopping("eval_loss", 2)
    stop.on_fit_start(trainer)
    assert stop.state() == {"best": 1.0, "best_epoch": 1, "wait": 1, "stopped_epoch": None}
    stop.on_epoch_end(trainer, {"epoch": 3, "eval_loss": 1.1})
    stop.on_epoch_end(trainer, {"epoch": 4, "eval_loss": 1.1})
    assert trainer.stop_training and stop.stopped_epoch == 4
    # resumed after it stopped: it stays stopped; a larger patience lets it go on
    trainer.history += [{"epoch": 3, "eval_loss": 1.1}, {"epoch": 4, "eval_loss": 1.1}]
    trainer.stop_training = False
    stop.on_fit_start(trainer)
    assert trainer.stop_training and stop.state()["stopped_epoch"] == 4
    longer = budget.ResumableEarlyStopping("eval_loss", 5)
    longer.on_fit_start(trainer)
    assert not trainer.stop_training and longer.state()["wait"] == 3


def test_divergence_warning_only_early_and_sharp():
    early = [
        {"epoch": 1, "train_accuracy": 0.9, "eval_accuracy": 0.4},
        {"epoch": 2, "train_accuracy": 1, "eval_accuracy": 1},
    ]
    late = [{"epoch": e, "train_accuracy": 0.9, "eval_accuracy": 0.85} for e in range(1, 4)]
    assert "diverge early (epoch 1" in budget.divergence_warning(early)
    assert budget.divergence_warning(late) is None


def test_the_warning_reads_a_real_history(tmp_path):
    """The history of the issue's tone folder at BatchNorm momentum 0.9 (validation stuck at
    chance while training learns) warns; the same run at the budget's momentum does not."""
    lagging = [(0.44, 0.33), (0.73, 0.33), (0.76, 0.33), (0.91, 0.33), (0.93, 0.42), (0.98, 0.83)]
    settled = [(0.44, 0.75), (0.73, 0.83), (0.76, 1.0), (0.91, 1.0), (0.93, 1.0), (0.98, 1.0)]
    rows = lambda pairs: [  # noqa: E731
        {"epoch": i + 1, "train_accuracy": a, "eval_accuracy": b} for i, (a, b) in enumerate(pairs)
    ]
    assert "(epoch 2: train 0.73, validation 0.33)" in budget.divergence_warning(rows(lagging))
    assert budget.divergence_warning(rows(settled)) is None


def test_the_step_floor_counts_optimizer_steps_with_gradient_accumulation():
    """28 batches an epoch with --grad-accum 4 are 7 optimizer steps: the floor of 200 steps
    needs 29 epochs, as without accumulation at 7 batches (not 10 epochs of 28 batches)."""
    config = RunConfig(model="mlp", batch_size=4, grad_accum=4)
    config, plan = budget.resolve(config, False, rows=108, batches=28, selection=True)
    assert plan.steps_per_epoch == 7 and config.epochs == 29
    assert plan.steps == 203 >= budget.STEP_FLOOR
    assert "at most 29 epochs = 203 steps (a floor of 200 optimizer steps)" in plan.describe(
        config.monitor
    )
    assert config.patience == 6  # a fifth of the epochs
