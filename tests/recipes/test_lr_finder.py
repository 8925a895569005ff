"""``--lr auto`` (issue 40): a learning-rate range test picks the rate before training; the choice
is said, saved in config.json (so --resume keeps it) and the curve written to lr_finder.json."""

import json

import numpy as np

from cli_helpers import run_main
from jaxfeed.recipes import lr_finder


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


def test_a_flat_curve_has_no_slope_and_the_smoothing_starts_at_the_first_loss():
    rng = np.random.default_rng(0)
    flat = [*(0.69 + 0.01 * rng.normal(size=80)), 0.8, 1.5, 9.0]  # noise, then it runs away
    falling = [2.0 * 0.97**i for i in range(80)]
    assert lr_finder.drop(flat) < lr_finder.MIN_DROP <= lr_finder.drop(falling)
    # the moving average starts from the first loss, not ten times it (a bias correction of an
    # average that did not start at 0 put the early steps far above the rest)
    assert abs(lr_finder._smoothed([0.7, 0.7, 0.7], 0.9)[0] - 0.7) < 1e-9
