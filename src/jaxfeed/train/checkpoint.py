"""Checkpoints that restore anywhere, built on Orbax (exports for serving: :mod:`jaxfeed.serve.export`).

A checkpoint step holds two Orbax items:

* ``state``: the arrays (model parameters, BatchNorm statistics, RNG keys stored as raw key data,
  optimizer state), saved with ``StandardSave`` (tensorstore, no pickle);
* ``meta``: JSON: step, epoch, the loader's ``state_dict()``, the epoch's metrics, the history,
  the run configuration and which leaves are PRNG keys.

Restoring reads into the shapes and shardings of freshly built objects on the current devices,
whatever devices, sharding or process count the checkpoint was saved from. ``meta`` also records
a SHA-256 of every array as saved; restoring recomputes them and refuses a step whose bytes
changed (flipped bits, a truncated file) with a :class:`CheckpointError` naming the step.
:func:`restore_weights` reads only the model's part of ``state`` (for inference and exports), so
it restores whatever optimizer, schedule or metrics wrote the step.

Orbax writes each step into a temporary folder and renames it when complete, so a process killed
mid-save leaves the previous steps restorable; it removes an old step by renaming it into
``.jaxfeed-removing/``, where the writer deletes it, so a process killed mid-removal leaves the
others restorable too. A step some of whose files are gone all the same (a removal by an older
version cut short, an interrupted copy) is skipped by every reader, named in one line, and
removed by the next writer. Opening a manager only reads: the first ``save``
makes it the directory's writer, recorded in ``.jaxfeed-writer.json`` (pid, host, process start
time). A writer removes half-written steps only when they are provably abandoned: the recorded
writer is a process of this host that no longer runs (or itself, when closing). A second live
writer is refused; a reader (``jaxfeed eval`` while ``jaxfeed train`` runs) deletes nothing and
works on a read-only folder.

Long because saving, restoring (whole or weights only) and the writer's rules share one layout
on disk and its checks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxfeed._base.files import check_writable
from jaxfeed.train import restack
from jaxfeed.train.checkpoint_trees import (
    _abstract,
    _data_to_keys,
    _first_difference,
    _flat_shapes,
    _key_paths,
    _keys_to_data,
)
from jaxfeed.train.checkpoint_trees import abstract_like as abstract_like  # public here too
from jaxfeed.train.checkpoint_trees import checksums as checksums  # public here too
from jaxfeed.train.monitor import DEFAULT_MONITOR, monitor_mode, pick_best
from jaxfeed.train.orbax_logs import _REPORTED_FRAGMENTS, _WAITS, _first_line, _quiet_orbax
from jaxfeed.train.trained_part import base_problem, merged, prune, saved_paths
from jaxfeed.train.writer_record import (
    REMOVING,
    WRITER_FILE,
    claiming,
    finish_removals,
    identity,
    partial_saves,
    step_condition,
    writer_alive,
)

FORMAT = "jaxfeed-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint is missing, foreign, or does not fit the objects it is restored into.

    >>> import tempfile
    >>> from jaxfeed.checkpoint import CheckpointManager
    >>> try:
    ...     CheckpointManager(tempfile.mkdtemp()).restore({"w": 0.0})
    ... except CheckpointError as e:
    ...     print("refused:", type(e).__name__)
    refused: CheckpointError
    """


_SAID_CUT_SHORT: set[tuple[str, int, str]] = set()  # (folder, step, what is missing) said


# ---------------------------------------------------------------------------------- manager
_STEP = "_jaxfeed_step"  # the step, beside the metrics Orbax ranks (ties: the earliest is kept)


class _MetricsFromMeta:
    """A preservation policy that gives ``policy`` the metrics of every step.

    Orbax writes a step's metrics to disk only with its own ``best_fn``, so a manager reopened
    on a folder (a resumed run) sees the earlier steps without metrics, and ``BestN`` would
    delete the best of them as soon as ``LatestN`` lets go of it. jaxfeed keeps each step's
    metrics in its ``meta`` item: ``read(step)`` fills them in.
    """

    def __init__(self, read: Any, policy: Any) -> None:
        self.read, self.policy = read, policy

    def should_preserve(self, checkpoints: Any, *, context: Any) -> Any:
        filled = [
            info if info.metrics is not None else _Info(info.step, self.read(info.step), info.time)
            for info in checkpoints
        ]
        return self.policy.should_preserve(filled, context=context)


