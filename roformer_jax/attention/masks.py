"""Attention masks: dense (`make_attention_mask`) and factored (`MaskFactors`, `mask_factors`).

Shapes: B batch, T query length, S key length, N heads. True means "may attend". A dense mask
is bool[B, 1, T, S]; the factored form keeps padding, packed segment ids and causal slot
indices apart, so that the chunked kernel (`chunked.py`) builds one [block_q, block_k] tile at
a time and the context-parallel wrapper (`sharded.py`) can gather the key-side factors.

Sliding-window (local) attention, `window=W`, tests the same slot indices as the causal mask
(`window_allows`), so it composes with padding and packing exactly as causality does:
- causal: query slot i sees key slot j iff i - W < j <= i, the last W keys, itself included
  (Mistral's and Gemma's local layers; W = 1 is "attend to self only");
- bidirectional: iff |i - j| <= W // 2, W // 2 keys on each side (ModernBERT's
  `local_attention=128` is 64 each side; W = 1 is again "self only").
"""

from __future__ import annotations

import dataclasses
import functools
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np


def check_window(window, *, name: str = "window") -> int | None:
  """`window` as an int, or None; a ValueError unless it is None or a positive int.

  The window W counts keys: causal attention sees the last W keys (itself included),
  bidirectional attention W // 2 keys on each side (module docstring)."""
  if window is None:
    return None
  if isinstance(window, (bool, np.bool_)) or not isinstance(window, (int, np.integer)) or window < 1:
    raise ValueError(f"{name}={window!r}: a sliding window is a positive int, the number of keys a query may "
                     "see (causal: i - W < j <= i; bidirectional: |i - j| <= W // 2), or None for no window.")
  return int(window)


def window_allows(q_index, kv_index, window: int, *, causal: bool):
  """The window test on broadcast slot indices (True = within the window).

  causal: i - W < j (the causal test j <= i is separate); bidirectional: |i - j| <= W // 2.
  """
  diff = q_index - kv_index
  if causal:
    return diff < window
  return jnp.abs(diff) <= window // 2


def make_attention_mask(*, q_valid=None, kv_valid=None, q_segment_ids=None, kv_segment_ids=None,
                        causal: bool = False, q_index=None, kv_index=None,
                        window: int | None = None) -> jax.Array | None:
  """A boolean attention mask [B, 1, T, S] (True = may attend), or None if nothing is masked.

  Args:
    q_valid, kv_valid: bool[B, T] / bool[B, S], False at padding.
    q_segment_ids, kv_segment_ids: int[B, T] / int[B, S]; tokens attend only within their
      segment (packed rows).
    causal: a query at slot i sees keys at slots <= i.
    q_index, kv_index: int[T] / int[S] (or [B, T] / [B, S]) slot indices for the causal and
      window tests; default 0..T-1 and 0..S-1. A decode step passes its cache slot here.
    window: sliding window W (a positive int) or None: with `causal`, slot i sees slots
      i - W < j <= i; without, |i - j| <= W // 2.
  """
  window = check_window(window)
  masks = []
  if kv_valid is not None:
    masks.append(jnp.asarray(kv_valid, bool)[:, None, None, :])
  if q_valid is not None:
    masks.append(jnp.asarray(q_valid, bool)[:, None, :, None])
  if q_segment_ids is not None or kv_segment_ids is not None:
    qs = q_segment_ids if q_segment_ids is not None else kv_segment_ids
    ks = kv_segment_ids if kv_segment_ids is not None else q_segment_ids
    masks.append(jnp.asarray(qs)[:, None, :, None] == jnp.asarray(ks)[:, None, None, :])
  if causal or window is not None:
    t = _length(q_index, q_valid, q_segment_ids, kv_valid, kv_segment_ids)
    s = _length(kv_index, kv_valid, kv_segment_ids, q_valid, q_segment_ids)
    if t is None or s is None:
      what = "causal=True" if causal else "window"
      raise ValueError(f"{what} needs the lengths: pass q_index/kv_index or a padding/segment array.")
    qi = jnp.asarray(q_index) if q_index is not None else jnp.arange(t, dtype=jnp.int32)
    ki = jnp.asarray(kv_index) if kv_index is not None else jnp.arange(s, dtype=jnp.int32)
    qi = qi[..., None, :, None] if qi.ndim == 2 else qi[:, None]
    ki = ki[..., None, None, :] if ki.ndim == 2 else ki[None, :]
    if causal:
      masks.append(qi >= ki)
    if window is not None:
      masks.append(window_allows(qi, ki, window, causal=causal))
  if not masks:
    return None
  out = masks[0]
  for m in masks[1:]:
    out = jnp.logical_and(out, m)
  return out


