"""Autoregressive decoding: greedy / temperature / top-k / top-p sampling and GNMT beam search.

Shapes: B batch, K beams, P prompt length, S source length, T generated length, V vocab.

Everything is built around one pure **step function**

    step_fn(tokens int[B, 1], cache) -> (logits float32[B, V] (or [B, 1, V]), new cache)

where `cache` is any pytree whose leaves have the batch as leading axis, except scalars
(the models' `cache["index"]`). Softmax attention's k/v slots, linear attention's recurrent
(s, z) state and the encoder-decoder's cross-attention keys are all just leaves, so the
same loops serve `CausalLM` (softmax or linear attention) and `TransformerSeq2Seq`, and a
beam search reorders any cache with one gather (`reorder_cache`).

Layers:
- step functions: `make_step_fn(graphdef, state)` (pure: `nnx.merge` happens inside, so the
  state can be a traced jit argument), `lm_step_fn(model)`, `seq2seq_step_fn(model)`.
- pure loops (jit-compatible, `lax.while_loop`, static shapes): `sample_loop`, `beam_search_loop`.
- model entry points, validated in Python and jitted whole (the model goes in as
  `nnx.split` graphdef (static) + state (traced)): `generate` for `CausalLM`,
  `greedy_translate` and `beam_search` for `TransformerSeq2Seq`.
- text: `translate` decodes seq2seq batches into detokenized hypotheses and references
  (eval.py's BLEU, generate.py, the training samples); `strip_ids` cuts a row at its EOS.

Conventions: generated tokens never include the prompt / BOS; after a row emits `eos_id`
it emits `pad_id` only. A hypothesis length |Y| counts its tokens including the EOS.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer_jax.models import CausalLM, TransformerSeq2Seq

Cache = Any  # a pytree: batched leaves [B, ...] plus scalar leaves
StepFn = Callable[[jax.Array, Cache], tuple[jax.Array, Cache]]

# Log-probability of the padding beams (flax/t2t convention): finite, so sums stay finite,
# and far below any real hypothesis. A candidate is real iff its log-prob > NEG_INF / 2.
NEG_INF = -1.0e7


# --------------------------------------------------------------------------------------
# Step functions and cache reordering.
# --------------------------------------------------------------------------------------


def make_step_fn(graphdef: nnx.GraphDef, state: nnx.State, method: str = "decode_step") -> StepFn:
  """A pure step function from an `nnx.split` model: (tokens int[B, 1], cache) -> (float32[B, V], cache).

  The module is rebuilt with `nnx.merge(graphdef, state)` inside every call, so under
  `jax.jit` the parameters are whatever `state` is (a traced argument, not baked-in
  constants) and no Python object is mutated by the loop body.
  """

  def step_fn(tokens, cache):
    model = nnx.merge(graphdef, state)
    logits, cache = getattr(model, method)(tokens, cache)
    return _last_logits(logits), cache

  return step_fn


def lm_step_fn(model: CausalLM) -> StepFn:
  """Step function of a `CausalLM`'s `decode_step` (cache from `init_cache` + a prefill)."""
  if not isinstance(model, CausalLM):
    raise TypeError(f"lm_step_fn needs a CausalLM, got {type(model).__name__}.")
  return make_step_fn(*nnx.split(model))


def seq2seq_step_fn(model: TransformerSeq2Seq) -> StepFn:
  """Step function of a `TransformerSeq2Seq` decoder (cache from `init_cache(encoded, ...)`)."""
  if not isinstance(model, TransformerSeq2Seq):
    raise TypeError(f"seq2seq_step_fn needs a TransformerSeq2Seq, got {type(model).__name__}.")
  return make_step_fn(*nnx.split(model))


def _last_logits(logits: jax.Array) -> jax.Array:
  """[B, V] or [B, L, V] -> float32[B, V] (the last position)."""
  if logits.ndim == 3:
    logits = logits[:, -1]
  if logits.ndim != 2:
    raise ValueError(f"a step function must return logits [B, V] or [B, L, V], got shape {logits.shape}.")
  return logits.astype(jnp.float32)


