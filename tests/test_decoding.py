"""Specification of roformer_jax.decoding against full-forward references.

Every decode path is compared with a reference that recomputes the model's full forward
pass (`model(tokens)` / teacher-forced `model(src, tgt)`) at every step, so the KV cache,
linear attention's recurrent state, left padding and cache reordering are all checked
against the plain model. Beam search is also checked exhaustively: on a tiny vocabulary
with a beam wide enough to keep every prefix it must return the exact top-K hypotheses
under the GNMT length penalty.

Models are tiny (d=32, 2 layers; 1 for the V=6 brute force) with large random weights so
that greedy paths vary and the top-1 / top-2 logit margins along them stay far above
float32 noise (asserted). The pure loops are also run on a synthetic Markov "model"
(a table of logits) where every hypothesis can be enumerated.
"""

import functools
import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer_jax import decoding as dec
from roformer_jax.models import CausalLM, ModelConfig, TransformerSeq2Seq

TINY = dict(d_model=32, num_layers=2, num_heads=4, d_ff=64, dropout=0.0, attention_dropout=0.0,
            type_vocab_size=0)
LM_VOCAB = 37
LM_CONFIGS = {
    "softmax_rope": ModelConfig(vocab_size=LM_VOCAB, init_std=0.5, tie_embeddings=False, **TINY),
    "linear_elu": ModelConfig(vocab_size=LM_VOCAB, init_std=0.5, tie_embeddings=False, attention="linear",
                              feature_map="elu", **TINY),
    "linear_favor": ModelConfig(vocab_size=LM_VOCAB, init_std=0.5, tie_embeddings=False, attention="linear",
                                feature_map="favor", num_features=16, **TINY),
    # Length-dependent RoPE past its original length of 4 (prompts of 3-6 tokens, then 8 new):
    # the cache is rebuilt from its tokens whenever a row's frequencies change (longrope's
    # single switch is tested in test_models.py and test_passkey.py).
    "softmax_dynamic": ModelConfig(vocab_size=LM_VOCAB, init_std=0.5, tie_embeddings=False, **TINY,
                                   rope_scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4}),
}
S2S_CONFIG = ModelConfig(vocab_size=40, init_std=1.0, embed_init_std=1.0, **TINY)
BOS, PAD = 1, 0
N_NEW = 8  # generated tokens per LM test
T_S2S = 8  # target length per seq2seq test
MIN_MARGIN = 1e-3  # top-1 minus top-2 logit along every reference path (float32 noise is ~1e-6)
LEFT_PADS = (0, 3, 3)  # left padding of the three prompt rows (rows 1, 2 alone: one shape)


@functools.cache
def lm(name: str) -> CausalLM:
  return CausalLM(LM_CONFIGS[name], rngs=nnx.Rngs(0))


@functools.cache
def s2s() -> TransformerSeq2Seq:
  return TransformerSeq2Seq(S2S_CONFIG, rngs=nnx.Rngs(1))


def prompts():
  """int32[3, 6] left-padded prompts (pad 0, tokens 1..V-1) and their bool mask."""
  rng = np.random.default_rng(0)
  p = 6
  tokens = rng.integers(1, LM_VOCAB, size=(len(LEFT_PADS), p)).astype(np.int32)
  mask = np.arange(p)[None, :] >= np.array(LEFT_PADS)[:, None]
  return np.where(mask, tokens, PAD).astype(np.int32), mask


def sources():
  """int32[3, 7] right-padded source sentences (pad 0)."""
  rng = np.random.default_rng(1)
  src = rng.integers(3, S2S_CONFIG.vocab_size, size=(3, 7)).astype(np.int32)
  lengths = np.array([7, 5, 3])
  return np.where(np.arange(7)[None, :] < lengths[:, None], src, PAD).astype(np.int32)


# ---- full-forward references ----------------------------------------------------------


@functools.partial(jax.jit, static_argnums=0)
def _lm_forward(graphdef, state, tokens, mask):
  return nnx.merge(graphdef, state)(tokens, attention_mask=mask)


