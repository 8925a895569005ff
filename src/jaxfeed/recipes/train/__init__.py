"""The training recipe: a :class:`RunConfig` in, a run folder out.

A run passes through five stages, each a module here, over one :class:`Run` record that each
fills in further: :func:`open_run` (the options checked, the folder locked, a resumed run's
record read, a pretrained checkpoint opened), :func:`plan` (data, preprocessing, budget, class
weights, loaders), :func:`build` (the trainer, ``--lr auto``, a resumed checkpoint restored, the
run folder written), :func:`fit` and :func:`finish` (the best checkpoint exported, the test split
read once, the summary). Each step's logic beyond the order lives in its own module
(``budget``, ``pretrained``, ``preprocess``, ``evaluate``, ``report``).

>>> import tempfile
>>> config = RunConfig(epochs=1, out=tempfile.mkdtemp() + "/run")
>>> result = train(config, say=lambda *a, **k: None, verbose=0)
>>> result.best["epoch"], sorted(p.name for p in result.out.iterdir())[:4]  # the linear kept
(1, ['candidates', 'checkpoints', 'config.json', 'curves.png'])
"""

from __future__ import annotations

from collections.abc import Callable

from jaxfeed.recipes.config import RunConfig
from jaxfeed.recipes.train.build import build
from jaxfeed.recipes.train.finish import finish, follow_umask
from jaxfeed.recipes.train.fit import fit
from jaxfeed.recipes.train.loaders import unused_axes
from jaxfeed.recipes.train.opening import open_run
from jaxfeed.recipes.train.plan import plan
from jaxfeed.recipes.train.record import Run, TrainResult

__all__ = [
    "Run",
    "TrainResult",
    "build",
    "finish",
    "fit",
    "follow_umask",
    "open_run",
    "plan",
    "train",
    "unused_axes",
]


def train(
    config: RunConfig,
    *,
    say: Callable[..., None] = print,
    verbose: int = 1,
    own_process: bool = False,
) -> TrainResult:
    """Train the run described by ``config`` (``config.resume``: continue it). ``say`` prints the
    recipe's lines, ``verbose`` the trainer's (0: silent, 1: a line per epoch and a progress bar).
    ``own_process``: the process runs this run and nothing else (the ``jaxfeed`` command), so
    JAX's caches are emptied once the model is built (its initialisers' programs, ~50 MB for the
    text transformer); a caller's own compiled functions keep theirs otherwise."""
    with open_run(config, say, verbose, own_process=own_process) as run:
        plan(run)
        trainer = build(run)
        history, seconds = fit(run, trainer)
        return finish(run, trainer, history, seconds)
