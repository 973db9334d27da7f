"""Grain input pipelines: TFDS data source -> tokens -> packed, batched NumPy dicts.

Letters: B the local (per-process) batch, T ``data.max_length``, S source and U target length.

    make_iterator(data_cfg, *, task, split, batch_size, seed, process_index=0, process_count=1)

returns a ``grain.DatasetIterator``; ``next(it)`` is a dict of NumPy arrays:

- ``"lm"`` (causal LM): ``inputs``, ``targets`` (the next token), ``segment_ids`` (1, 2, ... per
  packed document, 0 = padding), ``positions`` (restart at 0 per segment, =
  ``rope.positions_from_segments(segment_ids)``), all int32[B, T]; ``weights`` float32[B, T], 0
  at padding and where the target belongs to another segment (a document boundary).
- ``"mlm"``: ``inputs`` (15% selected, 80/10/10 mask/random/keep), ``targets`` (original
  ids), ``segment_ids``, ``positions``, ``token_type_ids`` (zeros), int32[B, T];
  ``weights`` float32[B, T], 1.0 exactly at the selected tokens; and the same selection as
  M entries per row (``mlm_max_predictions``): ``masked_positions``, ``masked_targets``
  int32[B, M], ``masked_weights`` float32[B, M] (0 where a row has fewer than M), so the
  model scores M positions per row instead of T.
- ``"seq2seq"``: ``src`` (source + EOS), ``src_segment_ids``, ``src_positions`` int32[B, S];
  ``tgt_in`` (BOS + target), ``tgt_out`` (target + EOS), ``tgt_segment_ids``,
  ``tgt_positions`` int32[B, U]; ``weights`` float32[B, U]. One pair per row, padded (segment
  id 1 on real tokens), unless ``data.pack_pairs`` packs training rows: then a row holds
  several whole pairs, segment k of ``src`` translating to segment k of the target.
- ``"classification"``: ``input_ids`` ([CLS] a [SEP] b [SEP], with BOS as [CLS] and EOS as
  [SEP]), ``token_type_ids`` (0 up to the first [SEP], 1 after), ``attention_mask``
  int32[B, T]; ``label`` int32[B] (float32[B] for a regression such as stsb); ``weights``
  float32[B] (0 for the rows that pad the last evaluation batch).
- ``"image"`` (image classification; R ``data.image_size``, C ``data.image_channels``):
  ``image`` float32[B, R, R, C], normalised per channel with the dataset's mean and std
  ((x - mean) / std of the [0, 1] pixels); ``label`` int32[B]; ``weights`` float32[B] (0 for
  the rows that pad the last evaluation batch, whose image and label are 0). shapes2d renders
  each record's scene at R; cifar10 / imagenet2012 resize and centre-crop their pixels to R
  (``images.center_crop``), or on the train split with ``data.image_augment`` take an
  Inception-style random resized crop and flip (``images.random_resized_crop``).

Order of the work (the "train" split shuffles and repeats by default, the others make one
ordered pass whose last batch is padded with zero-weight rows):

  records[process_index::process_count]        disjoint shard per process
  -> shuffle(seed) -> repeat                   a new order every epoch
  -> tokenize (+ MLM masking)                  RNG seeded by (seed, record index): resumable
     [image: render the scene, or crop/resize the pixels (random crops seeded the same way)]
  -> [lm/mlm] cut into row-sized chunks -> window shuffle -> pack into rows of T (+1 for lm)
  -> [lm, train split] replace a row by a pass-key row with probability data.passkey_fraction
  -> batch(B)

Every stage is a deterministic Grain transformation whose iterator state is a few integers,
so ``it.get_state()`` / ``it.set_state(state)`` (and Orbax's
``grain.checkpoint.CheckpointSave(it)``) resume exactly where the run stopped.

The lm rows are packed to T + 1 tokens; inputs are the first T, targets the last T (so the
last token of a row is only a target). A document that does not fit a row continues in a later
row as a new segment (positions from 0). Evaluation passes read the split in its fixed on-disk
order; with several processes each gets its own shard and may yield a different number of
batches.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import grain
import grain.experimental  # noqa: F401  (FirstFitPackIterDataset)
import ml_collections
import numpy as np

from roformer_jax.training.data import corpus, datasets, images, packing, passkey
from roformer_jax.training.data.config import TOKENIZERS
from roformer_jax.training.data.masking import mask_tokens
from roformer_jax.training.data.tokenizers import ByteTokenizer, SentencePieceTokenizer, train_sentencepiece

Tokenizer = ByteTokenizer | SentencePieceTokenizer
Batch = dict[str, np.ndarray]


# --------------------------------------------------------------------------------------
# Tokenizer from the config.
# --------------------------------------------------------------------------------------


def tokenizer_path(data_cfg: ml_collections.ConfigDict) -> Path:
  """Where the SentencePiece model of this config lives (``data.tokenizer_path`` or the default)."""
  if data_cfg.tokenizer_path:
    return Path(data_cfg.tokenizer_path).expanduser()
  name = f"{data_cfg.dataset.replace('/', '_')}_{data_cfg.tokenizer_model_type}{data_cfg.vocab_size}"
  coverage = character_coverage(data_cfg)
  if coverage != 1.0:  # another coverage is another vocabulary: never share a file with it
    name += f"_cov{coverage:g}"
  return datasets.resolve_data_dir(data_cfg.data_dir) / "tokenizers" / f"{name}.model"


def character_coverage(data_cfg: ml_collections.ConfigDict) -> float:
  """``data.tokenizer_character_coverage`` (1.0 for configs written before the key existed)."""
  return float(data_cfg.get("tokenizer_character_coverage", 1.0))


def training_sentences(data_cfg: ml_collections.ConfigDict, *, split: str = "train",
                       limit: int | None = None) -> Iterator[bytes | str]:
  """Text of a split to train a vocabulary on: every text field (both sides of a translation
  pair, for the joint vocabulary of Sec. 4.1), documents cut into lines."""
  spec = datasets.get_spec(data_cfg.dataset)
  source = _open(data_cfg, spec, split)
  limit = limit or data_cfg.tokenizer_max_sentences
  count = 0
  for i in range(len(source)):
    for field in spec.fields:
      text = source[i][field]
      for line in (text.splitlines() if spec.kind == "text" else [text]):
        yield line
        count += 1
        if count >= limit:
          return


def raw_targets(data_cfg: ml_collections.ConfigDict, split: str, *, process_index: int = 0,
                process_count: int = 1, limit: int = 0) -> list[str]:
  """The untokenized target side of a translation split, in the order of its evaluation batches.

  An evaluation pass (no shuffle, no repeat, nothing dropped) reads records
  ``[process_index::process_count]`` in order, so these are the references of the pass's rows:
  BLEU is scored against them, not against the decoded (truncated, re-tokenized) ``tgt_out``.
  ``limit`` keeps the first ``limit`` (0 = all).
  """
  spec = datasets.get_spec(data_cfg.dataset)
  if spec.kind != "translation":
    raise ValueError(f"Dataset {spec.name!r} holds {spec.kind} records, not translation pairs.")
  source = _open(data_cfg, spec, split)
  indices = range(process_index, len(source), process_count)
  if limit:
    indices = indices[:limit]
  texts = (source[i][spec.fields[1]] for i in indices)
  return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in texts]


def make_tokenizer(data_cfg: ml_collections.ConfigDict) -> Tokenizer:
  """The tokenizer that ``data.tokenizer`` names.

  Raises:
    TokenizerNotFoundError: a SentencePiece model is missing (the message says how to train
      it) and ``data.train_tokenizer_if_missing`` is off.
  """
  if data_cfg.tokenizer not in TOKENIZERS:
    raise ValueError(f"data.tokenizer={data_cfg.tokenizer!r}; expected one of {TOKENIZERS}.")
  if data_cfg.tokenizer == "bytes":
    return ByteTokenizer()
  path = tokenizer_path(data_cfg)
  if not path.is_file() and data_cfg.train_tokenizer_if_missing:
    with corpus.file_lock(path.parent / f".{path.name}.lock"):  # one trainer per machine.
      if not path.is_file():
        train_sentencepiece(training_sentences(data_cfg), path, vocab_size=data_cfg.vocab_size,
                            model_type=data_cfg.tokenizer_model_type,
                            character_coverage=character_coverage(data_cfg))
  return SentencePieceTokenizer(path)


# --------------------------------------------------------------------------------------
# Per-example transformations (run in Grain's read threads).
# --------------------------------------------------------------------------------------


def _document(spec: datasets.DatasetSpec, tok: Tokenizer) -> Callable[[Mapping[str, Any]], np.ndarray]:
  def fn(record):
    ids = tok.encode_array(record[spec.fields[0]])
    if spec.add_bos_eos:
      ids = np.concatenate([[tok.bos_id], ids, [tok.eos_id]]).astype(np.int32)
    return ids
  return fn


def _pad(ids: np.ndarray, length: int) -> np.ndarray:
  out = np.zeros(length, np.int32)
  out[:len(ids)] = ids
  return out


def _translation(spec, tok: Tokenizer, src_len: int, tgt_len: int, drop_long: bool, pad: bool = True):
  def fn(record):
    src = tok.encode_array(record[spec.fields[0]])
    tgt = tok.encode_array(record[spec.fields[1]])
    if drop_long and (len(src) + 1 > src_len or len(tgt) + 1 > tgt_len):
      return None  # training: skip over-long pairs instead of teaching truncated translations.
    src = np.append(src[:src_len - 1], tok.eos_id).astype(np.int32)
    tgt = tgt[:tgt_len - 1]
    if not pad:  # for the packer, which pads and adds segment ids and positions itself.
      return {"src": src, "tgt_in": np.append(tok.bos_id, tgt).astype(np.int32),
              "tgt_out": np.append(tgt, tok.eos_id).astype(np.int32)}
    return {"src": _pad(src, src_len), "src_segment_ids": _pad(np.ones_like(src), src_len),
            "tgt_in": _pad(np.append(tok.bos_id, tgt), tgt_len),
            "tgt_out": _pad(np.append(tgt, tok.eos_id), tgt_len),
            "tgt_segment_ids": _pad(np.ones(len(tgt) + 1, np.int32), tgt_len)}
  return fn


def _truncate_pair(a: np.ndarray, b: np.ndarray | None, budget: int):
  """BERT's longest-first truncation of a sentence pair to ``budget`` tokens in all."""
  la, lb = len(a), 0 if b is None else len(b)
  while la + lb > budget:
    if la >= lb:
      la -= 1
    else:
      lb -= 1
  return a[:la], None if b is None else b[:lb]


