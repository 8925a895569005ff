"""Test set-up: 8 fake CPU devices, configured once before JAX initialises its backend."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

jax.config.update("jax_num_cpu_devices", 8)
