"""Tokenizers with one small interface: bytes, and SentencePiece (BPE or unigram).

Every tokenizer has

  encode(text: str | bytes) -> list[int]     no special tokens added
  decode(ids) -> str                          special ids are dropped
  vocab_size, pad_id, bos_id, eos_id, mask_id, num_special

The special tokens always take the lowest ids, ``0 .. num_special - 1``, with ``pad_id == 0``,
so "id < num_special" tells a special token and a zero-filled array is padding. Pipelines use
``bos_id`` as BERT's [CLS] and ``eos_id`` as its [SEP].

- ``ByteTokenizer``: the 256 byte values shifted up by 4 specials (pad=0, bos=1, eos=2,
  mask=3), so byte ``b`` is id ``b + 4`` and the vocabulary has 260 entries. Used for the
  Python-stdlib corpus and enwik8 (Sec. 4.4 models bytes).
- ``SentencePieceTokenizer``: a trained SentencePiece model (pad=0, bos=1, eos=2, unk=3,
  mask=4 as the control symbol ``<mask>``, which
  no input text can produce). Sec. 4.1 uses a joint BPE vocabulary of 37k
  for WMT14 En-De; for MLM (Sec. 4.2), where BERT used a 30k WordPiece vocabulary, we use a
  SentencePiece BPE (or unigram) model trained on the pre-training text, which plays the same
  role. ``train_sentencepiece`` trains one from an iterator of sentences.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
MASK_PIECE = "<mask>"


class TokenizerNotFoundError(FileNotFoundError):
  """A SentencePiece model file that the config names does not exist."""


class ByteTokenizer:
  """UTF-8 bytes as tokens: id = byte + 4, after pad=0, bos=1, eos=2, mask=3 (vocab 260)."""

  num_special = 4
  pad_id, bos_id, eos_id, mask_id = PAD_ID, BOS_ID, EOS_ID, 3
  vocab_size = 256 + num_special

  def encode(self, text: str | bytes) -> list[int]:
    return self.encode_array(text).tolist()

  def encode_array(self, text: str | bytes) -> np.ndarray:
    """Like ``encode``, as an int32 array (no Python list on the hot path)."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return np.frombuffer(data, np.uint8).astype(np.int32) + self.num_special

  def decode(self, ids: Sequence[int] | np.ndarray) -> str:
    ids = np.asarray(ids, np.int64).reshape(-1)
    data = (ids[ids >= self.num_special] - self.num_special).astype(np.uint8).tobytes()
    return data.decode("utf-8", errors="replace")

  def __repr__(self) -> str:
    return "ByteTokenizer(vocab_size=260)"


class SentencePieceTokenizer:
  """A trained SentencePiece model (``.model`` file) behind the shared interface."""

  def __init__(self, model_path: str | os.PathLike):
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top

    path = Path(model_path)
    if not path.is_file():
      raise TokenizerNotFoundError(
          f"SentencePiece model {str(path)!r} does not exist. Train one on the task data with\n"
          f"  python -m roformer_jax.training.data.prepare tokenizer <dataset> --output {path}\n"
          "(e.g. <dataset> = wmt14_translate/de-en with --vocab_size 37000, Sec. 4.1), or call "
          "roformer_jax.training.data.train_sentencepiece(sentences, path, vocab_size=...).")
    self.path = path
    self._sp = spm.SentencePieceProcessor(model_file=str(path))
    self.pad_id, self.bos_id, self.eos_id = self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id()
    self.unk_id = self._sp.unk_id()
    self.mask_id = self._sp.piece_to_id(MASK_PIECE)
    specials = (self.pad_id, self.bos_id, self.eos_id, self.unk_id, self.mask_id)
    if sorted(specials) != list(range(5)) or self.pad_id != PAD_ID:
      raise ValueError(
          f"{path} was not trained by train_sentencepiece: expected pad=0, bos=1, eos=2, unk=3 and "
          f"{MASK_PIECE}=4, got pad={self.pad_id}, bos={self.bos_id}, eos={self.eos_id}, "
          f"unk={self.unk_id}, mask={self.mask_id}. Retrain it with train_sentencepiece.")
    self.num_special = 5
    self.vocab_size = self._sp.get_piece_size()

  def encode(self, text: str | bytes) -> list[int]:
    if isinstance(text, bytes):
      text = text.decode("utf-8", errors="replace")
    return self._sp.encode(text)

  def encode_array(self, text: str | bytes) -> np.ndarray:
    return np.asarray(self.encode(text), np.int32)

  def decode(self, ids: Sequence[int] | np.ndarray) -> str:
    ids = [int(i) for i in np.asarray(ids).reshape(-1) if i >= self.num_special or i == self.unk_id]
    return self._sp.decode(ids)

  def __repr__(self) -> str:
    return f"SentencePieceTokenizer({str(self.path)!r}, vocab_size={self.vocab_size})"


