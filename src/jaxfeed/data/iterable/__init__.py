"""`IterableDataset`: rows read on the fly from files, never held whole (``streaming=True``).

A stream is a **source** (a list of independently readable *units*: files, row groups of Parquet
files, or row ranges of an in-memory dataset) followed by **steps** (map, filter, shuffle, take,
skip, column edits, batch). Data flows as Arrow tables of a few MB, so per-row Python work only
happens where a user function asks for rows. Every stage can report its position, so a stream
resumes exactly where it stopped (:meth:`IterableDataset.state_dict`), shuffle buffer included.

``shard`` and :func:`split_dataset_by_node` split the *units*: each process opens only its own
files or row groups. When there are fewer units than processes, every process reads everything
and keeps every ``world_size``-th row (as `datasets` does).

>>> from jaxfeed import Dataset
>>> from jaxfeed.data.iterable import IterableDataset
>>> ids = IterableDataset.from_dataset(Dataset.from_dict({"x": list(range(6))}))
>>> [r["x"] for r in ids.shuffle(seed=0, buffer_size=2).take(3)]
[4, 1, 2]
>>> [b["x"].tolist() for b in ids.with_format("numpy").iter(batch_size=4)]
[[0, 1, 2, 3], [4, 5]]

The package: :mod:`~jaxfeed.data.iterable.sources` (units and reading them),
:mod:`~jaxfeed.data.iterable.steps` (the ``_Step`` / stage pairs) and :mod:`~jaxfeed.data.iterable.dataset`
(``IterableDataset``, one pass, its saved state, ``split_dataset_by_node``). Tests that patch a
reading constant patch it in ``jaxfeed.data.iterable.sources``, where it is looked up.
"""

from jaxfeed.data.iterable.dataset import IterableDataset as IterableDataset
from jaxfeed.data.iterable.dataset import IterableDatasetDict as IterableDatasetDict
from jaxfeed.data.iterable.dataset import Stream as Stream
from jaxfeed.data.iterable.dataset import decode_state as decode_state
from jaxfeed.data.iterable.dataset import encode_state as encode_state
from jaxfeed.data.iterable.dataset import split_dataset_by_node as split_dataset_by_node
from jaxfeed.data.iterable.sources import Lookahead as Lookahead
from jaxfeed.data.iterable.sources import Source as Source
from jaxfeed.data.iterable.sources import Unit as Unit
