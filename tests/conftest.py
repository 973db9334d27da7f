"""Test setup: 8 fake CPU devices for the sharding tests.

This must run before JAX initialises its backend, which is why it lives here.
"""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent XLA compilation cache for the whole run: pytest-xdist's workers (which inherit
# this process's environment) and every train.py/eval.py subprocess the tests start compile the
# same small programs over and over; with the cache each is compiled once. A fresh directory per
# run, removed at exit, so no run reads another's entries.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _cache = tempfile.mkdtemp(prefix="roformer_jax_test_xla_cache_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
  os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
  atexit.register(shutil.rmtree, _cache, ignore_errors=True)

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