def _classification(spec, tok: Tokenizer, length: int):
  regression = spec.num_classes == 1

  def fn(record):
    a = tok.encode_array(record[spec.fields[0]])
    b = tok.encode_array(record[spec.fields[1]]) if len(spec.fields) > 1 else None
    a, b = _truncate_pair(a, b, length - (2 if b is None else 3))
    first = np.concatenate([[tok.bos_id], a, [tok.eos_id]])
    second = np.zeros(0, np.int32) if b is None else np.append(b, tok.eos_id)
    ids = np.concatenate([first, second]).astype(np.int32)
    types = np.concatenate([np.zeros(len(first), np.int32), np.ones(len(second), np.int32)])
    label = np.float32(record[spec.label]) if regression else np.int32(record[spec.label])
    return {"input_ids": _pad(ids, length), "token_type_ids": _pad(types, length),
            "attention_mask": _pad(np.ones(len(ids), np.int32), length), "label": label,
            "weights": np.float32(1.0)}
  return fn


# --------------------------------------------------------------------------------------
# Per-batch formatting (runs after batching, vectorised over B).
# --------------------------------------------------------------------------------------


def _pad_rows(batch: Batch, batch_size: int) -> Batch:
  """Zero rows up to ``batch_size`` (the last batch of a finite pass); zero means padding."""
  n = len(next(iter(batch.values())))
  if n == batch_size:
    return batch
  return {k: np.concatenate([v, np.zeros((batch_size - n,) + v.shape[1:], v.dtype)])
          for k, v in batch.items()}


