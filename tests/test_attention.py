"""Specification of roformer_jax.attention, checked against float64 NumPy (tests/attention_reference.py).

Linear attention follows eq. (19) of the RoFormer paper; softmax attention eq. (16). The
references rotate with the dense matrices of eq. (15) and form every (query, key) pair.
"""

import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer_jax import attention as attn
from roformer_jax import rope
from tests import attention_reference as aref

LIN_TOL = 5e-6  # float32 linear attention vs float64, unit-scale inputs (max observed 4.2e-7)
SM_TOL = 5e-6  # float32 softmax attention vs float64 (max observed 3.6e-7)


def _rand(shape, seed, scale=1.0, dtype=np.float32):
  return (np.random.default_rng(seed).normal(size=shape) * scale).astype(dtype)


def _qkv(b, t, n, h, seed, hv=None, s=None, scale=0.7):
  s = t if s is None else s
  return (_rand((b, t, n, h), seed, scale), _rand((b, s, n, h), seed + 1, scale),
          _rand((b, s, n, hv or h), seed + 2))


def _max_err(actual, expected, where=None):
  d = np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64))
  if where is not None:
    d = d[where]
  return float(d.max())


# Jitted entry points: one compile per shape instead of op-by-op dispatch (keeps the file fast).
_lin = jax.jit(attn.linear_attention, static_argnames=("feature_map", "causal", "theta", "layout", "rotary_dim",
                                                        "chunk_size", "eps", "return_state"))
_dpa = jax.jit(attn.dot_product_attention, static_argnames=("rotary", "rotary_value", "scale", "dropout_rate",
                                                             "implementation"))


_proj = attn.favor_projection  # eager: jit would unroll F / H QR decompositions
_phi = jax.jit(lambda x, w: attn.favor_feature_map(x, w, is_query=False))


def _report(name, err):
  print(f"[max error] {name}: {err:.3e}")


# ====================================================================== linear attention (eq. 19)


@pytest.mark.parametrize("feature_map", ["elu", "favor"])
@pytest.mark.parametrize("causal, t, chunk", [(False, 37, 8), (True, 37, 8), (True, 16, 16), (True, 5, 64)])
def test_linear_attention_matches_eq19(feature_map, causal, t, chunk):
  b, n, h = 2, 2, 8
  q, k, v = _qkv(b, t, n, h, seed=t + chunk)
  proj = attn.favor_projection(jax.random.key(t), 12, h) if feature_map == "favor" else None
  pos = np.arange(t) + 3  # an offset: RoPE must depend on m - n only, but the reference uses m, n.
  out = _lin(q, k, v, q_positions=pos, k_positions=pos, feature_map=feature_map,
                              causal=causal, projection=proj, chunk_size=chunk)
  chex.assert_shape(out, (b, t, n, h))
  expected = aref.linear_attention64(q, k, v, q_positions=pos, k_positions=pos, feature_map=feature_map,
                                     projection=None if proj is None else np.asarray(proj), causal=causal)
  err = _max_err(out, expected)
  _report(f"linear eq19 {feature_map} causal={causal} T={t} chunk={chunk}", err)
  assert err < LIN_TOL, err


def test_linear_attention_per_example_positions_and_no_rope():
  b, t, n, h = 2, 11, 2, 8
  q, k, v = _qkv(b, t, n, h, seed=3)
  pos = np.stack([np.arange(t), np.arange(t) * 7 + 100])
  out = _lin(q, k, v, q_positions=pos, k_positions=pos, causal=True, chunk_size=4)
  expected = aref.linear_attention64(q, k, v, q_positions=pos, k_positions=pos, causal=True)
  assert _max_err(out, expected) < LIN_TOL
  plain = _lin(q, k, v, causal=True, chunk_size=4)
  expected_plain = aref.linear_attention64(q, k, v, causal=True)
  assert _max_err(plain, expected_plain) < LIN_TOL
  assert _max_err(plain, expected) > 1e-2  # RoPE does change the output


def test_linear_attention_cross_lengths_non_causal():
  b, t, s, n, h = 1, 6, 13, 2, 8
  q, k, v = _qkv(b, t, n, h, seed=4, s=s, hv=5)
  qp, kp = np.arange(t) + 20, np.arange(s)
  out = _lin(q, k, v, q_positions=qp, k_positions=kp)
  chex.assert_shape(out, (b, t, n, 5))
  expected = aref.linear_attention64(q, k, v, q_positions=qp, k_positions=kp)
  assert _max_err(out, expected) < LIN_TOL


@pytest.mark.parametrize("feature_map", ["elu", "favor"])
@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_kv_mask(feature_map, causal):
  b, t, n, h = 2, 19, 2, 8
  q, k, v = _qkv(b, t, n, h, seed=5)
  proj = attn.favor_projection(jax.random.key(1), 16, h) if feature_map == "favor" else None
  valid = np.ones((b, t), bool)
  valid[0, 14:] = False  # right padding
  valid[1, :5] = False  # left padding
  pos = np.asarray(rope.positions_from_mask(valid))
  out = _lin(q, k, v, q_positions=pos, k_positions=pos, feature_map=feature_map,
                              causal=causal, projection=proj, kv_mask=valid, chunk_size=4)
  expected = aref.linear_attention64(q, k, v, q_positions=pos, k_positions=pos, feature_map=feature_map,
                                     projection=None if proj is None else np.asarray(proj),
                                     causal=causal, kv_mask=valid)
  err = _max_err(out, expected)
  _report(f"linear kv_mask {feature_map} causal={causal}", err)
  assert err < LIN_TOL
  # Real tokens equal the computation on the real tokens alone.
  for row, sl in ((0, slice(0, 14)), (1, slice(5, t))):
    alone = _lin(q[row:row + 1, sl], k[row:row + 1, sl], v[row:row + 1, sl],
                                  q_positions=pos[row, sl], k_positions=pos[row, sl],
                                  feature_map=feature_map, causal=causal, projection=proj, chunk_size=4)
    assert _max_err(out[row:row + 1, sl], alone) < LIN_TOL


