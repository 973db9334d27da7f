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

# XLA's CPU backend without LLVM's optimisations: the suite's models are tiny, so compiling,
# not running, is most of its time, and this compiles about 4x faster (a 2-layer MLM train step
# with dropout: 4.7 s -> 1.2 s). It changes how XLA's CPU code is generated, not the program:
# results agree up to float rounding, which every comparison with a reference allows for, and
# runs compared bitwise use the same flags. The whole suite on 2 cores: 15 min 22 s -> 11 min
# 47 s. Speed is measured by bench/, never by tests. Subprocesses (train.py, eval.py, the
# documented commands) inherit it.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"
if TEST_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