def _format_lm(rows: Batch) -> Batch:
  tokens, seg = rows["tokens"], rows["segment_ids"]
  inputs_seg = seg[:, :-1]
  return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "segment_ids": inputs_seg,
          "positions": packing.positions_from_segments(inputs_seg),
          "weights": ((inputs_seg == seg[:, 1:]) & (inputs_seg != 0)).astype(np.float32)}


def mlm_max_predictions(data_cfg: ml_collections.ConfigDict, length: int) -> int:
  """M, the masked positions scored per row: ``data.mlm_max_predictions``, or if that is 0, the
  expected count plus 6 standard deviations (binomial), rounded up to a multiple of 8."""
  given = int(data_cfg.get("mlm_max_predictions", 0) or 0)
  if given:
    return min(given, length)
  p = data_cfg.mlm_probability
  return min(length, 8 * math.ceil((length * p + 6 * math.sqrt(length * p * (1 - p))) / 8))


def _format_mlm(rows: Batch, max_predictions: int) -> Batch:
  seg, weights = rows["segment_ids"], rows["weights"]
  # The selected positions, in order, padded with weight-0 entries to M per row: the model
  # then scores M rows instead of T (Devlin et al.'s max_predictions_per_seq). A row with
  # more than M selected tokens (beyond 6 sigma with the default M) keeps its first M.
  order = np.argsort(-weights, axis=1, kind="stable")[:, :max_predictions].astype(np.int32)
  return {"inputs": rows["inputs"], "targets": rows["targets"], "weights": weights,
          "segment_ids": seg, "positions": packing.positions_from_segments(seg),
          "token_type_ids": np.zeros_like(seg), "masked_positions": order,
          "masked_targets": np.take_along_axis(rows["targets"], order, axis=1),
          "masked_weights": np.take_along_axis(weights, order, axis=1)}


