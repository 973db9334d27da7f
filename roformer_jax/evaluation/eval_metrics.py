"""Task metrics of the paper's evaluations, as plain NumPy / Python functions.

- Machine translation (Sec. 4.1, WMT14 En-De): `bleu`, corpus BLEU by sacreBLEU on detokenized
  text (`decoding.translate` decodes seq2seq evaluation batches into the detokenized hypothesis
  and reference strings that `bleu` takes).
- GLUE (Sec. 4.3): `accuracy`, `f1`, `pearson`, `spearman` and `glue_metrics`, which gives the
  official metric set of a task.
- Language modelling (Sec. 4.4, enwik8): `bits_per_byte`, `bits_per_token`, `perplexity` from a
  summed loss in nats (`losses.cross_entropy` returns exactly such a sum).

Conventions: accuracy and F1 are fractions in [0, 1] and correlations lie in [-1, 1] (the
papers print them x100); BLEU is on sacreBLEU's 0-100 scale. Inputs may be Python lists, NumPy
or JAX arrays; every function returns Python floats. `bleu` imports sacreBLEU when called.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

LN2 = math.log(2.0)

# The official GLUE metric set of each task we train (Wang et al. 2019, Table 1; the GLUE
# leaderboard and the HF `glue` metric use the same sets).
GLUE_TASK_METRICS: dict[str, tuple[str, ...]] = {
    "mrpc": ("f1", "accuracy"),
    "qqp": ("f1", "accuracy"),
    "stsb": ("pearson", "spearman"),
    "sst2": ("accuracy",),
    "qnli": ("accuracy",),
    "mnli": ("accuracy",),  # one split per call: validation_matched (MNLI-m) or _mismatched (MNLI-mm)
    "mnli_matched": ("accuracy",),
    "mnli_mismatched": ("accuracy",),
}


# --------------------------------------------------------------------------------------
# Argument checks.
# --------------------------------------------------------------------------------------


def _vector(name: str, x, *, dtype=None) -> np.ndarray:
  x = np.asarray(x) if dtype is None else np.asarray(x, dtype)
  if x.ndim != 1:
    raise ValueError(f"{name} must be 1-D [N], got shape {x.shape}.")
  if x.size == 0:
    raise ValueError(f"{name} is empty: a metric needs at least one example.")
  return x


def _same_length(**arrays: np.ndarray) -> None:
  lengths = {k: len(v) for k, v in arrays.items()}
  if len(set(lengths.values())) > 1:
    raise ValueError(f"length mismatch: {lengths}.")


def _weights(weights, n: int) -> np.ndarray:
  if weights is None:
    return np.ones(n, np.float64)
  w = _vector("weights", weights, dtype=np.float64)
  if len(w) != n:
    raise ValueError(f"length mismatch: weights has {len(w)} entries, the predictions {n}.")
  if not np.all(np.isfinite(w)) or np.any(w < 0):
    raise ValueError("weights must be finite and >= 0.")
  if w.sum() <= 0:
    raise ValueError("weights are all 0: there is no example to score.")
  return w


def _class_ids(name: str, x) -> np.ndarray:
  x = _vector(name, x)
  if x.dtype == bool:
    x = x.astype(np.int64)
  if not np.issubdtype(x.dtype, np.integer):
    raise TypeError(f"{name} must be integer class ids, got dtype {x.dtype} "
                    "(take the argmax of logits first, or use glue_metrics, which does).")
  return x


# --------------------------------------------------------------------------------------
# Classification and regression metrics (GLUE).
# --------------------------------------------------------------------------------------


def accuracy(pred, labels, weights=None) -> float:
  """Weighted accuracy sum_i w_i [pred_i == label_i] / sum_i w_i.

  Args:
    pred, labels: int[N] class ids.
    weights: float[N] >= 0, e.g. the pipeline's per-example weights (0 on the rows that pad
      the last evaluation batch); None = all ones.
  """
  pred, labels = _class_ids("pred", pred), _class_ids("labels", labels)
  _same_length(pred=pred, labels=labels)
  w = _weights(weights, len(pred))
  return float(np.sum(w * (pred == labels)) / np.sum(w))


def f1(pred, labels, weights=None) -> float:
  """Binary F1 of the positive class 1: 2 TP / (2 TP + FP + FN), the harmonic mean of precision
  and recall (van Rijsbergen 1979; the GLUE metric of MRPC and QQP, Wang et al. 2019, and
  `sklearn.metrics.f1_score` with its default `pos_label=1`).

  Counts are weighted (TP = sum of w over true positives, ...). When there are no positives
  in either `pred` or `labels` the F1 is undefined; it is 0.0 then, as sklearn's default.

  Args:
    pred, labels: int[N] in {0, 1}.
    weights: float[N] >= 0; None = all ones.
  """
  pred, labels = _class_ids("pred", pred), _class_ids("labels", labels)
  _same_length(pred=pred, labels=labels)
  for name, x in (("pred", pred), ("labels", labels)):
    if not np.isin(x, (0, 1)).all():
      raise ValueError(f"binary F1 needs {name} in {{0, 1}}, got values {np.unique(x).tolist()}.")
  w = _weights(weights, len(pred))
  tp = np.sum(w * ((pred == 1) & (labels == 1)))
  fp = np.sum(w * ((pred == 1) & (labels == 0)))
  fn = np.sum(w * ((pred == 0) & (labels == 1)))
  denom = 2 * tp + fp + fn
  return float(2 * tp / denom) if denom > 0 else 0.0


def _floats(x, y) -> tuple[np.ndarray, np.ndarray]:
  x, y = _vector("x", x, dtype=np.float64), _vector("y", y, dtype=np.float64)
  _same_length(x=x, y=y)
  if len(x) < 2:
    raise ValueError("a correlation needs at least 2 examples.")
  if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
    raise ValueError("a correlation needs finite values (no NaN / inf).")
  return x, y


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
  xc, yc = x - x.mean(), y - y.mean()
  denom = math.sqrt(float(np.dot(xc, xc)) * float(np.dot(yc, yc)))
  if denom == 0.0:
    return float("nan")  # a constant input: undefined, as scipy (which also warns).
  return float(np.clip(np.dot(xc, yc) / denom, -1.0, 1.0))


def pearson(x, y) -> float:
  """Pearson's product-moment correlation r = cov(x, y) / (std(x) std(y)) (the STS-B metric,
  Wang et al. 2019; equals `scipy.stats.pearsonr(x, y).statistic`). NaN when x or y is constant.

  Args:
    x, y: float[N], N >= 2, finite.
  """
  return _pearson(*_floats(x, y))


def rankdata(x) -> np.ndarray:
  """Ranks 1..N of float[N], ties sharing the average of the ranks they span (the "average"
  method of `scipy.stats.rankdata`, the default that Spearman's rho uses)."""
  x = _vector("x", x)
  order = np.argsort(x, kind="stable")
  xs = x[order]
  # Group boundaries in the sorted order: each group of equal values [start, end).
  starts = np.flatnonzero(np.concatenate([[True], xs[1:] != xs[:-1]]))
  ends = np.append(starts[1:], len(xs))
  group_rank = (starts + 1 + ends) / 2.0  # mean of the 1-based ranks start+1 .. end
  ranks = np.empty(len(x), np.float64)
  ranks[order] = np.repeat(group_rank, ends - starts)
  return ranks


def spearman(x, y) -> float:
  """Spearman's rank correlation rho: Pearson's r of the ranks, ties given their average rank
  (Spearman 1904; the STS-B metric, Wang et al. 2019; equals
  `scipy.stats.spearmanr(x, y).statistic`). NaN when x or y is constant.

  Args:
    x, y: float[N], N >= 2, finite.
  """
  x, y = _floats(x, y)
  return _pearson(rankdata(x), rankdata(y))


def _glue_task(task: str) -> str:
  name = task.lower().removeprefix("glue/").replace("-", "_")
  if name not in GLUE_TASK_METRICS:
    raise ValueError(f"unknown GLUE task {task!r}; expected one of {sorted(GLUE_TASK_METRICS)} "
                     "(optionally as glue/<task>).")
  return name


def glue_metrics(task: str, predictions, labels, weights=None) -> dict[str, float]:
  """The official GLUE metric set of `task` (Wang et al. 2019, Table 1), as {name: value}.

  - mrpc, qqp: {"f1", "accuracy"} (F1 of the positive class 1: paraphrase / duplicate).
  - stsb: {"pearson", "spearman"} of float scores (a regression; labels in [0, 5]).
  - sst2, qnli, mnli: {"accuracy"}. MNLI's matched (MNLI-m) and mismatched (MNLI-mm)
    validation sets are separate splits: call once per split with that split's predictions
    and report the two separately; "mnli_matched" / "mnli_mismatched" are accepted as names
    of the same metric.

  Args:
    task: a GLUE task name, bare or as the dataset name "glue/<task>".
    predictions: classification tasks: int[N] class ids, or float[N, C] logits/probabilities
      (the argmax is taken). stsb: float[N] (or [N, 1]) predicted scores.
    labels: int[N] class ids; for stsb float[N] gold scores.
    weights: float[N] >= 0 (None = all ones), e.g. the pipeline's per-example weights, 0 on
      the rows that pad the last evaluation batch. Accuracy and F1 weight each example's
      counts; the correlations have no weighted form, so for stsb the weights must be 0/1 and
      select the rows to keep.

  Returns:
    {metric: float}, keys as listed above.
  """
  name = _glue_task(task)
  predictions, labels = np.asarray(predictions), np.asarray(labels)
  if name == "stsb":
    if predictions.ndim == 2 and predictions.shape[1] == 1:
      predictions = predictions[:, 0]
    predictions = _vector("predictions", predictions, dtype=np.float64)
    labels = _vector("labels", labels, dtype=np.float64)
    _same_length(predictions=predictions, labels=labels)
    w = _weights(weights, len(predictions))
    if not np.isin(w, (0.0, 1.0)).all():
      raise ValueError("stsb: weights must be 0/1 (a row mask); correlations have no weighted form.")
    keep = w > 0
    return {"pearson": pearson(predictions[keep], labels[keep]),
            "spearman": spearman(predictions[keep], labels[keep])}
  if predictions.ndim == 2:
    predictions = np.argmax(predictions, axis=-1)
  out = {}
  for metric in GLUE_TASK_METRICS[name]:
    fn = f1 if metric == "f1" else accuracy
    out[metric] = fn(predictions, labels, weights)
  return out


# --------------------------------------------------------------------------------------
# Language modelling.
# --------------------------------------------------------------------------------------


def _nats_and_count(nats_sum, count, what: str) -> tuple[float, float]:
  nats, n = float(np.asarray(nats_sum)), float(np.asarray(count))
  if not math.isfinite(nats) or nats < 0:
    raise ValueError(f"nats_sum={nats} must be a finite loss sum >= 0.")
  if not math.isfinite(n) or n <= 0:
    raise ValueError(f"{what}={n} must be > 0.")
  return nats, n


def bits_per_byte(nats_sum, num_bytes) -> float:
  """Bits per byte: nats_sum / (num_bytes * ln 2).

  The enwik8 metric (Hutter Prize; Sec. 4.4 trains on enwik8, where "bits per character"
  (bpc) means bits per byte, as its characters are bytes). `nats_sum` is the summed
  cross-entropy (natural log) of predicting the text, e.g. the first value of
  `losses.cross_entropy` added over the evaluation set; `num_bytes` is the length of that
  text in UTF-8 bytes. With a subword tokenizer it is the byte length of the text the
  predicted tokens cover, which makes models with different vocabularies comparable.
  """
  nats, n = _nats_and_count(nats_sum, num_bytes, "num_bytes")
  return nats / (n * LN2)


def bits_per_token(nats_sum, num_tokens) -> float:
  """Bits per predicted token: nats_sum / (num_tokens * ln 2) (the mean loss over ln 2).

  With the `ByteTokenizer` every non-special token is one byte, so this equals
  `bits_per_byte` exactly when no special token is counted among the targets: true for
  enwik8 (its spec has add_bos_eos=False), not for a corpus whose documents are wrapped in
  BOS ... EOS (the EOS targets add tokens without bytes). `num_tokens` is the weight sum of
  `losses.cross_entropy`.
  """
  nats, n = _nats_and_count(nats_sum, num_tokens, "num_tokens")
  return nats / (n * LN2)


def perplexity(nats_sum, num_tokens) -> float:
  """Per-token perplexity exp(nats_sum / num_tokens) (inf when it overflows float64)."""
  nats, n = _nats_and_count(nats_sum, num_tokens, "num_tokens")
  mean = nats / n
  return math.exp(mean) if mean < 709.0 else float("inf")


# --------------------------------------------------------------------------------------
# Machine translation.
# --------------------------------------------------------------------------------------


def _strings(name: str, x) -> list[str]:
  if isinstance(x, (str, bytes)) or not isinstance(x, Sequence):
    raise TypeError(f"{name} must be a list of strings (one per sentence), got {type(x).__name__}.")
  if not all(isinstance(s, str) for s in x):
    bad = next(type(s).__name__ for s in x if not isinstance(s, str))
    raise TypeError(f"{name} must hold str, found {bad}.")
  return list(x)


def bleu(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]], *,
         tokenize: str = "13a", lowercase: bool = False) -> dict[str, Any]:
  """Corpus BLEU (Papineni et al. 2002) by sacreBLEU (Post 2018), on DETOKENIZED text.

  The same computation as `sacrebleu.corpus_bleu(hypotheses, references)`: sacreBLEU's own
  tokenization (default "13a", the WMT standard mteval-v13a) is applied to both sides, so
  pass plain detokenized sentences, not subword pieces or pre-tokenized text; the score is
  then comparable across papers (Sec. 4.1 reports BLEU on WMT14 En-De).

  Args:
    hypotheses: N system outputs, one string per sentence.
    references: one reference set, N strings (references[i] translates hypotheses[i]), or
      several reference sets in sacreBLEU's layout: a list of R lists of N strings each
      (references[r][i] is the r-th reference of sentence i).
    tokenize, lowercase: sacreBLEU's options (they appear in the signature).

  Returns:
    {"score": BLEU in [0, 100], "signature": sacreBLEU's signature string (e.g.
     "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"), "precisions": the four
     modified n-gram precisions in percent, "bp": brevity penalty, "ratio": hyp_len / ref_len,
     "hyp_len", "ref_len": corpus lengths in tokens, "nrefs": R}.
  """
  try:
    from sacrebleu.metrics import BLEU  # pylint: disable=g-import-not-at-top
  except ImportError as e:  # pragma: no cover
    raise ImportError("bleu() needs sacrebleu: pip install -r requirements.txt") from e

  hyps = _strings("hypotheses", hypotheses)
  if not hyps:
    raise ValueError("hypotheses is empty: BLEU needs at least one sentence.")
  if isinstance(references, (str, bytes)) or not isinstance(references, Sequence) or not references:
    raise TypeError("references must be a non-empty list of strings, or a list of reference sets "
                    f"(lists of strings), got {type(references).__name__}.")
  ref_sets: list[list[str]]
  if all(isinstance(r, str) for r in references):
    ref_sets = [list(cast(Sequence[str], references))]
  else:
    ref_sets = [_strings(f"references[{r}]", refs) for r, refs in enumerate(references)]
  for r, refs in enumerate(ref_sets):
    if len(refs) != len(hyps):
      raise ValueError(f"length mismatch: {len(hyps)} hypotheses but reference set {r} has "
                       f"{len(refs)} sentences.")
  metric = BLEU(tokenize=tokenize, lowercase=lowercase)
  result = metric.corpus_score(hyps, ref_sets)
  return {"score": float(result.score), "signature": str(metric.get_signature()),
          "precisions": [float(p) for p in result.precisions], "bp": float(result.bp),
          "ratio": float(result.ratio), "hyp_len": int(result.sys_len),
          "ref_len": int(result.ref_len), "nrefs": len(ref_sets)}


__all__ = [
    "GLUE_TASK_METRICS", "accuracy", "bits_per_byte", "bits_per_token", "bleu", "f1", "glue_metrics",
    "pearson", "perplexity", "rankdata", "spearman",
]
