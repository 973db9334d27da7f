"""The RoFormer model family: shapes, invariances, caching, sharding, config errors.

References are independent of the code under test: a float64 NumPy Vaswani table, the
model run on each packed document alone, the unpadded batch, the full (uncached) forward,
and the single-device forward for the sharded one.
"""

import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer_jax import attention
from roformer_jax import models as M
from roformer_jax import positional

V, D, L, N, F = 64, 32, 2, 4, 64
TINY = dict(vocab_size=V, d_model=D, num_layers=L, num_heads=N, d_ff=F, dropout=0.0,
            attention_dropout=0.0, max_position=64)


def tiny(**kw) -> M.ModelConfig:
  return M.ModelConfig(**{**TINY, **kw})


def ids(key, b, t):
  return jax.random.randint(jax.random.key(key), (b, t), 1, V)


# --------------------------------------------------------------------------------------
# Shapes and heads.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("position", positional.POSITION_ENCODINGS)
def test_encoder_heads_shapes(position):
  cfg = tiny(position=position)
  x = ids(0, 3, 10)
  enc = M.RoFormerModel(cfg, rngs=nnx.Rngs(0))
  chex.assert_shape(enc.encode(x), (3, 10, D))
  mlm = M.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0))
  logits = mlm(x)
  chex.assert_shape(logits, (3, 10, V))
  chex.assert_type(logits, jnp.float32)
  cls = M.RoFormerForSequenceClassification(cfg, 3, rngs=nnx.Rngs(0))
  chex.assert_shape(cls(x), (3, 3))
  reg = M.RoFormerForSequenceClassification(cfg, 1, rngs=nnx.Rngs(0))
  chex.assert_shape(reg(x), (3, 1))


def test_mlm_masked_positions_equal_full_logits_gathered():
  mlm = M.RoFormerForMaskedLM(tiny(), rngs=nnx.Rngs(1))
  x = ids(1, 2, 16)
  where = jnp.array([[0, 3, 7], [15, 2, 2]])
  full = mlm(x)
  np.testing.assert_allclose(mlm(x, masked_positions=where),
                             jnp.take_along_axis(full, where[..., None], axis=1), atol=1e-6)


def test_mlm_output_is_tied_to_word_embeddings():
  mlm = M.RoFormerForMaskedLM(tiny(), rngs=nnx.Rngs(2))
  x = jnp.array([[1, 2, 3, 4, 5]])
  before = mlm(x)
  table = mlm.roformer.embeddings.word.embedding
  table[...] = table[...].at[7].add(jax.random.normal(jax.random.key(0), (D,)))  # 7 is not in x
  after = mlm(x)
  assert float(jnp.abs(after[..., 7] - before[..., 7]).max()) > 1e-3  # the output row moved too


def test_factorised_embeddings_project_to_model_width():
  cfg = tiny(embedding_size=24)
  mlm = M.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0))
  assert mlm.roformer.embeddings.word.embedding.shape == (V, 24)
  chex.assert_shape(mlm.encode(ids(0, 2, 6)), (2, 6, D))
  chex.assert_shape(mlm(ids(0, 2, 6)), (2, 6, V))


def test_seq2seq_and_lm_shapes():
  cfg = M.preset("transformer-base", **{**TINY, "vocab_size": V})
  s2s = M.TransformerSeq2Seq(cfg, rngs=nnx.Rngs(0))
  chex.assert_shape(s2s(ids(0, 2, 9), ids(1, 2, 7)), (2, 7, V))
  for attn, fmap in [("softmax", "elu"), ("linear", "elu"), ("linear", "favor")]:
    lm = M.CausalLM(tiny(attention=attn, feature_map=fmap, num_features=16, norm="pre"), rngs=nnx.Rngs(0))
    chex.assert_shape(lm(ids(0, 2, 9)), (2, 9, V))


def test_transformer_base_preset_is_the_paper_size():
  cfg = M.preset("transformer-base")
  assert (cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.d_ff) == (512, 6, 8, 2048)  # Sec. 4.1
  lm = M.preset("performer-enwik8")
  assert (lm.d_model, lm.num_layers, lm.num_heads, lm.attention) == (768, 12, 12, "linear")  # Sec. 4.4


def test_parameters_carry_logical_axes():
  mlm = M.RoFormerForMaskedLM(tiny(), rngs=nnx.Rngs(0))
  params = nnx.state(mlm, nnx.Param)
  names = jax.tree.leaves(jax.tree.map(lambda p: p.get_metadata().get("out_sharding"), params,
                                       is_leaf=lambda x: isinstance(x, nnx.Variable)),
                          is_leaf=lambda x: isinstance(x, tuple))
  flat = nnx.to_flat_state(params)
  missing = [path for path, var in flat if var.get_metadata().get("out_sharding") is None]
  assert not missing, f"parameters without logical axes: {missing}"
  assert ("vocab", "embed") in names and ("embed", "heads", "kv") in names and ("embed", "mlp") in names


# --------------------------------------------------------------------------------------
# Absolute sinusoidal table against Vaswani et al. in float64.
# --------------------------------------------------------------------------------------