def _format_seq2seq(rows: Batch) -> Batch:
  out = dict(rows)
  out["src_positions"] = packing.positions_from_segments(rows["src_segment_ids"])
  out["tgt_positions"] = packing.positions_from_segments(rows["tgt_segment_ids"])
  out["weights"] = (rows["tgt_segment_ids"] != 0).astype(np.float32)
  return out


# --------------------------------------------------------------------------------------
# The pipeline.
# --------------------------------------------------------------------------------------


def _seed(seed: int, *stream: int) -> int:
  """An independent 32-bit seed per (seed, stream...) for Grain's shuffles and RNGs."""
  return int(np.random.SeedSequence([seed & 0xFFFFFFFF, *stream]).generate_state(1)[0])


def _open(data_cfg, spec, split):
  return datasets.open_source(spec, split, data_dir=data_cfg.data_dir,
                              max_documents=data_cfg.max_documents, max_bytes=data_cfg.max_bytes,
                              locale_dir=data_cfg.get("locale_dir") or None)


def make_dataset(data_cfg: ml_collections.ConfigDict, *, task: str | BatchFormat, split: str, batch_size: int,
                 seed: int, process_index: int = 0, process_count: int = 1,
                 repeat: bool | None = None, shuffle: bool | None = None,
                 tokenizer: Tokenizer | None = None) -> grain.IterDataset:
  """The ``grain.IterDataset`` behind ``make_iterator`` (same arguments)."""
  fmt = batch_format(task)
  spec = datasets.get_spec(data_cfg.dataset)
  if spec.kind != fmt.records:
    fits = sorted(n for n, s in datasets.REGISTRY.items() if s.kind == fmt.records)
    raise ValueError(f"Dataset {spec.name!r} holds {spec.kind} records; task {fmt.name!r} needs "
                     f"{fmt.records} records, e.g. one of {fits}.")
  if not 0 <= process_index < process_count:
    raise ValueError(f"process_index={process_index} must be in [0, process_count={process_count}).")
  if batch_size < 1:
    raise ValueError(f"batch_size={batch_size} must be >= 1 (it is the per-process batch).")
  length = data_cfg.max_length
  if length < 4:
    raise ValueError(f"data.max_length={length} is too short; need >= 4.")
  training = split == "train"
  passkey_fraction(data_cfg, fmt)
  repeat = training if repeat is None else repeat
  shuffle = training if shuffle is None else shuffle

  source = _open(data_cfg, spec, split)
  if len(source) < process_count:
    from roformer_jax.errors import UserError  # a data/flags mismatch: exit 2 with this message alone
    raise UserError(f"{spec.name} split {split!r} has {len(source)} records, fewer than the "
                    f"{process_count} processes that must each read a disjoint shard; run fewer "
                    f"processes (--num_processes), or use a larger split (e.g. not a :smoke variant's "
                    f"capped corpus, data.max_documents).")
  tok = tokenizer or make_tokenizer(data_cfg)

  ds = grain.MapDataset.source(source)[process_index::process_count]
  if shuffle:
    ds = ds.shuffle(_seed(seed, 0))
  if repeat:
    ds = ds.repeat(None)

  it_ds, fmt_rows = fmt.rows(ds, data_cfg, spec=spec, tok=tok, batch_size=batch_size, seed=seed,
                             process_index=process_index, shuffle=shuffle, training=training)
  if not document_mask(data_cfg, fmt):
    fmt_rows = functools.partial(_across_documents, fmt_rows, endless=repeat)
  it_ds = it_ds.batch(batch_size, drop_remainder=False)
  return it_ds.map(lambda b: fmt_rows(_pad_rows(b, batch_size)))


def _across_documents(fmt_rows: Callable[[Batch], Batch], rows: Batch, *, endless: bool) -> Batch:
  """``data.document_mask=False``: a packed row is one sequence (documents see each other).

  Every real token gets segment 1 (padding keeps 0), so positions run on across the documents
  of a row and only padding is masked. An endless stream (the train split) has no padding: its
  rows are always full, so its batches carry no ``segment_ids`` at all, and the model attends
  without a mask, the form cuDNN's fused attention takes on a GPU.
  """
  rows = dict(rows, segment_ids=(rows["segment_ids"] != 0).astype(np.int32))
  batch = fmt_rows(rows)
  if endless:
    if not (batch["segment_ids"] != 0).all():  # cannot happen: ConcatThenSplit fills every row
      raise RuntimeError("data.document_mask=False: an endless stream gave a row with padding.")
    del batch["segment_ids"]
  return batch


# --------------------------------------------------------------------------------------
# Batch formats: how the records of one kind become one task's batches.
# --------------------------------------------------------------------------------------


