"""Layout conversion of q/k projection weights between the interleaved and half pairings."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.rope.frequencies import check_dim, check_layout

# --------------------------------------------------------------------------------------
# Layout conversion of q/k projection weights.
# --------------------------------------------------------------------------------------


def layout_permutation(head_dim: int, *, rotary_dim: int | None = None, src: str = "interleaved",
                       dst: str = "half") -> np.ndarray:
  """Index map P with y = x[..., P] turning a src-layout head vector into dst layout.

  Rotating x in src layout and then permuting equals permuting and rotating in dst layout,
  so q.k scores are unchanged. Features beyond rotary_dim keep their place.

  Returns:
    int64[head_dim].
  """
  head_dim = check_dim(head_dim, "head_dim")
  rd = check_dim(head_dim if rotary_dim is None else rotary_dim, "rotary_dim")
  if rd > head_dim:
    raise ValueError(f"rotary_dim={rd} exceeds head_dim={head_dim}.")
  check_layout(src), check_layout(dst)
  perm = np.arange(head_dim)
  if src == dst:
    return perm
  to_half = np.concatenate([np.arange(0, rd, 2), np.arange(1, rd, 2)])  # half[j] = inter[to_half[j]]
  perm[:rd] = to_half if dst == "half" else np.argsort(to_half)
  return perm


def convert_qk_layout(w: np.ndarray | jax.Array, *, head_dim: int, src: str, dst: str, rotary_dim: int | None = None,
                      axis: int = -1) -> Any:
  """Permutes a q or k projection kernel (or bias) from one rotary layout to the other.

  Args:
    w: array whose `axis` holds the heads' output features, either N * H (flat) or H
      (e.g. a kernel [D, N * H], a kernel [D, N, H], a bias [N * H]).
    head_dim: H.
    src, dst: "interleaved" or "half".
    rotary_dim: the rotary dim R used with these weights (partial rotary), default H.
    axis: the output-feature axis.

  Returns:
    w with that axis permuted within each head; same type (NumPy or JAX) as w.
  """
  perm = layout_permutation(head_dim, rotary_dim=rotary_dim, src=src, dst=dst)
  size = w.shape[axis]
  if size % head_dim:
    raise ValueError(f"axis {axis} of w has size {size}, not a multiple of head_dim={head_dim}.")
  full = (np.arange(size // head_dim)[:, None] * head_dim + perm[None, :]).reshape(-1)
  xp = np if isinstance(w, np.ndarray) else jnp
  return xp.take(w, full, axis=axis)

