"""References and analysis in float64 NumPy: the dense rotation matrix of eq. (15) and the
long-term decay bound of eq. (37)."""

from __future__ import annotations

import numpy as np
from jax.typing import ArrayLike

from roformer_jax.rope.frequencies import check_dim, check_theta, default_inv_freq

# --------------------------------------------------------------------------------------
# References and analysis (float64 NumPy).
# --------------------------------------------------------------------------------------


def rotation_matrix(position: float, dim: int, theta: float = 10000.0) -> np.ndarray:
  """The dense rotation matrix R^d_{Theta,m} of eq. (15), in float64 (a test reference).

  Block-diagonal with 2x2 blocks [[cos m t_i, -sin m t_i], [sin m t_i, cos m t_i]] acting
  on the interleaved pairs (2i, 2i + 1), t_i = theta ** (-2i / dim).

  Returns:
    float64[dim, dim]; f(x, m) = R @ x (eq. 14) for a single vector x of size dim.
  """
  dim = check_dim(dim)
  theta = check_theta(theta)
  angles = float(position) * default_inv_freq(dim, theta)
  c, s = np.cos(angles), np.sin(angles)
  r = np.zeros((dim, dim), dtype=np.float64)
  i = np.arange(0, dim, 2)
  r[i, i], r[i, i + 1], r[i + 1, i], r[i + 1, i + 1] = c, -s, s, c
  return r


def long_term_decay(distances: ArrayLike, dim: int, theta: float = 10000.0) -> np.ndarray:
  """The long-term decay bound of eq. (37): (1 / (d/2)) * sum_j |S_j|, S_j = sum_{i<j} e^{i m t_i}.

  This is the author's Mathematica definition (Su, 2021 blog): the mean over j of
  |sum_{i=0}^{j} exp(i * m * theta_i)|, which upper-bounds |q^T R_{n-m} k| up to a
  data-dependent factor. At distance 0 it equals (d/2 + 1) / 2, e.g. 32.5 for d = 128.

  Args:
    distances: relative distances m (array-like of numbers).
    dim: head dim d (even).
    theta: the base.

  Returns:
    float64[len(distances)].
  """
  dim = check_dim(dim)
  theta = check_theta(theta)
  m = np.asarray(distances, dtype=np.float64).reshape(-1)
  phases = np.exp(1j * np.outer(m, default_inv_freq(dim, theta)))  # [M, d/2]
  partial_sums = np.cumsum(phases, axis=-1)  # S_{j+1} for j = 0 .. d/2 - 1
  return np.abs(partial_sums).mean(axis=-1)


