"""``--schedule``: any optax schedule with its arguments, the first jaxfeed's names as they were."""

import jax.numpy as jnp
import optax
import pytest

from jaxfeed.cli.options import parse_train
from jaxfeed.recipes.config import ConfigError, RunConfig
from jaxfeed.recipes.config.optimizers import build_optimizer
from jaxfeed.recipes.config.schedules import build_schedule


def test_any_optax_schedule_with_its_arguments_and_the_old_names():
    given = parse_train(["--schedule", "piecewise_constant_schedule", "--lr", "0.5",
                         "--schedule.init_args.boundaries_and_scales", "{4: 0.1, 8: 0.5}"])  # fmt: skip
    config = RunConfig().replace(given.options, "flags")
    assert config.component("schedule") == (
        "piecewise_constant_schedule", {"boundaries_and_scales": {4: 0.1, 8: 0.5}}
    )  # fmt: skip
    lr = build_schedule(config, 20)
    assert [float(lr(s)) for s in (0, 3, 4, 8)] == pytest.approx([0.5, 0.5, 0.05, 0.025])
    yaml_keys = RunConfig(lr=1e-3, schedule={"class_path": "optax.piecewise_constant_schedule",
                                    "init_args": {"boundaries_and_scales": {"4": 0.1}}})  # fmt: skip
    assert float(build_schedule(yaml_keys, 20)(5)) == pytest.approx(1e-4)

    # what the run knows fills the rest: the peak --lr, the length after --warmup-steps
    config = RunConfig(lr=0.2, schedule="cosine_decay_schedule", warmup_steps=4)
    lr, want = build_schedule(config, 14), optax.cosine_decay_schedule(0.2, 10)
    assert [float(lr(s)) for s in (0, 2, 4, 9, 14)] == pytest.approx(
        [0.0, 0.1, *(float(want(s)) for s in (0, 5, 10))]
    )  # fmt: skip
    own = build_schedule(RunConfig(lr=0.2, schedule="warmup_cosine_decay_schedule",
                                   warmup_steps=4), 14)  # fmt: skip
    want = optax.warmup_cosine_decay_schedule(0.0, 0.2, 4, 14)
    assert [float(own(s)) for s in range(15)] == pytest.approx([float(want(s)) for s in range(15)])

    # the first jaxfeed's names build what they built (old run folders resume on them)
    assert build_schedule(RunConfig(lr=0.1), 10) == 0.1  # constant: a float, no step count
    cosine = build_schedule(RunConfig(lr=0.1, schedule="cosine", warmup_steps=2), 10)
    old = optax.join_schedules(
        [optax.linear_schedule(0.0, 0.1, 2), optax.cosine_decay_schedule(0.1, 8)], [2]
    )
    assert [float(cosine(s)) for s in range(11)] == [float(old(s)) for s in range(11)]
    linear = build_schedule(RunConfig(lr=0.1, schedule="linear"), 10)
    assert float(linear(5)) == pytest.approx(0.05)
    constant = build_schedule(RunConfig(lr=0.1, warmup_steps=2), 10)  # warmup, then constant
    assert [float(constant(s)) for s in (0, 1, 2, 9)] == pytest.approx([0.0, 0.05, 0.1, 0.1])
    # in the optimizer: its learning rate, logged, follows the schedule
    config = RunConfig(lr=0.1, schedule={"class_path": "exponential_decay",
                                         "init_args": {"decay_rate": 0.5}})  # fmt: skip
    tx = build_optimizer(config, 10)
    params = {"w": jnp.zeros(2)}
    state = tx.init(params)
    for _ in range(11):  # the rate of update k is the schedule at k - 1
        _, state = tx.update({"w": jnp.ones(2)}, state, params)
    assert float(state.hyperparams["learning_rate"]) == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("cosine_decay", "--schedule 'cosine_decay' is not an optax schedule (did you mean "
         "'cosine_decay_schedule'?)"),
        ("join_schedules", "--schedule 'join_schedules' is not an optax schedule"),
        ("exponential_decay", "optax.exponential_decay needs decay_rate: give "
         "--schedule.init_args.decay_rate VALUE"),
        ({"class_path": "cosine_decay_schedule", "init_args": {"alfa": 0.1}},
         "--schedule.init_args.alfa: optax.cosine_decay_schedule takes no argument 'alfa' (did "
         "you mean 'alpha'?)"),
        ({"class_path": "cosine", "init_args": {"alpha": 0.1}}, "--schedule cosine takes no "
         "init_args"),
    ],
)  # fmt: skip
def test_a_wrong_schedule_is_refused_naming_it(schedule, message):
    with pytest.raises(ConfigError) as err:
        build_schedule(RunConfig(lr=1e-3, schedule=schedule), 10)
    assert message in str(err.value)
    with pytest.raises(ConfigError, match=r"schedule must be the name of an optax schedule"):
        RunConfig().replace({"schedule": "1cycle!"}, "flags")
