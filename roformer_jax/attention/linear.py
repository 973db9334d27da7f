"""Linear attention with RoPE (Sec. 3.3, eq. 19), its feature maps and its recurrent state.

Shapes: B batch, T query length, S key length, N heads, H head dim, Hv value head dim, F
feature-map dim.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp

from roformer_jax.positional import RotaryConfig

FEATURE_MAPS = ("elu", "favor")


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
                     causal: bool = False, rotary: RotaryConfig | None = None, theta: float | None = None,
                     layout: str | None = None, rotary_dim: int | None = None,
                     scaling: Mapping[str, Any] | None = None, projection: jax.Array | None = None,
                     kv_mask=None, segment_ids=None, chunk_size: int = 64, eps: float = 1e-6,
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
    q_positions, k_positions: int[B, T] / [B, S] (or [T] / [S]), with a trailing axis
      [..., A] for a spec of several position axes; None for both = no RoPE.
    feature_map: "elu" (elu + 1, F = H) or "favor" (FAVOR+, F = projection rows). F must
      be even: RoPE rotates feature pairs.
    causal: query m sees keys n <= m (needs S == T).
    rotary: the RoPE spec (`positional.RotaryConfig`) applied to the F features; the models
      pass their `ModelConfig.rotary`. Default: `RotaryConfig()`.
    theta, layout, rotary_dim, scaling: a convenience for callers without a spec: the spec
      `RotaryConfig(theta=..., ...)` (None = that field's default). Not together with rotary.
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
  rotary = RotaryConfig.of(rotary, theta=theta, layout=layout, rotary_dim=rotary_dim, scaling=scaling)
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
    lengths = rotary.seq_len(k_positions)  # as `softmax.rotate_qkv`
    fq_r = rotary.apply(fq, q_positions, seq_len=lengths)
    fk_r = rotary.apply(fk, k_positions, seq_len=lengths, key=True)
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
                          rotary: RotaryConfig | None = None, theta: float | None = None,
                          layout: str | None = None, rotary_dim: int | None = None, scaling=None,
                          projection=None, use_rope: bool = True, eps: float = 1e-6):
  """One token of causal linear attention in O(1): update (s, z), then read the output.

  Args:
    state: the `LinearAttentionState` after the previous tokens.
    q, k: float[B, 1, N, H]; v: float[B, 1, N, Hv]; positions: int[B, 1] (or [B, 1, A]).
    rotary, theta, layout, rotary_dim, scaling: the RoPE spec, as in `linear_attention`.
    use_rope: False for a model without RoPE (positions are then ignored).

  Returns:
    (out float[B, 1, N, Hv], new state). Equals the causal `linear_attention` row.
  """
  rotary = RotaryConfig.of(rotary, theta=theta, layout=layout, rotary_dim=rotary_dim, scaling=scaling)
  if use_rope:
    _refuse_recurrent(rotary, "linear_attention_step")
  kw = dict(q_positions=positions, k_positions=positions) if use_rope else {}
  return linear_attention(q, k, v, feature_map=feature_map, causal=True, rotary=rotary, projection=projection,
                          eps=eps, initial_state=state, return_state=True, chunk_size=1, **kw)


def _refuse_recurrent(rotary: RotaryConfig, what: str) -> None:
  """Linear attention's recurrent state sums keys already rotated; a length-dependent scaling
  would need every one of them rotated again as the sequence grows, which the state cannot do."""
  scaling = cast(Mapping[str, Any], rotary.scaling_dict)  # read only when length_dependent: then a scaling
  if rotary.length_dependent:
    raise ValueError(
        f"{what}: rope_type {dict(scaling).get('rope_type', dict(scaling).get('type'))!r} rotates every key "
        "by the current sequence length, but linear attention's recurrent state holds keys already "
        "rotated and cannot rotate them again. Use a model's decode_step (it rebuilds the state "
        "from its tokens when the frequencies change), a length-independent scaling (linear, yarn, "
        "llama3), or the full forward.")


__all__ = ["FEATURE_MAPS", "LinearAttentionState", "elu_feature_map", "favor_feature_map", "favor_projection",
           "init_linear_state", "linear_attention", "linear_attention_step"]
