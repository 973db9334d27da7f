"""Passkey retrieval: does a causal LM find a number hidden in a long, repetitive context?

The synthetic test of Mohtashami & Jaggi (2023, "Landmark Attention"), which Position
Interpolation (Chen et al. 2023) and YaRN (Peng et al. 2023) use to show that a RoPE model
whose context was extended really *uses* the far tokens, which a perplexity curve alone does
not show (a model that ignores everything beyond its training length can still have a flat
loss). A prompt is filler sentences that carry no information, with one key sentence at a
chosen depth, and ends with the question:

    [BOS] ...The grass is green. The sky is blue. The sun is yellow. Here we go. There and back
    again. The pass key is 48213. Remember it. 48213 is the pass key. The grass is green. ...
    There and back again. What is the pass key? The pass key is

and the model must continue with the key's digits. Nothing is downloaded and every prompt
comes from a seeded NumPy generator, so any run can be scored again exactly.

- `make_prompt(length, depth, key, tokenizer)`: exactly `length` token ids (lengths count
  tokens, so the same code serves the byte tokenizer and SentencePiece).
- `training_row(rng, length, tokenizer)`: a prompt followed by its answer, a full training
  row (the `data.passkey_fraction` mix of the input pipeline).
- `evaluate_passkey(generate_fn, tokenizer, lengths=..., depths=..., trials=..., score_fn=...)`:
  accuracy per (length, depth); `greedy_generate_fn(model, digits)` is the `generate_fn` of a
  `CausalLM`. With `score_fn` (`answer_nll_fn(model)`), also the answer's negative
  log-likelihood in nats per digit: graded where exact match is all zeros (a small model that
  has learned a digit follows the question but not which one sits at ln 10 = 2.30; one that
  copies the key goes to 0).
- `plot_heatmap(results, path, title)`: the length x depth accuracy map as a PNG.

This module imports NumPy only; JAX (for decoding) and matplotlib load where they are used,
so the input pipeline can build training rows without them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# The filler of Mohtashami & Jaggi, one sentence at a time: sentences are the units the key
# is placed between, and each is tokenized on its own so that its token count is known.
FILLER = ("The grass is green. ", "The sky is blue. ", "The sun is yellow. ", "Here we go. ",
          "There and back again. ")
KEY_SENTENCE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is "
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)

GenerateFn = Callable[[np.ndarray], np.ndarray]
# (prompts int32[B, P], answers int32[B, A], answer_mask bool[B, A]) -> nats float[B, A]
ScoreFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def random_key(rng: np.random.Generator, digits: int = 5) -> str:
  """`digits` decimal digits, each uniform in 0-9 (a leading 0 is allowed), so a model that
  guesses gets each digit right with probability exactly 0.1 and the whole key with 10**-digits."""
  if isinstance(digits, bool) or not isinstance(digits, (int, np.integer)) or digits < 1:
    raise ValueError(f"digits={digits!r} must be an integer >= 1.")
  return "".join(str(d) for d in rng.integers(0, 10, size=int(digits)))


def _encode(tokenizer, text: str) -> list[int]:
  return [int(i) for i in tokenizer.encode(text)]


def _check_key(key) -> str:
  key = str(key)
  if not key or not key.isdigit() or not key.isascii():
    raise ValueError(f"key={key!r} must be a string of decimal digits, e.g. '48213'.")
  return key


def min_prompt_length(tokenizer, digits: int = 5, *, add_bos: bool = True) -> int:
  """The shortest prompt: BOS, the key sentence and the question, no filler."""
  return (int(add_bos) + len(_encode(tokenizer, KEY_SENTENCE.format(key="0" * digits)))
          + len(_encode(tokenizer, QUESTION)))


def _layout(length: int, depth: float, key: str, tokenizer, add_bos: bool) -> tuple[np.ndarray, int]:
  """(ids int32[length], index of the key sentence's first token)."""
  if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
    raise ValueError(f"length={length!r} must be an integer number of tokens.")
  if isinstance(depth, bool) or not isinstance(depth, (int, float, np.floating, np.integer)) \
      or not 0.0 <= float(depth) <= 1.0:
    raise ValueError(f"depth={depth!r} must be a number in [0, 1] (the fraction of the filler before the key).")
  key = _check_key(key)
  bos = [tokenizer.bos_id] if add_bos else []
  key_ids = _encode(tokenizer, KEY_SENTENCE.format(key=key))
  question = _encode(tokenizer, QUESTION)
  n = int(length) - len(bos) - len(key_ids) - len(question)  # filler tokens
  if n < 0:
    raise ValueError(f"length={length} is too short for a pass-key prompt: BOS, the key sentence and the "
                     f"question alone take {int(length) - n} tokens with this tokenizer and a {len(key)}-digit key.")
  # Whole filler sentences in their order, built backwards from the question so that the text
  # before the question always ends with a whole cycle; the excess is cut off the front, where
  # the prompt reads like a document that started earlier (as a cut training row does).
  sentences = [_encode(tokenizer, s) for s in FILLER]
  stream: list[list[int]] = []
  total, i = 0, len(FILLER) - 1
  while total < n:
    stream.append(sentences[i])
    total += len(sentences[i])
    i = (i - 1) % len(FILLER)
  stream.reverse()
  excess = total - n
  if stream:
    stream[0] = stream[0][excess:]
  # The key goes between two sentences: at the sentence boundary nearest depth * n (the
  # filler's start counts only when its first sentence is whole), ties to the earlier one.
  ends = np.cumsum([len(s) for s in stream]).tolist() if stream else []
  boundaries = ([0] if excess == 0 else []) + ends
  boundaries = boundaries or [0]
  at = boundaries[int(np.argmin([abs(b - float(depth) * n) for b in boundaries]))]
  filler = [t for s in stream for t in s]
  ids = bos + filler[:at] + key_ids + filler[at:] + question
  assert len(ids) == length, (len(ids), length)
  return np.asarray(ids, np.int32), len(bos) + at


def make_prompt(length: int, depth: float, key: str | int, tokenizer, *, add_bos: bool = True) -> np.ndarray:
  """A pass-key prompt of exactly `length` tokens, int32[length].

  Args:
    length: tokens in all (BOS included); at least `min_prompt_length`.
    depth: 0..1, the fraction of the filler that comes before the key sentence, snapped to
      the nearest sentence boundary (0 = right after BOS, or after the partial first sentence
      when the filler had to be cut there; 1 = right before the question).
    key: the digits to hide (a str; an int is written in decimal).
    tokenizer: the run's tokenizer (`encode`, `bos_id`).
    add_bos: start with BOS, as `generation.encode_lm_prompt` does for data whose documents
      were wrapped in BOS ... EOS (`datasets.get_spec(name).add_bos_eos`); False for a cut
      byte stream such as enwik8.

  Raises:
    ValueError: a length shorter than the fixed parts, a depth outside [0, 1], a key that is
      not digits.
  """
  return _layout(length, depth, key, tokenizer, add_bos)[0]


def key_position(length: int, depth: float, key: str | int, tokenizer, *, add_bos: bool = True) -> int:
  """The index of the key sentence's first token in `make_prompt(length, depth, key, ...)`."""
  return _layout(length, depth, key, tokenizer, add_bos)[1]


def training_row(rng: np.random.Generator, length: int, tokenizer, *, digits: int = 5,
                 add_bos: bool = True) -> np.ndarray:
  """A training row of exactly `length` ids: a prompt at a random depth with a random key,
  the answer's digits, then EOS (with `add_bos`), int32[length].

  The row ends right after the answer, so it has the shape of an evaluation prompt plus the
  tokens the model should produce: the model learns to copy the key at the end of a long
  context. It is one document (BOS ... EOS, as the corpus's documents are), so every token
  is a real target with weight 1: nothing is padding. The filler is trivially predictable
  after a sentence or two and the key sentence's first digits are not predictable at all, so
  a row's loss is mostly the answer's (the copy) once the model has learned the filler;
  another sentence of filler after the answer would teach nothing new.

  Args:
    rng: draws the key (`digits` uniform digits) and the depth (uniform in [0, 1)).
    length: the row length (the pipeline's packed lm rows have `data.max_length + 1`).
    add_bos: as `make_prompt` (BOS first, EOS last); without it the row ends with the answer.
  """
  key = random_key(rng, digits)
  depth = float(rng.random())
  answer = _encode(tokenizer, key)
  tail = [tokenizer.eos_id] if add_bos else []
  need = min_prompt_length(tokenizer, digits, add_bos=add_bos) + len(answer) + len(tail)
  if length < need:
    raise ValueError(f"a pass-key training row needs at least {need} tokens (BOS, key sentence, question, "
                     f"{digits}-digit answer, EOS); the rows are {length} tokens long.")
  prompt = make_prompt(length - len(answer) - len(tail), depth, key, tokenizer, add_bos=add_bos)
  return np.concatenate([prompt, np.asarray(answer + tail, np.int32)]).astype(np.int32)


def _answer(text: str, digits: int) -> str:
  """The first `digits` characters of a continuation, after any leading whitespace (a
  SentencePiece continuation starts with the word's space)."""
  return text.lstrip()[:digits]


def evaluate_passkey(generate_fn: GenerateFn, tokenizer, *, lengths: Sequence[int],
                     depths: Sequence[float] = DEFAULT_DEPTHS, trials: int = 10, digits: int = 5, seed: int = 0,
                     add_bos: bool = True, examples_per_cell: int = 1,
                     score_fn: ScoreFn | None = None) -> dict[str, Any]:
  """Pass-key accuracy of `generate_fn` at each (length, depth).

  All `trials * len(depths)` prompts of one length have exactly that length, so they go to
  `generate_fn` as one batch, unpadded. The keys of a length come from
  `np.random.default_rng([seed, length])`: a length's prompts do not depend on which other
  lengths are evaluated, and two models evaluated with one seed see the same prompts.

  Args:
    generate_fn: int32[B, length] prompts -> int[B, n] greedy continuations (n >= digits for
      the byte tokenizer, one digit per token). The continuation is decoded to text and its
      first `digits` characters after leading spaces are the answer.
    lengths: prompt lengths in tokens, each >= `min_prompt_length`.
    depths: key depths in [0, 1].
    trials: prompts per (length, depth), each with its own key.
    add_bos: as `make_prompt`.
    examples_per_cell: how many (key, output) pairs of each cell to keep in `examples`.
    score_fn: optional; (prompts, answers, answer_mask) -> the negative log-likelihood of each
      answer token given the prompt and the answer's earlier tokens (teacher forcing), as
      `answer_nll_fn` computes it. The answer is the key encoded on its own, as
      `training_row` appends it; answers of one length are right-padded to the longest
      (a SentencePiece key may split into different numbers of pieces), `answer_mask` marks
      the real tokens.

  Returns:
    A JSON-ready dict: `lengths`, `depths`, `trials`, `digits`, `seed`; `accuracy` and
    `digit_accuracy`, lists indexed [length][depth] (exact match of all digits; the fraction
    of digit positions right); `mean_accuracy` per length (over depths); `chance`
    ({accuracy: 10**-digits, digit_accuracy: 0.1}); `examples`, dicts {length, depth, key,
    output}. With `score_fn`, also `answer_nll` [length][depth] (nats per digit: a key's
    total over its tokens / digits, the mean over trials), `mean_answer_nll` per length, and
    `chance["answer_nll"]` = ln 10, a uniform guess among the digits.
  """
  lengths = [int(x) for x in lengths]
  depths = [float(d) for d in depths]
  if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
    raise ValueError(f"trials={trials!r} must be an integer >= 1.")
  if not lengths or not depths:
    raise ValueError(f"lengths={lengths} and depths={depths} must both be non-empty.")
  accuracy, digit_accuracy, answer_nll, examples = [], [], [], []
  for length in lengths:
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, length])
    keys = [[random_key(rng, digits) for _ in range(trials)] for _ in depths]
    prompts = np.stack([make_prompt(length, d, k, tokenizer, add_bos=add_bos)
                        for d, row in zip(depths, keys) for k in row])
    out = np.asarray(generate_fn(prompts))
    if out.ndim != 2 or out.shape[0] != len(prompts):
      raise ValueError(f"generate_fn returned shape {out.shape} for {len(prompts)} prompts; expected "
                       f"[{len(prompts)}, >= {digits}].")
    texts = [tokenizer.decode([int(t) for t in row]) for row in out]
    if score_fn is not None:
      nats = _answer_nats(score_fn, prompts, [k for row in keys for k in row], tokenizer) / digits
      answer_nll.append([float(np.mean(nats[j * trials:(j + 1) * trials])) for j in range(len(depths))])
    acc_row, digit_row = [], []
    for j, (d, row) in enumerate(zip(depths, keys)):
      exact = right = 0
      for i, key in enumerate(row):
        text = texts[j * trials + i]
        got = _answer(text, digits)
        exact += got == key
        right += sum(a == b for a, b in zip(got, key))
        if i < examples_per_cell:
          examples.append({"length": length, "depth": d, "key": key, "output": text})
      acc_row.append(exact / trials)
      digit_row.append(right / (trials * digits))
    accuracy.append(acc_row)
    digit_accuracy.append(digit_row)
  results = {"lengths": lengths, "depths": depths, "trials": int(trials), "digits": int(digits), "seed": int(seed),
             "accuracy": accuracy, "digit_accuracy": digit_accuracy,
             "mean_accuracy": [float(np.mean(row)) for row in accuracy],
             "chance": {"accuracy": 10.0 ** -digits, "digit_accuracy": 0.1}, "examples": examples}
  if score_fn is not None:
    results["answer_nll"] = answer_nll
    results["mean_answer_nll"] = [float(np.mean(row)) for row in answer_nll]
    results["chance"]["answer_nll"] = float(np.log(10.0))
  return results


