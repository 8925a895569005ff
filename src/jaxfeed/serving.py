"""The preprocessing of an export, declared as data: the public face of
:mod:`jaxfeed.serve.spec` (raw inputs in, what ``predict`` prints out; never code), and
:func:`composite`, the command's compositing of images with transparency.

>>> from jaxfeed.serving import ServingSpec
>>> spec = ServingSpec(kind="array", input_shape=(2,), task="classification", labels=("no", "yes"))
>>> ServingSpec.from_dict(spec.to_dict(), "example") == spec
True
"""

from jaxfeed.serve.spec import ServingSpec as ServingSpec
from jaxfeed.serve.spec import SpecError as SpecError
from jaxfeed.serve.spec import TableColumn as TableColumn
from jaxfeed.serve.spec import composite as composite

__all__ = ["ServingSpec", "SpecError", "TableColumn", "composite"]
