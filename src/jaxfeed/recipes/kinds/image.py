"""Images: decoded, converted to one mode (``L``, ``RGB`` or ``RGBA``; transparency composited
onto ``--image-background``, white by default, when the mode has no alpha) and resized with Pillow's bilinear
filter to one size in the loader's workers (chosen from the first images' headers:
:func:`image_choice`), as ``eval``, ``predict`` and the export's declared spec do; pixels scaled on the device;
``--augment`` flips and crops them (:class:`Augmented`); ``cnn`` by default; a Hub image
checkpoint sets the size and normalises the pixels inside the model."""

from __future__ import annotations

import dataclasses
import io
import math
from collections import Counter
from typing import Any

import numpy as np

from jaxfeed.data.dataset import Dataset
from jaxfeed.data.features import Image
from jaxfeed.recipes.config import ConfigError, RunConfig, parse_colour
from jaxfeed.recipes.config.budget import STEP_FLOOR
from jaxfeed.recipes.kinds.base import Baseline, Kind
from jaxfeed.recipes.kinds.builtins import with_init_args
from jaxfeed.recipes.kinds.objectives import numeric_options
from jaxfeed.recipes.spec import INPUTS, Preprocessing
from jaxfeed.serve.spec import CHANNELS, has_alpha

SAMPLE = 64  # images whose headers are read to choose a size and a mode
SMALL_IMAGE_FOLDER = 2000  # fewer training images than this: augmented by default (built-ins)
DEFAULT_AUGMENT = ("flip", "crop")
# training images an augmented run of chosen length sees at least (each pass draws new flips and
# crops): on 39 images of squares against discs the built-in cnn reached 0.94 test accuracy in
# 500 steps of 8, 1.00 in 1,000 (docs/benchmarks, What the defaults learn)
AUGMENTED_IMAGES_SEEN = 8000
GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")
# The built-in cnn of an image run (recorded in its config.json; the class's defaults are the
# article's model, which digits and other arrays keep): three blocks (32, 64, 128), the last map
# averaged over its positions, BatchNorm before the ReLU. On 44 images of squares against discs
# of random colours and places (issue 54) the article's model learnt the places and the colours.
IMAGE_CNN: dict[str, Any] = {"widths": [32, 64, 128], "head": "mean", "norm": "before"}


def augmented_floor(batch_size: int, grad_accum: int = 1) -> tuple[int, str]:
    """The budget's floor of optimizer steps for an augmented run (``(steps, why)``): enough to
    see :data:`AUGMENTED_IMAGES_SEEN` training images, at least the budget's 200.

    >>> augmented_floor(8), augmented_floor(64)
    ((1000, 'augmented images: 8,000 seen at least'), (200, 'augmented images: 8,000 seen at least'))
    """
    steps = math.ceil(AUGMENTED_IMAGES_SEEN / max(batch_size * grad_accum, 1))
    return max(STEP_FLOOR, steps), f"augmented images: {AUGMENTED_IMAGES_SEEN:,} seen at least"


