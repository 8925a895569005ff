"""Issue 54, item 1: RGBA is a mode (``--image-mode RGBA``, and ``same`` on RGBA files keeps it);
other modes composite transparency onto ``--image-background``; a bad colour is one line."""

from __future__ import annotations

import numpy as np
import PIL.Image
import pytest

from cli_helpers import run_main
from jaxfeed import Dataset
from jaxfeed.data.features import Features, Image, Value
from jaxfeed.recipes.kinds.image import ImageKind, image_choice
from jaxfeed.serve.spec import ServingSpec


@pytest.fixture
def rgba_rows(tmp_path):
    paths = []
    for i in range(3):
        pixels = np.zeros((6, 6, 4), np.uint8)
        pixels[2:4, 2:4] = (10, 20, 30, 255)  # an opaque glyph, the rest transparent black
        paths.append(str(tmp_path / f"{i}.png"))
        PIL.Image.fromarray(pixels, "RGBA").save(paths[-1])
    features = Features({"image": Image(), "label": Value("int64")})
    return Dataset.from_dict({"image": paths, "label": [0, 1, 0]}, features=features)


def test_rgba_mode_and_same_keep_alpha_other_modes_composite(rgba_rows):
    for given in ("RGBA", "same"):
        mode, size, note, background = image_choice(rgba_rows, "image", None, given)
        assert (mode, size, background) == ("RGBA", (6, 6), None), note
    mode, _, note, background = image_choice(rgba_rows, "image", None, None, "black")
    assert (mode, background) == ("RGB", (0, 0, 0))
    assert note == "images: 6x6, mode RGB (from RGBA); transparency (3 of 3) composited onto black"
    with pytest.raises(ValueError, match="the mode RGBA keeps the alpha channel"):
        image_choice(rgba_rows, "image", None, "RGBA", "white")
    kind = ImageKind()
    prep, _ = kind.plan_inputs(rgba_rows, ["image"], "label", "classification", None, None, "RGBA")
    assert prep.input_shape == [6, 6, 4] and prep.image_mode == "RGBA"
    batch = kind.prepare(prep, rgba_rows)[:2]
    assert prep(batch)["x"].shape == (2, 6, 6, 4)
    # composited onto white: the glyph kept, the transparent pixels white
    prep, _ = kind.plan_inputs(rgba_rows, ["image"], "label", "classification", None, None)
    x = prep(kind.prepare(prep, rgba_rows)[:1])["x"]
    assert x.shape == (1, 6, 6, 3) and x[0, 0, 0].tolist() == [255, 255, 255]
    assert x[0, 2, 2].tolist() == [10, 20, 30]


def test_serving_spec_keeps_its_background_and_reads_old_specs():
    spec = ServingSpec("image", (2, 2, 3), labels=("a",), image_mode="RGB", image_size=(2, 2),
                       image_background=(0, 128, 255))  # fmt: skip
    assert ServingSpec.from_dict(spec.to_dict(), "spec.json") == spec
    assert spec.decode_mode == "RGBA"
    old = {k: v for k, v in spec.to_dict().items() if k != "image_background"}
    assert ServingSpec.from_dict(old, "old.json").image_background is None
    rgba = np.zeros((2, 2, 4), np.uint8)
    assert spec.fit_images([rgba])[0, 0, 0].tolist() == [0, 128, 255]
    with pytest.raises(ValueError, match="image_background must be"):
        ServingSpec.from_dict({**spec.to_dict(), "image_background": [1, 2]}, "bad.json")


def test_a_bad_background_colour_is_one_line(capsys, tmp_path):
    status, _, err = run_main(capsys, "train", "--data", "digits", "--image-background", "nope",
                              "--out", str(tmp_path / "r"))  # fmt: skip
    assert status == 2
    assert err.strip().splitlines() == [
        "jaxfeed train: error: argument --image-background: image_background: expected a colour: "
        "a name (white, black, "
        "...), #RRGGBB or R,G,B with values in 0..255, got 'nope'"
    ]
