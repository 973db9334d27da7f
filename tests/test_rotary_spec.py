"""The RoPE spec (positional.RotaryConfig) is the one way RoPE settings travel.

- the loose keywords of the public functions build the same spec (and never mix with one);
- the layers and decode caches carry positions with a trailing axis ([B, T, A], a spec's
  `position_shape`) without knowing it: a stand-in two-axis spec that rotates by its first
  axis gives exactly the logits of the plain spec, full forward and cached decoding alike.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer_jax import attention, positional
from roformer_jax.training import checkpoints
from roformer_jax.models import CausalLM, ModelConfig
from roformer_jax.positional import RotaryConfig


def test_of_builds_the_spec_from_loose_keywords_or_takes_one():
  spec = RotaryConfig(theta=500.0, layout="half", rotary_dim=4)
  assert RotaryConfig.of(spec) is spec
  assert RotaryConfig.of(None, theta=500.0, layout="half", rotary_dim=4, scaling=None) == spec
  assert RotaryConfig.of() == RotaryConfig()
  with pytest.raises(TypeError, match="not both"):
    RotaryConfig.of(spec, theta=10.0)
  with pytest.raises(TypeError, match="unknown RoPE settings"):
    RotaryConfig.of(None, base=10.0)
  assert hash(spec) == hash(RotaryConfig(theta=500.0, layout="half", rotary_dim=4))
  assert spec.changed() == {"theta": 500.0, "layout": "half", "rotary_dim": 4}


def test_model_config_builds_its_spec_from_its_keys():
  cfg = ModelConfig(rope_theta=500.0, rope_layout="half", rotary_dim=16, rope_exact=False,
                    rope_scaling={"rope_type": "linear", "factor": 2.0})
  assert cfg.rotary == RotaryConfig(500.0, "half", 16, {"rope_type": "linear", "factor": 2.0}, False)
  # the fields with a ModelConfig key of their own; every other field goes through ModelConfig.rope
  assert set(positional.MODEL_CONFIG_KEYS) < {f.name for f in dataclasses.fields(RotaryConfig)}
  assert checkpoints._ROPE_FIELDS == ("rope_theta", "rope_scaling")


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_takes_the_spec_or_its_keywords(causal):
  q, k, v = (jax.random.normal(jax.random.key(i), (2, 6, 2, 8)) for i in range(3))
  pos = jnp.arange(6)
  kw = dict(q_positions=pos, k_positions=pos, causal=causal)
  spec = RotaryConfig(theta=100.0, layout="half", rotary_dim=4)
  got = attention.linear_attention(q, k, v, rotary=spec, **kw)
  loose = attention.linear_attention(q, k, v, theta=100.0, layout="half", rotary_dim=4, **kw)
  np.testing.assert_array_equal(got, loose)
  assert not np.allclose(got, attention.linear_attention(q, k, v, **kw))
  with pytest.raises(TypeError, match="not both"):
    attention.linear_attention(q, k, v, rotary=spec, theta=100.0, **kw)


@pytest.mark.parametrize("kind,rope", [
    ("softmax", {"sections": (2, 1, 1)}),  # M-RoPE, Qwen2-VL's chunked sections, head size 8
    ("softmax", {"sections": (2, 1, 1), "section_layout": "interleaved"}),  # Qwen3-VL's layout
    ("linear", {"sections": (4, 0)}),
])
def test_layers_and_caches_carry_a_trailing_position_axis(kind, rope):
  """Text-only tokens have the same position on every axis, where multi-axis RoPE is the 1-D
  rotation: the model, full and cached, gives the 1-D model's outputs bit for bit, with
  positions [..., T, A] in the layers and [B, A] in the cache."""
  cfg = ModelConfig(vocab_size=23, d_model=16, num_layers=2, num_heads=2, d_ff=32, dropout=0.0,
                    attention_dropout=0.0, type_vocab_size=0, attention=kind, init_std=0.5)
  model = CausalLM(cfg, rngs=nnx.Rngs(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 7), 1, 23)
  mask = jnp.array([[False, False, True, True, True, True, True], [True] * 7])  # left padding
  plain = model(tokens, attention_mask=mask)
  cache = model.init_cache(2, 10)
  first, cache = model.decode_step(tokens[:, :4], cache, token_mask=mask[:, :4])
  rest, cache = model.decode_step(tokens[:, 4:5], cache)
  assert cache["position"].shape == (2,)

  model2 = CausalLM(cfg.replace(rope=rope), rngs=nnx.Rngs(0))
  a = len(rope["sections"])
  np.testing.assert_array_equal(model2(tokens, attention_mask=mask), plain)
  cache2 = model2.init_cache(2, 10)
  assert cache2["position"].shape == (2, a)
  first2, cache2 = model2.decode_step(tokens[:, :4], cache2, token_mask=mask[:, :4])
  rest2, cache2 = model2.decode_step(tokens[:, 4:5], cache2)
  np.testing.assert_array_equal(first2, first)
  np.testing.assert_array_equal(rest2, rest)
  np.testing.assert_array_equal(cache2["position"], np.stack([cache["position"]] * a, axis=-1))


def test_a_new_spec_field_travels_from_the_config_with_no_model_config_edit():
  """ModelConfig.rope carries every spec field without a key of its own, so a new field (here
  the multi-axis sections, added after ModelConfig) is a field of the spec (rope/spec.py) and
  its math (the rope package), nothing else."""
  cfg = ModelConfig(rope={"sections": [16, 16]}, rope_theta=500.0)  # head size 64: 32 pairs
  assert cfg.rotary == RotaryConfig(theta=500.0, sections=(16, 16))
  assert cfg.rotary.position_shape == (2,)
  assert hash(cfg) == hash(ModelConfig(rope={"sections": (16, 16)}, rope_theta=500.0))
  with pytest.raises(ValueError, match=r"sections=\(2, 2\) give 4 rotated pairs, but the rotary dim has R / 2 = 32"):
    ModelConfig(rope={"sections": (2, 2)})
  assert positional.config_key("sections") == "rope.sections"
  assert positional.config_key("theta") == "rope_theta"
  with pytest.raises(ValueError, match=r"set them by their own keys \['rope_theta'\]"):
    ModelConfig(rope={"theta": 5.0})
  with pytest.raises(ValueError, match=r"\['axes'\] are not RoPE spec fields"):
    ModelConfig(rope={"axes": 3})


def test_init_from_compares_the_spec_whole():
  """A fine-tuning run may change the RETUNABLE spec fields; any other spec field, a new one
  set through ModelConfig.rope included, must match the pre-trained model's."""
  a, b = ModelConfig(rope={"sections": (16, 16)}), ModelConfig(rope={"sections": (8, 24)}, rope_theta=5e5)
  with pytest.raises(checkpoints.InitFromError, match=r"rope\.sections: pre-trained \(16, 16\) vs config \(8, 24\)"):
    checkpoints._check_same_architecture(a, b, "src")
  assert checkpoints._rope_changes(a, b, RotaryConfig.RETUNABLE) == {"rope_theta": (10000.0, 500000.0)}
  checkpoints._check_same_architecture(a, a.replace(rope_theta=5e5), "src")  # retunable: allowed