@functools.partial(jax.jit, static_argnums=0)
def _s2s_forward(graphdef, state, src, tgt):
  return jax.nn.log_softmax(nnx.merge(graphdef, state)(src, tgt), axis=-1)


def s2s_log_probs(model, src, tgt, rows=16):
  """Teacher-forced log-probs float[N, T, V] of decoder inputs tgt int[N, T] given src
  int[N, S], evaluated in fixed chunks of `rows` (one compiled forward per model)."""
  n = len(src)
  pad = -n % rows
  src = np.concatenate([src, np.repeat(src[:1], pad, axis=0)])
  tgt = np.concatenate([tgt, np.repeat(tgt[:1], pad, axis=0)])
  graphdef, state = nnx.split(model)
  out = [np.asarray(_s2s_forward(graphdef, state, src[i:i + rows], tgt[i:i + rows]))
         for i in range(0, n + pad, rows)]
  return np.concatenate(out)[:n]


def lm_path_logits(model, prompt, mask, new_tokens, known=None):
  """Full-forward logits float[B, N, V] predicting each of new_tokens int[B, N] (after the
  left-padded prompt), recomputed from scratch over the whole sequence. known: how many of
  new_tokens exist yet (None = all); the rest are masked padding, so that a length-dependent
  RoPE sees the sequence's real length, not the padded one."""
  b, p = prompt.shape
  tokens = np.concatenate([prompt, new_tokens], axis=1).astype(np.int32)
  n = new_tokens.shape[1]
  full_mask = np.concatenate([mask, np.broadcast_to(np.arange(n) < (n if known is None else known), (b, n))], axis=1)
  logits = np.asarray(_lm_forward(*nnx.split(model), tokens, full_mask))
  return logits[:, p - 1:-1]


def reference_greedy_lm(model, prompt, mask, n):
  """Greedy tokens int[B, n] recomputing the full forward at every step, and the smallest
  top-1 / top-2 margin seen. The sequence is right-padded to a fixed length P + n (causal,
  so later slots do not affect earlier logits; they are masked, so they add no length either):
  one compiled forward for all steps."""
  b, p = prompt.shape
  new = np.zeros((b, n), np.int32)
  margins = []
  for i in range(n):
    logits = lm_path_logits(model, prompt, mask, new, known=i)[:, i]
    top2 = np.sort(logits, axis=-1)[:, -2:]
    margins.append(top2[:, 1] - top2[:, 0])
    new[:, i] = logits.argmax(-1)
  return new, float(np.min(margins))


def reference_greedy_s2s(model, src, t):
  """Greedy targets int[B, t] (no EOS stop) by teacher-forced full forwards, and the margin."""
  b = src.shape[0]
  tgt = np.full((b, t), BOS, np.int32)  # decoder input: BOS, y_1, ..., y_{t-1}
  out = np.zeros((b, t), np.int32)
  margins = []
  for i in range(t):
    logp = s2s_log_probs(model, src, tgt)[:, i]
    top2 = np.sort(logp, axis=-1)[:, -2:]
    margins.append(top2[:, 1] - top2[:, 0])
    out[:, i] = logp.argmax(-1)
    if i + 1 < t:
      tgt[:, i + 1] = out[:, i]
  return out, float(np.min(margins))


def truncate_at_eos(seqs, eos_id, pad_id=PAD):
  """Everything after the first eos (kept) replaced by pad_id; also returns lengths |Y|."""
  seqs = np.array(seqs)
  is_eos = seqs == eos_id
  t = seqs.shape[-1]
  first = np.where(is_eos.any(-1), is_eos.argmax(-1), t)
  lengths = np.minimum(first + 1, t)
  seqs[np.arange(t) >= lengths[..., None]] = pad_id
  return seqs, lengths


