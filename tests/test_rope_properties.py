"""Hypothesis property tests for rope.apply_rotary over shapes, dtypes, positions and layouts."""

import hypothesis.extra.numpy as hnp
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roformer_jax import rope
from tests import reference as ref

pytestmark = pytest.mark.slow  # property tests: many examples, each a compile; make test, not make test-fast

DTYPES = {"float32": (jnp.float32, 1e-5), "bfloat16": (jnp.bfloat16, 2 * 2**-8), "float16": (jnp.float16, 2 * 2**-11)}


@st.composite
def rope_inputs(draw):
  batch = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
  t, n = draw(st.integers(1, 6)), draw(st.integers(1, 3))
  h = 2 * draw(st.integers(1, 12))
  rd = 2 * draw(st.integers(1, h // 2))
  x = draw(hnp.arrays(np.float32, (*batch, t, n, h), elements=st.floats(-1, 1, width=32)))
  pos_shape = draw(st.sampled_from([(t,), (*batch, t)]))
  positions = draw(hnp.arrays(np.int32, pos_shape, elements=st.integers(-(2**24), 2**24)))
  layout = draw(st.sampled_from(rope.LAYOUTS))
  dtype = draw(st.sampled_from(sorted(DTYPES)))
  theta = draw(st.sampled_from([10000.0, 500000.0, 1e6]))
  return x, positions, layout, rd, dtype, theta


@settings(max_examples=40, deadline=None)
@given(rope_inputs())
def test_matches_float64_reference(args):
  x, positions, layout, rd, dtype_name, theta = args
  dtype, tol = DTYPES[dtype_name]
  xd = np.asarray(jnp.asarray(x, dtype).astype(jnp.float32))  # the value actually rotated
  expected = ref.rotate_interleaved64(xd, np.broadcast_to(positions, x.shape[:-2]), theta, rotary_dim=rd)
  if layout == "half":
    xd, expected = ref.to_half_layout(xd, rd), ref.to_half_layout(expected, rd)
  out = rope.apply_rotary(jnp.asarray(xd, dtype), positions, theta, layout=layout, rotary_dim=rd)
  assert out.dtype == dtype and out.shape == x.shape
  np.testing.assert_allclose(np.asarray(out.astype(jnp.float32)), expected, atol=tol, rtol=0)
  np.testing.assert_array_equal(np.asarray(out[..., rd:]), np.asarray(jnp.asarray(xd, dtype)[..., rd:]))


@settings(max_examples=30, deadline=None)
@given(rope_inputs(), st.integers(-(2**23), 2**23))
def test_shift_invariance_of_scores(args, shift):
  x, positions, layout, rd, _, theta = args
  pos = np.broadcast_to(positions, x.shape[:-2]).astype(np.int64)
  pos = np.clip(pos, -(2**24), 2**24)
  q, k = x, x[..., ::-1].copy()

  def scores(p):
    qr = np.asarray(rope.apply_rotary(q, p.astype(np.int32), theta, layout=layout, rotary_dim=rd), np.float64)
    kr = np.asarray(rope.apply_rotary(k, p.astype(np.int32), theta, layout=layout, rotary_dim=rd), np.float64)
    return np.einsum("...qnh,...knh->...nqk", qr, kr)

  np.testing.assert_allclose(scores(pos + shift), scores(pos), atol=5e-5 * x.shape[-1])


@settings(max_examples=30, deadline=None)
@given(rope_inputs())
def test_norm_preserved(args):
  x, positions, layout, rd, _, theta = args
  out = np.asarray(rope.apply_rotary(x, positions, theta, layout=layout, rotary_dim=rd), np.float64)
  np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x.astype(np.float64), axis=-1),
                             rtol=1e-5, atol=1e-6)
