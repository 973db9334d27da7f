"""Chunked (online-softmax) attention: exact against the dense path and float64 NumPy.

The property sweep draws shapes, masks and tile sizes that do not divide the lengths, and
checks outputs and all three gradients against `dot_product_attention`'s dense XLA path
(1e-5 relative) and outputs against the float64 reference of tests/attention_reference.py.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import HealthCheck, given, settings, strategies as st

from roformer_jax import attention as attn
from roformer_jax import models as M
from roformer_jax.attention.chunked import chunked_attention, dropout_keep_mask, live_blocks
from roformer_jax.attention.masks import mask_factors
from tests import attention_reference as aref
from tests.test_attention import _quadratic_avals


def _rand(rng, shape, dtype=np.float32):
  return rng.normal(size=shape).astype(dtype)


def _close(actual, expected, rtol=1e-5, floor=0.1):
  """Relative to the tensor's scale: |a - e| <= rtol * max(max|e|, floor) everywhere."""
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  if not expected.size:
    return
  # A tensor that is zero in exact arithmetic (dq and dk with a single key) holds only the
  # rounding of the terms it sums; `floor` is their scale.
  scale = max(np.abs(expected).max(), floor)
  if scale == 0:  # nothing to compare against (e.g. no query may see any key: every gradient is 0)
    assert np.array_equal(actual, expected), "expected exact zeros"
    return
  err = np.abs(actual - expected).max() / scale
  assert err <= rtol, f"relative error {err:.2e} > {rtol:.0e}"


def _segments(rng, b, t, n):
  return np.sort(rng.integers(0, n, (b, t)), axis=1).astype(np.int32)


def _case(rng, *, t, s, b, n, kh, h, kind):
  """q, k, v and the mask factors of one drawn case; `kind` picks which factors are set."""
  q, k, v = _rand(rng, (b, t, n, h)), _rand(rng, (b, s, kh, h)), _rand(rng, (b, s, kh, h))
  kw = {}
  if kind in ("padding", "all", "cross"):
    valid = rng.random((b, s)) > 0.3
    valid[:, 0] = True
    kw["kv_valid"] = valid
  if kind in ("segments", "all"):
    seg = _segments(rng, b, t, 4)
    kw["q_segment_ids"] = seg
  if kind == "cross":  # packed source/target pairs: segments on both sides, no causality
    kw["q_segment_ids"], kw["kv_segment_ids"] = _segments(rng, b, t, 3), _segments(rng, b, s, 3)
  if kind in ("causal", "all"):
    kw["causal"] = True
  return q, k, v, mask_factors(b, t, s, **kw)


def _dense(q, k, v, f, **kw):
  return attn.dot_product_attention(q, k, v, mask=f.dense(), implementation="xla", **kw)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), t=st.integers(1, 33), s_extra=st.integers(-10, 10), b=st.integers(1, 2),
       heads=st.sampled_from([(1, 1), (2, 2), (4, 2)]), h=st.sampled_from([4, 8]),
       kind=st.sampled_from(["none", "padding", "causal", "segments", "all", "cross"]),
       block_q=st.integers(1, 17), block_k=st.integers(1, 17))
def test_chunked_equals_dense_outputs_and_gradients(seed, t, s_extra, b, heads, h, kind, block_q, block_k):
  rng = np.random.default_rng(seed)
  s = max(1, t + s_extra) if kind in ("none", "padding", "cross") else t
  n, kh = heads
  q, k, v, f = _case(rng, t=t, s=s, b=b, n=n, kh=kh, h=h, kind=kind)
  live = np.asarray(f.dense() if f.dense() is not None else np.ones((b, 1, t, s), bool))
  live = np.broadcast_to(live, (b, 1, t, s)).any(-1)[:, 0]  # [B, T]: rows that see a key
  chunked = jax.jit(lambda q, k, v: chunked_attention(q, k, v, mask=f, block_q=block_q, block_k=block_k))
  out = chunked(q, k, v)
  chex.assert_shape(out, (b, t, n, h))
  assert np.all(np.asarray(out)[~live] == 0.0)  # a row with no key gets 0, not NaN
  dense = _dense(q, k, v, f)
  _close(np.asarray(out)[live], np.asarray(dense)[live])
  allowed = np.broadcast_to(np.asarray(f.dense()), (b, 1, t, s)) if f.dense() is not None else None
  expected = aref.softmax_attention64(q, k, v, allowed=allowed)
  _close(np.asarray(out)[live], expected[live], rtol=2e-6 * max(1, np.sqrt(s)))
  ct = _rand(rng, out.shape) * live[:, :, None, None]
  grads = jax.jit(jax.grad(lambda *a: jnp.sum(chunked(*a) * ct), argnums=(0, 1, 2)))(q, k, v)
  dense_grads = jax.jit(jax.grad(lambda *a: jnp.sum(_dense(*a, f) * ct), argnums=(0, 1, 2)))(q, k, v)
  # dq and dk sum p_j (dp_j - sum_i p_i dp_i) k_j (or q): with one key they are 0 exactly, but
  # float32 leaves the rounding of terms as large as |ct| |v| |k| (about 20 in the sweep),
  # and the two paths round differently: 1e-6 seen, 5e-8 of the terms. A tenth of that scale
  # is the floor: 18x the rounding seen, while a real error, of the order of the terms,
  # still fails by orders of magnitude. (With the old fixed floor 0.1 such a case failed at
  # 1.05e-5 against 1e-5.)
  terms = float(np.abs(ct).max() * np.abs(v).max() * max(np.abs(q).max(), np.abs(k).max()))
  for name, g, r in zip("qkv", grads, dense_grads, strict=True):
    assert np.all(np.isfinite(g)), name
    _close(g, r, floor=0.1 * terms if name in "qk" else 0.1)


