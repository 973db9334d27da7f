"""Inference on a trained workdir: what generate.py runs.

- `load(config, workdir, *, step=None, average_last=0)`: the model of a workdir's checkpoint
  (the newest that verifies, a given step, or the mean of the last N), restored read-only
  (no lock: a trainer may be running), with its tokenizer.
- lm: `stream_lm(loaded, prompt, ...)` yields the continuation's text while it is made, greedy
  or sampled (temperature, top-k, top-p); `lm_tokens` is the token loop beneath it: one jitted
  step per token around the model's KV cache, so each token can be shown as soon as it exists.
- seq2seq: `translate(loaded, sentences, ...)`: beam search (beam 4, alpha 0.6, Sec. 4.1) or
  greedy decoding, batched over the sentences.
- mlm: `fill_masks(loaded, text, ...)`: the top-k fillers of each `[MASK]` in the text, with
  their probabilities.
- classification has nothing to generate: `load` says so.

Inputs are checked before any decoding: an empty prompt, one longer than the model's context
(`truncate=True` keeps its end instead), or an MLM text without `[MASK]` raise a `UserError`
that names the value and the fix.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from roformer_jax import decoding, errors
from roformer_jax.training import data, tasks, trainer
from roformer_jax.evaluation import evaluate
from roformer_jax.training.data import datasets
from roformer_jax.errors import UserError
from roformer_jax.models import CausalLM, RoFormerForMaskedLM, TransformerSeq2Seq

# How an MLM input marks the slots to fill: each `[MASK]` becomes one mask token (one byte slot
# with the byte tokenizer, one piece with SentencePiece).
MASK_TEXT = "[MASK]"


@dataclasses.dataclass
class Loaded:
  """A restored model ready for inference.

  Attributes:
    config: the run's config (as given, with the command line's overrides).
    model: the nnx module (CausalLM, TransformerSeq2Seq or RoFormerForMaskedLM).
    graphdef, state: `nnx.split(model)`, for the jitted functions.
    tokenizer: the data's tokenizer.
    step: the checkpoint's step (the newest of an average).
    steps: every checkpoint used (several with average_last).
  """
  config: ml_collections.ConfigDict
  model: CausalLM | TransformerSeq2Seq | RoFormerForMaskedLM
  graphdef: Any
  state: Any
  tokenizer: Any
  step: int
  steps: list[int]

  @property
  def task(self) -> tasks.Task:
    """The config's task (`tasks.get(config.task)`): its `generates` says what it can do here."""
    return tasks.get(self.config.task)

  @property
  def add_bos_eos(self) -> bool:
    """Whether training wrapped each document in BOS ... EOS (not for a cut byte stream such as enwik8)."""
    return datasets.get_spec(self.config.data.dataset).add_bos_eos

  @property
  def context(self) -> int:
    """The most tokens the model sees at once: the longest rows it was trained on (the last
    stage's, for a staged run), and no more than a learned position table has rows."""
    length = max(stage.max_length for stage in trainer.stages_from_config(self.config))
    cfg = self.model.config
    return min(length, cfg.max_position) if cfg.position == "learned" else length


def check_config(config: ml_collections.ConfigDict) -> None:
  """Raises a `UserError` for an invalid config, or a task with nothing to generate."""
  with errors.user_errors("invalid config"):
    trainer.check_config(config)  # an unknown task among the rest
  if tasks.get(config.task).generates is None:
    raise UserError(f"config.task={config.task!r}: a classifier has no text to generate; generate.py continues "
                    f"text (lm), translates (seq2seq) and fills [MASK] slots (mlm). Score it with eval.py instead.")


