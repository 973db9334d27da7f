"""Attention with RoPE: softmax attention, linear attention (eq. 19), and their NNX modules.

Shapes: B batch, T query length, S key length, N heads, H head dim, Hv value head dim,
F feature-map dim (linear attention), D model dim.

Pure functions first (`make_attention_mask`, `dot_product_attention`, `linear_attention`,
`linear_attention_step`, the feature maps); `MultiHeadAttention` is a thin NNX shell that
holds the projections and calls them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from roformer_jax import context_parallel, rope
from roformer_jax.chunked_attention import MaskFactors, chunked_attention, mask_factors
from roformer_jax.partitioning import partitioned
from roformer_jax.positional import RotaryConfig

FEATURE_MAPS = ("elu", "favor")
ATTENTION_KINDS = ("softmax", "linear")
ATTENTION_IMPLEMENTATIONS = ("auto", "xla", "cudnn", "chunked")  # ModelConfig.attention_implementation
# "auto" takes the chunked (O(T + S) memory) path from this key length on, where cuDNN does not
# apply. On CPU chunked attention is already faster than dense at 1024 keys, forward and
# forward+backward, and its memory stays linear (docs/benchmarks.md, B8); shorter rows were
# not measured below 1024 and keep the dense path, which the default 128-token model uses.
CHUNKED_MIN_LENGTH = 1024

# --------------------------------------------------------------------------------------
# Masks.
# --------------------------------------------------------------------------------------


def make_attention_mask(*, q_valid=None, kv_valid=None, q_segment_ids=None, kv_segment_ids=None,
                        causal: bool = False, q_index=None, kv_index=None) -> jax.Array | None:
  """A boolean attention mask [B, 1, T, S] (True = may attend), or None if nothing is masked.

  Args:
    q_valid, kv_valid: bool[B, T] / bool[B, S], False at padding.
    q_segment_ids, kv_segment_ids: int[B, T] / int[B, S]; tokens attend only within their
      segment (packed rows).
    causal: a query at slot i sees keys at slots <= i.
    q_index, kv_index: int[T] / int[S] (or [B, T] / [B, S]) slot indices for the causal
      test; default 0..T-1 and 0..S-1. A decode step passes its cache slot here.
  """
  masks = []
  if kv_valid is not None:
    masks.append(jnp.asarray(kv_valid, bool)[:, None, None, :])
  if q_valid is not None:
    masks.append(jnp.asarray(q_valid, bool)[:, None, :, None])
  if q_segment_ids is not None or kv_segment_ids is not None:
    qs = q_segment_ids if q_segment_ids is not None else kv_segment_ids
    ks = kv_segment_ids if kv_segment_ids is not None else q_segment_ids
    masks.append(jnp.asarray(qs)[:, None, :, None] == jnp.asarray(ks)[:, None, None, :])
  if causal:
    t = _length(q_index, q_valid, q_segment_ids, kv_valid, kv_segment_ids)
    s = _length(kv_index, kv_valid, kv_segment_ids, q_valid, q_segment_ids)
    if t is None or s is None:
      raise ValueError("causal=True needs the lengths: pass q_index/kv_index or a padding/segment array.")
    qi = jnp.asarray(q_index) if q_index is not None else jnp.arange(t, dtype=jnp.int32)
    ki = jnp.asarray(kv_index) if kv_index is not None else jnp.arange(s, dtype=jnp.int32)
    qi = qi[..., None, :, None] if qi.ndim == 2 else qi[:, None]
    ki = ki[..., None, None, :] if ki.ndim == 2 else ki[None, :]
    masks.append(qi >= ki)
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


# --------------------------------------------------------------------------------------
# Softmax attention.
# --------------------------------------------------------------------------------------


def attention_implementation(*, backend: str, dtype, head_dim: int, dense_mask: bool, dropout: bool,
                             kv_length: int = 0) -> str:
  """What "auto" runs: "cudnn", "chunked" or "xla".

  `jax.nn.dot_product_attention(implementation=None)` always takes the XLA path in the JAX
  versions this project pins, so cuDNN's fused (flash) kernel must be requested. It is
  requested on a GPU for bf16/fp16 inputs with a head size cuDNN supports (a multiple of 8, at
  most 128), no dense mask (causal attention is passed as `is_causal`) and no dropout.
  Otherwise keys of `CHUNKED_MIN_LENGTH` or more take `chunked_attention` (exact, O(T + S)
  memory), and shorter ones XLA's dense path.
  """
  half = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
  if backend == "gpu" and half and head_dim % 8 == 0 and head_dim <= 128 and not dense_mask and not dropout:
    return "cudnn"
  return "chunked" if kv_length >= CHUNKED_MIN_LENGTH else "xla"


def dot_product_attention(q, k, v, *, mask=None, q_positions=None, k_positions=None,
                          rotary: RotaryConfig | None = None, rotary_value: bool = False,
                          scale: float | None = None, dropout_rate: float = 0.0,
                          dropout_rng: jax.Array | None = None, is_causal: bool = False,
                          implementation: str | None = None) -> jax.Array:
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
  q, k, v = _rotate(q, k, v, q_positions, k_positions, rotary, rotary_value)
  if scale is None:
    scale = 1.0 / math.sqrt(q.shape[-1])
  requested = None if implementation in (None, "auto") else implementation
  if implementation == "auto":
    implementation = None
  if implementation is not None and implementation not in ATTENTION_IMPLEMENTATIONS:
    raise ValueError(f"implementation={implementation!r}; expected None or one of {ATTENTION_IMPLEMENTATIONS}.")
  dropout = dropout_rate > 0.0 and dropout_rng is not None
  factored = isinstance(mask, MaskFactors)
  if implementation is None:
    implementation = attention_implementation(
        backend=jax.default_backend(), dtype=q.dtype, head_dim=q.shape[-1], dense_mask=mask is not None,
        dropout=dropout or v.shape[-1] != q.shape[-1], kv_length=k.shape[1] if factored or mask is None else 0)
  if implementation == "chunked":
    if mask is not None and not factored:
      raise ValueError("implementation='chunked' builds its mask tiles from MaskFactors (see mask_factors); "
                       "a dense [T, S] mask would defeat its O(T + S) memory.")
    if is_causal and (mask is None or not mask.causal):
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
    if is_causal:
      t, s = q.shape[1], k.shape[1]
      causal = make_attention_mask(causal=True, q_index=jnp.arange(t), kv_index=jnp.arange(s))
      mask = causal if mask is None else jnp.logical_and(mask, causal)
    return _xla_attention_with_dropout(q, k, v, mask, scale, dropout_rate if dropout else 0.0, dropout_rng)
  if implementation == "cudnn" and requested is None:
    try:
      return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale, is_causal=is_causal,
                                          implementation="cudnn")
    except (NotImplementedError, RuntimeError, ValueError, TypeError):  # e.g. an old cuDNN
      implementation = "xla"
  return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale, is_causal=is_causal,
                                      implementation=implementation)


def _rotate(q, k, v, q_positions, k_positions, rotary, rotary_value):
  """RoPE on q and k (and v if rotary_value) with their own positions."""
  rotary = RotaryConfig() if rotary is None else rotary
  if (q_positions is None) != (k_positions is None):
    raise ValueError("pass both q_positions and k_positions (RoPE on q and k) or neither.")
  if q_positions is not None:
    # A length-dependent scaling rotates q and k with the frequencies of the keys' sequence:
    # each row's length is its largest key position + 1 (None would let q's own, shorter
    # positions pick a different length).
    lengths = rope.row_lengths(k_positions) if rotary.length_dependent else None
    q = rotary.apply(q, q_positions, seq_len=lengths)
    k_cs = rotary.cos_sin(jnp.asarray(k_positions), k.shape[-1], seq_len=lengths)
    k = rotary.rotate(k, k_cs)
    if rotary_value:
      if v.shape[-1] != k.shape[-1]:
        raise ValueError(f"rotary_value needs value head dim == key head dim, got {v.shape[-1]} vs {k.shape[-1]}.")
      v = rotary.rotate(v, k_cs)
  elif rotary_value:
    raise ValueError("rotary_value=True needs k_positions to rotate the values with.")
  return q, k, v


def _refuse_recurrent(scaling, what: str) -> None:
  """Linear attention's recurrent state sums keys already rotated; a length-dependent scaling
  would need every one of them rotated again as the sequence grows, which the state cannot do."""
  if rope.is_length_dependent(scaling):
    raise ValueError(
        f"{what}: rope_type {dict(scaling).get('rope_type', dict(scaling).get('type'))!r} rotates every key "
        "by the current sequence length, but linear attention's recurrent state holds keys already "
        "rotated and cannot rotate them again. Use a model's decode_step (it rebuilds the state "
        "from its tokens when the frequencies change), a length-independent scaling (linear, yarn, "
        "llama3), or the full forward.")


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


# --------------------------------------------------------------------------------------
# Linear attention (Sec. 3.3, eq. 19).
# --------------------------------------------------------------------------------------


def elu_feature_map(x: jax.Array) -> jax.Array:
  """phi(x) = elu(x) + 1 (Katharopoulos et al. 2020): positive, F = H."""
  return jax.nn.elu(x) + 1.0


def favor_projection(key: jax.Array, num_features: int, head_dim: int) -> jax.Array:
  """FAVOR+ random projection [F, H] with blockwise-orthogonal rows (Choromanski et al. 2021).

  Each block of H rows is an orthogonal matrix (QR of a Gaussian), and each row is rescaled
  to the norm of an independent Gaussian vector, so rows are marginally N(0, I) but
  orthogonal within a block, which lowers the variance of the kernel estimate.
  """
  if num_features < 2 or num_features % 2:
    raise ValueError(f"num_features={num_features} must be even and >= 2 (RoPE rotates feature pairs).")
  blocks = []
  keys = jax.random.split(key, num_features // head_dim + 2)
  for i in range(-(-num_features // head_dim)):
    g = jax.random.normal(keys[i], (head_dim, head_dim), jnp.float32)
    qmat, r = jnp.linalg.qr(g)
    # Sign fix: Householder QR leaves diag(R) with a skewed sign, which biases Q's entries;
    # Q * sign(diag(R)) is Haar-distributed, so each row is uniform on the sphere.
    qmat = qmat * jnp.sign(jnp.diag(r))[None, :]
    blocks.append(qmat.T)
  w = jnp.concatenate(blocks, axis=0)[:num_features]
  norms = jnp.linalg.norm(jax.random.normal(keys[-1], (num_features, head_dim), jnp.float32), axis=-1)
  return w * norms[:, None]


def favor_feature_map(x: jax.Array, projection: jax.Array, *, is_query: bool) -> jax.Array:
  """FAVOR+ positive random features: E[phi(q) . phi(k)] = exp(q . k / sqrt(H)).

  phi(x) = exp(w_j . x' - |x'|^2 / 2) / sqrt(F) with x' = x / H^(1/4). Queries subtract
  their own max over features first (a per-query constant, which cancels exactly between
  the numerator and the denominator of eq. 19). Keys get no data-dependent stabiliser: a
  max over keys would differ between a full pass and token-by-token decoding, and the two
  must agree. Computed in float32.

  Args:
    x: float[..., T, N, H]; projection: float[F, H] from `favor_projection`.

  Returns:
    float32[..., T, N, F], strictly positive.
  """
  x = x.astype(jnp.float32) * x.shape[-1] ** -0.25
  wx = jnp.einsum("...h,fh->...f", x, projection.astype(jnp.float32))
  wx = wx - 0.5 * jnp.sum(x * x, axis=-1, keepdims=True)
  if is_query:
    wx = wx - jax.lax.stop_gradient(jnp.max(wx, axis=-1, keepdims=True))
  return (jnp.exp(wx) + 1e-6) / math.sqrt(projection.shape[0])


def _features(x, feature_map, projection, is_query):
  if feature_map == "elu":
    return elu_feature_map(x.astype(jnp.float32))
  if feature_map == "favor":
    if projection is None:
      raise ValueError("feature_map='favor' needs projection=favor_projection(key, num_features, head_dim).")
    return favor_feature_map(x, projection, is_query=is_query)
  raise ValueError(f"feature_map={feature_map!r}; expected one of {FEATURE_MAPS}.")


class LinearAttentionState(NamedTuple):
  """Recurrent state of causal linear attention after t tokens (per batch row and head).

  s: float32[B, N, F, Hv] = sum_n (R_n phi(k_n)) v_n^T   (numerator, rotated keys)
  z: float32[B, N, F]     = sum_n phi(k_n)              (denominator, unrotated keys)
  segment: int32[B], segment id of the last token (packing); -1 before the first token.
  """
  s: jax.Array
  z: jax.Array
  segment: jax.Array


def init_linear_state(batch: int, num_heads: int, features: int, value_dim: int) -> LinearAttentionState:
  return LinearAttentionState(jnp.zeros((batch, num_heads, features, value_dim), jnp.float32),
                              jnp.zeros((batch, num_heads, features), jnp.float32),
                              jnp.full((batch,), -1, jnp.int32))


def linear_attention(q, k, v, *, q_positions=None, k_positions=None, feature_map: str = "elu",
                     causal: bool = False, theta: float = 10000.0, layout: str = "interleaved",
                     rotary_dim: int | None = None, scaling: Mapping[str, Any] | None = None,
                     projection: jax.Array | None = None, kv_mask=None, segment_ids=None,
                     chunk_size: int = 64, eps: float = 1e-6,
                     initial_state: LinearAttentionState | None = None,
                     return_state: bool = False):
  """Linear attention with RoPE exactly as eq. (19) of the paper.

    out_m = sum_n (R_m phi(q_m))^T (R_n phi(k_n)) v_n  /  sum_n phi(q_m)^T phi(k_n)

  RoPE rotates the feature-mapped queries and keys in the numerator only; the denominator
  keeps the unrotated phi(q)^T phi(k), which is positive, so it is never near zero for
  positive feature maps (still guarded by `eps`). The numerator can have negative terms, so
  the weights are not a probability distribution (Sec. 3.3); they need not sum to one.

  Non-causal: O(T) work and memory through associativity, (R phi(Q)) [sum_n R phi(k_n) v_n^T].
  Causal: a scan over chunks of `chunk_size` tokens carrying the prefix sums (s, z); inside a
  chunk a [chunk, chunk] block is formed, so memory is O(T * chunk), never T x T.

  Args:
    q, k: float[B, T, N, H] / [B, S, N, H]; v: float[B, S, N, Hv].
    q_positions, k_positions: int[B, T] / [B, S] (or [T] / [S]); None for both = no RoPE.
    feature_map: "elu" (elu + 1, F = H) or "favor" (FAVOR+, F = projection rows). F must
      be even: RoPE rotates feature pairs.
    causal: query m sees keys n <= m (needs S == T).
    theta, layout, rotary_dim, scaling: RoPE settings on the F features (see rope.apply_rotary).
    projection: float[F, H] for "favor" (`favor_projection`).
    kv_mask: bool[B, S], False at padding keys (they are dropped from both sums).
    segment_ids: int[B, T] (causal only): packed documents attend only within their segment;
      segments must be contiguous runs.
    chunk_size: causal chunk length.
    eps: the denominator guard, out = num / max(den, eps).
    initial_state, return_state: causal only; continue from / return a `LinearAttentionState`
      (prefill, then `linear_attention_step` per token).

  Returns:
    float[B, T, N, Hv] in q's dtype, and the final state if return_state.
  """
  if (q_positions is None) != (k_positions is None):
    raise ValueError("pass both q_positions and k_positions (RoPE on phi(q) and phi(k)) or neither.")
  if not causal and (segment_ids is not None or initial_state is not None or return_state):
    raise ValueError("segment_ids, initial_state and return_state need causal=True.")
  fq = _features(q, feature_map, projection, True)
  fk = _features(k, feature_map, projection, False)
  if fq.shape[-1] % 2 and q_positions is not None:
    raise ValueError(f"feature dim F={fq.shape[-1]} must be even for RoPE (rotates pairs).")
  vf = v.astype(jnp.float32)
  if kv_mask is not None:
    keep = jnp.asarray(kv_mask, bool)[..., None, None]
    fk, vf = jnp.where(keep, fk, 0.0), jnp.where(keep, vf, 0.0)
  if q_positions is not None:
    lengths = rope.row_lengths(k_positions) if rope.is_length_dependent(scaling) else None  # as `_rotate`
    rope_kw = dict(layout=layout, rotary_dim=rotary_dim, scaling=scaling, seq_len=lengths)
    fq_r = rope.apply_rotary(fq, q_positions, theta, **rope_kw)
    fk_r = rope.apply_rotary(fk, k_positions, theta, **rope_kw)
  else:
    fq_r, fk_r = fq, fk
  if not causal:
    s = jnp.einsum("...snf,...snv->...nfv", fk_r, vf)  # sum_n (R_n phi(k_n)) v_n^T
    z = jnp.sum(fk, axis=-3)  # sum_n phi(k_n), unrotated
    num = jnp.einsum("...tnf,...nfv->...tnv", fq_r, s)
    den = jnp.einsum("...tnf,...nf->...tn", fq, z)
    return (num / jnp.maximum(den, eps)[..., None]).astype(q.dtype)
  if q.shape[-3] != k.shape[-3]:
    raise ValueError(f"causal linear attention needs equal query and key lengths, got {q.shape[-3]} and {k.shape[-3]}.")
  if q.ndim != 4:
    raise ValueError(f"causal linear attention expects [B, T, N, H] inputs, got q shape {q.shape}.")
  out, state = _causal_linear(fq, fk, fq_r, fk_r, vf, segment_ids, chunk_size, eps, initial_state)
  out = out.astype(q.dtype)
  return (out, state) if return_state else out


def _causal_linear(fq, fk, fq_r, fk_r, v, segment_ids, chunk_size, eps, state):
  b, t, n, f = fq.shape
  hv = v.shape[-1]
  if state is None:
    state = init_linear_state(b, n, f, hv)
  seg = jnp.zeros((b, t), jnp.int32) if segment_ids is None else jnp.asarray(segment_ids, jnp.int32)
  c = max(1, min(chunk_size, t))
  pad = -t % c
  if pad:
    padder = lambda x: jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
    fq, fk, fq_r, fk_r, v = map(padder, (fq, fk, fq_r, fk_r, v))
    seg = jnp.pad(seg, [(0, 0), (0, pad)], mode="edge")
  nc = (t + pad) // c
  chunked = lambda x: jnp.moveaxis(x.reshape(b, nc, c, *x.shape[2:]), 1, 0)  # [nc, B, c, ...]
  xs = tuple(map(chunked, (fq, fk, fq_r, fk_r, v, seg)))
  tril = jnp.tril(jnp.ones((c, c), bool))

  def step(carry: LinearAttentionState, xs):
    cq, ck, cq_r, ck_r, cv, cseg = xs
    same = (cseg[:, :, None] == cseg[:, None, :]) & tril  # [B, c, c]
    w_num = jnp.einsum("btnf,bsnf->bnts", cq_r, ck_r) * same[:, None]
    w_den = jnp.einsum("btnf,bsnf->bnts", cq, ck) * same[:, None]
    carried = (cseg == carry.segment[:, None])[:, :, None]  # [B, c, 1]: same document as the prefix
    num = jnp.einsum("bnts,bsnv->btnv", w_num, cv) + carried[..., None] * jnp.einsum("btnf,bnfv->btnv", cq_r, carry.s)
    den = jnp.sum(w_den, axis=-1).transpose(0, 2, 1) + carried * jnp.einsum("btnf,bnf->btn", cq, carry.z)
    out = num / jnp.maximum(den, eps)[..., None]
    last = cseg[:, -1]
    in_last = (cseg == last[:, None])[:, :, None, None]  # keys of the segment still open
    keep = (carry.segment == last)[:, None, None]
    s = keep[..., None] * carry.s + jnp.einsum("bsnf,bsnv->bnfv", ck_r * in_last, cv)
    z = keep * carry.z + jnp.sum(ck * in_last, axis=1)
    return LinearAttentionState(s, z, last), out

  state, out = jax.lax.scan(step, state, xs)
  out = jnp.moveaxis(out, 0, 1).reshape(b, nc * c, n, hv)[:, :t]
  return out, state


def linear_attention_step(state: LinearAttentionState, q, k, v, *, positions, feature_map="elu",
                          theta: float = 10000.0, layout: str = "interleaved",
                          rotary_dim: int | None = None, scaling=None, projection=None,
                          use_rope: bool = True, eps: float = 1e-6):
  """One token of causal linear attention in O(1): update (s, z), then read the output.

  Args:
    state: the `LinearAttentionState` after the previous tokens.
    q, k: float[B, 1, N, H]; v: float[B, 1, N, Hv]; positions: int[B, 1].
    use_rope: False for a model without RoPE (positions are then ignored).

  Returns:
    (out float[B, 1, N, Hv], new state). Equals the causal `linear_attention` row.
  """
  if use_rope:
    _refuse_recurrent(scaling, "linear_attention_step")
  kw = dict(q_positions=positions, k_positions=positions) if use_rope else {}
  return linear_attention(q, k, v, feature_map=feature_map, causal=True, theta=theta, layout=layout,
                          rotary_dim=rotary_dim, scaling=scaling, projection=projection, eps=eps,
                          initial_state=state, return_state=True, chunk_size=1, **kw)


# --------------------------------------------------------------------------------------
# NNX module.
# --------------------------------------------------------------------------------------


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
               implementation: str = "auto", rngs: nnx.Rngs):
    if kind not in ATTENTION_KINDS:
      raise ValueError(f"attention kind={kind!r}; expected one of {ATTENTION_KINDS}.")
    if head_dim is None:
      if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}; "
                         "pass head_dim explicitly or change one of them.")
      head_dim = d_model // num_heads
    self.num_heads, self.head_dim, self.kind = num_heads, head_dim, kind
    self.use_rope, self.rotary = use_rope, rotary or RotaryConfig()
    self.rotary_value, self.causal, self.feature_map = rotary_value, causal, feature_map
    if implementation not in ATTENTION_IMPLEMENTATIONS:
      raise ValueError(f"implementation={implementation!r}; expected one of {ATTENTION_IMPLEMENTATIONS}.")
    self.dropout_rate, self.implementation = dropout_rate, implementation
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

  def _projection(self):
    return self.projection[...] if (self.kind == "linear" and self.feature_map == "favor") else None

  def __call__(self, x, *, context=None, positions=None, kv_positions=None, mask=None,
               kv_valid=None, segment_ids=None, deterministic: bool = True) -> jax.Array:
    """Full-sequence attention.

    Args:
      x: [B, T, D] queries' input. context: [B, S, D] for cross-attention (else self).
      positions: int[B, T] query positions (RoPE); kv_positions default to positions.
      mask: bool mask broadcastable to [B, N, T, S] (softmax attention).
      kv_valid: bool[B, S] padding mask for keys (linear attention uses this, not `mask`).
      segment_ids: int[B, T] packed segments (causal linear attention).
    """
    src = x if context is None else context
    q, k, v = self.query(x), self.key(src), self.value(src)
    rotate = self.use_rope and context is None
    qp = positions if rotate else None
    kp = (positions if kv_positions is None else kv_positions) if rotate else None
    if self.kind == "linear":
      if mask is not None:
        raise ValueError("linear attention has no dense [T, S] mask (that would cost O(T * S)); pass "
                         "kv_valid for padding, segment_ids for packing, and causal=True at construction.")
      rc = self.rotary
      y = linear_attention(q, k, v, q_positions=qp, k_positions=kp, feature_map=self.feature_map,
                           causal=self.causal, theta=rc.theta, layout=rc.layout,
                           rotary_dim=rc.rotary_dim, scaling=rc.scaling_dict,
                           projection=self._projection(), kv_mask=kv_valid,
                           segment_ids=segment_ids if self.causal else None)
    else:
      use_dropout = self.dropout_rate > 0 and not deterministic
      if context_parallel.size() > 1:
        # Rotate the T-sharded q and k here, each token with its global position; attention
        # then gathers K/V over the context axis (context_parallel.attention).
        if self.causal and context is None and (mask is None or not getattr(mask, "causal", False)):
          raise ValueError("causal attention under context parallelism needs MaskFactors with the causal "
                           "slot indices (the models pass them).")
        q, k, v = _rotate(q, k, v, qp, kp, self.rotary, self.rotary_value and rotate)
        y = context_parallel.attention(q, k, v, mask=mask, scale=1.0 / math.sqrt(q.shape[-1]),
                                       implementation=self.implementation,
                                       dropout_rate=self.dropout_rate if use_dropout else 0.0,
                                       dropout_rng=self.rngs.dropout() if use_dropout else None)
        return self.out(y)
      y = dot_product_attention(q, k, v, mask=mask, q_positions=qp, k_positions=kp,
                                rotary=self.rotary, rotary_value=self.rotary_value and rotate,
                                dropout_rate=self.dropout_rate if use_dropout else 0.0,
                                dropout_rng=self.rngs.dropout() if use_dropout else None,
                                is_causal=self.causal and context is None,
                                implementation=self.implementation)
    return self.out(y)

  # ---- incremental decoding -----------------------------------------------------------

  def init_cache(self, batch: int, max_len: int, dtype=jnp.float32) -> dict[str, jax.Array]:
    """An empty per-layer decode cache: k/v slots for softmax, (s, z) for linear attention."""
    if self.kind == "linear":
      f = self.head_dim if self.feature_map == "elu" else self._projection().shape[0]
      return init_linear_state(batch, self.num_heads, f, self.head_dim)._asdict()
    shape = (batch, max_len, self.num_heads, self.head_dim)
    return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}

  def decode(self, x, cache: dict, *, positions, index, kv_valid) -> tuple[jax.Array, dict]:
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
      positions: int[B, L] positions of the new tokens.
      index: int32 scalar, the cache slot of x[:, 0].
      kv_valid: bool[B, max_len] real (non-padding) slots, including the new ones.

    Returns:
      (y [B, L, D], updated cache).
    """
    q, k, v = self.query(x), self.key(x), self.value(x)
    rc = self.rotary
    if self.kind == "linear":
      state = LinearAttentionState(**cache)
      new_valid = jax.lax.dynamic_slice_in_dim(kv_valid, index, x.shape[1], axis=1)
      kw = dict(q_positions=positions, k_positions=positions) if self.use_rope else {}
      y, state = linear_attention(q, k, v, feature_map=self.feature_map, causal=True, theta=rc.theta,
                                  layout=rc.layout, rotary_dim=rc.rotary_dim, scaling=rc.scaling_dict,
                                  projection=self._projection(), kv_mask=new_valid,
                                  initial_state=state, return_state=True, **kw)
      return self.out(y), state._asdict()
    if self.use_rope:
      cs = rc.cos_sin(positions, self.head_dim)
      q, k = rc.rotate(q, cs), rc.rotate(k, cs)
      if self.rotary_value:
        v = rc.rotate(v, cs)
    ck = jax.lax.dynamic_update_slice_in_dim(cache["k"], k.astype(cache["k"].dtype), index, axis=1)
    cv = jax.lax.dynamic_update_slice_in_dim(cache["v"], v.astype(cache["v"].dtype), index, axis=1)
    s = ck.shape[1]
    mask = make_attention_mask(kv_valid=kv_valid, causal=True,
                               q_index=index + jnp.arange(x.shape[1], dtype=jnp.int32),
                               kv_index=jnp.arange(s, dtype=jnp.int32))
    y = dot_product_attention(q, ck.astype(q.dtype), cv.astype(q.dtype), mask=mask)
    return self.out(y), {"k": ck, "v": cv}


def cross_kv(attn: MultiHeadAttention, context: jax.Array) -> dict[str, jax.Array]:
  """Keys and values of the encoder output for cross-attention, computed once per decode."""
  return {"k": attn.key(context), "v": attn.value(context)}


def cross_attend(attn: MultiHeadAttention, x, kv: dict, *, mask=None) -> jax.Array:
  """Cross-attention of x [B, L, D] over precomputed `cross_kv`; no RoPE (positions unrelated)."""
  y = dot_product_attention(attn.query(x), kv["k"], kv["v"], mask=mask)
  return attn.out(y)


__all__ = [
    "ATTENTION_KINDS", "FEATURE_MAPS", "FeatureProjection", "LinearAttentionState",
    "ATTENTION_IMPLEMENTATIONS", "CHUNKED_MIN_LENGTH", "MaskFactors", "MultiHeadAttention", "chunked_attention",
    "mask_factors", "attention_implementation", "cross_attend", "cross_kv", "dot_product_attention",
    "elu_feature_map", "favor_feature_map", "favor_projection", "init_linear_state",
    "linear_attention", "linear_attention_step", "make_attention_mask",
]
