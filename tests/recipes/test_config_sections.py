"""The run config's typed sections compose into one flat RunConfig; the preprocessing's data half
(recipes/spec.py) holds the batch keys and the text kinds, and its dataset half is the run's kind's
(recipes/kinds)."""

import dataclasses

from jaxfeed import Dataset
from jaxfeed.recipes import config, spec
from jaxfeed.recipes.config import (
    SECTIONS,
    DataOptions,
    ModelOptions,
    OptimOptions,
    ProcessOptions,
    RunConfig,
)
from jaxfeed.recipes.kinds.registry import kind_of


def test_sections_compose_one_flat_config_in_section_order():
    names = [f.name for f in dataclasses.fields(RunConfig)]
    assert names == [f.name for s in SECTIONS.values() for f in dataclasses.fields(s)]
    assert len(names) == 62 and names[0] == "data" and names[-1] == "compile_cache"
    assert list(SECTIONS) == list(config.GROUPS)
    c = RunConfig(epochs=2, out="x")
    for section in (DataOptions, ModelOptions, OptimOptions, ProcessOptions):
        assert isinstance(c, section)
    assert c.epochs == 2 and "out" not in c.saved() and "epochs" in c.saved()


def test_the_help_groups_follow_the_sections():
    parser = config.new_run_parser()
    titles = {g.title: [a.dest for a in g._group_actions] for g in parser._action_groups}
    for key, section in SECTIONS.items():
        assert titles[config.GROUPS[key]] == [f.name for f in dataclasses.fields(section)]


def test_config_error_keeps_its_public_module():
    assert config.ConfigError.__module__ == "jaxfeed.recipes.config"
    assert config.ConfigError is config.groups.ConfigError


def test_spec_holds_the_names_and_prepare_is_the_kinds():
    for name in (
        "INPUTS",
        "TARGETS",
        "TEXT_KINDS",
        "TEXT_COLUMNS",
        "Preprocessing",
        "stack_column",
    ):
        assert hasattr(spec, name)
    assert not hasattr(spec.Preprocessing, "prepare")
    prep = spec.Preprocessing("array", ["a"], "y", [1], scale=False)
    ds = Dataset.from_dict({"a": [[1.0], [2.0]], "y": [0, 1], "z": [5, 6]})
    assert list(kind_of(prep).prepare(prep, ds).features) == ["a", "y"]
    back = spec.Preprocessing.from_dict(prep.to_dict(), "config.json")
    assert back == prep