@pytest.mark.parametrize("feature_map", ["elu", "favor"])
def test_linear_attention_packed_segments_equal_each_doc_alone(feature_map):
  h, n = 8, 2
  lengths = [[3, 5, 1, 7, 8], [16, 8]]  # segment edges on and off the chunk boundaries (chunk 4)
  t = 24
  proj = attn.favor_projection(jax.random.key(2), 8, h) if feature_map == "favor" else None
  q, k, v = _qkv(2, t, n, h, seed=6)
  seg = np.stack([np.repeat(np.arange(len(ls)) + 10 * r, ls) for r, ls in enumerate(lengths)])
  pos = np.asarray(rope.positions_from_segments(seg))
  out = _lin(q, k, v, q_positions=pos, k_positions=pos, feature_map=feature_map,
                              causal=True, projection=proj, segment_ids=seg, chunk_size=4)
  expected = aref.linear_attention64(q, k, v, q_positions=pos, k_positions=pos, feature_map=feature_map,
                                     projection=None if proj is None else np.asarray(proj), causal=True,
                                     segment_ids=seg)
  err = _max_err(out, expected)
  _report(f"linear packed segments {feature_map}", err)
  assert err < LIN_TOL
  # Each document alone, right-padded to 16 (causal: the padding cannot reach earlier tokens),
  # so that a single compiled shape serves every document.
  for r, ls in enumerate(lengths):
    start = 0
    for ln in ls:
      sl = slice(start, start + ln)
      pad = lambda a, r=r, sl=sl, ln=ln: np.pad(a[r:r + 1, sl], [(0, 0), (0, 16 - ln), (0, 0), (0, 0)])
      alone = _lin(pad(q), pad(k), pad(v), q_positions=np.arange(16), k_positions=np.arange(16),
                   feature_map=feature_map, causal=True, projection=proj, chunk_size=4)
      assert _max_err(out[r:r + 1, sl], alone[:, :ln]) < LIN_TOL, (r, start, ln)
      start += ln


