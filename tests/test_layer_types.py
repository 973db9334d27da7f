"""Per-layer attention in the models (issue 26): layer types with their own RoPE (local/global
theta, xPos, p-RoPE), layers without RoPE (NoPE) with Llama 4's q temperature, and local
windows; each against an independent construction, and cached decoding against the full
forward for their combinations."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer_jax import hf
from roformer_jax.attention.layer import temperature_scale
from roformer_jax.models import CausalLM, ModelConfig, RoFormerForMaskedLM
from roformer_jax.rope import RotaryConfig
from roformer_jax.training import checkpoints

BASE = dict(vocab_size=29, d_model=16, num_layers=4, num_heads=2, d_ff=32, dropout=0.0, attention_dropout=0.0,
            type_vocab_size=0, init_std=0.5, norm="pre")
TOKENS = jax.random.randint(jax.random.key(1), (2, 11), 1, 29)
MASK = jnp.array([[False, False, False] + [True] * 8, [True] * 11])  # a left-padded row and a full one


def lm(**kw):
  return CausalLM(ModelConfig(**{**BASE, **kw}), rngs=nnx.Rngs(0))


def test_layer_specs_come_from_their_types():
  cfg = ModelConfig(**BASE, rope_theta=1e6, layer_types=("local", "local", "local", "global"),
                    layer_settings={"local": {"rope": {"theta": 1e4}}, "global": {"rope": "none"}})
  assert [cfg.layer_type(i) for i in range(4)] == ["local", "local", "local", "global"]
  assert cfg.layer_rotary(0) == RotaryConfig(theta=1e4) and cfg.layer_rotary(3) is None
  assert hash(cfg) == hash(ModelConfig(**BASE, rope_theta=1e6, layer_types=["local", "local", "local", "global"],
                                       layer_settings={"global": {"rope": "none"}, "local": {"rope": {"theta": 1e4}}}))
  pattern = ModelConfig(**{**BASE, "num_layers": 6}, layer_types=("a", "b"), layer_settings={"b": {"window": 3}})
  assert [pattern.layer_window(i) for i in range(6)] == [None, 3] * 3


@pytest.mark.parametrize("settings,match", [
    ({"c": {"window": 2}}, "layer type 'c', which layer_types"),
    ({"a": {"windw": 2}}, r"unknown keys \['windw'\]"),
    ({"a": {"window": 0}}, "must be a positive int"),
    ({"a": {"rope": {"thet": 2.0}}}, r"sets \['thet'\], which are not RoPE spec fields"),
    ({"a": {"rope": {"sections": (2, 2)}}}, "every layer reads the same positions"),
    ({"a": {"attn_temperature": {"scale": 0.1}}}, "must be {'scale'"),
])
def test_bad_layer_settings_are_refused_at_config_time(settings, match):
  with pytest.raises(ValueError, match=match):
    ModelConfig(**BASE, layer_types=("a", "b"), layer_settings=settings)


def test_same_settings_for_every_type_are_the_plain_model():
  plain = lm(rope_theta=1e6)
  typed = lm(rope_theta=1e4, layer_types=("x", "y"), layer_settings={"x": {"rope": {"theta": 1e6}},
                                                                     "y": {"rope": {"theta": 1e6}}})
  np.testing.assert_array_equal(typed(TOKENS, attention_mask=MASK), plain(TOKENS, attention_mask=MASK))


def test_nope_layers_are_the_no_position_model():
  nope = lm(layer_types=("n",), layer_settings={"n": {"rope": "none"}})
  none = lm(position="none")
  np.testing.assert_array_equal(nope(TOKENS, attention_mask=MASK), none(TOKENS, attention_mask=MASK))
  mixed = lm(layer_types=("r", "r", "r", "n"), layer_settings={"n": {"rope": "none"}})
  assert not np.allclose(mixed(TOKENS, attention_mask=MASK), none(TOKENS, attention_mask=MASK))
  assert [layer.attention.use_rope for layer in mixed.layers] == [True, True, True, False]


def test_local_and_global_theta_match_a_model_assembled_by_hand():
  """Layer i of the typed model computes what a plain model with that layer's theta does."""
  typed = lm(layer_types=("local", "global"), layer_settings={"local": {"rope": {"theta": 1e4}},
                                                              "global": {"rope": {"theta": 1e6}}})
  assert [layer.attention.rotary.theta for layer in typed.layers] == [1e4, 1e6, 1e4, 1e6]
  x = jax.random.normal(jax.random.key(3), (2, 11, 16))
  pos = jnp.broadcast_to(jnp.arange(11), (2, 11))
  for i, layer in enumerate(typed.layers):
    plain = lm(rope_theta=1e4 if i % 2 == 0 else 1e6)
    nnx.update(plain.layers[i], nnx.state(layer))
    np.testing.assert_array_equal(layer(x, positions=pos), plain.layers[i](x, positions=pos))


def test_temperature_scale_buckets_on_integer_positions():
  q = jnp.ones((1, 6, 1, 2), jnp.bfloat16)
  pos = jnp.array([[0, 8190, 8191, 16382, 16383, 2**24 + 8191]])
  got = np.asarray(temperature_scale(q, pos, scale=0.1, floor=8192), np.float64)[0, :, 0, 0]
  want = 1 + 0.1 * np.log1p(np.floor((np.array([0, 8190, 8191, 16382, 16383, 2**24 + 8191]) + 1) / 8192))
  np.testing.assert_allclose(got, want, rtol=1e-2)  # bf16 output
  assert got[1] == 1.0 and got[2] > 1.0  # the first bucket starts at position 8191, in bf16 too