def test_sinusoidal_embedding_matches_vaswani_float64():
  pos = np.array([0, 1, 5, 100, 511, 4097])
  d = 16
  ref = np.zeros((len(pos), d))
  for r, p in enumerate(pos):
    for i in range(d // 2):
      w = 10000.0 ** (-2 * i / d)
      ref[r, 2 * i], ref[r, 2 * i + 1] = np.sin(p * w), np.cos(p * w)
  np.testing.assert_allclose(positional.sinusoidal_embedding(jnp.asarray(pos), d), ref, atol=1e-6)


# --------------------------------------------------------------------------------------
# Invariances: packing, padding.
# --------------------------------------------------------------------------------------

ENCODERS = [dict(position=p) for p in ("rope", "learned", "sinusoidal")] + [dict(norm="pre")]


@pytest.mark.parametrize("kw", ENCODERS)
def test_encoder_packing_equals_each_document_alone(kw):
  model = M.RoFormerModel(tiny(**kw), rngs=nnx.Rngs(3))
  a, b = ids(3, 1, 7), ids(4, 1, 5)
  packed = jnp.concatenate([a, b, jnp.zeros((1, 4), jnp.int32)], axis=1)
  seg = jnp.array([[1] * 7 + [2] * 5 + [0] * 4])
  out = model.encode(packed, segment_ids=seg)
  np.testing.assert_allclose(out[:, :7], model.encode(a), atol=2e-5)
  np.testing.assert_allclose(out[:, 7:12], model.encode(b), atol=2e-5)


@pytest.mark.parametrize("kw", [dict(), dict(position="learned"), dict(attention="linear", norm="pre"),
                                dict(attention="linear", feature_map="favor", num_features=16)])
def test_causal_lm_packing_equals_each_document_alone(kw):
  model = M.CausalLM(tiny(**kw), rngs=nnx.Rngs(5))
  a, b = ids(5, 1, 9), ids(6, 1, 6)
  packed = jnp.concatenate([a, b, jnp.zeros((1, 3), jnp.int32)], axis=1)
  seg = jnp.array([[1] * 9 + [2] * 6 + [0] * 3])
  out = model(packed, segment_ids=seg)
  np.testing.assert_allclose(out[:, :9], model(a), atol=2e-5)
  np.testing.assert_allclose(out[:, 9:15], model(b), atol=2e-5)


@pytest.mark.parametrize("kw", [dict(), dict(position="sinusoidal"), dict(rotary_value=True)])
def test_encoder_left_padding_equals_right_padding(kw):
  model = M.RoFormerModel(tiny(**kw), rngs=nnx.Rngs(7))
  x = ids(7, 1, 8)
  pad = jnp.zeros((1, 3), jnp.int32)
  right = model.encode(jnp.concatenate([x, pad], 1), attention_mask=jnp.array([[1] * 8 + [0] * 3]))
  left = model.encode(jnp.concatenate([pad, x], 1), attention_mask=jnp.array([[0] * 3 + [1] * 8]))
  alone = model.encode(x)
  np.testing.assert_allclose(right[:, :8], alone, atol=2e-5)
  np.testing.assert_allclose(left[:, 3:], alone, atol=2e-5)


@pytest.mark.parametrize("kw", [dict(), dict(position="learned"), dict(attention="linear")])
def test_causal_lm_left_padding_equals_unpadded(kw):
  model = M.CausalLM(tiny(**kw), rngs=nnx.Rngs(8))
  x = ids(8, 1, 8)
  left = model(jnp.concatenate([jnp.zeros((1, 4), jnp.int32), x], 1),
               attention_mask=jnp.array([[0] * 4 + [1] * 8]))
  np.testing.assert_allclose(left[:, 4:], model(x), atol=2e-5)


def test_rope_encoder_is_shift_invariant_but_absolute_ones_are_not():
  """RoPE sees only m - n, so shifting every position leaves the outputs unchanged (eq. 16)."""
  x = ids(9, 2, 10)
  pos = jnp.broadcast_to(jnp.arange(10), (2, 10))
  for position, invariant in [("rope", True), ("learned", False), ("sinusoidal", False)]:
    model = M.RoFormerModel(tiny(position=position), rngs=nnx.Rngs(9))
    gap = float(jnp.abs(model.encode(x, positions=pos) - model.encode(x, positions=pos + 37)).max())
    assert (gap < 1e-4) == invariant, (position, gap)


# --------------------------------------------------------------------------------------
# Cached decoding equals recompute.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [dict(), dict(norm="pre", position="sinusoidal"), dict(rotary_value=True),
                                dict(attention="linear"), dict(attention="linear", feature_map="favor", num_features=16),
                                # YaRN past its original length: its attention factor (1.14) scales
                                # cos and sin in the cached steps as in the full forward.
                                dict(rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                   "original_max_position_embeddings": 4}),
                                # the full forward fuses q/k/v, the cached steps project them apart
                                pytest.param(dict(fused_qkv=True), id="fused_qkv")])