def test_fully_masked_rows_are_zero_with_finite_gradients():
  rng = np.random.default_rng(0)
  b, t, n, h = 1, 12, 2, 8
  q, k, v = (_rand(rng, (b, t, n, h)) for _ in range(3))
  seg = np.array([[1] * 6 + [0] * 6], np.int32)  # the padding segment 0 has no valid key
  f = mask_factors(b, t, t, kv_valid=seg != 0, q_segment_ids=seg, causal=True)
  out, grads = jax.value_and_grad(lambda q, k, v: jnp.sum(chunked_attention(q, k, v, mask=f, block_q=4, block_k=4)),
                                  argnums=(0, 1, 2))(q, k, v)
  per_row = np.asarray(chunked_attention(q, k, v, mask=f, block_q=4, block_k=4))
  assert np.all(per_row[0, 6:] == 0.0) and np.all(np.abs(per_row[0, :6]) > 0)
  assert np.isfinite(out) and all(np.all(np.isfinite(g)) for g in grads)


@pytest.mark.parametrize("impl", ["threefry2x32", "unsafe_rbg"])  # config.dropout_rng's PRNGs
def test_dropout_is_the_documented_per_tile_mask_and_reproducible(impl):
  rng = np.random.default_rng(1)
  b, t, n, h, rate = 2, 19, 2, 8, 0.3
  q, k, v = (_rand(rng, (b, t, n, h)) for _ in range(3))
  f = mask_factors(b, t, t, causal=True)
  key = jax.random.key(7, impl=impl)
  # The key's own PRNG draws the mask: rbg and unsafe_rbg keys share a data layout, not a stream.
  masks = {i: np.asarray(dropout_keep_mask(jax.random.key(7, impl=i), t, t, b, n, rate, 8, 5))
           for i in ("threefry2x32", "rbg", "unsafe_rbg")}
  assert all(not np.array_equal(masks[impl], m) for i, m in masks.items() if i != impl)
  tile = jax.random.fold_in(jax.random.fold_in(key, 1), 2)  # tile (1, 2), as the docstring says
  np.testing.assert_array_equal(masks[impl][:, :, 8:16, 10:15] > 0,
                                np.asarray(jax.random.bernoulli(tile, 1.0 - rate, (b, n, 8, 5))))
  run = lambda q, k, v, key: chunked_attention(q, k, v, mask=f, block_q=8, block_k=5, dropout_rate=rate,
                                               dropout_rng=key)
  out = run(q, k, v, key)
  np.testing.assert_array_equal(out, run(q, k, v, key))  # same seed, same output
  assert np.abs(np.asarray(out) - np.asarray(run(q, k, v, jax.random.key(8)))).max() > 1e-3
  # The float64 reference with the same keep mask applied to the probabilities.
  keep = np.asarray(dropout_keep_mask(key, t, t, b, n, rate, 8, 5), np.float64)
  assert 0.6 < (keep > 0).mean() < 0.8 and np.allclose(keep[keep > 0], 1 / (1 - rate))
  q64, k64, v64 = (np.asarray(x, np.float64) for x in (q, k, v))
  logits = np.einsum("btnh,bsnh->bnts", q64, k64) / np.sqrt(h)
  logits = np.where(np.tril(np.ones((t, t), bool)), logits, -np.inf)
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  expected = np.einsum("bnts,bsnh->btnh", p * keep, v64)
  _close(out, expected, rtol=1e-5)

  def dense(q, k, v):  # the same computation in JAX, for the gradients
    lg = jnp.where(np.tril(np.ones((t, t), bool)), jnp.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(h), -jnp.inf)
    return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(lg, -1) * keep.astype(np.float32), v)

  ct = _rand(rng, out.shape)
  g = jax.grad(lambda *a: jnp.sum(run(*a, key) * ct), argnums=(0, 1, 2))(q, k, v)
  r = jax.grad(lambda *a: jnp.sum(dense(*a) * ct), argnums=(0, 1, 2))(q, k, v)
  for a, e in zip(g, r, strict=True):
    _close(a, e)