def _turned(x, positions, theta, layout, sign):
  """float64 NumPy: every pair of x [T, N, H] turned by sign * p * theta ** (-2i / H)."""
  h = x.shape[-1]
  ang = sign * positions[:, None, None] * theta ** (-np.arange(0, h, 2) / h)
  a, b = (x[..., 0::2], x[..., 1::2]) if layout == "interleaved" else (x[..., :h // 2], x[..., h // 2:])
  ra, rb = a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)
  if layout == "half":
    return np.concatenate([ra, rb], axis=-1)
  out = np.empty_like(x)
  out[..., 0::2], out[..., 1::2] = ra, rb
  return out


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_direction_minus_one_turns_every_pair_the_other_way(layout):
  """direction=-1 (nanochat): each pair turns by -phi, R(-m theta) of eq. (15) in float64, on the
  fused path (apply) and the per-layer tables (cos_sin + rotate) alike."""
  from roformer_jax import rope

  dim, positions = 16, np.array([[0, 1, 5, 300, 4097]])
  x = np.random.default_rng(0).standard_normal((1, 5, 2, dim)).astype(np.float32)
  want = _turned(x[0].astype(np.float64), positions[0].astype(np.float64), 500.0, layout, -1)
  if layout == "interleaved":  # the reference is eq. (15) at -m
    eq15 = np.stack([x[0, t].astype(np.float64) @ rope.rotation_matrix(-p, dim, 500.0).T
                     for t, p in enumerate(positions[0])])
    np.testing.assert_allclose(want, eq15, atol=1e-12)
  spec = rope.RotaryConfig(theta=500.0, layout=layout, direction=-1)
  got = np.asarray(spec.apply(x, positions))[0]
  np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
  assert not np.allclose(got, _turned(x[0].astype(np.float64), positions[0], 500.0, layout, 1), atol=1e-2)
  tables = np.asarray(spec.rotate(x, spec.cos_sin(positions, dim)))[0]
  np.testing.assert_allclose(tables, got, rtol=1e-6, atol=1e-6)
  with pytest.raises(ValueError, match="direction=0 must be 1 or -1"):
    rope.RotaryConfig(direction=0)


def test_q_temperature_scales_the_query_after_its_rotation_and_not_the_key():
  """q_temperature=(beta, L) (Ministral 3's llama_4_scaling_beta): q is rotated and then scaled
  by 1 + beta * log(1 + floor(n / L)), float64 NumPy; k only rotated. The fused apply, the
  per-layer tables and the attention's rotate_qkv agree; the scale is exact at bucket edges."""
  from roformer_jax import rope
  from roformer_jax.attention.softmax import rotate_qkv

  dim, beta, length = 16, 0.1, 16
  positions = np.array([[0, 1, 15, 16, 17, 31, 32, 1000, 16383, 16384]])
  x = np.random.default_rng(1).standard_normal((1, positions.shape[1], 2, dim)).astype(np.float32)
  turned = _turned(x[0].astype(np.float64), positions[0].astype(np.float64), 1e4, "half", 1)
  scale = 1 + beta * np.log1p(np.floor(positions[0] / length))
  spec = rope.RotaryConfig(layout="half", q_temperature=(beta, length))
  np.testing.assert_allclose(np.asarray(spec.query_temperature(positions))[0], scale, rtol=1e-6)
  q, k = np.asarray(spec.apply(x, positions))[0], np.asarray(spec.apply(x, positions, key=True))[0]
  np.testing.assert_allclose(q, turned * scale[:, None, None], rtol=2e-5, atol=2e-5)
  np.testing.assert_allclose(k, turned, rtol=2e-5, atol=2e-5)
  assert spec.needs_key_table
  tables = np.asarray(spec.rotate(x, spec.cos_sin(positions, dim)))[0]
  np.testing.assert_allclose(tables, q, rtol=1e-6, atol=1e-6)
  rq, rk, _ = rotate_qkv(x, x, x, positions, positions, spec, False)
  np.testing.assert_allclose(np.asarray(rq)[0], q, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(np.asarray(rk)[0], k, rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(rope.RotaryConfig().query_temperature(positions)), 1.0)
  with pytest.raises(ValueError, match=r"q_temperature=\(0.1, 0\) must be \(beta, length\)"):
    rope.RotaryConfig(q_temperature=(0.1, 0))
  with pytest.raises(ValueError, match="every channel must rotate; got rotary_dim=8"):
    rope.RotaryConfig(rotary_dim=8, q_temperature=(0.1, 16))
