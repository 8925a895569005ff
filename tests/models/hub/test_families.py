"""Every registered family fills in its facts (architecture.md: a family is one module plus one
registry line): PEFT's default LoRA targets that name its linear layers, the renames that turn
a checkpoint module name into a live one, the ``config.json`` fields it checks."""

from __future__ import annotations

import dataclasses
import re

import pytest

from jaxfeed.models.hub import config_check
from jaxfeed.models.hub.family import Family
from jaxfeed.models.hub.registry import FAMILIES

# a config.json of each family's smallest shape: every "count!" field 8 wide, heads 2
FACTS = ("lora_targets", "module_renames", "config_fields", "divides")


def _smallest(family: Family, model_type: str) -> dict:
    config = {"model_type": model_type}
    for key, kind in family.config_fields.items():
        if isinstance(kind, str) and kind.rstrip("!?") == "count":
            config[key] = 2 if "head" in key else 8
    return config


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_each_family_names_its_default_lora_targets_among_its_linear_layers(model_type):
    family = FAMILIES[model_type]
    assert family.lora_targets, f"{model_type}: lora_targets is empty"
    config = _smallest(family, model_type)
    task = family.default_task
    names = {r.hf.removesuffix(".weight") for r in family.rules(config, task)
             if r.hf.endswith(".weight")}  # fmt: skip
    for target in family.lora_targets:
        assert any(n == target or n.endswith("." + target) for n in names), (model_type, target)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_each_family_checks_its_config_fields(model_type):
    family = FAMILIES[model_type]
    assert family.config_fields, f"{model_type}: config_fields is empty"
    for key, kind in family.config_fields.items():
        if isinstance(kind, tuple):
            assert kind and all(isinstance(a, str) for a in kind), (model_type, key)
        else:
            assert kind.rstrip("!?") in config_check.KINDS, (model_type, key, kind)
    if family.divides is not None:
        assert set(family.divides) <= set(family.config_fields), (model_type, family.divides)
    for pattern, _ in family.module_renames:
        re.compile(pattern)


def test_a_family_cannot_leave_a_fact_out():
    bert = FAMILIES["bert"]
    given = {f.name: getattr(bert, f.name) for f in dataclasses.fields(Family)}
    for fact in FACTS:
        with pytest.raises(TypeError, match=fact):
            Family(**{k: v for k, v in given.items() if k != fact})
