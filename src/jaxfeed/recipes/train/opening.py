"""Stage 1 of a run: open it. The options checked before anything is read (distributed
initialisation, ``--tensorboard``, text options, the model source's options, ``--mesh``), the run
folder checked and locked, a resumed run's record read, and the run's model source chosen
(:func:`~jaxfeed.recipes.sources.registry.source_for`) and opened: a model file checked, a
Hub checkpoint resolved at its revision, hashed and checked against the record.

>>> import tempfile
>>> with open_run(RunConfig(out=tempfile.mkdtemp() + "/run"), print, 0) as run:
...     run.record is None, run.model_source.name, run.out.is_dir()
(True, 'builtin', True)
>>> default_out(RunConfig(data="digits", model="net.py:Net")).name.startswith("digits-Net-")
True
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import jax

from jaxfeed.recipes.config import ConfigError, RunConfig, read_run
from jaxfeed.recipes.configure import paths_of
from jaxfeed.recipes.kinds.registry import check_options as check_kind_options
from jaxfeed.recipes.run import absolute_paths, check_out_folder, lock_run_folder, model_copy
from jaxfeed.recipes.sources.base import ModelSource
from jaxfeed.recipes.sources.registry import source_for
from jaxfeed.recipes.sources.user import CodePolicy
from jaxfeed.recipes.train.loaders import mesh_of
from jaxfeed.recipes.train.record import Run
from jaxfeed.runtime import distributed
from jaxfeed.train.checkpoint import CheckpointError as SaveFailed


@contextmanager
def open_run(
    config: RunConfig, say: Callable[..., None], verbose: int, *, own_process: bool = False
) -> Iterator[Run]:
    """The opened :class:`Run`, its folder locked while the ``with`` block runs (by process 0).
    A run that fails before its first checkpoint leaves no folder behind (:func:`_undo`); a
    missing optional part (an ``ImportError``: tokenizers) is refused as a ``ConfigError`` that
    names it."""
    try:
        distributed.initialize(config.coordinator, config.num_processes, config.process_id)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    primary = jax.process_index() == 0
    if not primary:
        say = _silent
    out = Path(config.out) if config.out else default_out(config)
    config = config.replace(absolute_paths(paths_of(config)), "the run's options")
    source = _check_options(config)
    check_out_folder(out, config.resume)
    created = not out.exists()
    was_empty = not config.resume and (created or not any(out.iterdir()))
    lock = lock_run_folder(out, config.resume) if primary else None
    try:
        yield _resumed(Run(config, out, primary, say, verbose, own_process=own_process), source)
    except Exception as err:
        if was_empty and lock is not None and not isinstance(err, SaveFailed):
            _undo(out, created)  # (an interrupted run or a failed save says how to resume)
        if isinstance(err, ImportError):  # an optional part missing (tokenizers): say which
            raise ConfigError(str(err)) from err
        raise
    finally:
        if lock is not None:
            lock.release()


def _undo(out: Path, created: bool) -> None:
    """A run that failed before its first checkpoint leaves nothing behind: the folder it made
    is removed, an empty folder it was given is emptied again; a folder holding a checkpoint is
    kept (``--resume`` continues it), as is one whose run was interrupted or could not save its
    first checkpoint (the error says how to resume)."""
    checkpoints = out / "checkpoints"
    if checkpoints.is_dir() and any(p.name.isdigit() for p in checkpoints.iterdir()):
        return
    if created:
        shutil.rmtree(out, ignore_errors=True)
        return
    for entry in out.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def default_out(config: RunConfig) -> Path:
    """``runs/DATA-MODEL-TIME`` for a run without ``--out`` (DATA: the data's name without its
    file suffix, ``licenses`` for ``licenses.csv``).

    >>> str(default_out(RunConfig(data="data/licenses.csv")))[:22]
    'runs/licenses-auto-202'
    """
    name = Path(config.data).stem or "data"
    spec = config.model_spec
    model = spec.short if spec is not None else "auto"
    return Path("runs") / f"{name}-{model}-{datetime.now():%Y%m%d-%H%M%S}"


def _check_options(config: RunConfig) -> ModelSource:
    """The options refused before any data is read; the run's model source (not yet opened)."""
    if config.tensorboard and importlib.util.find_spec("tensorboardX") is None:
        raise ConfigError(
            "--tensorboard needs tensorboardX, an optional part: pip install 'jaxfeed[tensorboard]'"
        )
    check_kind_options(config)  # --task lm's, --tokenizer
    source = source_for(config.model_spec)
    source.check_options(config)  # --lora and its companions
    if config.mesh is not None:
        mesh_of(config)  # a --mesh the devices cannot make is refused before any data is read
    return source


def _resumed(run: Run, source: ModelSource) -> Run:
    """``run`` with a resumed run's record, the policy for a model file's code and its model
    source, opened (a model file checked, a Hub checkpoint resolved, hashed and checked against
    the record) before any write."""
    config, out = run.config, run.out
    run.record = record = read_run(out) if config.resume else None
    run.policy = CodePolicy(
        copy=None if record is None else model_copy(record, out), trust=config.trust_code
    )
    run.model_source = source
    source.open(config, record, run.policy)
    return run


def _silent(*args: Any, **kwargs: Any) -> None:
    pass