def reorder_cache(cache: Cache, indices: jax.Array) -> Cache:
  """Gathers every batched leaf of `cache` on axis 0 by `indices` int[B'] (B' may differ
  from B: tiling a cache over beams is `indices = repeat(arange(B), K)`). Scalar leaves
  (the shared slot `index`) are kept as they are."""
  indices = jnp.asarray(indices)
  if indices.ndim != 1 or not jnp.issubdtype(indices.dtype, jnp.integer):
    raise ValueError(f"indices must be a 1-D integer array, got dtype {indices.dtype} shape {indices.shape}.")
  return jax.tree.map(lambda x: x if jnp.ndim(x) == 0 else jnp.take(x, indices, axis=0), cache)


# --------------------------------------------------------------------------------------
# Token choice and the sampling loop.
# --------------------------------------------------------------------------------------


def _is_greedy(temperature) -> bool:
  """Greedy iff temperature is the Python number 0; a jax scalar always samples."""
  return isinstance(temperature, (int, float, np.number)) and temperature == 0


def nucleus_logits(logits: jax.Array, top_p: float | jax.Array) -> jax.Array:
  """Top-p (nucleus) filtering (Holtzman et al. 2020): logits float[..., N] with every token
  outside the nucleus set to -inf.

  The nucleus of a row is the smallest set of its most probable tokens whose total
  probability under softmax(logits) reaches `top_p`: in order of decreasing logit (ties by
  lower index), a token is kept while the probability of the tokens before it is below
  top_p. The most probable token is always kept, so top_p -> 0 is greedy and top_p = 1
  keeps every token of non-zero probability. `top_p` may be traced.
  """
  logits = logits.astype(jnp.float32)
  order = jnp.argsort(-logits, axis=-1, stable=True)
  ranked = jnp.take_along_axis(logits, order, axis=-1)
  probs = jax.nn.softmax(ranked, axis=-1)
  before = jnp.cumsum(probs, axis=-1) - probs  # the probability of the higher-ranked tokens
  # top_p >= 1 keeps everything outright: the float32 sum of the probabilities can reach 1
  # a few tokens before the end and would drop the smallest ones.
  keep_ranked = (before < top_p) | (jnp.arange(logits.shape[-1]) == 0) | (top_p >= 1.0)
  keep = jnp.take_along_axis(keep_ranked, jnp.argsort(order, axis=-1), axis=-1)  # back to vocabulary order
  return jnp.where(keep, logits, -jnp.inf)


def choose_tokens(logits: jax.Array, rng: jax.Array | None, *, temperature: float | jax.Array = 0.0,
                  top_k: int | None = None, top_p: float | jax.Array | None = None) -> jax.Array:
  """Next tokens int32[B] from logits float[B, V].

  temperature: the Python number 0 = argmax (greedy; top_k and top_p are irrelevant).
  Otherwise (a positive number or a traced float32 scalar) a sample from
  softmax(logits / temperature), restricted to the `top_k` (static) largest logits when
  given: exactly k candidates, `lax.top_k` then a categorical draw over those k.
  top_p: nucleus sampling (`nucleus_logits`), applied after the temperature and top_k, as
  HF transformers does: the draw is from the smallest set of candidates whose probability
  reaches top_p. None (the default) = no nucleus filter; a value may be traced.
  """
  if _is_greedy(temperature):
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  scaled = logits.astype(jnp.float32) / temperature
  if top_k is None:
    if top_p is not None:
      scaled = nucleus_logits(scaled, top_p)
    return jax.random.categorical(cast(jax.Array, rng), scaled, axis=-1).astype(jnp.int32)  # sampling: an rng
  values, idx = jax.lax.top_k(scaled, top_k)
  if top_p is not None:
    values = nucleus_logits(values, top_p)
  pick = jax.random.categorical(cast(jax.Array, rng), values, axis=-1)  # sampling: the caller gave an rng
  return jnp.take_along_axis(idx, pick[:, None], axis=-1)[:, 0].astype(jnp.int32)