@pytest.mark.parametrize("feature_map", ["elu", "favor"])
def test_linear_attention_prefill_state_and_step_equal_full_causal(feature_map):
  b, t, n, h, prefill = 2, 21, 2, 8, 9
  q, k, v = _qkv(b, t, n, h, seed=7)
  proj = attn.favor_projection(jax.random.key(3), 16, h) if feature_map == "favor" else None
  pos = np.broadcast_to(np.arange(t), (b, t))
  kw = dict(feature_map=feature_map, projection=proj)
  full, full_state = _lin(q, k, v, q_positions=pos, k_positions=pos, causal=True, chunk_size=4,
                          return_state=True, **kw)
  expected = aref.linear_attention64(q, k, v, q_positions=pos, k_positions=pos, causal=True,
                                     feature_map=feature_map, projection=None if proj is None else np.asarray(proj))
  assert _max_err(full, expected) < LIN_TOL

  # Prefill, then the rest in one call from the returned state.
  p = slice(0, prefill)
  head, state = _lin(q[:, p], k[:, p], v[:, p], q_positions=pos[:, p], k_positions=pos[:, p],
                                      causal=True, chunk_size=4, return_state=True, **kw)
  r = slice(prefill, t)
  tail = _lin(q[:, r], k[:, r], v[:, r], q_positions=pos[:, r], k_positions=pos[:, r],
                               causal=True, chunk_size=4, initial_state=state, **kw)
  got = np.concatenate([head, tail], axis=1)
  err_prefill = _max_err(got, expected)

  # Token by token from the prefill state.
  step = jax.jit(lambda st, q, k, v, p: attn.linear_attention_step(st, q, k, v, positions=p, **kw))
  outs = [head]
  for i in range(prefill, t):
    o, state = step(state, q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1], pos[:, i:i + 1])
    outs.append(o)
  err_step = _max_err(np.concatenate(outs, axis=1), expected)
  _report(f"linear prefill+rest {feature_map}", err_prefill)
  _report(f"linear prefill+step {feature_map}", err_step)
  assert err_prefill < LIN_TOL and err_step < LIN_TOL
  # The final state is the full-sequence state.
  np.testing.assert_allclose(state.s, full_state.s, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(state.z, full_state.z, rtol=1e-5, atol=1e-5)


def test_linear_attention_state_resets_across_segments():
  """A prefill ending in segment 1, continued in segment 2, must not see segment 1."""
  b, t, n, h = 1, 10, 2, 8
  q, k, v = _qkv(b, t, n, h, seed=8)
  seg = np.array([[1] * 6 + [2] * 4])
  pos = np.asarray(rope.positions_from_segments(seg))
  _, state = _lin(q[:, :6], k[:, :6], v[:, :6], q_positions=pos[:, :6], k_positions=pos[:, :6],
                                   causal=True, segment_ids=seg[:, :6], return_state=True)
  tail = _lin(q[:, 6:], k[:, 6:], v[:, 6:], q_positions=pos[:, 6:], k_positions=pos[:, 6:],
                               causal=True, segment_ids=seg[:, 6:], initial_state=state)
  alone = aref.linear_attention64(q[:, 6:], k[:, 6:], v[:, 6:], q_positions=pos[0, 6:], k_positions=pos[0, 6:],
                                  causal=True)
  assert _max_err(tail, alone) < LIN_TOL


def test_linear_attention_half_layout():
  """layout='half' pairs feature i with i + F/2; the reference rotates the permuted features."""
  b, t, n, h = 1, 9, 2, 8
  q, k, v = _qkv(b, t, n, h, seed=9)
  pos = np.arange(t)
  perm = np.concatenate([np.arange(0, h, 2), np.arange(1, h, 2)])  # interleaved index of half slot j
  # With elu features (elementwise), permuting q and k permutes phi; half layout on the permuted
  # features is the interleaved rotation on the original ones.
  out = _lin(q[..., perm], k[..., perm], v, q_positions=pos, k_positions=pos, causal=True,
                              layout="half", chunk_size=4)
  expected = aref.linear_attention64(q, k, v, q_positions=pos, k_positions=pos, causal=True)
  assert _max_err(out, expected) < LIN_TOL


def test_linear_attention_argument_errors():
  q, k, v = _qkv(1, 4, 1, 8, seed=10)
  with pytest.raises(ValueError, match="both"):
    attn.linear_attention(q, k, v, q_positions=np.arange(4))
  with pytest.raises(ValueError, match="causal"):
    attn.linear_attention(q, k, v, segment_ids=np.zeros((1, 4), int))
  with pytest.raises(ValueError, match="projection"):
    attn.linear_attention(q, k, v, feature_map="favor")
  with pytest.raises(ValueError, match="feature_map"):
    attn.linear_attention(q, k, v, feature_map="relu")
  with pytest.raises(ValueError, match="even"):
    attn.favor_projection(jax.random.key(0), 7, 8)


def test_reference_tells_eq19_from_performer_pytorch_variants():
  """Rotating before the feature map (performer-pytorch) or rotating the denominator is not eq. (19).

  The reference must separate them, and our output must sit on eq. (19), far from both.
  """
  b, t, n, h = 1, 24, 2, 8
  q, k, v = _qkv(b, t, n, h, seed=11, scale=1.0)
  pos = np.arange(t)
  for feature_map in ("elu", "favor"):
    proj = attn.favor_projection(jax.random.key(4), 16, h) if feature_map == "favor" else None
    kw = dict(q_positions=pos, k_positions=pos, causal=True, feature_map=feature_map,
              projection=None if proj is None else np.asarray(proj))
    eq19 = aref.linear_attention64(q, k, v, **kw)
    ours = np.asarray(_lin(q, k, v, q_positions=pos, k_positions=pos, causal=True,
                                            feature_map=feature_map, projection=proj))
    scale = np.abs(eq19).max()
    for variant in ("rotate_then_phi", "rotated_denominator"):
      wrong = aref.linear_attention64(q, k, v, variant=variant, **kw)
      gap = _max_err(wrong, eq19) / scale
      _report(f"eq19 vs {variant} ({feature_map}), relative gap", gap)
      assert gap > 0.05, (feature_map, variant, gap)
      assert _max_err(ours, wrong) / scale > 0.05
    assert _max_err(ours, eq19) < LIN_TOL


# ====================================================================== FAVOR+


def test_favor_projection_rows_orthogonal_within_blocks():
  h = 8
  for f in (8, 24, 20):  # one block, three blocks, a partial last block
    w = np.asarray(attn.favor_projection(jax.random.key(f), f, h), np.float64)
    chex.assert_shape(w, (f, h))
    norms = np.linalg.norm(w, axis=1)
    for start in range(0, f, h):
      blk = w[start:start + h]
      gram = (blk / np.linalg.norm(blk, axis=1, keepdims=True)) @ (blk / np.linalg.norm(blk, axis=1, keepdims=True)).T
      np.testing.assert_allclose(gram, np.eye(len(blk)), atol=1e-5)
    # Rows are rescaled to chi(H)-distributed norms, not all unit/equal.
    assert norms.std() > 0.05 * norms.mean()
  # Different blocks are independent draws: not orthogonal to each other.
  w = np.asarray(attn.favor_projection(jax.random.key(0), 2 * h, h), np.float64)
  u = w / np.linalg.norm(w, axis=1, keepdims=True)
  assert np.abs(u[:h] @ u[h:].T).max() > 0.1
  # Row norms^2 average to H (rows marginally N(0, I)).
  w = np.asarray(attn.favor_projection(jax.random.key(5), 2048, h), np.float64)
  assert abs(np.mean(np.sum(w * w, axis=1)) - h) < 0.5


def test_favor_feature_map_matches_numpy():
  h, f = 8, 16
  w = attn.favor_projection(jax.random.key(6), f, h)
  x = _rand((3, 5, 2, h), 12)
  for is_query in (False, True):
    got = attn.favor_feature_map(x, w, is_query=is_query)
    np.testing.assert_allclose(got, aref.favor_phi64(x, np.asarray(w), is_query=is_query), rtol=2e-5, atol=1e-7)


def test_favor_approaches_softmax_kernel_as_features_grow():
  """Mean |phi(q).phi(k) - exp(q.k / sqrt(H))| shrinks like 1/sqrt(F); so does the attention output."""
  h, t = 16, 48
  fs = (16, 64, 256, 1024)
  seeds = range(4)
  kern_err = {f: [] for f in fs}
  out_err = {f: [] for f in fs}
  for seed in seeds:
    q, k, v = _qkv(1, t, 1, h, seed=100 + 3 * seed, scale=0.5)
    exact = np.exp(np.einsum("th,sh->ts", q[0, :, 0].astype(np.float64), k[0, :, 0].astype(np.float64)) / np.sqrt(h))
    soft = aref.softmax_attention64(q, k, v)
    for f in fs:
      w = _proj(jax.random.key(1000 * seed + f), f, h)
      fq = np.asarray(_phi(q, w), np.float64)[0, :, 0]
      fk = np.asarray(_phi(k, w), np.float64)[0, :, 0]
      kern_err[f].append(np.mean(np.abs(fq @ fk.T - exact)) / np.mean(exact))
      lin = _lin(q, k, v, feature_map="favor", projection=w)
      out_err[f].append(np.mean(np.abs(np.asarray(lin, np.float64) - soft)))
  kern = [float(np.mean(kern_err[f])) for f in fs]
  out = [float(np.mean(out_err[f])) for f in fs]
  print(f"[favor] F={fs} kernel rel. mean abs error {np.round(kern, 4).tolist()}; "
        f"attention output mean abs error {np.round(out, 4).tolist()}")
  for errs in (kern, out):
    assert all(b < a * 1.15 for a, b in itertools.pairwise(errs)), errs  # monotone up to noise
    assert errs[-1] < errs[0] / 3, errs  # 1/sqrt(F) predicts /8
  assert kern[-1] < 0.1


def test_favor_projection_rows_are_marginally_isotropic():
  """Each entry of a projection row must be positive with probability 1/2 (rows ~ N(0, I))."""
  h = 8
  w = jax.vmap(lambda key: attn.favor_projection(key, h, h))(jax.random.split(jax.random.key(7), 512))
  frac_pos = np.mean(np.asarray(w) > 0, axis=0)  # [row, component] over 512 draws; binomial sd 0.022
  print(f"[favor] P(w[i, i] > 0) over 512 draws: {np.round(np.diag(frac_pos), 2).tolist()}")
  assert np.all(np.abs(frac_pos - 0.5) < 0.15), np.round(frac_pos, 2)


# ====================================================================== no N x N intermediate


def _walk_avals(jaxpr, seen_prims=None):
  """Yield (primitive name, shape) of every variable of every equation, recursing into sub-jaxprs."""
  seen_prims = set() if seen_prims is None else seen_prims

  def sub_jaxprs(value):
    if hasattr(value, "eqns"):
      yield value
    elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):
      yield value.jaxpr
    elif isinstance(value, (tuple, list)):
      for item in value:
        yield from sub_jaxprs(item)

  for var in list(jaxpr.invars) + list(jaxpr.constvars):
    yield "<input>", tuple(getattr(var.aval, "shape", ()))
  for eqn in jaxpr.eqns:
    seen_prims.add(eqn.primitive.name)
    for var in list(eqn.invars) + list(eqn.outvars):
      yield eqn.primitive.name, tuple(getattr(var.aval, "shape", ()))
    for value in eqn.params.values():
      for sub in sub_jaxprs(value):
        yield from _walk_avals(sub, seen_prims)


