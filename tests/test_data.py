"""The input pipeline: corpora, tokenizers, packing, masking, sharding and exact resume.

Everything runs offline: the stdlib corpus is built (capped) into a temporary directory, the
TFDS catalogue datasets come from ``tfds.testing.mock_data``, enwik8 from a synthetic zip.
"""

import collections
import json
import subprocess
import sys
import threading
import zipfile

import grain
import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds

from roformer_jax import rope
from roformer_jax.training import data
from roformer_jax.errors import UserError
from roformer_jax.training import tasks
from roformer_jax.training.data import corpus, datasets, enwik8, packing, pipeline

T = 64  # row length in these tests.
DOCS, BYTES = 60, 400_000  # the capped stdlib corpus of these tests.


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  """A capped stdlib corpus, built once per test worker."""
  path = tmp_path_factory.mktemp("tfds")
  corpus.build_stdlib_corpus(path, max_documents=DOCS, max_bytes=BYTES)
  return path


def stdlib_cfg(data_dir, **overrides):
  cfg = data.default_data_config()
  cfg.data_dir, cfg.max_documents, cfg.max_bytes, cfg.max_length = str(data_dir), DOCS, BYTES, T
  cfg.update(overrides)
  return cfg


def take(it, n):
  return [next(it) for _ in range(n)]


def assert_batches_equal(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b, strict=True):
    assert x.keys() == y.keys()
    for k in x:
      np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def all_document_tokens(cfg):
  """Byte-tokenizer ids of every train document, BOS/EOS included."""
  tok = data.ByteTokenizer()
  source = datasets.open_source(datasets.get_spec(cfg.dataset), "train", data_dir=cfg.data_dir,
                                max_documents=cfg.max_documents, max_bytes=cfg.max_bytes)
  return [np.concatenate([[tok.bos_id], tok.encode_array(source[i]["text"]), [tok.eos_id]])
          for i in range(len(source))]


# --------------------------------------------------------------------------------------
# The offline corpus.
# --------------------------------------------------------------------------------------


def test_stdlib_corpus_builds_and_reads_back_the_files(data_dir):
  name = f"{corpus.NAME}/{corpus.stdlib_config(DOCS, BYTES).name}"
  train = tfds.data_source(name, split="train", data_dir=str(data_dir), download=False)
  validation = tfds.data_source(name, split="validation", data_dir=str(data_dir), download=False)
  files = dict(corpus.stdlib_files(max_documents=DOCS, max_bytes=BYTES))
  # DOCS files unless their hash order reaches the byte cap first (another Python's stdlib
  # holds other files: the GPU image's Python 3.12.3 fits 33 in BYTES).
  assert len(train) + len(validation) == len(files) and len(validation) >= 1
  assert len(files) == DOCS or len(files) > 10 and sum(p.stat().st_size for p in files.values()) <= BYTES
  paths = [train[i]["path"].decode() for i in range(len(train))]
  assert sorted(paths) != paths or len(paths) < 3  # TFDS hands records back shuffled.
  for i in range(0, len(train), 7):
    assert train[i]["text"] == files[train[i]["path"].decode()].read_bytes()
  assert not {validation[i]["path"] for i in range(len(validation))} & set(p.encode() for p in paths)