def load(config: ml_collections.ConfigDict, workdir: str, *, step: int | None = None,
         average_last: int = 0) -> Loaded:
  """Restores the model of `workdir` for inference, read-only (no lock is taken).

  Args:
    config: the config the run was trained with (and the same --config overrides).
    workdir: the training run's directory.
    step: restore this checkpoint (it must exist and verify); None = the newest that verifies.
    average_last: N > 1 averages the trained parameters of the last N checkpoints (as eval.py's
      config.eval.average_last); 0 or 1 = one checkpoint.

  Raises:
    UserError: an invalid config or unknown task, a task with nothing to generate
      (classification), no checkpoint, checkpoints of another config, a missing tokenizer.
  """
  check_config(config)
  tokenizer = _tokenizer(config)
  model, newest, used = evaluate.restore_model(config, workdir, step=step, average_last=average_last, tool="generate")
  if tokenizer.vocab_size > model.config.vocab_size:
    raise UserError(f"the tokenizer has {tokenizer.vocab_size} ids but the model only {model.config.vocab_size}; "
                    "config.data names another tokenizer than the run was trained with.")
  graphdef, state = nnx.split(model)
  return Loaded(config=config, model=model, graphdef=graphdef, state=state, tokenizer=tokenizer, step=newest,
                steps=used)


def _tokenizer(config):
  data_cfg = config.data.copy_and_resolve_references()
  # Never train a vocabulary here: a new one would not be the one whose ids the model learned.
  data_cfg.train_tokenizer_if_missing = False
  try:
    return data.make_tokenizer(data_cfg)
  except FileNotFoundError as e:
    raise UserError(f"the run's tokenizer {str(data.tokenizer_path(data_cfg))!r} does not exist. generate.py needs "
                    "the SentencePiece model the run was trained with (the model's ids are its pieces): pass "
                    "the run's --config.data.data_dir, or --config.data.tokenizer_path=<its .model file>.") from e
  except ValueError as e:
    raise UserError(f"invalid config: {errors.message_of(e)}") from e


def check_inputs(task: str | tasks.Task, texts: Sequence[str]) -> None:
  """What can be checked before the model loads: every MLM text has a `[MASK]`."""
  if tasks.get(task).generates == tasks.FILL_MASKS:
    for i, text in enumerate(texts):
      if MASK_TEXT not in text:
        raise _no_mask(text, f"input {i + 1} ")


def _no_mask(text: str, which: str = "") -> UserError:
  return UserError(f"{which}{_preview(text)} has no {MASK_TEXT}; write {MASK_TEXT} where a token should be "
                   f"filled in, e.g. 'def f(x): return x [MASK] 1'.")


def read_prompts(prompts: Sequence[str] | None, input_path: str | None, stdin: TextIO | None = None) -> list[str]:
  """The inputs: the --prompt strings, or the lines of --input (a file, or "-" for stdin),
  or, with neither, the lines piped to stdin.

  Raises:
    UserError: both or neither given (with a terminal on stdin), an unreadable file, no
      input at all, or an empty prompt or line.
  """
  stdin = sys.stdin if stdin is None else stdin
  prompts = list(prompts or [])
  if prompts and input_path:
    raise UserError(f"give --prompt or --input, not both (got {len(prompts)} --prompt and --input={input_path!r}).")
  if prompts:
    texts, where = prompts, [f"--prompt number {i + 1}" for i in range(len(prompts))]
  else:
    if input_path and input_path != "-":
      try:
        with open(input_path, encoding="utf-8") as f:
          texts = f.read().splitlines()
      except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read --input={input_path!r}: {e}. Give a UTF-8 text file, one prompt a line, "
                        "or - for stdin.") from e
      name = input_path
    elif input_path == "-" or not stdin.isatty():
      texts, name = stdin.read().splitlines(), "stdin"
    else:
      raise UserError("nothing to generate from: give --prompt TEXT (repeatable) or --input FILE (one prompt a "
                      "line; - reads stdin), or pipe lines to stdin.")
    if not texts:
      raise UserError(f"{name} holds no lines; give one prompt a line.")
    where = [f"line {i + 1} of {name}" for i in range(len(texts))]
  for text, place in zip(texts, where, strict=True):
    if not text:
      raise UserError(f"{place} is empty; give it some text (an empty prompt has nothing to continue, "
                      "translate or fill).")
  return texts


