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


def _transparent_image(kind: str) -> PIL.Image.Image:
    """A 6x6 image whose 2x2 glyph is opaque (10, 20, 30) or grey 40, the rest stored as red (or
    grey 200) and transparent: a palette with a transparent colour (``P``), RGB with a ``tRNS``
    colour, or grey with alpha (``LA``)."""
    inside = np.zeros((6, 6), bool)
    inside[2:4, 2:4] = True
    if kind == "P":
        image = PIL.Image.fromarray(inside.astype(np.uint8), "P")
        image.putpalette([200, 0, 0, 10, 20, 30])
        image.info["transparency"] = 0
    elif kind == "RGB":
        pixels = np.where(inside[..., None], [10, 20, 30], [200, 0, 0]).astype(np.uint8)
        image = PIL.Image.fromarray(pixels, "RGB")
        image.info["transparency"] = (200, 0, 0)
    else:
        grey = np.where(inside, 40, 200).astype(np.uint8)
        image = PIL.Image.fromarray(np.dstack([grey, inside * np.uint8(255)]), "LA")
    return image


@pytest.mark.parametrize(("kind", "mode", "glyph", "outside"), [
    ("P", "RGB", [10, 20, 30], [255, 255, 255]),
    ("RGB", "RGB", [10, 20, 30], [255, 255, 255]),
    ("LA", "L", 40, 255),
])  # fmt: skip
def test_transparent_colours_and_grey_alpha_are_composited(tmp_path, kind, mode, glyph, outside):
    """A palette PNG with a transparent colour, an RGB PNG with ``tRNS`` and a grey-with-alpha
    PNG: their transparent pixels become the background (white) in training and in serving, not
    their stored colour."""
    paths = []
    for i in range(2):
        paths.append(str(tmp_path / f"{i}.png"))
        image = _transparent_image(kind)
        image.save(paths[-1], transparency=image.info.get("transparency"))
    with PIL.Image.open(paths[0]) as check:  # the file holds what the test means
        assert check.mode == kind and (kind == "LA" or "transparency" in check.info)
    features = Features({"image": Image(), "label": Value("int64")})
    rows = Dataset.from_dict({"image": paths, "label": [0, 1]}, features=features)
    image_kind = ImageKind()
    prep, notes = image_kind.plan_inputs(rows, ["image"], "label", "classification", None, None)
    assert prep.image_mode == mode and prep.image_background == [255, 255, 255], notes
    assert "transparency (2 of 2) composited onto white" in notes[0]
    x = prep(image_kind.prepare(prep, rows)[:2])["x"]
    assert x[0, 0, 0].tolist() == outside and x[1, 2, 2].tolist() == glyph
    spec = prep.serving(["a", "b"])
    arrays, counts = spec.read_images(paths)
    served = spec.fit_images(arrays)
    assert counts["composited"] == 2
    assert served[0, 0, 0].tolist() == outside and served[1, 2, 2].tolist() == glyph
