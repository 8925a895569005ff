"""A run's options: defaults, then a config file, then the command line, or a resumed run's own
``config.json`` (:func:`configure`). It sits above :mod:`jaxfeed.recipes.config` (the options
themselves) and :mod:`jaxfeed.recipes.run` (run folders), and checks the optimizer and schedule
against optax before any data is read. The options a run leaves out that depend on its model
(``--lr``, a fine-tune's epochs and warmup) stay unset here: the run's model source fills them
in at one moment (:meth:`jaxfeed.recipes.sources.base.ModelSource.defaults`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from jaxfeed.recipes.config.files import read_config_file
from jaxfeed.recipes.config.groups import ConfigError
from jaxfeed.recipes.config.optimizers import LEGACY_OPTIMIZERS, optimizer_factory
from jaxfeed.recipes.config.record import read_run
from jaxfeed.recipes.config.run_config import RunConfig
from jaxfeed.recipes.config.schedules import build_schedule
from jaxfeed.recipes.run import absolute_paths, check_out_folder


def configure(flags: dict[str, Any], config_file: str | None = None) -> RunConfig:
    """The run's options: defaults, then ``config_file``, then ``flags`` (the options given on the
    command line); with ``resume`` the run's own ``config.json`` replaces the defaults and the
    file, and a flag that contradicts it is refused (only ``resumable`` options may change)."""
    config = RunConfig()
    if flags.get("resume_step") is not None and not flags.get("resume"):
        raise ConfigError("--resume-step continues a run: give it with --resume --out RUN")
    if flags.get("resume"):
        if config_file is not None:
            raise ConfigError("--resume reads the run's own config.json; drop --config")
        if not flags.get("out"):
            raise ConfigError("--resume needs --out RUN (the run folder to continue)")
        out = Path(flags["out"])
        check_out_folder(out, resume=True)
        record = read_run(out)
        saved = record.options
        saved = saved.replace(absolute_paths(paths_of(saved)), str(out / "config.json"))
        wanted = saved.replace(absolute_paths(flags), "command line")
        fields = {f.name: f for f in dataclasses.fields(RunConfig)}
        for name in wanted.differences(saved):
            if name == "data":
                _check_moved_data(wanted.data, saved.data, record.resolved, out)
                continue
            if not fields[name].metadata["resumable"]:
                flag = "--" + name.replace("_", "-")
                allowed = ", ".join(
                    "--" + f.name.replace("_", "-")
                    for f in fields.values()
                    if f.metadata["resumable"]
                )
                raise ConfigError(
                    f"--resume: {flag} {getattr(wanted, name)!r} contradicts the run's saved {name} "
                    f"{getattr(saved, name)!r} ({out / 'config.json'}); a resumed run keeps its "
                    f"configuration (only {allowed} may change)"
                )
        return wanted
    if config_file is not None:
        values = read_config_file(config_file)
        config = config.replace(values, f"--config {config_file}")
    config = config.replace(flags, "command line")
    _check_optimizer(config)
    return config.replace(absolute_paths(paths_of(config)), "command line")


def _check_moved_data(new: str, old: str, resolved: dict[str, Any], out: Path) -> None:
    """``--resume --data NEW``: the run's data moved, accepted when NEW has the fingerprint the
    run recorded (every file's size and SHA-256); refused naming what changed otherwise."""
    from jaxfeed.recipes.data import data_fingerprint, fingerprint_changes  # import cost: pyarrow

    saved = resolved.get("data_fingerprint")
    if not isinstance(saved, dict) or not saved:
        raise ConfigError(
            f"--resume: --data {new!r} differs from the run's data {old!r}, and the run has no "
            f"fingerprint of its data to compare ({out / 'config.json'}: a built-in or Hub "
            "dataset, or a run of an older jaxfeed); resume with its own data"
        )
    changes = fingerprint_changes(saved, data_fingerprint(new))
    if changes:
        shown = "; ".join(changes[:5]) + (f"; {len(changes) - 5} more" if len(changes) > 5 else "")
        raise ConfigError(
            f"--resume: --data {new} is not the data the run was trained on ({old}): {shown}; "
            "resume with that data, or start a new run (another --out)"
        )


def paths_of(config: RunConfig) -> dict[str, Any]:
    """The options that name files or folders (made absolute when a run starts or resumes)."""
    return {
        "data": config.data,
        "data_dir": config.data_dir,
        "model": config.model,
        "tokenizer": config.tokenizer,
    }


def _check_optimizer(config: RunConfig) -> None:
    """An unknown optax optimizer or schedule is refused before any data is read."""
    name, args = config.component("optimizer")
    if name not in LEGACY_OPTIMIZERS or args:
        optimizer_factory(name)
    if not isinstance(config.lr, float):  # auto, or the model's default: any value checks it
        config = dataclasses.replace(config, lr=1e-3)
    build_schedule(config, 100)  # an unknown schedule or argument, before any data is read