def _lm_rows(ds, data_cfg, *, spec, tok, batch_size, seed, process_index, shuffle, training):
  del batch_size
  it_ds = _packed_documents(ds, data_cfg, causal=True, spec=spec, tok=tok, seed=seed,
                            process_index=process_index, shuffle=shuffle, training=training)
  return it_ds, _format_lm


def _mlm_rows(ds, data_cfg, *, spec, tok, batch_size, seed, process_index, shuffle, training):
  del batch_size
  it_ds = _packed_documents(ds, data_cfg, causal=False, spec=spec, tok=tok, seed=seed,
                            process_index=process_index, shuffle=shuffle, training=training)
  return it_ds, functools.partial(_format_mlm, max_predictions=mlm_max_predictions(data_cfg, data_cfg.max_length))


def _seq2seq_rows(ds, data_cfg, *, spec, tok, batch_size, seed, process_index, shuffle, training):
  del process_index
  length = data_cfg.max_length
  tgt_len = data_cfg.max_target_length or length
  drop_long = training and data_cfg.drop_long_pairs
  if training and data_cfg.get("pack_pairs"):
    ds = ds.map(_translation(spec, tok, length, tgt_len, drop_long=drop_long, pad=False))
    return _packed_pairs(_to_iter(ds, data_cfg), length, tgt_len, batch_size, seed, shuffle), dict
  ds = ds.map(_translation(spec, tok, length, tgt_len, drop_long=drop_long))
  return _to_iter(ds, data_cfg), _format_seq2seq


def _classification_rows(ds, data_cfg, *, spec, tok, batch_size, seed, process_index, shuffle, training):
  del batch_size, seed, process_index, shuffle, training
  return _to_iter(ds.map(_classification(spec, tok, data_cfg.max_length)), data_cfg), dict


def image_shape(data_cfg: ml_collections.ConfigDict, spec: datasets.DatasetSpec | None = None) -> tuple[int, int]:
  """(R, C): ``data.image_size`` and ``data.image_channels`` (their defaults: ``default_data_config``),
  checked (against ``spec.min_image_size`` when a spec is given)."""
  size, channels = int(data_cfg.image_size), int(data_cfg.image_channels)  # defaults: config.default_data_config
  least = spec.min_image_size if spec is not None else 1
  if size < least:
    raise ValueError(f"data.image_size={size} must be >= {least}"
                     + (f" ({spec.name} renders at {least} px or more)." if spec is not None and least > 1 else "."))
  if channels not in (1, 3):
    raise ValueError(f"data.image_channels={channels}; expected 1 (grey) or 3 (RGB).")
  return size, channels


def _normaliser(spec: datasets.DatasetSpec, channels: int) -> Callable[[np.ndarray], np.ndarray]:
  mean = np.asarray(spec.pixel_mean or (0.5,) * 3, np.float32)
  std = np.asarray(spec.pixel_std or (0.5,) * 3, np.float32)
  if channels == 1:  # grey is the channel mean: its statistics, approximately.
    mean, std = mean.mean(keepdims=True), std.mean(keepdims=True)
  return lambda image: ((image - mean) / std).astype(np.float32)


def _image_rows(ds, data_cfg, *, spec, tok, batch_size, seed, process_index, shuffle, training):
  del tok, batch_size, shuffle
  size, channels = image_shape(data_cfg, spec)
  normalise = _normaliser(spec, channels)

  def row(image, record):
    return {"image": normalise(image), "label": np.int32(record[spec.label]), "weights": np.float32(1.0)}

  if spec.render is not None:  # a scene: drawn at the requested resolution, never augmented.
    ds = ds.map(lambda record: row(spec.render(record, size, channels), record))
  elif training and data_cfg.image_augment:
    min_area = float(data_cfg.image_min_crop_area)
    if not 0 < min_area <= 1:
      raise ValueError(f"data.image_min_crop_area={min_area} must be in (0, 1].")
    # random_map seeds each record's generator from (seed, record index): resumable crops.
    ds = ds.random_map(lambda record, rng: row(images.random_resized_crop(
        images.to_unit(record[spec.fields[0]], channels), size, rng, min_area=min_area), record),
                       seed=_seed(seed, 5, process_index))
  else:
    ds = ds.map(lambda record: row(images.center_crop(
        images.to_unit(record[spec.fields[0]], channels), size, spec.eval_crop), record))
  return _to_iter(ds, data_cfg), dict


@dataclasses.dataclass(frozen=True)
class BatchFormat:
  """How records become the batches of a task (the keys are in the module docstring).

  Attributes:
    name: the format's name, in messages ("lm", "mlm", "seq2seq", "classification", "image").
    records: the ``DatasetSpec.kind`` it reads ("text", "translation", "classification", "image").
    rows: ``rows(ds, data_cfg, *, spec, tok, batch_size, seed, process_index, shuffle, training)``
      -> (an IterDataset of rows, the function that formats a batch of them).
    passkey_rows: causal-LM rows, into which ``data.passkey_fraction`` may mix pass-key rows.
    document_rows: rows packed from documents (lm, mlm), which ``data.document_mask`` governs.
  """
  name: str
  records: str
  rows: Callable[..., tuple[grain.IterDataset, Callable[[Batch], Batch]]]
  passkey_rows: bool = False
  document_rows: bool = False


