"""The device mesh (data, fsdp, context, tensor) and the shardings the trainer uses.

Layers name logical axes (partitioning.py); the config's `logical_axis_rules` maps them to
these four mesh axes. The batch is split over (data, fsdp); activations' sequence axis over
context (context_parallel.py); parameters over fsdp and tensor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "context", "tensor")
BATCH_AXES = ("data", "fsdp")

# Logical axis -> mesh axis. Configs copy this table (and may change it); it is the only place
# where a parameter's dimension meets a physical axis.
DEFAULT_RULES = (
    ("batch", BATCH_AXES),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("norm", None),
    ("types", None),
    ("position", None),
    ("labels", None),
    ("length", "context"),  # activations' sequence axis (context parallelism)
)


def mesh_shape(mesh_cfg: Mapping[str, Any], num_devices: int) -> tuple[int, ...]:
  """Axis sizes from the config; one -1 takes the devices left over.

  Raises:
    ValueError: unknown axes, more than one -1, non-positive sizes, or a product that does
      not equal the number of devices.
  """
  unknown = sorted(set(mesh_cfg) - set(MESH_AXES))
  if unknown:
    raise ValueError(f"config.mesh has unknown axes {unknown}; the mesh axes are {MESH_AXES}.")
  sizes = [int(mesh_cfg.get(a, 1)) for a in MESH_AXES]
  fills = [i for i, s in enumerate(sizes) if s == -1]
  if len(fills) > 1:
    raise ValueError(f"config.mesh={dict(zip(MESH_AXES, sizes, strict=True))}: at most one axis may be -1 (fill).")
  if any(s == 0 or s < -1 for s in sizes):
    raise ValueError(f"config.mesh={dict(zip(MESH_AXES, sizes, strict=True))}: sizes must be positive or -1.")
  known = math.prod(s for s in sizes if s != -1)
  if fills:
    if num_devices % known:
      raise ValueError(f"config.mesh={dict(zip(MESH_AXES, sizes, strict=True))}: the fixed axes ({known} devices) do not "
                       f"divide the {num_devices} available devices.")
    sizes[fills[0]] = num_devices // known
  if math.prod(sizes) != num_devices:
    raise ValueError(f"config.mesh={dict(zip(MESH_AXES, sizes, strict=True))} needs {math.prod(sizes)} devices but "
                     f"{num_devices} are available; set one axis to -1 to fill.")
  return tuple(sizes)


def make_mesh(mesh_cfg: Mapping[str, Any], devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
  """A (data, fsdp, context, tensor) mesh over `devices` (default: all), GSPMD-style Auto axes.

  Devices are laid out in order, the last axis fastest, so a process's devices (which JAX
  numbers together) hold whole data shards when data x fsdp is a multiple of the processes.
  """
  devices = list(jax.devices() if devices is None else devices)
  shape = mesh_shape(mesh_cfg, len(devices))
  return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES), devices=devices)


def data_parallel_size(mesh: jax.sharding.Mesh) -> int:
  return mesh.shape["data"] * mesh.shape["fsdp"]


def check_batch_size(global_batch: int, mesh: jax.sharding.Mesh) -> None:
  n = data_parallel_size(mesh)
  if n % jax.process_count():
    raise ValueError(f"the mesh {dict(mesh.shape)} has {n} data shards (data x fsdp) for {jax.process_count()} "
                     "processes: each process reads its own rows, so data x fsdp must be a multiple of the "
                     "process count, and the context and tensor axes must lie within a process. Lower "
                     "mesh.context or mesh.tensor to at most the devices of one process.")
  if global_batch % n or global_batch % jax.process_count():
    raise ValueError(f"batch_size={global_batch} must be divisible by the data-parallel size "
                     f"data x fsdp = {n} and by the {jax.process_count()} processes; "
                     f"use a multiple of {math.lcm(n, jax.process_count())}.")


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
  """Leading (batch) axis split over (data, fsdp); other axes replicated."""
  return NamedSharding(mesh, P(BATCH_AXES))


def global_batch(local: Mapping[str, np.ndarray], mesh: jax.sharding.Mesh) -> dict[str, jax.Array]:
  """Per-process numpy batch -> global jax.Arrays sharded over the batch axes."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in local.items()}


def rules_from_config(rules: Any) -> tuple[tuple[str, Any], ...]:
  """Normalises a rules table from a config (lists from ml_collections) and checks mesh axes."""
  out = []
  for entry in rules:
    name, target = entry
    targets = target if isinstance(target, (list, tuple)) else (target,)
    for t in targets:
      if t is not None and t not in MESH_AXES:
        raise ValueError(f"logical_axis_rules maps {name!r} to {t!r}, which is not a mesh axis {MESH_AXES}.")
    out.append((name, tuple(target) if isinstance(target, list) else target))
  return tuple(out)
