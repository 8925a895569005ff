"""Checkpoints of a :class:`~jaxfeed.train.Trainer`: what it saves and how it restores.

:class:`CheckpointMixin` puts the trainer's state and run metadata (epoch, the epoch in
progress, the loader's position, history, config) into a
:class:`~jaxfeed.train.checkpoint.CheckpointManager` and reads them back, straight into the
state's layout on this run's mesh.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax

from jaxfeed.train.history import History
from jaxfeed.train.schedule import EpochProgress


class CheckpointMixin:
    """``save_checkpoint`` and ``restore_checkpoint`` (a part of :class:`~jaxfeed.train.Trainer`)."""

    def save_checkpoint(
        self, manager: Any, loader: Any = None, metrics: dict[str, Any] | None = None
    ) -> None:
        """Save the model, optimizer, step, epoch, history and ``loader``'s position as step
        ``self.step`` (of a model trained in part, ``trainable=``, the trained part alone: the
        frozen weights are recorded by a fingerprint, :mod:`jaxfeed.train.trained_part`)."""
        progress = self._progress
        state = self.core.checkpoint_state()
        meta = {
            "epoch": self.epoch,
            "progress": None
            if progress is None or progress.sums is None
            else progress.to_meta(jax.device_get(progress.sums)),
            "loader": loader.state_dict() if hasattr(loader, "state_dict") else None,
            "history": list(self.history),
            "config": {
                "model": type(self.model).__name__,
                "api": self.core.api,
                "seed": self.seed,
                "inputs": self.inputs,
                "targets": self.targets,
                "processes": jax.process_count(),
            },
            **self.core.checkpoint_meta(state),
        }
        manager.save(self.step, state, metrics=metrics or {}, meta=meta)

    def restore_checkpoint(
        self, manager: Any, step: int | str | None = "latest", loader: Any = None
    ) -> dict[str, Any]:
        """Load a checkpoint into this trainer (and ``loader``'s position); returns its metadata.

        The checkpoint may come from any number of processes and devices: the state is restored
        here and placed on this run's mesh by the next batch; the loader's position is global.
        """
        if loader is not None:
            self._ensure_ready(loader)
        meta = self.core.restore(manager, step, self._layout())
        self.step, self.epoch = int(meta["step"]), int(meta["epoch"])
        self.history = History(meta.get("history", []))
        progress = meta.get("progress")
        self._progress = EpochProgress.from_meta(progress) if progress else None
        self.placement.reset()
        if loader is not None and meta.get("loader") and hasattr(loader, "load_state_dict"):
            loader.load_state_dict(meta["loader"])
        return meta

    def restore_weights(self, manager: Any, step: int | str | None = "latest") -> dict[str, Any]:
        """Load only the model of a checkpoint into this trainer (its parameters and other
        variables, never the optimizer state: whatever optimizer or schedule wrote it), for
        evaluating, predicting, generating or exporting; returns its metadata."""
        meta = self.core.restore_weights(manager, step)
        self.step, self.epoch = int(meta["step"]), int(meta.get("epoch", 0))
        self.placement.reset()
        return meta

    def _layout(self) -> Any:
        """The state's shardings on the mesh (a tree like the state), or None when it is
        replicated: a restore reads straight into them."""
        if not self.core.ready:
            return None
        shardings = self.placement.layout(self.core.leaves())
        if shardings is None:
            return None
        return jax.tree.unflatten(jax.tree.structure(self.core.state), shardings)

    def _ensure_ready(self, loader: Iterable) -> None:
        """Initialise a lazily built model from the loader's first batch (before a restore)."""
        if not self.core.ready:
            for batch in loader:
                self._batch(batch, "train")
                break
