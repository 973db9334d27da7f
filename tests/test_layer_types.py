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

from roformer_jax import decoding, hf, models, vit
from roformer_jax.attention.layer import AttentionTemperature, temperature_scale
from roformer_jax.models import (CausalLM, ModelConfig, RoFormerForMaskedLM, RoFormerForSequenceClassification,
                                 TransformerSeq2Seq)
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
    ({"a": {"attn_temperature": {"scale": 0.1}}}, "must be a dict {'scale'"),
    # issue 37 item 6: each names the type, the key and the value, and says what to write
    ({"a": "none"}, r"layer_settings\['a'\]='none' must be a dict .*\{'a': \{'rope': 'none'\}\}"),
    ({"a": {"attn_temperature": 0.1}}, r"layer_settings\['a'\]\['attn_temperature'\]=0.1 must be a dict "
                                       r"\{'scale': >= 0, 'floor': >= 1\}"),
    ({"a": {"attn_temperature": {"scale": -1, "floor": 8}}}, r"\['attn_temperature'\].*scale=-1 must be"),
    ({"a": {"rope": {"rotary_dim": 7}}}, r"layer_settings\['a'\]\['rope'\]=\{'rotary_dim': 7\}: rope rotary_dim "
                                         r"must be a positive even integer"),
])
def test_bad_layer_settings_are_refused_at_config_time(settings, match):
  with pytest.raises(ValueError, match=match):
    ModelConfig(**BASE, layer_types=("a", "b"), layer_settings=settings)


def test_an_odd_rotary_dim_on_the_model_is_refused_at_config_time():
  with pytest.raises(ValueError, match="rotary_dim must be a positive even integer .* got 7"):
    ModelConfig(**BASE, rotary_dim=7)


def test_a_pattern_longer_than_the_model_is_refused():
  """Six type names for four layers would drop types 'e' and 'f' and their settings silently."""
  with pytest.raises(ValueError, match=r"names 6 layers, but num_layers=4: types \('e', 'f'\) would apply to no "
                                       r"layer.*a shorter pattern repeats"):
    ModelConfig(**BASE, layer_types=("a", "b", "c", "d", "e", "f"), layer_settings={"f": {"window": 2}})
  assert ModelConfig(**BASE, layer_types=("a", "b", "c", "d")).layer_type(3) == "d"  # one name per layer


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
# Every layer setting of COMBOS in three models, so that each compiles the jitted paths once,
# with length-dependent scalings (the frequencies follow each row's length; original length 6,
# so 14 tokens cross it) per layer type and on the model beside window layers narrower than the
# cache (issue 37 items 2 and 3).
DYNAMIC = {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 6}
LONGROPE = {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 6,
            "short_factor": [1.0, 1.2, 1.5, 2.0], "long_factor": [1.0, 2.0, 4.0, 8.0]}
JITTED = {
    "dynamic_model": dict(rope_scaling=DYNAMIC, layer_types=("w", "n", "g", "l"), layer_settings={
        "w": {"window": 3, "rope": {"theta": 1e4}}, "n": {"rope": "none", "attn_temperature": {"scale": 0.5, "floor": 3}},
        "g": {"rope": {"theta": 1e6}}, "l": {"rope": {"scaling": LONGROPE}}}),
    "longrope_model": dict(rope_scaling=LONGROPE, layer_types=("w", "d", "p"), layer_settings={
        "w": {"window": 3}, "d": {"rope": {"scaling": DYNAMIC}},
        "p": {"rope": {"scaling": {"rope_type": "proportional", "partial_rotary_factor": 0.5}, "layout": "half"}}}),
    "xpos_model": {**COMBOS["window_xpos_nope"], "attention_implementation": "chunked"},
}


def test_every_models_static_state_is_hashable_under_every_layer_setting():
  """jit hashes a module's GraphDef, which holds its non-array attributes: a dict there broke
  every jitted decode of a Llama 4 NoPE layer (issue 37 item 1)."""
  for kw in JITTED.values():
    cfg = ModelConfig(**{**BASE, **kw})
    builders = [lambda cfg=cfg: CausalLM(cfg, rngs=nnx.Rngs(0)),
                lambda cfg=cfg: TransformerSeq2Seq(cfg, rngs=nnx.Rngs(0)),
                lambda cfg=cfg: RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0)),
                lambda cfg=cfg: RoFormerForSequenceClassification(cfg, 3, rngs=nnx.Rngs(0))]
    if "scaling" not in repr(kw):  # the ViT's 2-D RoPE takes no scaling
      builders.append(lambda cfg=cfg: vit.VisionTransformer(
          cfg.replace(rope={**dict(cfg.rope or ()), "sections": (2, 2)}),
          vit.ViTConfig(image_size=8, patch_size=4, num_classes=3), rngs=nnx.Rngs(0)))
    for build in builders:
      hash(nnx.graphdef(nnx.eval_shape(build)))  # a TypeError names an unhashable attribute
  temperature = ModelConfig(**BASE, **COMBOS["nope_temperature"]).layer_temperature(3)
  assert temperature == AttentionTemperature(0.5, 3) and hash(temperature)