def test_bf16_inputs_are_as_accurate_as_the_dense_path():
  rng = np.random.default_rng(2)
  b, t, n, h = 2, 96, 2, 32
  q, k, v = (jnp.asarray(_rand(rng, (b, t, n, h)), jnp.bfloat16) for _ in range(3))
  f = mask_factors(b, t, t, causal=True)
  out = chunked_attention(q, k, v, mask=f, block_q=32, block_k=16)
  assert out.dtype == jnp.bfloat16
  dense = _dense(q, k, v, f)
  expected = aref.softmax_attention64(*(np.asarray(x.astype(jnp.float32)) for x in (q, k, v)),
                                      allowed=np.tril(np.ones((t, t), bool)))
  err = lambda x: np.abs(np.asarray(x.astype(jnp.float32), np.float64) - expected).max()
  assert err(out) <= 1.5 * err(dense) + 1e-3, (err(out), err(dense))


@pytest.mark.parametrize("causal", [False, True])
def test_no_quadratic_intermediate_forward_or_backward(causal):
  t = 1024
  q, k, v = (jax.ShapeDtypeStruct((1, t, 2, 16), jnp.float32) for _ in range(3))
  f = mask_factors(1, t, t, causal=causal, kv_valid=np.ones((1, t), bool))
  fwd = lambda q, k, v: chunked_attention(q, k, v, mask=f, block_q=128, block_k=128)
  bad, prims = _quadratic_avals(fwd, q, k, v, t=t)
  assert not bad and "scan" in prims, bad[:5]
  bad, _ = _quadratic_avals(jax.grad(lambda *a: jnp.sum(fwd(*a)), argnums=(0, 1, 2)), q, k, v, t=t)
  assert not bad, bad[:5]


def test_live_blocks_skip_the_upper_triangle_and_other_documents():
  t = 64
  causal = live_blocks(mask_factors(1, t, t, causal=True), t, t, 16, 16)
  np.testing.assert_array_equal(causal, np.tril(np.ones((4, 4), bool)))
  seg = np.repeat(np.arange(1, 5), 16)[None]  # four documents of one tile each
  packed = live_blocks(mask_factors(1, t, t, q_segment_ids=seg), t, t, 16, 16)
  np.testing.assert_array_equal(packed, np.eye(4, dtype=bool))
  both = live_blocks(mask_factors(2, t, t, q_segment_ids=np.concatenate([seg, np.ones_like(seg)]), causal=True),
                     t, t, 16, 16)
  np.testing.assert_array_equal(both, np.tril(np.ones((4, 4), bool)))  # row 2 is one document
  # A skipped tile is one the dense mask has no True in: skipping loses nothing.
  rng = np.random.default_rng(3)
  for _ in range(20):
    f = mask_factors(2, 40, 40, kv_valid=rng.random((2, 40)) > 0.5, q_segment_ids=_segments(rng, 2, 40, 5),
                     causal=bool(rng.integers(2)))
    live = np.asarray(live_blocks(f, 40, 40, 8, 8))
    dense = np.asarray(f.dense())[:, 0].reshape(2, 5, 8, 5, 8).any(axis=(0, 2, 4))
    assert np.all(live >= dense)


