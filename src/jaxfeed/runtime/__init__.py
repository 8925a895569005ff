"""JAX's devices and processes: device strings, shardings and one transfer per batch
(``devices``), meshes and the one sharding plan of the trainer's state and of loaded checkpoints
(``sharding``, its grammar read without JAX in ``sharding_grammar``), and joining a multi-process
job (``distributed``). Imports ``_base`` only."""