def test_stdlib_corpus_concurrent_builds_share_one_result(tmp_path):
  errors = []

  def build():
    try:
      corpus.build_stdlib_corpus(tmp_path, max_documents=12)
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  threads = [threading.Thread(target=build) for _ in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors
  source = corpus.build_stdlib_corpus(tmp_path, max_documents=12).as_data_source("train")
  assert len(source) == 12 - corpus.MIN_VALIDATION_FILES
  assert not list(tmp_path.rglob("*incomplete*"))


def test_stdlib_split_is_a_function_of_the_path():
  files = corpus.stdlib_files()
  splits = corpus.split_files(files)
  assert len(splits["train"]) + len(splits["validation"]) == len(files)
  assert 0.005 < len(splits["validation"]) / len(files) < 0.05
  assert not any("site-packages" in rel for rel, _ in files)
  capped = corpus.split_files(corpus.stdlib_files(max_documents=300))
  hashed = {r for r, _ in capped["validation"] if corpus._hash(r) % 100 < corpus.VALIDATION_BUCKETS}
  assert hashed <= {r for r, _ in splits["validation"]}
  # A small corpus still has a validation file for each of several processes (the smoke
  # configs' 40 files hash only 1 into the buckets), and never gives away half its files.
  # How many of a capped corpus's files hash into the buckets depends on the stdlib's files, so
  # the expected count is max(the hashed files, the minimum), and the minimum is checked apart.
  for docs, minimum in ((40, corpus.MIN_VALIDATION_FILES), (300, corpus.MIN_VALIDATION_FILES), (3, 1), (1, 0)):
    capped = corpus.stdlib_files(max_documents=docs)
    small = corpus.split_files(capped)
    in_buckets = sum(corpus._hash(r) % 100 < corpus.VALIDATION_BUCKETS for r, _ in capped)
    count = max(minimum, in_buckets)
    assert len(small["validation"]) == count and len(small["train"]) == docs - count
    topped_up = corpus.split_files([f for f in capped if corpus._hash(f[0]) % 100 >= corpus.VALIDATION_BUCKETS])
    assert len(topped_up["validation"]) == min(minimum, len(topped_up["train"]) + len(topped_up["validation"]))


# --------------------------------------------------------------------------------------
# Tokenizers.
# --------------------------------------------------------------------------------------


def test_byte_tokenizer_round_trip_and_specials():
  tok = data.ByteTokenizer()
  text = "def f(x):\n    return 'héllo ✓'\n"
  ids = tok.encode(text)
  assert ids == [b + 4 for b in text.encode()] and min(ids) >= tok.num_special
  assert tok.decode([tok.bos_id] + ids + [tok.eos_id, tok.pad_id]) == text
  assert (tok.vocab_size, tok.pad_id, tok.bos_id, tok.eos_id, tok.mask_id) == (260, 0, 1, 2, 3)


def test_sentencepiece_trains_on_a_tiny_corpus_and_round_trips(tmp_path):
  sentences = [f"the {a} {b} sat on the mat number {i}." for i, (a, b) in
               enumerate(zip(["red", "big", "old", "shy"] * 50, ["cat", "dog", "fox", "owl"] * 50, strict=True))]
  path = data.train_sentencepiece(sentences, tmp_path / "sp.model", vocab_size=120)
  tok = data.SentencePieceTokenizer(path)
  assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.mask_id) == (0, 1, 2, 4)
  assert 20 < tok.vocab_size <= 120
  text = "the old fox sat on the mat number 7."
  ids = tok.encode(text)
  assert min(ids) >= tok.num_special and tok.decode(ids) == text
  assert tok.encode(text.encode()) == ids
  assert tok.mask_id not in tok.encode("<mask>")  # only the pipeline can produce a mask.


def test_a_vocabulary_smaller_than_the_alphabet_says_what_size_it_needs(tmp_path):
  """Every character that character_coverage keeps is a piece: 100 distinct ones do not fit 64."""
  alphabet = [chr(0x100 + i) for i in range(100)]
  sentences = ["".join(alphabet[(i + j) % 100] for j in range(20)) + " common words here" for i in range(300)]
  with pytest.raises(ValueError, match=r"64-piece .*character_coverage=1.0 .* need 1\d\d pieces"):
    data.train_sentencepiece(sentences, tmp_path / "sp.model", vocab_size=64)
  assert not (tmp_path / "sp.model").exists()
  cfg = data.default_data_config()
  cfg.update(dataset="wmt14_translate/de-en", tokenizer="sentencepiece", vocab_size=256,
             tokenizer_character_coverage=0.9995)
  assert data.tokenizer_path(cfg).name == "wmt14_translate_de-en_bpe256_cov0.9995.model"