def test_implementation_choice_and_errors():
  choose = lambda n, **kw: attn.attention_implementation(**{**dict(
      backend="cpu", dtype=jnp.float32, head_dim=64, dense_mask=True, dropout=False, kv_length=n), **kw})
  assert choose(attn.CHUNKED_MIN_LENGTH - 1) == "xla" and choose(attn.CHUNKED_MIN_LENGTH) == "chunked"
  # On a GPU the tile loop was 7-8x slower than dense (H100): dense until the logits are large.
  big, small = attn.GPU_DENSE_LOGITS_BYTES + 1, attn.GPU_DENSE_LOGITS_BYTES
  assert choose(32768, backend="gpu", logits_bytes=small) == "xla"
  assert choose(32768, backend="gpu", logits_bytes=big) == "chunked"
  assert choose(attn.CHUNKED_MIN_LENGTH - 1, backend="gpu", logits_bytes=big) == "xla"
  assert choose(32768, logits_bytes=small) == "chunked"  # the CPU keeps its 1K threshold
  q = jnp.ones((1, 4, 1, 8))
  with pytest.raises(ValueError, match="MaskFactors"):
    attn.dot_product_attention(q, q, q, mask=np.ones((1, 1, 4, 4), bool), implementation="chunked")
  with pytest.raises(ValueError, match="block sizes"):
    chunked_attention(q, q, q, block_q=0)
  # is_causal without a mask, through dot_product_attention, equals the dense causal path.
  rng = np.random.default_rng(4)
  q, k, v = (_rand(rng, (2, 9, 2, 8)) for _ in range(3))
  pos = np.arange(9)
  a = attn.dot_product_attention(q, k, v, q_positions=pos, k_positions=pos, is_causal=True, implementation="chunked")
  d = attn.dot_product_attention(q, k, v, q_positions=pos, k_positions=pos, is_causal=True, implementation="xla")
  _close(a, d)


TINY = dict(d_model=32, num_layers=2, num_heads=4, d_ff=64, dropout=0.0, attention_dropout=0.0, vocab_size=50,
            max_position=64)


@pytest.mark.slow  # three whole models, forward and backward, twice each
@pytest.mark.parametrize("family", ["lm", "mlm", "seq2seq"])
def test_models_with_chunked_attention_equal_xla_loss_and_gradients(family):
  """Packed rows with padding, through the model classes: the same loss and gradients."""
  rng = np.random.default_rng(5)
  b, t = 2, 40
  seg = _segments(rng, b, t, 4)
  ids = jnp.asarray(np.where(seg != 0, rng.integers(3, 50, (b, t)), 0), jnp.int32)
  weights = jnp.asarray(seg != 0, jnp.float32)

  def loss(impl):
    cfg = M.ModelConfig(**TINY, attention_implementation=impl)
    rngs = nnx.Rngs(0)
    if family == "lm":
      model, call = M.CausalLM(cfg, rngs=rngs), lambda m: m(ids, segment_ids=seg)
    elif family == "mlm":
      model, call = M.RoFormerForMaskedLM(cfg, rngs=rngs), lambda m: m(ids, segment_ids=seg)
    else:
      model = M.TransformerSeq2Seq(cfg, rngs=rngs)
      call = lambda m: m(ids, ids, src_segment_ids=seg, tgt_segment_ids=seg)

    def f(m):
      logp = jax.nn.log_softmax(call(m), -1)
      return -jnp.sum(jnp.take_along_axis(logp, ids[..., None], -1)[..., 0] * weights)

    return nnx.value_and_grad(f)(model)

  # Small tiles, so that the rows really are split (the defaults would take one tile).
  import roformer_jax.attention.chunked as ca
  old = ca.DEFAULT_BLOCK_Q, ca.DEFAULT_BLOCK_K
  try:
    ca.chunked_attention.__kwdefaults__.update(block_q=16, block_k=8)
    value, grads = loss("chunked")
  finally:
    ca.chunked_attention.__kwdefaults__.update(block_q=old[0], block_k=old[1])
  ref_value, ref_grads = loss("xla")
  _close(value, ref_value)
  for g, r in zip(jax.tree.leaves(nnx.state(grads)), jax.tree.leaves(nnx.state(ref_grads)), strict=True):
    _close(g, r, rtol=2e-5)


def test_on_a_gpu_auto_keeps_dense_attention_for_masked_rows_of_moderate_size(monkeypatch, attention_calls):
  # A packed float32 batch with 1024 keys: chunked on a CPU, XLA's dense path on a GPU.
  import roformer_jax.attention.softmax as softmax_module
  chunked = []
  monkeypatch.setattr(softmax_module, "chunked_attention", lambda q, k, v, **kw: chunked.append("chunked") or q)
  n = attn.CHUNKED_MIN_LENGTH
  q = jnp.zeros((1, n, 2, 8))
  seg = jnp.ones((1, n), jnp.int32).at[:, n // 2:].set(2)
  factors = attn.mask_factors(1, n, n, q_segment_ids=seg, kv_segment_ids=seg)
  for backend, want in (("cpu", "chunked"), ("gpu", "xla")):
    monkeypatch.setattr(jax, "default_backend", lambda b=backend: b)
    attn.dot_product_attention(q, q, q, mask=factors)
    asked = chunked + [c["implementation"] for c in attention_calls]
    chunked.clear(), attention_calls.clear()
    assert asked.pop() == want, backend