def sample_loop(step_fn: StepFn, logits: jax.Array, cache: Cache, *, max_new_tokens: int,
                temperature: float | jax.Array = 0.0, top_k: int | None = None,
                rng: jax.Array | None = None, eos_id: int | None = None, pad_id: int = 0,
                top_p: float | jax.Array | None = None) -> jax.Array:
  """Greedy or sampled continuation: int32[B, max_new_tokens]. Pure and jit-compatible.

  Args:
    step_fn: see the module docstring.
    logits: float[B, V] (or [B, L, V]: last position) for the first new token, e.g. the
      prefill's last logits.
    cache: the step function's cache after the tokens behind `logits`; it needs room for
      max_new_tokens - 1 more tokens (the last token is never fed back).
    max_new_tokens: T, a Python int >= 1.
    temperature, top_k, top_p: see `choose_tokens` (temperature and top_p may be traced; 0
      must be a Python 0).
    rng: a PRNG key, needed when temperature > 0; step i draws with fold_in(rng, i), so the
      draws do not depend on when the loop stops.
    eos_id: a row that emits it emits `pad_id` afterwards; the loop stops early once every
      row is done (the rest is pad).

  The loop is a `lax.while_loop` over steps 0..T-2 (choose, write, feed back), then the
  last token is chosen outside it, so no step feeds a token that is never used.
  """
  logits = _last_logits(logits)
  b = logits.shape[0]
  if not _is_greedy(temperature) and rng is None:
    raise ValueError("sampling (temperature > 0) needs rng.")
  key = jax.random.key(0) if rng is None else rng

  def pick(i, logits, done):
    tok = choose_tokens(logits, jax.random.fold_in(key, i), temperature=temperature, top_k=top_k, top_p=top_p)
    tok = jnp.where(done, pad_id, tok)
    if eos_id is not None:
      done = done | (tok == eos_id)
    return tok, done

  def cond(carry):
    i, _, _, done, _ = carry
    return (i < max_new_tokens - 1) & ~jnp.all(done)

  def body(carry):
    i, logits, cache, done, out = carry
    tok, done = pick(i, logits, done)
    out = jax.lax.dynamic_update_slice_in_dim(out, tok[:, None], i, axis=1)
    logits, cache = step_fn(tok[:, None], cache)
    return i + 1, _last_logits(logits), cache, done, out

  out = jnp.full((b, max_new_tokens), pad_id, jnp.int32)
  carry = (jnp.zeros((), jnp.int32), logits, cache, jnp.zeros((b,), bool), out)
  i, logits, _, done, out = jax.lax.while_loop(cond, body, carry)
  tok, _ = pick(i, logits, done)  # step T-1, or all rows done (then tok is all pad)
  return jax.lax.dynamic_update_slice_in_dim(out, tok[:, None], i, axis=1)


# --------------------------------------------------------------------------------------
# Beam search (GNMT length penalty).
# --------------------------------------------------------------------------------------


