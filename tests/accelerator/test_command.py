"""The main job on the accelerator, in this process (one program holds a TPU at a time):
``jaxfeed train`` then ``eval``, ``predict`` and the run's export through ``load_exported``."""

import json

import numpy as np
import PIL.Image

from jaxfeed import load_exported
from jaxfeed.cli import main
from jaxfeed.runtime.devices import describe_devices


def run(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def test_train_eval_predict_and_the_export(image_folder, tmp_path, capsys, platform):
    out = tmp_path / "run"
    status, shown, err = run(capsys, "train", "--data", image_folder, "--val-split", "0.25",
                             "--epochs", "3", "--lr", "0.01", "--batch-size", "8", "--out", out)  # fmt: skip
    assert status == 0, err
    devices = describe_devices()  # "1 TPU v5 lite chip"
    assert f"on {devices}" in shown
    if platform == "tpu":
        assert "TPU" in devices and ("chip" in devices or "core" in devices)
    config = json.loads((out / "config.json").read_text())
    assert config["format"] == "jaxfeed-run"
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in rows if "kind" not in r]  # the baselines' row has "kind": "baselines"
    assert len(epochs) == 3 and all(np.isfinite(r["train_loss"]) for r in epochs)
    status, shown, err = run(capsys, "eval", out, "--json")
    assert status == 0, err
    report = json.loads(shown)
    assert report["rows"] == 9 and 0 <= report["accuracy"] <= 1 and np.isfinite(report["loss"])
    files = [image_folder / "cat" / "0.png", image_folder / "dog" / "1.png"]
    status, shown, err = run(capsys, "predict", out, *files, "--json")
    assert status == 0, err
    predicted = json.loads(shown)
    served = load_exported(out / "model")
    raw = [np.asarray(PIL.Image.open(f)) for f in files]
    printed = [{t["label"]: t["probability"] for t in p["top"]} for p in predicted]
    expected = [[row[name] for name in served.spec.labels] for row in printed]
    np.testing.assert_allclose(served(raw), expected, atol=1e-4)
    assert served.predict(raw)[0] == [p["label"] for p in predicted]