def test_lm_cached_decode_equals_full_forward_left_padded(kw):
  model = M.CausalLM(tiny(**kw), rngs=nnx.Rngs(10))
  b, p, t = 2, 6, 14
  tokens = ids(10, b, t)
  mask = jnp.ones((b, t), bool).at[1, :3].set(False)  # row 1 is left-padded by 3
  tokens = jnp.where(mask, tokens, 0)
  full = model(tokens, attention_mask=mask)
  cache = model.init_cache(b, 20)
  logits, cache = model.decode_step(tokens[:, :p], cache, token_mask=mask[:, :p])
  steps = [logits]
  for i in range(p, t):
    logits, cache = model.decode_step(tokens[:, i:i + 1], cache)
    steps.append(logits)
  inc = jnp.concatenate(steps, axis=1)
  np.testing.assert_allclose(jnp.where(mask[..., None], inc, 0), jnp.where(mask[..., None], full, 0), atol=1e-5)


# Every scaling, the length-dependent ones included, on the TINY head dim 8 (4 pairs) with an
# original length of 4, so 12 tokens run well past it.
SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4},
    "longrope": {"rope_type": "longrope", "original_max_position_embeddings": 4, "max_position_embeddings": 16,
                 "short_factor": [1.0, 1.2, 1.5, 2.0], "long_factor": [1.0, 2.0, 4.0, 8.0]},
    "llama3": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 4},
}


# Dynamic NTK decodes eagerly here, op by op, and its exact phases under a traced length
# (float-float words, issue 37 item 10) compile many small programs: ~50-90 s each from a cold
# cache, so those run in `make test` only (the slow tier).
_EAGER_DYNAMIC = pytest.mark.slow


@pytest.mark.parametrize("name, attention", [pytest.param(n, "softmax", marks=_EAGER_DYNAMIC) if n == "dynamic"
                                             else (n, "softmax") for n in SCALINGS]
                         + [pytest.param("dynamic", "linear", marks=_EAGER_DYNAMIC)])
def test_lm_cached_prediction_equals_the_full_forward_of_its_prefix(name, attention):
  """The logits after a prefix equal `model(prefix)[:, -1]` whatever the scaling: 'dynamic' and
  'longrope' rotate every key by the current length's frequencies, so the cache must too (the
  trap of transformers' issue #25104). 3 tokens prefilled, then 9 cached steps; row 1 is
  left-padded by 2, and each row's length is its own. Large weights, so positions matter.
  Linear attention's recurrent state is rebuilt the same way."""
  model = M.CausalLM(tiny(rope_scaling=SCALINGS[name], init_std=0.5, attention=attention), rngs=nnx.Rngs(10))
  b, p, t = 2, 3, 12
  mask = jnp.ones((b, t), bool).at[1, :2].set(False)
  tokens = jnp.where(mask, ids(13, b, t), 0)
  cache = model.init_cache(b, t)
  # Jitted: one program for the prefill and one for every cached step (the cache's shapes are
  # fixed). Eager, dynamic NTK's exact phases compiled op by op took 50-96 s from a cold cache.
  step = nnx.jit(lambda m, x, c, k: m.decode_step(x, c, token_mask=k))
  logits, cache = step(model, tokens[:, :p], cache, mask[:, :p])
  cached = []
  for i in range(p - 1, t):
    if i >= p:
      logits, cache = step(model, tokens[:, i:i + 1], cache, None)
    cached.append(logits[:, -1])
  # The reference, model(prefix)[:, -1] for every prefix, in one forward: each prefix is
  # right-padded to t (a row's length is its own, padding never adds to it:
  # test_a_rows_logits_do_not_depend_on_the_other_rows_of_its_batch), which compiles one
  # shape instead of one per prefix length. One prefix is also run alone, unpadded.
  lengths = range(p, t + 1)
  keep = [mask & (jnp.arange(t) < n) for n in lengths]
  out = model(jnp.concatenate([jnp.where(k, tokens, 0) for k in keep]), attention_mask=jnp.concatenate(keep))
  prefixes = [out[j * b:(j + 1) * b, n - 1] for j, n in enumerate(lengths)]
  alone = model(tokens[:, :p + 2], attention_mask=mask[:, :p + 2])[:, -1]
  # float32 rounding on logits up to ~7.5 (init_std 0.5): 2.4e-5 for yarn on a Zen 3 CPU without AVX-512, under
  # 2e-5 on an AVX-512 one; a cache rotated at stale frequencies is off by more than 1e-2 (the assert below).
  tol = 5e-5
  np.testing.assert_allclose(prefixes[2], alone, atol=tol)
  gaps = [float(jnp.abs(c - r).max()) for c, r in zip(cached, prefixes, strict=True)]
  assert max(gaps) < tol, [f"{g:.1e}" for g in gaps]
  # For these two the whole sequence's forward is a different function at earlier slots: the
  # reference above is the one that can tell a stale cache.
  full = model(tokens, attention_mask=mask)[:, p - 1:]
  differs = float(jnp.abs(full - jnp.stack(prefixes, 1)).max())
  assert (differs > 1e-2) == (name in ("dynamic", "longrope")), differs


