"""``--lr auto`` (issue 40): a learning-rate range test picks the rate before training; the choice
is said, saved in config.json (so --resume keeps it) and the curve written to lr_finder.json."""

import json

import numpy as np

from cli_helpers import run_main
from jaxfeed.recipes.train import lr_finder


def test_the_choice_is_a_tenth_of_the_rate_at_the_lowest_smoothed_loss():
    lrs = list(np.geomspace(1e-6, 1.0, 50))
    losses = [2.0 - 1.5 * np.exp(-((np.log10(lr) + 2) ** 2)) for lr in lrs]  # lowest at 1e-2
    chosen, at_min = lr_finder.choose(lrs, losses, smoothing=0.0)
    assert 0.5e-2 < at_min < 2e-2 and chosen == at_min / 10
    assert lr_finder.choose([1e-3, 1e-2, 1e-1], [1.0, 0.5, float("nan")]) == (1e-3, 1e-2)


def test_lr_auto_runs_the_range_test_and_records_it(capsys, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 2))
    table = tmp_path / "t.csv"
    table.write_text("a,b,label\n" + "".join(f"{a:.3f},{b:.3f},{int(a + b > 0)}\n" for a, b in x))
    out = tmp_path / "run"
    status, said, err = run_main(
        capsys, "train", "--data", str(table), "--lr", "auto", "--epochs", "2", "--out", str(out)
    )
    assert status == 0, err
    line = next(s for s in said.splitlines() if s.startswith("--lr auto: a range test of "))
    saved = json.loads((out / "config.json").read_text())
    curve = json.loads((out / "lr_finder.json").read_text())
    assert saved["options"]["lr"] == curve["lr"] == saved["lr_finder"]["lr"]
    assert f"chosen {curve['lr']:g}" in line and 1e-6 <= curve["lr"] < 1.0
    assert len(curve["curve"]) == curve["steps"] >= 10
    assert f"lr {curve['lr']:g}" in said  # the model line shows the chosen rate
    status, _, err = run_main(capsys, "train", "--lr", "fast")
    assert status == 2 and "lr must be a number or auto, got 'fast'" in err


class _CurveTrainer:
    """A stand-in for the probe's Trainer: each step reports the rate the probe's schedule gives
    (``lr * decay_rate ** step``) and ``loss(rate)``, to the callbacks, until one stops it."""

    def __init__(self, config, loss):
        self.callbacks, self.stop_training = [], False
        self.rate = config.schedule["init_args"]["decay_rate"]
        self.config, self.loss = config, loss

    def fit(self, loader, eval_data, *, epochs, max_steps, log_every):
        for step in range(1, max_steps + 1):
            lr = self.config.lr * self.rate ** (step - 1)
            for callback in self.callbacks:
                callback.on_train_batch_end(
                    self, step, {"learning_rate": lr, "train_loss": self.loss(lr)}
                )
            if self.stop_training:
                return


def test_the_run_trains_at_a_tenth_of_the_rate_of_the_curves_minimum():
    """A synthetic loss curve with its minimum at lr 1e-3 (then running away): the run's rate is
    a tenth of the rate at the lowest smoothed loss, which lies near that minimum."""
    from jaxfeed.recipes.config import RunConfig

    def loss(lr):
        x = np.log10(lr) + 3  # decades from the minimum
        return 2.0 - 1.5 * np.exp(-(x**2)) + (40 * x**2 if x > 1 else 0.0)

    said = []
    config, found = lr_finder.resolve(
        RunConfig(lr="auto"), lambda probe: _CurveTrainer(probe, loss), lambda: None, said.append
    )
    at_min = found["lr_at_min_loss"]
    assert 1e-3 <= at_min < 4e-3  # the smoothed curve's lowest point trails the minimum a little
    assert config.lr == found["lr"] == float(f"{at_min / 10:.2g}")
    assert 1e-4 <= config.lr < 4e-4
    assert f"chosen {config.lr:g} (a tenth of it" in said[0]
    assert found["steps"] < lr_finder.STEPS  # the loss ran away past 1e-2: the test stopped


def test_a_flat_curve_has_no_slope_and_the_smoothing_starts_at_the_first_loss():
    rng = np.random.default_rng(0)
    flat = [*(0.69 + 0.01 * rng.normal(size=80)), 0.8, 1.5, 9.0]  # noise, then it runs away
    falling = [2.0 * 0.97**i for i in range(80)]
    assert lr_finder.drop(flat) < lr_finder.MIN_DROP <= lr_finder.drop(falling)
    # the moving average starts from the first loss, not ten times it (a bias correction of an
    # average that did not start at 0 put the early steps far above the rest)
    assert abs(lr_finder._smoothed([0.7, 0.7, 0.7], 0.9)[0] - 0.7) < 1e-9