@dataclasses.dataclass(frozen=True)
class _Info:
    """Orbax's ``PolicyCheckpointInfo`` (a protocol): a step, its metrics, its save time."""

    step: int
    metrics: dict[str, Any] | None
    time: Any


class CheckpointManager:
    """Numbered checkpoints in ``directory``: the last ``keep_last`` and the best ``keep_best`` by
    ``best_metric`` are kept (both, always: the latest is never deleted for not being the best).

    The best step follows the rule of :mod:`jaxfeed.train.monitor`, as ``History.best`` and
    ``EarlyStopping`` do: ``best_metric`` defaults to ``eval_loss``, ``best_mode`` to its direction
    (min for losses and errors, max otherwise), and ties go to the earliest step.

    >>> import tempfile, jax.numpy as jnp
    >>> from jaxfeed.train.checkpoint import CheckpointManager
    >>> with CheckpointManager(tempfile.mkdtemp(), async_save=False) as ckpt:
    ...     ckpt.save(1, {"w": jnp.ones(3)}, metrics={"eval_accuracy": 0.5})
    ...     restored = ckpt.restore("latest", state={"w": jnp.zeros(3)})
    >>> restored["state"]["w"].tolist(), restored["meta"]["step"]
    ([1.0, 1.0, 1.0], 1)
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        keep_last: int = 2,
        keep_best: int = 1,
        best_metric: str = DEFAULT_MONITOR,
        best_mode: str | None = None,
        save_every_epochs: int = 1,
        min_save_interval: float = 0.0,
        async_save: bool = True,
    ) -> None:
        import orbax.checkpoint as ocp  # noqa: PLC0415 (import cost: orbax, when checkpointing)
        from orbax.checkpoint import (  # noqa: PLC0415 (import cost: orbax, when checkpointing)
            checkpoint_managers as policies,
        )

        best_mode = monitor_mode(best_metric, best_mode)
        if keep_last < 1:
            raise ValueError(
                f"keep_last must be >= 1 (the latest checkpoint is always kept), got {keep_last}"
            )
        if save_every_epochs < 1:
            raise ValueError(f"save_every_epochs must be >= 1, got {save_every_epochs}")
        if not min_save_interval >= 0:
            raise ValueError(f"min_save_interval must be >= 0 seconds, got {min_save_interval}")
        self.directory = Path(directory).absolute()
        if not self.directory.exists():
            check_writable(self.directory, "checkpoint directory", min_free=64 << 20)
        elif not self.directory.is_dir():
            raise CheckpointError(f"the checkpoint directory {self.directory} is not a folder")
        self.best_metric, self.best_mode = best_metric, best_mode
        self.save_every_epochs = save_every_epochs
        self.min_save_interval = float(min_save_interval)
        self._last_save: float | None = None  # time.monotonic() of this manager's last save
        self._opened = time.monotonic()
        self._best_saved: float | None = None  # best_metric's best value among the saved steps
        self._best_read = False  # _best_saved read from a folder this manager opened
        preserve = [policies.LatestN(n=keep_last)]
        if keep_best > 0:
            sign = 1.0 if best_mode == "max" else -1.0
            preserve.append(
                _MetricsFromMeta(self._saved_metrics, policies.BestN(
                    # kept: the highest keys; on ties the earliest step (the rule of best_step)
                    get_metric_fn=lambda m: (
                        sign * float(m.get(best_metric, float("nan"))),
                        -float(m.get(_STEP, 0)),
                    ),
                    reverse=False,
                    n=keep_best,
                    keep_checkpoints_without_metrics=False,
                ))
            )  # fmt: skip
        self._options = ocp.CheckpointManagerOptions(
            preservation_policy=policies.AnyPreservationPolicy(preserve),
            enable_async_checkpointing=async_save,
            cleanup_tmp_directories=False,  # see begin_writing: only provably abandoned ones
            create=False,
            todelete_subdir=REMOVING,  # a removal is one rename; wait() deletes what is there
        )
        self._ocp = ocp
        self.removed_partial: list[str] = []
        self.cut_short: dict[int, str] = {}  # steps some of whose files are gone: what is missing
        self._pending: int | None = None  # the step an asynchronous save is writing
        self._failed: CheckpointError | None = None  # a save that failed (reported once)
        self.writing = False
        self._owner: dict[str, Any] | None = None
        # Until the first save this manager only reads: Orbax's read-only mode writes, creates and
        # deletes nothing, so a reader can share the folder with a running writer.
        with _quiet_orbax():  # it warns about every option read-only mode turns off
            self._manager = ocp.CheckpointManager(
                self.directory,
                options=ocp.CheckpointManagerOptions(read_only=True, create=False),
                item_names=("state", "meta"),
            )
        self._check_steps()

    def begin_writing(self) -> None:
        """Become the directory's writer (``save`` does this on its first call).

        Proves the folder writable, records this process as its writer, and removes half-written
        steps a dead writer of this host left behind. Raises :class:`CheckpointError` while
        another live process writes here. Idempotent.
        """
        if self.writing:
            return
        check_writable(self.directory, "checkpoint directory", min_free=64 << 20)
        if jax.process_index() == 0:  # Orbax's primary process makes and renames step folders
            self._claim()
        self._manager.close()
        self._manager = self._ocp.CheckpointManager(
            self.directory, options=self._options, item_names=("state", "meta")
        )
        logging.getLogger("absl").addFilter(_WAITS)  # once: a logger's filters are a set
        self.writing = True

    def _claim(self) -> None:
        with claiming(self.directory):
            self._claim_locked()

    def _claim_locked(self) -> None:
        record_path = self.directory / WRITER_FILE
        me = identity()
        try:
            previous = json.loads(record_path.read_text())
        except FileNotFoundError:
            previous = None
        except (OSError, ValueError):
            previous = {}
        alive = None if previous is None else writer_alive(previous)
        if alive and previous.get("pid") != me["pid"]:
            raise CheckpointError(
                f"{self.directory} is being written by process {previous.get('pid')} on "
                f"{previous.get('host')} (since {previous.get('since')}); one run writes a checkpoint "
                "directory at a time: stop it, or use another directory"
            )
        partial = partial_saves(self.directory)
        if alive is False:  # its writer is gone: its half-written steps can never complete
            for path in partial:
                shutil.rmtree(path, ignore_errors=True)
            self.removed_partial = [p.name for p in partial]
        if alive is False or previous is None or previous.get("pid") == me["pid"]:
            self._remove_cut_short()  # no other writer removes anything here meanwhile
        elif partial and alive is None:
            print(
                f"jaxfeed: {self.directory} holds unfinished saves {[p.name for p in partial]} whose writer "
                f"({'unknown' if not previous else previous.get('host')}) cannot be checked from here; "
                "they are left in place (delete them once no run writes there)",
                file=sys.stderr,
            )
        tmp = record_path.with_name(f"{WRITER_FILE}.{me['pid']}.tmp")
        tmp.write_text(json.dumps(me))
        os.replace(tmp, record_path)
        self._owner = me

    def _release(self) -> None:
        """Closing writer: no save is in flight, so leftover partial steps are abandoned."""
        if self._owner is None:
            return
        record_path = self.directory / WRITER_FILE
        with contextlib.suppress(OSError, ValueError), claiming(self.directory):
            if json.loads(record_path.read_text()).get("pid") == self._owner["pid"]:
                for path in partial_saves(self.directory):
                    shutil.rmtree(path, ignore_errors=True)
                finish_removals(self.directory)
                record_path.unlink()
        self._owner = None

    def _check_steps(self) -> None:
        """Refuse another program's Orbax steps; set aside (and name) the steps cut short."""
        for step in self._manager.all_steps():
            condition, missing = step_condition(self.directory / str(step))
            if condition == "foreign":
                raise CheckpointError(
                    f"{self.directory} holds Orbax step {step} that jaxfeed did not write (no 'meta' item); "
                    "use another checkpoint directory"
                )
            if condition == "cut short":
                self.cut_short[int(step)] = missing
        said = {(str(self.directory), s, m) for s, m in self.cut_short.items()}
        if said - _SAID_CUT_SHORT and jax.process_index() == 0:  # once a process, not per opening
            _SAID_CUT_SHORT.update(said)
            print(
                f"jaxfeed: checkpoint {self._cut_short_words()}: skipped (steps: {self.all_steps}); "
                "the next run that writes there removes it",
                file=sys.stderr,
            )

    def _cut_short_words(self) -> str:
        cut = sorted(self.cut_short)
        missing = ", ".join(f"{s}/{self.cut_short[s]}" for s in cut)
        return (
            f"step{'s' if len(cut) > 1 else ''} {', '.join(map(str, cut))} in {self.directory} "
            f"{'were' if len(cut) > 1 else 'was'} cut short (a removal or copy interrupted: "
            f"{missing} missing)"
        )

    def _remove_cut_short(self) -> None:
        """The writer (no other one runs): delete the steps cut short, and what a removal left in
        ``.jaxfeed-removing/``, by the same rename and delete as Orbax's removals."""
        removing = self.directory / REMOVING
        for step in sorted(self.cut_short):
            removing.mkdir(exist_ok=True)
            with contextlib.suppress(OSError):
                os.replace(self.directory / str(step), removing / f"{step}.cut-short")
        self.cut_short = {}
        finish_removals(self.directory)

    # ------------------------------------------------------------------ saving
    def save(
        self,
        step: int,
        state: Any,
        *,
        metrics: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Save ``state`` (a pytree of arrays) and JSON ``meta`` as step ``step``.

        Returns once the arrays are copied to host memory; the files are written in the
        background (``async_save=True``) and ``wait``/``close`` raise a failed write's error.
        """
        self.begin_writing()
        ocp = self._ocp
        metrics = {
            k: float(v)
            for k, v in (metrics or {}).items()
            if isinstance(v, int | float | np.number)
        }
        payload = {
            "format": FORMAT,
            "version": VERSION,
            "step": int(step),
            "metrics": metrics,
            "key_paths": _key_paths(state),
            "shapes": {
                k: [list(v[0]), v[1]] for k, v in _flat_shapes(_keys_to_data(state)).items()
            },
            "checksums": checksums(_keys_to_data(state)),
            **dict(meta or {}),
        }
        json.dumps(payload)  # fail now, not in a background thread
        if self.min_save_interval:  # what wants_epoch compares with (nothing to track at 0)
            self._last_save = time.monotonic()
            if self._improves(metrics):
                self._best_saved = metrics[self.best_metric]
        if self._pending is not None:  # Orbax waits for it too: its error is its own
            self.wait()
        try:
            self._manager.save(
                int(step),
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(_keys_to_data(state)),
                    meta=ocp.args.JsonSave(payload),
                ),
                metrics={**metrics, _STEP: int(step)} if metrics else None,
                force=True,
            )
        except Exception as err:  # this save, or the asynchronous one before it, failed
            raise self._write_failed(self._pending or int(step), err) from None
        self._pending = int(step)
        if not self._options.enable_async_checkpointing and self._owner is not None:
            finish_removals(self.directory)  # the steps this save's policy removed (renamed)

    def wants_epoch(self, metrics: Mapping[str, Any]) -> bool:
        """Whether an epoch that ended with ``metrics`` is saved under ``min_save_interval``:
        always with 0 (the default), else once that many seconds have passed since this
        manager's last save (or its opening, on a folder that holds checkpoints), or when the
        epoch is the best so far by ``best_metric`` (so the best checkpoint is never skipped).
        Short epochs then cost a save every ``min_save_interval`` seconds, not one each
        (``Trainer.fit`` still saves where training ends and on SIGTERM).

        >>> import tempfile
        >>> ckpt = CheckpointManager(tempfile.mkdtemp(), min_save_interval=60, async_save=False)
        >>> ckpt.wants_epoch({"eval_loss": 1.0})  # nothing saved yet
        True
        >>> ckpt.save(1, {"w": np.ones(2)}, metrics={"eval_loss": 1.0})
        >>> ckpt.wants_epoch({"eval_loss": 1.5}), ckpt.wants_epoch({"eval_loss": 0.5})
        (False, True)
        >>> ckpt.close()
        """
        last = self._last_save
        if last is None and self.latest_step is not None:  # resumed: counted from the opening
            last = self._opened
        if self.min_save_interval == 0 or last is None:
            return True
        if time.monotonic() - last >= self.min_save_interval:
            return True
        return self._improves(metrics)

    def _improves(self, metrics: Mapping[str, Any]) -> bool:
        """Whether ``metrics`` rank above every saved step's (ties go to the earlier step)."""
        value = metrics.get(self.best_metric)
        if not self._best_read:  # a resumed folder: its best step so far, read once
            self._best_read = True
            best = self.best_step if self.latest_step is not None else None
            if best is not None and self._best_saved is None:
                self._best_saved = self.metrics(best).get(self.best_metric)
        return pick_best([(0, self._best_saved), (1, value)], self.best_mode) == 1

    def _write_failed(self, step: int, err: BaseException) -> CheckpointError:
        """One error for a save that failed (Orbax reports it from several threads): the step,
        the folder and the cause; the steps before it stay as they were."""
        cause, chain, seen = _first_line(err), [], err
        while seen is not None and len(chain) < 4:
            chain.append(str(seen))
            seen = seen.__cause__ or seen.__context__
        full = any(
            mark in " ".join(chain)
            for mark in ("No space left", "File too large", "Disk quota", "[os_error_code='28'",
                         "[os_error_code='27'", "[os_error_code='122'")
        )  # fmt: skip
        logging.getLogger("asyncio").addFilter(_REPORTED_FRAGMENTS)  # once: a set of filters
        done = [s for s in self.all_steps if s < step]
        kept = f"; step {done[-1]} is intact" if done else ""
        self._failed = CheckpointError(
            f"could not write checkpoint step {step} to {self.directory}: "
            + ("disk full?" if full else cause)
            + kept
        )
        return self._failed

    def wait(self) -> None:
        """Block until pending asynchronous saves are written; raise their errors (once, as a
        :class:`CheckpointError` naming the step and the folder)."""
        if self._failed is not None:
            raise self._failed
        try:
            with _quiet_orbax(logging.CRITICAL):  # it logs the failure from each thread
                self._manager.wait_until_finished()
                self._manager.check_for_errors()
        except Exception as err:
            raise self._write_failed(self._pending or 0, err) from None
        self._pending = None
        if self._owner is not None:  # the steps Orbax removed (renamed) meanwhile
            finish_removals(self.directory)

    def close(self) -> None:
        """Wait for pending saves (raising their errors) and release the manager (and the
        directory, for a writer: a failed save's partial step is removed)."""
        try:
            if self.writing:
                try:
                    self.wait()
                finally:
                    self._release()
        finally:
            if self._failed is None:
                self._manager.close()
            else:  # the failure is reported: Orbax's close would raise it again
                with contextlib.suppress(Exception), _quiet_orbax(logging.CRITICAL):
                    self._manager.close()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    @property
    def all_steps(self) -> list[int]:
        """The steps saved here (those cut short left out: :attr:`cut_short`)."""
        return sorted(s for s in self._manager.all_steps() if s not in self.cut_short)

    @property
    def latest_step(self) -> int | None:
        steps = self.all_steps
        return steps[-1] if steps else None

    @property
    def best_step(self) -> int | None:
        scored = ((s, self.metrics(s).get(self.best_metric)) for s in self.all_steps)
        return pick_best(scored, self.best_mode)

    def _saved_metrics(self, step: int) -> dict[str, float] | None:
        """What Orbax ranks ``step`` by, read from its ``meta`` (None: no metrics saved)."""
        try:
            metrics = self.metrics(step)
        except CheckpointError:
            return None
        return {**metrics, _STEP: int(step)} if metrics else None

    def metrics(self, step: int) -> dict[str, float]:
        """The metrics saved with ``step``."""
        return dict(self.meta(step).get("metrics", {}))

    def meta(self, step: int) -> dict[str, Any]:
        path = self.directory / str(step) / "meta" / "metadata"
        if not path.is_file():
            candidates = list((self.directory / str(step) / "meta").glob("*"))
            path = candidates[0] if candidates else path
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise CheckpointError(
                f"cannot read the metadata of step {step} in {self.directory}: {err}"
            ) from err
        except RecursionError:
            raise CheckpointError(
                f"cannot read the metadata of step {step} in {self.directory}: nested too deeply"
            ) from None

    def resolve(self, step: int | str | None) -> int:
        """A step number for ``None``/"latest", "best" or an int; raises when there is none."""
        if step in (None, "latest"):
            found = self.latest_step
        elif step == "best":
            found = self.best_step
        elif isinstance(step, int | np.integer) or (isinstance(step, str) and step.isdigit()):
            found = int(step)
            if found in self.cut_short:
                raise CheckpointError(
                    f"checkpoint {self._cut_short_words()}: restore another step "
                    f"(steps: {self.all_steps})"
                )
            if found not in self.all_steps:
                raise CheckpointError(
                    f"no step {found} in {self.directory}; steps: {self.all_steps}"
                )
        else:
            raise CheckpointError(f"step must be None, 'latest', 'best' or an int, got {step!r}")
        if found is None:
            raise CheckpointError(
                f"no {'best ' if step == 'best' else ''}checkpoint in {self.directory}"
            )
        return found

    def restore(
        self,
        step: int | str | None = None,
        *,
        state: Any = None,
        model: Any = None,
        optimizer: Any = None,
    ) -> dict[str, Any]:
        """Restore ``step`` into the shapes and shardings of ``state`` (a pytree), or into an NNX
        ``model`` and ``optimizer`` (updated in place). Returns ``{"state": ..., "meta": ...}``.

        Weights only: ``restore(step, model=fresh_model)`` without ``optimizer`` (or a ``state``
        holding only some of the saved top-level entries) reads just those arrays and ignores
        the rest (the optimizer state), for inference and fine-tuning.
        """
        step = self.resolve(step)
        meta = self.meta(step)
        if meta.get("format") != FORMAT:
            raise CheckpointError(f"step {step} in {self.directory} is not a jaxfeed checkpoint")
        if state is None:
            if model is None:
                raise ValueError("restore needs state= (a pytree) or model= (and optimizer=)")
            state = nnx_pure_state(model, optimizer)
        wanted = _abstract(_keys_to_data(state))
        saved = {k: tuple(v) for k, v in meta.get("shapes", {}).items()}
        partial = _partial_keys(wanted, saved)
        if partial:
            saved = {k: v for k, v in saved.items() if k.startswith(partial)}
        difference = _first_difference(saved, _flat_shapes(wanted))
        if difference:  # a checkpoint of layers held one by one, for a model holding them stacked
            layers = restack.plan(saved, _flat_shapes(wanted))
            if layers is None:
                raise CheckpointError(
                    f"cannot restore step {step} of {self.directory}: {difference}"
                )
            converted = restack.restore(self, step, wanted, layers)
            arrays = _data_to_keys(converted["state"], state)
            if model is not None:
                load_nnx_pure_state(arrays, model, optimizer)
            return {"state": arrays, "meta": converted["meta"]}
        ocp = self._ocp
        try:
            if partial:  # Orbax partial restore, outside the manager (its item handler is Standard)
                with ocp.PyTreeCheckpointer() as checkpointer:
                    restored_state = checkpointer.restore(
                        self.directory / str(step) / "state",
                        args=ocp.args.PyTreeRestore(
                            wanted,
                            restore_args=ocp.checkpoint_utils.construct_restore_args(wanted),
                            partial_restore=True,
                        ),
                    )
            else:
                restored_state = self._manager.restore(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardRestore(wanted), meta=ocp.args.JsonRestore()
                    ),
                )["state"]
        except Exception as err:
            raise CheckpointError(
                f"checkpoint step {step} in {self.directory} is damaged or incomplete and cannot be read "
                f"({_first_line(err)}); restore another step (steps: {self.all_steps})"
            ) from None
        recorded = meta.get("checksums") or {}
        saved_dtypes = {k: v[1] for k, v in meta.get("shapes", {}).items()}
        wanted_dtypes = {k: v[1] for k, v in _flat_shapes(wanted).items()}
        for path, digest in checksums(restored_state).items():
            cast = saved_dtypes.get(path) != wanted_dtypes.get(path)  # restored as another dtype
            if recorded.get(path) and digest and not cast and recorded[path] != digest:
                raise CheckpointError(
                    f"checkpoint step {step} in {self.directory} is corrupted: {path} differs from the "
                    f"array saved (SHA-256 mismatch); restore another step (steps: {self.all_steps})"
                )
        arrays = _data_to_keys(restored_state, state)
        if model is not None:
            load_nnx_pure_state(arrays, model, optimizer)
        return {"state": arrays, "meta": meta}