def _length(index, *arrays):
  """Length of an index axis: the index's own, else the last axis of the first array given."""
  if index is not None:
    return jnp.shape(index)[-1]
  for a in arrays:
    if a is not None:
      return jnp.shape(a)[-1]
  return None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class MaskFactors:
  """An attention mask in factored form; (q, k) may attend iff every given factor allows it.

  q_valid / kv_valid: bool[B, T] / bool[B, S]; False at padding.
  q_segment_ids / kv_segment_ids: int[B, T] / int[B, S]; attend only within a segment.
  q_index / kv_index: int[B, T] / int[B, S] slot indices for the causal test (q >= k) and the
    window test, used only if `causal` or `window`. Context parallelism passes the global
    slots of a permuted shard here.
  causal: (static) the causal test.
  window: (static) sliding window W or None: with `causal`, i - W < j <= i; without,
    |i - j| <= W // 2 (`window_allows`). Needs q_index and kv_index.
  """
  q_valid: jax.Array | None = None
  kv_valid: jax.Array | None = None
  q_segment_ids: jax.Array | None = None
  kv_segment_ids: jax.Array | None = None
  q_index: jax.Array | None = None
  kv_index: jax.Array | None = None
  causal: bool = dataclasses.field(default=False, metadata=dict(static=True))
  window: int | None = dataclasses.field(default=None, metadata=dict(static=True))

  def __post_init__(self):
    object.__setattr__(self, "window", check_window(self.window))

  def masks_nothing(self) -> bool:
    """True when no factor is given: every query sees every key (the indices alone mask nothing)."""
    return (self.q_valid is None and self.kv_valid is None and self.q_segment_ids is None
            and self.kv_segment_ids is None and not self.causal and self.window is None)

  def dense(self) -> jax.Array | None:
    """The equivalent bool[B, 1, T, S] mask (None if nothing is masked)."""
    masks = []
    if self.kv_valid is not None:
      masks.append(self.kv_valid[:, None, None, :])
    if self.q_valid is not None:
      masks.append(self.q_valid[:, None, :, None])
    if self.q_segment_ids is not None:
      kv_segment_ids = cast(jax.Array, self.kv_segment_ids)  # mask_factors sets both or neither
      masks.append(self.q_segment_ids[:, None, :, None] == kv_segment_ids[:, None, None, :])
    if self.causal or self.window is not None:
      if self.q_index is None or self.kv_index is None:
        raise ValueError("MaskFactors with causal=True or a window needs q_index and kv_index (mask_factors fills "
                         "them in).")
      qi, ki = self.q_index[:, None, :, None], self.kv_index[:, None, None, :]
      if self.causal:
        masks.append(qi >= ki)
      if self.window is not None:
        masks.append(window_allows(qi, ki, self.window, causal=self.causal))
    if not masks:
      return None
    return functools.reduce(jnp.logical_and, masks)


def mask_factors(batch: int, t: int, s: int, *, q_valid=None, kv_valid=None, q_segment_ids=None,
                 kv_segment_ids=None, causal: bool = False, q_index=None, kv_index=None,
                 window: int | None = None) -> MaskFactors:
  """`MaskFactors` with every given array broadcast to [B, T] / [B, S].

  Segment ids given on one side only apply to both (self-attention). Slot indices (for the
  causal and window tests) default to 0..T-1 and 0..S-1; [T] / [S] index vectors are
  broadcast over the batch. `window`: sliding window W or None (`MaskFactors.window`).
  """
  window = check_window(window)
  bt = lambda x, n, dt: None if x is None else jnp.broadcast_to(jnp.asarray(x).astype(dt), (batch, n))
  if (q_segment_ids is None) != (kv_segment_ids is None):
    q_segment_ids = kv_segment_ids = q_segment_ids if q_segment_ids is not None else kv_segment_ids
  if causal or window is not None:
    q_index = jnp.arange(t, dtype=jnp.int32) if q_index is None else q_index
    kv_index = jnp.arange(s, dtype=jnp.int32) if kv_index is None else kv_index
  else:
    q_index = kv_index = None
  return MaskFactors(bt(q_valid, t, bool), bt(kv_valid, s, bool), bt(q_segment_ids, t, jnp.int32),
                     bt(kv_segment_ids, s, jnp.int32), bt(q_index, t, jnp.int32), bt(kv_index, s, jnp.int32),
                     causal, window)



__all__ = ["MaskFactors", "check_window", "make_attention_mask", "mask_factors", "window_allows"]
