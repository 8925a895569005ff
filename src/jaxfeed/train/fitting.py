"""The fit loop of :class:`~jaxfeed.train.Trainer`: epochs, steps and what runs between them.

:class:`FitMixin` holds ``Trainer.fit`` and the loop under it: each epoch's steps, the logs,
evaluations, checkpoints and signals between steps, and a stop inside an epoch. It works on the
trainer's state (set in ``Trainer.__init__``); :mod:`jaxfeed.train.reporting` reads and checks
the figures, :mod:`jaxfeed.train.checkpointing` saves them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

from jaxfeed._base.curves import CurvesInBackground
from jaxfeed._base.files import atomic_write, check_writable
from jaxfeed.train.callbacks import Callback, overrides
from jaxfeed.train.checkpoint import CheckpointManager
from jaxfeed.train.history import History, plot_history
from jaxfeed.train.loggers import RunLog, make_loggers
from jaxfeed.train.preemption import Preempted, SignalWatch
from jaxfeed.train.reporting import REPORT_SECONDS, NonFiniteLossError
from jaxfeed.train.schedule import EpochProgress, Schedule


def device_busy(sums: Any) -> bool:
    """Whether the last dispatched step (its ``sums``) is still running on the device, asked
    without waiting. ``data_wait`` counts the time blocked on the loader only when the device
    had finished by the time the batch arrived: a wait during which the device still ran the
    steps already dispatched cost nothing (the host was merely ahead); one that began with the
    device idle is counted whole, as is one during which it finished (an upper bound).

    >>> import jax.numpy as jnp
    >>> device_busy(None), device_busy({"loss": jnp.zeros(()).block_until_ready()})
    (False, False)
    """
    if sums is None:
        return False
    ready = getattr(sums.get("loss"), "is_ready", None)
    try:
        return ready is not None and not ready()
    except RuntimeError:  # a deleted (donated) array: its step was dispatched long ago
        return False


class FitMixin:
    """``Trainer.fit`` and its loop (a part of :class:`~jaxfeed.train.Trainer`)."""

    def fit(
        self,
        train_loader: Iterable,
        eval_loader: Iterable | None = None,
        epochs: int | None = None,
        *,
        max_steps: int | None = None,
        eval_every: int | None = None,
        checkpoint_every: int | None = None,
        log_every: int | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        resume: bool = False,
        checkpoint_options: dict[str, Any] | None = None,
    ) -> History:
        """Train until ``epochs`` epochs and/or ``max_steps`` optimizer steps are done **in total**,
        evaluating after each epoch.

        ``epochs`` and ``max_steps`` count everything this trainer has trained, over all ``fit``
        calls and a resumed checkpoint: ``fit(epochs=2)`` then ``fit(epochs=5)`` trains 5 epochs.
        Without ``max_steps``, ``epochs`` defaults to 1; with it, to no limit (training stops at
        whichever limit comes first). A call that would train nothing raises ``ValueError`` (with
        ``resume=True`` it only warns: the run is already complete).

        Step schedule (counted in optimizer steps, ``trainer.step``): every ``log_every`` steps a
        row of the training loss and metrics averaged since the previous row, the learning rate
        (``optax.inject_hyperparams``), rows/s and wall time goes to ``metrics.jsonl`` and the
        loggers; every ``eval_every`` steps an eval row; every ``checkpoint_every`` steps a
        checkpoint, saved in the background.

        Training that stops inside an epoch (``max_steps``, ``stop_training``) evaluates its last
        state on ``eval_loader`` (an ``eval`` row) and, with ``checkpoint_dir``, saves it with
        those figures and the epoch's training metrics so far, so it is ranked with the epochs'
        checkpoints; ``history`` keeps whole epochs. With ``checkpoint_dir`` a checkpoint is also saved after every epoch
        and where training ends mid-epoch (see :class:`jaxfeed.train.checkpoint.CheckpointManager`;
        ``checkpoint_options`` are its arguments); with ``resume=True`` training continues from
        the latest one there (same step, next batch, RNG and optimizer state, the epoch's
        metrics so far), on any number of processes and devices, or starts fresh when there is
        none. SIGTERM or SIGINT during fit finish the step, save a checkpoint (with a
        ``checkpoint_dir``), print how to resume and raise
        :class:`~jaxfeed.train.preemption.Preempted`, a ``SystemExit`` (the process exits 143 or
        130); ``handle_signals=False`` leaves signals alone. Returns the :class:`History`; with
        ``out_dir`` also writes ``metrics.jsonl``, ``history.csv`` and ``curves.png``.
        """
        schedule = Schedule.make(epochs, max_steps, eval_every, checkpoint_every, log_every)
        if checkpoint_every is not None and checkpoint_dir is None:
            raise ValueError("checkpoint_every= needs checkpoint_dir=")
        if eval_every is not None and eval_loader is None:
            raise ValueError("eval_every= needs an eval_loader")
        if self.out_dir is not None and self.primary:
            check_writable(self.out_dir, "output folder")
        manager = None
        if checkpoint_dir is not None:
            manager = self._open_checkpoints(
                checkpoint_dir, checkpoint_options, resume, train_loader
            )
        elif resume:
            raise ValueError("resume=True needs checkpoint_dir=")
        if schedule.finished(self.step, self.epoch):
            message = self._nothing_to_train(schedule, epochs, max_steps)
            if manager is not None:
                manager.close()
            if not resume:
                raise ValueError(message)
            warnings.warn(message, stacklevel=2)
            return self.history
        self.stop_training = False
        if manager is not None:
            manager.begin_writing()  # refuses a directory another live run writes
        self._run_fit(train_loader, eval_loader, schedule, manager)
        return self.history

    def _run_fit(
        self,
        train_loader: Iterable,
        eval_loader: Iterable | None,
        schedule: Schedule,
        manager: CheckpointManager | None,
    ) -> None:
        """The fit's epochs with its run log and signal watch, then what ends a fit."""
        run_log = RunLog(
            self.out_dir if self.primary else None,
            make_loggers(self.loggers, self.out_dir, resume_step=self.step or None)
            if self.primary
            else [],
        )
        run_log.start(self.step)
        watch = SignalWatch() if self.handle_signals else None
        try:
            with watch or contextlib.nullcontext():
                self._fit_epochs(train_loader, eval_loader, schedule, manager, run_log, watch)
        except NonFiniteLossError:
            self._back_to_last_checkpoint(manager)
            raise
        except BaseException:
            self._write_back_after_failure()
            raise
        finally:
            run_log.close()
            if manager is not None:
                manager.close()
        self.core.write_back()
        for cb in self.callbacks:
            cb.on_fit_end(self)
        if self.plot_curves:
            self.draw_curves()

    def draw_curves(self, background: bool = False) -> Any:
        """``curves.png`` in ``out_dir`` (:func:`~jaxfeed.plot_history` of the history, the best
        and early-stopped epochs marked), which ``fit`` draws at its end unless
        ``plot_curves`` is False; ``background``: drawn by another process, returning its
        :class:`~jaxfeed._base.curves.CurvesInBackground` (``.result()`` waits). None where
        there is nothing to draw (no ``out_dir`` or history, or not process 0)."""
        if self.out_dir is None or not self.history or not self.primary:
            return None
        stopper = next((cb for cb in self.callbacks if hasattr(cb, "stopped_epoch")), None)
        marks = {"best": getattr(stopper, "best_epoch", None),
                 "stopped": getattr(stopper, "stopped_epoch", None)}  # fmt: skip
        path = self.out_dir / "curves.png"
        if background:
            return CurvesInBackground(self.history, path, **marks)
        return plot_history(self.history, path, **marks)

    def _back_to_last_checkpoint(self, manager: CheckpointManager | None) -> None:
        """After a non-finite loss: the trainer (and the model objects) back at the fit's last
        checkpoint, if it wrote one; else the model objects are left as they are (the steps
        donated their arrays: only a checkpoint holds a finite state). The non-finite state is
        written nowhere."""
        if manager is None or manager.latest_step is None:
            return
        try:
            self.restore_checkpoint(manager, "latest")
        except Exception as err:  # the NaN's error is the one to raise; say why this failed
            warnings.warn(f"could not restore the last checkpoint after the non-finite loss: {err}",
                          stacklevel=3)  # fmt: skip

    def _write_back_after_failure(self) -> None:
        """After any other failure: the model objects get the state the steps reached (they
        share the trainer's arrays, which the steps donated)."""
        with contextlib.suppress(Exception):  # the failure being raised is the one to report
            self.core.write_back()

    def _open_checkpoints(
        self,
        checkpoint_dir: str | os.PathLike,
        checkpoint_options: dict[str, Any] | None,
        resume: bool,
        train_loader: Iterable,
    ) -> CheckpointManager:
        """The checkpoint manager of a fit: restored from its latest checkpoint with ``resume``,
        refused when it holds another run's checkpoints."""
        manager = CheckpointManager(checkpoint_dir, **(checkpoint_options or {}))
        if resume and manager.latest_step is not None:
            self.restore_checkpoint(manager, "latest", train_loader)
        elif manager.latest_step is not None and manager.latest_step != self.step:
            # another run's steps (or this trainer's future ones): writing would mix the runs
            found = manager.latest_step
            manager.close()
            raise FileExistsError(
                f"checkpoint_dir {manager.directory} holds checkpoints of another run (up "
                f"to step {found}; this trainer is at step {self.step}); pass resume=True "
                "to continue that run, or choose an empty checkpoint_dir"
            )
        return manager

    def _nothing_to_train(
        self, schedule: Schedule, epochs: int | None, max_steps: int | None
    ) -> str:
        """Why a fit whose schedule is already finished trains nothing."""
        return (
            f"fit(epochs={epochs}) trains nothing: this trainer has already trained {self.epoch} "
            f"epochs, and epochs counts in total; pass epochs={self.epoch + 1} or more to continue"
            if schedule.epochs is not None and self.epoch >= schedule.epochs
            else f"fit(max_steps={max_steps}) trains nothing: this trainer has already trained "
            f"{self.step} steps, and max_steps counts in total"
        )

    def _fit_epochs(
        self,
        train_loader: Iterable,
        eval_loader: Iterable | None,
        schedule: Schedule,
        manager: Any,
        run_log: RunLog,
        watch: SignalWatch | None,
    ) -> None:
        for cb in self.callbacks:
            cb.on_fit_start(self)
        epochs = schedule.epochs
        while not schedule.finished(self.step, self.epoch) and not self.stop_training:
            logs = self._train_epoch(
                train_loader, eval_loader, self.epoch + 1, schedule, manager, run_log, watch
            )
            if logs is None:  # stopped mid-epoch: max_steps, or a callback's stop_training
                stopped = self._stop_mid_epoch(eval_loader, run_log)
                if manager is not None and manager.latest_step != self.step:
                    self.save_checkpoint(manager, train_loader, stopped)
                break
            if eval_loader is not None:
                result = self.evaluate(eval_loader)
                logs.update({f"eval_{k}": v for k, v in result.items()})
            self.epoch += 1
            self._progress = None
            self.history.append(logs)
            self._report_epoch(logs, epochs)
            for cb in self.callbacks:
                cb.on_epoch_end(self, logs)
            memory = self.state_bytes_per_device()  # as the state is laid out
            run_log.write({**logs, "step": self.step, "state_bytes_per_device": memory}, "epoch")
            if self.out_dir is not None and self.primary:
                atomic_write(self.out_dir / "history.csv", self.history.to_csv())
            last = self.stop_training or schedule.finished(self.step, self.epoch)
            if manager is not None and (
                (
                    self.epoch % manager.save_every_epochs == 0
                    and (last or manager.wants_epoch(logs))
                )
                or schedule.due("checkpoint_every", self.step)
            ):
                self.save_checkpoint(manager, train_loader, logs)
            if watch is not None and watch.should_stop(self.step, boundary=True):
                self._preempt(watch, manager, train_loader)
        if manager is not None and self.step and manager.latest_step != self.step:
            self._check_progress()
            self.save_checkpoint(manager, train_loader)  # ended mid-epoch: resumable from here

    def _stop_mid_epoch(self, eval_loader: Iterable | None, run_log: RunLog) -> dict[str, Any]:
        """The figures of a fit that stops inside an epoch (``max_steps``, ``stop_training``):
        the epoch's training metrics so far and, with an eval loader, the last state evaluated
        (an ``eval`` row; reused when ``eval_every`` fell on this step). They go with the last
        checkpoint, so that a run shorter than an epoch still has a state to select and export;
        ``history`` keeps completed epochs only."""
        progress = self._progress
        metrics: dict[str, Any] = {}
        if progress is not None and progress.sums is not None:
            host = self._check(progress.sums, progress.epoch, progress.first_step)
            metrics.update({f"train_{k}": v for k, v in host.items()})
        if eval_loader is not None:
            step, result = self._last_eval
            if step != self.step:
                result = self.evaluate(eval_loader)
                row = {"step": self.step, "epoch": self.epoch + 1}
                row.update({f"eval_{k}": v for k, v in result.items()})
                row["wall_time"] = round(time.time(), 3)
                run_log.write(row, "eval")
            metrics.update({f"eval_{k}": v for k, v in result.items()})
        return metrics

    def _train_epoch(
        self,
        loader: Iterable,
        eval_loader: Iterable | None,
        epoch: int,
        schedule: Schedule,
        manager: Any,
        run_log: RunLog,
        watch: SignalWatch | None,
    ) -> dict[str, Any] | None:
        """One epoch (or the rest of a resumed one); None when training stops mid-epoch."""
        progress = self._progress
        if progress is None or progress.epoch != epoch:
            progress = self._progress = EpochProgress(epoch, first_step=self.step)
        else:  # resumed or continued mid-epoch: the clock and the window restart here
            progress.started = progress.window_time = time.perf_counter()
            if progress.loader_state is not None:  # a later fit continues the same epoch
                loader.load_state_dict(progress.loader_state)
        progress.loader_state = None
        start = progress.started
        bar = self._progress_bar(loader, epoch, schedule.epochs)
        last_report = start
        per_batch = [cb for cb in self.callbacks if overrides(cb, "on_train_batch_end")]
        hooks = schedule.per_step or bool(per_batch) or watch is not None
        progress.iterator = iterator = iter(loader)
        try:
            while True:
                before, busy = time.perf_counter(), device_busy(progress.sums)
                batch = next(iterator, None)
                if not (busy and device_busy(progress.sums)):  # else the device never idled
                    progress.waited += time.perf_counter() - before
                if batch is None:
                    break
                arrays, n = self._batch(batch, "train")
                if progress.sums is None:
                    progress.sums = self._sums(progress.saved_sums)
                    progress.window_sums = progress.saved_sums
                self.core.state, progress.sums = self.core.train_step(
                    self.core.state, progress.sums, arrays, np.int32(n), np.int32(self.step)
                )
                self.step += 1
                progress.rows += n
                if bar is not None:
                    bar.update(1)
                    now = time.perf_counter()
                    if now - last_report > REPORT_SECONDS:
                        last_report = now
                        host = self._check(progress.sums, epoch, progress.first_step)
                        bar.set_postfix(self._postfix(host, progress.rows, progress.seconds()))
                if hooks and self._after_step(
                    progress, loader, eval_loader, schedule, manager, run_log, watch, per_batch
                ):
                    if hasattr(loader, "state_dict"):
                        progress.loader_state = loader.state_dict()
                    return None
        finally:
            if bar is not None:
                bar.close()
            progress.iterator = None
        sums, rows, waited = progress.sums, progress.rows, progress.waited
        if sums is None:
            raise ValueError("the train loader yielded no batches")
        host = self._check(sums, epoch, progress.first_step)
        seconds = progress.seconds()
        if bar is not None:
            bar.set_postfix(self._postfix(host, rows, seconds))
        logs: dict[str, Any] = {"epoch": epoch}
        logs.update({f"train_{k}": v for k, v in host.items()})
        learning_rate = self.core.learning_rate()
        if learning_rate is not None:
            logs["learning_rate"] = learning_rate
        logs["seconds"] = round(seconds, 4)
        logs["rows_per_second"] = round(rows / seconds, 1)
        # share of the epoch the device waited for batches (see device_busy)
        logs["data_wait"] = round(waited / seconds, 4)
        return logs

    def _after_step(
        self,
        progress: EpochProgress,
        loader: Iterable,
        eval_loader: Iterable | None,
        schedule: Schedule,
        manager: Any,
        run_log: RunLog,
        watch: SignalWatch | None,
        per_batch: list[Callback],
    ) -> bool:
        """Logs, evaluations, checkpoints and signals after a step; True to stop mid-epoch.
        Evaluations, checkpoints and signals falling on an epoch's last step wait for its end."""
        step = self.step
        last = progress.batches_left() == 0
        logs: dict[str, Any] = {"step": step, "epoch": progress.epoch}
        if schedule.due("log_every", step):
            row = self._step_row(progress)
            run_log.write(row, "train")
            logs.update(row)
        for cb in per_batch:
            cb.on_train_batch_end(self, step, logs)
        if last:
            return False
        stopping = self.stop_training or (
            schedule.max_steps is not None and step >= schedule.max_steps
        )
        if eval_loader is not None and schedule.due("eval_every", step):
            result = self.evaluate(eval_loader)
            self._last_eval = (step, result)
            row = {"step": step, "epoch": progress.epoch}
            row.update({f"eval_{k}": v for k, v in result.items()})
            row["wall_time"] = round(time.time(), 3)
            run_log.write(row, "eval")
        if manager is not None and schedule.due("checkpoint_every", step) and not stopping:
            self._check_progress()  # (a stop saves its own checkpoint, with its figures)
            self.save_checkpoint(manager, loader)
        if watch is not None and watch.should_stop(step):
            self._preempt(watch, manager, loader)
        return stopping

    def _step_row(self, progress: EpochProgress) -> dict[str, Any]:
        """Training loss and metrics averaged since the previous row (or the epoch start)."""
        host = self._host_sums(progress.sums, progress.epoch, progress.first_step)
        now = time.perf_counter()
        before = progress.window_sums or {}
        window = {k: host[k] - before.get(k, 0) for k in ("loss", "count", "rows")}
        window.update({k: v - before.get(k, 0) for k, v in host.items() if k.startswith("m_")})
        seconds = max(now - progress.window_time, 1e-9)
        progress.window_sums, progress.window_time = host, now
        row: dict[str, Any] = {"step": self.step, "epoch": progress.epoch}
        row.update({f"train_{k}": v for k, v in self._means(window).items()})
        learning_rate = self.core.learning_rate()
        if learning_rate is not None:
            row["learning_rate"] = learning_rate
        row["rows_per_second"] = round(float(window["rows"]) / seconds, 1)
        row["wall_time"] = round(time.time(), 3)
        return row

    def _preempt(self, watch: SignalWatch, manager: Any, loader: Iterable) -> None:
        """Save (when checkpointing), say how to resume, and raise :class:`Preempted`."""
        where = f"{signal.Signals(watch.signum).name}: stopped after step {self.step} ({self.epoch} epochs done)"
        if manager is not None:
            self._check_progress()
            if manager.latest_step != self.step:
                self.save_checkpoint(manager, loader)
            manager.wait()
            hint = self.resume_hint or "fit(..., checkpoint_dir=..., resume=True)"
            message = f"{where}; checkpoint saved in {manager.directory}; resume with: {hint}"
        else:
            message = f"{where}; nothing saved (fit had no checkpoint_dir)"
        if self.primary:
            print(message, file=sys.stderr, flush=True)
        raise Preempted(
            message,
            signum=watch.signum,
            step=self.step,
            epoch=self.epoch,
            checkpoint=None if manager is None else manager.directory,
        )
