"""A run's options: defaults, then a config file, then the command line, or a resumed run's own
``config.json`` (:func:`configure`). It sits above :mod:`jaxfeed.recipes.config` (the options
themselves) and :mod:`jaxfeed.recipes.run` (run folders), and checks the optimizer and schedule
against optax before any data is read."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from jaxfeed.recipes.config.files import read_config_file
from jaxfeed.recipes.config.groups import ConfigError
from jaxfeed.recipes.config.record import read_run
from jaxfeed.recipes.config.run_config import RunConfig
from jaxfeed.recipes.hub_checkpoint import FINE_TUNE, LORA_LR
from jaxfeed.recipes.optimizers import LEGACY_OPTIMIZERS, optimizer_factory
from jaxfeed.recipes.run import absolute_paths, check_out_folder
from jaxfeed.recipes.schedules import build_schedule


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
    given = set(flags)
    if config_file is not None:
        values = read_config_file(config_file)
        given |= set(values)
        config = config.replace(values, f"--config {config_file}")
    config = config.replace(flags, "command line")
    spec = config.model_spec
    if spec is not None and spec.source == "hub":  # fine-tuning: the options left out (its
        # epochs are the budget's, which says they are the default: HubKind.default_epochs)
        config = config.replace(
            {k: v for k, v in FINE_TUNE.items() if k not in given and k != "epochs"},
            "fine-tuning defaults",
        )
    config = _check_lora(config, given)
    _check_optimizer(config)
    return config.replace(absolute_paths(paths_of(config)), "command line")


def _check_lora(config: RunConfig, given: set[str]) -> RunConfig:
    """``--lora`` and its companions: only on a Hub checkpoint; ``--quantize`` only with it; the
    learning rate of adapters when none is given."""
    if config.lora is None:
        for name in ("lora_alpha", "lora_targets", "quantize"):
            if getattr(config, name) is not None:
                flag = "--" + name.replace("_", "-")
                why = " freezes the weights, so nothing would train" if name == "quantize" else ""
                raise ConfigError(f"{flag}{why}: give --lora RANK (the adapters' rank)")
        if config.lora_dropout:
            raise ConfigError("--lora-dropout: give --lora RANK (the adapters' rank)")
        return config
    spec = config.model_spec
    if spec is None or spec.source != "hub":
        raise ConfigError(
            f"--lora {config.lora}: adapters train on a pretrained model's frozen weights; give "
            "--model hf:ORG/NAME or a checkpoint folder (a model trained from scratch trains "
            "every weight)"
        )
    return config.replace({"lr": LORA_LR} if "lr" not in given else {}, "LoRA defaults")


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
    if config.lr == "auto":  # the range test picks it later; any value checks the schedule
        config = dataclasses.replace(config, lr=1e-3)
    build_schedule(config, 100)  # an unknown schedule or argument, before any data is read
