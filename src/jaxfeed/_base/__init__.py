"""The ground floor: files, settings, optional extras, object-storage paths and process spawning.

Nothing here imports another part of jaxfeed, and nothing here imports JAX: worker processes
(``jaxfeed._base.spawn``) and the command's ``--help`` rely on both.
"""