def train_sentencepiece(sentences: Iterable[str | bytes], output: str | os.PathLike, *,
                        vocab_size: int, model_type: str = "bpe", character_coverage: float = 1.0,
                        max_sentences: int = 10_000_000, max_sentence_length: int = 16384,
                        num_threads: int | None = None) -> Path:
  """Trains a SentencePiece model on ``sentences`` and writes ``output`` (a ``.model`` file).

  The specials are pad=0, bos=1, eos=2, unk=3 and ``<mask>``=4, as ``SentencePieceTokenizer``
  expects. ``vocab_size`` is a soft limit (a corpus too small for it gets a smaller vocabulary
  instead of an error). The file is written to a temporary name and renamed, so a concurrent
  reader never sees half a model.

  Args:
    sentences: the training text, one sentence (or line, or document) per item.
    output: path of the ``.model`` file to write; parent directories are created.
    vocab_size: target vocabulary size, specials included (Sec. 4.1: 37000, joint En-De).
    model_type: "bpe" (Sec. 4.1) or "unigram".
    character_coverage: the fraction of the text's characters (the most frequent first) that
      get a piece of their own; the rest become <unk>. 1.0 (every character) suits alphabetic
      scripts at full vocabulary sizes; SentencePiece recommends 0.9995 for large character sets.
    max_sentences: SentencePiece samples at most this many sentences.
    max_sentence_length: longer sentences (in bytes) are skipped by the trainer.
    num_threads: trainer threads (default: the CPU count).

  Returns:
    The path of the written model.

  Raises:
    ValueError: a bad ``model_type`` or ``character_coverage``, or a ``vocab_size`` smaller than
      the characters ``character_coverage`` keeps
      (plus the specials; the message gives the size needed).
  """
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top

  if model_type not in ("bpe", "unigram"):
    raise ValueError(f"model_type={model_type!r}; expected 'bpe' or 'unigram'.")
  output = Path(output)
  output.parent.mkdir(parents=True, exist_ok=True)

  def text_lines():
    for s in sentences:
      s = s.decode("utf-8", errors="replace") if isinstance(s, bytes) else s
      s = s.strip()
      if s:
        yield s

  if not 0.0 < character_coverage <= 1.0:
    raise ValueError(f"character_coverage={character_coverage!r}; expected a fraction in (0, 1].")
  model = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=text_lines(), model_writer=model, vocab_size=vocab_size,
        model_type=model_type, character_coverage=character_coverage,
        pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=3, control_symbols=[MASK_PIECE],
        hard_vocab_limit=False, input_sentence_size=max_sentences, shuffle_input_sentence=True,
        max_sentence_length=max_sentence_length, num_threads=num_threads or os.cpu_count() or 1,
        minloglevel=2)
  except RuntimeError as e:
    # vocab_size is a soft limit for merges, but never for characters: every character that
    # character_coverage keeps must be a piece of its own. SentencePiece says so in C++ terms.
    wall = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", str(e))
    if not wall:
      raise
    need = int(wall.group(2))
    raise ValueError(
        f"a {vocab_size}-piece SentencePiece vocabulary cannot hold this text: the characters that "
        f"character_coverage={character_coverage} keeps, plus the special pieces, need {need} pieces. "
        f"Raise the vocabulary to at least {need} (data.vocab_size and model.vocab_size), or lower "
        f"data.tokenizer_character_coverage below {character_coverage} (SentencePiece's default is "
        "0.9995): the rarest characters then become <unk>.") from e
  fd, tmp = tempfile.mkstemp(dir=output.parent, prefix=output.name, suffix=".tmp")
  with os.fdopen(fd, "wb") as f:
    f.write(model.getvalue())
  os.replace(tmp, output)
  return output
