"""The context-parallel wrapper: a softmax attention kernel run on q, k, v sharded T-wise.

Under context parallelism (`roformer_jax.context_parallel`: the sequence axis of activations
split over the mesh's "context" axis) every device holds T / C queries, keys and values of
each row. `context_parallel_attention` runs the kernel it is given under `jax.shard_map`: each
device all-gathers K, V and the key-side mask factors over the axis and attends its own
queries to every key. The kernel is an argument (the module passes
`softmax.dot_product_attention` with its scale, implementation and dropout rate bound), so
this file imports no kernel.

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
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from roformer_jax import context_parallel
from roformer_jax.attention.masks import MaskFactors, check_window


def context_parallel_attention(kernel: Callable[..., jax.Array], q, k, v, *, mask: MaskFactors | None = None,
                               dropout_rng: jax.Array | None = None, window: int | None = None) -> jax.Array:
  """`kernel(q, k, v, mask=..., dropout_rng=...)` with q, k, v [B, T|S, N|K, H] sharded T-wise over the context axis.

  Each device all-gathers K, V and the key-side mask factors and calls the kernel on its own
  queries and every key. Rotation is done by the caller, which rotates the sharded q and k
  with their global positions (`softmax.rotate_qkv`). Heads are sharded as the logical
  "heads" axis's rule says (`context_parallel.axes`), where the mesh axes divide both the
  query and the key/value head counts; batch and length as "batch" and "length".

  Args:
    kernel: softmax attention over q [B, T/C, N, H] and the gathered k, v [B, S, K, H]; e.g.
      `functools.partial(dot_product_attention, scale=..., implementation=..., dropout_rate=...)`.
    q, k, v: the local shards, already rotated.
    mask: `MaskFactors` (`mask_factors`) with global causal slot indices, or None; a dense
      [T, S] mask cannot be split over the context axis.
    window: sliding window W (`masks.MaskFactors.window`), or None. It joins the factors
      (a window already in them is the same thing; two different ones are an error), and
      every device's kernel tests it on the global slots of its queries and of the gathered
      keys, so a zig-zag shard sees the window of the unsharded row, and the chunked kernel
      skips its tiles outside it. Factors without slots get 0..T-1 (a bidirectional row,
      unpermuted); a causal row must carry its zig-zag slots. Do not bind `window` to the
      kernel: called with no factors, it would count each shard's local slots.
    dropout_rng: the dropout key, or None; each device folds in its mesh coordinates so that
      its stream differs from every other device's.

  Returns:
    float[B, T, N, Hv], sharded like q.
  """
  mesh = context_parallel.current_mesh()
  batch, length = context_parallel.batch_axes(), context_parallel.length_axes()
  heads = context_parallel.axes("heads")
  ways = math.prod(mesh.shape[a] for a in heads) if heads else 1
  if q.shape[2] % ways or k.shape[2] % ways:
    heads = None  # the head counts do not split over those axes: replicate heads
  per_head = P(batch, length, heads, None)
  rows = P(batch, length)
  if mask is not None and not isinstance(mask, MaskFactors):
    raise ValueError("context parallelism needs the mask as MaskFactors (mask_factors): a dense [T, S] mask "
                     "cannot be split over the context axis.")
  window = check_window(window)
  if window is not None:
    if mask is not None and mask.window not in (None, window):
      raise ValueError(f"window={window} but the mask's factors carry window={mask.window}; pass one of them.")
    mask = dataclasses.replace(MaskFactors() if mask is None else mask, window=window)
  if mask is not None and (mask.causal or mask.window is not None) and (mask.q_index is None or mask.kv_index is None):
    if mask.causal:
      raise ValueError("causal attention under context parallelism needs the global (zig-zag) slots in "
                       "MaskFactors.q_index / kv_index; each shard's own would count from 0.")
    slots = lambda n: jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (q.shape[0], n))
    mask = dataclasses.replace(mask, q_index=slots(q.shape[1]), kv_index=slots(k.shape[1]))
  mask_specs = jax.tree.map(lambda _: rows, mask)
  key, impl = None, None
  if dropout_rng is not None:  # its PRNG travels beside its data: rbg's data is not threefry's
    key, impl = jax.random.key_data(dropout_rng), jax.random.key_impl(dropout_rng)
  axis = context_parallel.AXIS

  def local(q, k, v, mask, key=None):
    gather = lambda x: None if x is None else jax.lax.all_gather(x, axis, axis=1, tiled=True)
    k, v = gather(k), gather(v)
    if mask is not None:
      mask = dataclasses.replace(mask, kv_valid=gather(mask.kv_valid), kv_segment_ids=gather(mask.kv_segment_ids),
                                 kv_index=gather(mask.kv_index))
    rng = None
    if key is not None:  # a different dropout stream on every device
      for ax in mesh.axis_names:
        key = jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(key, impl=impl),
                                                     jax.lax.axis_index(ax)))
      rng = jax.random.wrap_key_data(key, impl=impl)
    return kernel(q, k, v, mask=mask, dropout_rng=rng)

  args: tuple[Any, ...]
  specs: tuple[Any, ...]
  args, specs = (q, k, v, mask), (per_head, per_head, per_head, mask_specs)
  if key is not None:
    args, specs = args + (key,), specs + (P(),)
  # Rematerialised: the backward pass gathers K/V again and recomputes this forward, so
  # the residuals kept per layer are the local q, k, v (T / C tokens), not the gathered K/V
  # (T tokens), and per-device activation memory stays proportional to 1 / C.
  local = jax.checkpoint(local)
  return jax.shard_map(local, in_specs=specs, out_specs=per_head, check_vma=False)(*args)


__all__ = ["context_parallel_attention"]