@pytest.mark.parametrize("name", ["dynamic", "longrope"])
def test_a_rows_logits_do_not_depend_on_the_other_rows_of_its_batch(name):
  """A length-dependent scaling reads each row's own length (its largest position + 1): a
  4-token row (within the original length 4) gives the same logits alone as beside a 12-token
  row (past it), right- or left-padded."""
  model = M.CausalLM(tiny(rope_scaling=SCALINGS[name], init_std=0.5), rngs=nnx.Rngs(14))
  short, long = ids(15, 1, 4), ids(16, 1, 12)
  alone = model(short)[0]
  right = jnp.concatenate([jnp.pad(short, ((0, 0), (0, 8))), long])
  mask = jnp.arange(12)[None] < jnp.array([[4], [12]])
  np.testing.assert_allclose(model(right, attention_mask=mask)[0, :4], alone, atol=2e-5)
  left = jnp.concatenate([jnp.pad(short, ((0, 0), (8, 0))), long])
  mask = jnp.arange(12)[None] >= jnp.array([[8], [0]])
  np.testing.assert_allclose(model(left, attention_mask=mask)[0, 8:], alone, atol=2e-5)


def test_linear_attention_step_refuses_a_length_dependent_scaling():
  """Its recurrent state sums keys already rotated; a length-dependent scaling would need them
  rotated again as the length grows, so the one-token step refuses it by name (a model's
  decode_step rebuilds the state from its tokens instead)."""
  state = attention.init_linear_state(1, 2, 8, 8)
  q = jnp.ones((1, 1, 2, 8))
  with pytest.raises(ValueError, match="'dynamic'.*rotate them again"):
    attention.linear_attention_step(state, q, q, q, positions=jnp.array([[5]]), scaling=SCALINGS["dynamic"])


@pytest.mark.parametrize("name", [pytest.param("dynamic", marks=_EAGER_DYNAMIC),
                                  pytest.param("longrope", marks=_EAGER_DYNAMIC)])  # 15-40 s eager: slow tier
def test_seq2seq_cached_prediction_equals_the_teacher_forced_forward_of_its_prefix(name):
  """The decoder's self-attention under a length-dependent scaling: step i's logits equal the
  teacher-forced forward of target[:i + 1] (its last position)."""
  cfg = M.preset("transformer-base", **{**TINY, "vocab_size": V, "rope_scaling": SCALINGS[name], "init_std": 0.5})
  model = M.TransformerSeq2Seq(cfg, rngs=nnx.Rngs(18))
  src = ids(18, 2, 9).at[1, 6:].set(0)
  tgt = ids(19, 2, 10)
  cache = model.init_cache(model.encode(src), src != 0, 10)
  step = nnx.jit(lambda m, x, c: m.decode_step(x, c))  # one program for every step (eager: 37 s cold)
  steps = []
  for i in range(10):
    logits, cache = step(model, tgt[:, i:i + 1], cache)
    steps.append(logits[:, -1])
  # The teacher-forced forward of every prefix in one call: target[:n] right-padded to 10 (a
  # row's length is its own; the prefix of 4 is also run alone, unpadded).
  keep = [jnp.broadcast_to(jnp.arange(10) < n, tgt.shape) for n in range(1, 11)]
  out = model(jnp.tile(src, (10, 1)), jnp.concatenate([jnp.where(k, tgt, 0) for k in keep]),
              tgt_mask=jnp.concatenate(keep))
  forced = [out[2 * i:2 * i + 2, i] for i in range(10)]
  np.testing.assert_allclose(forced[3], model(src, tgt[:, :4])[:, -1], atol=2e-5)
  gaps = [float(jnp.abs(a - b).max()) for a, b in zip(steps, forced, strict=True)]
  assert max(gaps) < 2e-5, [f"{g:.1e}" for g in gaps]


def test_seq2seq_cached_decode_equals_teacher_forcing():
  cfg = M.preset("transformer-base", **{**TINY, "vocab_size": V})
  model = M.TransformerSeq2Seq(cfg, rngs=nnx.Rngs(11))
  src = ids(11, 2, 9).at[1, 6:].set(0)
  tgt = ids(12, 2, 7)
  full = model(src, tgt)
  enc = model.encode(src)
  cache = model.init_cache(enc, src != 0, 10)
  steps = []
  for i in range(7):
    logits, cache = model.decode_step(tgt[:, i:i + 1], cache)
    steps.append(logits)
  np.testing.assert_allclose(jnp.concatenate(steps, 1), full, atol=1e-5)


def test_seq2seq_cross_attention_has_no_rope():
  """Shifting the target positions must not change the cross-attention (RoPE-free)."""
  cfg = M.preset("transformer-base", **{**TINY, "vocab_size": V, "num_layers": 1})
  model = M.TransformerSeq2Seq(cfg, rngs=nnx.Rngs(12))
  layer = model.decoder[0]
  h = jax.random.normal(jax.random.key(0), (1, 3, D))
  ctx = jax.random.normal(jax.random.key(1), (1, 5, D))
  a = layer.cross_attention(h, context=ctx, positions=jnp.arange(3)[None])
  b = layer.cross_attention(h, context=ctx, positions=jnp.arange(3)[None] + 100)
  np.testing.assert_allclose(a, b, atol=1e-6)