LINEN_LAYOUTS = {
    1: "{params, batch_stats, opt_state} (Linen checkpoints written before the Trainer's core "
    "restructure)",
    2: "{params, collections, opt_state} (every variable collection besides params)",
}


def linen_layout(meta: Mapping[str, Any]) -> int | None:
    """The Linen state layout a checkpoint's metadata describes: 1 for the first one (a top-level
    ``batch_stats``), 2 for the current one (``collections``), None when it is not a Linen
    trainer's state (or holds no collections, where both layouts are the same arrays)."""
    tops = {k.split("]")[0] + "]" for k in meta.get("shapes", {}) or {}}
    if "['collections']" in tops:
        return 2
    if "['batch_stats']" in tops and "['params']" in tops:
        return 1
    return None


def restore_linen(manager: CheckpointManager, step: Any, state: Mapping[str, Any]) -> dict:
    """Restore a Linen trainer's ``state`` (``{params, collections, opt_state}``) from ``step``,
    whichever of :data:`LINEN_LAYOUTS` it was saved in: a layout-1 checkpoint's ``batch_stats``
    become ``collections["batch_stats"]``. A checkpoint whose collections this model lacks is
    refused, naming its layout."""
    step = manager.resolve(step)
    meta = manager.meta(step)
    if linen_layout(meta) != 1:
        return manager.restore(step, state=state)
    collections = dict(state["collections"])
    if "batch_stats" not in collections or set(collections) != {"batch_stats"}:
        raise CheckpointError(
            f"step {step} of {manager.directory} is in Linen checkpoint layout 1 "
            f"{LINEN_LAYOUTS[1]}; this model's variable collections are {sorted(collections)}, "
            "so it cannot hold it: restore it into the model it was trained with"
        )
    old = {
        "params": state["params"],
        "batch_stats": collections["batch_stats"],
        "opt_state": state["opt_state"],
    }
    restored = manager.restore(step, state=old)
    arrays = restored["state"]
    new = {
        "params": arrays["params"],
        "collections": {"batch_stats": arrays["batch_stats"]},
        "opt_state": arrays["opt_state"],
    }
    return {"state": new, "meta": restored["meta"]}


