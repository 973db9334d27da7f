"""`MultiHeadAttention`: the NNX module that holds the q/k/v/out projections and calls the kernels.

Shapes: B batch, T query length, S key length, N heads, H head dim, D model dim.

Softmax attention goes to `softmax.dot_product_attention`, or, under context parallelism, to
`sharded.context_parallel_attention` with that kernel; linear attention to `linear.py`.
`decode`, `cross_kv` and `cross_attend` are the incremental-decoding paths.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
from flax import nnx

from roformer_jax import context_parallel
from roformer_jax.attention.linear import (FEATURE_MAPS, LinearAttentionState, favor_projection, init_linear_state,
                                           linear_attention)
from roformer_jax.attention.masks import make_attention_mask
from roformer_jax.attention.sharded import context_parallel_attention
from roformer_jax.attention.softmax import (ATTENTION_IMPLEMENTATIONS, dot_product_attention, rotate_qkv,
                                            unrotate_output)
from roformer_jax.partitioning import partitioned
from roformer_jax.positional import RotaryConfig

ATTENTION_KINDS = ("softmax", "linear")


@dataclasses.dataclass(frozen=True)
class AttentionTemperature:
  """Llama 4's q temperature on its NoPE layers (arXiv 2501.19399): q is scaled by
  1 + scale * log(1 + floor((position + 1) / floor)) (`temperature_scale`).

  Frozen, so hashable: a `MultiHeadAttention` keeps it as static module state, which jit
  hashes with the module's GraphDef (a dict there breaks every jitted call).
  """

  scale: float
  floor: float

  def __post_init__(self):
    for name, low in (("scale", 0.0), ("floor", 1.0)):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < low:
        raise ValueError(f"attention temperature {name}={value!r} must be a finite number >= {low:g} "
                         "(Llama 4: {'scale': 0.1, 'floor': 8192}).")
      object.__setattr__(self, name, float(value))

  @classmethod
  def of(cls, value: Any, what: str = "temperature") -> "AttentionTemperature | None":
    """`value` as an AttentionTemperature: None, an instance, or a dict {"scale", "floor"}.

    Raises:
      ValueError naming `what` and the value when it is none of these or its numbers are bad.
    """
    if value is None or isinstance(value, cls):
      return value
    expected = "a dict {'scale': >= 0, 'floor': >= 1} (Llama 4: {'scale': 0.1, 'floor': 8192}) or None"
    if not isinstance(value, Mapping) or set(value) != {"scale", "floor"}:
      raise ValueError(f"{what}={value!r} must be {expected}.")
    try:
      return cls(scale=value["scale"], floor=value["floor"])
    except ValueError as e:
      raise ValueError(f"{what}={dict(value)!r}: {e}") from None

  def __call__(self, q: jax.Array, positions) -> jax.Array:
    return temperature_scale(q, positions, scale=self.scale, floor=self.floor)


class FeatureProjection(nnx.Variable):
  """FAVOR+ projection: not trained; redrawn by `MultiHeadAttention.redraw_features`."""


def _dense(in_shape, out_shape, axes, *, init_std, use_bias, bias_axes, dtype, param_dtype, rngs):
  """A LinearGeneral over (in_shape) -> (out_shape) with logical axis names on its params."""
  init = nnx.initializers.normal(init_std) if init_std else nnx.initializers.lecun_normal()
  n_in = len(in_shape)
  return nnx.LinearGeneral(
      in_shape, out_shape, axis=tuple(range(-n_in, 0)), use_bias=use_bias, dtype=dtype,
      param_dtype=param_dtype, rngs=rngs,
      kernel_init=partitioned(init, axes),
      bias_init=partitioned(nnx.initializers.zeros_init(), bias_axes))


class MultiHeadAttention(nnx.Module):
  """Multi-head self- or cross-attention, softmax or linear, with RoPE on q and k.

  Cross-attention (`context` given) never rotates: queries and keys come from two different
  sequences whose positions are unrelated, so m - n has no meaning between them.

  Parameters carry logical axes: q/k/v kernels ("embed", "heads", "kv"), output kernel
  ("heads", "kv", "embed"), so the trainer's rules table shards them.
  """

  def __init__(self, d_model: int, num_heads: int, *, head_dim: int | None = None,
               kind: str = "softmax", use_rope: bool = True, rotary: RotaryConfig | None = None,
               rotary_value: bool = False, causal: bool = False, feature_map: str = "elu",
               num_features: int = 256, dropout_rate: float = 0.0, use_bias: bool = True,
               init_std: float | None = 0.02, dtype=jnp.float32, param_dtype=jnp.float32,
               implementation: str = "auto", window: int | None = None,
               temperature: AttentionTemperature | Mapping[str, float] | None = None, fused_qkv: bool = False,
               rngs: nnx.Rngs):
    if kind not in ATTENTION_KINDS:
      raise ValueError(f"attention kind={kind!r}; expected one of {ATTENTION_KINDS}.")
    if head_dim is None:
      if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}; "
                         "pass head_dim explicitly or change one of them.")
      head_dim = d_model // num_heads
    self.num_heads, self.head_dim, self.kind = num_heads, head_dim, kind
    self.use_rope, self.rotary = use_rope, rotary or RotaryConfig()
    # v rotates where the caller asks (HF RoFormer's rotary_value) or the spec says so (CLVP, DeepSeek-V4)
    self.rotary_value = rotary_value or (use_rope and self.rotary.rotate_value)
    self.causal, self.feature_map = causal, feature_map
    if kind == "linear" and use_rope and (self.rotary_value or self.rotary.unrotate_output):
      raise ValueError("linear attention rotates its feature maps of q and k only: a spec with rotate_value or "
                       "unrotate_output needs kind='softmax'.")
    if implementation not in ATTENTION_IMPLEMENTATIONS:
      raise ValueError(f"implementation={implementation!r}; expected one of {ATTENTION_IMPLEMENTATIONS}.")
    self.dropout_rate, self.implementation = dropout_rate, implementation
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
      raise ValueError(f"window={window!r} must be a positive int (tokens) or None.")
    if window is not None and kind != "softmax":
      raise ValueError("a window needs softmax attention (linear attention has none).")
    self.window, self.temperature = window, AttentionTemperature.of(temperature)
    if not isinstance(fused_qkv, bool):
      raise ValueError(f"fused_qkv={fused_qkv!r} must be True or False.")
    self.fused_qkv = fused_qkv
    if use_rope and self.rotary.learned:  # RoPE-Mixed: this layer's own 2-D frequencies per head
      if kind != "softmax":
        raise ValueError("learned RoPE frequencies (frequencies='mixed') need softmax attention.")
      self.rope_frequencies = nnx.Param(self.rotary.initial_frequencies(rngs.params(), num_heads, head_dim))
    kw = dict(init_std=init_std, use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.query = _dense((d_model,), (num_heads, head_dim), ("embed", "heads", "kv"), bias_axes=("heads", "kv"), **kw)
    self.key = _dense((d_model,), (num_heads, head_dim), ("embed", "heads", "kv"), bias_axes=("heads", "kv"), **kw)
    self.value = _dense((d_model,), (num_heads, head_dim), ("embed", "heads", "kv"), bias_axes=("heads", "kv"), **kw)
    self.out = _dense((num_heads, head_dim), (d_model,), ("heads", "kv", "embed"), bias_axes=("embed",), **kw)
    if kind == "linear":
      if feature_map not in FEATURE_MAPS:
        raise ValueError(f"feature_map={feature_map!r}; expected one of {FEATURE_MAPS}.")
      if feature_map == "favor":
        self.projection = FeatureProjection(favor_projection(rngs.params(), num_features, head_dim))
    self.rngs = rngs.fork() if dropout_rate > 0 else None

  def redraw_features(self, key: jax.Array) -> None:
    """Draws a fresh FAVOR+ projection (Performer redraws every ~1000 steps; the trainer's
    `feature_redraw_every` decides). Eval and decoding keep the projection fixed."""
    if self.kind == "linear" and self.feature_map == "favor":
      f, h = self.projection[...].shape
      self.projection[...] = favor_projection(key, f, h)

  def _qkv(self, x):
    """q, k, v [B, T, N, H] of self-attention as one matmul: the three kernels stacked on a new
    axis (not concatenated along the heads, which a tensor-parallel mesh shards), the same
    dot products as the three projections (nnx.LinearGeneral's promotion and dot_general)."""
    mods = (self.query, self.key, self.value)
    kernel = jnp.stack([m.kernel[...] for m in mods], axis=1)  # [D, 3, N, H]
    bias = None if self.query.bias is None else jnp.stack([m.bias[...] for m in mods], axis=0)  # [3, N, H]
    x, kernel, bias = self.query.promote_dtype((x, kernel, bias), dtype=self.query.dtype)
    y = jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=self.query.precision)
    if bias is not None:
      y = y + bias  # [B, T, 3, N, H]
    return tuple(y[..., i, :, :] for i in range(3))

  def _learned(self):
    """The learned RoPE frequencies [2, N, R/2] (float32), or None for a fixed spec."""
    return self.rope_frequencies[...] if (self.use_rope and self.rotary.learned) else None

  def _projection(self):
    return self.projection[...] if (self.kind == "linear" and self.feature_map == "favor") else None

  def __call__(self, x, *, context=None, positions=None, kv_positions=None, mask=None,
               kv_valid=None, segment_ids=None, deterministic: bool = True) -> jax.Array:
    """Full-sequence attention.

    Args:
      x: [B, T, D] queries' input. context: [B, S, D] for cross-attention (else self).
      positions: int[B, T] query positions (RoPE), [B, T, A] for a spec of A position axes
        (`RotaryConfig.position_shape`); kv_positions default to positions.
      mask: bool mask broadcastable to [B, N, T, S] (softmax attention).
      kv_valid: bool[B, S] padding mask for keys (linear attention uses this, not `mask`).
      segment_ids: int[B, T] packed segments (causal linear attention).
    """
    src = x if context is None else context
    q, k, v = self._qkv(x) if (self.fused_qkv and context is None) else (self.query(x), self.key(src), self.value(src))
    if self.temperature is not None and context is None:
      q = self.temperature(q, positions)
    rotate = self.use_rope and context is None
    qp = positions if rotate else None
    kp = (positions if kv_positions is None else kv_positions) if rotate else None
    if rotate and self.rotary.learned:  # rotated here, with the layer's own frequencies
      f = self._learned()
      rc = self.rotary
      k_cs = rc.cos_sin(cast(jax.Array, kp), self.head_dim, frequencies=f)  # rotated: the caller gave positions
      q, k = rc.rotate(q, rc.cos_sin(cast(jax.Array, qp), self.head_dim, frequencies=f)), rc.rotate(k, k_cs)
      if self.rotary_value:
        v = rc.rotate(v, k_cs)
      qp = kp = None
    if self.kind == "linear":
      if mask is not None:
        raise ValueError("linear attention has no dense [T, S] mask (that would cost O(T * S)); pass "
                         "kv_valid for padding, segment_ids for packing, and causal=True at construction.")
      y = linear_attention(q, k, v, q_positions=qp, k_positions=kp, feature_map=self.feature_map,
                           causal=self.causal, rotary=self.rotary, projection=self._projection(), kv_mask=kv_valid,
                           segment_ids=segment_ids if self.causal else None)
    else:
      use_dropout = self.dropout_rate > 0 and not deterministic
      if context_parallel.size() > 1:
        # Rotate the T-sharded q and k here, each token with its global position; attention
        # then gathers K/V over the context axis (sharded.context_parallel_attention).
        if self.causal and context is None and (mask is None or not getattr(mask, "causal", False)):
          raise ValueError("causal attention under context parallelism needs MaskFactors with the causal "
                           "slot indices (the models pass them).")
        q, k, v = rotate_qkv(q, k, v, qp, kp, self.rotary, self.rotary_value and qp is not None)
        if self.window is not None and context is None:  # the window travels in the factors' global slots
          mask = dataclasses.replace(mask, window=self.window)
        kernel = functools.partial(dot_product_attention, scale=1.0 / math.sqrt(q.shape[-1]),
                                   implementation=self.implementation,
                                   dropout_rate=self.dropout_rate if use_dropout else 0.0)
        y = context_parallel_attention(kernel, q, k, v, mask=mask,  # use_dropout: dropout_rate > 0, so self.rngs
                                       dropout_rng=cast(nnx.Rngs, self.rngs).dropout() if use_dropout else None)
        return self.out(unrotate_output(y, qp, self.rotary))
      y = dot_product_attention(q, k, v, mask=mask, q_positions=qp, k_positions=kp,
                                rotary=self.rotary, rotary_value=self.rotary_value and qp is not None,
                                dropout_rate=self.dropout_rate if use_dropout else 0.0,
                                dropout_rng=cast(nnx.Rngs, self.rngs).dropout() if use_dropout else None,
                                is_causal=self.causal and context is None,
                                implementation=self.implementation,
                                window=self.window if context is None else None)
    return self.out(y)

  # ---- incremental decoding -----------------------------------------------------------

  def init_cache(self, batch: int, max_len: int, dtype=jnp.float32) -> dict[str, jax.Array]:
    """An empty per-layer decode cache: k/v slots for softmax, (s, z) for linear attention."""
    if self.kind == "linear":
      f = self.head_dim if self.feature_map == "elu" else self._projection().shape[0]
      return init_linear_state(batch, self.num_heads, f, self.head_dim)._asdict()
    # A window layer keeps only its last W keys and values: a ring buffer of min(W, max_len)
    # slots, so its decode memory is O(W), not O(max_len) (`_decode_window`).
    slots = max_len if self.window is None else min(self.window, max_len)
    shape = (batch, slots, self.num_heads, self.head_dim)
    return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}

  def decode(self, x, cache: dict, *, positions, index, kv_valid, end=None) -> tuple[jax.Array, dict]:
    """Self-attention over new tokens x [B, L, D] given a cache filled up to slot `index`.

    Softmax: keys are rotated with their own positions before they are cached, so each
    cached key keeps its absolute rotation and q_m . k_n still depends on m - n only.
    Linear: the recurrent (s, z) state is advanced over the L tokens.

    A length-dependent scaling (dynamic, longrope) rotates the new tokens with the
    frequencies of each row's length after them (its largest new position + 1). The cache
    is exact only while those frequencies stay the same as when it was written: when they
    change, every earlier token's keys change, and in a stack so do the hidden states of
    every layer after the first. The models' `decode_step` then rebuilds the cache from
    the tokens it keeps (`models.CausalLM.decode_step`).

    Args:
      positions: int[B, L] positions of the new tokens ([B, L, A] for A position axes).
      index: int32 scalar, the cache slot of x[:, 0].
      kv_valid: bool[B, max_len] real (non-padding) slots, including the new ones.
      end: int32 scalar, the slot after the last token fed so far; None = index + L. A cache
        rebuild (`models.CausalLM.decode_step`) feeds all max_len slots, of which only those
        before `end` hold tokens: a window layer's ring buffer then keeps the keys of the W
        slots before `end`, not those of the last W (empty) slots.

    Returns:
      (y [B, L, D], updated cache).
    """
    q, k, v = self.query(x), self.key(x), self.value(x)
    if self.temperature is not None:
      q = self.temperature(q, positions)
    rc = self.rotary
    if self.kind == "linear":
      state = LinearAttentionState(**cache)
      new_valid = jax.lax.dynamic_slice_in_dim(kv_valid, index, x.shape[1], axis=1)
      kw = dict(q_positions=positions, k_positions=positions) if self.use_rope else {}
      y, state = linear_attention(q, k, v, feature_map=self.feature_map, causal=True, rotary=rc,
                                  projection=self._projection(), kv_mask=new_valid,
                                  initial_state=state, return_state=True, **kw)
      return self.out(y), state._asdict()
    if self.use_rope:
      cs = rc.cos_sin(positions, self.head_dim, frequencies=self._learned())
      k_cs = rc.cos_sin(positions, self.head_dim, key=True) if rc.needs_key_table else cs
      q, k = rc.rotate(q, cs), rc.rotate(k, k_cs)
      if self.rotary_value:
        v = rc.rotate(v, k_cs)
    if self.window is not None:
      y, new_cache = self._decode_window(q, k, v, cache, index=index, kv_valid=kv_valid, end=end)
      return self.out(unrotate_output(y, positions if self.use_rope else None, rc)), new_cache
    ck = jax.lax.dynamic_update_slice_in_dim(cache["k"], k.astype(cache["k"].dtype), index, axis=1)
    cv = jax.lax.dynamic_update_slice_in_dim(cache["v"], v.astype(cache["v"].dtype), index, axis=1)
    s = ck.shape[1]
    mask = make_attention_mask(kv_valid=kv_valid, causal=True,
                               q_index=index + jnp.arange(x.shape[1], dtype=jnp.int32),
                               kv_index=jnp.arange(s, dtype=jnp.int32))
    y = dot_product_attention(q, ck.astype(q.dtype), cv.astype(q.dtype), mask=mask)
    return self.out(unrotate_output(y, positions if self.use_rope else None, rc)), {"k": ck, "v": cv}

  def _decode_window(self, q, k, v, cache, *, index, kv_valid, end=None):
    """Decode step of a window layer over its ring buffer of R = min(W, max_len) slots.

    Ring slot r holds the key of absolute slot a = the latest a < index with a % R == r (none
    if that is negative). The L new queries attend to the ring and to the L new keys, under
    the causal window test on absolute slots (and `kv_valid` for padding); then the last
    min(L, R) new keys overwrite their ring slots. A prefill longer than W attends within
    itself, so one step of any length is exact; memory stays O(W + L). With `end` (a rebuild:
    only the new slots before `end` hold tokens), ring slot r takes the latest a < end.
    Returns (the attention's y [B, L, N, H] before the output projection, the new cache).
    """
    ring, length = cache["k"].shape[1], q.shape[1]
    r = jnp.arange(ring, dtype=jnp.int32)
    ring_abs = (index - 1) - jnp.mod(index - 1 - r, ring)  # [R]; < 0: never written
    new_abs = index + jnp.arange(length, dtype=jnp.int32)
    ring_ok = (ring_abs >= 0)[None, :] & jnp.take(kv_valid, jnp.maximum(ring_abs, 0), axis=1)
    new_ok = jax.lax.dynamic_slice_in_dim(kv_valid, index, length, axis=1)
    mask = make_attention_mask(kv_valid=jnp.concatenate([ring_ok, new_ok], axis=1), causal=True, q_index=new_abs,
                               kv_index=jnp.concatenate([ring_abs, new_abs]), window=self.window)
    keys = jnp.concatenate([cache["k"].astype(q.dtype), k.astype(q.dtype)], axis=1)
    values = jnp.concatenate([cache["v"].astype(q.dtype), v.astype(q.dtype)], axis=1)
    y = dot_product_attention(q, keys, values, mask=mask)
    if end is None:
      keep = min(length, ring)  # static: only the last `ring` new keys can stay
      slots = jnp.mod(new_abs[length - keep:], ring)
      ck = cache["k"].at[:, slots].set(k[:, length - keep:].astype(cache["k"].dtype))
      cv = cache["v"].at[:, slots].set(v[:, length - keep:].astype(cache["v"].dtype))
      return y, {"k": ck, "v": cv}
    target = (end - 1) - jnp.mod(end - 1 - r, ring)  # [R]: the absolute slot ring slot r keeps
    source = jnp.clip(target - index, 0, length - 1)  # its place among the new keys
    fresh = (target >= index)[None, :, None, None]  # else the ring keeps what it has
    ck = jnp.where(fresh, jnp.take(k, source, axis=1).astype(cache["k"].dtype), cache["k"])
    cv = jnp.where(fresh, jnp.take(v, source, axis=1).astype(cache["v"].dtype), cache["v"])
    return y, {"k": ck, "v": cv}