def teacher_forced_scores(model, src, seqs, eos_id, alpha):
  """log P(Y | X) / lp(|Y|) of hypotheses int[B, K, T] for src int[B, S], recomputed by
  teacher-forced full forwards, in float64 sums."""
  b, k, t = seqs.shape
  seqs, lengths = truncate_at_eos(seqs, eos_id)
  flat = seqs.reshape(b * k, t)
  tgt_in = np.concatenate([np.full((b * k, 1), BOS, np.int32), flat[:, :-1]], axis=1)
  logp = s2s_log_probs(model, np.repeat(src, k, axis=0), tgt_in)
  tok_logp = np.take_along_axis(logp, flat[..., None], axis=-1)[..., 0].astype(np.float64)
  tok_logp[np.arange(t)[None, :] >= lengths.reshape(-1)[:, None]] = 0.0
  total = tok_logp.sum(-1).reshape(b, k)
  return total / ((5.0 + lengths) / 6.0) ** alpha


# ---- CausalLM: greedy generate --------------------------------------------------------


# Eager dynamic NTK compiles its exact traced phases for every step (rope/float2.py): 15-45 s each on the 2-core
# machine, so these run in make test's slow tier only (tests/test_layer_types.py checks dynamic decoding jitted).
_DYNAMIC_SLOW = pytest.mark.slow


def _with_dynamic_slow(names):
  return [pytest.param(n, marks=_DYNAMIC_SLOW) if n == "softmax_dynamic" else n for n in names]


@pytest.mark.parametrize("name", _with_dynamic_slow(LM_CONFIGS))
def test_greedy_generate_matches_full_forward_and_left_padding(name):
  """Cached / recurrent decoding == argmax of the full forward recomputed every step, for a
  left-padded batch; each padded row also equals that row generated alone, unpadded."""
  model = lm(name)
  prompt, mask = prompts()
  expected, margin = reference_greedy_lm(model, prompt, mask, N_NEW)
  assert margin > MIN_MARGIN, f"reference path has a near tie ({margin:.2e}); change the seed"
  assert len(np.unique(expected)) > 3, "degenerate greedy path; the test would be weak"

  out = dec.generate(model, prompt, prompt_mask=mask, max_new_tokens=N_NEW)
  chex.assert_shape(out, (len(LEFT_PADS), N_NEW))
  assert out.dtype == jnp.int32
  np.testing.assert_array_equal(np.asarray(out), expected)

  for r in (1, 2):
    # Alone and unpadded, with a cache longer than needed (unused slots must stay masked).
    alone = dec.generate(model, prompt[r:r + 1, LEFT_PADS[r]:], max_new_tokens=N_NEW,
                         cache_len=prompt.shape[1] + N_NEW - 1)
    np.testing.assert_array_equal(np.asarray(alone)[0], expected[r], err_msg=f"row {r}")


def test_generate_eos_then_pad_only():
  """After a row emits eos_id it emits pad_id only, and everything up to the eos is as
  without eos_id (sampling: step i draws with fold_in(rng, i), so the eos run is the free
  run cut at the eos). Greedy eos handling: test_greedy_translate_matches_full_forward."""
  model = lm("softmax_rope")
  prompt, mask = prompts()
  kw = dict(prompt_mask=mask, max_new_tokens=N_NEW, temperature=1.5, top_k=3, rng=jax.random.key(7))
  free = np.asarray(dec.generate(model, prompt, **kw))
  eos = int(free[1, 2])
  expected, lengths = truncate_at_eos(free, eos, pad_id=5)
  assert lengths.min() < N_NEW and (expected == 5).any()
  out = np.asarray(dec.generate(model, prompt, eos_id=eos, pad_id=5, **kw))
  np.testing.assert_array_equal(out, expected)


# ---- CausalLM: sampling ---------------------------------------------------------------


def test_top_k_1_sampling_equals_greedy():
  model = lm("softmax_rope")
  prompt, mask = prompts()
  greedy = dec.generate(model, prompt, prompt_mask=mask, max_new_tokens=N_NEW)
  sampled = dec.generate(model, prompt, prompt_mask=mask, max_new_tokens=N_NEW, temperature=0.7, top_k=1,
                         rng=jax.random.key(3))
  np.testing.assert_array_equal(np.asarray(sampled), np.asarray(greedy))


