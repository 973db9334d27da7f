"""Logical axis names on parameters, and the helper that attaches them.

Layers name what each parameter dimension *is*; the trainer's rules table (in the config)
maps those names to mesh axes. No layer names a physical mesh axis.

Logical axes used by the models:
  "vocab"  vocabulary rows of embedding tables      "embed"  model width D
  "heads"  attention heads N                        "kv"     head dim H
  "mlp"    feed-forward hidden width                 "norm"   LayerNorm scale/bias
  "types"  token-type rows   "position" learned absolute position rows   "labels" classes
"""

from __future__ import annotations

from typing import Callable

import jax
from flax import nnx
from flax.core import meta


def _mesh_active() -> bool:
  return meta.get_global_mesh() is not None or not jax.sharding.get_abstract_mesh().empty


def partitioned(init: Callable, axes: tuple[str | None, ...]) -> Callable:
  """`nnx.with_partitioning(init, axes)`, sharding eagerly only when a mesh is active.

  Inside `jax.set_mesh(mesh)` and `nnx.logical_axis_rules(rules)` the parameter is created
  already sharded (no full copy on one device); outside any mesh (a laptop, a test, HF
  import) it is a plain array that still carries the names for a later reshard.
  """
  return nnx.with_partitioning(init, axes, eager_sharding=_mesh_active())