def length_penalty(length, alpha: float):
  """GNMT lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14); RoFormer Sec. 4.1 uses 0.6."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def _gather_beams(x: jax.Array, idx: jax.Array) -> jax.Array:
  """x [B, M, ...], idx int[B, M'] -> [B, M', ...]."""
  return jax.vmap(lambda xb, ib: jnp.take(xb, ib, axis=0))(x, idx)


def beam_search_loop(step_fn: StepFn, cache: Cache, *, batch: int, beam_size: int, alpha: float,
                     max_len: int, bos_id: int, eos_id: int, pad_id: int = 0, early_stop: bool = True):
  """Beam search over a step function; pure and jit-compatible.

  Args:
    step_fn: (tokens int[B*K, 1], cache) -> logits [B*K, V].
    cache: the decoder cache tiled over beams: row b*K + k is beam k of example b (e.g.
      `reorder_cache(cache, jnp.repeat(jnp.arange(B), K))`), with room for max_len tokens.
    batch, beam_size: B and K.
    alpha: length-penalty exponent >= 0 (may be traced); a hypothesis scores log P(Y) / lp(|Y|).
    max_len: T, most generated tokens (EOS included).
    bos_id: first decoder input; eos_id ends a hypothesis; pad_id fills after it.
    early_stop: stop once no alive beam can change the result (below); False runs all
      max_len steps and returns the same hypotheses (for tests and timing).

  Returns:
    (int32[B, K, T] hypotheses without BOS, best first; float32[B, K] their scores). A
    hypothesis ends at EOS or at T tokens. Slots with no real hypothesis (only when K
    exceeds the number of distinct hypotheses) have score -inf.

  Each step expands the K alive beams into K*V candidates and keeps the top 2K by log-prob.
  Of those, EOS candidates ranked in the top K become finished hypotheses (the rule of
  fairseq and HF: with K = 1 this is exactly greedy decoding when alpha = 0); at step T
  every top-K candidate finishes. The K best non-EOS candidates stay alive (2K candidates
  hold at least K of them, as each beam has one EOS continuation), and the cache follows
  them by a gather of the parent beams. Finished hypotheses are merged into a top-K list
  by score. The loop stops once, for every example, K hypotheses are finished and the best
  alive log-prob over lp(T) (the most any alive beam can still reach, since log-probs only
  fall and lp grows with length for alpha >= 0) is below the worst finished score.
  """
  b, k = batch, beam_size
  lp_max = length_penalty(max_len, alpha)

  def cond(carry):
    i, done = carry[0], carry[-1]
    return (i < max_len) & ~done

  def body(carry):
    i, tokens, cache, alive_seq, alive_logp, fin_seq, fin_score, _ = carry
    logits, cache = step_fn(tokens.reshape(b * k, 1), cache)
    logp = jax.nn.log_softmax(_last_logits(logits), axis=-1)
    v = logp.shape[-1]
    cand = (alive_logp[:, :, None] + logp.reshape(b, k, v)).reshape(b, k * v)
    top_logp, top_idx = jax.lax.top_k(cand, 2 * k)  # [B, 2K], sorted
    parent, tok = top_idx // v, (top_idx % v).astype(jnp.int32)
    seqs = _gather_beams(alive_seq, parent)
    seqs = jax.lax.dynamic_update_slice_in_dim(seqs, tok[:, :, None], i, axis=2)  # [B, 2K, T]
    is_eos = tok == eos_id
    real = top_logp > NEG_INF / 2

    # Finished: EOS within the top K ranks, or any top-K candidate at the last step.
    in_top_k = (jnp.arange(2 * k) < k)[None, :]
    finishing = in_top_k & real & (is_eos | (i == max_len - 1))
    new_score = jnp.where(finishing, top_logp / length_penalty(i + 1, alpha), -jnp.inf)
    all_score = jnp.concatenate([fin_score, new_score], axis=1)
    all_seq = jnp.concatenate([fin_seq, seqs], axis=1)
    fin_score, pick = jax.lax.top_k(all_score, k)
    fin_seq = _gather_beams(all_seq, pick)

    # Alive: the K best non-EOS candidates; the cache follows their parents.
    alive_logp, pick = jax.lax.top_k(jnp.where(is_eos, 2 * NEG_INF, top_logp), k)
    alive_seq = _gather_beams(seqs, pick)
    tokens = jnp.take_along_axis(tok, pick, axis=1)
    parent = jnp.take_along_axis(parent, pick, axis=1)
    cache = reorder_cache(cache, (jnp.arange(b)[:, None] * k + parent).reshape(-1))

    bound = alive_logp[:, 0] / lp_max
    done = jnp.all(fin_score[:, -1] > bound) & early_stop  # -inf while fewer than K are finished
    return i + 1, tokens, cache, alive_seq, alive_logp, fin_seq, fin_score, done

  alive_logp = jnp.concatenate([jnp.zeros((b, 1)), jnp.full((b, k - 1), NEG_INF)], axis=1)
  empty = jnp.full((b, k, max_len), pad_id, jnp.int32)
  carry = (jnp.zeros((), jnp.int32), jnp.full((b, k), bos_id, jnp.int32), cache, empty,
           alive_logp.astype(jnp.float32), empty, jnp.full((b, k), -jnp.inf, jnp.float32),
           jnp.zeros((), bool))
  carry = jax.lax.while_loop(cond, body, carry)
  return carry[5], carry[6]


# --------------------------------------------------------------------------------------
# Argument checks.
# --------------------------------------------------------------------------------------


def _check_int(name, value, lo, hi=None):
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be an int, got {value!r}.")
  if value < lo or (hi is not None and value > hi):
    rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
    raise ValueError(f"{name}={value} must be {rng}.")
  return int(value)


def check_top_p(top_p) -> float:
  """`top_p` as a float in (0, 1], or a ValueError naming the value."""
  if isinstance(top_p, bool) or not isinstance(top_p, (int, float, np.number)) or not 0 < top_p <= 1:
    raise ValueError(f"top_p={top_p!r} must be a number in (0, 1]: the probability mass the nucleus keeps "
                     "(1 keeps every token; 0.9 is common).")
  return float(top_p)


def _check_token(name, value, vocab, optional=False):
  if value is None and optional:
    return None
  return _check_int(name, value, 0, vocab - 1)


def _check_ids(name, ids):
  ids = jnp.asarray(ids)
  if ids.ndim != 2 or ids.shape[1] < 1 or not jnp.issubdtype(ids.dtype, jnp.integer):
    raise ValueError(f"{name} must be an integer array [B, L] with L >= 1, got dtype {ids.dtype} shape {ids.shape}.")
  return ids


def _check_mask(name, mask, shape, *, left_padded):
  mask = jnp.asarray(mask)
  if mask.shape != shape:
    raise ValueError(f"{name} shape {mask.shape} must equal the ids' shape {shape}.")
  mask = mask.astype(bool)
  if not isinstance(mask, jax.core.Tracer):  # concrete: check the layout now
    m = np.asarray(mask)
    if not m.any(axis=1).all():
      raise ValueError(f"every row of {name} needs at least one real (True) token.")
    if left_padded and (np.diff(m.astype(np.int8), axis=1) < 0).any():
      raise ValueError(f"{name} must be False only at LEFT padding (no True before a False): "
                       "the next token is predicted from the last slot.")
  return mask


def _check_positions(cfg, needed: int):
  if cfg.position == "learned" and needed > cfg.max_position:
    raise ValueError(f"decoding needs {needed} positions but the learned table has max_position="
                     f"{cfg.max_position}; shorten the prompt / max length.")


# --------------------------------------------------------------------------------------
# CausalLM: generate.
# --------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "cache_len", "greedy", "top_k",
                                             "eos_id", "pad_id", "nucleus"))
def _generate(graphdef, state, prompt, prompt_mask, rng, temperature, top_p=None, *, max_new_tokens, cache_len,
              greedy, top_k, eos_id, pad_id, nucleus=False):
  model = nnx.merge(graphdef, state)
  cache = model.init_cache(prompt.shape[0], cache_len)
  logits, cache = model.decode_step(prompt, cache, token_mask=prompt_mask)  # prefill
  return sample_loop(make_step_fn(graphdef, state), logits[:, -1], cache, max_new_tokens=max_new_tokens,
                     temperature=0 if greedy else temperature, top_k=top_k, rng=rng, eos_id=eos_id, pad_id=pad_id,
                     top_p=top_p if nucleus else None)


def generate(model: CausalLM, prompt, *, prompt_mask=None, max_new_tokens: int, temperature: float = 0.0,
             top_k: int | None = None, rng: jax.Array | None = None, eos_id: int | None = None,
             pad_id: int = 0, cache_len: int | None = None, top_p: float | None = None) -> jax.Array:
  """Continues prompts with a `CausalLM`: int32[B, max_new_tokens].

  The whole prompt is prefilled by one `decode_step`, then tokens are produced one at a
  time from the cache (O(1) per token for linear attention's recurrent state). Jitted whole;
  shapes and the static arguments below select the compiled program.

  Args:
    prompt: int[B, P]; rows of different lengths are LEFT-padded.
    prompt_mask: bool[B, P], False at the left padding (None: no padding). Every row needs a
      real token; a False after a True is rejected.
    max_new_tokens: T >= 1 (static).
    temperature: 0 = greedy (argmax), > 0 samples softmax(logits / temperature) (a traced
      value: changing it does not recompile; 0 vs > 0 does).
    top_k: sample only among the k largest logits, 1 <= k <= V (static; ignored when greedy).
    top_p: nucleus sampling, 0 < p <= 1: sample only among the most probable tokens whose
      probability reaches p (after the temperature and top_k; `nucleus_logits`). A traced
      value: changing it does not recompile. None = off; ignored when greedy.
    rng: PRNG key, needed when temperature > 0.
    eos_id: after a row emits it, the row emits `pad_id` (static).
    cache_len: cache slots, default P + T - 1 (the minimum); a larger value lets prompts of
      several lengths share one compiled program.
  """
  if not isinstance(model, CausalLM):
    raise TypeError(f"generate needs a CausalLM, got {type(model).__name__}.")
  cfg = model.config
  prompt = _check_ids("prompt", prompt)
  b, p = prompt.shape
  max_new_tokens = _check_int("max_new_tokens", max_new_tokens, 1)
  if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature):
    raise ValueError(f"temperature must be a finite number, got {temperature!r}.")
  if temperature < 0:
    raise ValueError(f"temperature={temperature} must be >= 0 (0 = greedy).")
  if top_k is not None:
    top_k = _check_int("top_k", top_k, 1, cfg.vocab_size)
  if temperature > 0 and rng is None:
    raise ValueError("sampling (temperature > 0) needs rng, e.g. jax.random.key(0).")
  if top_p is not None:
    top_p = check_top_p(top_p)
  eos_id = _check_token("eos_id", eos_id, cfg.vocab_size, optional=True)
  pad_id = _check_token("pad_id", pad_id, cfg.vocab_size)
  needed = p + max_new_tokens - 1
  if cache_len is None:
    cache_len = needed
  cache_len = _check_int("cache_len", cache_len, 1)
  if cache_len < needed:
    raise ValueError(f"cache_len={cache_len} is too short: the prompt ({p}) and max_new_tokens "
                     f"({max_new_tokens}) need {needed} slots.")
  _check_positions(cfg, needed)
  if prompt_mask is not None:
    prompt_mask = _check_mask("prompt_mask", prompt_mask, prompt.shape, left_padded=True)
  graphdef, state = nnx.split(model)
  greedy = temperature == 0
  return _generate(graphdef, state, prompt, prompt_mask, None if greedy else rng,
                   jnp.float32(1.0 if greedy else temperature),
                   None if greedy or top_p is None else jnp.float32(top_p), max_new_tokens=max_new_tokens,
                   cache_len=cache_len, greedy=greedy, top_k=None if greedy else top_k, eos_id=eos_id,
                   pad_id=pad_id, nucleus=not greedy and top_p is not None)


# --------------------------------------------------------------------------------------
# TransformerSeq2Seq: greedy translation and beam search.
# --------------------------------------------------------------------------------------


def _encoder_cache(model: TransformerSeq2Seq, src, src_mask, max_len):
  if src_mask is None:
    src_mask = src != model.config.pad_id
  encoded = model.encode(src, src_mask=src_mask)
  return model.init_cache(encoded, src_mask, max_len)


@functools.partial(jax.jit, static_argnames=("graphdef", "max_len", "bos_id", "eos_id", "pad_id"))
def _greedy_translate(graphdef, state, src, src_mask, *, max_len, bos_id, eos_id, pad_id):
  model = nnx.merge(graphdef, state)
  cache = _encoder_cache(model, src, src_mask, max_len)
  step_fn = make_step_fn(graphdef, state)
  logits, cache = step_fn(jnp.full((src.shape[0], 1), bos_id, jnp.int32), cache)
  return sample_loop(step_fn, logits, cache, max_new_tokens=max_len, eos_id=eos_id, pad_id=pad_id)


@functools.partial(jax.jit, static_argnames=("graphdef", "beam_size", "max_len", "bos_id", "eos_id", "pad_id"))
def _beam_search(graphdef, state, src, src_mask, alpha, *, beam_size, max_len, bos_id, eos_id, pad_id):
  model = nnx.merge(graphdef, state)
  b = src.shape[0]
  cache = _encoder_cache(model, src, src_mask, max_len)  # cross k/v computed once per example
  cache = reorder_cache(cache, jnp.repeat(jnp.arange(b), beam_size))  # ... then tiled: row b*K + k
  return beam_search_loop(make_step_fn(graphdef, state), cache, batch=b, beam_size=beam_size, alpha=alpha,
                          max_len=max_len, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)


def _check_seq2seq(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
  if not isinstance(model, TransformerSeq2Seq):
    raise TypeError(f"needs a TransformerSeq2Seq, got {type(model).__name__}.")
  cfg = model.config
  src = _check_ids("src", src)
  if src_mask is not None:
    src_mask = _check_mask("src_mask", src_mask, src.shape, left_padded=False)
  max_len = _check_int("max_len", max_len, 1)
  _check_positions(cfg, max(max_len, src.shape[1]))
  ids = tuple(_check_token(n, v, cfg.vocab_size) for n, v in (("bos_id", bos_id), ("eos_id", eos_id),
                                                              ("pad_id", pad_id)))
  return (src, src_mask, max_len) + ids


def greedy_translate(model: TransformerSeq2Seq, src, *, src_mask=None, max_len: int, bos_id: int,
                     eos_id: int, pad_id: int = 0) -> jax.Array:
  """Greedy decoding of a `TransformerSeq2Seq`: int32[B, max_len] target tokens (no BOS;
  pad after EOS). src: int[B, S]; src_mask: bool[B, S] (default src != config.pad_id)."""
  src, src_mask, max_len, bos_id, eos_id, pad_id = _check_seq2seq(model, src, src_mask, max_len, bos_id,
                                                                   eos_id, pad_id)
  graphdef, state = nnx.split(model)
  return _greedy_translate(graphdef, state, src, src_mask, max_len=max_len, bos_id=bos_id, eos_id=eos_id,
                           pad_id=pad_id)


def beam_search(model: TransformerSeq2Seq, src, *, src_mask=None, beam_size: int = 4, alpha: float = 0.6,
                max_len: int, bos_id: int, eos_id: int, pad_id: int = 0) -> tuple[jax.Array, jax.Array]:
  """Beam search with the GNMT length penalty (RoFormer Sec. 4.1: beam 4, alpha 0.6).

  The source is encoded once; the decoder cache (cross-attention keys/values included) is
  tiled over the K beams and reordered by the surviving beams' parents at every step. See
  `beam_search_loop` for the algorithm.

  Args:
    src: int[B, S]; src_mask: bool[B, S] (default src != config.pad_id).
    beam_size: K >= 1 (static); alpha: length-penalty exponent >= 0 (0 = raw log-probs;
      traced, so changing it does not recompile).
    max_len: T, most target tokens (EOS included).

  Returns:
    (int32[B, K, T] hypotheses sorted best first, no BOS, pad after EOS;
     float32[B, K] scores log P(Y | X) / ((5 + |Y|) / 6) ** alpha, descending).
  """
  src, src_mask, max_len, bos_id, eos_id, pad_id = _check_seq2seq(model, src, src_mask, max_len, bos_id,
                                                                   eos_id, pad_id)
  beam_size = _check_int("beam_size", beam_size, 1)
  if model.config.vocab_size < 2:
    raise ValueError("beam search needs a vocabulary of at least 2 tokens.")
  if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha < 0:
    raise ValueError(f"alpha={alpha!r} must be a finite number >= 0 (the early stop assumes lp grows with length).")
  graphdef, state = nnx.split(model)
  return _beam_search(graphdef, state, src, src_mask, jnp.float32(alpha), beam_size=beam_size, max_len=max_len,
                      bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)


def strip_ids(ids, *, bos_id: int, eos_id: int, pad_id: int) -> np.ndarray:
  """The tokens of one decoded or target row int[T]: everything from the first `eos_id` on is
  cut, and `bos_id` / `pad_id` are dropped. Returns int32[<= T]."""
  ids = np.asarray(ids).reshape(-1)
  eos = np.flatnonzero(ids == eos_id)
  if eos.size:
    ids = ids[:eos[0]]
  return ids[(ids != bos_id) & (ids != pad_id)].astype(np.int32)


def translate(model, batches: Iterable[Mapping[str, Any]], tokenizer, *, beam_size: int = 4,
              alpha: float = 0.6, max_len: int,
              progress: Callable[[int], Any] | None = None) -> tuple[list[str], list[str]]:
  """Decodes seq2seq evaluation batches into (hypotheses, references), detokenized strings.

  Beam search with the GNMT length penalty (`beam_search`; Sec. 4.1 uses beam 4,
  alpha 0.6) keeps each sentence's best hypothesis; beam_size == 1 is greedy decoding
  (`greedy_translate`; beam search with one beam and alpha > 0 is not greedy, as the
  length penalty can prefer a later, longer hypothesis, so alpha is ignored then). Every row
  is cut at its first EOS, BOS and padding are dropped, and `tokenizer.decode` turns it into
  text (SentencePiece detokenizes; the byte tokenizer decodes UTF-8). Feed the result to
  `evaluation.eval_metrics.bleu(hypotheses, references)`.

  Args:
    model: a `TransformerSeq2Seq` (dropout is off: it decodes deterministically).
    batches: the "seq2seq" pipeline's batches (NumPy dicts): `src` int[B, S], `tgt_out`
      int[B, U] (target + EOS), `weights` float[B, U], and optionally `src_segment_ids`
      (the source mask; else src != pad_id). Rows whose weights are all 0 pad the last
      evaluation batch: they are decoded with a dummy one-token source (so every batch has
      the same shape and compiles once) and left out of the result.
    tokenizer: the data's tokenizer (`pad_id`, `bos_id`, `eos_id`, `decode`).
    beam_size: K >= 1; alpha: length-penalty exponent >= 0.
    max_len: most generated tokens per sentence (EOS included).
    progress: called with the number of sentences of each decoded batch, e.g. a tqdm bar's
      `update`.

  Returns:
    (hypotheses, references): lists of str in batch order, one per real row. The references
    are the decoded `tgt_out` rows, so they carry the pipeline's target truncation
    (data.max_target_length); score against the raw target text if that matters.
  """
  if isinstance(beam_size, bool) or not isinstance(beam_size, (int, np.integer)) or beam_size < 1:
    raise ValueError(f"beam_size={beam_size!r} must be an int >= 1.")
  ids = dict(bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id)
  hypotheses, references = [], []
  for batch in batches:
    missing = {"src", "tgt_out", "weights"} - set(batch)
    if missing:
      raise KeyError(f"a seq2seq batch needs {sorted(missing)}; it has {sorted(batch)}.")
    src = np.array(batch["src"], np.int32)
    tgt = np.asarray(batch["tgt_out"])
    w = np.asarray(batch["weights"])
    if src.ndim != 2 or tgt.ndim != 2 or len(tgt) != len(src) or len(w) != len(src):
      raise ValueError(f"src {src.shape}, tgt_out {tgt.shape} and weights {w.shape} must be [B, ...] "
                       "with the same B.")
    keep = (w.reshape(len(w), -1) != 0).any(axis=1)
    if not keep.any():
      continue
    if "src_segment_ids" in batch:
      mask = np.array(batch["src_segment_ids"]) != 0
    else:
      mask = src != tokenizer.pad_id
    src[~keep], mask[~keep] = tokenizer.pad_id, False
    src[~keep, 0], mask[~keep, 0] = tokenizer.eos_id, True  # dummy source of padding rows
    out: jax.Array | np.ndarray
    if beam_size == 1:
      out = greedy_translate(model, src, src_mask=mask, max_len=max_len, **ids)
    else:
      out, _ = beam_search(model, src, src_mask=mask, beam_size=int(beam_size), alpha=alpha,
                                    max_len=max_len, **ids)
      out = out[:, 0]  # the best hypothesis
    out = np.asarray(out)
    for row in np.flatnonzero(keep):
      hypotheses.append(tokenizer.decode(strip_ids(out[row], **ids)))
      references.append(tokenizer.decode(strip_ids(tgt[row], **ids)))
    if progress is not None:
      progress(int(keep.sum()))
  return hypotheses, references


__all__ = [
    "NEG_INF", "beam_search", "beam_search_loop", "check_top_p", "choose_tokens", "generate", "greedy_translate",
    "length_penalty", "lm_step_fn", "make_step_fn", "nucleus_logits", "reorder_cache", "sample_loop",
    "seq2seq_step_fn", "strip_ids", "translate",
]