def temperature_scale(q: jax.Array, positions, *, scale: float, floor: float) -> jax.Array:
  """Llama 4's attention temperature on q (its NoPE layers; arXiv 2501.19399):
  q * (1 + scale * log(1 + floor((position + 1) / floor))).

  The bucket is computed on the int32 positions, so it is exact at any length (MaxText casts
  positions to the model dtype first: in bf16 a position near a multiple of 8192 can round into
  the next bucket). Packed and left-padded rows use each token's own position (transformers
  uses arange over the sequence instead).

  Args:
    q: [B, T, N, H]. positions: int[B, T] (or [B, T, A]: the first axis is used).
  """
  pos = jnp.asarray(positions)
  if pos.ndim == q.ndim - 1:
    pos = pos[..., 0]
  bucket = jnp.floor_divide(pos.astype(jnp.int32) + 1, jnp.int32(int(floor))).astype(jnp.float32)
  factor = 1.0 + float(scale) * jnp.log1p(bucket)
  return (q.astype(jnp.float32) * factor[..., None, None]).astype(q.dtype)


def cross_kv(attn: MultiHeadAttention, context: jax.Array) -> dict[str, jax.Array]:
  """Keys and values of the encoder output for cross-attention, computed once per decode."""
  return {"k": attn.key(context), "v": attn.value(context)}


def cross_attend(attn: MultiHeadAttention, x, kv: dict, *, mask=None) -> jax.Array:
  """Cross-attention of x [B, L, D] over precomputed `cross_kv`; no RoPE (positions unrelated)."""
  y = dot_product_attention(attn.query(x), kv["k"], kv["v"], mask=mask)
  return attn.out(y)


__all__ = ["ATTENTION_KINDS", "AttentionTemperature", "FeatureProjection", "MultiHeadAttention", "cross_attend", "cross_kv", "temperature_scale"]
