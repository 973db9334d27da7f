"""Independent float64 NumPy references for RoPE (eq. 15), written without roformer_jax.

These follow the paper's formulas directly; tests compare the library against them.
"""

import numpy as np


def inv_freq64(dim, theta=10000.0):
  """theta_i = theta ** (-2 (i - 1) / d), i = 1..d/2 (Sec. 3.2.2), in float64."""
  i = np.arange(1, dim // 2 + 1, dtype=np.float64)
  return theta ** (-2.0 * (i - 1) / dim)


def dense_rotation(m, dim, theta=10000.0):
  """R^d_{Theta,m} of eq. (15), built entry by entry."""
  r = np.zeros((dim, dim))
  for i, t in enumerate(inv_freq64(dim, theta)):
    a = m * t
    r[2 * i, 2 * i] = np.cos(a)
    r[2 * i, 2 * i + 1] = -np.sin(a)
    r[2 * i + 1, 2 * i] = np.sin(a)
    r[2 * i + 1, 2 * i + 1] = np.cos(a)
  return r


def rotate_interleaved64(x, positions, theta=10000.0, rotary_dim=None, inv_freq=None, attention_factor=1.0):
  """Eq. (34) in float64: x [..., T, N, H], positions broadcastable to [..., T]."""
  x = np.asarray(x, np.float64)
  h = x.shape[-1]
  rd = h if rotary_dim is None else rotary_dim
  freq = inv_freq64(rd, theta) if inv_freq is None else np.asarray(inv_freq, np.float64)
  ang = np.asarray(positions, np.float64)[..., None, None] * freq  # [..., T, 1, K]
  c, s = np.cos(ang) * attention_factor, np.sin(ang) * attention_factor
  out = x.copy()
  x1, x2 = x[..., 0:rd:2], x[..., 1:rd:2]
  out[..., 0:rd:2] = x1 * c - x2 * s
  out[..., 1:rd:2] = x2 * c + x1 * s
  return out


def to_half_layout(v, rotary_dim=None):
  """Reorders interleaved pairs (2i, 2i+1) into (i, i + R/2) along the last axis."""
  rd = v.shape[-1] if rotary_dim is None else rotary_dim
  return np.concatenate([v[..., 0:rd:2], v[..., 1:rd:2], v[..., rd:]], axis=-1)


def long_term_decay_loop(m, dim, theta=10000.0):
  """The blog's Mathematica f[m], with explicit loops."""
  t = inv_freq64(dim, theta)
  total = 0.0
  for j in range(dim // 2):
    total += abs(sum(np.exp(1j * m * t[i]) for i in range(j + 1)))
  return total / (dim / 2)


def from_half_layout(v, rotary_dim=None):
  """Inverse of to_half_layout: (i, i + R/2) pairs back to interleaved (2i, 2i+1)."""
  rd = v.shape[-1] if rotary_dim is None else rotary_dim
  pairs = np.stack([v[..., :rd // 2], v[..., rd // 2:rd]], axis=-1).reshape(v[..., :rd].shape)
  return np.concatenate([pairs, v[..., rd:]], axis=-1)