# --------------------------------------------------------------------------------------
# Dropout and dtype policy.
# --------------------------------------------------------------------------------------


def test_dropout_only_when_not_deterministic():
  model = M.RoFormerForMaskedLM(tiny(dropout=0.3, attention_dropout=0.3), rngs=nnx.Rngs(0, dropout=1))
  x = ids(0, 2, 8)
  np.testing.assert_array_equal(model(x), model(x))
  assert float(jnp.abs(model(x, deterministic=False) - model(x)).max()) > 1e-3


def test_bf16_compute_keeps_fp32_params_and_logits():
  cfg32, cfg16 = tiny(), tiny(dtype="bfloat16")
  m32, m16 = M.CausalLM(cfg32, rngs=nnx.Rngs(0)), M.CausalLM(cfg16, rngs=nnx.Rngs(0))
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(nnx.state(m16, nnx.Param)))
  x = ids(0, 2, 12)
  out16 = m16(x)
  chex.assert_type(out16, jnp.float32)
  np.testing.assert_allclose(out16, m32(x), atol=0.1)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_embedding_lookup_equals_nnx_embed_and_its_backward_scatters_in_float32(dtype):
  # The tables' rows are the same as nnx.Embed's (which casts the table, then gathers); the
  # backward pass must not scatter-add into a compute-dtype table, nor into the 2-row token-type
  # table at all (on a GPU every token's atomic add hits the same row: 110 ms of an H100 step).
  cfg = tiny(dtype=dtype, type_vocab_size=2, position="learned", norm="pre")  # pre-LN: no norm in the embedder
  emb = M.Embedder(cfg, rngs=nnx.Rngs(0))
  x, types = ids(0, 3, 10), jax.random.randint(jax.random.key(1), (3, 10), 0, 2)
  for table, rows in ((emb.word, x), (emb.token_type, types), (emb.position, jnp.arange(10))):
    got = M.embedding_lookup(table, rows, cfg.compute_dtype)
    chex.assert_type(got, cfg.compute_dtype)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(table(rows), np.float32))
  graphdef, params, rest = nnx.split(emb, nnx.Param, ...)

  def loss(params):
    out = nnx.merge(graphdef, params, rest)(x, positions=jnp.arange(10), token_type_ids=types)
    return jnp.sum(out.astype(jnp.float32) * jnp.arange(D))

  hlo = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
  scatters = re.findall(r"= (\w+)\[([\d,]*)\]\S* scatter\(", hlo)  # (dtype, shape) of each scatter
  assert scatters, "the word table's gradient should be a scatter-add"
  for dtype_, shape in scatters:
    assert dtype_ == "f32" and shape != f"2,{D}", (dtype_, shape)
  # and the gradients themselves: token type t's is the sum of the output gradient over its tokens
  grads = jax.grad(loss)(params)
  g_types = np.asarray(grads["token_type"]["embedding"][...], np.float64)
  counts = np.bincount(np.asarray(types).ravel(), minlength=2)
  np.testing.assert_allclose(g_types, counts[:, None] * np.arange(D)[None], rtol=1e-6)


# --------------------------------------------------------------------------------------
# Sharding: every model under an 8-device (data, fsdp, tensor) mesh equals one device.
# --------------------------------------------------------------------------------------

RULES = (("batch", ("data", "fsdp")), ("vocab", "tensor"), ("embed", "fsdp"), ("heads", "tensor"),
         ("kv", None), ("mlp", "tensor"), ("norm", None), ("types", None), ("position", None),
         ("labels", None))