LM = BatchFormat("lm", "text", _lm_rows, passkey_rows=True, document_rows=True)
MLM = BatchFormat("mlm", "text", _mlm_rows, document_rows=True)
SEQ2SEQ = BatchFormat("seq2seq", "translation", _seq2seq_rows)
CLASSIFICATION = BatchFormat("classification", "classification", _classification_rows)
IMAGE = BatchFormat("image", "image", _image_rows)
# The built-in formats by name, so that data-only code (and the tests) can ask for "lm" rows
# without the model library; a task (roformer_jax.training.tasks) holds its format as an object.
FORMATS = {f.name: f for f in (LM, MLM, SEQ2SEQ, CLASSIFICATION, IMAGE)}


def batch_format(task: str | BatchFormat) -> BatchFormat:
  """``task`` as a ``BatchFormat``: itself, or the built-in format of that name."""
  if isinstance(task, BatchFormat):
    return task
  fmt = FORMATS.get(task) if isinstance(task, str) else None
  if fmt is None:
    raise ValueError(f"task={task!r}; expected one of {sorted(FORMATS)}.")
  return fmt


def _packed_documents(ds: grain.MapDataset, data_cfg, *, causal: bool, spec: datasets.DatasetSpec,
                      tok: Tokenizer, seed: int, process_index: int, shuffle: bool,
                      training: bool = False) -> grain.IterDataset:
  """Records -> token documents (masked for mlm, `causal` False) -> [chunk + window shuffle] ->
  packed rows [-> lm training: some rows replaced by pass-key rows, ``data.passkey_fraction``]."""
  ds = ds.map(_document(spec, tok)).filter(lambda ids: len(ids) > 0)
  row = data_cfg.max_length + 1 if causal else data_cfg.max_length
  features: tuple[str, ...]
  if causal:
    ds, features = ds.map(lambda ids: {"tokens": ids}), ("tokens",)
  else:
    mlm = dict(vocab_size=tok.vocab_size, num_special=tok.num_special, mask_id=tok.mask_id,
               probability=data_cfg.mlm_probability, mask_ratio=data_cfg.mlm_mask_ratio,
               random_ratio=data_cfg.mlm_random_ratio)
    # random_map seeds each record's generator from (seed, record index): resumable masks.
    ds = ds.random_map(lambda ids, rng: mask_tokens(ids, rng, **mlm), seed=_seed(seed, 1, process_index))
    features = ("inputs", "targets", "weights")
  it_ds = _to_iter(ds, data_cfg)
  window = data_cfg.shuffle_window if shuffle else 0
  it_ds = packing.chunk_and_shuffle(it_ds, chunk_length=row, window=window, seed=_seed(seed, 2))
  it_ds = packing.pack(it_ds, {f: row for f in features})
  if causal and training:
    fraction = passkey_fraction(data_cfg, LM)
    if fraction:
      _check_passkey_row(tok, row, spec.add_bos_eos, data_cfg.max_length)
    it_ds = _PasskeyMix(it_ds, fraction=fraction, seed=_seed(seed, 4, process_index), tokenizer=tok,
                        length=row, add_bos=spec.add_bos_eos)
  return it_ds


# --------------------------------------------------------------------------------------
# Passkey rows in the lm training mix (data.passkey_fraction).
# --------------------------------------------------------------------------------------


def passkey_fraction(data_cfg: ml_collections.ConfigDict, task: str | BatchFormat | None = None) -> float:
  """``data.passkey_fraction`` (0.0 for configs written before the key existed), checked.

  Raises:
    UserError: not a number in [0, 1), or a nonzero fraction for a batch format (``task``)
      without causal-LM rows (the pass-key rows are causal-LM documents: a question answered
      at the end).
  """
  from roformer_jax.errors import UserError
  value = data_cfg.get("passkey_fraction", 0.0)
  if value is None:
    value = 0.0
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
    raise UserError(f"data.passkey_fraction={value!r} must be a number in [0, 1): the probability that a "
                    "training row is replaced by a pass-key row (0 = off, e.g. 0.1 for a fine-tuning mix).")
  if value and task is not None and not batch_format(task).passkey_rows:
    raise UserError(f"data.passkey_fraction={value!r} mixes pass-key rows into causal-LM training; task "
                    f"{batch_format(task).name!r} cannot use them. Set --config.data.passkey_fraction=0.")
  return float(value)


