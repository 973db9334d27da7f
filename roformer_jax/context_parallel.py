"""Context parallelism: the sequence axis of activations split over the mesh's `context` axis.

With `config.mesh.context = C`, every activation [B, T, ...] is sharded T-wise into C pieces
(the logical axis "length", mapped to the mesh axis "context" by the rules table), so one
device holds T / C tokens of each row, and per-device activation memory falls as 1 / C.
Everything in a transformer layer is per token except attention, so only attention talks
across the axis:

- **RoPE** is elementwise in the token: each shard rotates its q and k with its own slice of
  the global `positions` array, which the model computed over the whole row before
  sharding, so the phases are exactly the unsharded ones (packing and left padding included).
- **Attention** (`attention`) runs under `jax.shard_map`: a device all-gathers K, V and the
  key-side mask factors over the axis and attends its T / C queries to all S keys, with the
  chunked (O(T + S) memory) or the dense kernel. Causal masks use global slot indices.
- **Load balance** for causal attention (`zigzag_order`): with contiguous shards the last
  shard has C times the work of the first (it sees every key, the first sees 1 / C of them).
  The causal models therefore permute each row so that shard i holds chunks i and 2C - 1 - i
  (zig-zag, as in MaxText and Ring/Striped attention), and restore the order after the last
  layer; every shard then has the same number of (query, key) pairs below the diagonal.
- **Lengths** (`required_multiple`, enforced by `check_length`): a bidirectional row must be a
  multiple of C long, a causal row a multiple of 2C (its 2C zig-zag chunks). The trainer
  checks every length a run uses before any work; the models check their inputs when traced.

All-gather, not a ring of `ppermute`: the gathered K/V of one layer (2 x T x D per row) is
small next to the T / C x T logits a dense shard forms, and with chunked attention the peak
is one K/V copy plus a tile; a ring would save that one copy at the price of C sequential
steps whose transfers XLA must overlap with compute to pay off. On the fake-device CPU mesh
this project can test on, transfers are memcpys and cannot show that overlap, so the simpler
collective is the one we can measure (docs/benchmarks.md, B8). Backward: the all-gather's
transpose is a reduce-scatter of dK and dV, which XLA emits. The gathered K/V are not kept
for the backward pass (it gathers again and recomputes the attention forward, one extra
attention forward per layer), so per-device activation memory falls as 1 / C.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax.core import spmd
from jax.sharding import PartitionSpec as P

AXIS = "context"


def _mesh():
  mesh = jax.sharding.get_abstract_mesh()
  return None if mesh.empty else mesh


def size() -> int:
  """The context axis's size in the current mesh context (`jax.set_mesh`); 1 without one."""
  mesh = _mesh()
  return int(mesh.shape[AXIS]) if mesh is not None and AXIS in mesh.axis_names else 1


def _rules():
  from roformer_jax import mesh as mesh_lib  # mesh.py imports nothing from the model side
  return dict(spmd.get_logical_axis_rules() or mesh_lib.DEFAULT_RULES)


def _axes(logical: str):
  target = _rules().get(logical)
  mesh = _mesh()
  names = () if target is None else (tuple(target) if isinstance(target, (list, tuple)) else (target,))
  names = tuple(n for n in names if mesh is not None and n in mesh.axis_names and mesh.shape[n] > 1)
  return names or None


def _batch_axes():
  return _axes("batch")


def _length_axes():
  axes = _axes("length")
  if axes not in (None, (AXIS,)):
    raise ValueError(f"logical_axis_rules maps 'length' to {axes}; context parallelism needs ('length', "
                     f"'{AXIS}') (mesh.DEFAULT_RULES).")
  return axes


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
  spec = P(_batch_axes(), _length_axes(), *([None] * (x.ndim - 2)))
  return jax.lax.with_sharding_constraint(x, spec)


