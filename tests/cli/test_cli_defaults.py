"""``jaxfeed train --data FOLDER`` with no other flag learns small data (issue 40): a folder of
three pure tones reaches a high test accuracy, the summary says the budget it chose and why, and
``config.json`` records it (batch size, epochs, patience, BatchNorm momentum, early stopping)."""

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import forkserver
from cli_helpers import train_with_defaults
from small_data import tone_folder


@pytest.mark.slow
def test_defaults_learn_a_small_tone_folder(tmp_path):
    data = tone_folder(tmp_path / "tones", seconds=0.25)  # the 120 + 36 clips, shorter
    out = tmp_path / "run"
    said, test = train_with_defaults(data, out)
    assert (
        "budget: 108 train rows: batch 16 (about a tenth of the rows), at most 29 epochs = 203 "
        "steps (a floor of 200 optimizer steps), early stopping after 6 epochs (42 steps) without "
        "improvement on validation loss, BatchNorm momentum 0.518"
    ) in said
    assert test["test_accuracy"] >= 0.95, said[-3000:]
    saved = json.loads((out / "config.json").read_text())
    options = saved["options"]
    assert (options["batch_size"], options["epochs"], options["patience"]) == (16, 29, 6)
    # the linear model on the clips does as well on validation: chosen, said and recorded; the
    # audio_cnn trained (with the budget's momentum) is recorded beside its kept checkpoints
    choice = saved["choice"]
    assert choice["chosen"] == "linear" and options["model"]["class_path"] == "linear"
    assert "model: linear, chosen on validation" in said
    assert choice["kept_model"] == {"class_path": "audio_cnn", "init_args": {"momentum": 0.518}}
    assert "the audio_cnn is compared with the linear model on validation" in said
    assert saved["budget"]["chosen"] == ["batch_size", "epochs", "patience", "momentum"]
    assert set(saved["early_stopping"]) == {"best", "best_epoch", "wait", "stopped_epoch"}
    assert "diverge early" not in said


@pytest.mark.slow
def test_the_quality_table_s_cheapest_case_clears_its_floor(tmp_path, capsys, monkeypatch):
    """benchmarks/quality.py's regression table (the cheapest case) with defaults only: R2 above
    its floor, exit 0 (a figure below its floor exits 1). The script's ``main`` runs in this
    process, and the ``python -m jaxfeed.cli train`` it starts goes through the worker's fork
    server as every ``jaxfeed(...)`` here does (a process of its own, without the ~3.3 CPU s of
    imports a fresh interpreter, and the script's own, paid)."""
    script = Path(__file__).parents[2] / "benchmarks" / "quality.py"
    spec = importlib.util.spec_from_file_location("quality_benchmark", script)
    quality = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quality)
    started = []

    def run(cmd, **kwargs):  # what run_case asks of subprocess.run: output captured, as text
        assert kwargs == {"capture_output": True, "text": True}, kwargs
        started.append(cmd)
        return forkserver.run(cmd, timeout=600)

    monkeypatch.setattr(quality, "subprocess", SimpleNamespace(run=run))
    status = quality.main(["--cases", "regression", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert [cmd[:4] for cmd in started] == [[sys.executable, "-m", "jaxfeed.cli", "train"]]
    assert status == 0, printed
    row = printed.splitlines()[-1].split()
    assert row[:3] == ["regression", "test", "R2"] and float(row[3]) >= 0.8, printed
