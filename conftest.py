"""Test set-up: 8 fake CPU devices, configured once before JAX initialises its backend."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "JAXFEED_CACHE" not in os.environ:  # tests never write to the user's ~/.cache/jaxfeed
    _cache = tempfile.mkdtemp(prefix="jaxfeed-test-cache-")
    os.environ["JAXFEED_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)

import jax

jax.config.update("jax_num_cpu_devices", 8)

# The PyTorch twin of the benchmark CNN needs the `bench` extra, which `make test` does not install.
collect_ignore = ["src/jaxfeed/bench/torch_cnn.py"]
