"""`RotaryConfig(tables="half")`: rotate_half's per-channel cos/sin tables over interleaved pairs, V-JEPA 2's
`rotate_queries_or_keys`, checked against a float64 NumPy transcription of that function and of its caller's three
(frame, height, width) segments written here from transformers 5.24's modeling_vjepa2.py, and shown NOT to be a
rotation (so a test fails if someone turns it into one)."""

import numpy as np
import pytest

from roformer_jax import rope


def _vjepa2_rotate(x, pos):
  """modeling_vjepa2.rotate_queries_or_keys in float64: x [B, N, T, D], pos [T]."""
  d = x.shape[-1]
  omega = 1.0 / 10000.0 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
  freq = pos.astype(np.float64)[:, None] * omega  # [T, D/2]
  emb_sin, emb_cos = np.tile(np.sin(freq), 2), np.tile(np.cos(freq), 2)  # .repeat(1, 1, 1, 2): [f | f]
  y = x.reshape(*x.shape[:-1], -1, 2)
  y1, y2 = y[..., 0], y[..., 1]
  y = np.stack([-y2, y1], -1).reshape(x.shape)
  return x * emb_cos + y * emb_sin


def _vjepa2_apply(x, grid, token_ids):
  """VJEPA2RopeAttention.get_position_ids + apply_rotary_embeddings in float64: x [B, N, T, H], the token ids
  [T] decomposed over a grid x grid frame; three segments of d = 2 * ((H // 3) // 2), the rest unrotated."""
  h = x.shape[-1]
  d = 2 * ((h // 3) // 2)
  per_frame = grid * grid
  frame = token_ids // per_frame
  height = (token_ids - per_frame * frame) // grid
  width = token_ids - per_frame * frame - grid * height
  parts = [_vjepa2_rotate(x[..., i * d:(i + 1) * d], p) for i, p in enumerate((frame, height, width))]
  return np.concatenate([*parts, x[..., 3 * d:]], -1)


def _spec(head_dim):
  d = 2 * ((head_dim // 3) // 2)
  return rope.RotaryConfig(theta=10000.0, layout="interleaved", tables="half", blocks=3, sections=(d // 2,) * 3,
                           frequencies="per_axis", rotary_dim=3 * d)


@pytest.mark.parametrize("head_dim,grid,frames", [(64, 4, 3), (96, 3, 2), (20, 2, 5), (12, 16, 8)])
def test_matches_vjepa2_rotate_queries_or_keys(head_dim, grid, frames):
  rng = np.random.default_rng(head_dim)
  t = frames * grid * grid
  x = rng.standard_normal((2, 3, t, head_dim)).astype(np.float32)  # [B, N, T, H] as the model holds it
  want = _vjepa2_apply(x.astype(np.float64), grid, np.arange(t))
  positions = rope.video_grid_positions(frames, grid, grid)  # (frame, row, column) of token i: the model's ids
  spec = _spec(head_dim)
  xt = np.swapaxes(x, 1, 2)  # [B, T, N, H]
  got = np.swapaxes(np.asarray(spec.apply(xt, positions), np.float64), 1, 2)
  np.testing.assert_allclose(got, want, atol=2e-6, rtol=0)
  got2 = np.swapaxes(np.asarray(spec.rotate(xt, spec.cos_sin(positions, head_dim)), np.float64), 1, 2)
  np.testing.assert_allclose(got2, got, atol=1e-6, rtol=0)
  # the predictor's tokens: any subset of the grid, sorted, at their own ids
  ids = np.sort(rng.choice(t, size=min(t, 7), replace=False))
  want = _vjepa2_apply(x[:, :, :len(ids)].astype(np.float64), grid, ids)
  got = np.swapaxes(np.asarray(spec.apply(xt[:, :len(ids)], positions[ids]), np.float64), 1, 2)
  np.testing.assert_allclose(got, want, atol=2e-6, rtol=0)
  # an ordinary (pairs) rotation of the same spec is another function: the tables matter
  plain = rope.RotaryConfig(**{**spec.changed(), "tables": "pairs"})
  other = np.swapaxes(np.asarray(plain.apply(xt, positions), np.float64), 1, 2)
  assert np.abs(other - _vjepa2_apply(x.astype(np.float64), grid, np.arange(t))).max() > 1e-2


def test_half_tables_are_not_a_rotation():
  """Not orthogonal: norms of pairs change and q . k at (m, n) is no function of m - n."""
  spec = _spec(24)  # d = 8 per axis: 4 pairs per block
  rng = np.random.default_rng(1)
  x = rng.standard_normal((1, 1, 1, 24))
  pos = np.array([[[5, 3, 7]]])  # [1, T=1, 3]
  jac = np.stack([np.asarray(spec.apply(np.eye(24)[i].reshape(1, 1, 1, 24).astype(np.float32), pos))[0, 0, 0]
                  for i in range(24)], 1)  # the linear map's matrix
  assert np.abs(jac.T @ jac - np.eye(24)).max() > 0.1  # not orthogonal
  y = np.asarray(spec.apply(x.astype(np.float32), pos), np.float64)
  assert abs(np.linalg.norm(y) - np.linalg.norm(x)) > 1e-3
  # pair (0, 1) of each block turns channel 0 by angle 0 * pos (f_0 = 1) and channel 1 by f_1 * pos: different
  q, k = rng.standard_normal((2, 1, 1, 1, 24)).astype(np.float32)
  def score(m, n):
    return float(np.sum(np.asarray(spec.apply(q, np.array([[[m, m, m]]])), np.float64)
                        * np.asarray(spec.apply(k, np.array([[[n, n, n]]])), np.float64)))
  assert abs(score(3, 1) - score(12, 10)) > 1e-3  # a rotation would give equal scores
  plain = rope.RotaryConfig(**{**spec.changed(), "tables": "pairs"})  # the rotation it is not: those are equal
  s = [float(np.sum(np.asarray(plain.apply(q, np.array([[[m, m, m]]])), np.float64)
                    * np.asarray(plain.apply(k, np.array([[[m - 2, m - 2, m - 2]]])), np.float64))) for m in (3, 12)]
  assert abs(s[0] - s[1]) < 1e-4


def test_half_tables_refused_where_a_rotation_is_assumed():
  with pytest.raises(ValueError, match="tables="):
    rope.RotaryConfig(tables="rotate_half")
  with pytest.raises(ValueError, match="layout='half'"):
    rope.RotaryConfig(layout="half", tables="half")
  with pytest.raises(ValueError, match="not a rotation"):
    rope.RotaryConfig(tables="half", xpos_scale_base=512.0)
  with pytest.raises(ValueError, match="not a rotation"):
    rope.RotaryConfig(tables="half", rotate_value=True, unrotate_output=True)
  with pytest.raises(ValueError, match="not a rotation"):
    _spec(24).unrotate(np.zeros((1, 1, 1, 24), np.float32), np.zeros((1, 1, 3), np.int32))
  with pytest.raises(ValueError, match="tables="):
    rope.rotate(np.zeros((1, 1, 8), np.float32), np.zeros((1, 4)), np.zeros((1, 4)), layout="half", tables="half")
