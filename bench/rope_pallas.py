"""A Pallas kernel of the RoPE rotation (half layout), for B1 on a GPU (issue 27, item 3).

B1 on an H100 found XLA's fused RoPE at 113% of a same-run copy's bandwidth in float32 but 60%
in bfloat16, with the same 0.37 ms for every bf16 variant (tables computed outside the op
too), so the bytes do not set that time. The issue asks to measure a Pallas kernel before
writing a custom one; this is that kernel, used by `bench/rope.py --pallas` only (not by the
library): a grid over blocks of `block_t` rows of x [B*T, N, H], each block rotating its
halves with float32 cos/sin of its rows. On a CPU it runs in Pallas' interpreter (tests and
--smoke); its speed means something only on a GPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(x_ref, cos_ref, sin_ref, out_ref):
  h2 = x_ref.shape[-1] // 2
  x1 = x_ref[:, :, :h2].astype(jnp.float32)  # [bt, N, H/2], each half read once, as in rotate_half
  x2 = x_ref[:, :, h2:].astype(jnp.float32)
  c = cos_ref[...][:, None, :]  # [bt, 1, H/2]
  s = sin_ref[...][:, None, :]
  out_ref[:, :, :h2] = (x1 * c - x2 * s).astype(out_ref.dtype)
  out_ref[:, :, h2:] = (x2 * c + x1 * s).astype(out_ref.dtype)


def rotate_half(x: jax.Array, cos: jax.Array, sin: jax.Array, *, block_t: int = 8,
                interpret: bool | None = None) -> jax.Array:
  """x [B, T, N, H] rotated in the half layout by cos, sin [T, H/2] (or [B, T, H/2]), float32.

  The same values as `roformer_jax.rope.rotate(x, cos, sin, layout="half")` up to float32
  rounding. B*T must be a multiple of `block_t`; on a GPU (Triton), N, H/2 and block_t must be
  powers of two. `interpret` defaults to True off a GPU.
  """
  b, t, n, h = x.shape
  rows = b * t
  if h % 2 or rows % block_t:
    raise ValueError(f"x {x.shape}: H must be even and B*T={rows} a multiple of block_t={block_t}.")
  if interpret is None:
    interpret = jax.default_backend() != "gpu"
  cos = jnp.broadcast_to(cos.astype(jnp.float32), (b, t, h // 2)).reshape(rows, h // 2)
  sin = jnp.broadcast_to(sin.astype(jnp.float32), (b, t, h // 2)).reshape(rows, h // 2)
  table = pl.BlockSpec((block_t, h // 2), lambda i: (i, 0))
  rows_spec = pl.BlockSpec((block_t, n, h), lambda i: (i, 0, 0))
  out = pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((rows, n, h), x.dtype), grid=(rows // block_t,),
                       in_specs=[rows_spec, table, table], out_specs=rows_spec,
                       interpret=interpret)(x.reshape(rows, n, h), cos, sin)
  return out.reshape(b, t, n, h)
