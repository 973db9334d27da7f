"""Exact softmax attention in O(T + S) memory: online softmax over key blocks.

Rabe & Staats (2021) showed that softmax attention needs no T x S tensor: scan the keys in
blocks, keep a running max m, normaliser l and weighted sum per query, and rescale them as
each block arrives (FlashAttention's "online softmax"). The backward pass recomputes each
block's probabilities from the saved log-sum-exp instead of storing them (FlashAttention-2,
Dao 2023, Algorithm 2), so neither pass holds more than one [B, N, block_q, block_k] tile.

`chunked_attention` is the pure function; `roformer_jax.attention.dot_product_attention`
calls it for `implementation="chunked"`. It is written with `jax.lax.scan` and a
`jax.custom_vjp`, not a Pallas kernel, so that it runs on CPU, GPU and TPU alike: the
point is memory and portability, and XLA fuses each tile's einsums. `jax.checkpoint` per
block was the alternative; it still keeps each block's [B, N, bq, S] logits row for the
backward pass of the scan, which is O(T x S) again.

Masks come factored (`masks.MaskFactors`): padding, packed segment ids, causal slot indices
and a sliding window over them. A [block_q, block_k] tile is built from them when it is
needed, and a tile that the factors prove empty (above the causal diagonal, outside the
window, all-padding keys, disjoint segment ranges) is never visited: for each query tile the
forward pass loops over the list of its live key tiles only (a `fori_loop` of dynamic length
over the live tiles, in ascending order), and the backward pass over each key tile's live
query tiles. This is what makes causal attention about twice as fast as its dense
equivalent at long lengths, and a window of W keys cost O(T x W) instead of O(T^2 / 2).

A query row with no key to attend to (e.g. a padding query in a packed row) gets 0, never
NaN; the dense XLA path returns the mean of the values there. No loss weights such rows.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.attention.masks import MaskFactors, window_allows

DEFAULT_BLOCK_Q = 256  # 256 x 256 tiles: the fastest forward+backward on CPU (docs/benchmarks.md, B8)
DEFAULT_BLOCK_K = 256


def chunked_attention(q, k, v, *, mask: MaskFactors | None = None, scale: float | None = None,
                      dropout_rate: float = 0.0, dropout_rng: jax.Array | None = None,
                      block_q: int = DEFAULT_BLOCK_Q, block_k: int = DEFAULT_BLOCK_K) -> jax.Array:
  """Exact softmax attention, blockwise: no [T, S] tensor in the forward or backward pass.

  Inputs are already rotated (RoPE is applied by the caller). Logits, the softmax statistics
  and the accumulator are float32 whatever the input dtype; probabilities meet v in v's dtype,
  as in the dense path.

  Args:
    q: float[B, T, N, H]; k: float[B, S, K, H] (K divides N); v: float[B, S, K, Hv].
    mask: `MaskFactors` (see `mask_factors`), or None.
    scale: logit scale, default 1/sqrt(H).
    dropout_rate, dropout_rng: attention-probability dropout. Tile (i, j) draws its keep mask
      from fold_in(fold_in(rng, i), j): reproducible for a seed and the same block sizes.
    block_q, block_k: tile sizes; T and S need not be multiples (they are padded).

  A window (`mask.window`, see `masks.MaskFactors`) is exact like every other factor: tiles
  wholly outside it are not visited, so its cost grows as T x (W + block sizes), not T x S.

  Returns:
    float[B, T, N, Hv] in q's dtype; 0 for a query row that may attend to no key.
  """
  b, t, n, h = q.shape
  s, kh = k.shape[1], k.shape[2]
  if n % kh:
    raise ValueError(f"{n} query heads are not a multiple of {kh} key/value heads.")
  if n != kh:
    k, v = jnp.repeat(k, n // kh, axis=2), jnp.repeat(v, n // kh, axis=2)
  if block_q < 1 or block_k < 1:
    raise ValueError(f"block sizes must be positive, got block_q={block_q}, block_k={block_k}.")
  scale = 1.0 / (h ** 0.5) if scale is None else float(scale)
  bq, bk = min(block_q, t), min(block_k, s)
  pt, ps = -t % bq, -s % bk
  f = mask if mask is not None else MaskFactors()
  if ps and f.kv_valid is None:
    f = dataclasses.replace(f, kv_valid=jnp.ones((b, s), bool))
  f = _pad_factors(f, pt, ps)
  pad = lambda x, p: jnp.pad(x, [(0, 0), (0, p), (0, 0), (0, 0)]) if p else x
  rate = float(dropout_rate) if dropout_rng is not None else 0.0
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"dropout_rate={dropout_rate} must be in [0, 1).")
  # The key's PRNG (threefry, rbg, unsafe_rbg: config.dropout_rng) travels beside its raw data,
  # which alone cannot tell rbg from unsafe_rbg; raw uint32 data is the default PRNG's.
  key, impl = None, None
  if rate and dropout_rng is not None:  # a rate: an rng
    key = dropout_rng
    if jnp.issubdtype(dropout_rng.dtype, jax.dtypes.prng_key):
      key, impl = jax.random.key_data(dropout_rng), jax.random.key_impl(dropout_rng)
  out = _attention(pad(q, pt), pad(k, ps), pad(v, ps), f, key, scale, bq, bk, rate, impl)
  return out[:, :t]


def _pad_factors(f: MaskFactors, pt: int, ps: int) -> MaskFactors:
  """Factors padded to the tile multiples. Padding keys are invalid (kv_valid False, which the
  caller sets) and padding queries are cut from the output, so their slot indices only decide
  which tiles are visited: repeating the last slot keeps each tile's index range that of its
  real tokens (a -1 or int32-max pad would stretch the last tiles' ranges over the whole row
  and defeat the window's skipping)."""
  def p(x, n, value):
    return x if (x is None or not n) else jnp.pad(x, [(0, 0), (0, n)], constant_values=value)
  def edge(x, n):
    return x if (x is None or not n) else jnp.pad(x, [(0, 0), (0, n)], mode="edge")
  return MaskFactors(p(f.q_valid, pt, False), p(f.kv_valid, ps, False), p(f.q_segment_ids, pt, -1),
                     p(f.kv_segment_ids, ps, -2), edge(f.q_index, pt), edge(f.kv_index, ps), f.causal, f.window)


def _blocks(x, size):
  """[B, L] -> [L / size, B, size]."""
  return None if x is None else jnp.moveaxis(x.reshape(x.shape[0], -1, size), 1, 0)


def live_blocks(f: MaskFactors, t: int, s: int, bq: int, bk: int) -> jax.Array:
  """bool[T / bq, S / bk]: False where the factors prove a tile has no allowed (q, k) pair.

  Sound, not complete: a tile marked live may still be empty (then it is computed and
  contributes nothing). Checks, per batch row: causal (every query slot before every key
  slot), the window (every key slot too far from every query slot: min q - max k >= W for a
  causal window, beyond W // 2 on either side for a bidirectional one), all-padding keys or
  queries, and disjoint segment-id ranges.
  """
  nq, nk = t // bq, s // bk
  dead = jnp.zeros((nq, nk), bool)

  def per_row(x, reduce):  # [n, B, size] -> [n, B]
    return reduce(x, axis=-1)

  if f.causal or f.window is not None:
    qmin, qmax = per_row(_blocks(f.q_index, bq), jnp.min), per_row(_blocks(f.q_index, bq), jnp.max)   # [nq, B]
    kmin, kmax = per_row(_blocks(f.kv_index, bk), jnp.min), per_row(_blocks(f.kv_index, bk), jnp.max)  # [nk, B]
  if f.causal:
    dead |= jnp.all(qmax[:, None, :] < kmin[None, :, :], axis=-1)
  if f.window is not None:
    w = f.window
    if f.causal:  # allowed: q - k < W
      far = qmin[:, None, :] - kmax[None, :, :] >= w
    else:  # allowed: |q - k| <= W // 2
      far = (qmin[:, None, :] - kmax[None, :, :] > w // 2) | (kmin[None, :, :] - qmax[:, None, :] > w // 2)
    dead |= jnp.all(far, axis=-1)
  if f.kv_valid is not None:
    dead |= ~jnp.any(_blocks(f.kv_valid, bk), axis=(1, 2))[None, :]
  if f.q_valid is not None:
    dead |= ~jnp.any(_blocks(f.q_valid, bq), axis=(1, 2))[:, None]
  if f.q_segment_ids is not None:
    qs, ks = _blocks(f.q_segment_ids, bq), _blocks(f.kv_segment_ids, bk)
    qlo, qhi = per_row(qs, jnp.min), per_row(qs, jnp.max)
    klo, khi = per_row(ks, jnp.min), per_row(ks, jnp.max)
    dead |= jnp.all((qhi[:, None] < klo[None, :]) | (qlo[:, None] > khi[None, :]), axis=-1)
  return ~dead


def _tile_mask(f: MaskFactors, i, j, bq: int, bk: int):
  """bool[B, 1, bq, bk] for tile (i, j), or None if nothing is masked."""
  qs = lambda x: jax.lax.dynamic_slice_in_dim(x, i * bq, bq, axis=1)
  ks = lambda x: jax.lax.dynamic_slice_in_dim(x, j * bk, bk, axis=1)
  m = []
  if f.kv_valid is not None:
    m.append(ks(f.kv_valid)[:, None, None, :])
  if f.q_valid is not None:
    m.append(qs(f.q_valid)[:, None, :, None])
  if f.q_segment_ids is not None:
    m.append(qs(f.q_segment_ids)[:, None, :, None] == ks(f.kv_segment_ids)[:, None, None, :])
  if f.causal or f.window is not None:
    qi, ki = qs(f.q_index)[:, None, :, None], ks(f.kv_index)[:, None, None, :]
    if f.causal:
      m.append(qi >= ki)
    if f.window is not None:
      m.append(window_allows(qi, ki, f.window, causal=f.causal))
  return functools.reduce(jnp.logical_and, m) if m else None


def _keep(key, i, j, rate, shape, impl=None):
  """Dropout keep mask of tile (i, j), scaled: keep / (1 - rate). `impl`: the key data's PRNG."""
  kk = jax.random.fold_in(jax.random.fold_in(jax.random.wrap_key_data(key, impl=impl), i), j)
  return jax.random.bernoulli(kk, 1.0 - rate, shape).astype(jnp.float32) / (1.0 - rate)


def dropout_keep_mask(key, t: int, s: int, batch: int, heads: int, rate: float, block_q: int = DEFAULT_BLOCK_Q,
                      block_k: int = DEFAULT_BLOCK_K) -> jax.Array:
  """The scaled keep mask float32[B, N, T, S] that `chunked_attention` applies (for tests)."""
  bq, bk = min(block_q, t), min(block_k, s)
  nq, nk = -(-t // bq), -(-s // bk)
  impl = jax.random.key_impl(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else None
  key = jax.random.key_data(key) if impl is not None else key
  rows = [jnp.concatenate([_keep(key, i, j, rate, (batch, heads, bq, bk), impl) for j in range(nk)], -1)
          for i in range(nq)]
  return jnp.concatenate(rows, -2)[:, :, :t, :s]


def _slice(x, i, size, axis):
  return jax.lax.dynamic_slice_in_dim(x, i * size, size, axis=axis)


def _over_live(live_row, body, init):
  """body(j, carry) for each j with live_row[j], in ascending order; the dead tiles are never visited.

  A `fori_loop` of dynamic length over the live indices (stably sorted to the front), so a
  tile outside the window or above the diagonal costs nothing at all, not even a loop
  iteration. Its length is traced, so it lowers to a while loop: fine here, as the custom VJP
  differentiates by hand.
  """
  order = jnp.argsort(~live_row, stable=True).astype(jnp.int32)
  count = jnp.sum(live_row, dtype=jnp.int32)
  return jax.lax.fori_loop(0, count, lambda c, carry: body(order[c], carry), init)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8, 9))
def _attention(q, k, v, f, key, scale, bq, bk, rate, impl):
  return _forward(q, k, v, f, key, scale, bq, bk, rate, impl)[0]


def _forward(q, k, v, f, key, scale, bq, bk, rate, impl):
  b, t, n, _ = q.shape
  s, hv = k.shape[1], v.shape[-1]
  nq = t // bq
  live = live_blocks(f, t, s, bq, bk)

  def q_step(_, i):
    qi = _slice(q, i, bq, 1)

    def kv_step(j, carry):
      m, l, acc = carry
      kj, vj = _slice(k, j, bk, 1), _slice(v, j, bk, 1)
      logits = jnp.einsum("bqnh,bknh->bnqk", qi, kj, preferred_element_type=jnp.float32) * scale
      tile = _tile_mask(f, i, j, bq, bk)
      if tile is not None:
        logits = jnp.where(tile, logits, -jnp.inf)
      m_new = jnp.maximum(m, jnp.max(logits, axis=-1))
      m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
      p = jnp.exp(logits - m_safe[..., None])
      corr = jnp.exp(m - m_safe)
      l = l * corr + jnp.sum(p, axis=-1)
      if rate:
        p = p * _keep(key, i, j, rate, p.shape, impl)
      pv = jnp.einsum("bnqk,bknh->bnqh", p.astype(v.dtype), vj, preferred_element_type=jnp.float32)
      return m_new, l, acc * corr[..., None] + pv

    init = (jnp.full((b, n, bq), -jnp.inf, jnp.float32), jnp.zeros((b, n, bq), jnp.float32),
            jnp.zeros((b, n, bq, hv), jnp.float32))
    m, l, acc = _over_live(live[i], kv_step, init)
    ok = l > 0
    out = jnp.where(ok[..., None], acc / jnp.where(ok, l, 1.0)[..., None], 0.0)
    lse = jnp.where(ok, m + jnp.log(jnp.where(ok, l, 1.0)), jnp.inf)  # +inf: p = exp(s - lse) = 0
    return None, (jnp.transpose(out, (0, 2, 1, 3)).astype(q.dtype), lse)

  _, (out, lse) = jax.lax.scan(q_step, None, jnp.arange(nq))
  out = jnp.moveaxis(out, 0, 1).reshape(b, t, n, hv)
  return out, lse  # lse: float32[nq, B, N, bq]


def _attention_fwd(q, k, v, f, key, scale, bq, bk, rate, impl):
  out, lse = _forward(q, k, v, f, key, scale, bq, bk, rate, impl)
  return out, (q, k, v, f, key, out, lse)


def _attention_bwd(scale, bq, bk, rate, impl, res, dout):
  q, k, v, f, key, out, lse = res
  b, t, n, h = q.shape
  s = k.shape[1]
  nq, nk = t // bq, s // bk
  live = live_blocks(f, t, s, bq, bk)
  # D_i = rowsum(dO_i * O_i) = sum_j P_ij dP_ij (with dropout too): float32[nq, B, N, bq].
  d = jnp.sum(dout.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)        # [B, T, N]
  d = jnp.moveaxis(jnp.transpose(d, (0, 2, 1)).reshape(b, n, nq, bq), 2, 0)

  def kv_step(dq, j):
    kj, vj = _slice(k, j, bk, 1), _slice(v, j, bk, 1)

    def q_step(i, carry):
      dq, dk, dv = carry
      qi, doi = _slice(q, i, bq, 1), _slice(dout, i, bq, 1)
      logits = jnp.einsum("bqnh,bknh->bnqk", qi, kj, preferred_element_type=jnp.float32) * scale
      p = jnp.exp(logits - lse[i][..., None])
      tile = _tile_mask(f, i, j, bq, bk)
      if tile is not None:
        p = jnp.where(tile, p, 0.0)
      dp = jnp.einsum("bqnh,bknh->bnqk", doi, vj, preferred_element_type=jnp.float32)
      if rate:
        keep = _keep(key, i, j, rate, p.shape, impl)
        pd, dp = p * keep, dp * keep
      else:
        pd = p
      dv = dv + jnp.einsum("bnqk,bqnh->bknh", pd.astype(dout.dtype), doi, preferred_element_type=jnp.float32)
      ds = p * (dp - d[i][..., None]) * scale
      dqi = jnp.einsum("bnqk,bknh->bqnh", ds, kj.astype(jnp.float32))
      dq = jax.lax.dynamic_update_slice_in_dim(dq, _slice(dq, i, bq, 1) + dqi, i * bq, axis=1)
      dk = dk + jnp.einsum("bnqk,bqnh->bknh", ds, qi.astype(jnp.float32))
      return dq, dk, dv

    init = (dq, jnp.zeros(kj.shape, jnp.float32), jnp.zeros(vj.shape, jnp.float32))
    dq, dk, dv = _over_live(live[:, j], q_step, init)
    return dq, (dk, dv)

  dq, (dk, dv) = jax.lax.scan(kv_step, jnp.zeros(q.shape, jnp.float32), jnp.arange(nk))
  dk = jnp.moveaxis(dk, 0, 1).reshape(k.shape)
  dv = jnp.moveaxis(dv, 0, 1).reshape(v.shape)
  zeros = jax.tree.map(_zero_cotangent, f)
  return (dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), zeros,
          None if key is None else _zero_cotangent(key))


def _zero_cotangent(x):
  return None if x is None else np.zeros(x.shape, jax.dtypes.float0)


_attention.defvjp(_attention_fwd, _attention_bwd)

__all__ = ["DEFAULT_BLOCK_K", "DEFAULT_BLOCK_Q", "chunked_attention", "dropout_keep_mask", "live_blocks"]
