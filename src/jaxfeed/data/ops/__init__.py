"""Dataset operations: map, filter, select, shuffle, splits, column edits, concatenation.

Row selections (``select``, ``shuffle``, ``filter``) only build an index mapping; reads through it
gather rows in bulk. ``map`` writes its output record batch by record batch, to an Arrow file next
to a disk-backed dataset or in memory otherwise.

These are the functions behind :class:`jaxfeed.Dataset`'s methods, which call them as
``ops.map(ds, ...)``. They take and return any dataset (a ``DatasetCore``; results keep its class)
and never import :mod:`jaxfeed.data.dataset`. The parts:

- :mod:`jaxfeed.data.ops.rows`: ``select``, ``shuffle``, ``flatten_indices``, ``batch``, ``shard``
- :mod:`jaxfeed.data.ops.apply`: ``map`` and ``filter`` (the module is not named ``map``: it would
  shadow the function ``ops.map``)
- :mod:`jaxfeed.data.ops.splits`: ``train_test_split``
- :mod:`jaxfeed.data.ops.columns`: column edits, casts, ``unique``, ``sort``
- :mod:`jaxfeed.data.ops.combine`: ``concatenate_datasets``, ``interleave_datasets``, ``from_generator``
"""

from jaxfeed.data.ops.apply import MapOutputError as MapOutputError
from jaxfeed.data.ops.apply import as_ragged as as_ragged
from jaxfeed.data.ops.apply import filter as filter
from jaxfeed.data.ops.apply import map as map
from jaxfeed.data.ops.columns import add_column as add_column
from jaxfeed.data.ops.columns import add_item as add_item
from jaxfeed.data.ops.columns import cast as cast
from jaxfeed.data.ops.columns import cast_column as cast_column
from jaxfeed.data.ops.columns import class_encode_column as class_encode_column
from jaxfeed.data.ops.columns import flatten as flatten
from jaxfeed.data.ops.columns import remove_columns as remove_columns
from jaxfeed.data.ops.columns import rename_columns as rename_columns
from jaxfeed.data.ops.columns import select_columns as select_columns
from jaxfeed.data.ops.columns import sort as sort
from jaxfeed.data.ops.columns import unique as unique
from jaxfeed.data.ops.combine import concatenate_datasets as concatenate_datasets
from jaxfeed.data.ops.combine import from_generator as from_generator
from jaxfeed.data.ops.combine import interleave_datasets as interleave_datasets
from jaxfeed.data.ops.rows import batch as batch
from jaxfeed.data.ops.rows import flatten_indices as flatten_indices
from jaxfeed.data.ops.rows import select as select
from jaxfeed.data.ops.rows import shard as shard
from jaxfeed.data.ops.rows import shuffle as shuffle
from jaxfeed.data.ops.splits import train_test_split as train_test_split
