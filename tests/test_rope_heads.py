"""`RotaryConfig(heads=...)`: only some heads of q and k rotate (Qwen2.5-Omni's DiT turns its first head alone),
checked against a float64 NumPy rotation of those heads written here from eq. (34), and refused where it cannot
apply."""

import numpy as np
import pytest

from roformer_jax import rope


def _numpy_rotation(x, positions, theta, layout):
  """eq. (34) in float64 over a whole head: x [B, T, N, H], positions [B, T]."""
  h = x.shape[-1]
  inv = theta ** (-np.arange(0, h, 2, dtype=np.float64) / h)
  ang = positions[..., None, None].astype(np.float64) * inv  # [B, T, 1, K]
  cos, sin = np.cos(ang), np.sin(ang)
  if layout == "interleaved":
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, b * cos + a * sin
    return out
  a, b = x[..., :h // 2], x[..., h // 2:]
  return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)


@pytest.mark.parametrize("heads,layout", [(1, "interleaved"), ((1, 3), "half"), ((0, 4), "half")])
def test_only_the_given_heads_rotate(heads, layout):
  rng = np.random.default_rng(0)
  x = rng.standard_normal((2, 7, 4, 16)).astype(np.float32)
  pos = np.array([[0, 1, 2, 5, 100, 1023, 4095], [3, 4, 8, 16, 30000, 32767, 9]])
  spec = rope.RotaryConfig(theta=10000.0, layout=layout, heads=heads)
  start, stop = (0, heads) if isinstance(heads, int) else heads
  assert spec.heads == (start, stop)
  want = x.astype(np.float64).copy()
  want[:, :, start:stop] = _numpy_rotation(want[:, :, start:stop], pos, 10000.0, layout)
  got = np.asarray(spec.apply(x, pos), np.float64)
  np.testing.assert_allclose(got, want, atol=3e-6 * 1e0, rtol=0)
  assert np.array_equal(got[:, :, stop:], x[:, :, stop:]) and np.array_equal(got[:, :, :start], x[:, :, :start])
  # the layers' path (cos_sin once, rotate q and k) is the same
  got2 = np.asarray(spec.rotate(x, spec.cos_sin(pos, 16)), np.float64)
  np.testing.assert_allclose(got2, got, atol=1e-6, rtol=0)
  # and a spec without heads rotates every head: the unrotated heads would differ
  assert not np.allclose(np.asarray(rope.RotaryConfig(theta=10000.0, layout=layout).apply(x, pos))[:, :, 3], x[:, :, 3])


def test_heads_are_refused_where_they_cannot_apply():
  for bad in (0, -1, (2, 2), (3, 1), (0.0, 1), True, "first"):
    with pytest.raises(ValueError, match="rope heads="):
      rope.RotaryConfig(heads=bad)
  spec = rope.RotaryConfig(layout="half", heads=(0, 3))
  pos = np.arange(5)[None]
  with pytest.raises(ValueError, match="N >= 3"):
    spec.apply(np.zeros((1, 5, 2, 8), np.float32), pos)  # two heads: head 2 does not exist
  with pytest.raises(ValueError, match="head axis"):
    spec.rotate(np.zeros((5, 8), np.float32), spec.cos_sin(np.arange(5), 8))  # no head axis at all