def _answer_nats(score_fn: ScoreFn, prompts: np.ndarray, keys: list[str], tokenizer) -> np.ndarray:
  """float64[B]: each key's total negative log-likelihood after its prompt, in nats."""
  answers = [_encode(tokenizer, key) for key in keys]
  width = max(len(a) for a in answers)
  ids = np.zeros((len(answers), width), np.int32)
  mask = np.zeros((len(answers), width), bool)
  for i, a in enumerate(answers):
    ids[i, :len(a)], mask[i, :len(a)] = a, True
  nats = np.asarray(score_fn(prompts, ids, mask), np.float64)
  if nats.shape != ids.shape:
    raise ValueError(f"score_fn returned shape {nats.shape} for answers of shape {ids.shape}; expected the "
                     "negative log-likelihood of each answer token, [B, A].")
  return np.where(mask, nats, 0.0).sum(1)


# Attention logits of one prefill chunk, in float32 elements (0.5 GiB): long prompts go to
# the model a few rows at a time, since dense attention holds [rows, heads, P, P] scores.
_PREFILL_BUDGET = 1 << 27


def _in_chunks(fn, arrays: list[np.ndarray], rows: int) -> np.ndarray:
  """fn over `rows` rows of the arrays at a time, concatenated. The last chunk is padded to
  `rows` with copies of its first row (dropped after), so every call has one shape: one compile."""
  b = len(arrays[0])
  rows = min(rows, b)
  out = []
  for start in range(0, b, rows):
    chunk = [x[start:start + rows] for x in arrays]
    n = len(chunk[0])
    if n < rows:
      chunk = [np.concatenate([x, np.repeat(x[:1], rows - n, axis=0)]) for x in chunk]
    out.append(np.asarray(fn(*chunk))[:n])
  return np.concatenate(out)