def test_sampling_is_deterministic_given_rng_and_stays_in_top_k():
  model = lm("softmax_rope")
  prompt, mask = prompts()
  k = 3
  run = lambda key, temperature=2.0: np.asarray(dec.generate(
      model, prompt, prompt_mask=mask, max_new_tokens=N_NEW, temperature=temperature, top_k=k, rng=key))
  a, b = run(jax.random.key(11)), run(jax.random.key(11))
  np.testing.assert_array_equal(a, b)
  others = [run(jax.random.key(s)) for s in (12, 13, 14)]
  assert any((o != a).any() for o in others), "different keys gave identical samples"
  greedy = np.asarray(dec.generate(model, prompt, prompt_mask=mask, max_new_tokens=N_NEW))
  assert (a != greedy).any(), "temperature 2 top-3 sampling reproduced greedy exactly"
  # A tiny temperature makes sampling greedy (margins >= MIN_MARGIN become >= 100 nats).
  np.testing.assert_array_equal(run(jax.random.key(16), temperature=1e-5), greedy)

  for sample in [a, *others, run(jax.random.key(15), temperature=50.0)]:
    logits = lm_path_logits(model, prompt, mask, sample)  # [B, N, V] along the sampled path
    top = np.argsort(logits, axis=-1)[..., -k:]
    assert (top == sample[..., None]).any(-1).all(), "a sample fell outside the top-k set"


# ---- caches ---------------------------------------------------------------------------


def test_reorder_cache_gathers_batched_leaves_and_keeps_scalars():
  cache = {"index": jnp.int32(5), "kv": jnp.arange(12.0).reshape(3, 2, 2), "pos": jnp.array([7, 8, 9]),
           "nested": [{"s": jnp.arange(3)}]}
  out = dec.reorder_cache(cache, jnp.array([2, 0, 0, 1]))
  assert int(out["index"]) == 5 and out["index"].shape == ()
  np.testing.assert_array_equal(out["pos"], [9, 7, 7, 8])
  np.testing.assert_array_equal(out["kv"], np.asarray(cache["kv"])[[2, 0, 0, 1]])
  np.testing.assert_array_equal(out["nested"][0]["s"], [2, 0, 0, 1])
  with pytest.raises(ValueError, match="1-D integer"):
    dec.reorder_cache(cache, jnp.array([[0, 1]]))


@functools.partial(jax.jit, static_argnums=0)
def _reorder_vs_permuted(graphdef, state, inputs, mask, perm, tokens):
  """Prefill the batch and the permuted batch; reorder the first cache by perm; decode one
  token with each. Returns (prefilled cache, reordered, permuted-prefill, their step logits
  and caches)."""
  model = nnx.merge(graphdef, state)
  step = dec.make_step_fn(graphdef, state)
  b, p = inputs.shape

  def prefill(inputs, mask):
    if isinstance(model, TransformerSeq2Seq):  # inputs = source; prefill = encoder + BOS
      cache = model.init_cache(model.encode(inputs, src_mask=mask), mask, 2)
      return step(jnp.full((b, 1), BOS, jnp.int32), cache)[1]
    return model.decode_step(inputs, model.init_cache(b, p + 1), token_mask=mask)[1]

  cache = prefill(inputs, mask)
  moved = dec.reorder_cache(cache, perm)
  permuted = prefill(inputs[perm], mask[perm])
  return cache, moved, permuted, step(tokens[perm], moved), step(tokens[perm], permuted)