def _partial_keys(wanted: Any, saved: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``keystr`` prefixes of ``wanted``'s top-level entries when they are a proper subset of
    the saved ones (a weights-only restore); else ``()``."""
    if not isinstance(wanted, Mapping):
        return ()
    prefixes = tuple(f"[{k!r}]" for k in wanted)
    saved_top = {k.split("]")[0] + "]" for k in saved}
    if set(prefixes) < saved_top:
        return prefixes
    return ()


def nnx_pure_state(model: Any, optimizer: Any = None) -> dict[str, Any]:
    """``{"model": ..., "optimizer": ...}`` as plain nested dicts of arrays.

    >>> from flax import nnx
    >>> pure = nnx_pure_state(nnx.Linear(2, 1, rngs=nnx.Rngs(0)))
    >>> sorted(pure["model"])
    ['bias', 'kernel']
    """
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

    out = {"model": nnx.to_pure_dict(nnx.state(model))}
    if optimizer is not None:
        out["optimizer"] = nnx.to_pure_dict(nnx.state(optimizer))
    return out


def load_nnx_pure_state(pure: Mapping[str, Any], model: Any, optimizer: Any = None) -> None:
    """Write arrays from :func:`nnx_pure_state`'s layout into ``model`` (and ``optimizer``).

    >>> from flax import nnx
    >>> a, b = nnx.Linear(2, 1, rngs=nnx.Rngs(0)), nnx.Linear(2, 1, rngs=nnx.Rngs(1))
    >>> load_nnx_pure_state(nnx_pure_state(a), b)
    >>> bool((a.kernel[...] == b.kernel[...]).all())
    True
    """
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

    for obj, key in ((model, "model"), (optimizer, "optimizer")):
        if obj is None:
            continue
        state = nnx.state(obj)
        nnx.replace_by_pure_dict(state, pure[key])
        nnx.update(obj, state)


# ---------------------------------------------------------------------------------- weights
def restore_weights(
    checkpoints: str | os.PathLike | CheckpointManager, into: Any, step: int | str | None = None
) -> dict[str, Any]:
    """Restore only the model of ``step`` (``None``/"latest", "best" or an int) from a checkpoint
    folder or an open :class:`CheckpointManager`: its parameters and its other variables
    (BatchNorm statistics, RNG state), never the optimizer state, whatever optimizer, schedule or
    metrics wrote it. Returns ``{"weights": ..., "meta": ...}``.

    ``into`` is an NNX module (updated in place; an abstract one from ``nnx.eval_shape`` too),
    or a tree of arrays or ``jax.ShapeDtypeStruct`` in the model's layout: an NNX model's pure
    state dict, or Linen variables (``{"params": ..., "batch_stats": ...}``, from either Linen
    checkpoint layout); ``weights`` comes back in that layout. A checkpoint of neither trainer
    (a user's own tree) restores the top-level entries ``into`` names. "best" ranks by
    ``eval_loss`` for a folder; pass a manager to rank as the run did. Targets with a sharding
    are read into it; abstract ones without are placed on the first device.

    >>> import tempfile, optax
    >>> from flax import nnx
    >>> folder = tempfile.mkdtemp()
    >>> model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    >>> optimizer = nnx.Optimizer(model, optax.adam(optax.linear_schedule(0.1, 0.0, 9)), wrt=nnx.Param)
    >>> with CheckpointManager(folder, async_save=False) as ckpt:
    ...     ckpt.save(9, nnx_pure_state(model, optimizer), meta={"epoch": 1})
    >>> fresh = nnx.Linear(2, 1, rngs=nnx.Rngs(1))  # no optimizer, no schedule
    >>> restore_weights(folder, fresh)["meta"]["step"]
    9
    >>> bool((fresh.kernel[...] == model.kernel[...]).all())
    True
    """
    if isinstance(checkpoints, CheckpointManager):
        return _restore_weights(checkpoints, into, step)
    folder = Path(checkpoints)
    if not folder.is_dir():
        raise CheckpointError(f"no checkpoint folder {folder}")
    with CheckpointManager(folder, async_save=False) as manager:
        return _restore_weights(manager, into, step)


def _restore_weights(manager: CheckpointManager, into: Any, step: Any) -> dict[str, Any]:
    from flax import nnx  # noqa: PLC0415 (import cost: flax, only for NNX models)

    step = manager.resolve(step)
    module = into if isinstance(into, nnx.Module) else None
    tree = _on_a_device(nnx_pure_state(module)["model"] if module is not None else into)
    tops = {k.split("]")[0] + "]" for k in manager.meta(step).get("shapes", {}) or {}}
    if module is not None and "['model']" not in tops:
        raise CheckpointError(
            f"step {step} of {manager.directory} holds no NNX model (its entries: "
            f"{', '.join(sorted(tops)) or 'none'}); restore a tree into it"
        )
    if "['model']" in tops:  # an NNX trainer's {model, optimizer}
        target, meta = {"model": tree}, manager.meta(step)
        if meta.get("frozen"):  # its trained part alone: the frozen weights are ``into``'s
            saved = saved_paths(meta)
            problem = base_problem(meta, tree, saved)
            if problem:
                raise CheckpointError(
                    f"cannot restore step {step} of {manager.directory}: {problem}"
                )
            target = prune(target, saved)
        restored = manager.restore(step, state=target)
        weights = merged(tree, restored["state"]["model"])
        if module is not None:
            load_nnx_pure_state({"model": weights}, module)
        return {"weights": weights, "meta": restored["meta"]}
    if "['params']" in tops and isinstance(tree, Mapping) and "params" in tree:
        return _restore_linen_weights(manager, step, tree)
    restored = manager.restore(step, state=tree)  # a user's tree: the entries it names
    return {"weights": restored["state"], "meta": restored["meta"]}


def _on_a_device(tree: Any) -> Any:
    """``tree`` with its ``ShapeDtypeStruct`` leaves that name no sharding placed on the first
    local device (Orbax would restore them as numpy arrays)."""
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

    def place(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct) and x.sharding is None:
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device)
        return x

    return jax.tree.map(place, tree)


def _restore_linen_weights(manager: CheckpointManager, step: int, variables: Mapping) -> dict:
    """Linen ``variables`` (``{"params", **collections}``) from a Linen trainer's state, saved
    in either of :data:`LINEN_LAYOUTS` (layout 1 holds ``batch_stats`` at the top)."""
    collections = {k: v for k, v in variables.items() if k != "params"}
    target: dict[str, Any] = {"params": variables["params"]}
    if linen_layout(manager.meta(step)) == 1:
        target.update(collections)
    elif collections:
        target["collections"] = collections
    restored = manager.restore(step, state=target)
    arrays = dict(restored["state"])
    weights = {"params": arrays.pop("params"), **arrays.pop("collections", {}), **arrays}
    return {"weights": weights, "meta": restored["meta"]}