def greedy_generate_fn(model, digits: int = 5, *, max_rows: int | None = None) -> GenerateFn:
  """A `generate_fn` for `evaluate_passkey`: greedy continuations of a `CausalLM`.

  Uses `decoding.generate` (one jitted program: a prefill of the whole prompt into the KV
  cache, then `digits` cached steps at temperature 0), with a cache of prompt + digits - 1
  slots, the minimum (the last token is never fed back). Nothing limits the prompt to the
  training length: that is the point of the test (learned absolute positions stop at
  `max_position`, and `decoding.generate` says so).

  Args:
    model: a `CausalLM` (with the RoPE scaling to test, if any, in its config).
    digits: tokens to generate (one per digit with the byte tokenizer).
    max_rows: prompts per compiled call; None = as many as keep the prefill's attention
      scores within 2**27 float32 values. The last call is padded to the same number of
      rows (copies of a prompt, dropped after), so one length compiles one program.
  """
  from roformer_jax import decoding

  heads = model.config.num_heads

  def generate(prompts: np.ndarray) -> np.ndarray:
    prompts = np.asarray(prompts, np.int32)
    p = prompts.shape[1]
    rows = max_rows or max(1, _PREFILL_BUDGET // (heads * p * (p + digits)))
    return _in_chunks(lambda chunk: decoding.generate(model, chunk, max_new_tokens=digits, temperature=0),
                      [prompts], rows)

  return generate


def answer_nll_fn(model, *, max_rows: int | None = None) -> ScoreFn:
  """A `score_fn` for `evaluate_passkey`: the negative log-likelihood (nats) that a `CausalLM`
  gives each answer token, with the prompt and the answer's earlier tokens as its context
  (teacher forcing: one forward pass of prompt + answer, no sampling).

  Rows go to the model a few at a time, as in `greedy_generate_fn` (dense attention holds
  [rows, heads, T, T] scores, and the logits are [rows, T, vocab]); the last call is padded
  to the same number of rows, so one length compiles one program. The answer's padding comes
  after every real token, so under the causal mask it changes nothing that is read.
  """
  import jax
  import jax.numpy as jnp
  from flax import nnx

  graphdef, state = nnx.split(model)
  heads, vocab = model.config.num_heads, model.config.vocab_size

  @jax.jit
  def nats(state, prompts, answers, mask):
    m = nnx.merge(graphdef, state)
    p = prompts.shape[1]
    seq = jnp.concatenate([prompts, answers], axis=1)
    valid = jnp.concatenate([jnp.ones_like(prompts, bool), mask], axis=1)
    logits = m(seq[:, :-1], attention_mask=valid[:, :-1], deterministic=True)[:, p - 1:]
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, answers[..., None], axis=-1)[..., 0]

  def score(prompts: np.ndarray, answers: np.ndarray, mask: np.ndarray) -> np.ndarray:
    prompts, answers, mask = np.asarray(prompts, np.int32), np.asarray(answers, np.int32), np.asarray(mask, bool)
    t = prompts.shape[1] + answers.shape[1]
    rows = max_rows or max(1, _PREFILL_BUDGET // max(heads * t * t, t * vocab))
    return _in_chunks(lambda *chunk: nats(state, *chunk), [prompts, answers, mask], rows)

  return score


def plot_heatmap(results: dict[str, Any], path: str, title: str = "Passkey retrieval") -> str:
  """Draws `results["accuracy"]` as a length x depth heat map into `path`; each cell is
  annotated with its exact-match accuracy and, below it, the fraction of digits right (which
  tells a model that gets some digits, or guesses at chance 0.1, from one that gets none) and,
  when scored, the answer's nats per digit (chance ln 10 = 2.30).

  The PNG is written to a temporary file in the same directory, then renamed over `path`,
  so a reader never sees half a file (eval.py may run while someone views the last one).
  """
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  acc = np.asarray(results["accuracy"], float)
  lengths, depths = results["lengths"], results["depths"]
  rows = 0.65 if results.get("answer_nll") else 0.5
  fig, ax = plt.subplots(figsize=(1.6 + 0.9 * len(depths), 1.2 + rows * len(lengths)))
  image = ax.imshow(acc, vmin=0.0, vmax=1.0, cmap="RdYlGn", aspect="auto")
  ax.set_xticks(range(len(depths)), [f"{d:g}" for d in depths])
  ax.set_yticks(range(len(lengths)), [str(n) for n in lengths])
  ax.set_xlabel("key depth (fraction of the filler before it)")
  ax.set_ylabel("prompt length (tokens)")
  digit = np.asarray(results.get("digit_accuracy", acc), float)
  nll = np.asarray(results["answer_nll"], float) if results.get("answer_nll") else None
  for i in range(acc.shape[0]):
    for j in range(acc.shape[1]):  # exact match; the fraction of digits right; nats per digit
      text = f"{acc[i, j]:.2f}\n{digit[i, j]:.2f} dig." + (f"\n{nll[i, j]:.2f} nats" if nll is not None else "")
      ax.text(j, i, text, ha="center", va="center", fontsize=7,
              color="black" if 0.25 < acc[i, j] < 0.85 else "white")
  fig.colorbar(image, ax=ax, label=f"exact match ({results.get('trials', '?')} trials)")
  ax.set_title(title, fontsize=9)
  fig.tight_layout()
  tmp = f"{path}.tmp-{os.getpid()}"  # the same directory (a rename within one file system)
  try:
    with open(tmp, "wb") as f:
      fig.savefig(f, format="png", dpi=120)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
  finally:
    plt.close(fig)
  return path


def format_table(results: dict[str, Any]) -> str:
  """The accuracy grid as text: one line per length, one column per depth (eval.py prints it);
  then the answer's nats per digit, when scored."""
  depths = results["depths"]
  lines = ["passkey  " + " ".join(f"{'d=' + format(d, 'g'):>6}" for d in depths) + "    mean"]
  for length, row, mean in zip(results["lengths"], results["accuracy"], results["mean_accuracy"]):
    lines.append(f"{length:>7}  " + " ".join(f"{a:>6.2f}" for a in row) + f"  {mean:6.2f}")
  if results.get("answer_nll"):
    lines.append(f"answer nats per digit (chance ln 10 = {np.log(10):.2f}):")
    for length, row, mean in zip(results["lengths"], results["answer_nll"], results["mean_answer_nll"]):
      lines.append(f"{length:>7}  " + " ".join(f"{a:>6.2f}" for a in row) + f"  {mean:6.2f}")
  return "\n".join(lines)


__all__ = ["DEFAULT_DEPTHS", "FILLER", "KEY_SENTENCE", "QUESTION", "answer_nll_fn", "evaluate_passkey", "format_table",
           "greedy_generate_fn", "key_position", "make_prompt", "min_prompt_length", "plot_heatmap",
           "random_key", "training_row"]