@pytest.mark.parametrize("name", _with_dynamic_slow(["softmax_rope", "linear_favor", "softmax_dynamic", "seq2seq"]))
def test_reorder_cache_then_decode_equals_decoding_the_permuted_batch(name):
  """The KV cache, the linear-attention (s, z, segment) state and the seq2seq cross-attention
  cache all follow `reorder_cache`: a reordered cache is the cache of the permuted batch,
  and decoding from it gives the same logits and next cache."""
  perm = jnp.array([2, 0, 1])
  tokens = jnp.array([[5], [7], [9]], jnp.int32)
  if name == "seq2seq":
    model, inputs = s2s(), sources()
    mask = inputs != PAD
  else:
    model, (inputs, mask) = lm(name), prompts()
  cache, moved, permuted, step_a, step_b = _reorder_vs_permuted(
      *nnx.split(model), jnp.asarray(inputs), jnp.asarray(mask), perm, tokens)
  chex.assert_trees_all_close(moved, permuted, atol=1e-5, rtol=1e-5)
  chex.assert_trees_all_close(step_a, step_b, atol=1e-5, rtol=1e-5)
  assert int(moved["index"]) == int(cache["index"]) > 0
  # The check can fail: the rows' caches differ, so a missing or wrong gather shows.
  diffs = [np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32)).max()
           for a, b in zip(jax.tree.leaves(cache), jax.tree.leaves(moved), strict=True) if np.ndim(a) > 0]
  assert max(diffs) > 1e-2


# ---- seq2seq: greedy and beam search --------------------------------------------------


@functools.cache
def s2s_reference():
  """(src, greedy targets without eos stop, the eos id used by the seq2seq tests)."""
  src = sources()
  free, margin = reference_greedy_s2s(s2s(), src, T_S2S)
  assert margin > MIN_MARGIN, f"reference path has a near tie ({margin:.2e}); change the seed"
  eos = int(free[1, 1])  # a token the model emits mid-sentence: some rows stop early
  return src, free, eos


def test_greedy_translate_matches_full_forward():
  src, free, eos = s2s_reference()
  expected, lengths = truncate_at_eos(free, eos)
  assert lengths.min() < T_S2S and lengths.max() == T_S2S, "want rows that stop early and rows that run to max_len"
  out = dec.greedy_translate(s2s(), src, max_len=T_S2S, bos_id=BOS, eos_id=eos)
  chex.assert_shape(out, (3, T_S2S))
  np.testing.assert_array_equal(np.asarray(out), expected)


def test_beam_size_one_equals_greedy_translate():
  """With alpha = 0 (raw log-probs) a width-1 beam is greedy decoding exactly: EOS
  finishes a hypothesis only when it is the top candidate, and after that the alive
  beam's log-prob can only fall. (With alpha > 0 a longer hypothesis may legitimately
  outscore the greedy one.)"""
  src, _, eos = s2s_reference()
  greedy = np.asarray(dec.greedy_translate(s2s(), src, max_len=T_S2S, bos_id=BOS, eos_id=eos))
  seqs, scores = dec.beam_search(s2s(), src, beam_size=1, alpha=0.0, max_len=T_S2S, bos_id=BOS, eos_id=eos)
  chex.assert_shape(seqs, (3, 1, T_S2S))
  np.testing.assert_array_equal(np.asarray(seqs)[:, 0], greedy)
  recomputed = teacher_forced_scores(s2s(), src, greedy[:, None], eos, 0.0)
  np.testing.assert_allclose(np.asarray(scores), recomputed, rtol=1e-5, atol=1e-4)


def test_beam_scores_sorted_and_equal_recomputed_length_penalised_log_probs():
  src, _, eos = s2s_reference()
  alpha = 0.6
  seqs, scores = dec.beam_search(s2s(), src, beam_size=4, alpha=alpha, max_len=T_S2S, bos_id=BOS, eos_id=eos)
  seqs, scores = np.asarray(seqs), np.asarray(scores)
  chex.assert_shape(seqs, (3, 4, T_S2S))
  assert scores.dtype == np.float32 and np.isfinite(scores).all()
  assert (np.diff(scores, axis=1) <= 0).all(), f"scores not sorted best first: {scores}"
  np.testing.assert_allclose(scores, teacher_forced_scores(s2s(), src, seqs, eos, alpha), rtol=1e-5, atol=1e-4)
  truncated, lengths = truncate_at_eos(seqs, eos)
  np.testing.assert_array_equal(seqs, truncated)  # pad only after eos
  assert lengths.min() < T_S2S, "no hypothesis ended with eos; the length penalty went untested"
  for b in range(3):  # hypotheses are distinct
    assert len({tuple(h) for h in seqs[b]}) == 4

  _, scores1 = dec.beam_search(s2s(), src, beam_size=1, alpha=alpha, max_len=T_S2S, bos_id=BOS, eos_id=eos)
  assert (scores[:, 0] >= np.asarray(scores1)[:, 0] - 1e-6).all()


