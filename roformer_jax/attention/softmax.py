"""Softmax attention with RoPE on q and k (eq. 16): `dot_product_attention` and its dispatch.

Shapes: B batch, T query length, S key length, N heads (K key/value heads), H head dim, Hv
value head dim. The call goes to `jax.nn.dot_product_attention` (XLA or cuDNN), to the
chunked kernel (`chunked.py`, exact, O(T + S) memory), or to an explicit XLA path when
attention-probability dropout is on.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, cast

import jax
import jax.numpy as jnp

from roformer_jax.attention.chunked import chunked_attention
from roformer_jax.attention.masks import MaskFactors, check_window, make_attention_mask, mask_factors
from roformer_jax.positional import RotaryConfig

ATTENTION_IMPLEMENTATIONS = ("auto", "xla", "cudnn", "chunked")  # ModelConfig.attention_implementation
# "auto" takes the chunked (O(T + S) memory) path from this key length on, where cuDNN does not
# apply. On CPU chunked attention is already faster than dense at 1024 keys, forward and
# forward+backward, and its memory stays linear (docs/benchmarks.md, B8); shorter rows were
# not measured below 1024 and keep the dense path, which the default 128-token model uses.
CHUNKED_MIN_LENGTH = 1024
# On a GPU, "auto" keeps XLA's dense attention while one call's float32 logits stay under this
# (4 GiB: [1, 4, 32K, 32K]; the dense forward then peaks near 6 GiB, its backward near 10 GiB
# on an H100), and only then takes the slower, O(T + S)-memory chunked kernel.
GPU_DENSE_LOGITS_BYTES = 4 * 2 ** 30


def attention_implementation(*, backend: str, dtype, head_dim: int, dense_mask: bool, dropout: bool,
                             kv_length: int = 0, logits_bytes: int = 0) -> str:
  """What "auto" runs: "cudnn", "chunked" or "xla".

  `jax.nn.dot_product_attention(implementation=None)` always takes the XLA path in the JAX
  versions this project pins, so cuDNN's fused (flash) kernel must be requested. It is
  requested on a GPU for bf16/fp16 inputs with a head size cuDNN supports (a multiple of 8, at
  most 128), no dense mask (causal attention is passed as `is_causal`) and no dropout.
  Otherwise, on a CPU (or TPU), keys of `CHUNKED_MIN_LENGTH` or more take `chunked_attention`
  (exact, O(T + S) memory; faster than dense there from 1K keys), shorter ones XLA's dense
  path. On a GPU the chunked kernel's tile loop was 7-8x slower than XLA's dense attention
  at 4K-32K keys (an H100, docs/benchmarks.md), so there the dense path runs until its float32
  logits (`logits_bytes` = B x N x T x S x 4 of one call, from the shapes as traced: under
  `jit` with a batch sharded over D devices that is the global batch, D times one device's
  share, so chunked attention starts D times earlier per device) pass
  `GPU_DENSE_LOGITS_BYTES`, and chunked attention only beyond, for its memory. 0 (the default)
  keeps the dense path on a GPU.
  """
  half = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
  if backend == "gpu" and half and head_dim % 8 == 0 and head_dim <= 128 and not dense_mask and not dropout:
    return "cudnn"
  if backend == "gpu":
    return "chunked" if kv_length >= CHUNKED_MIN_LENGTH and logits_bytes > GPU_DENSE_LOGITS_BYTES else "xla"
  return "chunked" if kv_length >= CHUNKED_MIN_LENGTH else "xla"


@jax.named_scope("attention")  # profiles group attention's ops (bench/trace_summary.py)
def dot_product_attention(q, k, v, *, mask=None, q_positions=None, k_positions=None,
                          rotary: RotaryConfig | None = None, rotary_value: bool = False,
                          scale: float | None = None, dropout_rate: float = 0.0,
                          dropout_rng: jax.Array | None = None, is_causal: bool = False,
                          implementation: str | None = None, window: int | None = None) -> jax.Array:
  """Softmax attention with RoPE on q and k (eq. 16); values are not rotated.

  Rotating q_m and k_n makes each logit q_m . k_n a function of m - n only. Values carry
  content, not position, so the paper leaves them alone; `rotary_value=True` rotates v with
  the key positions too, which some HF RoFormer checkpoints (config.rotary_value) expect.

  The call goes to `jax.nn.dot_product_attention`. With `implementation=None` the choice is
  `attention_implementation`: cuDNN's fused kernel on a GPU for bf16/fp16 inputs with no dense
  mask and no dropout (if cuDNN refuses the call while tracing, XLA is used instead), XLA
  elsewhere. Logits and softmax are float32 for bf16/fp16 inputs. Attention-probability
  dropout is not supported by that function, so a nonzero `dropout_rate` with a `dropout_rng`
  takes an explicit XLA path instead.

  Args:
    q: float[B, T, N, H]; k: float[B, S, K, H] (K divides N: grouped queries); v: [B, S, K, Hv].
    mask: bool, broadcastable to [B, N, T, S] (see `make_attention_mask`), or `MaskFactors`
      (see `mask_factors`): the chunked path needs factors, and builds each tile from them.
    is_causal: query slot i sees key slots <= i (T == S), without a dense mask (what cuDNN
      needs); combines with `mask`.
    window: sliding-window (local) attention over W keys, or None. Causal (`is_causal`, or
      `MaskFactors.causal`): slot i sees slots i - W < j <= i; bidirectional: |i - j| <= W // 2
      (ModernBERT's local_attention=128 is W=128, 64 on each side). Slots are 0..T-1 and
      0..S-1, or the factors' q_index / kv_index. With `MaskFactors` the window joins the
      factors (the chunked kernel then skips every tile outside it); with a dense mask or none
      it goes to `jax.nn.dot_product_attention(local_window_size=...)` (cuDNN's sliding
      window for causal attention; XLA builds the mask), or into the explicit dropout path's
      mask. A window in the mask's factors and a different one here is an error.
    q_positions, k_positions: int[B, T] / int[B, S] (or [T] / [S]); None = no rotation
      (cross-attention, or absolute-position models).
    rotary: RoPE settings (default `RotaryConfig()`).
    rotary_value: also rotate v by the key positions (HF compatibility only).
    scale: logit scale, default 1/sqrt(H).
    implementation: None or "auto" (the choice above), "xla", "chunked" (exact attention in
      O(T + S) memory, `chunked_attention`; any backend, dropout included), or "cudnn" (a GPU
      only, without dropout; an error otherwise, and cuDNN's own error where it does not
      support the call).

  Returns:
    float[B, T, N, Hv] in q's dtype.
  """
  q, k, v = rotate_qkv(q, k, v, q_positions, k_positions, rotary, rotary_value)
  y = _attend(q, k, v, mask=mask, scale=scale, dropout_rate=dropout_rate, dropout_rng=dropout_rng,
              is_causal=is_causal, implementation=implementation, window=window)
  return unrotate_output(y, q_positions, rotary)


def unrotate_output(y: jax.Array, q_positions, rotary: RotaryConfig | None) -> jax.Array:
  """The attention output y [B, T, N, Hv] rotated back at its queries' positions where the spec says so
  (`RotaryConfig.unrotate_output`, DeepSeek-V4); else y unchanged."""
  if rotary is None or not rotary.unrotate_output or q_positions is None:
    return y
  return rotary.unrotate(y, jnp.asarray(q_positions))


def _attend(q, k, v, *, mask, scale, dropout_rate, dropout_rng, is_causal, implementation, window):
  """dot_product_attention after the rotation: the kernel's choice and call."""
  if scale is None:
    scale = 1.0 / math.sqrt(q.shape[-1])
  requested = None if implementation in (None, "auto") else implementation
  if implementation == "auto":
    implementation = None
  if implementation is not None and implementation not in ATTENTION_IMPLEMENTATIONS:
    raise ValueError(f"implementation={implementation!r}; expected None or one of {ATTENTION_IMPLEMENTATIONS}.")
  dropout = dropout_rate > 0.0 and dropout_rng is not None
  factored = isinstance(mask, MaskFactors)
  window = check_window(window)
  if factored and window is not None and mask.window not in (None, window):
    raise ValueError(f"window={window} but the mask's factors carry window={mask.window}; pass one of them.")
  if factored and (window is not None or mask.window is not None):
    # The window joins the factors, with the causal test if this call is causal: the window's
    # direction is the attention's (i - W < j <= i, or |i - j| <= W // 2 without causality).
    mask = _with_window(mask, mask.window if window is None else window, is_causal, q.shape[1], k.shape[1])
    window = None
  if factored and mask.masks_nothing():
    # e.g. an encoder's full rows (no padding, no packing): no mask at all, which keeps cuDNN's
    # fused kernel eligible (B3 on an H100 ran XLA's attention for want of this).
    mask, factored = None, False
  if implementation is None:
    implementation = attention_implementation(
        backend=jax.default_backend(), dtype=q.dtype, head_dim=q.shape[-1], dense_mask=mask is not None,
        dropout=dropout or v.shape[-1] != q.shape[-1], kv_length=k.shape[1] if factored or mask is None else 0,
        logits_bytes=4 * q.shape[0] * q.shape[2] * q.shape[1] * k.shape[1])
  if implementation == "chunked":
    if mask is not None and not factored:
      raise ValueError("implementation='chunked' builds its mask tiles from MaskFactors (see mask_factors); "
                       "a dense [T, S] mask would defeat its O(T + S) memory.")
    if mask is None and window is not None:
      mask = mask_factors(q.shape[0], q.shape[1], k.shape[1], causal=is_causal, window=window)
    elif is_causal and (mask is None or not mask.causal):
      causal = mask_factors(q.shape[0], q.shape[1], k.shape[1], causal=True)
      mask = causal if mask is None else dataclasses.replace(mask, causal=True, q_index=causal.q_index,
                                                              kv_index=causal.kv_index)
    return chunked_attention(q, k, v, mask=mask, scale=scale, dropout_rate=dropout_rate if dropout else 0.0,
                             dropout_rng=dropout_rng if dropout else None)
  if factored:
    mask = mask.dense()
  if mask is not None:
    mask = jnp.broadcast_to(jnp.asarray(mask, bool), (q.shape[0], q.shape[2], q.shape[1], k.shape[1]))
  if implementation == "cudnn" and jax.default_backend() != "gpu":
    raise ValueError(f"implementation='cudnn' needs a GPU, but the default backend is {jax.default_backend()!r}; "
                     "use 'auto' (cuDNN where it applies, XLA elsewhere) or 'xla'.")
  if implementation == "cudnn" and (dropout or v.shape[-1] != q.shape[-1]):
    raise ValueError("implementation='cudnn' cannot run attention-probability dropout or values wider than "
                     f"keys (dropout_rate={dropout_rate}, value dim {v.shape[-1]} vs {q.shape[-1]}); set "
                     "attention_dropout=0 or use 'auto'.")
  if dropout or v.shape[-1] != q.shape[-1]:
    if is_causal or window is not None:
      t, s = q.shape[1], k.shape[1]
      extra = make_attention_mask(causal=is_causal, q_index=jnp.arange(t), kv_index=jnp.arange(s), window=window)
      mask = extra if mask is None else jnp.logical_and(mask, cast(jax.Array, extra))  # causal or window: a mask
    return _xla_attention_with_dropout(q, k, v, mask, scale, dropout_rate if dropout else 0.0, dropout_rng)
  # jax.nn's (left, right) window: i - left <= j <= i + right, on slots 0..T-1 / 0..S-1.
  local = None if window is None else ((window - 1, 0) if is_causal else (window // 2, window // 2))
  if implementation == "cudnn" and requested is None:
    try:
      return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale, is_causal=is_causal,
                                          local_window_size=local, implementation="cudnn")
    except (NotImplementedError, RuntimeError, ValueError, TypeError):  # e.g. an old cuDNN
      implementation = "xla"
  return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale, is_causal=is_causal,
                                      local_window_size=local,
                                      implementation=cast(Literal["xla", "cudnn"], implementation))  # "chunked": above


def _with_window(mask: MaskFactors, window: int, is_causal: bool, t: int, s: int) -> MaskFactors:
  """The factors with `window`, causal if the call is, and slots 0..T-1 / 0..S-1 where none are given."""
  batch = next((x.shape[0] for x in jax.tree.leaves(mask)), 1)
  slots = lambda index, n: (jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (batch, n)) if index is None
                            else index)
  return dataclasses.replace(mask, causal=mask.causal or is_causal, window=window,
                             q_index=slots(mask.q_index, t), kv_index=slots(mask.kv_index, s))


