"""The data section of a training config: every key the input pipeline reads."""

from __future__ import annotations

import ml_collections

TOKENIZERS = ("bytes", "sentencepiece")


def default_data_config() -> ml_collections.ConfigDict:
  """Defaults for ``config.data``: the offline Python-stdlib byte LM corpus.

  Keys:
    dataset: a registry name (``roformer_jax.training.data.datasets.REGISTRY``): python_stdlib_bytes,
      enwik8, wikipedia, wmt14_translate/de-en, gettext_translate/<lang>, glue/{mrpc,sst2,qnli,stsb,qqp,mnli},
      and the image sets shapes2d, cifar10, imagenet2012.
    data_dir: TFDS data directory; "" = $ROFORMER_JAX_DATA_DIR or ~/.cache/roformer_jax/tfds.
    max_documents, max_bytes: cap on the stdlib corpus (0 = whole library); smoke tests use it.
    locale_dir: where gettext_translate/<lang> reads <lang>/LC_MESSAGES/*.mo; "" = /usr/share/locale.
    max_length: T. lm/mlm: packed row length; seq2seq: source length; classification: the
      [CLS] a [SEP] b [SEP] length.
    max_target_length: seq2seq target length (tgt_in / tgt_out); 0 = max_length.
    tokenizer: "bytes" (vocab 260) or "sentencepiece".
    tokenizer_path: the SentencePiece ``.model``; "" = <data_dir>/tokenizers/<dataset>_<model
      type><vocab_size>.model (with ``_cov<coverage>`` before ``.model`` if the coverage is not 1).
    vocab_size: SentencePiece vocabulary when training one (Sec. 4.1: 37000 joint En-De).
    tokenizer_model_type: "bpe" (Sec. 4.1) or "unigram".
    tokenizer_max_sentences: sentences sampled to train SentencePiece.
    tokenizer_character_coverage: the fraction of the training text's characters (most frequent
      first) that get a piece of their own; the rest become <unk>. Every kept character takes a
      piece, so the vocabulary must exceed their number: 1.0 suits alphabetic text at real
      vocabulary sizes; the tiny smoke vocabularies use 0.9995 (SentencePiece's default).
    train_tokenizer_if_missing: train the SentencePiece model on the train split on first use.
      Meant for single-process smoke runs; prepare real vocabularies once, up front.
    shuffle_window: lm/mlm training cuts documents into row-sized chunks and shuffles them in a
      window of this many chunks, so that a long document does not fill many consecutive
      batches (0 = off: whole documents in shuffled order).
    mlm_probability, mlm_mask_ratio, mlm_random_ratio: BERT masking, 15% with 80/10/10.
    mlm_max_predictions: masked positions scored per row (M); 0 = the expected count plus 6
      standard deviations, rounded up to 8 (48 at T=128, 128 at T=512).
    document_mask: lm/mlm: True (default) = a token of a packed row attends only to its own
      document (a segment mask; positions restart per document). False = a packed row is one
      sequence (positions run on; BERT's and RoBERTa's FULL-SENTENCES rows); the training
      batches then carry no mask at all, which lets cuDNN's fused attention run on a GPU
      (B3 on an H100: 60 ms per step unmasked vs 98 ms with the packed rows' segment mask).
    pack_pairs: seq2seq training packs several whole pairs into each row (Grain's first-fit
      packer; segment ids keep them apart). Evaluation never packs.
    drop_long_pairs: seq2seq training drops pairs longer than the lengths (evaluation always
      truncates instead, so that no test sentence is lost).
    passkey_fraction: lm training only: each packed row is replaced, with this probability,
      by a synthetic pass-key row (``roformer_jax.training.data.passkey.training_row``: filler text with a
      5-digit key at a random depth, the question, the answer), deterministically from the
      seed and the row number, so resume is exact. In [0, 1); 0 = off. A fine-tuning mix for
      context extension (eval.py's ``eval.passkey_lengths`` measures the retrieval).
    image_size: R, the side in pixels of the "image" batches' square images: shapes2d renders
      its scenes at R (any R >= 8: evaluate at 1.5x or 2x the training R by overriding only
      this key); cifar10 and imagenet2012 are resized and cropped to R.
    image_channels: C of the images: 3 (RGB) or 1 (grey, the mean of the RGB channels).
    image_augment: training split of the pixel datasets (cifar10, imagenet2012) only: an
      Inception-style random resized crop and a horizontal flip (drawn from the seed and the
      record's position, so resume is exact); off = the evaluation's centre crop. shapes2d is
      never augmented (a flip would change its label; its scenes are the variety).
    image_min_crop_area: the smallest area fraction of the random resized crop (0.08 as in
      Inception and DeiT; CIFAR-sized training often prefers about 0.35).
    num_threads, prefetch: Grain read threads and read-ahead buffer (records).
  """
  c = ml_collections.ConfigDict()
  c.dataset = "python_stdlib_bytes"
  c.data_dir = ""
  c.max_documents = 0
  c.max_bytes = 0
  c.locale_dir = ""
  c.max_length = 256
  c.max_target_length = 0
  c.tokenizer = "bytes"
  c.tokenizer_path = ""
  c.vocab_size = 37000
  c.tokenizer_model_type = "bpe"
  c.tokenizer_max_sentences = 2_000_000
  c.tokenizer_character_coverage = 1.0
  c.train_tokenizer_if_missing = False
  c.shuffle_window = 4096
  c.mlm_probability = 0.15
  c.mlm_mask_ratio = 0.8
  c.mlm_random_ratio = 0.1
  c.mlm_max_predictions = 0
  c.drop_long_pairs = True
  c.pack_pairs = False
  c.document_mask = True
  c.passkey_fraction = 0.0
  c.image_size = 32
  c.image_channels = 3
  c.image_augment = True
  c.image_min_crop_area = 0.08
  c.num_threads = 2
  c.prefetch = 64
  return c