def _quadratic_avals(fn, *args, t):
  prims = set()
  closed = jax.make_jaxpr(fn)(*args)
  bad = [(p, s) for p, s in _walk_avals(closed.jaxpr, prims)
         if sum(d >= t for d in s) >= 2 or int(np.prod(s, dtype=np.int64)) >= t * t]
  return bad, prims


T_BIG = 1024


def _big_inputs(n=2, h=32):
  q, k, v = (jax.ShapeDtypeStruct((1, T_BIG, n, h), jnp.float32) for _ in range(3))
  return q, k, v


def test_quadratic_detector_catches_naive_attention():
  q, k, v = _big_inputs()
  pos = jnp.arange(T_BIG)

  def naive(q, k, v):  # eq. (19) without associativity: forms the [T, T] weights
    fq = jax.nn.elu(q) + 1
    fk = jax.nn.elu(k) + 1
    w = jnp.einsum("btnf,bsnf->bnts", fq, fk)
    return jnp.einsum("bnts,bsnv->btnv", w, v)

  bad, _ = _quadratic_avals(naive, q, k, v, t=T_BIG)
  assert bad

  def nested(q, k, v):  # the same, hidden in a scan body inside a jit
    def body(c, _):
      return c, jax.jit(naive)(q, k, v)
    return jax.lax.scan(body, 0.0, None, length=2)[1]

  bad, prims = _quadratic_avals(nested, q, k, v, t=T_BIG)
  assert bad and "scan" in prims
  # Dense softmax attention materialises T x T logits, and the detector sees them ("auto"
  # would take the chunked path at this length, which tests/test_chunked_attention.py checks).
  bad, _ = _quadratic_avals(lambda q, k, v: attn.dot_product_attention(q, k, v, q_positions=pos, k_positions=pos,
                                                                       implementation="xla"),
                            q, k, v, t=T_BIG)
  assert bad


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_has_no_quadratic_intermediate(causal):
  q, k, v = _big_inputs()
  pos = jnp.arange(T_BIG)

  def fwd(q, k, v):
    return attn.linear_attention(q, k, v, q_positions=pos, k_positions=pos, causal=causal, chunk_size=64)

  def loss(q, k, v):
    return jnp.sum(fwd(q, k, v) ** 2)

  bad, prims = _quadratic_avals(fwd, q, k, v, t=T_BIG)
  assert not bad, bad[:5]
  if causal:
    assert "scan" in prims
  bad, _ = _quadratic_avals(jax.grad(loss, argnums=(0, 1, 2)), q, k, v, t=T_BIG)
  assert not bad, bad[:5]


def test_favor_linear_attention_has_no_quadratic_intermediate():
  q, k, v = _big_inputs()
  pos = jnp.arange(T_BIG)
  w = attn.favor_projection(jax.random.key(0), 32, 32)

  def loss(q, k, v):
    return jnp.sum(attn.linear_attention(q, k, v, q_positions=pos, k_positions=pos, causal=True,
                                         feature_map="favor", projection=w, chunk_size=64))

  bad, _ = _quadratic_avals(jax.value_and_grad(loss, argnums=(0, 1, 2)), q, k, v, t=T_BIG)
  assert not bad, bad[:5]


