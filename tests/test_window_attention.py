"""Sliding-window (local) attention in the kernels: masks, the chunked kernel, the dense
paths and the context-parallel wrapper, against float64 NumPy with an explicit window mask.

A window W lets query slot i see key slot j iff i - W < j <= i (causal: Mistral, Gemma) or
|i - j| <= W // 2 (bidirectional: ModernBERT's local_attention=128 is 64 each side). The
slots are the causal mask's q_index / kv_index, so padding and packing compose with it.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roformer_jax import attention as attn
from roformer_jax import context_parallel as cp
from roformer_jax import mesh as mesh_lib
from roformer_jax.attention import chunked as chunked_mod
from roformer_jax.attention.chunked import chunked_attention, live_blocks
from roformer_jax.attention.masks import MaskFactors, check_window, make_attention_mask, mask_factors
from roformer_jax.attention.sharded import context_parallel_attention
from tests import attention_reference as aref


def _rand(rng, shape):
  return rng.normal(size=shape).astype(np.float32)


def _close(actual, expected, rtol=1e-5, floor=0.1):
  """|a - e| <= rtol * max(max|e|, floor), as tests/test_chunked_attention.py measures."""
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  scale = max(np.abs(expected).max(), floor)
  err = np.abs(actual - expected).max() / scale
  assert err <= rtol, f"relative error {err:.2e} > {rtol:.0e}"


def window64(q_index, kv_index, window, causal):
  """bool[B, T, S], written from the definition: j in (i - W, i] or |i - j| <= W // 2."""
  qi = np.asarray(q_index)[:, :, None].astype(np.int64)
  ki = np.asarray(kv_index)[:, None, :].astype(np.int64)
  if causal:
    return (ki <= qi) & (ki > qi - window)
  return np.abs(qi - ki) <= window // 2


def allowed64(b, t, s, *, window, causal, valid=None, seg=None, q_index=None, kv_index=None):
  """The full float64 reference mask: window (and causality), padding keys, packed segments."""
  qi = np.broadcast_to(np.arange(t) if q_index is None else q_index, (b, t))
  ki = np.broadcast_to(np.arange(s) if kv_index is None else kv_index, (b, s))
  a = np.ones((b, t, s), bool)
  if window is not None:
    a &= window64(qi, ki, window, causal)
  elif causal:
    a &= ki[:, None, :] <= qi[:, :, None]
  if valid is not None:
    a &= valid[:, None, :]
  if seg is not None:
    a &= seg[:, :, None] == seg[:, None, :]
  return a