def test_missing_sentencepiece_model_names_the_command(tmp_path):
  cfg = data.default_data_config()
  cfg.update(dataset="wmt14_translate/de-en", tokenizer="sentencepiece", data_dir=str(tmp_path))
  with pytest.raises(data.TokenizerNotFoundError, match="roformer_jax.training.data.prepare tokenizer"):
    data.make_tokenizer(cfg)
  assert data.tokenizer_path(cfg).name == "wmt14_translate_de-en_bpe37000.model"


# --------------------------------------------------------------------------------------
# Packing.
# --------------------------------------------------------------------------------------


def test_pack_tiles_every_document_with_contiguous_segments():
  rng = np.random.default_rng(0)
  lengths = [T, T, 2 * T, 1] + list(rng.integers(1, 3 * T, size=40))
  docs = [1000 * (i + 1) + np.arange(n, dtype=np.int32) for i, n in enumerate(lengths)]  # unique ids.
  ds = grain.MapDataset.source([{"tokens": d} for d in docs]).to_iter_dataset()
  rows = list(packing.pack(ds, {"tokens": T}))
  tokens = np.stack([r["tokens"] for r in rows])
  seg = np.stack([r["segment_ids"] for r in rows])
  assert tokens.shape[1] == T and (seg[:-1] > 0).all()  # only the last row pads,
  assert (np.diff((seg[-1] > 0).astype(int)) <= 0).all() and (tokens[seg == 0] == 0).all()
  pieces = collections.defaultdict(list)
  for r, s in zip(rows, seg, strict=True):
    np.testing.assert_array_equal(r["positions"], rope.positions_from_segments(s))
    ids = s[s > 0]
    assert ids[0] == 1 and set(np.diff(ids)) <= {0, 1}  # segments 1, 2, ... back to back.
    for i in np.unique(ids):
      piece = r["tokens"][s == i]
      assert len(set(piece // 1000)) == 1 and (np.diff(piece) == 1).all()  # one document, in order.
      pieces[piece[0] // 1000 - 1].append(piece % 1000)
  for i, d in enumerate(docs):  # the pieces of each document tile it exactly.
    np.testing.assert_array_equal(np.sort(np.concatenate(pieces[i])), d % 1000)
  for d in docs[:2]:  # a row-sized document is a row of its own.
    assert any((row == d).all() for row in tokens)


def test_positions_from_segments_matches_rope():
  seg = np.array([[1, 1, 1, 2, 2, 0], [1, 2, 3, 3, 0, 0]])
  np.testing.assert_array_equal(packing.positions_from_segments(seg), rope.positions_from_segments(seg))
  np.testing.assert_array_equal(packing.positions_from_segments(seg)[0], [0, 1, 2, 0, 1, 0])


def test_lm_batches_shift_targets_and_weight_only_within_documents(data_dir):
  it = data.make_iterator(stdlib_cfg(data_dir), task="lm", split="train", batch_size=4, seed=0)
  for b in take(it, 20):
    assert b["inputs"].shape == (4, T) and b["weights"].dtype == np.float32
    seg, w = b["segment_ids"], b["weights"]
    np.testing.assert_array_equal(b["positions"], rope.positions_from_segments(seg))
    same = (seg[:, :-1] == seg[:, 1:]) & (seg[:, :-1] > 0)
    np.testing.assert_array_equal(w[:, :-1], same)  # zero exactly at boundaries and padding.
    np.testing.assert_array_equal(b["targets"][:, :-1][same], b["inputs"][:, 1:][same])
    assert (w[seg == 0] == 0).all()
    starts = np.flatnonzero(b["positions"][0] == 0)
    assert b["segment_ids"][0, 0] == 1 and (np.diff(seg[0][starts]) == 1).all()


def test_lm_epoch_loses_and_duplicates_no_token(data_dir):
  """One pass over the train split with chunking and window shuffle: the same multiset."""
  cfg = stdlib_cfg(data_dir, shuffle_window=64, mlm_probability=0.0)
  it = data.make_iterator(cfg, task="mlm", split="train", batch_size=8, seed=3, shuffle=True,
                          repeat=False)
  got = np.concatenate([b["inputs"][b["segment_ids"] > 0] for b in it])
  want = np.concatenate(all_document_tokens(cfg))
  assert len(got) == len(want)
  np.testing.assert_array_equal(np.bincount(got, minlength=260), np.bincount(want, minlength=260))


def test_eval_pass_is_ordered_and_pads_the_last_batch(data_dir):
  cfg = stdlib_cfg(data_dir)
  first = list(data.make_iterator(cfg, task="lm", split="validation", batch_size=3, seed=0))
  again = list(data.make_iterator(cfg, task="lm", split="validation", batch_size=3, seed=9))
  assert_batches_equal(first, again)  # no shuffling outside training: the seed is unused.
  assert all(b["inputs"].shape == (3, T) for b in first)
  assert all((b["segment_ids"] > 0).all() for b in first[:-1])  # only the last batch pads,
  last = first[-1]["segment_ids"]
  assert (np.diff((last > 0).reshape(-1).astype(int)) <= 0).all()  # at its end.


# --------------------------------------------------------------------------------------
# MLM masking.
# --------------------------------------------------------------------------------------


def test_mask_tokens_rates_are_15_percent_with_80_10_10():
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, 1000, size=400_000).astype(np.int32)
  out = data.mask_tokens(tokens, np.random.default_rng(1), vocab_size=1000, num_special=5, mask_id=4)
  eligible = tokens >= 5
  sel = out["weights"] == 1
  assert not sel[~eligible].any() and (out["inputs"][~eligible] == tokens[~eligible]).all()
  assert abs(sel.sum() / eligible.sum() - 0.15) < 0.003
  masked = out["inputs"][sel] == 4
  kept = out["inputs"][sel] == tokens[sel]
  random = ~masked & ~kept
  assert abs(masked.mean() - 0.8) < 0.01 and abs(kept.mean() - 0.1) < 0.01 and abs(random.mean() - 0.1) < 0.01
  assert (out["inputs"][sel][random] >= 5).all()
  np.testing.assert_array_equal(out["targets"], tokens)


def test_mlm_batches_mask_real_tokens_only(data_dir):
  tok = data.ByteTokenizer()
  it = data.make_iterator(stdlib_cfg(data_dir), task="mlm", split="train", batch_size=8, seed=0)
  batches = take(it, 10)
  for b in batches:
    assert set(b) == {"inputs", "targets", "weights", "segment_ids", "positions", "token_type_ids",
                      "masked_positions", "masked_targets", "masked_weights"}
    sel = b["weights"] == 1
    # the M-per-row view holds exactly the selected positions, in order
    # (M = 32 at T = 64: 9.6 expected + 6 sigma = 26.8, rounded up to a multiple of 8)
    assert b["masked_positions"].shape == (8, 32)
    for row in range(8):
      picked = b["masked_positions"][row][b["masked_weights"][row] == 1]
      np.testing.assert_array_equal(picked, np.flatnonzero(sel[row]))
      np.testing.assert_array_equal(b["masked_targets"][row][b["masked_weights"][row] == 1], b["targets"][row][sel[row]])
    assert not sel[b["segment_ids"] == 0].any() and not sel[b["targets"] < tok.num_special].any()
    np.testing.assert_array_equal(b["inputs"][~sel], b["targets"][~sel])
    np.testing.assert_array_equal(b["positions"], rope.positions_from_segments(b["segment_ids"]))
    assert (b["token_type_ids"] == 0).all()
  rate = sum(b["weights"].sum() for b in batches) / sum((b["targets"] >= 4).sum() for b in batches)
  assert 0.13 < rate < 0.17


def test_mlm_rows_with_more_selections_than_m_keep_their_first_m():
  from roformer_jax.training.data import pipeline
  weights = np.array([[1, 0, 1, 1, 0, 1], [0, 0, 0, 0, 0, 1]], np.float32)
  rows = {"segment_ids": np.ones((2, 6), np.int32), "weights": weights,
          "inputs": np.zeros((2, 6), np.int32), "targets": np.arange(12, dtype=np.int32).reshape(2, 6)}
  out = pipeline._format_mlm(rows, max_predictions=3)
  np.testing.assert_array_equal(out["masked_positions"][0], [0, 2, 3])
  np.testing.assert_array_equal(out["masked_weights"], [[1, 1, 1], [1, 0, 0]])
  np.testing.assert_array_equal(out["masked_targets"][1][:1], [11])


# --------------------------------------------------------------------------------------
# Determinism, sharding, exact resume.
# --------------------------------------------------------------------------------------


def test_order_is_a_function_of_the_seed(data_dir):
  cfg = stdlib_cfg(data_dir)
  a = take(data.make_iterator(cfg, task="mlm", split="train", batch_size=4, seed=5), 6)
  b = take(data.make_iterator(cfg, task="mlm", split="train", batch_size=4, seed=5), 6)
  c = take(data.make_iterator(cfg, task="mlm", split="train", batch_size=4, seed=6), 6)
  assert_batches_equal(a, b)
  assert not np.array_equal(a[0]["targets"], c[0]["targets"])


def test_process_shards_are_disjoint_and_cover_the_split(data_dir):
  cfg = stdlib_cfg(data_dir, mlm_probability=0.0)

  def documents(**kw):  # the packed stream, cut back into documents at EOS (shuffle off).
    it = data.make_iterator(cfg, task="mlm", split="train", batch_size=4, seed=0, shuffle=False,
                            repeat=False, **kw)
    stream = np.concatenate([b["inputs"][b["segment_ids"] > 0] for b in it])
    return collections.Counter(bytes(d) for d in np.split(stream, np.flatnonzero(stream == 2) + 1) if len(d))

  everything = documents()
  shards = [documents(process_index=i, process_count=3) for i in range(3)]
  assert sum(shards, collections.Counter()) == everything
  assert sum(everything.values()) == len(all_document_tokens(cfg))
  first = take(data.make_iterator(cfg, task="lm", split="train", batch_size=2, seed=0,
                                  process_index=0, process_count=2), 3)
  second = take(data.make_iterator(cfg, task="lm", split="train", batch_size=2, seed=0,
                                   process_index=1, process_count=2), 3)
  assert not np.array_equal(first[0]["inputs"], second[0]["inputs"])


@pytest.mark.parametrize("task", ["lm", "mlm"])
def test_iterator_state_restores_exactly(data_dir, task):
  cfg = stdlib_cfg(data_dir, shuffle_window=32)
  make = lambda: data.make_iterator(cfg, task=task, split="train", batch_size=4, seed=1)
  it = make()
  take(it, 7)
  state = json.loads(json.dumps(it.get_state()))  # what Orbax writes and reads back.
  uninterrupted = take(it, 25)  # crosses several shuffle windows and epochs of 59 documents.
  restored = make()
  restored.set_state(state)
  assert_batches_equal(take(restored, 25), uninterrupted)


def test_orbax_checkpoint_of_the_iterator_restores_exactly(data_dir, tmp_path):
  ocp = pytest.importorskip("orbax.checkpoint")
  cfg = stdlib_cfg(data_dir, shuffle_window=32)
  make = lambda: data.make_iterator(cfg, task="lm", split="train", batch_size=4, seed=1)
  it = make()
  take(it, 7)
  with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
    mngr.save(7, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(it)))
    mngr.wait_until_finished()
  uninterrupted = take(it, 10)
  restored = make()
  with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
    mngr.restore(7, args=ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(restored)))
  assert_batches_equal(take(restored, 10), uninterrupted)