# ====================================================================== softmax attention


def _causal_mask(t):
  return attn.make_attention_mask(causal=True, q_index=jnp.arange(t), kv_index=jnp.arange(t))


def test_dot_product_attention_rope_matches_reference():
  b, t, n, h = 2, 13, 3, 16
  q, k, v = _qkv(b, t, n, h, seed=20, scale=1.0)
  pos = np.stack([np.arange(t), np.arange(t) + 1000])
  out = _dpa(q, k, v, q_positions=pos, k_positions=pos)
  chex.assert_shape(out, (b, t, n, h))
  expected = aref.softmax_attention64(q, k, v, q_positions=pos, k_positions=pos)
  err = _max_err(out, expected)
  _report("softmax RoPE", err)
  assert err < SM_TOL
  # Values are not rotated by default: rotating them would change the output.
  rotated_v = aref.softmax_attention64(q, k, v, q_positions=pos, k_positions=pos, rotary_value=True)
  assert _max_err(out, rotated_v) > 0.05


def test_dot_product_attention_rotary_value():
  b, t, n, h = 1, 9, 2, 8
  q, k, v = _qkv(b, t, n, h, seed=21, scale=1.0)
  pos = np.arange(t) + 5
  out = _dpa(q, k, v, q_positions=pos, k_positions=pos, rotary_value=True)
  expected = aref.softmax_attention64(q, k, v, q_positions=pos, k_positions=pos, rotary_value=True)
  assert _max_err(out, expected) < SM_TOL
  with pytest.raises(ValueError, match="k_positions"):
    _dpa(q, k, v, rotary_value=True)


@pytest.mark.parametrize("kind", ["padding", "causal", "segments", "all"])
def test_dot_product_attention_masks(kind):
  b, t, n, h = 2, 12, 2, 8
  q, k, v = _qkv(b, t, n, h, seed=22, scale=1.0)
  valid = np.ones((b, t), bool)
  valid[0, 9:] = False
  valid[1, :3] = False
  seg = np.array([[0] * 5 + [1] * 7, [3] * 8 + [4] * 4])
  kw = {}
  if kind in ("padding", "all"):
    kw.update(q_valid=valid, kv_valid=valid)
  if kind in ("segments", "all"):
    kw.update(q_segment_ids=seg, kv_segment_ids=seg)
  if kind in ("causal", "all"):
    kw.update(causal=True, q_index=jnp.arange(t), kv_index=jnp.arange(t))
  mask = attn.make_attention_mask(**kw)
  allowed = aref.allowed64(t, t, causal="causal" in kw, kv_mask=valid if "kv_valid" in kw else None,
                           segment_ids=seg if "q_segment_ids" in kw else None, batch=b)
  if "q_valid" in kw:
    allowed &= valid[:, :, None]
  np.testing.assert_array_equal(np.broadcast_to(mask, (b, 1, t, t))[:, 0], allowed)
  pos = np.asarray(rope.positions_from_mask(valid))
  out = _dpa(q, k, v, mask=mask, q_positions=pos, k_positions=pos)
  expected = aref.softmax_attention64(q, k, v, q_positions=pos, k_positions=pos, allowed=allowed[:, None])
  rows = allowed.any(-1)  # queries that see at least one key
  err = _max_err(out, expected, where=rows)
  _report(f"softmax mask {kind}", err)
  assert err < SM_TOL


def test_dot_product_attention_bf16_is_float32_accurate():
  b, t, n, h = 2, 64, 2, 32
  q, k, v = _qkv(b, t, n, h, seed=23, scale=1.0)
  qb, kb, vb = (jnp.asarray(x, jnp.bfloat16) for x in (q, k, v))
  pos = np.arange(t)
  out = _dpa(qb, kb, vb, q_positions=pos, k_positions=pos, mask=_causal_mask(t))
  assert out.dtype == jnp.bfloat16
  # Reference on the bf16-rounded inputs, everything else in float64.
  q64, k64, v64 = (np.asarray(x.astype(jnp.float32), np.float64) for x in (qb, kb, vb))
  allowed = np.tril(np.ones((t, t), bool))
  expected = aref.softmax_attention64(q64, k64, v64, q_positions=pos, k_positions=pos, allowed=allowed)
  err = _max_err(out, expected)
  _report("softmax bf16 inputs (bf16 output)", err)
  # bf16 output rounding alone is up to ~4e-3 at |out|~1; rotated q/k are stored in bf16 too.
  assert err < 3e-2, err
  assert np.mean(np.abs(np.asarray(out.astype(jnp.float32), np.float64) - expected)) < 4e-3


def test_dot_product_attention_grouped_queries_and_value_dim():
  b, t, n, kh, h = 1, 10, 4, 2, 8
  q = _rand((b, t, n, h), 24)
  k = _rand((b, t, kh, h), 25)
  pos = np.arange(t)
  for hv in (h, 6):  # Hv != H takes the explicit XLA path
    v = _rand((b, t, kh, hv), 26)
    out = _dpa(q, k, v, q_positions=pos, k_positions=pos, mask=_causal_mask(t))
    chex.assert_shape(out, (b, t, n, hv))
    expected = aref.softmax_attention64(q, k, v, q_positions=pos, k_positions=pos,
                                        allowed=np.tril(np.ones((t, t), bool)))
    assert _max_err(out, expected) < SM_TOL, hv


def test_dot_product_attention_cross_attention_is_plain_softmax():
  b, t, s, n, h = 2, 5, 11, 2, 8
  q, k, v = _qkv(b, t, n, h, seed=27, s=s, scale=1.0)
  out = _dpa(q, k, v)
  expected = aref.softmax_attention64(q, k, v)
  assert _max_err(out, expected) < SM_TOL
  rotated = aref.softmax_attention64(q, k, v, q_positions=np.arange(t) + 50, k_positions=np.arange(s))
  assert _max_err(out, rotated) > 1e-2


