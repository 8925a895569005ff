"""Images with transparency (issue 54, item 1): their alpha channel is composited onto a
background (white by default, ``--image-background``), said in the detection line, the same in
``predict`` and the export; ``--image-mode RGBA`` (and ``same`` on RGBA files) keeps it."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import PIL.Image
import pytest

from cli_helpers import jaxfeed, run_main
from jaxfeed import load_exported
from jaxfeed.bench.small_data import icon_folder


@pytest.fixture(scope="module")
def icons(tmp_path_factory):
    """Dark glyphs on a transparent background of the glyph's colour: RGB alone is a plain
    square, the shape is in the alpha channel only."""
    return icon_folder(tmp_path_factory.mktemp("icons"), train=8, test=3, size=16,
                       classes=("disc", "cross"))  # fmt: skip


def test_transparent_icons_are_composited_onto_white_in_train_predict_and_the_export(
    icons, tmp_path, capsys
):
    out = tmp_path / "run"
    bare = {"PATH": "/usr/bin:/bin"}  # jaxfeed not on PATH, as after make demo (item 6)
    args = ["train", "--data", str(icons / "train"), "--epochs", "1", "--out", str(out)]
    done = jaxfeed(*args, env=bare)
    assert done.returncode == 0, done.stderr
    # the next steps run as printed: a path to the command, not a bare `jaxfeed` (item 6)
    evaluate = next(line for line in done.stdout.splitlines() if line.startswith("evaluate:"))
    command = evaluate.removeprefix("evaluate:").strip()
    assert not command.startswith("jaxfeed ") and "jaxfeed" in command.split(" eval ")[0]
    shown = subprocess.run(
        command, shell=True, capture_output=True, text=True, env={**os.environ, **bare}
    )
    assert shown.returncode == 0 and json.loads(shown.stdout)["rows"] == 2, shown.stderr
    assert (
        "images: 16x16, mode RGB (from RGBA); transparency (14 of 14) composited onto white "
        "(--image-background to choose)" in done.stdout
    )
    # item 5: a small image folder is augmented by default, and says so
    assert (
        "augment: training images get a random left-right flip (half of them) and a random crop "
        "of their size after padding each side by an eighth (by default: fewer than 2,000 "
        "training images; --augment none turns it off)" in done.stdout
    )
    assert json.loads((out / "config.json").read_text())["options"]["augment"] == ["flip", "crop"]
    saved = json.loads((out / "config.json").read_text())["preprocess"]
    assert saved["image_mode"] == "RGB" and saved["image_background"] == [255, 255, 255]
    served = load_exported(out / "model")
    assert served.spec.image_background == (255, 255, 255)
    icon = icons / "test" / "disc" / "0.png"
    rgba = np.asarray(PIL.Image.open(icon))
    fitted = served.spec.fit_images([rgba])[0]
    # the glyph stays dark, the transparent corners turn white (dropping alpha: one dark colour)
    assert fitted[0, 0].tolist() == [255, 255, 255] and fitted.min() < 60
    # item 8: export of a built-in run says that model/ already is its export
    status, _, err = run_main(capsys, "export", str(out))
    assert status == 2 and f"{out / 'model'} already is this run's export" in err, err
    status, shown, err = run_main(capsys, "predict", str(out), str(icon), "--json")
    assert status == 0, err
    assert "composited the transparency of 1 onto (255,255,255)" in err
    printed = {t["label"]: t["probability"] for t in json.loads(shown)[0]["top"]}
    expected = served(np.asarray([fitted]))[0]
    np.testing.assert_allclose([printed[name] for name in served.spec.labels], expected, atol=1e-5)
