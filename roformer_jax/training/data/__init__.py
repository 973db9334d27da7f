"""Input data: datasets, tokenizers and Grain pipelines (no TensorFlow needed).

  from roformer_jax.training import data
  cfg = data.default_data_config()                  # the offline Python-stdlib byte corpus
  it = data.make_iterator(cfg, task="lm", split="train", batch_size=8, seed=0)
  batch = next(it)                                  # dict of NumPy arrays, see pipeline.py

Modules: ``config`` (the config keys), ``datasets`` (registry, prepared-or-error),
``corpus`` (the stdlib corpus builder), ``enwik8`` (its builder), ``shapes`` (shapes2d: scenes,
their renderer and builder), ``images`` (pixel resizing and crops), ``tokenizers``,
``masking`` (BERT MLM), ``packing`` (rows with segment ids), ``pipeline`` (make_iterator),
``prepare`` (command line: prepare a dataset or train a tokenizer).
"""

from roformer_jax.training.data.config import default_data_config
from roformer_jax.training.data.corpus import build_stdlib_corpus
from roformer_jax.training.data.datasets import REGISTRY, DatasetNotPreparedError, get_spec
from roformer_jax.training.data.masking import mask_tokens
from roformer_jax.training.data.packing import positions_from_segments
from roformer_jax.training.data.pipeline import (FORMATS, BatchFormat, check_data, label_names, make_dataset,
                                        make_iterator, make_tokenizer, raw_targets, tokenizer_path)
from roformer_jax.training.data.tokenizers import (ByteTokenizer, SentencePieceTokenizer,
                                          TokenizerNotFoundError, train_sentencepiece)

__all__ = [
    "FORMATS", "REGISTRY", "BatchFormat", "ByteTokenizer", "DatasetNotPreparedError", "SentencePieceTokenizer",
    "TokenizerNotFoundError", "build_stdlib_corpus", "check_data", "default_data_config",
    "get_spec", "label_names", "make_dataset", "make_iterator", "make_tokenizer", "mask_tokens",
    "positions_from_segments", "raw_targets", "tokenizer_path", "train_sentencepiece",
]