# --------------------------------------------------------------------------------------
# Catalogue datasets through mock_data.
# --------------------------------------------------------------------------------------


def mock_cfg(dataset, **overrides):
  cfg = data.default_data_config()
  cfg.update(dataset=dataset, max_length=32, **overrides)
  return cfg


def test_wmt14_mock_gives_seq2seq_batches(tmp_path):
  cfg = mock_cfg("wmt14_translate/de-en", max_target_length=24, tokenizer="sentencepiece",
                 tokenizer_path=str(tmp_path / "joint.model"), vocab_size=60,
                 train_tokenizer_if_missing=True)
  with tfds.testing.mock_data(num_examples=10, policy=tfds.testing.MockPolicy.USE_CODE):
    tok = data.make_tokenizer(cfg)  # trained on both languages of the (mock) train split.
    train = take(data.make_iterator(cfg, task="seq2seq", split="train", batch_size=4, seed=0), 3)
    test = list(data.make_iterator(cfg, task="seq2seq", split="test", batch_size=4, seed=0))
  shapes = {"src": 32, "src_segment_ids": 32, "src_positions": 32, "tgt_in": 24, "tgt_out": 24,
            "tgt_segment_ids": 24, "tgt_positions": 24, "weights": 24}
  assert isinstance(tok, data.SentencePieceTokenizer)
  for b in train + test:
    assert {k: v.shape for k, v in b.items()} == {k: (4, n) for k, n in shapes.items()}
    assert b["weights"].dtype == np.float32 and b["src"].dtype == np.int32
    real = b["tgt_segment_ids"] > 0
    np.testing.assert_array_equal(b["tgt_in"][:, 1:][real[:, 1:]], b["tgt_out"][:, :-1][real[:, 1:]])
    rows = real.any(1)
    assert (b["tgt_in"][rows, 0] == tok.bos_id).all()
    assert (b["tgt_out"][real & ~np.roll(real, -1, 1)] == tok.eos_id).all()
    np.testing.assert_array_equal(b["weights"], real)
    np.testing.assert_array_equal(b["src_positions"], rope.positions_from_segments(b["src_segment_ids"]))
  assert len(test) == 3 and test[-1]["weights"][2:].sum() == 0  # 10 pairs: last batch padded.