BUILDERS = {
    "encoder": (lambda r: M.RoFormerModel(tiny(), rngs=r), lambda m, x: m.encode(x)),
    "mlm": (lambda r: M.RoFormerForMaskedLM(tiny(), rngs=r), lambda m, x: m(x)),
    "classifier": (lambda r: M.RoFormerForSequenceClassification(tiny(), 2, rngs=r), lambda m, x: m(x)),
    "seq2seq": (lambda r: M.TransformerSeq2Seq(M.preset("transformer-base", **TINY), rngs=r),
                lambda m, x: m(x, x[:, ::-1])),
    "causal_lm": (lambda r: M.CausalLM(tiny(norm="pre"), rngs=r), lambda m, x: m(x)),
    # the stacked kernels [D, 3, N, H] on a tensor-sharded mesh give one device's outputs;
    # the decoder's cross-attention stays unfused
    "seq2seq_fused_qkv": (lambda r: M.TransformerSeq2Seq(M.preset("transformer-base", **TINY, fused_qkv=True), rngs=r),
                          lambda m, x: m(x, x[:, ::-1])),
    "linear_lm": (lambda r: M.CausalLM(tiny(attention="linear", feature_map="favor", num_features=16), rngs=r),
                  lambda m, x: m(x)),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_model_sharded_on_8_devices_matches_single_device(name):
  build, run = BUILDERS[name]
  x = ids(13, 4, 16)
  reference = run(build(nnx.Rngs(0)), x)
  mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"), axis_types=(jax.sharding.AxisType.Auto,) * 3)
  with jax.set_mesh(mesh), nnx.logical_axis_rules(RULES):
    model = build(nnx.Rngs(0))
    kernel = nnx.state(model, nnx.Param)
    shardings = {str(leaf.sharding.spec) for leaf in jax.tree.leaves(kernel)}
    assert any("tensor" in s for s in shardings) and any("fsdp" in s for s in shardings), shardings
    xs = jax.device_put(x, jax.NamedSharding(mesh, jax.P(("data", "fsdp"))))
    out = nnx.jit(run)(model, xs)
  np.testing.assert_allclose(out, reference, atol=2e-5)


# --------------------------------------------------------------------------------------
# Config errors are raised at construction, naming the bad value.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, match", [
    (dict(position="alibi"), "position='alibi'"),
    (dict(d_model=30, num_heads=4), "not divisible"),
    (dict(activation="swish2"), "activation='swish2'"),
    (dict(norm="sandwich"), "norm='sandwich'"),
    (dict(attention="flash"), "attention='flash'"),
    (dict(feature_map="relu"), "feature_map='relu'"),
    (dict(dropout=1.5), "dropout=1.5"),
    (dict(dtype="float33"), "float33"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "original_max_position_embeddings"),
    (dict(num_heads=4, head_dim=7, d_model=28), "even"),
    # LongRoPE needs one factor per rotated pair of the real head dim (8 here), checked at
    # config time for both lists (not against a stand-in width).
    (dict(rope_scaling={**SCALINGS["longrope"], "short_factor": [1.0] * 2, "long_factor": [1.0] * 2}),
     r"4 entries.*head dim 8 \(rotary_dim is None\)"),
    (dict(rope_scaling={**SCALINGS["longrope"], "long_factor": [1.0] * 8}), r"long_factor.*shapes \(4,\) and \(8,\)"),
    (dict(rotary_dim=4, rope_scaling=SCALINGS["longrope"]), r"2 entries.*rotary_dim=4"),
])
def test_bad_model_config_is_rejected_early(kw, match):
  with pytest.raises(ValueError, match=match):
    tiny(**kw)


@pytest.mark.parametrize("family", ["encoder", "mlm", "classifier", "seq2seq", "causal_lm"])
def test_longrope_with_one_factor_per_pair_of_the_head_dim_runs_in_every_model(family):
  """Head dim 16 (d_model 64, 4 heads): 8 short and 8 long factors, past the original length."""
  factors = dict(short_factor=list(np.linspace(1.0, 1.5, 8)), long_factor=list(np.linspace(1.0, 8.0, 8)))
  cfg = tiny(d_model=64, rope_scaling={**SCALINGS["longrope"], **factors})
  classes = {"encoder": M.RoFormerModel, "mlm": M.RoFormerForMaskedLM, "classifier": M.RoFormerForSequenceClassification,
             "seq2seq": M.TransformerSeq2Seq, "causal_lm": M.CausalLM}
  model = classes[family](cfg, **({"num_labels": 3} if family == "classifier" else {}), rngs=nnx.Rngs(0))
  x = ids(20, 2, 9)
  out = model(x, x) if family == "seq2seq" else model.encode(x) if family == "encoder" else model(x)
  assert np.all(np.isfinite(np.asarray(out)))


def test_from_dict_names_unknown_keys():
  with pytest.raises(ValueError, match="hidden_size"):
    M.ModelConfig.from_dict({"hidden_size": 3})


def test_ids_must_be_integer_batches():
  model = M.RoFormerModel(tiny(), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="integer array"):
    model.encode(jnp.ones((2, 3)))


def test_learned_positions_beyond_the_table_are_rejected():
  model = M.CausalLM(tiny(position="learned", max_position=8), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="max_position=8"):
    model(ids(0, 1, 9))
  with pytest.raises(ValueError, match="max_position=8"):
    model.init_cache(1, 9)


def test_linear_attention_module_rejects_a_dense_mask():
  from roformer_jax import attention
  m = attention.MultiHeadAttention(D, N, kind="linear", causal=True, rngs=nnx.Rngs(0))
  x = jnp.ones((1, 4, D))
  with pytest.raises(ValueError, match="kv_valid"):
    m(x, positions=jnp.arange(4), mask=jnp.ones((1, 1, 4, 4), bool))


def test_mlm_loss_from_masked_positions_equals_the_full_logits_loss():
  """The trainer's MLM path (pipeline's masked_positions) gives the full path's loss and grads."""
  from roformer_jax.training import tasks
  cfg = M.ModelConfig(vocab_size=260, d_model=32, num_layers=2, num_heads=2, d_ff=64, dropout=0.0)
  model = M.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(0)
  weights = (rng.random((3, 20)) < 0.3).astype(np.float32)
  order = np.argsort(-weights, axis=1, kind="stable")[:, :10]
  targets = rng.integers(4, 260, (3, 20)).astype(np.int32)
  seg = np.ones((3, 20), np.int32)
  full = {"inputs": rng.integers(4, 260, (3, 20)).astype(np.int32), "targets": targets, "weights": weights,
          "segment_ids": seg, "positions": np.tile(np.arange(20, dtype=np.int32), (3, 1))}
  masked = {**full, "masked_positions": order, "masked_targets": np.take_along_axis(targets, order, 1),
            "masked_weights": np.take_along_axis(weights, order, 1)}
  assert weights.sum(1).max() <= 10  # every selection fits in M = 10
  loss = lambda m, b: tasks.loss_sums(m, jax.tree.map(jnp.asarray, b), task="mlm")["loss"]
  lf, gf = nnx.value_and_grad(loss)(model, full)
  lm, gm = nnx.value_and_grad(loss)(model, masked)
  np.testing.assert_allclose(lm, lf, rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7), gm, gf)


