"""Getting data in, above :class:`~jaxfeed.Dataset`: ``load_dataset`` over files, folders
(imagefolder, audiofolder, the Hub layout) and built-in datasets (``load``, ``folder``, ``hub``,
``builtin``). They read through :mod:`jaxfeed.data.formats`, whose readers return tables, and wrap
the result as datasets.

>>> from jaxfeed.data.load import get_dataset_split_names
>>> get_dataset_split_names("digits")
['train', 'test']
"""

from jaxfeed.data.load.load import get_dataset_config_names as get_dataset_config_names
from jaxfeed.data.load.load import get_dataset_split_names as get_dataset_split_names
from jaxfeed.data.load.load import load_dataset as load_dataset

__all__ = ["get_dataset_config_names", "get_dataset_split_names", "load_dataset"]