@pytest.mark.parametrize("task,label_dtype", [("mrpc", np.int32), ("stsb", np.float32)])
def test_glue_mock_gives_classification_batches(task, label_dtype):
  cfg = mock_cfg(f"glue/{task}")
  with tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE):
    batches = list(data.make_iterator(cfg, task="classification", split="validation", batch_size=4, seed=0))
  assert len(batches) == 2
  for b in batches:
    assert b["input_ids"].shape == b["token_type_ids"].shape == b["attention_mask"].shape == (4, 32)
    assert b["label"].shape == (4,) and b["label"].dtype == label_dtype
    ids, types, mask = b["input_ids"], b["token_type_ids"], b["attention_mask"]
    for row in range(4):
      n = mask[row].sum()
      if b["weights"][row] == 0:
        assert n == 0
        continue
      assert ids[row, 0] == 1 and (ids[row, n:] == 0).all() and (np.flatnonzero(ids[row] == 2).size == 2)
      first_sep = np.flatnonzero(ids[row] == 2)[0]
      assert (types[row, :first_sep + 1] == 0).all() and (types[row, first_sep + 1:n] == 1).all()
  assert batches[1]["weights"].tolist() == [1, 1, 0, 0]


def test_mnli_validation_means_matched():
  assert datasets.get_spec("glue/mnli").tfds_split("validation") == "validation_matched"
  cfg = mock_cfg("glue/mnli")
  with tfds.testing.mock_data(num_examples=3, policy=tfds.testing.MockPolicy.USE_CODE):
    b = next(data.make_iterator(cfg, task="classification", split="validation_mismatched",
                                batch_size=2, seed=0))
  assert b["label"].dtype == np.int32