def test_dot_product_attention_needs_both_positions():
  q, k, v = _qkv(1, 4, 1, 8, seed=28)
  with pytest.raises(ValueError, match="both"):
    _dpa(q, k, v, q_positions=np.arange(4))
  with pytest.raises(ValueError, match="both"):
    _dpa(q, k, v, k_positions=np.arange(4))


def test_dot_product_attention_dropout_path():
  b, t, n, h = 1, 8, 2, 8
  q, k, v = _qkv(b, t, n, h, seed=29)
  pos = np.arange(t)
  no_drop = _dpa(q, k, v, q_positions=pos, k_positions=pos)
  drop = _dpa(q, k, v, q_positions=pos, k_positions=pos, dropout_rate=0.5,
                                    dropout_rng=jax.random.key(0))
  assert np.all(np.isfinite(drop)) and _max_err(drop, no_drop) > 1e-3
  # Averaged over many masks, dropout is unbiased.
  many = jax.jit(jax.vmap(lambda r: attn.dot_product_attention(q, k, v, q_positions=pos, k_positions=pos,
                                                               dropout_rate=0.5, dropout_rng=r)))(
      jax.random.split(jax.random.key(1), 500))
  assert _max_err(np.mean(many, axis=0), no_drop) < 0.1


def test_make_attention_mask_causal_default_index():
  valid = np.ones((1, 5), bool)
  mask = attn.make_attention_mask(q_valid=valid, kv_valid=valid, causal=True)
  np.testing.assert_array_equal(np.broadcast_to(mask, (1, 1, 5, 5))[0, 0], np.tril(np.ones((5, 5), bool)))


# ====================================================================== MultiHeadAttention

D, N_HEADS, HD = 32, 4, 8


def _mha(kind="softmax", feature_map="elu", causal=True, seed=0, **kw):
  return attn.MultiHeadAttention(D, N_HEADS, kind=kind, feature_map=feature_map, causal=causal, num_features=16,
                                 init_std=0.3, rngs=nnx.Rngs(seed), **kw)


@nnx.jit
def _forward(m, x, positions, valid=None):
  t = x.shape[1]
  if m.kind == "softmax":
    mask = attn.make_attention_mask(kv_valid=valid, causal=True, q_index=jnp.arange(t), kv_index=jnp.arange(t))
    return m(x, positions=positions, mask=mask)
  return m(x, positions=positions, kv_valid=valid)


@nnx.jit
def _decode(m, x, cache, positions, index, kv_valid):
  return m.decode(x, cache, positions=positions, index=index, kv_valid=kv_valid)


def _decode_all(m, x, positions, valid, prefill, max_len):
  b, t, _ = x.shape
  cache = m.init_cache(b, max_len)
  kv_valid = np.zeros((b, max_len), bool)
  kv_valid[:, :t] = valid
  y, cache = _decode(m, x[:, :prefill], cache, positions[:, :prefill], jnp.int32(0), kv_valid)
  ys = [y]
  for i in range(prefill, t):
    y, cache = _decode(m, x[:, i:i + 1], cache, positions[:, i:i + 1], jnp.int32(i), kv_valid)
    ys.append(y)
  return np.concatenate(ys, axis=1)


@pytest.mark.parametrize("kind, feature_map", [("softmax", "elu"), ("linear", "elu"), ("linear", "favor")])
def test_mha_shapes(kind, feature_map):
  m = _mha(kind, feature_map, causal=False)
  x, ctx = _rand((2, 7, D), 30), _rand((2, 5, D), 31)
  call = nnx.jit(lambda m, x, **kw: m(x, **kw))
  chex.assert_shape(call(m, x, positions=jnp.arange(7)), (2, 7, D))
  cross = call(m, x, context=ctx)
  chex.assert_shape(cross, (2, 7, D))
  # Cross-attention never rotates: positions are ignored.
  np.testing.assert_allclose(call(m, x, context=ctx, positions=jnp.arange(7) + 9), cross, atol=1e-6)
  m2 = attn.MultiHeadAttention(D, 3, head_dim=5, kind=kind, feature_map=feature_map, num_features=16,
                               rngs=nnx.Rngs(0)) if feature_map != "favor" else None
  if m2 is not None:
    chex.assert_shape(m2.query.kernel[...], (D, 3, 5))
    chex.assert_shape(call(m2, x, context=ctx), (2, 7, D))
  with pytest.raises(ValueError, match="divisible"):
    attn.MultiHeadAttention(D, 5, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="kind"):
    attn.MultiHeadAttention(D, 4, kind="sparse", rngs=nnx.Rngs(0))


def test_mha_softmax_matches_reference():
  """The module is projections around eq. (16): check it with the reference on its own projections."""
  m = _mha("softmax")
  x = _rand((2, 9, D), 32)
  pos = np.arange(9)
  y = m(x, positions=pos, mask=_causal_mask(9))
  q, k, v = (np.einsum("btd,dnh->btnh", x, np.asarray(p.kernel[...], np.float64)) + np.asarray(p.bias[...])
             for p in (m.query, m.key, m.value))
  o = aref.softmax_attention64(q, k, v, q_positions=pos, k_positions=pos, allowed=np.tril(np.ones((9, 9), bool)))
  expected = np.einsum("btnh,nhd->btd", o, np.asarray(m.out.kernel[...], np.float64)) + np.asarray(m.out.bias[...])
  assert _max_err(y, expected) < 1e-4


