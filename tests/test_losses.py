"""Losses against float64 NumPy closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from roformer_jax import losses


def _log_softmax64(x):
  x = np.asarray(x, np.float64)
  m = x.max(-1, keepdims=True)
  return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def _problem(shape=(3, 5), v=11, seed=0, scale=3.0):
  rng = np.random.default_rng(seed)
  logits = (rng.normal(size=shape + (v,)) * scale).astype(np.float32)
  targets = rng.integers(0, v, size=shape).astype(np.int32)
  return logits, targets


def _smoothed_target(targets, v, eps):
  return (1 - eps) * np.eye(v)[targets] + eps / v  # q' = (1 - eps) delta + eps / K


def test_no_smoothing_is_the_negative_log_likelihood():
  logits, targets = _problem()
  nll = -np.take_along_axis(_log_softmax64(logits), targets[..., None], -1)[..., 0]
  loss_sum, weight_sum = losses.cross_entropy(logits, targets)
  np.testing.assert_allclose(loss_sum, nll.sum(), rtol=1e-6)
  assert float(weight_sum) == targets.size
  assert loss_sum.dtype == weight_sum.dtype == jnp.float32
  np.testing.assert_allclose(losses.mean_cross_entropy(logits, targets), nll.mean(), rtol=1e-6)
  np.testing.assert_allclose(losses.token_cross_entropy(logits, targets), nll, rtol=1e-6)
  # smoothing 0 equals the smoothed code path in the limit, and optax's plain CE
  np.testing.assert_allclose(losses.token_cross_entropy(logits, targets, label_smoothing=1e-12), nll, rtol=1e-6)
  np.testing.assert_allclose(optax.softmax_cross_entropy_with_integer_labels(logits, targets), nll, rtol=1e-5)


@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_smoothed_loss_is_cross_entropy_to_the_smoothed_target(eps):
  logits, targets = _problem(v=13)
  v = logits.shape[-1]
  logp = _log_softmax64(logits)
  q = _smoothed_target(targets, v, eps)
  ce = -(q * logp).sum(-1)  # H(q, p)
  kl = (q * (np.log(q) - logp)).sum(-1)  # KL(q || p)
  entropy = -(q * np.log(q)).sum(-1)  # H(q), a constant
  got = losses.token_cross_entropy(logits, targets, label_smoothing=eps)
  np.testing.assert_allclose(got, ce, rtol=1e-6)
  np.testing.assert_allclose(got, kl + entropy, rtol=1e-6)
  # same as optax.smooth_labels + softmax_cross_entropy
  ref = optax.softmax_cross_entropy(logits, optax.smooth_labels(jax.nn.one_hot(targets, v), eps))
  np.testing.assert_allclose(got, ref, rtol=1e-5)
  loss_sum, _ = losses.cross_entropy(logits, targets, label_smoothing=eps)
  np.testing.assert_allclose(loss_sum, ce.sum(), rtol=1e-6)


def test_fairseq_convention_is_ours_with_rescaled_eps():
  logits, targets = _problem(v=7)
  v, eps = 7, 0.1
  lprobs = _log_softmax64(logits)
  # fairseq label_smoothed_nll_loss: eps_i = eps / (V - 1); (1 - eps - eps_i) * nll + eps_i * smooth
  nll = -np.take_along_axis(lprobs, targets[..., None], -1)[..., 0]
  smooth = -lprobs.sum(-1)
  eps_i = eps / (v - 1)
  fairseq = (1 - eps - eps_i) * nll + eps_i * smooth
  got = losses.token_cross_entropy(logits, targets, label_smoothing=eps * v / (v - 1))
  np.testing.assert_allclose(got, fairseq, rtol=1e-6)
  assert not np.allclose(losses.token_cross_entropy(logits, targets, label_smoothing=eps), fairseq, rtol=1e-4)


def test_weights_zero_out_padding():
  logits, targets = _problem(shape=(2, 6))
  weights = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]], np.float32)
  padded_targets = np.where(weights > 0, targets, -100)  # an out-of-range pad id is never read
  garbage = np.where(weights[..., None] > 0, logits, 1e30).astype(np.float32)  # nor are pad logits
  loss_sum, weight_sum = losses.cross_entropy(garbage, padded_targets, weights=weights, label_smoothing=0.1)
  keep = weights > 0
  want = losses.cross_entropy(logits[keep], targets[keep], label_smoothing=0.1)
  np.testing.assert_allclose(loss_sum, want[0], rtol=1e-6)
  assert float(weight_sum) == 6.0 == float(want[1])
  grads = jax.grad(lambda x: losses.mean_cross_entropy(x, padded_targets, weights=weights))(logits)
  assert np.all(np.asarray(grads)[~keep] == 0.0) and np.all(np.isfinite(grads))
  # fractional weights scale each token's loss
  w = np.random.default_rng(1).uniform(size=targets.shape).astype(np.float32)
  per_token = losses.token_cross_entropy(logits, targets)
  np.testing.assert_allclose(losses.cross_entropy(logits, targets, weights=w)[0], (w * per_token).sum(), rtol=1e-5)


def test_all_padding_gives_zero_not_nan():
  logits, targets = _problem()
  zero = np.zeros(targets.shape, np.float32)
  assert float(losses.mean_cross_entropy(logits, targets, weights=zero)) == 0.0
  g = jax.grad(lambda x: losses.mean_cross_entropy(x, targets, weights=zero))(logits)
  assert np.all(np.asarray(g) == 0.0)


def test_bf16_logits_compute_in_float32():
  logits, targets = _problem(v=32, scale=5.0)
  bf16 = jnp.asarray(logits, jnp.bfloat16)
  for eps in (0.0, 0.1):
    got = losses.cross_entropy(bf16, targets, label_smoothing=eps)[0]
    assert got.dtype == jnp.float32
    # exactly the float32 loss of the rounded logits: nothing else ran in bf16
    same = losses.cross_entropy(np.asarray(bf16.astype(jnp.float32)), targets, label_smoothing=eps)[0]
    np.testing.assert_allclose(got, same, rtol=1e-6)
    np.testing.assert_allclose(got, losses.cross_entropy(logits, targets, label_smoothing=eps)[0], rtol=1e-2)
  acc = losses.weighted_accuracy(bf16, targets)[0]
  assert acc.dtype == jnp.float32


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradient_is_softmax_minus_target(eps):
  logits, targets = _problem(v=9)
  v, n = 9, targets.size
  grad = jax.grad(lambda x: losses.mean_cross_entropy(x, targets, label_smoothing=eps))(logits)
  p = np.exp(_log_softmax64(logits))
  np.testing.assert_allclose(grad, (p - _smoothed_target(targets, v, eps)) / n, atol=1e-7)
  # weighted: d(sum w l / sum w)/dz = w (softmax - q) / sum w
  w = np.random.default_rng(2).uniform(size=targets.shape).astype(np.float32)
  grad = jax.grad(lambda x: losses.mean_cross_entropy(x, targets, weights=w, label_smoothing=eps))(logits)
  np.testing.assert_allclose(grad, w[..., None] * (p - _smoothed_target(targets, v, eps)) / w.sum(), atol=1e-7)


def test_large_logits_are_stable():
  logits, targets = _problem(scale=1e4)
  nll = -np.take_along_axis(_log_softmax64(logits), targets[..., None], -1)[..., 0]
  got = losses.cross_entropy(logits, targets, label_smoothing=0.1)[0]
  assert np.isfinite(got)
  np.testing.assert_allclose(losses.cross_entropy(logits, targets)[0], nll.sum(), rtol=1e-5)


def test_weighted_accuracy():
  logits = np.array([[0.0, 2.0, 1.0], [3.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 5.0]], np.float32)
  targets = np.array([1, 2, 0, 2])  # correct, wrong, tie -> lowest id (correct), correct
  correct, total = losses.weighted_accuracy(logits, targets)
  assert (float(correct), float(total)) == (3.0, 4.0)
  correct, total = losses.weighted_accuracy(logits, targets, np.array([1.0, 1.0, 0.0, 0.5]))
  assert (float(correct), float(total)) == (1.5, 2.5)


def test_mlm_loss_at_masked_positions():
  logits, targets = _problem(shape=(2, 8), v=20)
  weights = np.zeros((2, 8), np.float32)
  weights[0, [1, 5]] = weights[1, [0, 2, 7]] = 1
  loss_sum, n = losses.mlm_loss(logits, targets, weights)
  logp = _log_softmax64(logits)
  want = sum(-logp[b, t, targets[b, t]] for b, t in zip(*np.nonzero(weights), strict=True))
  np.testing.assert_allclose(loss_sum, want, rtol=1e-6)
  assert float(n) == 5


def test_classification_and_regression_losses():
  logits, labels = _problem(shape=(6,), v=3)
  loss_sum, n = losses.classification_loss(logits, labels)
  np.testing.assert_allclose(loss_sum, -_log_softmax64(logits)[np.arange(6), labels].sum(), rtol=1e-6)
  assert float(n) == 6
  rng = np.random.default_rng(3)
  scores, y = rng.normal(size=(6, 1)).astype(np.float32), rng.uniform(0, 5, size=6).astype(np.float32)
  sse, n = losses.regression_loss(scores, y)
  np.testing.assert_allclose(sse, ((scores[:, 0].astype(np.float64) - y) ** 2).sum(), rtol=1e-6)
  w = np.array([1, 1, 1, 0, 0, 1], np.float32)
  sse, n = losses.regression_loss(scores[:, 0], y, weights=w)
  np.testing.assert_allclose(sse, (w * (scores[:, 0].astype(np.float64) - y) ** 2).sum(), rtol=1e-6)
  assert float(n) == 4
  np.testing.assert_allclose(losses.safe_mean(sse, n), sse / 4, rtol=1e-7)


def test_jit_and_shape_errors():
  logits, targets = _problem()
  jitted = jax.jit(losses.cross_entropy, static_argnames="label_smoothing")
  np.testing.assert_allclose(jitted(logits, targets, label_smoothing=0.1)[0],
                             losses.cross_entropy(logits, targets, label_smoothing=0.1)[0], rtol=1e-6)
  with pytest.raises(ValueError, match=r"logits \(3, 5, 11\) must be targets \(3, 4\)"):
    losses.cross_entropy(logits, targets[:, :4])
  with pytest.raises(TypeError, match="integer class ids"):
    losses.cross_entropy(logits, targets.astype(np.float32))
  with pytest.raises(ValueError, match="weights"):
    losses.cross_entropy(logits, targets, weights=np.ones((3,)))
  with pytest.raises(ValueError, match="label_smoothing=1.0"):
    losses.cross_entropy(logits, targets, label_smoothing=1.0)
  with pytest.raises(ValueError, match=r"must be \[B, C\]"):
    losses.classification_loss(logits, targets)
  with pytest.raises(ValueError, match=r"\[B, 1\] or \[B\]"):
    losses.regression_loss(np.ones((4, 2)), np.ones(4))