def _bos(loaded: Loaded) -> list[int]:
  return [loaded.tokenizer.bos_id] if loaded.add_bos_eos else []


def _too_long(what: str, length: int, limit: int, *, keep: str) -> UserError:
  return UserError(f"{what} is {length} tokens long, more than the model's limit of {limit} tokens (the "
                   f"length it was trained on); shorten it, or pass --truncate to keep its {keep} {limit}.")


# --------------------------------------------------------------------------------------
# lm: token by token, streamed.
# --------------------------------------------------------------------------------------


def encode_lm_prompt(loaded: Loaded, text: str, *, truncate: bool = False) -> np.ndarray:
  """A prompt's ids int32[P] as training saw documents start (BOS first, when the data adds it).

  A prompt longer than `loaded.context` is an error, or with `truncate` keeps its last
  `context` tokens (without BOS: a document that did not fit a training row continued in the
  next row the same way).
  """
  if not text:
    raise UserError("the prompt is empty; give it some text to continue.")
  ids = np.asarray(_bos(loaded) + list(loaded.tokenizer.encode(text)), np.int32)
  if len(ids) > loaded.context:
    if not truncate:
      raise _too_long(f"the prompt {_preview(text)}", len(ids), loaded.context, keep="last")
    ids = ids[-loaded.context:]
  return ids


def _preview(text: str, limit: int = 40) -> str:
  return repr(text if len(text) <= limit else text[:limit] + "...")


@functools.partial(jax.jit, static_argnames=("graphdef", "cache_len"))
def _prefill(graphdef, state, ids, *, cache_len):
  model = nnx.merge(graphdef, state)
  cache = model.init_cache(ids.shape[0], cache_len)
  logits, cache = model.decode_step(ids, cache)
  return logits[:, -1].astype(jnp.float32), cache


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _feed(graphdef, state, token, cache):
  return decoding.make_step_fn(graphdef, state)(token, cache)


@functools.partial(jax.jit, static_argnames=("greedy", "top_k", "nucleus"))
def _choose(logits, key, temperature, top_p, *, greedy, top_k, nucleus):
  return decoding.choose_tokens(logits, key, temperature=0 if greedy else temperature, top_k=top_k,
                                top_p=top_p if nucleus else None)


def check_sampling(loaded: Loaded, *, max_new_tokens: int, temperature: float, top_k: int | None,
                   top_p: float | None) -> None:
  """Raises a `UserError` naming a bad sampling setting."""
  if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
    raise UserError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 1.")
  if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
      or temperature < 0:
    raise UserError(f"temperature={temperature!r} must be a finite number >= 0 (0 = greedy; 1 samples the "
                    "model's own distribution).")
  vocab = loaded.model.config.vocab_size
  if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= vocab):
    raise UserError(f"top_k={top_k!r} must be an integer in [1, {vocab}] (the vocabulary size).")
  if top_p is not None:
    with errors.user_errors(""):
      decoding.check_top_p(top_p)


