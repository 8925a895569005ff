"""``python -m jaxfeed.cli``: the same as the ``jaxfeed`` command."""

import sys

from jaxfeed.cli import main

if __name__ == "__main__":
    sys.exit(main())
