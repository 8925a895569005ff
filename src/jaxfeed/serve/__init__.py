"""Exports that serve raw inputs: StableHLO + safetensors folders (``export``) and the declared
preprocessing they apply to raw inputs (``spec``, public as :mod:`jaxfeed.serving`). Imports
``train``, ``models`` and the floors below."""