def lm_tokens(loaded: Loaded, prompt_ids: Sequence[int] | np.ndarray, *, max_new_tokens: int,
              temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
              rng: jax.Array | None = None) -> Iterator[int]:
  """The continuation of `prompt_ids`, one token id at a time, until EOS (not yielded) or
  `max_new_tokens`.

  Each token is chosen from the logits of the model's KV cache and then fed back, one jitted
  call each, so the caller sees it at once. The cache holds `loaded.context` tokens: when a
  token would not fit, the cache is rebuilt from the last `context // 2` tokens (a sliding
  window; the model never sees more tokens at once than it was trained on).

  Args:
    loaded: an lm model (`load`).
    prompt_ids: 1 to `loaded.context` ids (`encode_lm_prompt`).
    max_new_tokens: the most tokens to make (>= 1).
    temperature: 0 = greedy (argmax); > 0 samples softmax(logits / temperature).
    top_k, top_p: restrict the sample to the k most likely tokens, then to the nucleus of
      probability top_p (`decoding.choose_tokens`); ignored when greedy.
    rng: a PRNG key, needed to sample; token i is drawn with fold_in(rng, i).
  """
  if loaded.task.generates != tasks.CONTINUE:
    raise UserError(f"lm_tokens needs an lm model; this config's task is {loaded.task.name!r}.")
  check_sampling(loaded, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
  context = loaded.context
  ids = [int(i) for i in prompt_ids]
  if not 1 <= len(ids) <= context:
    raise UserError(f"the prompt has {len(ids)} tokens; it needs 1 to {context} (the model's context).")
  greedy = temperature == 0
  if not greedy and rng is None:
    raise UserError("sampling (temperature > 0) needs a random key (rng).")
  key = jax.random.key(0) if rng is None else rng
  choose = functools.partial(_choose, temperature=jnp.float32(temperature or 1.0),
                             top_p=jnp.float32(top_p or 1.0), greedy=greedy, top_k=None if greedy else top_k,
                             nucleus=not greedy and top_p is not None)
  graphdef, state = loaded.graphdef, loaded.state
  keep = max(context // 2, 1)
  start = 0  # the cache holds ids[start:]
  logits, cache = _prefill(graphdef, state, jnp.asarray([ids], jnp.int32), cache_len=context)
  for i in range(max_new_tokens):
    token = int(choose(logits, jax.random.fold_in(key, i))[0])
    if token == loaded.tokenizer.eos_id:
      return
    yield token
    ids.append(token)
    if i == max_new_tokens - 1:
      return  # the last token is never fed back
    if len(ids) - start <= context:
      logits, cache = _feed(graphdef, state, jnp.asarray([[token]], jnp.int32), cache)
    else:
      start = len(ids) - keep
      logits, cache = _prefill(graphdef, state, jnp.asarray([ids[start:]], jnp.int32), cache_len=context)


class _Detokenizer:
  """Text of a growing list of ids, handed out as it becomes final.

  The whole continuation is decoded again at each token, behind the prompt's ids, because
  pieces do not decode alone: a UTF-8 character spans several byte tokens, and SentencePiece
  writes a piece's leading space only after other text. A trailing U+FFFD (a character whose
  bytes have not all come yet) is held back until the next token or `flush`.
  """

  def __init__(self, tokenizer, context: Sequence[int] | np.ndarray):
    self.new: list[int]
    self.tokenizer, self.context, self.new = tokenizer, list(context), []
    self.sent = len(tokenizer.decode(self.context).rstrip("\ufffd"))

  def push(self, token: int) -> str:
    self.new.append(token)
    text = self.tokenizer.decode(self.context + self.new)
    end = len(text.rstrip("\ufffd"))
    out = text[self.sent:end]
    self.sent = max(self.sent, end)
    return out

  def flush(self) -> str:
    text = self.tokenizer.decode(self.context + self.new)
    out = text[self.sent:]
    self.sent = max(self.sent, len(text))
    return out


def stream_lm(loaded: Loaded, prompt: str, *, max_new_tokens: int, temperature: float = 0.0,
              top_k: int | None = None, top_p: float | None = None, seed: int = 0, sample: int = 0,
              truncate: bool = False) -> Iterator[str]:
  """Continues `prompt` with an lm model, yielding the new text as it is made (not the prompt).

  Greedy when temperature is 0; otherwise sample number `sample` of `seed` (the same seed and
  sample give the same text). See `lm_tokens` for the settings, `encode_lm_prompt` for the
  prompt's limits.
  """
  ids = encode_lm_prompt(loaded, prompt, truncate=truncate)
  check_sampling(loaded, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
  rng = jax.random.fold_in(jax.random.key(seed), sample)
  text = _Detokenizer(loaded.tokenizer, ids)
  for token in lm_tokens(loaded, ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                         top_p=top_p, rng=rng):
    piece = text.push(token)
    if piece:
      yield piece
  rest = text.flush()
  if rest:
    yield rest


# --------------------------------------------------------------------------------------
# seq2seq: translations, batched.
# --------------------------------------------------------------------------------------


def max_decode_length(loaded: Loaded) -> int:
  """Most target tokens per translation (EOS included): eval.py's setting."""
  settings = evaluate.eval_settings(loaded.config)
  data_cfg = loaded.config.data
  return int(settings["max_decode_length"] or data_cfg.max_target_length or data_cfg.max_length)


def translate(loaded: Loaded, sentences: Iterable[str], *, beam_size: int = 4, alpha: float = 0.6,
              greedy: bool = False, max_len: int | None = None, batch_size: int = 32,
              truncate: bool = False) -> Iterator[str]:
  """Translations of `sentences`, in order, yielded batch by batch.

  Beam search with the GNMT length penalty (beam 4, alpha 0.6, Sec. 4.1), or greedy decoding
  (`greedy`, or beam_size 1); `decoding.translate` decodes, as eval.py does for BLEU.

  Args:
    loaded: a seq2seq model (`load`).
    sentences: source texts, each non-empty.
    beam_size: K >= 1; alpha: the length-penalty exponent >= 0.
    greedy: argmax decoding (beam_size and alpha are then unused).
    max_len: most target tokens (EOS included); None = `max_decode_length(loaded)`.
    batch_size: sentences per decoded batch. Every batch has this many rows and a source
      length rounded up to a multiple of 8, so few shapes compile.
    truncate: cut a source longer than the model's limit to its first tokens instead of
      raising.
  """
  if loaded.task.generates != tasks.TRANSLATE:
    raise UserError(f"translate needs a seq2seq model; this config's task is {loaded.task.name!r}.")
  if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
    raise UserError(f"beam_size={beam_size!r} must be an integer >= 1.")
  if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha < 0:
    raise UserError(f"length_penalty={alpha!r} must be a finite number >= 0 (Sec. 4.1 uses 0.6; 0 = none).")
  if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
    raise UserError(f"batch_size={batch_size!r} must be an integer >= 1.")
  max_len = max_decode_length(loaded) if max_len is None else max_len
  if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
    raise UserError(f"max_len={max_len!r} (the most target tokens) must be an integer >= 1.")
  tok = loaded.tokenizer
  limit = loaded.config.data.max_length  # source tokens, EOS included, as the pipeline cuts them
  if loaded.model.config.position == "learned":
    limit = min(limit, loaded.model.config.max_position)
  sources = []
  for i, text in enumerate(sentences):  # all checked before the first batch decodes
    if not text:
      raise UserError(f"sentence {i + 1} is empty; give it some text to translate.")
    ids = list(tok.encode(text))
    if len(ids) + 1 > limit:
      if not truncate:
        raise _too_long(f"sentence {i + 1} ({_preview(text)}, with its EOS)", len(ids) + 1, limit, keep="first")
      ids = ids[:limit - 1]
    sources.append(ids + [tok.eos_id])
  for first in range(0, len(sources), batch_size):
    chunk = sources[first:first + batch_size]
    width = -(-max(map(len, chunk)) // 8) * 8
    if loaded.model.config.position == "learned":
      width = min(width, limit)
    src = np.zeros((batch_size, width), np.int32)
    for row, ids in enumerate(chunk):
      src[row, :len(ids)] = ids
    weights = np.zeros((batch_size, 1), np.float32)
    weights[:len(chunk)] = 1.0  # rows beyond the chunk pad the batch; translate skips them
    batch = {"src": src, "tgt_out": np.zeros((batch_size, 1), np.int32), "weights": weights}
    hyps, _ = decoding.translate(loaded.model, [batch], tok, beam_size=1 if greedy else beam_size,
                                     alpha=alpha, max_len=max_len)
    yield from hyps


# --------------------------------------------------------------------------------------
# mlm: fill the [MASK] slots.
# --------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _mlm_probs(graphdef, state, ids, valid, masked_positions):
  model = nnx.merge(graphdef, state)
  logits = model(ids, attention_mask=valid, masked_positions=masked_positions)
  return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)


def token_text(tokenizer, token: int) -> str:
  """How a filler reads: its text, a special token's name, or a byte that is not a whole
  UTF-8 character as SentencePiece writes byte pieces ("<0xE4>")."""
  names = {tokenizer.pad_id: "<pad>", tokenizer.bos_id: "<bos>", tokenizer.eos_id: "<eos>",
           tokenizer.mask_id: "<mask>"}
  unk = getattr(tokenizer, "unk_id", None)
  if unk is not None:
    names[unk] = "<unk>"
  if token in names:
    return names[token]
  if isinstance(tokenizer, data.ByteTokenizer):
    byte = token - tokenizer.num_special
    return chr(byte) if byte < 0x80 else f"<0x{byte:02X}>"
  return tokenizer.decode([token])


def fill_masks(loaded: Loaded, text: str, *, top_k: int = 5,
               truncate: bool = False) -> list[list[tuple[str, float]]]:
  """The `top_k` most probable fillers of each `[MASK]` in `text`, best first, as (text, probability).

  Each `[MASK]` is one token slot (one byte with the byte tokenizer); the text between masks
  is tokenized piece by piece. The row is built as training built them (BOS text EOS, when
  the data adds them). Only the masks' own distributions are reported: the fillers of two
  masks are not chosen jointly.

  Raises:
    UserError: no `[MASK]` in the text, a bad top_k, or a text longer than the model's limit
      (with `truncate`, the end is cut instead, as long as every mask stays).
  """
  if loaded.task.generates != tasks.FILL_MASKS:
    raise UserError(f"fill_masks needs an mlm model; this config's task is {loaded.task.name!r}.")
  tok, cfg = loaded.tokenizer, loaded.model.config
  if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= cfg.vocab_size:
    raise UserError(f"top_k={top_k!r} must be an integer in [1, {cfg.vocab_size}] (the vocabulary size).")
  if MASK_TEXT not in text:
    raise _no_mask(text, "the text ")
  ids = list(_bos(loaded))
  for i, piece in enumerate(text.split(MASK_TEXT)):
    if i:
      ids.append(tok.mask_id)
    ids.extend(tok.encode(piece) if piece else [])
  ids += [tok.eos_id] if loaded.add_bos_eos else []
  limit = loaded.context
  if len(ids) > limit:
    masks = text.count(MASK_TEXT)
    if not truncate:
      raise _too_long(f"the text {_preview(text)}", len(ids), limit, keep="first")
    ids = ids[:limit]
    if ids.count(tok.mask_id) < masks:
      raise UserError(f"--truncate would cut {masks - ids.count(tok.mask_id)} of the {masks} {MASK_TEXT} slots "
                      f"off the text {_preview(text)} (the model's limit is {limit} tokens); shorten it around them.")
  positions = [i for i, t in enumerate(ids) if t == tok.mask_id]
  width = -(-len(ids) // 16) * 16  # a few shapes compile, not one per text length
  if cfg.position == "learned":
    width = min(width, cfg.max_position)
  row = np.zeros((1, width), np.int32)
  row[0, :len(ids)] = ids
  valid = np.zeros((1, width), bool)
  valid[0, :len(ids)] = True
  probs = np.asarray(_mlm_probs(loaded.graphdef, loaded.state, jnp.asarray(row), jnp.asarray(valid),
                                jnp.asarray([positions], jnp.int32)))[0]
  out = []
  for p in probs:
    best = np.argsort(-p, kind="stable")[:top_k]
    out.append([(token_text(tok, int(t)), float(p[t])) for t in best])
  return out


__all__ = ["Loaded", "MASK_TEXT", "check_config", "check_inputs", "check_sampling",
           "encode_lm_prompt", "fill_masks", "lm_tokens", "load", "max_decode_length", "read_prompts", "stream_lm",
           "token_text", "translate"]