COMBOS = {
    "local_global": dict(layer_types=("local", "local", "global"),
                         layer_settings={"local": {"rope": {"theta": 1e4}}, "global": {"rope": {"theta": 1e6}}}),
    "nope_temperature": dict(layer_types=("r", "r", "r", "n"),
                             layer_settings={"n": {"rope": "none", "attn_temperature": {"scale": 0.5, "floor": 3}}}),
    "xpos": dict(rope={"xpos_scale_base": 16.0, "xpos_center": 6}),
    "p_rope": dict(rope_scaling={"rope_type": "proportional", "partial_rotary_factor": 0.5}, rope_layout="half"),
    "xpos_nope_local": dict(rope={"xpos_scale_base": 16.0, "xpos_center": 6}, layer_types=("a", "b"),
                            layer_settings={"a": {"rope": {"theta": 100.0}}, "b": {"rope": "none"}}),
    "window": dict(layer_types=("local", "local", "global"),
                   layer_settings={"local": {"window": 3, "rope": {"theta": 1e4}}, "global": {"rope": {"theta": 1e6}}}),
    "window_xpos_nope": dict(rope={"xpos_scale_base": 16.0, "xpos_center": 6}, layer_types=("w", "n"),
                             layer_settings={"w": {"window": 2}, "n": {"rope": "none", "window": 5}}),
    "window_chunked": dict(layer_types=("w",), layer_settings={"w": {"window": 4}}, attention_implementation="chunked"),
}


@pytest.mark.parametrize("name", sorted(COMBOS))
def test_cached_decoding_equals_the_full_forward(name):
  """Step by step, each prediction equals the full forward over that prefix (left padding
  included), to 1e-5."""
  model = lm(**COMBOS[name])
  cache = model.init_cache(2, 16)
  logits, cache = model.decode_step(TOKENS[:, :4], cache, token_mask=MASK[:, :4])
  full = model(TOKENS[:, :4], attention_mask=MASK[:, :4])
  np.testing.assert_allclose(logits[1], full[1], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(logits[0, 3], full[0, 3], rtol=1e-5, atol=1e-5)
  # No combination here depends on the sequence's length and every layer is causal, so
  # position i of the whole sequence's forward is the forward of the prefix ending at i: one
  # forward (one shape) instead of one per prefix length. (Length-dependent scalings are
  # checked prefix by prefix in tests/test_models.py.)
  whole = model(TOKENS, attention_mask=MASK)
  for i in range(4, 11):
    step, cache = model.decode_step(TOKENS[:, i:i + 1], cache)
    np.testing.assert_allclose(step[:, 0], whole[:, i], rtol=1e-5, atol=1e-5)


def test_hf_export_refuses_layer_settings():
  cfg = ModelConfig(vocab_size=40, d_model=16, num_layers=2, num_heads=2, d_ff=24, max_position=64,
                    layer_types=("a", "b"), layer_settings={"b": {"rope": "none"}})
  model = nnx.eval_shape(lambda: RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0)))
  with pytest.raises(hf.CheckpointError, match=r"layer_settings=\{'b': \{'rope': 'none'\}\}"):
    hf.save_pretrained(model, "/nonexistent/out")


def test_init_from_allows_per_layer_theta_and_refuses_other_layer_changes():
  kw = dict(**BASE, layer_types=("l", "g"))
  a = ModelConfig(**kw, layer_settings={"l": {"rope": {"theta": 1e4}, "window": 4}})
  checkpoints._check_same_architecture(a, dataclasses.replace(a, layer_settings=None).replace(
      layer_settings={"l": {"rope": {"theta": 5e5}, "window": 4}}), "src")  # theta: retunable
  for other, match in (({"l": {"rope": {"theta": 1e4}}}, r"layer 0 window: pre-trained 4 vs config None"),
                       ({"l": {"rope": "none", "window": 4}}, r"layer 0 rope: pre-trained 'rope' vs config 'none'"),
                       ({"l": {"rope": {"layout": "half"}, "window": 4}}, r"layer 0 rope\.layout")):
    with pytest.raises(checkpoints.InitFromError, match=match):
      checkpoints._check_same_architecture(a, a.replace(layer_settings=other), "src")


def test_window_layers_keep_o_window_decode_memory_and_match_a_dense_window_mask():
  model = lm(layer_types=("w", "g"), layer_settings={"w": {"window": 3}})
  cache = model.init_cache(2, 64)
  assert [c["self"]["k"].shape[1] for c in cache["layers"]] == [3, 64, 3, 64]
  # the full forward of a window layer = plain attention under an explicit window mask
  x = jax.random.normal(jax.random.key(5), (2, 11, 16))
  pos = jnp.broadcast_to(jnp.arange(11), (2, 11))
  layer = model.layers[0].attention
  i, j = np.arange(11)[:, None], np.arange(11)[None, :]
  dense = jnp.asarray((i >= j) & (i - j < 3))[None, None]
  plain = lm().layers[0].attention
  nnx.update(plain, nnx.state(layer))
  np.testing.assert_allclose(layer(x, positions=pos), plain(x, positions=pos, mask=dense), rtol=1e-6, atol=1e-6)


def test_a_prefill_longer_than_the_window_then_steps():
  model = lm(layer_types=("w",), layer_settings={"w": {"window": 2}})
  cache = model.init_cache(2, 16)
  logits, cache = model.decode_step(TOKENS[:, :7], cache, token_mask=MASK[:, :7])
  np.testing.assert_allclose(logits[1], model(TOKENS[1:, :7])[0], rtol=1e-5, atol=1e-5)
  for i in range(7, 11):
    step, cache = model.decode_step(TOKENS[:, i:i + 1], cache)
    np.testing.assert_allclose(step[:, 0], model(TOKENS[:, :i + 1], attention_mask=MASK[:, :i + 1])[:, -1],
                               rtol=1e-5, atol=1e-5)
