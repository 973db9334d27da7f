"""Independent float64 NumPy references for attention with RoPE, written without roformer_jax.

Everything here is the O(N^2) textbook form: every (query, key) pair is formed explicitly,
and rotations are the dense matrices R^d_{Theta,m} of eq. (15) (`reference.dense_rotation`).
"""

import functools

import numpy as np

from tests.reference import dense_rotation


@functools.lru_cache(maxsize=None)
def _rotation(m, dim, theta):
  r = dense_rotation(int(m), dim, theta)
  r.setflags(write=False)
  return r


def rotate_dense(x, positions, theta=10000.0):
  """R_{m_t} x_t for each token: x float[T, ..., d], positions int[T]."""
  x = np.asarray(x, np.float64)
  d = x.shape[-1]
  return np.stack([x[t] @ _rotation(int(p), d, theta).T for t, p in enumerate(np.asarray(positions))])


# ------------------------------------------------------------------ feature maps


def elu_phi64(x):
  """elu(x) + 1."""
  x = np.asarray(x, np.float64)
  return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def favor_phi64(x, w, *, is_query):
  """FAVOR+ features of x [..., H] with projection w [F, H]:

  phi(x) = (exp(w . x' - |x'|^2 / 2 - [queries: max_j of the same]) + 1e-6) / sqrt(F),
  x' = x / H^(1/4).
  """
  x = np.asarray(x, np.float64)
  w = np.asarray(w, np.float64)
  xs = x * x.shape[-1] ** -0.25
  wx = xs @ w.T - 0.5 * np.sum(xs * xs, axis=-1, keepdims=True)
  if is_query:
    wx = wx - wx.max(axis=-1, keepdims=True)
  return (np.exp(wx) + 1e-6) / np.sqrt(w.shape[0])


def phi64(x, feature_map, projection=None, *, is_query):
  if feature_map == "elu":
    return elu_phi64(x)
  return favor_phi64(x, projection, is_query=is_query)


# ------------------------------------------------------------------ masks


def allowed64(t, s, *, causal=False, kv_mask=None, segment_ids=None, batch=1):
  """bool[B, T, S]: which keys each query may use."""
  a = np.ones((batch, t, s), bool)
  if causal:
    a &= np.tril(np.ones((t, s), bool))[None]
  if kv_mask is not None:
    a &= np.asarray(kv_mask, bool)[:, None, :]
  if segment_ids is not None:
    seg = np.asarray(segment_ids)
    a &= seg[:, :, None] == seg[:, None, :]
  return a


# ------------------------------------------------------------------ linear attention, eq. (19)


def linear_attention64(q, k, v, *, q_positions=None, k_positions=None, feature_map="elu", projection=None,
                       causal=False, kv_mask=None, segment_ids=None, theta=10000.0, eps=1e-6,
                       variant="eq19"):
  """Eq. (19), pair by pair, for q, k [B, T, N, H], v [B, S, N, Hv]; positions [T] / [S] or [B, T].

    out_m = sum_n (R_m phi(q_m))^T (R_n phi(k_n)) v_n / max(sum_n phi(q_m)^T phi(k_n), eps)

  variant:
    "eq19": the paper's formula (above).
    "rotate_then_phi": performer-pytorch's form, phi(R_m q_m) and phi(R_n k_n) in both the
      numerator and the denominator (rotary applied before the feature map).
    "rotated_denominator": R phi in the numerator and in the denominator.
  """
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  b, t, n, _ = q.shape
  s = k.shape[1]
  allowed = allowed64(t, s, causal=causal, kv_mask=kv_mask, segment_ids=segment_ids, batch=b)
  rope = q_positions is not None
  qp = None if not rope else np.broadcast_to(np.asarray(q_positions), (b, t))
  kp = None if not rope else np.broadcast_to(np.asarray(k_positions), (b, s))
  out = np.zeros((b, t, n, v.shape[-1]))
  for bi in range(b):
    if variant == "rotate_then_phi":
      qr = rotate_dense(q[bi], qp[bi], theta) if rope else q[bi]
      kr = rotate_dense(k[bi], kp[bi], theta) if rope else k[bi]
      fq_num = fq_den = phi64(qr, feature_map, projection, is_query=True)
      fk_num = fk_den = phi64(kr, feature_map, projection, is_query=False)
    else:
      fq = phi64(q[bi], feature_map, projection, is_query=True)  # [T, N, F]
      fk = phi64(k[bi], feature_map, projection, is_query=False)
      fq_num = rotate_dense(fq, qp[bi], theta) if rope else fq
      fk_num = rotate_dense(fk, kp[bi], theta) if rope else fk
      fq_den, fk_den = (fq_num, fk_num) if variant == "rotated_denominator" else (fq, fk)
    a = allowed[bi][:, :, None]  # [T, S, 1]
    w_num = np.einsum("tnf,snf->tsn", fq_num, fk_num) * a
    w_den = np.einsum("tnf,snf->tsn", fq_den, fk_den) * a
    num = np.einsum("tsn,snv->tnv", w_num, v[bi])
    den = w_den.sum(axis=1)
    out[bi] = num / np.maximum(den, eps)[..., None]
  return out


# ------------------------------------------------------------------ softmax attention


def softmax_attention64(q, k, v, *, q_positions=None, k_positions=None, allowed=None, rotary_value=False,
                        theta=10000.0, scale=None):
  """softmax_n((R_m q_m)^T (R_n k_n) * scale) v_n for q [B, T, N, H], k [B, S, K, H], v [B, S, K, Hv].

  allowed: bool broadcastable to [B, N, T, S]. K divides N (query head i uses kv head i // (N/K)).
  A query with no allowed key has no softmax: its row is NaN (the tests compare the others).
  """
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  b, t, n, h = q.shape
  s, kh = k.shape[1], k.shape[2]
  if q_positions is not None:
    qp = np.broadcast_to(np.asarray(q_positions), (b, t))
    kp = np.broadcast_to(np.asarray(k_positions), (b, s))
    q = np.stack([rotate_dense(q[i], qp[i], theta) for i in range(b)])
    k = np.stack([rotate_dense(k[i], kp[i], theta) for i in range(b)])
    if rotary_value:
      v = np.stack([rotate_dense(v[i], kp[i], theta) for i in range(b)])
  k, v = np.repeat(k, n // kh, axis=2), np.repeat(v, n // kh, axis=2)
  scale = 1.0 / np.sqrt(h) if scale is None else scale
  logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
  if allowed is not None:
    logits = np.where(np.broadcast_to(allowed, logits.shape), logits, -np.inf)
  with np.errstate(invalid="ignore"):  # -inf - -inf: a row with no allowed key (NaN, as documented)
    logits = logits - logits.max(axis=-1, keepdims=True)
  p = np.exp(logits)
  p = p / p.sum(axis=-1, keepdims=True)
  return np.einsum("bnts,bsnv->btnv", p, v)
