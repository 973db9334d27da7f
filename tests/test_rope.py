"""Specification of roformer_jax.rope, checked against float64 NumPy (tests/reference.py)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from roformer_jax import rope
from tests import reference as ref

TOL = 1e-5  # the bound for unit-scale fp32 inputs


def _unit(shape, seed=0, dtype=np.float32):
  return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


# ------------------------------------------------------------------ shapes and dtypes


class ShapeTest(parameterized.TestCase):

  @parameterized.parameters(
      ((7, 2, 8), (7,)),
      ((3, 7, 2, 8), (3, 7)),
      ((3, 7, 2, 8), (7,)),
      ((2, 3, 5, 4, 16), (2, 3, 5)),
      ((2, 3, 5, 4, 16), (1, 5)),
  )
  def test_shape_preserved(self, x_shape, pos_shape):
    x = _unit(x_shape)
    pos = np.arange(np.prod(pos_shape)).reshape(pos_shape)
    out = rope.apply_rotary(x, pos)
    chex.assert_shape(out, x_shape)
    expected = ref.rotate_interleaved64(x, np.broadcast_to(pos, x_shape[:-2]))
    np.testing.assert_allclose(out, expected, atol=TOL)

  @parameterized.parameters(jnp.float32, jnp.bfloat16, jnp.float16)
  def test_dtype_preserved_and_fp32_internals(self, dtype):
    x32 = _unit((2, 9, 3, 32))
    x = jnp.asarray(x32, dtype)
    pos = np.arange(9) * 1000 + 17
    out = rope.apply_rotary(x, pos)
    chex.assert_type(out, dtype)
    # fp32 internals: the result is the fp64 rotation of the (rounded) input, rounded once,
    # so it is within one ulp of the rounded reference (|values| < 2, ulp <= 2 eps).
    expected = ref.rotate_interleaved64(np.asarray(x.astype(jnp.float32), np.float64), pos)
    eps = float(jnp.finfo(dtype).eps)
    np.testing.assert_allclose(np.asarray(out.astype(jnp.float32), np.float64), expected,
                               atol=max(TOL, 2 * eps), rtol=0)

  def test_rotary_cos_sin_shapes(self):
    cos, sin = rope.rotary_cos_sin(jnp.zeros((4, 6), jnp.int32), 10)
    chex.assert_shape([cos, sin], (4, 6, 5))
    chex.assert_trees_all_equal(cos, jnp.ones_like(cos))


# ------------------------------------------------------------------ exactness vs eq. (15)


class ExactPhaseTest(parameterized.TestCase):

  def test_dense_eq15_many_positions(self):
    """Each token equals R^d_{Theta,m} x with R built entry by entry (eq. 15)."""
    positions = np.array([0, 1, 2, 3, 511, 4095, 5000, 65535, 65536, 1_000_003, 2**23 + 1,
                          2**24 - 3, 2**24 - 2, 2**24 - 1, 2**24], dtype=np.int32)
    dim = 64
    x = _unit((len(positions), 2, dim), seed=1)
    out = np.asarray(rope.apply_rotary(x, positions))
    for t, m in enumerate(positions):
      dense = ref.dense_rotation(float(m), dim)
      np.testing.assert_allclose(out[t], x[t].astype(np.float64) @ dense.T, atol=TOL, err_msg=f"m={m}")

  def test_rotation_matrix_matches_reference(self):
    for m in (0, 3, 1234567):
      np.testing.assert_allclose(rope.rotation_matrix(m, 16), ref.dense_rotation(m, 16), atol=1e-12)
      r = rope.rotation_matrix(m, 16)
      np.testing.assert_allclose(r @ r.T, np.eye(16), atol=1e-12)

  def test_sampled_positions_up_to_2_24_all_frequencies(self):
    rng = np.random.default_rng(2)
    positions = np.concatenate([
        rng.integers(0, 2**24 + 1, 4000),
        np.arange(2**24 - 2000, 2**24 + 1),
        *[np.arange(2**k - 8, 2**k + 8) for k in range(4, 25)],
    ]).astype(np.int32)
    dim = 128
    cos, sin = rope.rotary_cos_sin(positions, dim)
    ang = positions.astype(np.float64)[:, None] * ref.inv_freq64(dim)
    assert np.abs(np.asarray(cos) - np.cos(ang)).max() < 1e-6
    assert np.abs(np.asarray(sin) - np.sin(ang)).max() < 1e-6

  @pytest.mark.slow
  def test_every_integer_position_up_to_2_24(self):
    """Exhaustive: all 2^24 + 1 positions, for the frequencies of d = 4 (1 and 1e-2 rad)."""
    dim, chunk = 4, 2**22
    fn = jax.jit(lambda p: rope.rotary_cos_sin(p, dim))
    worst = 0.0
    for start in range(0, 2**24 + 1, chunk):
      p = np.arange(start, min(start + chunk, 2**24 + 1), dtype=np.int32)
      cos, sin = fn(p)
      ang = p.astype(np.float64)[:, None] * ref.inv_freq64(dim)
      worst = max(worst, np.abs(np.asarray(cos) - np.cos(ang)).max(), np.abs(np.asarray(sin) - np.sin(ang)).max())
    assert worst < 1e-6, worst

  def test_plain_fp32_method_is_not_exact(self):
    """The float32 product (HF/MaxText) misses the bound; this is what `exact` fixes."""
    positions = np.array([5000, 2**24 - 1], np.int32)
    cos, _ = rope.rotary_cos_sin(positions, 64, exact=False)
    ang = positions.astype(np.float64)[:, None] * ref.inv_freq64(64)
    err = np.abs(np.asarray(cos) - np.cos(ang)).max(axis=-1)
    assert err[0] > 1e-5 and err[1] > 1e-2, err

  def test_negative_and_float_positions(self):
    positions = np.array([-1, -7, -(2**24) + 5, -(2**31)], np.int32)
    cos, sin = rope.rotary_cos_sin(positions, 32)
    ang = positions.astype(np.float64)[:, None] * ref.inv_freq64(32)
    np.testing.assert_allclose(cos, np.cos(ang), atol=1e-6)
    np.testing.assert_allclose(sin, np.sin(ang), atol=1e-6)
    fpos = np.array([0.5, 3.25, 1e6 + 0.75, -2.5], np.float32)
    cos, sin = rope.rotary_cos_sin(fpos, 32)
    ang = fpos.astype(np.float64)[:, None] * ref.inv_freq64(32)
    np.testing.assert_allclose(cos, np.cos(ang), atol=1e-6)
    np.testing.assert_allclose(sin, np.sin(ang), atol=1e-6)


# ------------------------------------------------------------------ properties


class PropertyTest(parameterized.TestCase):

  @parameterized.parameters("interleaved", "half")
  def test_relative_position_invariance(self, layout):
    """q_m . k_n depends only on m - n (eq. 16), even after shifting by 2^23."""
    q, k = _unit((16, 4, 64), 3), _unit((16, 4, 64), 4)
    pos = np.arange(16, dtype=np.int32) * 37
    base = None
    for shift in (0, 1, 1000, 2**20 + 11, 2**23):
      qr = rope.apply_rotary(q, pos + shift, layout=layout)
      kr = rope.apply_rotary(k, pos + shift, layout=layout)
      scores = np.einsum("qnh,knh->nqk", np.asarray(qr, np.float64), np.asarray(kr, np.float64))
      if base is None:
        base = scores
      np.testing.assert_allclose(scores, base, atol=2e-5, err_msg=f"shift={shift}")

  def test_norm_preservation(self):
    x = _unit((5, 33, 3, 48), 5)
    pos = np.random.default_rng(0).integers(0, 2**24, (5, 33))
    out = rope.apply_rotary(x, pos)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(out, np.float64), axis=-1),
                               np.linalg.norm(x.astype(np.float64), axis=-1), rtol=1e-6)

  @parameterized.parameters("interleaved", "half")
  def test_partial_rotary(self, layout):
    x = _unit((2, 11, 3, 24), 6)
    pos = np.arange(11) + 100
    expected = ref.rotate_interleaved64(x, pos, rotary_dim=8)
    if layout == "half":  # same vectors, features stored in half layout
      x, expected = ref.to_half_layout(x, 8), ref.to_half_layout(expected, 8)
    out = np.asarray(rope.apply_rotary(x, pos, layout=layout, rotary_dim=8))
    np.testing.assert_array_equal(out[..., 8:], x[..., 8:])
    np.testing.assert_allclose(out, expected, atol=TOL)

  def test_gradient_is_transposed_rotation(self):
    x, g = _unit((6, 2, 16), 7), _unit((6, 2, 16), 8)
    pos = np.array([0, 1, 9, 300, 77777, 2**24 - 1], np.int32)
    grad = jax.grad(lambda x: jnp.sum(rope.apply_rotary(x, pos) * g))(jnp.asarray(x))
    for t, m in enumerate(pos):
      np.testing.assert_allclose(grad[t], g[t].astype(np.float64) @ ref.dense_rotation(float(m), 16), atol=TOL)

  def test_vmap_matches_batched(self):
    x = _unit((4, 10, 2, 16), 9)
    pos = np.random.default_rng(1).integers(0, 10**6, (4, 10))
    batched = rope.apply_rotary(x, pos)
    mapped = jax.vmap(lambda xi, pi: rope.apply_rotary(xi, pi))(x, pos)
    np.testing.assert_allclose(mapped, batched, atol=1e-7)

  def test_traced_per_example_positions(self):
    """Positions may be traced and differ per example (left padding, decode offsets)."""
    x = _unit((3, 5, 2, 16), 10)
    offsets = jnp.array([0, 7, 123456])

    @jax.jit
    def f(x, offsets):
      return rope.apply_rotary(x, offsets[:, None] + jnp.arange(5))

    expected = ref.rotate_interleaved64(x, np.asarray(offsets)[:, None] + np.arange(5))
    np.testing.assert_allclose(f(x, offsets), expected, atol=TOL)

  def test_sharded_inputs(self):
    devices = np.array(jax.devices())
    assert len(devices) == 8, "conftest should provide 8 fake CPU devices"
    mesh = jax.sharding.Mesh(devices.reshape(4, 2), ("data", "tensor"))
    x = _unit((8, 12, 4, 32), 11)
    pos = np.random.default_rng(2).integers(0, 2**24, (8, 12)).astype(np.int32)
    xs = jax.device_put(x, jax.NamedSharding(mesh, jax.P("data", None, "tensor", None)))
    ps = jax.device_put(pos, jax.NamedSharding(mesh, jax.P("data", None)))
    out = jax.jit(rope.apply_rotary)(xs, ps)
    assert out.sharding.is_equivalent_to(xs.sharding, x.ndim)
    np.testing.assert_allclose(out, ref.rotate_interleaved64(x, pos), atol=TOL)


class VariantsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters("interleaved", "half")
  def test_jit_and_eager_agree_with_reference(self, layout):
    x = _unit((2, 6, 3, 20), 12)
    pos = np.array([[0, 1, 2, 3, 4, 5], [9, 99, 999, 9999, 99999, 999999]])
    fn = self.variant(lambda x, p: rope.apply_rotary(x, p, layout=layout, rotary_dim=12))
    expected = ref.rotate_interleaved64(x, pos, rotary_dim=12)
    if layout == "half":
      out = fn(ref.to_half_layout(x, 12).astype(np.float32), pos)
      expected = ref.to_half_layout(expected, 12)
    else:
      out = fn(x, pos)
    np.testing.assert_allclose(out, expected, atol=TOL)


# ------------------------------------------------------------------ layouts


class LayoutTest(parameterized.TestCase):

  @parameterized.parameters((32, None), (32, 16), (24, 8))
  def test_rotation_commutes_with_permutation(self, head_dim, rotary_dim):
    x = _unit((2, 9, 3, head_dim), 13)
    pos = np.arange(9) * 1111
    perm = rope.layout_permutation(head_dim, rotary_dim=rotary_dim, src="interleaved", dst="half")
    a = rope.apply_rotary(x, pos, layout="interleaved", rotary_dim=rotary_dim)
    b = rope.apply_rotary(x[..., perm], pos, layout="half", rotary_dim=rotary_dim)
    np.testing.assert_array_equal(np.asarray(a)[..., perm], b)
    back = rope.layout_permutation(head_dim, rotary_dim=rotary_dim, src="half", dst="interleaved")
    np.testing.assert_array_equal(np.asarray(b)[..., back], a)

  @parameterized.parameters((None,), (8,))
  def test_converted_weights_give_identical_scores(self, rotary_dim):
    n, h, d = 3, 16, 24
    rng = np.random.default_rng(14)
    hidden = rng.normal(size=(2, 10, d)).astype(np.float32)
    wq, wk = rng.normal(size=(d, n * h)).astype(np.float32) / 5, rng.normal(size=(d, n, h)).astype(np.float32) / 5
    bq = rng.normal(size=(n * h,)).astype(np.float32)
    pos = np.arange(10) + 40

    def scores(wq, bq, wk, layout):
      q = (hidden @ wq + bq).reshape(2, 10, n, h)
      k = np.einsum("btd,dnh->btnh", hidden, wk)
      q = rope.apply_rotary(q, pos, layout=layout, rotary_dim=rotary_dim)
      k = rope.apply_rotary(k, pos, layout=layout, rotary_dim=rotary_dim)
      return np.einsum("bqnh,bknh->bnqk", np.asarray(q, np.float64), np.asarray(k, np.float64))

    conv = lambda w: rope.convert_qk_layout(w, head_dim=h, src="interleaved", dst="half", rotary_dim=rotary_dim)
    a = scores(wq, bq, wk, "interleaved")
    b = scores(conv(wq), conv(bq), conv(wk), "half")
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    rt = rope.convert_qk_layout(conv(wq), head_dim=h, src="half", dst="interleaved", rotary_dim=rotary_dim)
    np.testing.assert_array_equal(rt, wq)

  def test_half_layout_matches_neox_formula(self):
    """'half' = rotate_half: out = x * [cos, cos] + [-x2, x1] * [sin, sin] (GPT-NeoX/LLaMA)."""
    x = _unit((7, 2, 16), 15).astype(np.float64)
    pos = np.arange(7) * 5
    ang = pos[:, None, None] * ref.inv_freq64(16)
    cos, sin = np.concatenate([np.cos(ang)] * 2, -1), np.concatenate([np.sin(ang)] * 2, -1)
    rot_half = np.concatenate([-x[..., 8:], x[..., :8]], -1)
    np.testing.assert_allclose(rope.apply_rotary(x.astype(np.float32), pos, layout="half"),
                               x * cos + rot_half * sin, atol=TOL)


# ------------------------------------------------------------------ helpers and analysis


class HelperTest(parameterized.TestCase):

  def test_long_term_decay(self):
    np.testing.assert_allclose(rope.long_term_decay([0], 128), [32.5], rtol=1e-12)
    dist = [0, 1, 10, 57, 256]
    np.testing.assert_allclose(rope.long_term_decay(dist, 128),
                               [ref.long_term_decay_loop(m, 128) for m in dist], rtol=1e-10)
    curve = rope.long_term_decay(np.arange(257), 128)
    assert curve[200:].mean() < 0.5 * curve[:10].mean()  # C2: the bound decays with distance

  def test_positions_from_segments(self):
    seg = np.array([[1, 1, 1, 2, 2, 3, 0, 0], [5, 5, 5, 5, 5, 5, 5, 5]])
    np.testing.assert_array_equal(rope.positions_from_segments(seg),
                                  [[0, 1, 2, 0, 1, 0, 0, 1], [0, 1, 2, 3, 4, 5, 6, 7]])
    rng = np.random.default_rng(3)
    seg = np.sort(rng.integers(0, 5, (3, 4, 40)), axis=-1)
    got = np.asarray(jax.jit(rope.positions_from_segments)(seg))
    for idx in np.ndindex(seg.shape[:-1]):
      row, expect, count = seg[idx], [], 0
      for t in range(len(row)):
        count = 0 if t == 0 or row[t] != row[t - 1] else count + 1
        expect.append(count)
      np.testing.assert_array_equal(got[idx], expect)

  def test_positions_from_mask(self):
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(rope.positions_from_mask(mask),
                                  [[0, 0, 0, 1, 2], [0, 1, 2, 0, 0], [0, 1, 2, 3, 4]])

  def test_packed_equals_separate(self):
    """Packing: each segment rotated with reset positions equals rotating it alone."""
    x = _unit((1, 9, 2, 16), 16)
    seg = np.array([[1, 1, 1, 1, 2, 2, 2, 2, 2]])
    packed = np.asarray(rope.apply_rotary(x, rope.positions_from_segments(seg)))
    np.testing.assert_array_equal(packed[:, :4], rope.apply_rotary(x[:, :4], np.arange(4)))
    np.testing.assert_array_equal(packed[:, 4:], rope.apply_rotary(x[:, 4:], np.arange(5)))

  def test_left_padding_equals_unpadded(self):
    x = _unit((1, 6, 2, 16), 17)
    mask = np.array([[0, 0, 1, 1, 1, 1]])
    padded = np.asarray(rope.apply_rotary(x, rope.positions_from_mask(mask)))
    np.testing.assert_array_equal(padded[:, 2:], rope.apply_rotary(x[:, 2:], np.arange(4)))


# ------------------------------------------------------------------ errors


class ErrorTest(parameterized.TestCase):

  def _x(self):
    return jnp.ones((2, 4, 2, 16))

  @parameterized.named_parameters(
      ("odd_rotary_dim", dict(rotary_dim=7), ValueError, "even"),
      ("oversized_rotary_dim", dict(rotary_dim=32), ValueError, "exceeds the head dim"),
      ("zero_rotary_dim", dict(rotary_dim=0), ValueError, "positive even"),
      ("bad_layout", dict(layout="neox"), ValueError, "layout must be one of"),
      ("bad_theta", dict(theta=-1.0), ValueError, "theta"),
      ("unknown_rope_type", dict(scaling={"rope_type": "ntk"}), ValueError, "unknown rope_type"),
      ("no_rope_type", dict(scaling={"factor": 2.0}), ValueError, "rope_type"),
      ("missing_factor", dict(scaling={"rope_type": "linear"}), ValueError, "missing required key"),
      ("missing_dynamic_len", dict(scaling={"rope_type": "dynamic", "factor": 2.0}), ValueError,
       "max_position_embeddings"),
      ("missing_llama3_keys", dict(scaling={"rope_type": "llama3", "factor": 8.0,
                                            "original_max_position_embeddings": 8192}), ValueError,
       "low_freq_factor"),
      ("missing_yarn_length", dict(scaling={"rope_type": "yarn", "factor": 4.0}), ValueError,
       "original_max_position_embeddings"),
      ("wrong_longrope_len", dict(scaling={"rope_type": "longrope", "short_factor": [1.0] * 3,
                                           "long_factor": [2.0] * 3, "original_max_position_embeddings": 4096,
                                           "factor": 4.0}), ValueError, "entries"),
      ("theta_mismatch", dict(scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0}),
       ValueError, "disagrees with theta"),
      ("scaling_not_dict", dict(scaling=4.0), TypeError, "scaling must be None or a dict"),
  )
  def test_bad_arguments(self, kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
      rope.apply_rotary(self._x(), jnp.arange(4), **kwargs)

  def test_odd_head_dim_names_the_head_dim_not_rotary_dim(self):
    """rotary_dim was never passed: the error names x's head dim and how to fix it."""
    with pytest.raises(ValueError, match=r"x's head dim H=15 .*odd") as e:
      rope.apply_rotary(jnp.ones((2, 4, 2, 15)), jnp.arange(4))
    assert "rotary_dim=" not in str(e.value).split(";")[0]

  def test_integer_x(self):
    with pytest.raises(TypeError, match="floating-point"):
      rope.apply_rotary(jnp.ones((4, 2, 16), jnp.int32), jnp.arange(4))

  def test_mismatched_positions(self):
    with pytest.raises(ValueError, match="does not broadcast"):
      rope.apply_rotary(self._x(), jnp.arange(5))
    with pytest.raises(ValueError, match=r"\[B, N, T, H\]"):  # HF's [B, N, T, H] layout, positions [B, T]
      rope.apply_rotary(jnp.ones((2, 3, 4, 16)), jnp.zeros((2, 4), jnp.int32))

  def test_bool_positions_and_low_rank_x(self):
    with pytest.raises(TypeError, match="positions must be"):
      rope.apply_rotary(self._x(), jnp.ones((4,), bool))
    with pytest.raises(ValueError, match=r"\[\.\.\., T, N, H\]"):
      rope.apply_rotary(jnp.ones((4, 16)), jnp.arange(4))

  def test_errors_raise_at_trace_time(self):
    with pytest.raises(ValueError, match="even"):
      jax.jit(lambda x: rope.apply_rotary(x, jnp.arange(4), rotary_dim=5)).lower(self._x())

  def test_traced_theta(self):
    with pytest.raises(TypeError, match="static Python number"):
      jax.jit(lambda t: rope.apply_rotary(self._x(), jnp.arange(4), theta=t))(10000.0)

  def test_traced_seq_len_rejected(self):
    with pytest.raises(TypeError, match="seq_len must be a static"):
      rope.rope_frequencies(16, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 8},
                            seq_len=jnp.int32(9))