# --------------------------------------------------------------------------------------
# enwik8 and errors.
# --------------------------------------------------------------------------------------


def test_enwik8_builder_splits_a_manual_zip(tmp_path):
  payload = bytes(np.random.default_rng(0).integers(0, 256, size=3000, dtype=np.uint8))
  manual = tmp_path / "manual"
  manual.mkdir()
  with zipfile.ZipFile(manual / enwik8.ZIP_NAME, "w") as z:
    z.writestr("enwik8", payload)
  config = enwik8.Enwik8Config(name="tiny", train_bytes=2000, validation_bytes=500, test_bytes=400,
                               chunk_bytes=300)
  builder = enwik8.Enwik8(data_dir=str(tmp_path / "tfds"), config=config, file_format="array_record")
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
  offsets = {"train": (0, 2000), "validation": (2000, 2500), "test": (2500, 2900)}
  for split, (lo, hi) in offsets.items():
    source = builder.as_data_source(split)
    chunks = sorted((int(source[i]["index"]), source[i]["text"]) for i in range(len(source)))
    assert b"".join(c for _, c in chunks) == payload[lo:hi]
    assert all(len(c) == 300 for _, c in chunks[:-1])


def test_enwik8_without_the_zip_says_where_to_put_it(tmp_path):
  builder = enwik8.Enwik8(data_dir=str(tmp_path / "tfds"), file_format="array_record")
  with pytest.raises(Exception, match="enwik8.zip"):
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(tmp_path)))
  cfg = mock_cfg("enwik8", data_dir=str(tmp_path / "tfds"))
  with pytest.raises(data.DatasetNotPreparedError, match="prepare dataset enwik8 .*--manual_dir"):
    data.make_iterator(cfg, task="lm", split="train", batch_size=2, seed=0)