def test_beam_search_finds_the_exact_best_on_a_tiny_vocabulary():
  """V = 6, 3 tokens: 156 hypotheses. A beam of 32 >= V * (V - 1) keeps every prefix and
  every EOS candidate, so the returned top-32 must equal brute-force enumeration."""
  v, t, k, eos, alpha = 6, 3, 32, 2, 0.6
  model = TransformerSeq2Seq(S2S_CONFIG.replace(vocab_size=v, num_layers=1), rngs=nnx.Rngs(2))
  src = np.array([[3, 4, 5, 3, 0], [5, 5, 4, 0, 0]], np.int32)
  seqs, scores = dec.beam_search(model, src, beam_size=k, alpha=alpha, max_len=t, bos_id=BOS, eos_id=eos)
  seqs, scores = np.asarray(seqs), np.asarray(scores)

  every = np.array(list(itertools.product(range(v), repeat=t)), np.int32)  # [216, 3]
  hyps = np.unique(truncate_at_eos(every, eos)[0], axis=0)
  assert len(hyps) == 1 + (v - 1) + (v - 1) ** 2 * v
  brute = teacher_forced_scores(model, src, np.stack([hyps] * len(src)), eos, alpha)  # [B, 156]
  for b in range(len(src)):
    order = np.argsort(-brute[b], kind="stable")[:k]
    assert brute[b, order[0]] - brute[b, order[1]] > 1e-4
    np.testing.assert_array_equal(seqs[b, 0], hyps[order[0]])
    np.testing.assert_array_equal(seqs[b], hyps[order])
    np.testing.assert_allclose(scores[b], brute[b, order], rtol=1e-5, atol=1e-4)


# ---- the pure loops on a synthetic Markov "model" -------------------------------------


_STEP_CALLS: list[int] = []  # filled by markov_step_fn(count=True) from inside jitted loops


def markov_step_fn(table, count=False):
  """A step function over a fixed table of logits [B, T, V (previous token), V (next)].

  The cache is {"row": int[B*K] example id, "index": step}; reorder_cache keeps "row" in
  step with the beams. count=True appends each executed step to _STEP_CALLS (debug callback).
  """

  def step_fn(tokens, cache):
    if count:
      jax.debug.callback(lambda i: _STEP_CALLS.append(int(i)), cache["index"])
    logits = table[cache["row"], cache["index"], tokens[:, 0]]
    return logits, {"row": cache["row"], "index": cache["index"] + 1}

  return step_fn


def markov_tables(seed, b, t, v, eos_bias=0.0, scale=2.0):
  table = np.random.default_rng(seed).normal(size=(b, t, v, v)) * scale
  table[..., 2] += eos_bias  # eos = 2
  return jnp.asarray(table, jnp.float32)


@functools.partial(jax.jit, static_argnames=("k", "early_stop"))
def _markov_beam(table, alpha, *, k, early_stop):
  b, t = table.shape[:2]
  cache = {"row": jnp.repeat(jnp.arange(b), k), "index": jnp.int32(0)}
  return dec.beam_search_loop(markov_step_fn(table, count=True), cache, batch=b, beam_size=k, alpha=alpha,
                              max_len=t, bos_id=BOS, eos_id=2, pad_id=PAD, early_stop=early_stop)


@jax.jit
def _markov_greedy(table):
  b, t = table.shape[:2]
  step = markov_step_fn(table)
  logits, cache = step(jnp.full((b, 1), BOS, jnp.int32), {"row": jnp.arange(b), "index": jnp.int32(0)})
  return dec.sample_loop(step, logits, cache, max_new_tokens=t, eos_id=2)


