"""Test setup: 8 fake CPU devices for the sharding tests.

This must run before JAX initialises its backend, which is why it lives here.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