@pytest.mark.parametrize("kind, feature_map", [("softmax", "elu"), ("linear", "elu"), ("linear", "favor")])
def test_mha_decode_equals_full_causal_forward(kind, feature_map):
  m = _mha(kind, feature_map)
  b, t = 2, 11
  x = _rand((b, t, D), 33)
  pos = np.broadcast_to(np.arange(t), (b, t))
  full = np.asarray(_forward(m, x, pos))
  if kind == "linear":
    q, k, v = (np.asarray(p(x), np.float64) for p in (m.query, m.key, m.value))
    o = aref.linear_attention64(q, k, v, q_positions=pos, k_positions=pos, causal=True, feature_map=feature_map,
                                projection=None if feature_map == "elu" else np.asarray(m.projection[...]))
    expected = np.einsum("btnh,nhd->btd", o, np.asarray(m.out.kernel[...], np.float64)) + np.asarray(m.out.bias[...])
    assert _max_err(full, expected) < 1e-4
  decoded = _decode_all(m, x, pos, np.ones((b, t), bool), prefill=4, max_len=16)
  err = _max_err(decoded, full)
  _report(f"MHA decode vs full {kind}/{feature_map}", err)
  assert err < 1e-5


@pytest.mark.parametrize("kind, feature_map", [("softmax", "elu"), ("linear", "elu"), ("linear", "favor")])
def test_mha_left_padded_decode_equals_unpadded(kind, feature_map):
  m = _mha(kind, feature_map, seed=1)
  t, pads = 10, 3
  x_real = _rand((1, t - pads, D), 34)
  x_other = _rand((1, t, D), 35)
  # Row 0 is left-padded (garbage in the pad slots), row 1 is a full-length sequence.
  x = np.concatenate([np.concatenate([_rand((1, pads, D), 36), x_real], axis=1), x_other], axis=0)
  valid = np.ones((2, t), bool)
  valid[0, :pads] = False
  pos = np.asarray(rope.positions_from_mask(valid))
  alone = np.asarray(_forward(m, x_real, np.arange(t - pads)[None]))
  full_pad = np.asarray(_forward(m, x, pos, valid))
  decoded = _decode_all(m, x, pos, valid, prefill=5, max_len=12)
  # Row 1 alone, and row 0's real tokens right-padded (the same real tokens at the front).
  x_right = np.concatenate([x_other, np.concatenate([x_real, _rand((1, pads, D), 37)], axis=1)], axis=0)
  valid_r = np.stack([np.ones(t, bool), np.arange(t) < t - pads])
  ref_rows = np.asarray(_forward(m, x_right, np.asarray(rope.positions_from_mask(valid_r)), valid_r))
  errs = (_max_err(full_pad[0, pads:], alone[0]), _max_err(decoded[0, pads:], alone[0]),
          _max_err(decoded[1], ref_rows[0]), _max_err(ref_rows[1, :t - pads], alone[0]))
  _report(f"MHA left-padded {kind}/{feature_map} (full, decode, other row, right-padded)", max(errs))
  scale = max(1.0, float(np.abs(alone).max()))  # init_std=0.3 gives outputs of order 10: relative bound
  assert max(errs) < 1e-5 * scale, (errs, scale)


def test_mha_redraw_features_changes_projection():
  m = _mha("linear", "favor")
  x = _rand((1, 6, D), 38)
  before = np.asarray(m.projection[...])
  y0 = m(x, positions=np.arange(6))
  m.redraw_features(jax.random.key(123))
  after = np.asarray(m.projection[...])
  assert after.shape == before.shape == (16, HD)
  assert np.abs(after - before).max() > 0.1
  assert _max_err(m(x, positions=np.arange(6)), y0) > 1e-4
  u = after[:HD] / np.linalg.norm(after[:HD], axis=1, keepdims=True)
  np.testing.assert_allclose(u @ u.T, np.eye(HD), atol=1e-5)  # still block-orthogonal
  # The projection is not a trained parameter.
  assert not any(np.shape(p) == (16, HD) for p in jax.tree.leaves(nnx.state(m, nnx.Param)))
  # Redraw is a no-op for softmax and elu modules.
  for mm in (_mha("softmax"), _mha("linear", "elu")):
    st = jax.tree.map(np.asarray, nnx.state(mm))
    mm.redraw_features(jax.random.key(1))
    jax.tree.map(np.testing.assert_array_equal, st, jax.tree.map(np.asarray, nnx.state(mm)))


def _axes(var):
  meta = var.get_metadata()
  return tuple(meta.get("out_sharding") or meta.get("sharding_names") or meta.get("sharding") or ())


def test_mha_param_logical_axes():
  m = _mha("linear", "favor")
  for p in (m.query, m.key, m.value):
    assert _axes(p.kernel) == ("embed", "heads", "kv")
    assert _axes(p.bias) == ("heads", "kv")
  assert _axes(m.out.kernel) == ("heads", "kv", "embed")
  assert _axes(m.out.bias) == ("embed",)


def test_mha_softmax_causal_flag_is_honoured():
  m = _mha("softmax", causal=True)
  x = _rand((1, 8, D), 39)
  y = m(x, positions=np.arange(8))
  expected = m(x, positions=np.arange(8), mask=_causal_mask(8))
  np.testing.assert_allclose(y, expected, atol=1e-5)


# --------------------------------------------------------------------------------------
# Implementation choice (cuDNN must be requested explicitly) and is_causal.
# --------------------------------------------------------------------------------------


