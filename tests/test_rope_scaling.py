"""Length-dependent scalings in apply_rotary: static seq_len vs one derived from positions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roformer_jax import rope
from roformer_jax.rope import float2
from tests import reference as ref

LONGROPE = {"rope_type": "longrope", "original_max_position_embeddings": 64, "max_position_embeddings": 1024,
            "short_factor": list(np.linspace(1.0, 1.1, 8)), "long_factor": list(np.linspace(1.0, 8.0, 8))}
DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 64}


def _x(t):
  return np.random.default_rng(t).uniform(-1, 1, (2, t, 2, 16)).astype(np.float32)


@pytest.mark.parametrize("t, long", [(40, False), (64, False), (65, True), (300, True)])
def test_longrope_picks_factors_from_traced_positions(t, long):
  x, pos = _x(t), jnp.arange(t)
  derived = jax.jit(lambda x, p: rope.apply_rotary(x, p, scaling=LONGROPE))(x, pos)
  static = rope.apply_rotary(x, pos, scaling=LONGROPE, seq_len=t)
  np.testing.assert_allclose(derived, static, atol=1e-6)
  inv, factor = rope.rope_frequencies(16, scaling=LONGROPE, seq_len=65 if long else 64)
  expected = ref.rotate_interleaved64(x, np.arange(t), inv_freq=np.asarray(inv, np.float64),
                                      attention_factor=factor)
  np.testing.assert_allclose(derived, expected, atol=1e-5)


@pytest.mark.parametrize("t", [30, 64, 100, 500])
def test_dynamic_traced_length_matches_static(t):
  x, pos = _x(t), jnp.arange(t)
  derived = jax.jit(lambda x, p: rope.apply_rotary(x, p, scaling=DYNAMIC))(x, pos)
  static = rope.apply_rotary(x, pos, scaling=DYNAMIC, seq_len=t)
  np.testing.assert_allclose(derived, static, atol=1e-6)  # both phase-exact
  if t <= 64:  # no longer than max_position_embeddings: the static words, bit for bit
    np.testing.assert_array_equal(derived, rope.apply_rotary(x, pos))


def _dynamic_ntk64(x, positions, length, dim, theta, factor, mpe):
  """Dynamic NTK in float64 NumPy (transformers' formula, not ours): the base grows with the length."""
  base = theta * (factor * max(length, mpe) / mpe - (factor - 1)) ** (dim / (dim - 2))
  return ref.rotate_interleaved64(x, positions, inv_freq=base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim))


def test_dynamic_traced_length_is_phase_exact_over_5000_tokens():
  """Issue 37 item 10: a length taken from traced positions (as a model does) gives the float64
  rotation to the static path's 2e-5 (was 2.4e-4 to 4.1e-4: the float32 product)."""
  dim, theta, factor, mpe, t = 128, 10000.0, 2.0, 2048, 5000
  scaling = {"rope_type": "dynamic", "factor": factor, "max_position_embeddings": mpe}
  x = np.random.default_rng(0).uniform(-1, 1, (3, t, 1, dim)).astype(np.float32)
  # Row lengths 5000, 3950 (left padding at position 0) and 1000 (<= mpe: the base stays theta).
  pos = np.stack([np.arange(t), np.maximum(np.arange(t) - 1050, 0), np.maximum(np.arange(t) - 4000, 0)])
  out = np.asarray(jax.jit(lambda x, p: rope.apply_rotary(x, p, theta, scaling=scaling))(x, pos))
  for row, length in enumerate((5000, 3950, 1000)):
    want = _dynamic_ntk64(x[row], pos[row], length, dim, theta, factor, mpe)
    np.testing.assert_allclose(out[row], want, atol=2e-5, rtol=0, err_msg=f"row {row}, length {length}")


def test_dynamic_traced_length_is_phase_exact_up_to_2_24():
  """cos/sin at sampled positions up to 2^24, rows of different lengths, against float64."""
  dim, mpe = 64, 4096
  scaling = {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": mpe}
  pos = np.sort(np.random.default_rng(1).integers(0, 2**24, (3, 256)), axis=-1)
  pos[:, -1] = [2**24 - 1, 2**20, 100]  # lengths 2^24, 2^20 + 1, and a short row (left as theta)
  pos[2] = np.minimum(pos[2], 100)
  cos, sin = jax.jit(lambda p: rope.rotary_cos_sin(p, dim, scaling=scaling))(pos.astype(np.int32))
  base = 1e4 * (4.0 * np.maximum(pos.max(-1) + 1, mpe) / mpe - 3.0) ** (dim / (dim - 2))
  angles = pos[..., None].astype(np.float64) * base[:, None, None] ** (-np.arange(0, dim, 2) / dim)
  np.testing.assert_allclose(cos, np.cos(angles), atol=1e-6, rtol=0)
  np.testing.assert_allclose(sin, np.sin(angles), atol=1e-6, rtol=0)


def test_float2_exp_log_and_words_against_float64():
  rng = np.random.default_rng(0)
  x = rng.uniform(-40.0, 0.5, 4000)
  hi, lo = float2.const(x)
  x = hi.astype(np.float64) + lo  # the pair's exact value
  e = jax.jit(lambda a, b: float2.exp((a, b)))(hi, lo)
  rel = np.abs(np.asarray(e[0], np.float64) + np.asarray(e[1], np.float64) - np.exp(x)) / np.exp(x)
  assert np.all(rel <= 1e-14 * (1 + np.abs(x))), rel.max()
  s = 1.0 + rng.uniform(0.0, 300.0, 4000)
  hi, lo = float2.const(s)
  y = jax.jit(lambda a, b: float2.log((a, b)))(hi, lo)
  y = np.asarray(y[0], np.float64) + np.asarray(y[1], np.float64)
  np.testing.assert_allclose(y, np.log(hi.astype(np.float64) + lo), atol=5e-14, rtol=0)
  f = np.concatenate([[0.0, 1 / (2 * np.pi), 1e-17, 0.5 - 2**-40], rng.uniform(0.0, 0.16, 4000)])
  a, c = jax.jit(lambda a, b: float2.turn_words((a, b)))(*float2.const(f))
  words = np.asarray(a, np.float64) * 2.0**32 + np.asarray(c, np.float64)  # f in units of 2^-64
  np.testing.assert_allclose(words, f * 2.0**64, rtol=0, atol=2.0**-48 * 2.0**64)


def test_dynamic_grows_base_only_beyond_max_len():
  base, _ = rope.rope_frequencies(16)
  short, _ = rope.rope_frequencies(16, scaling=DYNAMIC, seq_len=64)
  long, _ = rope.rope_frequencies(16, scaling=DYNAMIC, seq_len=128)
  np.testing.assert_array_equal(short, base)
  assert np.all(np.asarray(long)[1:] < np.asarray(base)[1:])
  # closed form: base' = theta * (factor * L / max - (factor - 1)) ** (d / (d - 2))
  theta2 = 10000.0 * (2.0 * 128 / 64 - 1.0) ** (16 / 14)
  np.testing.assert_allclose(long, theta2 ** (-np.arange(0, 16, 2) / 16), rtol=1e-6)


def test_attention_factor_scales_cos_and_sin():
  yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
  x = _x(5)
  _, factor = rope.rope_frequencies(16, scaling=yarn)
  assert factor == pytest.approx(0.1 * np.log(4.0) + 1.0)
  out = rope.apply_rotary(x, jnp.arange(5), scaling=yarn)
  np.testing.assert_allclose(np.linalg.norm(out, axis=-1), factor * np.linalg.norm(x, axis=-1), rtol=1e-5)
