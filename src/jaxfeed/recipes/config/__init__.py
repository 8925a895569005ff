"""The typed run configuration of ``jaxfeed train`` (one flat dataclass), parsed by jsonargparse.

Every option of a training run is a field of :class:`RunConfig`, which composes the typed
sections of :mod:`~jaxfeed.recipes.config.groups` (data, model, optimisation and run, process)
into one flat dataclass. :func:`run_parser` derives a `jsonargparse
<https://jsonargparse.readthedocs.io>`_ parser from the fields (their types, help and
defaults), and the same parser checks the command line (``jaxfeed.cli.options``), ``--config``
files (JSON or YAML) and a run's ``config.json``; :func:`check` adds the bounds the types cannot
say. A field added to the dataclass is a flag, a config key and a ``config.json`` entry at once.
The run folder keeps the options in ``config.json`` next to what the run resolved from the data
(task, labels, preprocessing). This package imports neither JAX nor pyarrow.

* :mod:`~jaxfeed.recipes.config.groups`: :class:`ConfigError`, :func:`option`, the sections.
* :mod:`~jaxfeed.recipes.config.run_config`: :class:`RunConfig`, its parser and checks (a run's
  options from flags, files or a resumed run: :func:`jaxfeed.recipes.configure.configure`).
* :mod:`~jaxfeed.recipes.config.values`: single values (image size, mesh, sharding, specs).
* :mod:`~jaxfeed.recipes.config.model_spec`: ``--model`` decoded once (:class:`ModelSpec`).
* :mod:`~jaxfeed.recipes.config.files`: JSON and YAML config files.
* :mod:`~jaxfeed.recipes.config.record`: a run folder's ``config.json`` (:func:`read_run`).

>>> config = RunConfig.from_dict({"epochs": 3, "lr": 0.01}, "example")
>>> config.epochs, config.lr, config.optimizer
(3, 0.01, 'adamw')
>>> RunConfig.from_dict({"epochs": 0}, "example")
Traceback (most recent call last):
...
jaxfeed.recipes.config.ConfigError: example: epochs must be an integer >= 1, got 0
>>> RunConfig.from_dict({"epoch": 3}, "example")
Traceback (most recent call last):
...
jaxfeed.recipes.config.ConfigError: example: unknown option 'epoch' (did you mean 'epochs'?)
"""

from jaxfeed.recipes.config.files import MAX_CONFIG_ALIASES as MAX_CONFIG_ALIASES
from jaxfeed.recipes.config.files import MAX_CONFIG_NODES as MAX_CONFIG_NODES
from jaxfeed.recipes.config.files import _BoundedLoader as _BoundedLoader
from jaxfeed.recipes.config.files import _check_size as _check_size
from jaxfeed.recipes.config.files import load_yaml as load_yaml
from jaxfeed.recipes.config.files import read_config_file as read_config_file
from jaxfeed.recipes.config.groups import COMPONENTS as COMPONENTS
from jaxfeed.recipes.config.groups import RUN_FORMAT as RUN_FORMAT
from jaxfeed.recipes.config.groups import RUN_VERSION as RUN_VERSION
from jaxfeed.recipes.config.groups import SECTIONS as SECTIONS
from jaxfeed.recipes.config.groups import TASKS as TASKS
from jaxfeed.recipes.config.groups import ConfigError as ConfigError
from jaxfeed.recipes.config.groups import DataOptions as DataOptions
from jaxfeed.recipes.config.groups import ModelOptions as ModelOptions
from jaxfeed.recipes.config.groups import OptimOptions as OptimOptions
from jaxfeed.recipes.config.groups import ProcessOptions as ProcessOptions
from jaxfeed.recipes.config.groups import option as option
from jaxfeed.recipes.config.model_spec import ModelSpec as ModelSpec
from jaxfeed.recipes.config.model_spec import parse_model as parse_model
from jaxfeed.recipes.config.record import LEGACY_KEYS as LEGACY_KEYS
from jaxfeed.recipes.config.record import RESOLVED_KEYS as RESOLVED_KEYS
from jaxfeed.recipes.config.record import RunRecord as RunRecord
from jaxfeed.recipes.config.record import is_legacy_run as is_legacy_run
from jaxfeed.recipes.config.record import legacy_options as legacy_options
from jaxfeed.recipes.config.record import legacy_record as legacy_record
from jaxfeed.recipes.config.record import read_run as read_run
from jaxfeed.recipes.config.run_config import GROUPS as GROUPS
from jaxfeed.recipes.config.run_config import RunConfig as RunConfig
from jaxfeed.recipes.config.run_config import _base as _base
from jaxfeed.recipes.config.run_config import _hints as _hints
from jaxfeed.recipes.config.run_config import as_typed as as_typed
from jaxfeed.recipes.config.run_config import check as check
from jaxfeed.recipes.config.run_config import describe as describe
from jaxfeed.recipes.config.run_config import flag as flag
from jaxfeed.recipes.config.run_config import new_run_parser as new_run_parser
from jaxfeed.recipes.config.run_config import parse_error as parse_error
from jaxfeed.recipes.config.run_config import run_parser as run_parser
from jaxfeed.recipes.config.values import BUILTIN_MODELS as BUILTIN_MODELS
from jaxfeed.recipes.config.values import MODEL_FORMS as MODEL_FORMS
from jaxfeed.recipes.config.values import _class_weights as _class_weights
from jaxfeed.recipes.config.values import _component as _component
from jaxfeed.recipes.config.values import _short as _short
from jaxfeed.recipes.config.values import did_you_mean as did_you_mean
from jaxfeed.recipes.config.values import parse_colour as parse_colour
from jaxfeed.recipes.config.values import parse_image_size as parse_image_size
from jaxfeed.recipes.config.values import parse_mesh_text as parse_mesh_text
from jaxfeed.recipes.config.values import parse_sharding as parse_sharding
from jaxfeed.recipes.config.values import plural as plural