def test_cudnn_is_requested_only_where_it_applies():
  choose = lambda **kw: attn.attention_implementation(**{**dict(
      backend="gpu", dtype=jnp.bfloat16, head_dim=64, dense_mask=False, dropout=False), **kw})
  assert choose() == "cudnn" and choose(dtype=jnp.float16, head_dim=128) == "cudnn"
  assert choose(backend="cpu") == "xla" and choose(backend="tpu") == "xla"
  assert choose(dtype=jnp.float32) == "xla"  # cuDNN's fused kernel is half precision only
  assert choose(head_dim=160) == "xla" and choose(head_dim=36) == "xla"
  assert choose(dense_mask=True) == "xla" and choose(dropout=True) == "xla"


@pytest.mark.parametrize("hv", [16, 24])  # 24: values wider than keys take the explicit path
def test_is_causal_equals_the_dense_causal_mask(hv):
  kq, kk, kv = jax.random.split(jax.random.key(3), 3)
  q = jax.random.normal(kq, (2, 9, 4, 16))
  k = jax.random.normal(kk, (2, 9, 4, 16))
  v = jax.random.normal(kv, (2, 9, 4, hv))
  pos = jnp.arange(9)
  causal = attn.make_attention_mask(causal=True, q_index=jnp.arange(9), kv_index=jnp.arange(9))
  pad = attn.make_attention_mask(kv_valid=jnp.arange(9)[None, :] < jnp.array([[9], [6]]))
  for extra in (None, pad):
    dense = causal if extra is None else jnp.logical_and(causal, extra)
    want = attn.dot_product_attention(q, k, v, mask=dense, q_positions=pos, k_positions=pos)
    got = attn.dot_product_attention(q, k, v, mask=extra, q_positions=pos, k_positions=pos, is_causal=True)
    np.testing.assert_allclose(got, want, atol=1e-6)
  # and against the float64 reference: the first query sees only the first key
  np.testing.assert_allclose(got[:, 0], v[:, 0], atol=1e-6)


def test_forced_implementation_is_checked_and_xla_matches_auto():
  q = jax.random.normal(jax.random.key(4), (1, 6, 2, 8))
  pos = jnp.arange(6)
  auto = attn.dot_product_attention(q, q, q, q_positions=pos, k_positions=pos)
  xla = attn.dot_product_attention(q, q, q, q_positions=pos, k_positions=pos, implementation="xla")
  np.testing.assert_array_equal(xla, auto)  # CPU: "auto" is XLA
  with pytest.raises(ValueError, match="'cudnn' needs a GPU.*backend is 'cpu'"):
    attn.dot_product_attention(q, q, q, implementation="cudnn")
  with pytest.raises(ValueError, match="implementation='flash'"):
    attn.dot_product_attention(q, q, q, implementation="flash")
  with pytest.raises(ValueError, match="implementation='flash'"):  # also on the dropout path
    attn.dot_product_attention(q, q, q, implementation="flash", dropout_rate=0.1, dropout_rng=jax.random.key(0))
  with pytest.raises(ValueError, match="'cudnn' needs a GPU"):
    attn.dot_product_attention(q, q, q, implementation="cudnn", dropout_rate=0.1, dropout_rng=jax.random.key(0))
  with pytest.raises(ValueError, match="implementation='flash'"):
    attn.MultiHeadAttention(16, 2, implementation="flash", rngs=nnx.Rngs(0))


def test_model_config_attention_implementation_reaches_every_layer():
  from roformer_jax import models
  with pytest.raises(ValueError, match="attention_implementation='fast'.*'auto', 'xla', 'cudnn'"):
    models.ModelConfig(attention_implementation="fast")
  cfg = models.ModelConfig(vocab_size=32, d_model=16, num_layers=2, num_heads=2, d_ff=32,
                           attention_implementation="cudnn")
  model = models.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0))
  assert all(layer.attention.implementation == "cudnn" for layer in model.roformer.layers)
  with pytest.raises(ValueError, match="'cudnn' needs a GPU"):  # the trace-time error reaches the user
    model(jnp.ones((1, 4), jnp.int32))


def test_forced_cudnn_with_dropout_is_refused_before_any_kernel(monkeypatch):
  """On a GPU (stood in for by the backend name), forced cuDNN with attention dropout or wider
  values is an error naming the fix, not a silent fall back to XLA."""
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")  # what softmax.py calls
  q = jax.random.normal(jax.random.key(5), (1, 4, 2, 8))
  with pytest.raises(ValueError, match="cannot run attention-probability dropout.*attention_dropout=0"):
    attn.dot_product_attention(q, q, q, implementation="cudnn", dropout_rate=0.1, dropout_rng=jax.random.key(0))
  with pytest.raises(ValueError, match="value dim 16 vs 8"):
    attn.dot_product_attention(q, q, jnp.ones((1, 4, 2, 16)), implementation="cudnn")


def test_an_encoder_without_padding_or_packing_asks_cudnn_on_a_gpu(monkeypatch, attention_calls):
  """B3 on an H100 ran XLA's attention for RoFormer MLM on full rows: the model passes mask
  factors that mask nothing, which counted as a dense mask. Now such factors are no mask (the
  fused kernel is eligible), while factors that mask something still take XLA's path."""
  from roformer_jax import models
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")  # what softmax.py calls
  asked = lambda: [(c["implementation"], c["masked"]) for c in attention_calls]
  cfg = models.ModelConfig(vocab_size=64, d_model=128, num_layers=1, num_heads=2, d_ff=64, dtype="bfloat16")
  model = models.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0))
  ids = jnp.ones((2, 16), jnp.int32)
  model(ids)
  assert asked() == [("cudnn", False)]
  attention_calls.clear()
  model(ids, attention_mask=jnp.arange(16)[None] < jnp.array([[16], [9]]))  # padding: a dense mask
  assert asked() == [("xla", True)]
  nothing = attn.mask_factors(2, 16, 16)
  assert nothing.masks_nothing() and not attn.mask_factors(2, 16, 16, causal=True).masks_nothing()