def document_mask(data_cfg: ml_collections.ConfigDict, task: str | BatchFormat | None = None) -> bool:
  """``data.document_mask`` (True when absent), checked.

  True: each token of a packed row attends only to its own document (a segment mask). False:
  a packed row is one sequence, as BERT's and RoBERTa's pre-training rows are (FULL-SENTENCES),
  and training batches need no mask at all, which lets cuDNN's fused attention run on a GPU.

  Raises:
    UserError: not a bool, or False for a batch format (``task``) whose rows are not packed
      from documents.
  """
  from roformer_jax.errors import UserError
  value = data_cfg.get("document_mask", True)
  if not isinstance(value, bool):
    raise UserError(f"data.document_mask={value!r} must be True (a token sees only its own document in a "
                    "packed row) or False (a packed row is one sequence).")
  if not value and task is not None and not batch_format(task).document_rows:
    raise UserError(f"data.document_mask=False applies to rows packed from documents (lm, mlm); task "
                    f"{batch_format(task).name!r} has none. Remove it or set --config.data.document_mask=True.")
  if not value and data_cfg.get("passkey_fraction"):
    raise UserError("data.document_mask=False makes every training row one unmasked sequence, but the "
                    f"pass-key rows (data.passkey_fraction={data_cfg.passkey_fraction!r}) are padded documents "
                    "of their own; set one of --config.data.document_mask=True or --config.data.passkey_fraction=0.")
  return value


def _check_passkey_row(tok: Tokenizer, row: int, add_bos: bool, max_length: int) -> None:
  from roformer_jax.errors import UserError
  need = passkey.min_prompt_length(tok, add_bos=add_bos) + len(tok.encode("0" * 5)) + int(add_bos)
  if row < need:
    raise UserError(f"data.passkey_fraction needs rows of at least {need} tokens (BOS, the key sentence, "
                    f"the question, a 5-digit answer and EOS), but data.max_length={max_length} makes rows "
                    f"of {row}; raise data.max_length to {need - 1} or more, or set data.passkey_fraction=0.")


class _PasskeyMixIterator(grain.DatasetIterator):
  """Replaces each packed lm row by a pass-key row with probability ``fraction``.

  Row n's choice (and its key and depth) come from ``np.random.default_rng([seed, n])``,
  with n counted by this iterator, so the mix is a function of the run's seed and the row
  number alone, and the count in the iterator state resumes it exactly. A replaced row
  is one whole segment (positions 0..T); the packed row it replaces is dropped.

  With fraction 0 the rows and the state are exactly those of the packer (a checkpoint of a
  run without the mix resumes unchanged); a state saved with the mix on and restored with it
  off (or the reverse) is accepted, the count restarting at 0 when the saved state has none.
  """

  def __init__(self, parent: grain.DatasetIterator, *, fraction: float, seed: int, tokenizer, length: int,
               add_bos: bool):
    super().__init__(parent)
    self._fraction, self._seed, self._tok, self._length, self._add_bos = fraction, seed, tokenizer, length, add_bos
    self._rows = 0

  def __next__(self):
    row = next(self._parent)
    if not self._fraction:
      return row
    rng = np.random.default_rng([self._seed, self._rows])
    self._rows += 1
    if rng.random() >= self._fraction:
      return row
    tokens = passkey.training_row(rng, self._length, self._tok, add_bos=self._add_bos)
    return {"tokens": tokens, "segment_ids": np.ones(self._length, np.int32),
            "positions": np.arange(self._length, dtype=np.int32)}

  def get_state(self) -> dict[str, Any]:
    if not self._fraction:
      return self._parent.get_state()
    return {"parent": self._parent.get_state(), "passkey_rows": self._rows}

  def set_state(self, state: dict[str, Any]) -> None:
    if isinstance(state, Mapping) and "passkey_rows" in state:
      self._parent.set_state(state["parent"])
      self._rows = int(state["passkey_rows"])
    else:
      self._parent.set_state(state)
      self._rows = 0


class _PasskeyMix(grain.IterDataset):

  def __init__(self, parent: grain.IterDataset, **kw):
    super().__init__(parent)
    self._kw = kw

  def __iter__(self) -> grain.DatasetIterator:
    return _PasskeyMixIterator(self._parent.__iter__(), **self._kw)


