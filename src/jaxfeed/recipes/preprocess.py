"""Left for ``recipes/train/loaders.py`` and ``recipes/train/plan.py`` only, which import
:class:`Augmented` from here: it is :class:`jaxfeed.recipes.kinds.image.Augmented`. A run's
preprocessing is :class:`jaxfeed.recipes.spec.Preprocessing`, planned and applied by its input
kind (:mod:`jaxfeed.recipes.kinds`); this module goes once those two import the kind's."""

from __future__ import annotations

from jaxfeed.recipes.kinds.image import Augmented as Augmented

__all__ = ["Augmented"]
