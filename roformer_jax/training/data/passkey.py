"""Pass-key prompts and training rows: the data half of pass-key retrieval.

The synthetic test of Mohtashami & Jaggi (2023, "Landmark Attention"): filler sentences that
carry no information, one key sentence at a chosen depth, and a closing question:

    [BOS] ...The grass is green. The sky is blue. The sun is yellow. Here we go. There and back
    again. The pass key is 48213. Remember it. 48213 is the pass key. The grass is green. ...
    There and back again. What is the pass key? The pass key is

- `make_prompt(length, depth, key, tokenizer)`: exactly `length` token ids (lengths count
  tokens, so the same code serves the byte tokenizer and SentencePiece).
- `training_row(rng, length, tokenizer)`: a prompt followed by its answer, a full training
  row (the `data.passkey_fraction` mix of the input pipeline).

NumPy only, so the input pipeline builds rows without JAX. The evaluation (accuracy per length
and depth, the generate and score functions, the heat map) is `roformer_jax.evaluation.passkey`.
"""

from __future__ import annotations


import numpy as np

# The filler of Mohtashami & Jaggi, one sentence at a time: sentences are the units the key
# is placed between, and each is tokenized on its own so that its token count is known.
FILLER = ("The grass is green. ", "The sky is blue. ", "The sun is yellow. ", "Here we go. ",
          "There and back again. ")
KEY_SENTENCE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is "


def random_key(rng: np.random.Generator, digits: int = 5) -> str:
  """`digits` decimal digits, each uniform in 0-9 (a leading 0 is allowed), so a model that
  guesses gets each digit right with probability exactly 0.1 and the whole key with 10**-digits."""
  if isinstance(digits, bool) or not isinstance(digits, (int, np.integer)) or digits < 1:
    raise ValueError(f"digits={digits!r} must be an integer >= 1.")
  return "".join(str(d) for d in rng.integers(0, 10, size=int(digits)))


def encode(tokenizer, text: str) -> list[int]:
  """`tokenizer.encode(text)` as a list of Python ints."""
  return [int(i) for i in tokenizer.encode(text)]


def _check_key(key) -> str:
  key = str(key)
  if not key or not key.isdigit() or not key.isascii():
    raise ValueError(f"key={key!r} must be a string of decimal digits, e.g. '48213'.")
  return key


def min_prompt_length(tokenizer, digits: int = 5, *, add_bos: bool = True) -> int:
  """The shortest prompt: BOS, the key sentence and the question, no filler."""
  return (int(add_bos) + len(encode(tokenizer, KEY_SENTENCE.format(key="0" * digits)))
          + len(encode(tokenizer, QUESTION)))


def _layout(length: int, depth: float, key: str | int, tokenizer, add_bos: bool) -> tuple[np.ndarray, int]:
  """(ids int32[length], index of the key sentence's first token)."""
  if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
    raise ValueError(f"length={length!r} must be an integer number of tokens.")
  if isinstance(depth, bool) or not isinstance(depth, (int, float, np.floating, np.integer)) \
      or not 0.0 <= float(depth) <= 1.0:
    raise ValueError(f"depth={depth!r} must be a number in [0, 1] (the fraction of the filler before the key).")
  key = _check_key(key)
  bos = [tokenizer.bos_id] if add_bos else []
  key_ids = encode(tokenizer, KEY_SENTENCE.format(key=key))
  question = encode(tokenizer, QUESTION)
  n = int(length) - len(bos) - len(key_ids) - len(question)  # filler tokens
  if n < 0:
    raise ValueError(f"length={length} is too short for a pass-key prompt: BOS, the key sentence and the "
                     f"question alone take {int(length) - n} tokens with this tokenizer and a {len(key)}-digit key.")
  # Whole filler sentences in their order, built backwards from the question so that the text
  # before the question always ends with a whole cycle; the excess is cut off the front, where
  # the prompt reads like a document that started earlier (as a cut training row does).
  sentences = [encode(tokenizer, s) for s in FILLER]
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
  answer = encode(tokenizer, key)
  tail = [tokenizer.eos_id] if add_bos else []
  need = min_prompt_length(tokenizer, digits, add_bos=add_bos) + len(answer) + len(tail)
  if length < need:
    raise ValueError(f"a pass-key training row needs at least {need} tokens (BOS, key sentence, question, "
                     f"{digits}-digit answer, EOS); the rows are {length} tokens long.")
  prompt = make_prompt(length - len(answer) - len(tail), depth, key, tokenizer, add_bos=add_bos)
  return np.concatenate([prompt, np.asarray(answer + tail, np.int32)]).astype(np.int32)


__all__ = ["FILLER", "KEY_SENTENCE", "QUESTION", "encode", "key_position", "make_prompt", "min_prompt_length",
           "random_key", "training_row"]