def rotate_qkv(q, k, v, q_positions, k_positions, rotary: RotaryConfig | None, rotary_value: bool):
  """RoPE on q and k (and v if rotary_value) with their own positions: `dot_product_attention`'s
  rotation, also used by the module before the context-parallel kernel, which takes q and k
  already rotated. Returns (q, k, v); None positions (both) leave q and k as they are."""
  rotary = RotaryConfig() if rotary is None else rotary
  if (q_positions is None) != (k_positions is None):
    raise ValueError("pass both q_positions and k_positions (RoPE on q and k) or neither.")
  if q_positions is not None:
    # A length-dependent scaling rotates q and k with the frequencies of the keys' sequence:
    # each row's length is its largest key position + 1 (None would let q's own, shorter
    # positions pick a different length).
    lengths = rotary.seq_len(k_positions)
    q = rotary.apply(q, q_positions, seq_len=lengths)
    k_cs = rotary.cos_sin(jnp.asarray(k_positions), k.shape[-1], seq_len=lengths, key=True)
    k = rotary.rotate(k, k_cs)
    if rotary_value or rotary.rotate_value:
      if v.shape[-1] != k.shape[-1]:
        raise ValueError(f"rotary_value needs value head dim == key head dim, got {v.shape[-1]} vs {k.shape[-1]}.")
      v = rotary.rotate(v, k_cs)
  elif rotary_value:
    raise ValueError("rotary_value=True needs k_positions to rotate the values with.")
  return q, k, v


def _xla_attention_with_dropout(q, k, v, mask, scale, rate, rng):
  """Explicit softmax attention (float32 logits/softmax) for dropout or Hv != H."""
  n, kh = q.shape[2], k.shape[2]
  if n != kh:
    k, v = jnp.repeat(k, n // kh, axis=2), jnp.repeat(v, n // kh, axis=2)
  logits = jnp.einsum("btnh,bsnh->bnts", q, k, preferred_element_type=jnp.float32) * scale
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min / 2)
  probs = jax.nn.softmax(logits, axis=-1)
  if rate > 0.0:
    keep = jax.random.bernoulli(rng, 1.0 - rate, probs.shape)
    probs = jnp.where(keep, probs / (1.0 - rate), 0.0)
  return jnp.einsum("bnts,bsnh->btnh", probs.astype(v.dtype), v).astype(q.dtype)



__all__ = ["ATTENTION_IMPLEMENTATIONS", "CHUNKED_MIN_LENGTH", "GPU_DENSE_LOGITS_BYTES", "attention_implementation",
           "dot_product_attention", "rotate_qkv", "unrotate_output"]
