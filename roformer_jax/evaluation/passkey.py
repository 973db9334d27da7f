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

- The prompts and training rows (`make_prompt`, `training_row`) are
  `roformer_jax.training.data.passkey`'s: the input pipeline builds them without JAX.
- `evaluate_passkey(generate_fn, tokenizer, lengths=..., depths=..., trials=..., score_fn=...)`:
  accuracy per (length, depth); `greedy_generate_fn(model, digits)` is the `generate_fn` of a
  `CausalLM`. With `score_fn` (`answer_nll_fn(model)`), also the answer's negative
  log-likelihood in nats per digit: graded where exact match is all zeros (a small model that
  has learned a digit follows the question but not which one sits at ln 10 = 2.30; one that
  copies the key goes to 0).
- `plot_heatmap(results, path, title)`: the length x depth accuracy map as a PNG.

JAX (for decoding) and matplotlib load where they are used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from roformer_jax.training.data.passkey import encode, make_prompt, random_key

DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)

GenerateFn = Callable[[np.ndarray], np.ndarray]
# (prompts int32[B, P], answers int32[B, A], answer_mask bool[B, A]) -> nats float[B, A]
ScoreFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


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
                        for d, row in zip(depths, keys, strict=True) for k in row])
    out = np.asarray(generate_fn(prompts))
    if out.ndim != 2 or out.shape[0] != len(prompts):
      raise ValueError(f"generate_fn returned shape {out.shape} for {len(prompts)} prompts; expected "
                       f"[{len(prompts)}, >= {digits}].")
    texts = [tokenizer.decode([int(t) for t in row]) for row in out]
    if score_fn is not None:
      nats = _answer_nats(score_fn, prompts, [k for row in keys for k in row], tokenizer) / digits
      answer_nll.append([float(np.mean(nats[j * trials:(j + 1) * trials])) for j in range(len(depths))])
    acc_row, digit_row = [], []
    for j, (d, row) in enumerate(zip(depths, keys, strict=True)):
      exact = right = 0
      for i, key in enumerate(row):
        text = texts[j * trials + i]
        got = _answer(text, digits)
        exact += got == key
        right += sum(a == b for a, b in zip(got, key, strict=False))  # the answer may be shorter or longer
        if i < examples_per_cell:
          examples.append({"length": length, "depth": d, "key": key, "output": text})
      acc_row.append(exact / trials)
      digit_row.append(right / (trials * digits))
    accuracy.append(acc_row)
    digit_accuracy.append(digit_row)
  results: dict[str, Any] = {
      "lengths": lengths, "depths": depths, "trials": int(trials), "digits": int(digits), "seed": int(seed),
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
  answers = [encode(tokenizer, key) for key in keys]
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
  for length, row, mean in zip(results["lengths"], results["accuracy"], results["mean_accuracy"], strict=True):
    lines.append(f"{length:>7}  " + " ".join(f"{a:>6.2f}" for a in row) + f"  {mean:6.2f}")
  if results.get("answer_nll"):
    lines.append(f"answer nats per digit (chance ln 10 = {np.log(10):.2f}):")
    for length, row, mean in zip(results["lengths"], results["answer_nll"], results["mean_answer_nll"], strict=True):
      lines.append(f"{length:>7}  " + " ".join(f"{a:>6.2f}" for a in row) + f"  {mean:6.2f}")
  return "\n".join(lines)


__all__ = ["DEFAULT_DEPTHS", "answer_nll_fn", "evaluate_passkey", "format_table", "greedy_generate_fn",
           "plot_heatmap"]
