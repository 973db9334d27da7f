"""Context parallelism: the sequence axis of activations split over the mesh's `context` axis.

With `config.mesh.context = C`, every activation [B, T, ...] is sharded T-wise into C pieces
(the logical axis "length", mapped to the mesh axis "context" by the rules table), so one
device holds T / C tokens of each row, and per-device activation memory falls as 1 / C.
Everything in a transformer layer is per token except attention, so only attention talks
across the axis:

- **RoPE** is elementwise in the token: each shard rotates its q and k with its own slice of
  the global `positions` array, which the model computed over the whole row before
  sharding, so the phases are exactly the unsharded ones (packing and left padding included).
- **Attention** (`roformer_jax.attention.sharded`, which reads this module's axes) runs
  under `jax.shard_map`: a device all-gathers K, V and the key-side mask factors over the
  axis and attends its T / C queries to all S keys with the kernel it is given (the chunked
  or the dense one). Causal masks use global slot indices.
- **Load balance** for causal attention (`zigzag_order`): with contiguous shards the last
  shard has C times the work of the first (it sees every key, the first sees 1 / C of them).
  The causal models therefore permute each row so that shard i holds chunks i and 2C - 1 - i
  (zig-zag, as in MaxText and Ring/Striped attention), and restore the order after the last
  layer; every shard then has the same number of (query, key) pairs below the diagonal.
- **Lengths** (`required_multiple`, enforced by `check_length`): a bidirectional row must be a
  multiple of C long, a causal row a multiple of 2C (its 2C zig-zag chunks). The trainer
  checks every length a run uses before any work; the models check their inputs when traced.
"""

from __future__ import annotations

from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
from flax.core import spmd
from jax.sharding import PartitionSpec as P

AXIS = "context"


def current_mesh():
  """The abstract mesh in context (`jax.set_mesh`), or None without one."""
  mesh = jax.sharding.get_abstract_mesh()
  return None if mesh.empty else mesh


def size() -> int:
  """The context axis's size in the current mesh context (`jax.set_mesh`); 1 without one."""
  mesh = current_mesh()
  return int(mesh.shape[AXIS]) if mesh is not None and AXIS in mesh.axis_names else 1


def _rules():
  from roformer_jax import mesh as mesh_lib  # mesh.py imports nothing from the model side
  return dict(spmd.get_logical_axis_rules() or mesh_lib.DEFAULT_RULES)


def axes(logical: str) -> tuple[str, ...] | None:
  """The mesh axes (of size > 1 in the mesh in context) that the rules map a logical axis to, or None.

  The rules are the logical-axis rules in context (flax's `logical_axis_rules`, which the
  trainer sets), else `mesh.DEFAULT_RULES`; so a layer shards by logical name ("batch",
  "length", "heads") and never names a physical axis.
  """
  target = _rules().get(logical)
  mesh = current_mesh()
  names = () if target is None else (tuple(target) if isinstance(target, (list, tuple)) else (target,))
  names = tuple(n for n in names if mesh is not None and n in mesh.axis_names and mesh.shape[n] > 1)
  return names or None


def batch_axes() -> tuple[str, ...] | None:
  """The mesh axes of the logical "batch" axis (`axes`)."""
  return axes("batch")


def length_axes() -> tuple[str, ...] | None:
  """The mesh axes of the logical "length" axis: (AXIS,) under context parallelism, else None."""
  found = axes("length")
  if found not in (None, (AXIS,)):
    raise ValueError(f"logical_axis_rules maps 'length' to {found}; context parallelism needs ('length', "
                     f"'{AXIS}') (mesh.DEFAULT_RULES).")
  return found


def required_multiple(context: int, *, causal: bool) -> int:
  """The multiple of which a row must be long to split over a context axis of size `context`.

  This is the one statement of the rule; `check_length` enforces it.

  - Bidirectional rows (encoders, the seq2seq source, mlm, classification) are cut into
    `context` contiguous pieces, one per device: a multiple of `context`.
  - Causal rows (the LM, the seq2seq decoder) are cut into 2 x `context` chunks first, and
    device i holds chunks i and 2C - 1 - i (`zigzag_order`, the load balance): a multiple
    of 2 x `context`.
  - Without a context axis (`context` = 1) no row is split, and any length works.

  Args:
    context: the size C of the mesh's context axis.
    causal: whether the row is attended causally (and so put in zig-zag order).

  Returns:
    C for bidirectional rows, 2C for causal rows, 1 when C = 1.
  """
  return 2 * context if causal and context > 1 else context


