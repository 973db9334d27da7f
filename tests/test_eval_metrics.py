"""roformer_jax.evaluation.eval_metrics against hand-computed cases, sacreBLEU's documented example and
scipy; `translate` on a tiny untrained TransformerSeq2Seq with the byte tokenizer."""

import functools
import math

import numpy as np
import pytest
import scipy.stats
from flax import nnx

from roformer_jax import decoding, losses
from roformer_jax.evaluation import eval_metrics as em
from roformer_jax.training.data.tokenizers import ByteTokenizer
from roformer_jax.models import ModelConfig, TransformerSeq2Seq

# ---- BLEU --------------------------------------------------------------------------------

# The example of sacreBLEU's README (https://github.com/mjpost/sacrebleu#using-sacrebleu-from-python):
# two reference sets, "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17
# ref_len = 18)".
README_REFS = [["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
               ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."]]
README_SYS = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]


def test_bleu_sacrebleu_readme_example():
  out = em.bleu(README_SYS, README_REFS)
  assert round(out["score"], 2) == 48.53
  np.testing.assert_allclose(out["precisions"], [100 * 14 / 17, 100 * 7 / 14, 100 * 5 / 11, 100 * 3 / 8])
  assert out["bp"] == pytest.approx(math.exp(1 - 18 / 17))  # hyp_len 17 < ref_len 18
  assert (out["hyp_len"], out["ref_len"], out["nrefs"]) == (17, 18, 2)
  assert out["ratio"] == pytest.approx(17 / 18)
  # The score is the geometric mean of the precisions times BP (Papineni et al. 2002).
  geo = math.exp(sum(math.log(p / 100) for p in out["precisions"]) / 4)
  assert out["score"] == pytest.approx(100 * out["bp"] * geo)
  sig = out["signature"]
  assert sig.startswith("nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:"), sig


def test_bleu_single_reference_set_as_list_of_str():
  import sacrebleu
  one = em.bleu(README_SYS, README_REFS[0])
  assert one == em.bleu(README_SYS, [README_REFS[0]])
  assert one["score"] == pytest.approx(sacrebleu.corpus_bleu(README_SYS, [README_REFS[0]]).score)
  assert one["signature"].startswith("nrefs:1|")
  # Identical text scores 100; 13a tokenization splits punctuation, so "man." == "man ."
  assert em.bleu(README_REFS[0], README_REFS[0])["score"] == pytest.approx(100.0)
  assert em.bleu(["The dog bit the man ."], ["The dog bit the man."])["score"] == pytest.approx(100.0)


def test_bleu_errors():
  with pytest.raises(ValueError, match="length mismatch"):
    em.bleu(README_SYS, README_REFS[0][:2])
  with pytest.raises(ValueError, match="length mismatch"):
    em.bleu(README_SYS, [README_REFS[0], README_REFS[1][:2]])
  with pytest.raises(TypeError):
    em.bleu("The dog bit the man.", README_REFS[0])  # a string, not a list of sentences
  with pytest.raises(TypeError):
    em.bleu(README_SYS, [README_REFS[0], "x"])
  with pytest.raises(ValueError, match="empty"):
    em.bleu([], [])


# ---- accuracy / F1 -----------------------------------------------------------------------


def test_accuracy_f1_hand_computed():
  pred = [1, 1, 0, 0, 1, 0, 1, 1]
  labels = [1, 0, 0, 1, 1, 0, 0, 1]
  # TP = 3 (0, 4, 7), FP = 2 (1, 6), FN = 1 (3), TN = 2 (2, 5).
  assert em.accuracy(pred, labels) == pytest.approx(5 / 8)
  assert em.f1(pred, labels) == pytest.approx(2 * 3 / (2 * 3 + 2 + 1))  # P = 3/5, R = 3/4 -> 2/3
  # Weights: dropping rows 1 and 3 (a FP and a FN) -> TP 3, FP 1, FN 0.
  w = [1, 0, 1, 0, 1, 1, 1, 1]
  assert em.accuracy(pred, labels, w) == pytest.approx(5 / 6)
  assert em.f1(pred, labels, np.asarray(w, np.float32)) == pytest.approx(6 / 7)
  # Non-integer weights scale the counts.
  assert em.accuracy([1, 0], [1, 1], [3.0, 1.0]) == pytest.approx(0.75)
  # No positives anywhere: F1 undefined -> 0 (sklearn's default); multiclass accuracy works.
  assert em.f1([0, 0], [0, 0]) == 0.0
  assert em.accuracy(np.array([2, 1, 0]), np.array([2, 0, 0])) == pytest.approx(2 / 3)


def test_accuracy_f1_errors():
  with pytest.raises(ValueError, match="length mismatch"):
    em.accuracy([1, 0, 1], [1, 0])
  with pytest.raises(ValueError, match="length mismatch"):
    em.f1([1, 0], [1, 0], weights=[1.0])
  with pytest.raises(ValueError, match="binary"):
    em.f1([2, 0], [1, 0])
  with pytest.raises(TypeError, match="integer"):
    em.accuracy([0.9, 0.1], [1, 0])
  with pytest.raises(ValueError, match="all 0"):
    em.accuracy([1, 0], [1, 0], [0, 0])
  with pytest.raises(ValueError, match=">= 0"):
    em.accuracy([1, 0], [1, 0], [1, -1])
  with pytest.raises(ValueError, match="empty"):
    em.accuracy([], [])


# ---- correlations ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_spearman_pearson_match_scipy_with_ties(seed):
  rng = np.random.default_rng(seed)
  n = int(rng.integers(2, 60))
  if seed % 2:  # heavy ties: integer scores on a small range (like STS-B's 0-5 gold scores)
    x, y = rng.integers(0, 4, n).astype(float), rng.integers(0, 6, n) / 5.0
  else:  # continuous predictions against tied gold scores
    x, y = rng.normal(size=n), np.round(rng.uniform(0, 5, n) * 2) / 2
  if np.ptp(x) == 0 or np.ptp(y) == 0:
    x[0], y[0] = x[0] + 1.0, y[0] + 1.0
  np.testing.assert_allclose(em.spearman(x, y), scipy.stats.spearmanr(x, y).statistic, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(em.pearson(x, y), scipy.stats.pearsonr(x, y).statistic, rtol=1e-12, atol=1e-12)
  np.testing.assert_array_equal(em.rankdata(x), scipy.stats.rankdata(x))


def test_correlations_hand_computed():
  assert em.rankdata([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]
  assert em.spearman([1, 2, 3, 4], [1, 4, 9, 16]) == pytest.approx(1.0)  # monotone, not linear
  assert em.pearson([1, 2, 3, 4], [1, 4, 9, 16]) < 1.0
  assert em.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
  assert math.isnan(em.spearman([1, 1, 1], [1, 2, 3]))  # constant input: undefined, as scipy


def test_correlation_errors():
  with pytest.raises(ValueError, match="length mismatch"):
    em.spearman([1, 2, 3], [1, 2])
  with pytest.raises(ValueError, match="length mismatch"):
    em.pearson([1, 2, 3], [1, 2])
  with pytest.raises(ValueError, match="at least 2"):
    em.pearson([1.0], [2.0])
  with pytest.raises(ValueError, match="finite"):
    em.spearman([1.0, np.nan], [1.0, 2.0])


# ---- glue_metrics ------------------------------------------------------------------------


@pytest.mark.parametrize("task,keys", [
    ("mrpc", {"f1", "accuracy"}), ("qqp", {"f1", "accuracy"}), ("glue/mrpc", {"f1", "accuracy"}),
    ("stsb", {"pearson", "spearman"}), ("sst2", {"accuracy"}), ("qnli", {"accuracy"}),
    ("mnli", {"accuracy"}), ("mnli_matched", {"accuracy"}), ("mnli-mismatched", {"accuracy"}),
])
def test_glue_metrics_keys(task, keys):
  rng = np.random.default_rng(0)
  n = 20
  if "stsb" in task:
    preds, labels = rng.uniform(0, 5, n), rng.uniform(0, 5, n)
  else:
    c = 3 if "mnli" in task else 2
    preds, labels = rng.integers(0, c, n), rng.integers(0, c, n)
  out = em.glue_metrics(task, preds, labels)
  assert set(out) == keys
  assert all(isinstance(v, float) for v in out.values())


def test_glue_metrics_values_logits_and_padding_rows():
  pred = np.array([1, 1, 0, 0, 1, 0, 1, 1])
  labels = np.array([1, 0, 0, 1, 1, 0, 0, 1])
  logits = np.eye(2)[pred] * 3.0 - 1.0  # argmax = pred
  out = em.glue_metrics("mrpc", logits, labels)
  assert out == pytest.approx({"f1": 2 / 3, "accuracy": 5 / 8})
  # Zero-weight rows (the padding of the last eval batch) do not count.
  padded = np.concatenate([pred, [1, 1]]), np.concatenate([labels, [0, 0]])
  w = np.concatenate([np.ones(8), np.zeros(2)]).astype(np.float32)
  assert em.glue_metrics("qqp", *padded, weights=w) == pytest.approx(out)
  mnli = em.glue_metrics("mnli", np.eye(3)[[0, 1, 2, 2]], [0, 1, 1, 2])
  assert mnli == {"accuracy": pytest.approx(0.75)}
  # stsb: [N, 1] regression outputs; 0/1 weights select rows.
  rng = np.random.default_rng(1)
  x, y = rng.uniform(0, 5, 12), rng.uniform(0, 5, 12)
  st = em.glue_metrics("stsb", np.concatenate([x, [9.0, -9.0]])[:, None], np.concatenate([y, [0.0, 5.0]]),
                       weights=np.r_[np.ones(12), 0, 0])
  assert st["pearson"] == pytest.approx(scipy.stats.pearsonr(x, y).statistic)
  assert st["spearman"] == pytest.approx(scipy.stats.spearmanr(x, y).statistic)


def test_glue_metrics_errors():
  with pytest.raises(ValueError, match="unknown GLUE task"):
    em.glue_metrics("cola_typo", [1], [1])
  with pytest.raises(ValueError, match="length mismatch"):
    em.glue_metrics("sst2", [1, 0, 1], [1, 0])
  with pytest.raises(ValueError, match="length mismatch"):
    em.glue_metrics("stsb", [1.0, 2.0, 3.0], [1.0, 2.0])
  with pytest.raises(ValueError, match="0/1"):
    em.glue_metrics("stsb", [1.0, 2.0, 3.0], [1.0, 2.0, 2.5], weights=[1.0, 0.5, 1.0])


# ---- language modelling --------------------------------------------------------------------


def test_bits_per_byte_closed_form():
  assert em.bits_per_byte(100 * math.log(2) * 1.25, 100) == pytest.approx(1.25)
  assert em.bits_per_token(np.float32(3 * math.log(2)), 3) == pytest.approx(1.0, rel=1e-6)
  assert em.perplexity(10 * math.log(7), 10) == pytest.approx(7.0)
  # A uniform model over the 256 byte values costs exactly 8 bits per byte; with the byte
  # tokenizer (no special targets) bits per token is the same number.
  t = 37
  targets = np.random.default_rng(0).integers(0, 256, (2, t))
  nats, count = losses.cross_entropy(np.zeros((2, t, 256), np.float32), targets)
  assert em.bits_per_byte(nats, 2 * t) == pytest.approx(8.0, rel=1e-6)
  assert em.bits_per_token(nats, count) == pytest.approx(8.0, rel=1e-6)
  assert em.perplexity(nats, count) == pytest.approx(256.0, rel=1e-5)


def test_bits_per_byte_errors():
  with pytest.raises(ValueError, match="num_bytes"):
    em.bits_per_byte(1.0, 0)
  with pytest.raises(ValueError, match="nats_sum"):
    em.bits_per_token(float("nan"), 3)
  with pytest.raises(ValueError, match="nats_sum"):
    em.bits_per_byte(-1.0, 3)


# ---- translate -----------------------------------------------------------------------------

TOK = ByteTokenizer()
S, U, MAX_LEN = 12, 10, 6
PAIRS = [("ab", "xy"), ("hello", "hallo"), ("dog", "Hund"), ("é!", "ü?")]


@functools.cache
def tiny_s2s() -> TransformerSeq2Seq:
  cfg = ModelConfig(vocab_size=TOK.vocab_size, d_model=32, num_layers=1, num_heads=4, d_ff=64, dropout=0.0,
                    attention_dropout=0.0, type_vocab_size=0, init_std=1.0, embed_init_std=1.0)
  return TransformerSeq2Seq(cfg, rngs=nnx.Rngs(0))


def _row(ids, length):
  out = np.zeros(length, np.int32)
  out[:len(ids)] = ids
  return out


def seq2seq_batches(batch_size=3):
  """The pipeline's "seq2seq" layout; the last batch is padded with all-zero, zero-weight rows."""
  batches = []
  for i in range(0, len(PAIRS), batch_size):
    rows = PAIRS[i:i + batch_size]
    src = [_row(np.append(TOK.encode_array(s), TOK.eos_id), S) for s, _ in rows]
    tgt = [_row(np.append(TOK.encode_array(t), TOK.eos_id), U) for _, t in rows]
    src += [np.zeros(S, np.int32)] * (batch_size - len(rows))
    tgt += [np.zeros(U, np.int32)] * (batch_size - len(rows))
    src, tgt = np.stack(src), np.stack(tgt)
    batches.append({"src": src, "src_segment_ids": (src != 0).astype(np.int32), "tgt_out": tgt,
                    "weights": (tgt != 0).astype(np.float32)})
  return batches


def test_strip_ids():
  ids = dict(bos_id=1, eos_id=2, pad_id=0)
  assert decoding.strip_ids([1, 7, 8, 2, 9, 0], **ids).tolist() == [7, 8]
  assert decoding.strip_ids([7, 0, 8, 0], **ids).tolist() == [7, 8]
  assert decoding.strip_ids([2, 7], **ids).tolist() == []


def test_translate_greedy_and_beam_on_tiny_model():
  model, batches = tiny_s2s(), seq2seq_batches()
  seen = []
  hyps, refs = decoding.translate(model, batches, TOK, beam_size=1, max_len=MAX_LEN, progress=seen.append)
  assert refs == [t for _, t in PAIRS]  # EOS and padding stripped, UTF-8 decoded
  assert seen == [3, 1] and len(hyps) == len(PAIRS)  # the two padding rows are skipped
  # beam 1 is greedy decoding, row by row.
  expect = []
  for b in batches:
    out = np.asarray(decoding.greedy_translate(model, b["src"][:1], max_len=MAX_LEN, bos_id=1, eos_id=2, pad_id=0))
    expect.append(TOK.decode(decoding.strip_ids(out[0], bos_id=1, eos_id=2, pad_id=0)))
  assert [hyps[0], hyps[3]] == expect
  # ... and beam search with one beam and alpha 0 finds the same text.
  for b, start in zip(batches, (0, 3), strict=True):
    out, _ = decoding.beam_search(model, b["src"], beam_size=1, alpha=0.0, max_len=MAX_LEN, bos_id=1,
                                  eos_id=2, pad_id=0)
    assert TOK.decode(decoding.strip_ids(np.asarray(out)[0, 0], bos_id=1, eos_id=2, pad_id=0)) == hyps[start]
  assert len(set(hyps)) > 1 and all(hyps)  # the untrained model's outputs are not all alike / empty
  # Beam 4: the best of the K hypotheses of decoding.beam_search, one string per real row.
  hyps4, refs4 = decoding.translate(model, batches, TOK, beam_size=4, alpha=0.6, max_len=MAX_LEN)
  assert refs4 == refs and len(hyps4) == len(PAIRS) and all(isinstance(h, str) for h in hyps4)
  out, scores = decoding.beam_search(model, batches[0]["src"], beam_size=4, alpha=0.6, max_len=MAX_LEN,
                                     bos_id=1, eos_id=2, pad_id=0)
  assert np.all(np.diff(np.asarray(scores), axis=1) <= 0)  # best first
  assert hyps4[:3] == [TOK.decode(decoding.strip_ids(r, bos_id=1, eos_id=2, pad_id=0)) for r in np.asarray(out)[:, 0]]


def test_translate_strips_bos_eos_pad(monkeypatch):
  """With a stub decoder the output rows are known: everything after EOS goes, BOS/pad drop."""
  h, i, x = (TOK.encode("h")[0], TOK.encode("i")[0], TOK.encode("x")[0])
  rows = np.array([[h, i, 2, x, 0, 0], [1, h, 0, i, 2, 0], [x, x, x, x, x, x]], np.int32)
  calls = []

  def fake_greedy(model, src, *, src_mask, max_len, bos_id, eos_id, pad_id):
    calls.append((src.copy(), src_mask.copy()))
    return rows[:len(src)]

  def fake_beam(model, src, *, src_mask, beam_size, alpha, max_len, bos_id, eos_id, pad_id):
    worse = np.full_like(rows[:len(src)], x)
    return np.stack([rows[:len(src)]] + [worse] * (beam_size - 1), axis=1), np.zeros((len(src), beam_size))

  monkeypatch.setattr(decoding, "greedy_translate", fake_greedy)
  monkeypatch.setattr(decoding, "beam_search", fake_beam)
  batches = seq2seq_batches(batch_size=3)
  hyps, _ = decoding.translate(None, batches, TOK, beam_size=1, max_len=6)
  assert hyps == ["hi", "hi", "xxxxxx", "hi"]
  hyps4, _ = decoding.translate(None, batches, TOK, beam_size=4, max_len=6)
  assert hyps4 == hyps
  # The padding rows of the last batch get a one-token (EOS) source; the batch keeps its shape.
  src, mask = calls[1]
  assert src.shape == (3, S) and src[1:, 0].tolist() == [2, 2] and mask[1:].sum() == 2
  assert mask[0].sum() == len(PAIRS[3][0].encode()) + 1


def test_translate_errors():
  with pytest.raises(ValueError, match="beam_size"):
    decoding.translate(None, [], TOK, beam_size=0, max_len=4)
  with pytest.raises(KeyError, match="tgt_out"):
    decoding.translate(None, [{"src": np.ones((1, 3)), "weights": np.ones((1, 3))}], TOK, max_len=4)
  assert decoding.translate(None, [], TOK, max_len=4) == ([], [])