# --------------------------------------------------------------------------------------
# fused_qkv: self-attention's q, k, v as one matmul: the same parameters, the same numbers.
# --------------------------------------------------------------------------------------

# Larger weights than the default 0.02 so that q, k and v each move the logits (a swapped or
# misplaced projection shows far above the tolerances); a padded row exercises the masks.
FUSED_FAMILIES = {
    "mlm": (lambda **kw: M.RoFormerForMaskedLM(tiny(**kw), rngs=nnx.Rngs(21)),
            lambda m, x: m(x, attention_mask=x != 0)),
    "causal_lm": (lambda **kw: M.CausalLM(tiny(**kw), rngs=nnx.Rngs(21)), lambda m, x: m(x, attention_mask=x != 0)),
    # the decoder's self-attention fuses, its cross-attention (context given) never does
    "seq2seq": (lambda **kw: M.TransformerSeq2Seq(M.preset("transformer-base", **{**TINY, **kw}), rngs=nnx.Rngs(21)),
                lambda m, x: m(x, x[:, ::-1], src_mask=x != 0)),
}


def _fused_pair(family):
  build, _ = FUSED_FAMILIES[family]
  return build(init_std=0.2, fused_qkv=False), build(init_std=0.2, fused_qkv=True)


@pytest.mark.parametrize("family", sorted(FUSED_FAMILIES))
def test_fused_qkv_has_the_same_parameters(family):
  """The same state (paths, shapes, dtypes and, from the same rngs, values): a checkpoint of
  one is a checkpoint of the other."""
  plain, fused = _fused_pair(family)
  raw = lambda a: jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key) else a  # the rngs' keys
  flat = lambda m: {path: raw(v[...]) for path, v in nnx.to_flat_state(nnx.state(m))}
  a, b = flat(plain), flat(fused)
  assert sorted(a) == sorted(b)
  assert any(path[-2:] == ("query", "kernel") for path in a)  # the three projections are still there
  for path in a:
    assert (a[path].shape, a[path].dtype) == (b[path].shape, b[path].dtype), path
    np.testing.assert_array_equal(a[path], b[path], err_msg=str(path))


@pytest.mark.parametrize("family", sorted(FUSED_FAMILIES))
def test_fused_qkv_gives_the_same_logits_and_gradients(family):
  _, run = FUSED_FAMILIES[family]
  plain, fused = _fused_pair(family)
  x = ids(21, 2, 9).at[1, 6:].set(0)  # row 1 padded

  def loss_and_grads(model):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(params):
      logits = run(nnx.merge(graphdef, params, rest), x)
      return jnp.mean(jax.nn.logsumexp(logits, -1) - logits[..., 3]), logits

    (_, logits), grads = jax.value_and_grad(loss, has_aux=True)(params)
    return logits, grads

  ref_logits, ref_grads = loss_and_grads(plain)
  logits, grads = loss_and_grads(fused)
  assert float(jnp.abs(ref_logits).max()) > 0.1  # not a near-zero comparison
  np.testing.assert_allclose(logits, ref_logits, atol=1e-6, rtol=1e-6)
  assert jax.tree.structure(grads) == jax.tree.structure(ref_grads)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-6), grads, ref_grads)


def _dot_count(model, run, x) -> int:
  graphdef, state = nnx.split(model)
  hlo = jax.jit(lambda state: run(nnx.merge(graphdef, state), x)).lower(state).as_text()
  return len(re.findall(r"stablehlo\.dot_general\b", hlo))


@pytest.mark.parametrize("family, layers, fewer", [("mlm", 1, 2), ("mlm", 2, 4),
                                                   ("seq2seq", 1, 4)])  # encoder + decoder self-attention
def test_fused_qkv_lowers_to_two_fewer_dots_per_self_attention(family, layers, fewer):
  """One dot_general for q, k and v instead of three, in each self-attention (the decoder's
  cross-attention, whose k and v read the encoder's output, keeps its own three)."""
  build, run = FUSED_FAMILIES[family]
  x = ids(22, 2, 8)
  plain = _dot_count(build(num_layers=layers, fused_qkv=False), run, x)
  fused = _dot_count(build(num_layers=layers, fused_qkv=True), run, x)
  assert plain - fused == fewer, (plain, fused)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_fused_qkv_must_be_a_bool(value):
  with pytest.raises(ValueError, match="fused_qkv"):
    tiny(fused_qkv=value)