def zigzag_order(length: int, c: int) -> np.ndarray:
  """Slot order int[T] whose C contiguous shards hold chunks (i, 2C - 1 - i) of 2C chunks.

  Shard i's causal work is then (i + 1/2) + (2C - i - 1/2) = 2C chunk pairs for every i.
  """
  if c == 1:
    return np.arange(length, dtype=np.int32)
  chunks = np.arange(length, dtype=np.int32).reshape(2 * c, length // (2 * c))
  return np.concatenate([np.concatenate([chunks[i], chunks[2 * c - 1 - i]]) for i in range(c)])


class Order:
  """The permutation a causal model applies under context parallelism (identity otherwise)."""

  def __init__(self, length: int, *, causal: bool):
    c = size()
    self.active = causal and c > 1
    self.order = zigzag_order(length, c) if self.active else None
    self.inverse = np.argsort(self.order).astype(np.int32) if self.active else None

  def permute(self, x):
    """x [B, T, ...] in zig-zag order (None stays None)."""
    return x if (x is None or not self.active) else jnp.take(jnp.asarray(x), self.order, axis=1)

  def restore(self, x):
    return x if not self.active else jnp.take(x, self.inverse, axis=1)

  def slots(self, batch: int):
    """int[B, T] original slot of each permuted position (the causal mask's indices), or None."""
    if not self.active:
      return None
    return jnp.broadcast_to(jnp.asarray(self.order), (batch, len(self.order)))


def attention(q, k, v, *, mask, scale: float, implementation: str | None, dropout_rate: float = 0.0,
              dropout_rng=None):
  """Softmax attention with q, k, v [B, T|S, N, H] sharded T-wise over the context axis.

  Each device all-gathers K, V and the key-side mask factors and attends its own queries to
  every key, with `dot_product_attention(implementation=...)` (rotation is done by the
  caller, which rotates the sharded q and k with their global positions).
  """
  from roformer_jax import attention as attn  # attention.py imports this module

  mesh = _mesh()
  batch, length = _batch_axes(), _length_axes()
  n = q.shape[2]
  tensor = "tensor" if ("tensor" in mesh.axis_names and mesh.shape["tensor"] > 1
                        and n % mesh.shape["tensor"] == 0 and k.shape[2] % mesh.shape["tensor"] == 0) else None
  heads = P(batch, length, tensor, None)
  rows = P(batch, length)
  if mask is not None and not isinstance(mask, attn.MaskFactors):
    raise ValueError("context parallelism needs the mask as MaskFactors (mask_factors): a dense [T, S] mask "
                     "cannot be split over the context axis.")
  mask_specs = jax.tree.map(lambda _: rows, mask)
  use_dropout = dropout_rate > 0.0 and dropout_rng is not None
  key = jax.random.key_data(dropout_rng) if use_dropout else None

  def local(q, k, v, mask, key=None):
    gather = lambda x: None if x is None else jax.lax.all_gather(x, AXIS, axis=1, tiled=True)
    k, v = gather(k), gather(v)
    if mask is not None:
      mask = dataclasses.replace(mask, kv_valid=gather(mask.kv_valid), kv_segment_ids=gather(mask.kv_segment_ids),
                                 kv_index=gather(mask.kv_index))
    rng = None
    if key is not None:  # a different dropout stream on every device
      for ax in mesh.axis_names:
        key = jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(key), jax.lax.axis_index(ax)))
      rng = jax.random.wrap_key_data(key)
    return attn.dot_product_attention(q, k, v, mask=mask, scale=scale, implementation=implementation,
                                      dropout_rate=dropout_rate if rng is not None else 0.0, dropout_rng=rng)

  args, specs = (q, k, v, mask), (heads, heads, heads, mask_specs)
  if key is not None:
    args, specs = args + (key,), specs + (P(),)
  # Rematerialised: the backward pass gathers K/V again and recomputes this forward, so
  # the residuals kept per layer are the local q, k, v (T / C tokens), not the gathered K/V
  # (T tokens), and per-device activation memory stays proportional to 1 / C.
  local = jax.checkpoint(local)
  return jax.shard_map(local, in_specs=specs, out_specs=heads, check_vma=False)(*args)


__all__ = ["AXIS", "Order", "attention", "check_length", "required_multiple", "shard", "size", "zigzag_order"]
