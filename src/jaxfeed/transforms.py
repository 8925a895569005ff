"""Per-row augmentations for ``DataLoader(..., row_transform=...)``: numpy in, numpy out.

Images: crops, resizing, flips and normalisation; audio rows: :func:`log_mel`, an ``Audio`` column
to its log-mel spectrogram, cropped or padded to ``clip_seconds``. Each function returns a
transform ``t`` that works on a row dict (``t(row, rng)`` returns the row with ``column``
replaced, every other column kept) or on one image array (``t(image, rng)``). ``rng`` is a
``numpy.random.Generator`` the loader seeds by ``(seed, epoch, position of the row)``, so
augmentations repeat exactly on resume and do not depend on the number of workers;
:func:`compose` chains transforms into one row transform.

This module is the public face of :mod:`jaxfeed.loading.augment` (images) and
:mod:`jaxfeed.loading.spectrogram` (audio).

>>> import numpy as np
>>> from jaxfeed import transforms as T
>>> augment = T.compose(
...     T.random_resized_crop(24), T.horizontal_flip(), T.normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)
... )
>>> row = {"image": np.zeros((32, 40, 3), np.uint8), "label": 3}
>>> out = augment(row, np.random.default_rng(0))
>>> out["image"].shape, out["image"].dtype, out["label"]
((24, 24, 3), dtype('float32'), 3)
"""

from jaxfeed.loading.augment import IMAGENET_MEAN as IMAGENET_MEAN
from jaxfeed.loading.augment import IMAGENET_STD as IMAGENET_STD
from jaxfeed.loading.augment import Transform as Transform
from jaxfeed.loading.augment import center_crop as center_crop
from jaxfeed.loading.augment import compose as compose
from jaxfeed.loading.augment import horizontal_flip as horizontal_flip
from jaxfeed.loading.augment import normalize as normalize
from jaxfeed.loading.augment import random_crop as random_crop
from jaxfeed.loading.augment import random_resized_crop as random_resized_crop
from jaxfeed.loading.augment import resize as resize
from jaxfeed.loading.spectrogram import log_mel as log_mel

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "Transform",
    "center_crop",
    "compose",
    "horizontal_flip",
    "log_mel",
    "normalize",
    "random_crop",
    "random_resized_crop",
    "resize",
]