def check_length(length: int, *, causal: bool, key: str, context: int | None = None, note: str = "") -> None:
  """Raises a ValueError, naming `key`, if a row of `length` tokens cannot split over the context axis.

  Every check of a sequence length against context parallelism calls this: the trainer's
  config check (one call per length the run feeds the model), and the models at trace time.

  Args:
    length: the row length T.
    causal: whether the row is attended causally (`required_multiple`).
    key: what sets the length, as the user would change it: a config key
      ("config.data.max_target_length") or a model argument ("tgt_ids.shape[1]").
    context: the context axis size C; default: the size in the current mesh context (`size`).
    note: said after the value, where the key alone does not tell which row this is.

  Raises:
    ValueError: `length` is not a multiple of `required_multiple(C, causal=causal)`; the
      message names the key, its value, the multiple, why, and the nearest lengths that work.
  """
  c = size() if context is None else context
  need = required_multiple(c, causal=causal)
  if length % need == 0:
    return
  why = (f"splits each causal row into 2 x {c} chunks (zig-zag load balance: device i holds chunks i and "
         f"{2 * c - 1}-i)" if causal else f"splits each bidirectional row into {c} pieces, one per device")
  fits = [n for n in (length - length % need, length + (-length % need)) if n > 0]
  raise ValueError(f"{key}={length}{f' ({note})' if note else ''} is not a multiple of {need}: mesh.context={c} {why}. Set {key} to a multiple "
                   f"of {need}, e.g. {' or '.join(map(str, fits[::-1]))}, or use a mesh.context that divides "
                   f"{'half of ' if causal else ''}the length.")


def shard(x: jax.Array) -> jax.Array:
  """x [B, T, ...] constrained to (batch axes, context axis, replicated...) when C > 1."""
  if size() == 1:
    return x
  spec = P(batch_axes(), length_axes(), *([None] * (x.ndim - 2)))
  return jax.lax.with_sharding_constraint(x, spec)


def zigzag_order(length: int, c: int) -> np.ndarray:
  """Slot order int[T] whose C contiguous shards hold chunks (i, 2C - 1 - i) of 2C chunks.

  Shard i's causal work is then (i + 1/2) + (2C - i - 1/2) = 2C chunk pairs for every i.
  """
  if c == 1:
    return np.arange(length, dtype=np.int32)
  check_length(length, causal=True, key="length", context=c)
  chunks = np.arange(length, dtype=np.int32).reshape(required_multiple(c, causal=True), -1)  # 2C chunks
  return np.concatenate([np.concatenate([chunks[i], chunks[2 * c - 1 - i]]) for i in range(c)])


class Order:
  """The permutation a causal model applies under context parallelism (identity otherwise)."""

  def __init__(self, length: int, *, causal: bool):
    c = size()
    self.active = causal and c > 1
    self.order = zigzag_order(length, c) if self.active else None
    self.inverse = np.argsort(cast(np.ndarray, self.order)).astype(np.int32) if self.active else None

  def permute(self, x):
    """x [B, T, ...] in zig-zag order (None stays None)."""
    return x if (x is None or not self.active) else jnp.take(jnp.asarray(x), cast(np.ndarray, self.order), axis=1)

  def restore(self, x):
    return x if not self.active else jnp.take(x, cast(np.ndarray, self.inverse), axis=1)

  def slots(self, batch: int):
    """int[B, T] original slot of each permuted position (the causal mask's indices), or None."""
    if not self.active:
      return None
    return jnp.broadcast_to(jnp.asarray(self.order), (batch, len(cast(np.ndarray, self.order))))


__all__ = ["AXIS", "Order", "axes", "batch_axes", "check_length", "current_mesh", "length_axes",
           "required_multiple", "shard", "size", "zigzag_order"]