# --------------------------------------------------------------------------------------
# Activations: jax.nn's functions, recomputed from their input in the backward pass.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,reference", [
    ("gelu", lambda x: jax.nn.gelu(x, approximate=False)),
    ("gelu_new", lambda x: jax.nn.gelu(x, approximate=True)),
    ("silu", jax.nn.silu),
])
def test_activation_equals_jax_nn_and_keeps_only_its_input_for_the_backward(name, reference):
  x = jnp.linspace(-6.0, 6.0, 3 * 64, dtype=jnp.float32).reshape(3, 64)
  w = jnp.cos(jnp.arange(x.size, dtype=jnp.float32)).reshape(x.shape)
  act = M.ACTIVATIONS[name]
  np.testing.assert_array_equal(act(x), reference(x))
  grad = lambda f: jax.grad(lambda x: jnp.sum(f(x) * w))(x)
  np.testing.assert_allclose(grad(act), grad(reference), rtol=1e-6, atol=1e-7)
  # The residuals the backward pass keeps (the pullback's arrays of the input's shape): the
  # input alone, where plain autodiff of the same function keeps two or more.
  kept = lambda f: sum(leaf.shape == x.shape for leaf in jax.tree.leaves(jax.vjp(f, x)[1]))
  assert kept(act) == 1
  assert kept(reference) >= 2


# --------------------------------------------------------------------------------------
# Rematerialisation: the same loss and gradients, less memory kept for the backward pass.
# --------------------------------------------------------------------------------------


def _remat_loss_and_grads(remat: str, kind: str):
  from roformer_jax import models as m
  cfg = m.ModelConfig(vocab_size=64, d_model=32, num_layers=1 if kind == "seq2seq" else 2, num_heads=4, d_ff=64,
                      dropout=0.1, attention_dropout=0.1, remat=remat)
  ids = jax.random.randint(jax.random.key(1), (2, 16), 1, 64)
  if kind == "mlm":
    model = m.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0))
    call = lambda model: model(ids, deterministic=False)
  elif kind == "lm":
    model = m.CausalLM(cfg, rngs=nnx.Rngs(0))
    call = lambda model: model(ids, deterministic=False)
  else:
    model = m.TransformerSeq2Seq(cfg, rngs=nnx.Rngs(0))
    call = lambda model: model(ids, ids[:, ::-1], deterministic=False)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def loss(model):
    logits = call(model)  # dropout on: remat must replay the same masks
    return jnp.mean(jax.nn.logsumexp(logits, -1) - logits[..., 3])

  def step(params, rest):  # as the trainer's step: merge inside jit, nnx.value_and_grad
    value, grads = nnx.value_and_grad(loss)(nnx.merge(graphdef, params, rest))
    return value, nnx.state(grads, nnx.Param)

  compiled = jax.jit(step).lower(params, rest).compile()
  return compiled(params, rest), compiled.memory_analysis().temp_size_in_bytes


# Every model runs its layers through one helper (models.run_layers), so the encoder covers it
# with both policies; the causal LM's and the decoder's layers are the encoder's with a causal
# mask (and cross-attention, which the helper passes through like any other argument).
@pytest.mark.parametrize("kind, policies", [("mlm", ("full", "dots"))])
def test_remat_gives_the_same_loss_and_gradients_with_less_memory(kind, policies):
  (ref_loss, ref_grads), ref_temp = _remat_loss_and_grads("none", kind)
  for remat in policies:
    (loss, grads), temp = _remat_loss_and_grads(remat, kind)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), grads, ref_grads)
    assert temp < 0.8 * ref_temp, (remat, temp, ref_temp)  # XLA keeps fewer activations


def test_remat_is_checked():
  from roformer_jax import models as m
  with pytest.raises(ValueError, match="remat='some'.*'none', 'full', 'dots'"):
    m.ModelConfig(remat="some")


def test_jitted_equals_the_eager_call_and_takes_static_keywords():
  """models.jitted: the same outputs as the model's own call, with a mask (an array keyword),
  `deterministic` (a static one) and another method; a snapshot of the weights; a clear error
  for a method the model lacks."""
  model = M.RoFormerForMaskedLM(tiny(dropout=0.5), rngs=nnx.Rngs(3))
  x = ids(3, 2, 7)
  mask = jnp.ones((2, 7), bool).at[1, 5:].set(False)
  call = M.jitted(model)
  np.testing.assert_allclose(call(x, attention_mask=mask), model(x, attention_mask=mask), atol=1e-5)
  np.testing.assert_allclose(call(x, attention_mask=mask, deterministic=True), model(x, attention_mask=mask),
                             atol=1e-5)
  # deterministic=False reaches the model (dropout 0.5 changes the logits)
  assert float(jnp.abs(call(x, deterministic=False) - call(x)).max()) > 1e-3
  encode = M.jitted(model, "encode")
  np.testing.assert_allclose(encode(x), model.encode(x), atol=1e-5)
  before = call(x)
  table = model.roformer.embeddings.word.embedding
  table[...] = table[...] + 1.0
  np.testing.assert_array_equal(call(x), before)  # the weights of the model when jitted was called
  with pytest.raises(ValueError, match=r"method='decode_step': RoFormerForMaskedLM has no such method"):
    M.jitted(model, "decode_step")
