"""JAX's devices and processes: device strings, meshes and shardings, one transfer per batch
(``devices``), and joining a multi-process job (``distributed``). Imports ``_base`` only."""
