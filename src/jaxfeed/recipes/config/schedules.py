"""``--schedule``: any optax learning-rate schedule with its arguments, plus ``--warmup-steps``.

``--schedule`` is a name, or ``{class_path: NAME, init_args: {...}}`` (also
``--schedule.init_args.NAME VALUE``), like ``--optimizer``. NAME is a schedule function of
``optax.schedules`` (``cosine_decay_schedule``, ``exponential_decay``,
``warmup_cosine_decay_schedule``, ``piecewise_constant_schedule``, ...; ``optax.`` in front
works), or one of the first jaxfeed's names ``constant``, ``cosine`` and ``linear`` (built as they
were, so old run folders resume). What the run knows fills the arguments you leave out:

* the peak learning rate ``--lr``: ``peak_value`` when the schedule takes one (its ``init_value``,
  where warmup starts, is then 0), else ``init_value`` (or ``value``);
* its length: ``decay_steps`` and ``transition_steps`` are the optimizer steps of the run after
  the warmup (``decay_steps`` of a schedule with its own warmup: all of them);
* ``warmup_steps`` of a schedule that takes one is ``--warmup-steps``; any other schedule starts
  after ``--warmup-steps`` of linear warmup from 0 to its first value;
* ``end_value`` that it needs: 0.

An argument it still lacks, or one it does not take, is refused naming it.

>>> from jaxfeed.recipes.config import RunConfig
>>> config = RunConfig(lr=0.1, schedule={"class_path": "exponential_decay",
...                                      "init_args": {"decay_rate": 0.5}}, warmup_steps=2)
>>> lr = build_schedule(config, 12)
>>> [round(float(lr(step)), 4) for step in (0, 1, 2, 7, 12)]
[0.0, 0.05, 0.1, 0.0707, 0.05]
>>> round(float(build_schedule(RunConfig(lr=0.1, schedule="warmup_cosine_decay_schedule",
...                                      warmup_steps=2), 12)(2)), 6)
0.1
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import optax

from jaxfeed.recipes.config.groups import ConfigError
from jaxfeed.recipes.config.run_config import RunConfig
from jaxfeed.recipes.config.values import did_you_mean

LEGACY_SCHEDULES = ("constant", "cosine", "linear")  # the first jaxfeed's names, built as then
_NOT_SCHEDULES = ("inject_hyperparams", "inject_stateful_hyperparams", "join_schedules")


def schedule_names() -> list[str]:
    """The schedule functions of ``optax.schedules`` that ``--schedule`` takes.

    >>> "cosine_decay_schedule" in schedule_names(), "join_schedules" in schedule_names()
    (True, False)
    """
    return sorted(
        name
        for name, value in vars(optax.schedules).items()
        if name[0].islower() and callable(value) and name not in _NOT_SCHEDULES
    )


def schedule_factory(name: str) -> Callable[..., Any]:
    """An optax schedule function by name (``optax.`` or ``optax.schedules.`` in front works).

    >>> schedule_factory("optax.linear_schedule").__name__
    'linear_schedule'
    >>> schedule_factory("cosine_decay")
    Traceback (most recent call last):
    ...
    jaxfeed.recipes.config.ConfigError: --schedule 'cosine_decay' is not an optax schedule (did you mean 'cosine_decay_schedule'?); known: constant, cosine, linear (jaxfeed's), or an optax.schedules function: constant_schedule, cosine_decay_schedule, ...
    """
    short = name.removeprefix("optax.").removeprefix("schedules.")
    names = schedule_names()
    if short not in names:
        raise ConfigError(
            f"--schedule {name!r} is not an optax schedule"
            f"{did_you_mean(short, [*LEGACY_SCHEDULES, *names])}; known: "
            f"{', '.join(LEGACY_SCHEDULES)} (jaxfeed's), or an optax.schedules function: "
            f"{', '.join(names[:2])}, ..."
        )
    return getattr(optax.schedules, short)


def build_schedule(config: RunConfig, total_steps: int) -> Any:
    """The learning rate of a run of ``total_steps`` optimizer updates: a float (``constant``
    without warmup: no step count in the optimizer state) or an optax schedule. ``--lr`` must be
    a number by now: a run's model source sets the default one it leaves out."""
    if isinstance(config.lr, bool) or not isinstance(config.lr, int | float):
        raise ConfigError(
            f"--lr {config.lr!r}: the learning rate is not resolved yet (a run's model source "
            "sets its default; give --lr VALUE to build an optimizer outside a run)"
        )
    name, args = config.component("schedule")
    warmup = min(config.warmup_steps, max(total_steps - 1, 0))
    after = max(total_steps - warmup, 1)
    if name in LEGACY_SCHEDULES and not args:
        if name == "constant":
            schedule: Any = config.lr
        elif name == "cosine":
            schedule = optax.cosine_decay_schedule(config.lr, after)
        else:
            schedule = optax.linear_schedule(config.lr, 0.0, after)
        return _with_warmup(schedule, warmup, config.lr)
    if name in LEGACY_SCHEDULES:
        raise ConfigError(
            f"--schedule {name} takes no init_args; name an optax schedule to give arguments "
            "(e.g. cosine_decay_schedule with alpha)"
        )
    factory = schedule_factory(name)
    params = inspect.signature(factory).parameters
    unknown = [k for k in args if k not in params]
    if unknown:
        raise ConfigError(
            f"--schedule.init_args.{unknown[0]}: optax.{factory.__name__} takes no argument "
            f"{unknown[0]!r}{did_you_mean(unknown[0], params)} (it takes {list(params)})"
        )
    own_warmup = "warmup_steps" in params
    filled = {
        "peak_value": config.lr,
        "init_value": 0.0 if "peak_value" in params else config.lr,
        "value": config.lr,
        "warmup_steps": warmup,
        "decay_steps": total_steps if own_warmup else after,
        "transition_steps": after,
        "end_value": 0.0,
    }
    for key, value in filled.items():
        required = key in params and params[key].default is inspect.Parameter.empty
        lr_value = key in ("peak_value", "value") or (key == "init_value" and key in params)
        if key not in args and (required or (lr_value and key in params)):
            args[key] = value
    if isinstance(args.get("boundaries_and_scales"), dict):  # JSON and YAML keys are text
        args["boundaries_and_scales"] = _int_keys(args["boundaries_and_scales"])
    missing = [
        k for k, p in params.items() if p.default is inspect.Parameter.empty and k not in args
    ]
    if missing:
        raise ConfigError(
            f"--schedule {name}: optax.{factory.__name__} needs {missing[0]}: give "
            f"--schedule.init_args.{missing[0]} VALUE"
        )
    try:
        schedule = factory(**args)
        start = float(schedule(0))
    except (TypeError, ValueError, KeyError) as err:
        raise ConfigError(f"--schedule {name}: {type(err).__name__}: {err}") from err
    return schedule if own_warmup else _with_warmup(schedule, warmup, start)


def _with_warmup(schedule: Any, warmup: int, start: float) -> Any:
    """``warmup`` steps of linear warmup from 0 to ``start``, then ``schedule``."""
    if not warmup:
        return schedule
    if not callable(schedule):
        schedule = optax.constant_schedule(schedule)
    return optax.join_schedules([optax.linear_schedule(0.0, start, warmup), schedule], [warmup])


def _int_keys(values: dict[Any, Any]) -> dict[Any, Any]:
    """``{"100": 0.1}`` as ``{100: 0.1}`` (step boundaries written as JSON or YAML keys)."""
    out = {}
    for key, value in values.items():
        try:
            out[int(key)] = value
        except (TypeError, ValueError):
            raise ConfigError(
                f"--schedule.init_args.boundaries_and_scales: step {key!r} is not an integer"
            ) from None
    return out