def run_beam(table, *, k, alpha, early_stop=True):
  """(seqs, scores, number of steps run)."""
  _STEP_CALLS.clear()
  seqs, scores = jax.block_until_ready(_markov_beam(table, jnp.float32(alpha), k=k, early_stop=early_stop))
  jax.effects_barrier()
  return np.asarray(seqs), np.asarray(scores), len(_STEP_CALLS)


def markov_brute_force(table, alpha, eos=2):
  """Every hypothesis of every example with its exact length-penalised score (float64)."""
  b, t, v, _ = table.shape
  logp = np.asarray(jax.nn.log_softmax(table.astype(jnp.float32), axis=-1), np.float64)
  every = np.array(list(itertools.product(range(v), repeat=t)))
  hyps, lengths = truncate_at_eos(every, eos)
  hyps, first = np.unique(hyps, axis=0, return_index=True)
  lengths = lengths[first]
  prev = np.concatenate([np.full((len(hyps), 1), BOS), hyps[:, :-1]], axis=1)
  steps = np.arange(t)[None, :]
  tok = logp[:, steps, prev, hyps] * (steps < lengths[:, None])  # [B, H, T]
  return hyps, tok.sum(-1) / ((5.0 + lengths) / 6.0) ** alpha


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_search_loop_exact_on_markov_model(alpha):
  b, t, v = 3, 4, 4
  k = v * (v - 1) ** (t - 2)  # keeps every prefix and every EOS candidate: exact search
  table = markov_tables(0, b, t, v)
  seqs, scores, _ = run_beam(table, k=k, alpha=alpha)
  hyps, brute = markov_brute_force(table, alpha)
  for i in range(b):
    order = np.argsort(-brute[i], kind="stable")[:k]
    np.testing.assert_allclose(scores[i], brute[i][order], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(seqs[i, 0], hyps[order[0]])


def test_beam_search_early_stop_changes_nothing_but_the_step_count():
  """With a likely EOS, the finished list fills up early and the loop stops; the result is
  identical to running every step. (Too eager a bound, e.g. lp(current length) instead of
  lp(max_len) with alpha > 0, would lose hypotheses that a longer length rescues.)"""
  b, t, v, k = 4, 10, 5, 3
  stopped_early = 0
  for seed, alpha, eos_bias in itertools.product(range(3), (0.0, 0.6, 1.5), (1.0, 3.0)):
    table = markov_tables(seed, b, t, v, eos_bias=eos_bias)
    early = run_beam(table, k=k, alpha=alpha)
    full = run_beam(table, k=k, alpha=alpha, early_stop=False)
    np.testing.assert_array_equal(early[0], full[0], err_msg=f"seed {seed} alpha {alpha}")
    np.testing.assert_array_equal(early[1], full[1])
    assert full[2] == t
    stopped_early += early[2] < t
  assert stopped_early >= 6, f"early stopping fired in only {stopped_early} of 18 cases"


def test_width_one_beam_is_greedy_on_markov_model():
  b, t, v = 4, 6, 5
  for seed in range(8):
    table = markov_tables(seed, b, t, v, eos_bias=1.0)
    seqs, scores, _ = run_beam(table, k=1, alpha=0.0)
    np.testing.assert_array_equal(seqs[:, 0], np.asarray(_markov_greedy(table)), err_msg=f"seed {seed}")
    hyps, brute = markov_brute_force(table, 0.0)
    index = {tuple(h): j for j, h in enumerate(hyps)}
    for i in range(b):
      np.testing.assert_allclose(scores[i, 0], brute[i, index[tuple(seqs[i, 0])]], rtol=1e-5, atol=1e-5)


@jax.jit
def _constant_step_samples(logits, key, temperature):
  """Single-step sample_loop draws for a batch of identical rows with fixed logits [B, V]."""
  step = lambda tokens, cache: (logits, cache)
  return (dec.sample_loop(step, logits, {}, max_new_tokens=1, temperature=temperature, rng=key),
          dec.sample_loop(step, logits, {}, max_new_tokens=1, temperature=temperature, top_k=3, rng=key))


def test_sampling_distribution_is_softmax_of_logits_over_temperature():
  """Empirical token frequencies over 20k rows match softmax(logits / T), renormalised over
  the top 3 with top_k=3 (4-sigma tolerance, ~0.014)."""
  base = np.array([1.0, -0.5, 0.3, 2.0, 0.0], np.float32)
  logits = jnp.asarray(np.tile(base, (20000, 1)))
  for temperature in (0.5, 2.0):
    full, top3 = _constant_step_samples(logits, jax.random.key(0), jnp.float32(temperature))
    p = np.exp(base / temperature)
    keep = np.argsort(base)[-3:]
    p3 = np.where(np.isin(np.arange(5), keep), p, 0.0)
    for samples, probs in ((full, p / p.sum()), (top3, p3 / p3.sum())):
      freq = np.bincount(np.asarray(samples)[:, 0], minlength=5) / len(samples)
      np.testing.assert_allclose(freq, probs, atol=0.014, err_msg=f"T={temperature}")


# ---- argument checks ------------------------------------------------------------------


def test_generate_validates_arguments():
  model = lm("softmax_rope")
  prompt, mask = prompts()
  ok = dict(prompt_mask=mask, max_new_tokens=4)
  bad = [
      (dict(temperature=-0.5), "temperature"),
      (dict(temperature=float("nan")), "temperature"),
      (dict(temperature=1.0), "rng"),
      (dict(temperature=1.0, top_k=0, rng=jax.random.key(0)), "top_k"),
      (dict(temperature=1.0, top_k=LM_VOCAB + 1, rng=jax.random.key(0)), "top_k"),
      (dict(max_new_tokens=0), "max_new_tokens"),
      (dict(cache_len=prompt.shape[1] + 2), "cache_len"),
      (dict(eos_id=LM_VOCAB), "eos_id"),
      (dict(pad_id=-1), "pad_id"),
      (dict(prompt_mask=mask[:, ::-1]), "LEFT"),
      (dict(prompt_mask=np.zeros_like(mask)), "at least one"),
      (dict(prompt_mask=mask[:, 1:]), "shape"),
  ]
  for changes, message in bad:
    with pytest.raises(ValueError, match=message):
      dec.generate(model, prompt, **{**ok, **changes})
  with pytest.raises(ValueError, match="integer array"):
    dec.generate(model, prompt.astype(np.float32), max_new_tokens=2)
  with pytest.raises(TypeError, match="CausalLM"):
    dec.generate(s2s(), prompt, max_new_tokens=2)
  learned = CausalLM(LM_CONFIGS["softmax_rope"].replace(position="learned", max_position=8), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="max_position"):
    dec.generate(learned, prompt, max_new_tokens=4)


def test_seq2seq_decoding_validates_arguments():
  src = sources()
  ok = dict(max_len=4, bos_id=BOS, eos_id=2)
  for changes, message in [(dict(beam_size=0), "beam_size"), (dict(alpha=-0.1), "alpha"),
                           (dict(max_len=0), "max_len"), (dict(eos_id=40), "eos_id"),
                           (dict(src_mask=np.zeros(src.shape, bool)), "at least one")]:
    with pytest.raises(ValueError, match=message):
      dec.beam_search(s2s(), src, **{**ok, **changes})
  with pytest.raises(ValueError, match="bos_id"):
    dec.greedy_translate(s2s(), src, max_len=4, bos_id=-1, eos_id=2)
  with pytest.raises(TypeError, match="TransformerSeq2Seq"):
    dec.beam_search(lm("softmax_rope"), src, **ok)
  with pytest.raises(TypeError, match="TransformerSeq2Seq"):
    dec.seq2seq_step_fn(lm("softmax_rope"))
  with pytest.raises(TypeError, match="CausalLM"):
    dec.lm_step_fn(s2s())