def grads64(q, k, v, allowed, ct):
  """float64 (dq, dk, dv) of sum(softmax attention * ct); rows with no allowed key give 0."""
  q, k, v, ct = (np.asarray(x, np.float64) for x in (q, k, v, ct))
  n, kh = q.shape[2], k.shape[2]
  kr, vr = np.repeat(k, n // kh, axis=2), np.repeat(v, n // kh, axis=2)
  scale = 1.0 / np.sqrt(q.shape[-1])
  logits = np.einsum("btnh,bsnh->bnts", q, kr) * scale
  a = np.broadcast_to(allowed[:, None], logits.shape)
  logits = np.where(a, logits, -np.inf)
  m = np.max(logits, -1, keepdims=True)
  p = np.where(a, np.exp(logits - np.where(np.isfinite(m), m, 0.0)), 0.0)
  p = p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
  dv = np.einsum("bnts,btnh->bsnh", p, ct)
  dp = np.einsum("btnh,bsnh->bnts", ct, vr)
  ds = p * (dp - np.sum(dp * p, -1, keepdims=True)) * scale
  dq = np.einsum("bnts,bsnh->btnh", ds, kr)
  dk = np.einsum("bnts,btnh->bsnh", ds, q)
  fold = lambda x: x.reshape(*x.shape[:2], kh, n // kh, x.shape[-1]).sum(3)
  return dq, fold(dk), fold(dv)


# ---------------------------------------------------------------------- the window's definition


def test_check_window_accepts_positive_ints_and_refuses_the_rest():
  assert check_window(None) is None and check_window(1) == 1 and check_window(np.int64(7)) == 7
  for bad in (0, -3, 2.5, True, "4", np.float32(4.0)):
    with pytest.raises(ValueError, match="positive int"):
      check_window(bad)
  with pytest.raises(ValueError, match="positive int"):
    make_attention_mask(causal=True, q_index=np.arange(4), kv_index=np.arange(4), window=0)
  with pytest.raises(ValueError, match="positive int"):
    mask_factors(1, 4, 4, causal=True, window=-1)
  with pytest.raises(ValueError, match="positive int"):
    MaskFactors(window=1.5)
  q = jnp.ones((1, 4, 1, 8))
  with pytest.raises(ValueError, match="positive int"):
    attn.dot_product_attention(q, q, q, is_causal=True, window=0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [1, 2, 3, 4, 7, 64])
def test_dense_masks_are_the_definition(causal, window):
  t = 11
  idx = np.arange(t)
  expected = window64(idx[None], idx[None], window, causal)[0]
  dense = np.asarray(make_attention_mask(causal=causal, q_index=idx, kv_index=idx, window=window))  # [T, S]
  np.testing.assert_array_equal(dense, expected)
  np.testing.assert_array_equal(np.asarray(mask_factors(1, t, t, causal=causal, window=window).dense())[0, 0],
                                expected)
  if window == 1:  # self only, both ways
    np.testing.assert_array_equal(expected, np.eye(t, dtype=bool))
  if causal:  # the last W keys, itself included
    assert all(expected[i].sum() == min(i + 1, window) for i in range(t))
    assert all(expected[i, max(0, i - window + 1):i + 1].all() for i in range(t))
  else:  # W // 2 on each side: ModernBERT's local_attention=W
    assert expected[t // 2].sum() == min(2 * (window // 2) + 1, t)


def test_window_uses_the_causal_slots_decode_and_lengths():
  # A decode step: one query at cache slot 9 of 16 sees slots 9 - W < j <= 9.
  m = np.asarray(make_attention_mask(causal=True, q_index=np.array([9]), kv_index=np.arange(16), window=4))
  np.testing.assert_array_equal(np.flatnonzero(m[0]), [6, 7, 8, 9])
  # Per-row slots [B, T] (left padding shifts a row's slots).
  qi = np.array([[0, 1, 2, 3], [-2, -1, 0, 1]])
  m = np.asarray(make_attention_mask(causal=True, q_index=qi, kv_index=qi, window=2))
  np.testing.assert_array_equal(m[:, 0], window64(qi, qi, 2, True))
  # A window without indices takes the lengths from the padding arrays, as causal does.
  valid = np.ones((1, 5), bool)
  m = np.asarray(make_attention_mask(kv_valid=valid, q_valid=valid, window=3))
  np.testing.assert_array_equal(m[0, 0], window64(np.arange(5)[None], np.arange(5)[None], 3, False)[0])
  with pytest.raises(ValueError, match="window needs the lengths"):
    make_attention_mask(window=3)
  with pytest.raises(ValueError, match="needs q_index and kv_index"):
    MaskFactors(window=3).dense()


# ---------------------------------------------------------------------- the chunked kernel

# (causal, T, S, window, block_q, block_k): T not a multiple of the tiles; W = 1, smaller and
# larger than a tile, W >= T; bidirectional windows with T != S (cross lengths).
CASES = [
    (True, 37, 37, 1, 8, 5), (True, 37, 37, 3, 8, 8), (True, 37, 37, 6, 8, 5), (True, 37, 37, 13, 8, 5),
    (True, 37, 37, 37, 16, 16), (True, 29, 29, 100, 8, 4), (True, 40, 40, 9, 4, 16),
    (False, 37, 37, 1, 8, 5), (False, 37, 37, 5, 8, 8), (False, 37, 37, 16, 8, 5), (False, 37, 37, 75, 16, 16),
    (False, 23, 31, 8, 8, 5),
]


@pytest.mark.parametrize("causal,t,s,window,block_q,block_k", CASES)
def test_chunked_window_equals_float64_outputs_and_gradients(causal, t, s, window, block_q, block_k):
  """Packing + padding + window, grouped queries: outputs and the three gradients against the
  float64 reference with the explicit window mask, and against the dense XLA path."""
  rng = np.random.default_rng(t * 1000 + window * 10 + causal)
  b, n, kh, h = 2, 4, 2, 8
  q, k, v = _rand(rng, (b, t, n, h)), _rand(rng, (b, s, kh, h)), _rand(rng, (b, s, kh, h))
  valid = rng.random((b, s)) > 0.25
  valid[:, 0] = True
  kw = dict(kv_valid=valid)
  seg = None
  if t == s:  # packed self-attention: three documents per row
    seg = np.sort(rng.integers(1, 4, (b, t)), axis=1).astype(np.int32)
    kw["q_segment_ids"] = seg
  f = mask_factors(b, t, s, causal=causal, window=window, **kw)
  allowed = allowed64(b, t, s, window=window, causal=causal, valid=valid, seg=seg)
  np.testing.assert_array_equal(np.asarray(f.dense())[:, 0], allowed)
  live = allowed.any(-1)  # [B, T]: rows that see a key

  run = jax.jit(lambda q, k, v: chunked_attention(q, k, v, mask=f, block_q=block_q, block_k=block_k))
  out = np.asarray(run(q, k, v))
  assert np.all(out[~live] == 0.0)
  expected = aref.softmax_attention64(q, k, v, allowed=allowed[:, None])
  _close(out[live], expected[live], rtol=2e-6 * max(1, np.sqrt(s)))
  dense = attn.dot_product_attention(q, k, v, mask=f.dense(), implementation="xla")
  _close(out[live], np.asarray(dense)[live])

  ct = _rand(rng, out.shape) * live[:, :, None, None]
  grads = jax.jit(jax.grad(lambda *a: jnp.sum(run(*a) * ct), argnums=(0, 1, 2)))(q, k, v)
  terms = float(np.abs(ct).max() * np.abs(v).max() * max(np.abs(q).max(), np.abs(k).max()))
  for name, g, r in zip("qkv", grads, grads64(q, k, v, allowed, ct), strict=True):
    assert np.all(np.isfinite(g)), name
    _close(g, r, rtol=2e-5, floor=0.1 * terms if name in "qk" else 0.1)


@pytest.mark.parametrize("t,block", [(37, 8), (64, 16)])
def test_a_window_as_long_as_the_row_is_plain_attention(t, block):
  """W >= T: a causal window is causal attention, bit for bit; a bidirectional W >= 2T is no mask."""
  rng = np.random.default_rng(t)
  q, k, v = (_rand(rng, (1, t, 2, 8)) for _ in range(3))
  run = lambda f: np.asarray(chunked_attention(q, k, v, mask=f, block_q=block, block_k=block))
  causal = run(mask_factors(1, t, t, causal=True))
  for w in (t, t + 1, 10 * t):
    np.testing.assert_array_equal(run(mask_factors(1, t, t, causal=True, window=w)), causal)
  # No mask at all builds no tile mask, so XLA fuses differently: equal to float32 rounding.
  _close(run(mask_factors(1, t, t, window=2 * t)), run(None), rtol=1e-6)


def test_live_tiles_are_the_band_and_skipping_is_sound():
  t, bq, bk = 64, 8, 8
  for w in (1, 2, 5, 8, 10, 17):
    live = np.asarray(live_blocks(mask_factors(1, t, t, causal=True, window=w), t, t, bq, bk))
    i, j = np.meshgrid(np.arange(t // bq), np.arange(t // bk), indexing="ij")
    # tile (i, j) holds slots [8i, 8i + 7] x [8j, 8j + 7]: live iff some pair has 0 <= q - k < W.
    band = (j * bk <= i * bq + bq - 1) & (i * bq - (j * bk + bk - 1) < w)
    np.testing.assert_array_equal(live, band)
    assert live.sum() <= (t // bq) * (-(-(w + bq - 1) // bk) + 1)  # O(T x W) tiles, not O(T^2)
  bidir = np.asarray(live_blocks(mask_factors(1, t, t, window=8), t, t, bq, bk))  # 4 each side
  np.testing.assert_array_equal(bidir, np.abs(np.subtract.outer(np.arange(8), np.arange(8))) <= 1)
  # A skipped tile is one the dense mask has no True in (random packing, padding, windows).
  rng = np.random.default_rng(3)
  for _ in range(20):
    causal, w = bool(rng.integers(2)), int(rng.integers(1, 30))
    f = mask_factors(2, 40, 40, kv_valid=rng.random((2, 40)) > 0.5,
                     q_segment_ids=np.sort(rng.integers(0, 5, (2, 40)), 1), causal=causal, window=w)
    live = np.asarray(live_blocks(f, 40, 40, 8, 8))
    dense = np.asarray(f.dense())[:, 0].reshape(2, 5, 8, 5, 8).any(axis=(0, 2, 4))
    assert np.all(live >= dense)


def test_padding_to_the_tiles_keeps_the_band():
  """T = 1000 with 256-tiles pads 24 slots; the padded factors repeat the last slot, so the
  last query tile still visits only the key tiles its window reaches (a -1 pad would make
  it visit every key tile)."""
  t, w = 1000, 64
  f = chunked_mod._pad_factors(mask_factors(1, t, t, causal=True, window=w, kv_valid=np.ones((1, t), bool)), 24, 24)
  live = np.asarray(live_blocks(f, 1024, 1024, 256, 256))
  np.testing.assert_array_equal(live, np.eye(4, dtype=bool) | np.eye(4, k=-1, dtype=bool))


def test_the_kernel_visits_only_the_live_tiles():
  """`_over_live` runs its body once per live index, in ascending order, and never for a dead one."""
  seen = []

  def body(j, carry):
    jax.debug.callback(lambda j: seen.append(int(j)), j, ordered=True)
    return carry + j

  row = jnp.asarray([False, True, True, False, False, True, False])
  total = jax.jit(lambda r: chunked_mod._over_live(r, body, jnp.int32(0)))(row)
  jax.effects_barrier()
  assert seen == [1, 2, 5] and int(total) == 8
  seen.clear()
  assert int(chunked_mod._over_live(jnp.zeros(5, bool), body, jnp.int32(0))) == 0 and seen == []


# ---------------------------------------------------------------------- dot_product_attention


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("path", ["xla", "chunked", "dropout-path", "value-dim"])
def test_dot_product_attention_window_on_every_path(causal, path):
  """window= on each path (jax.nn's local_window_size, the chunked kernel, the explicit
  dropout / Hv != H path) equals the float64 reference, RoPE included."""
  rng = np.random.default_rng(11)
  b, t, n, h = 2, 21, 2, 8
  hv = 12 if path == "value-dim" else h
  q, k, v = _rand(rng, (b, t, n, h)), _rand(rng, (b, t, n, h)), _rand(rng, (b, t, n, hv))
  pos = np.arange(t)
  w = 5
  kw = dict(q_positions=pos, k_positions=pos, is_causal=causal, window=w,
            implementation="chunked" if path == "chunked" else "xla")
  if path == "dropout-path":  # a rate with keep probability ~1: the explicit path, nothing dropped
    kw.update(dropout_rate=1e-30, dropout_rng=jax.random.key(0))
  out = attn.dot_product_attention(q, k, v, **kw)
  allowed = allowed64(b, t, t, window=w, causal=causal)
  expected = aref.softmax_attention64(q, k, v, q_positions=pos, k_positions=pos, allowed=allowed[:, None])
  _close(out, expected, rtol=5e-6)


def test_dot_product_attention_window_with_mask_factors():
  rng = np.random.default_rng(12)
  b, t, n, h = 2, 19, 2, 8
  q, k, v = (_rand(rng, (b, t, n, h)) for _ in range(3))
  valid = rng.random((b, t)) > 0.2
  valid[:, 0] = True
  allowed = allowed64(b, t, t, window=4, causal=True, valid=valid)
  expected = aref.softmax_attention64(q, k, v, allowed=allowed[:, None])
  live = allowed.any(-1)
  for impl in ("xla", "chunked"):
    # the window as an argument, the causality from is_causal: a causal window of 4 keys
    out = attn.dot_product_attention(q, k, v, mask=mask_factors(b, t, t, kv_valid=valid), is_causal=True, window=4,
                                     implementation=impl)
    _close(np.asarray(out)[live], expected[live])
    # the window in the factors, the same call
    f = mask_factors(b, t, t, kv_valid=valid, causal=True, window=4)
    out = attn.dot_product_attention(q, k, v, mask=f, window=4, implementation=impl)
    _close(np.asarray(out)[live], expected[live])
  with pytest.raises(ValueError, match="carry window=4"):
    attn.dot_product_attention(q, k, v, mask=f, window=5)


def test_dense_mask_and_window_argument_combine():
  rng = np.random.default_rng(13)
  b, t, n, h = 1, 16, 2, 8
  q, k, v = (_rand(rng, (b, t, n, h)) for _ in range(3))
  seg = np.repeat(np.array([[1, 2]]), 8, axis=1)
  mask = make_attention_mask(q_segment_ids=seg)
  out = attn.dot_product_attention(q, k, v, mask=mask, is_causal=True, window=3, implementation="xla")
  allowed = allowed64(b, t, t, window=3, causal=True, seg=seg)
  _close(out, aref.softmax_attention64(q, k, v, allowed=allowed[:, None]))


# ---------------------------------------------------------------------- context parallelism


@pytest.fixture(scope="module")
def mesh():
  return mesh_lib.make_mesh({"data": 2, "context": 4})


@pytest.mark.parametrize("impl", ["chunked", "xla"])
@pytest.mark.parametrize("causal,window", [(True, 1), (True, 5), (True, 12), (False, 7)])
def test_context_parallel_window_equals_one_device(mesh, impl, causal, window):
  """Zig-zag causal (or contiguous bidirectional) shards over context=4, packing + padding +
  window, global slots in the factors: outputs and gradients equal one device's."""
  b, t, n, h, c = 2, 32, 4, 8, 4
  rng = np.random.default_rng(window + 100 * causal)
  q, k, v = (_rand(rng, (b, t, n, h)) for _ in range(3))
  seg = np.sort(rng.integers(1, 3, (b, t)), axis=1).astype(np.int32)
  valid = rng.random((b, t)) > 0.2
  valid[:, 0] = True
  order = cp.zigzag_order(t, c) if causal else np.arange(t, dtype=np.int32)
  inverse = np.argsort(order)
  slots = np.broadcast_to(order, (b, t))
  kernel = functools.partial(attn.dot_product_attention, implementation=impl)
  ct = _rand(rng, (b, t, n, h))

  def one_device(q, k, v):
    f = mask_factors(b, t, t, kv_valid=valid, q_segment_ids=seg, causal=causal, window=window)
    return kernel(q, k, v, mask=f)

  def sharded(q, k, v):
    perm = lambda x: jnp.take(x, order, axis=1)
    f = mask_factors(b, t, t, kv_valid=valid[:, order], q_segment_ids=seg[:, order], causal=causal, window=window,
                     q_index=slots, kv_index=slots)
    out = context_parallel_attention(kernel, perm(q), perm(k), perm(v), mask=f)
    return jnp.take(out, inverse, axis=1)

  loss = lambda fn: jax.jit(jax.value_and_grad(lambda q, k, v: jnp.sum(fn(q, k, v) * ct), argnums=(0, 1, 2)))
  ref_out = np.asarray(jax.jit(one_device)(q, k, v))
  ref_loss, ref_grads = loss(one_device)(q, k, v)
  with jax.set_mesh(mesh):
    out = np.asarray(jax.jit(sharded)(q, k, v))
    value, grads = loss(sharded)(q, k, v)
  allowed = allowed64(b, t, t, window=window, causal=causal, valid=valid, seg=seg)
  live = allowed.any(-1)
  expected = aref.softmax_attention64(q, k, v, allowed=allowed[:, None])
  _close(ref_out[live], expected[live])
  _close(out[live], ref_out[live])
  np.testing.assert_allclose(float(value), float(ref_loss), rtol=1e-5)
  for _name, g, r in zip("qkv", grads, ref_grads, strict=True):
    _close(g, r, rtol=2e-5, floor=1.0)


def test_context_parallel_window_rides_in_the_mask_factors(mesh):
  """The wrapper gathers the key-side factors and keeps the (static) window: each device's
  kernel sees the window and the gathered global key slots."""
  seen = []

  def kernel(q, k, v, mask=None, **kw):
    seen.append((mask.window, mask.causal, mask.kv_index.shape[1], q.shape[1]))
    return attn.dot_product_attention(q, k, v, mask=mask, **kw)

  b, t = 2, 16
  x = jnp.ones((b, t, 4, 8))
  slots = np.broadcast_to(cp.zigzag_order(t, 4), (b, t))
  f = mask_factors(b, t, t, causal=True, window=3, q_index=slots, kv_index=slots)
  with jax.set_mesh(mesh):
    jax.jit(lambda x: context_parallel_attention(kernel, x, x, x, mask=f))(x)
  assert set(seen) == {(3, True, t, t // 4)}


def test_context_parallel_window_argument(mesh):
  """`window=` on the wrapper: a bidirectional row without factors gets its global slots
  0..T-1 (not each shard's local ones) and equals one device; a causal row must bring its
  zig-zag slots; two different windows are refused."""
  b, t = 2, 32
  rng = np.random.default_rng(5)
  q, k, v = (_rand(rng, (b, t, 4, 8)) for _ in range(3))
  kernel = functools.partial(attn.dot_product_attention, implementation="chunked")
  with jax.set_mesh(mesh):
    out = jax.jit(lambda q, k, v: context_parallel_attention(kernel, q, k, v, window=6))(q, k, v)
  allowed = allowed64(b, t, t, window=6, causal=False)
  _close(out, aref.softmax_attention64(q, k, v, allowed=allowed[:, None]))
  with jax.set_mesh(mesh), pytest.raises(ValueError, match="zig-zag"):
    context_parallel_attention(kernel, q, k, v, mask=MaskFactors(causal=True), window=6)
  with jax.set_mesh(mesh), pytest.raises(ValueError, match="carry window=3"):
    context_parallel_attention(kernel, q, k, v, mask=mask_factors(b, t, t, window=3), window=6)
