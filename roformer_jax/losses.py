"""Losses and metrics as pure, jit-friendly functions; float32 math whatever the logits' dtype.

Shapes: B batch, T length (or M masked positions), V vocabulary, C classes.

Every loss returns `(loss_sum, weight_sum)`, both float32 scalars, not a mean: the trainer
adds them over micro-batches (gradient accumulation) and over the global batch, then divides
once, so every real token (or example) counts the same however the batch was split.
`weights` (default all ones) marks what counts: 0 at padding, 1 at real tokens, or any
non-negative per-token weight. Where a weight is 0 the target is never read, so padding may
carry any id (e.g. -100); elsewhere targets must lie in [0, V).

Label smoothing (Szegedy et al. 2016; Vaswani et al. 2017 Sec. 5.4; Sec. 4.1 uses 0.1):
the target distribution is q = (1 - eps) * onehot(target) + eps / V, as in `optax.smooth_labels`,
and the loss is the cross-entropy H(q, p) = (1 - eps) * NLL + eps * mean_v(-log p_v), which is
KL(q || p) + H(q): its minimum is the entropy H(q) > 0, not 0. fairseq's
`label_smoothed_cross_entropy` instead puts eps / (V - 1) on each non-target class (and 1 - eps
on the target); that is this loss with eps' = eps * V / (V - 1) (for V = 37k, a 0.003% change).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _check(logits, targets, weights, what: str = "targets"):
  logits, targets = jnp.asarray(logits), jnp.asarray(targets)
  if not jnp.issubdtype(targets.dtype, jnp.integer):
    raise TypeError(f"{what} must be integer class ids, got dtype {targets.dtype}.")
  if logits.shape[:-1] != targets.shape:
    raise ValueError(f"logits {logits.shape} must be {what} {targets.shape} + (V,).")
  if weights is None:
    weights = jnp.ones(targets.shape, jnp.float32)
  else:
    weights = jnp.asarray(weights)
    if weights.shape != targets.shape:
      raise ValueError(f"weights {weights.shape} must have the shape of {what} {targets.shape}.")
    weights = weights.astype(jnp.float32)
  return logits.astype(jnp.float32), targets, weights


def _weighted_sum(values, weights):
  # jnp.where, not a product: a NaN/inf at a weight-0 position (an out-of-range pad id) stays out.
  return jnp.sum(jnp.where(weights > 0, values * weights, 0.0)), jnp.sum(weights)


def token_cross_entropy(logits, targets, *, label_smoothing: float = 0.0) -> jax.Array:
  """Per-position cross-entropy float32[...] of logits [..., V] against targets int[...].

  H(q, p) with q = (1 - eps) * onehot + eps / V (module docstring); eps = 0 is the plain
  negative log-likelihood -log softmax(logits)[target].
  """
  if not 0.0 <= label_smoothing < 1.0:
    raise ValueError(f"label_smoothing={label_smoothing} must be in [0, 1).")
  logits, targets, _ = _check(logits, targets, None)
  lse = jax.nn.logsumexp(logits, axis=-1)
  safe = jnp.clip(targets, 0, logits.shape[-1] - 1)  # pads may be out of range; masked later
  nll = lse - jnp.take_along_axis(logits, safe[..., None], axis=-1)[..., 0]
  if label_smoothing == 0.0:
    return nll
  smooth = lse - jnp.mean(logits, axis=-1)  # mean_v(-log p_v)
  return (1.0 - label_smoothing) * nll + label_smoothing * smooth


def cross_entropy(logits, targets, *, weights=None, label_smoothing: float = 0.0):
  """Summed (label-smoothed) cross-entropy.

  Args:
    logits: float[..., V], any float dtype (computed in float32).
    targets: int[...] class ids.
    weights: float[...] or bool[...], shape of targets; None = all ones.
    label_smoothing: eps in [0, 1); see the module docstring for the convention.

  Returns:
    (loss_sum, weight_sum): float32 scalars; loss_sum / weight_sum is the mean.
  """
  logits, targets, weights = _check(logits, targets, weights)
  return _weighted_sum(token_cross_entropy(logits, targets, label_smoothing=label_smoothing), weights)


def mean_cross_entropy(logits, targets, *, weights=None, label_smoothing: float = 0.0) -> jax.Array:
  """cross_entropy's loss_sum / weight_sum (0 when every weight is 0), float32 scalar."""
  loss_sum, weight_sum = cross_entropy(logits, targets, weights=weights, label_smoothing=label_smoothing)
  return safe_mean(loss_sum, weight_sum)


def safe_mean(total, count) -> jax.Array:
  """total / count, and 0 (not NaN) when count is 0 (e.g. a batch of padding)."""
  return jnp.where(count > 0, total / jnp.where(count > 0, count, 1.0), 0.0)


def weighted_accuracy(logits, targets, weights=None):
  """(correct_sum, weight_sum): weighted count of argmax(logits) == targets (ties: lowest id).

  Args:
    logits: float[..., V]; targets: int[...]; weights: shape of targets, None = all ones.
  """
  logits, targets, weights = _check(logits, targets, weights)
  correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
  return _weighted_sum(correct, weights)


def mlm_loss(logits, targets, weights):
  """Masked-LM loss (Sec. 4.2): summed NLL over the masked positions.

  Args:
    logits: float[B, T, V] (or [B, M, V] scored at the masked positions only).
    targets: int[B, T] (or [B, M]) original token ids.
    weights: [B, T] (or [B, M]): 1 at the positions to predict, 0 elsewhere and at padding.

  Returns:
    (loss_sum, weight_sum): float32 scalars.
  """
  return cross_entropy(logits, targets, weights=weights)


def classification_loss(logits, labels, *, weights=None, label_smoothing: float = 0.0):
  """Sequence-classification loss (GLUE, Sec. 4.3): summed cross-entropy over examples.

  Args:
    logits: float[B, C]; labels: int[B]; weights: [B] (0 = padding example), None = all ones.

  Returns:
    (loss_sum, weight_sum): float32 scalars.
  """
  if jnp.ndim(logits) != 2:
    raise ValueError(f"classification logits must be [B, C], got shape {jnp.shape(logits)}.")
  return cross_entropy(logits, labels, weights=weights, label_smoothing=label_smoothing)


def regression_loss(scores, labels, *, weights=None):
  """Squared-error loss for STS-B (HF MSELoss for num_labels = 1), summed over examples.

  Args:
    scores: float[B, 1] (the classifier with num_labels=1) or float[B].
    labels: float[B] targets.
    weights: [B] (0 = padding example), None = all ones.

  Returns:
    (sse_sum, weight_sum): float32 scalars; their ratio is the MSE.
  """
  scores, labels = jnp.asarray(scores), jnp.asarray(labels)
  if scores.ndim == 2 and scores.shape[-1] == 1:
    scores = scores[:, 0]
  if scores.ndim != 1 or scores.shape != labels.shape:
    raise ValueError(f"regression scores {jnp.shape(scores)} must be [B, 1] or [B] with labels [B], "
                     f"got labels {labels.shape}.")
  if weights is None:
    weights = jnp.ones(labels.shape, jnp.float32)
  elif jnp.shape(weights) != labels.shape:
    raise ValueError(f"weights {jnp.shape(weights)} must have the shape of labels {labels.shape}.")
  err = scores.astype(jnp.float32) - labels.astype(jnp.float32)
  return _weighted_sum(err * err, jnp.asarray(weights).astype(jnp.float32))
