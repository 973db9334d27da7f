"""bench/rope_pallas.py: the Pallas RoPE kernel B1 times on a GPU, checked here in Pallas'
interpreter against a float64 NumPy rotation (the half layout: pairs (i, i + H/2))."""

import os
import sys

import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import rope_pallas  # noqa: E402
from roformer_jax import rope  # noqa: E402
from tests import reference as ref  # noqa: E402

B, T, N, H = 2, 16, 4, 8


def _reference(x, positions):
  """The float64 rotation of eq. (34) (tests/reference.py) in the half layout."""
  return ref.to_half_layout(ref.rotate_interleaved64(ref.from_half_layout(np.asarray(x, np.float64)), positions))


@pytest.mark.parametrize("per_row", [False, True])
def test_pallas_rotation_equals_float64_rotation(per_row):
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.uniform(-1, 1, (B, T, N, H)), jnp.float32)
  positions = rng.integers(0, 1000, (B, T)) if per_row else np.arange(T)
  cos, sin = rope.rotary_cos_sin(jnp.asarray(positions), H)
  out = rope_pallas.rotate_half(x, cos, sin, interpret=True)
  assert out.shape == x.shape and out.dtype == x.dtype
  np.testing.assert_allclose(np.asarray(out), _reference(x, positions), atol=2e-5)


def test_pallas_rotation_in_bfloat16_equals_the_library_op():
  x = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (B, T, N, H)), jnp.bfloat16)
  cos, sin = rope.rotary_cos_sin(jnp.arange(T), H)
  out = rope_pallas.rotate_half(x, cos, sin, block_t=4, interpret=True)
  assert out.dtype == jnp.bfloat16
  ours = rope.rotate(x, cos, sin, layout="half")
  np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ours, np.float32), atol=1e-2)
  np.testing.assert_allclose(np.asarray(out, np.float32), _reference(np.asarray(x, np.float32), np.arange(T)),
                             atol=1e-2)


def test_rows_must_fill_whole_blocks():
  x = jnp.zeros((1, 12, N, H))
  cos, sin = rope.rotary_cos_sin(jnp.arange(12), H)
  with pytest.raises(ValueError, match="multiple of block_t=8"):
    rope_pallas.rotate_half(x, cos, sin, interpret=True)