@pytest.mark.parametrize("name", ["glue/mrpc", "wmt14_translate/de-en", "wikipedia"])
def test_missing_dataset_error_names_the_prepare_command(tmp_path, name):
  cfg = mock_cfg(name, data_dir=str(tmp_path))
  task = {"glue/mrpc": "classification", "wmt14_translate/de-en": "seq2seq", "wikipedia": "mlm"}[name]
  with pytest.raises(data.DatasetNotPreparedError) as e:
    data.make_iterator(cfg, task=task, split="train", batch_size=2, seed=0)
  assert f"python -m roformer_jax.training.data.prepare dataset {name} --data_dir {tmp_path}" in str(e.value)


def test_bad_configs_get_clear_errors(data_dir):
  with pytest.raises(ValueError, match="BookCorpus is not in TFDS"):
    data.get_spec("bookcorpus")
  with pytest.raises(ValueError, match="Unknown dataset 'c4'"):
    data.make_iterator(mock_cfg("c4"), task="lm", split="train", batch_size=2, seed=0)
  with pytest.raises(ValueError, match="task 'seq2seq' needs translation"):
    data.make_iterator(stdlib_cfg(data_dir), task="seq2seq", split="train", batch_size=2, seed=0)
  with pytest.raises(ValueError, match="task='vision'"):
    data.make_iterator(stdlib_cfg(data_dir), task="vision", split="train", batch_size=2, seed=0)
  with pytest.raises(ValueError, match="process_index=2"):
    data.make_iterator(stdlib_cfg(data_dir), task="lm", split="train", batch_size=2, seed=0,
                       process_index=2, process_count=2)


@pytest.mark.slow
def test_prepare_command_builds_the_stdlib_corpus(tmp_path):
  out = subprocess.run([sys.executable, "-m", "roformer_jax.training.data.prepare", "dataset", corpus.NAME,
                        "--data_dir", str(tmp_path)], capture_output=True, text=True, check=True,
                       timeout=120)
  assert "prepared python_stdlib_bytes" in out.stdout
  version = str(corpus.PythonStdlibBytes.VERSION)
  assert (tmp_path / corpus.NAME / corpus.stdlib_config().name / version / "dataset_info.json").exists()