class ImageKind(Kind):
    """Image files (see the module docstring).

    >>> ImageKind().augments(None), ImageKind().default_model
    (True, 'cnn')
    """

    hub_task = "image-classification"

    def __init__(self, name: str = "image") -> None:
        super().__init__(name)

    def before_plan(self, config: RunConfig, resumed: bool,
                    pretrained: Any = None) -> RunConfig:  # fmt: skip
        """A new run's built-in ``cnn`` with :data:`IMAGE_CNN` in its init_args; with a Hub
        checkpoint (``pretrained``), its image size and RGB (another size given is refused). A
        resumed run keeps what it recorded."""
        if resumed:
            return config
        if pretrained is None:
            return with_init_args(config, self.default_model, "cnn", IMAGE_CNN)
        pretrained.processor_with("image_mean", "image")
        h, w = pretrained.image_size
        if config.image_size is not None and config.image_hw() != (h, w):
            raise ConfigError(
                f"--image-size {config.image_size}: --model {pretrained.spec} takes {h}x{w} "
                "images (its preprocessor_config.json); drop --image-size"
            )
        if config.image_mode not in (None, "RGB"):
            raise ConfigError(
                f"--image-mode {config.image_mode}: --model {pretrained.spec} takes RGB images"
            )
        return dataclasses.replace(config, image_size=f"{h}x{w}", image_mode="RGB")

    def plan(self, run_data: Any, config: RunConfig,
             pretrained: Any = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        """The images' preprocessing; with a Hub checkpoint at its size and mode, which the line
        credits to it (not to ``--image-size`` and ``--image-mode``, which the user did not
        give)."""
        prep, notes = super().plan(run_data, config)
        if pretrained is None:
            return prep, notes
        spec = pretrained.spec
        notes = [
            n.replace("(--image-size)", f"(the size {spec} takes)").replace(
                "(--image-mode;", f"(the mode {spec} takes;"
            )
            for n in notes
        ]
        return prep, notes

    def table_options(self, config: RunConfig, columns: Any) -> Any:
        """The kind's own options for :meth:`plan_inputs`: ``--image-background`` (or None)."""
        return config.image_background

    def plan_inputs(self, train: Dataset, inputs: list[str], label: str, task: str,
                    image_size: tuple[int, int] | None, options: Any = None,
                    image_mode: str | None = None) -> tuple[Preprocessing, list[str]]:  # fmt: skip
        choice = image_choice(train, inputs[0], image_size, image_mode, options)
        mode, size, note, background = choice
        shape = [size[0], size[1]] + ([CHANNELS[mode]] if mode != "L" else [])
        prep = Preprocessing(self.name, inputs, label, shape, task, mode, list(size), scale=True)
        prep.image_background = None if background is None else list(background)
        return prep, [note]

    def augments(self, prep: Preprocessing) -> bool:
        return True

    def baseline(self, prep: Preprocessing) -> Baseline | None:
        """The built-in ``linear`` on the pixels as the run reads them (composited, resized),
        averaged over blocks when there are more than the budget takes.

        >>> ImageKind().baseline(Preprocessing("image", ["i"], "y", [128, 96, 3], image_mode="RGB")).reads
        'pixels: 128x96 RGB averaged over 3x3 blocks (42x32)'
        """
        found = super().baseline(prep)
        assert found is not None
        h, w = prep.hw
        mode = prep.serving([]).image_mode
        pool = int(found.init_args.get("pool", 1))
        blocks = (
            f" averaged over {pool}x{pool} blocks ({h // pool}x{w // pool})" if pool > 1 else ""
        )
        return dataclasses.replace(found, reads=f"pixels: {h}x{w} {mode}{blocks}")

    def resolved_options(self, config: RunConfig, prep: Preprocessing,
                         run_data: Any) -> RunConfig:  # fmt: skip
        size = f"{prep.image_size[0]}x{prep.image_size[1]}" if prep.image_size else None
        config = super().resolved_options(config, prep, run_data)
        return dataclasses.replace(config, image_size=size or config.image_size)

    def prepare(self, prep: Preprocessing, ds: Dataset) -> Dataset:
        """The run's columns, images decoded in the run's mode."""
        ds = super().prepare(prep, ds)
        column, mode = prep.input_columns[0], prep.serving([]).decode_mode
        if ds.features[column] != Image(mode=mode):
            ds = ds.cast_column(column, Image(mode=mode))
        return ds

    def trainer_options(self, config: RunConfig, prep: Preprocessing,
                        class_weights: list[float] | None) -> dict[str, Any]:  # fmt: skip
        return numeric_options(config, prep, class_weights, scale=prep.scale)


def image_choice(
    ds: Dataset,
    column: str,
    image_size: tuple[int, int] | None,
    image_mode: str | None = None,
    background: str | None = None,
) -> tuple[str, tuple[int, int], str, tuple[int, int, int] | None]:
    """Mode and size of the run from the first images' headers (no full decode): the widest mode
    among them (RGB when any is colour), or ``image_mode``; ``"same"`` reads every header, keeps
    the files' mode (RGBA when they have transparency) and refuses mixed modes. Also the line
    that says it, and the ``(r, g, b)`` that transparency is composited onto (``background``,
    white by default; None when no image read has transparency or the mode keeps it)."""
    import PIL.Image

    rows = ds.num_rows if image_mode == "same" else min(SAMPLE, ds.num_rows)
    sample = ds.select(range(rows)).cast_column(column, Image(decode=False))
    sizes, modes, where, alpha = Counter(), Counter(), {}, 0
    for i, stored in enumerate(sample[column]):
        source = stored.get("bytes") or stored.get("path")
        try:
            with PIL.Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as im:
                sizes[(im.height, im.width)] += 1
                modes[im.mode] += 1
                alpha += has_alpha(im)
                where.setdefault(im.mode, stored.get("path") or f"row {i}")
        except (OSError, ValueError) as err:
            where = stored.get("path") or f"row {i}"
            raise ConfigError(f"cannot read the image {where} of column {column!r}: {err}") from err
    widest = "L" if all(m in GREY_MODES for m in modes) else "RGB"
    if image_mode == "same" and len(modes) > 1:
        shown = ", ".join(f"{m} ({where[m]})" for m in sorted(modes))
        raise ConfigError(
            f"the images of column {column!r} mix modes: {shown}; --image-mode same refuses "
            "them: convert the files, or give --image-mode L, RGB or RGBA"
        )
    if image_mode == "same":
        mode = "RGBA" if alpha else widest
    else:
        mode = image_mode if image_mode in CHANNELS else widest
    said = _mode_line(image_mode, mode, modes)
    colour = None
    if mode == "RGBA" and background is not None:
        raise ConfigError(
            f"--image-background {background}: the mode RGBA keeps the alpha channel, nothing is "
            "composited; drop one of them"
        )
    if mode != "RGBA" and (alpha or background is not None):
        colour = parse_colour(background or "white")
        named = background or "white (--image-background to choose)"
        seen = f"{alpha} of the first {rows} images" if rows < ds.num_rows else f"{alpha} of {rows}"
        said += f"; transparency ({seen}) composited onto {named}"
    size, how = _size_choice(sizes, image_size)
    return mode, size, f"images: {how}, {said}", colour


def _size_choice(sizes: Counter, image_size: tuple[int, int] | None) -> tuple[tuple[int, int], str]:
    """The run's size (``image_size``, else the most common) and how it was chosen."""
    if image_size is not None:
        return image_size, f"resized to {image_size[0]}x{image_size[1]} (--image-size)"
    size = sizes.most_common(1)[0][0]
    if len(sizes) == 1:
        return size, f"{size[0]}x{size[1]}"
    shown = ", ".join(f"{h}x{w}" for h, w in list(sizes)[:3]) + (", ..." if len(sizes) > 3 else "")
    return size, (
        f"mixed sizes ({shown}) resized to {size[0]}x{size[1]}, the most common "
        "(--image-size to choose)"
    )


def _mode_line(image_mode: str | None, mode: str, modes: Counter) -> str:
    """How the run's mode was chosen (and 16-bit pixels scaled), for the detection line."""
    if image_mode in CHANNELS:
        said = f"mode {mode} (--image-mode; the files are {', '.join(sorted(modes))})"
    elif len(modes) > 1:
        said = (
            f"mixed modes {', '.join(sorted(modes))} converted to {mode}, the widest "
            "(--image-mode to choose)"
        )
    else:
        said = f"mode {mode}" + (f" (from {next(iter(modes))})" if mode not in modes else "")
    if any(m.startswith("I;16") or m == "I" for m in modes):
        said += "; 16-bit pixels scaled to 8 bits (round(v / 257)), not clipped"
    return said


# ---------------------------------------------------------------------------------- augment
class Augmented:
    """The train loader's ``transform`` with ``--augment``: the run's preprocessing, then each
    image of the batch flipped left-right (half of them) and/or cropped at random to its own
    size after padding each side by an eighth with copies of the edge pixels (zeros would draw a
    straight border into the image: an edge that is no part of it), with the loader's seeded
    ``rng`` (a resumed run draws alike). Evaluation and predict see the images as they are.

    >>> import numpy as np
    >>> from jaxfeed.recipes.spec import Preprocessing
    >>> prep = Preprocessing("array", ["x"], "y", [2, 4], "classification")
    >>> batch = {"x": np.arange(8, dtype=np.float32).reshape(1, 2, 4), "y": np.array([0])}
    >>> out = Augmented(prep, ["flip"])(batch, np.random.default_rng(2))  # flipped: 0.26 < 0.5
    >>> out["x"].tolist(), out["y"].tolist()
    ([[[3.0, 2.0, 1.0, 0.0], [7.0, 6.0, 5.0, 4.0]]], [0])
    """

    def __init__(self, prep: Any, augment: list[str]) -> None:
        self.prep, self.flip, self.crop = prep, "flip" in augment, "crop" in augment

    def __call__(self, batch: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        out = self.prep(batch)
        x = np.array(out[INPUTS], copy=True)
        if self.flip:
            flipped = rng.random(len(x)) < 0.5
            x[flipped] = x[flipped][:, :, ::-1]
        if self.crop:
            height, width = x.shape[1:3]
            pad_h, pad_w = max(1, height // 8), max(1, width // 8)
            widths = [(0, 0), (pad_h, pad_h), (pad_w, pad_w)] + [(0, 0)] * (x.ndim - 3)
            padded = np.pad(x, widths, mode="edge")
            for i in range(len(x)):
                top, left = int(rng.integers(0, 2 * pad_h + 1)), int(rng.integers(0, 2 * pad_w + 1))
                x[i] = padded[i, top : top + height, left : left + width]
        out[INPUTS] = x
        return out

    def describe(self) -> str:
        """The note the run prints."""
        done = (["a random left-right flip (half of them)"] if self.flip else []) + (
            ["a random crop of their size after padding each side by an eighth"]
            if self.crop
            else []
        )
        return f"augment: training images get {' and '.join(done)} (--augment)"
