"""The spec's last-R channels, rotated values and output un-rotation (issue 39's DeepSeek-V4 mechanisms).

- `channels="last"` rotates the trailing R features of each head, checked against the dense
  rotation matrix of eq. (15) in float64 NumPy on those features (both pairings);
- `unrotate` is the inverse rotation: R(n)^-1 R(n) x = x, and R(n)^-1 is eq. (15)'s matrix at -n;
- `rotate_value` + `unrotate_output` make attention's output a function of relative positions
  only (shifting every position by c changes nothing; without `unrotate_output` it does), and
  equal DeepSeek-V4's own rotary module and apply composed as its attention composes them
  (tests/golden/rope_output_rotation.npz, scripts/make_rope_output_rotation_golden.py);
- the layer's full forward and its cached decoding agree under that spec, and settings it
  cannot honour are refused by name.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer_jax import attention
from roformer_jax.positional import RotaryConfig
from tests.reference import dense_rotation, from_half_layout, to_half_layout

GOLDEN = np.load(Path(__file__).parent / "golden" / "rope_output_rotation.npz")


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_the_last_r_channels_rotate_as_eq_15_and_the_rest_pass(layout):
  head, rd, positions = 12, 8, np.array([0, 1, 5, 1000, 32767])
  x = np.random.default_rng(0).standard_normal((1, len(positions), 2, head))
  spec = RotaryConfig(theta=500.0, layout=layout, rotary_dim=rd, channels="last")
  got = np.asarray(spec.apply(jnp.asarray(x, jnp.float32), jnp.asarray(positions)[None]))
  tail = x[..., head - rd:] if layout == "interleaved" else from_half_layout(x[..., head - rd:])
  want_tail = np.einsum("tij,btnj->btni", np.stack([dense_rotation(m, rd, 500.0) for m in positions]), tail)
  want_tail = want_tail if layout == "interleaved" else to_half_layout(want_tail)
  np.testing.assert_array_equal(got[..., :head - rd], x[..., :head - rd].astype(np.float32))
  np.testing.assert_allclose(got[..., head - rd:], want_tail, atol=2e-6, rtol=0)


def test_unrotate_is_the_inverse_rotation():
  spec = RotaryConfig(theta=10000.0, rotary_dim=16, channels="last", direction=-1)
  positions = jnp.asarray([[0, 3, 77, 30000]])
  x = jax.random.normal(jax.random.key(0), (1, 4, 3, 24))
  np.testing.assert_allclose(spec.unrotate(spec.apply(x, positions), positions), x, atol=2e-6, rtol=0)
  plain = RotaryConfig(theta=100.0)
  np.testing.assert_allclose(plain.unrotate(x, positions), plain.apply(x, -positions), atol=2e-6, rtol=0)


def _attend(spec, q, kv, positions):
  return attention.dot_product_attention(q, kv, kv, q_positions=positions, k_positions=positions, rotary=spec,
                                         is_causal=True, implementation="xla")


def test_rotated_values_and_unrotated_output_are_relative_and_equal_deepseek_v4():
  g = GOLDEN
  spec = RotaryConfig(theta=float(g["theta"]), layout="interleaved", rotary_dim=int(g["rotary_dim"]),
                      channels="last", rotate_value=True, unrotate_output=True)
  q = jnp.asarray(g["q"].transpose(0, 2, 1, 3), jnp.float32)  # its [B, N, T, D] -> ours [B, T, N, D]
  kv = jnp.asarray(g["kv"].transpose(0, 2, 1, 3), jnp.float32)
  positions = jnp.asarray(g["positions"])[None]
  np.testing.assert_allclose(spec.apply(q, positions), g["q_rot"].transpose(0, 2, 1, 3), atol=5e-6, rtol=0)
  out = _attend(spec, q, kv, positions)
  np.testing.assert_allclose(out, g["out"].transpose(0, 2, 1, 3), atol=5e-5, rtol=0)
  shifted = _attend(spec, q, kv, positions + 12345)
  np.testing.assert_allclose(shifted, out, atol=5e-5, rtol=0)
  # without the un-rotation the output carries absolute positions: the shift shows
  values_only = RotaryConfig(theta=float(g["theta"]), rotary_dim=int(g["rotary_dim"]), channels="last",
                             rotate_value=True)
  moved = np.abs(np.asarray(_attend(values_only, q, kv, positions + 12345) - _attend(values_only, q, kv, positions)))
  assert moved.max() > 0.1


def test_the_layer_decodes_as_it_runs_the_full_sequence_under_output_unrotation():
  spec = RotaryConfig(theta=1000.0, rotary_dim=8, channels="last", rotate_value=True, unrotate_output=True)
  layer = attention.MultiHeadAttention(32, 2, rotary=spec, causal=True, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (1, 6, 32))
  positions = jnp.arange(6)[None] + 40
  full = layer(x, positions=positions)
  cache = layer.init_cache(1, 6)
  valid = jnp.ones((1, 6), bool)
  steps = []
  for i in range(6):
    y, cache = layer.decode(x[:, i:i + 1], cache, positions=positions[:, i:i + 1], index=jnp.int32(i), kv_valid=valid)
    steps.append(y)
  np.testing.assert_allclose(jnp.concatenate(steps, 1), full, atol=2e-5, rtol=0)
  plain = attention.MultiHeadAttention(32, 2, rotary=RotaryConfig(theta=1000.0, rotary_dim=8, channels="last"),
                                       causal=True, rngs=nnx.Rngs(0))
  assert float(jnp.abs(plain(x, positions=positions) - full).max()) > 1e-3  # the fields change the layer


def test_settings_the_spec_cannot_honour_are_refused_by_name():
  with pytest.raises(ValueError, match="channels='middle'"):
    RotaryConfig(channels="middle")
  with pytest.raises(ValueError, match="rotate_value=True too"):
    RotaryConfig(unrotate_output=True)
  with pytest.raises(ValueError, match="length-dependent"):
    RotaryConfig(rotate_value=True, unrotate_output=True, scaling={"rope_type": "dynamic", "factor": 2.0})
  with pytest.raises(ValueError, match="kind='softmax'"):
    attention.MultiHeadAttention(16, 2, kind="linear", rotary=RotaryConfig(rotate_value=True), rngs=nnx.Rngs(0))
