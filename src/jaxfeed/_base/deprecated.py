"""One warning for the old module paths that layout v2 moved (kept for one release)."""

import warnings


def moved(old: str, new: str) -> None:
    """Warn once per import of ``old`` that it now lives at ``new``."""
    warnings.warn(
        f"{old} moved to {new}; import from there (or from jaxfeed). The old path will be "
        "removed in the next release.",
        DeprecationWarning,
        stacklevel=3,
    )