T, P = 14, 4  # decode to T tokens after a prefill of P
LONG = jax.random.randint(jax.random.key(2), (2, T), 1, 29)
LONG_MASK = jnp.arange(T)[None] >= jnp.array([[3], [0]])  # row 0 left-padded by 3


def _after_each_prefix(forward, tokens, mask, lengths):
  """forward's logits [B, len(lengths), V] after each prefix tokens[:, :n]: every prefix right-
  padded to the full width in one batch (a row's length is its own; padding has position 0 and
  never adds to it: tests/test_models.py), one compiled shape instead of one per length."""
  b, t = tokens.shape
  keep = [mask & (jnp.arange(t) < n) for n in lengths]
  out = forward(jnp.concatenate([jnp.where(k, tokens, 0) for k in keep]), jnp.concatenate(keep))
  return jnp.stack([out[j * b:(j + 1) * b, n - 1] for j, n in enumerate(lengths)], axis=1)


@pytest.mark.slow  # each model compiles a decode program per path (about 20 s on 2 cores)
@pytest.mark.parametrize("name", sorted(JITTED))
def test_every_layer_setting_decodes_as_the_full_forward_through_the_jitted_paths(name):
  """models.jitted's decode_step, decoding.generate and decoding.beam_search (each jitted whole)
  against the full forward of each prefix, for every layer setting (JITTED holds them all, a
  few per model): per type and on the model, and windows narrower than the cache under every
  length-dependent scaling; a prefill longer than a window. One layer per type. Float32 phases (rope_exact=False): the exact
  ones under a traced length compile 2.5x slower, and are checked in tests/test_rope_scaling.py;
  cached decode takes the same phases as the forward either way."""
  kw = {**JITTED[name], "num_layers": len(JITTED[name]["layer_types"]), "rope_exact": False}
  model = lm(**kw)
  forward = models.jitted(model)
  lm_forward = lambda tokens, mask: forward(tokens, attention_mask=mask)
  want = _after_each_prefix(lm_forward, LONG, LONG_MASK, range(P, T + 1))  # [B, T - P + 1, V]
  step = models.jitted(model, "decode_step")
  logits, cache = step(LONG[:, :P], model.init_cache(2, T), token_mask=LONG_MASK[:, :P])
  got = [logits[:, -1]]
  for i in range(P, T):
    logits, cache = step(LONG[:, i:i + 1], cache)
    got.append(logits[:, 0])
  np.testing.assert_allclose(jnp.stack(got, 1), want, rtol=1e-5, atol=1e-5)
  # Greedy generation picks the full forward's argmax after every prefix it made.
  new = decoding.generate(model, LONG[:, :P], prompt_mask=LONG_MASK[:, :P], max_new_tokens=T - P)
  made = jnp.concatenate([LONG[:, :P], new], axis=1)
  np.testing.assert_array_equal(new, jnp.argmax(_after_each_prefix(lm_forward, made, LONG_MASK, range(P, T + 1)),
                                                -1)[:, :-1])
  # Beam search: each hypothesis' score (alpha 0: its log-probability) is the teacher-forced
  # decoder's, prefix by prefix.
  s2s = TransformerSeq2Seq(ModelConfig(**{**BASE, **kw}), rngs=nnx.Rngs(0))
  src, steps = LONG[:1, :5], 8
  hyps, scores = decoding.beam_search(s2s, src, beam_size=2, alpha=0.0, max_len=steps, bos_id=1, eos_id=2)
  inputs = jnp.concatenate([jnp.ones((2, 1), hyps.dtype), hyps[0, :, :-1]], axis=1)  # BOS + each hypothesis
  s2s_forward = lambda tgt, mask: s2s(jnp.repeat(src, tgt.shape[0], 0), tgt, tgt_mask=mask)
  logp = jax.nn.log_softmax(_after_each_prefix(s2s_forward, inputs, jnp.ones_like(inputs, bool),
                                               range(1, steps + 1)), -1)  # [2, steps, V]
  for k in range(2):
    hyp = hyps[0, k]
    n = int(jnp.argmax(hyp == 2)) + 1 if bool(jnp.any(hyp == 2)) else steps  # its tokens, EOS included
    np.testing.assert_allclose(scores[0, k], jnp.sum(logp[k, jnp.arange(n), hyp[:n]]), rtol=1e-5, atol=1e-5)


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