def _packed_pairs(ds: grain.IterDataset, src_len: int, tgt_len: int, batch_size: int, seed: int,
                  shuffle: bool) -> grain.IterDataset:
  """Translation pairs packed several to a row by Grain's first-fit packer (training only).

  Short pairs (software messages, most WMT sentences) fill a fraction of a padded row;
  packing puts as many whole pairs into a row as fit, both sides at once, so a batch carries
  several times the pairs for the same compute. A pair's source and target get the same
  segment id, which the model's masks use to keep pairs apart (`TransformerSeq2Seq`).
  """
  packed = grain.experimental.FirstFitPackIterDataset(
      ds, length_struct={"src": src_len, "tgt_in": tgt_len, "tgt_out": tgt_len},
      num_packing_bins=batch_size, seed=_seed(seed, 3), shuffle_bins=shuffle)

  def fmt(row):
    return {"src": row["src"], "src_segment_ids": row["src_segment_ids"], "src_positions": row["src_positions"],
            "tgt_in": row["tgt_in"], "tgt_out": row["tgt_out"], "tgt_segment_ids": row["tgt_in_segment_ids"],
            "tgt_positions": row["tgt_in_positions"],
            "weights": (row["tgt_in_segment_ids"] != 0).astype(np.float32)}

  return packed.map(fmt)


def _to_iter(ds: grain.MapDataset, data_cfg) -> grain.IterDataset:
  # Records that a transformation turned into None (empty documents, long pairs) are skipped.
  return ds.to_iter_dataset(grain.ReadOptions(num_threads=data_cfg.num_threads,
                                              prefetch_buffer_size=data_cfg.prefetch))


def make_iterator(data_cfg: ml_collections.ConfigDict, *, task: str | BatchFormat, split: str, batch_size: int,
                  seed: int, process_index: int = 0, process_count: int = 1,
                  repeat: bool | None = None, shuffle: bool | None = None,
                  tokenizer: Tokenizer | None = None) -> grain.DatasetIterator:
  """A deterministic, checkpointable iterator of local batches (see the module docstring).

  Args:
    data_cfg: ``config.data`` (keys in ``default_data_config``).
    task: the batch format: a ``BatchFormat`` (a task's ``tasks.get(name).batches``), or the
      name of a built-in one: "lm", "mlm", "seq2seq", "classification" or "image".
    split: "train", "validation", "test" or a TFDS split string.
    batch_size: rows per batch on this process (the global batch / process_count).
    seed: seeds the shuffles and the MLM masks.
    process_index, process_count: this process reads records
      ``process_index::process_count`` of the split (``jax.process_index()`` /
      ``jax.process_count()``).
    repeat: loop forever (default: only the train split).
    shuffle: shuffle records and chunks (default: only the train split).
    tokenizer: use this tokenizer instead of building the configured one.

  Returns:
    A ``grain.DatasetIterator``: ``next(it)`` gives a dict of NumPy arrays; ``get_state()`` /
    ``set_state()`` save and restore its position exactly.

  Raises:
    ValueError: unknown task/dataset, a task the dataset cannot feed, bad process ids.
    DatasetNotPreparedError: the dataset is not prepared (the message names the command).
    TokenizerNotFoundError: a SentencePiece model file is missing.
  """
  ds = make_dataset(data_cfg, task=task, split=split, batch_size=batch_size, seed=seed,
                    process_index=process_index, process_count=process_count, repeat=repeat,
                    shuffle=shuffle, tokenizer=tokenizer)
  return iter(ds)


def label_names(data_cfg: ml_collections.ConfigDict) -> tuple[str, ...] | None:
  """The class names of the dataset's ``label`` feature (its TFDS ClassLabel: GLUE's
  ``not_equivalent`` / ``equivalent``, shapes2d's ``left_above`` ...), or None where the dataset
  has no label names (a regression, no label, a dataset without a ClassLabel)."""
  spec = datasets.get_spec(data_cfg.dataset)
  source = _open(data_cfg, spec, "validation")
  try:
    names = source.dataset_info.features[spec.label or "label"].names
  except (AttributeError, KeyError, TypeError):  # no dataset_info, no such feature, or not a ClassLabel
    return None
  return tuple(str(n) for n in names) or None


def check_data(data_cfg: ml_collections.ConfigDict, *, splits: tuple[str, ...] = ("train",),
               task: str | BatchFormat | None = None) -> None:
  """Fails fast, before any training, if a dataset split or the tokenizer is missing, or
  ``data.passkey_fraction`` is out of range (or set for a batch format ``task`` without lm rows)."""
  passkey_fraction(data_cfg, task)
  document_mask(data_cfg, task)
  spec = datasets.get_spec(data_cfg.dataset)
  for split in splits:
    _open(data_cfg, spec, split)
  make_tokenizer(data_cfg)


__all__ = ["CLASSIFICATION", "FORMATS", "IMAGE", "LM", "MLM", "SEQ2SEQ", "BatchFormat", "batch_format",
           "check_data", "image_shape", "label_names", "make_dataset", "make_iterator", "make_tokenizer", "passkey_fraction",
           "tokenizer_path", "training_sentences"]
