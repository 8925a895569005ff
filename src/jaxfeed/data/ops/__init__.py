"""Dataset operations: map, filter, select, shuffle, splits, column edits, concatenation.

Row selections (``select``, ``shuffle``, ``filter``) only build an index mapping; reads through it
gather rows in bulk. ``map`` writes its output record batch by record batch, to an Arrow file next
to a disk-backed dataset or in memory otherwise.

These are the functions behind :class:`jaxfeed.Dataset`'s methods, which call them as
``ops.map(ds, ...)``. They take and return any dataset (a ``DatasetCore``; results keep its class)
and never import :mod:`jaxfeed.dataset`. The parts:

- :mod:`jaxfeed.ops.rows`: ``select``, ``shuffle``, ``flatten_indices``, ``batch``, ``shard``
- :mod:`jaxfeed.ops.apply`: ``map`` and ``filter`` (the module is not named ``map``: it would
  shadow the function ``ops.map``)
- :mod:`jaxfeed.ops.splits`: ``train_test_split``
- :mod:`jaxfeed.ops.columns`: column edits, casts, ``unique``, ``sort``
- :mod:`jaxfeed.ops.combine`: ``concatenate_datasets``, ``interleave_datasets``, ``from_generator``
"""

from jaxfeed.ops.apply import MapOutputError as MapOutputError
from jaxfeed.ops.apply import as_ragged as as_ragged
from jaxfeed.ops.apply import filter as filter
from jaxfeed.ops.apply import map as map
from jaxfeed.ops.columns import add_column as add_column
from jaxfeed.ops.columns import add_item as add_item
from jaxfeed.ops.columns import cast as cast
from jaxfeed.ops.columns import cast_column as cast_column
from jaxfeed.ops.columns import class_encode_column as class_encode_column
from jaxfeed.ops.columns import flatten as flatten
from jaxfeed.ops.columns import remove_columns as remove_columns
from jaxfeed.ops.columns import rename_columns as rename_columns
from jaxfeed.ops.columns import select_columns as select_columns
from jaxfeed.ops.columns import sort as sort
from jaxfeed.ops.columns import unique as unique
from jaxfeed.ops.combine import concatenate_datasets as concatenate_datasets
from jaxfeed.ops.combine import from_generator as from_generator
from jaxfeed.ops.combine import interleave_datasets as interleave_datasets
from jaxfeed.ops.rows import batch as batch
from jaxfeed.ops.rows import flatten_indices as flatten_indices
from jaxfeed.ops.rows import select as select
from jaxfeed.ops.rows import shard as shard
from jaxfeed.ops.rows import shuffle as shuffle
from jaxfeed.ops.splits import train_test_split as train_test_split