@pytest.mark.parametrize("task", ["mlm", "lm"])
def test_rows_across_documents_carry_no_mask_in_training_and_mask_only_padding_in_evaluation(data_dir, task):
  # data.document_mask=False: a packed row is one sequence. Training batches (an endless
  # stream: rows always full) have no segment_ids at all, and positions 0..T-1; the tokens are
  # those of the default (document-masked) pipeline. A finite pass keeps 0/1 segment ids, so
  # that only its padding is masked, with positions running on across documents.
  masked = take(data.make_iterator(stdlib_cfg(data_dir), task=task, split="train", batch_size=4, seed=1), 12)
  cfg = stdlib_cfg(data_dir, document_mask=False)
  rows = take(data.make_iterator(cfg, task=task, split="train", batch_size=4, seed=1), 12)
  for a, b in zip(masked, rows, strict=True):
    assert "segment_ids" not in b and "segment_ids" in a
    np.testing.assert_array_equal(b["inputs"], a["inputs"])
    np.testing.assert_array_equal(b["positions"], np.broadcast_to(np.arange(T), b["inputs"].shape))
  # the default restarts positions in the rows that hold several documents' tails
  assert any((a["positions"] != b["positions"]).any() for a, b in zip(masked, rows, strict=True))
  assert tasks.tokens_in(rows[0], task) == 4 * T
  ev = list(data.make_iterator(cfg, task=task, split="validation", batch_size=4, seed=1))
  seg = np.concatenate([b["segment_ids"] for b in ev])
  assert set(np.unique(seg)) == {0, 1}  # the last rows are padded
  for row_seg, row_pos in zip(seg, np.concatenate([b["positions"] for b in ev]), strict=True):
    n = int(row_seg.sum())
    assert (row_seg[:n] == 1).all() and (row_pos[:n] == np.arange(n)).all()


def test_document_mask_is_checked_at_config_load(data_dir):
  loose = stdlib_cfg(data_dir).to_dict()  # a config built by hand, not typed by default_data_config
  loose["document_mask"] = "no"
  with pytest.raises(UserError, match="document_mask='no' must be True"):
    data.check_data(ml_collections.ConfigDict(loose), task="lm")
  with pytest.raises(UserError, match="task 'seq2seq' has none"):
    pipeline.document_mask(stdlib_cfg(data_dir, document_mask=False), "seq2seq")
  with pytest.raises(UserError, match="passkey_fraction=0.1"):
    pipeline.document_mask(stdlib_cfg(data_dir, document_mask=False, passkey_fraction=0.1), "lm")


@pytest.mark.parametrize("task", ["mlm", "lm"])
def test_samples_read_rows_without_segment_ids(data_dir, task):
  # The eval hooks read the validation split endlessly (repeat=True), so with
  # data.document_mask=False their batches carry no segment_ids either: samples must cope.
  from flax import nnx
  from roformer_jax import models
  cfg = stdlib_cfg(data_dir, document_mask=False)
  batch = next(data.make_iterator(cfg, task=task, split="validation", batch_size=2, seed=0, repeat=True))
  assert "segment_ids" not in batch
  tok = data.ByteTokenizer()
  model_cfg = models.ModelConfig(vocab_size=tok.vocab_size, d_model=16, num_layers=1, num_heads=2, d_ff=32)
  model = (models.CausalLM if task == "lm" else models.RoFormerForMaskedLM)(model_cfg, rngs=nnx.Rngs(0))
  out = tasks.get(task).samples(model, batch, tokenizer=tok, num=2, max_new_tokens=3)
  assert len(out) == 2 and all(row["prompt"] for row in out)


def test_preparing_a_download_without_network_fails_at_once_naming_the_cause(tmp_path, monkeypatch, capsys):
  """Issue 40: offline, TFDS retried each URL for minutes; the prepare command now fails at once, in one line."""
  import socket

  from roformer_jax.training.data import datasets, prepare

  calls = []

  def unreachable(address, timeout=None):
    calls.append(address)
    raise OSError("[Errno -2] Name or service not known")

  for name in datasets.PROXY_VARIABLES:
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setattr(socket, "create_connection", unreachable)
  assert prepare.main(["dataset", "glue/mrpc", "--data_dir", str(tmp_path)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("python -m roformer_jax.training.data.prepare: error: preparing "
                                             "'glue/mrpc' downloads it, and this machine cannot reach "
                                             "storage.googleapis.com:443"), err
  assert f"copy its glue/ directory into {tmp_path}" in err[0] and calls == [datasets.NETWORK_PROBE]
  # Behind a proxy, TFDS's requests go through it: nothing to probe.
  monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
  datasets.check_network(datasets.get_spec("glue/mrpc"), tmp_path)
  assert calls == [datasets.NETWORK_PROBE]
