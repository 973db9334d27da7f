"""Rotary Position Embedding (RoPE) as pure JAX functions.

RoFormer (Su et al., 2021) encodes the absolute position m of a query or key by
rotating each feature pair i by the angle m * theta_i, with
theta_i = theta ** (-2i / d) (eq. 15). The inner product of a rotated query and key
then depends on the positions only through m - n (eq. 16), which is what makes RoPE a
*relative* position encoding.

Shape letters used throughout:
  B... any number of leading batch dims, T length, N heads, H head dim,
  R rotary dim (R <= H, even), K = R // 2 rotated feature pairs.

Layouts (which features form a rotated pair):
  "interleaved": pairs (2i, 2i + 1), the paper's eq. (34) and HF RoFormer.
  "half":        pairs (i, i + R/2), GPT-NeoX / LLaMA.
`layout_permutation` / `convert_qk_layout` move q/k projection weights between them.

Exact phases. The usual recipe computes ``positions * inv_freq`` in float32. The product
then carries a relative error of ~6e-8, i.e. ~1e-3 rad of phase error at position 2^14
and ~1 rad at 2^24. Here the phase is reduced modulo one turn *exactly* with integer
arithmetic: each frequency's turns-per-position f_i = theta_i / 2pi is stored as a 64-bit
binary fraction (two uint32 words computed in float64 at trace time), and
``frac(m * f_i)`` is formed with wrapping uint32 multiplies, which compute the product
modulo 2^32 for free. Only the reduced phase (|phase| <= pi) is converted to float, so
the angle error is ~2e-7 rad at every int32 position. This costs five integer
multiply-adds per (position, frequency), shared by all N heads, so it is nearly free next
to reading and writing x (see bench/rope.py and docs/rope.md).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "LAYOUTS",
    "ROPE_TYPES",
    "apply_rotary",
    "rotate",
    "rotary_cos_sin",
    "rope_frequencies",
    "check_scaling",
    "is_length_dependent",
    "frequencies_change",
    "row_lengths",
    "rotation_matrix",
    "long_term_decay",
    "positions_from_segments",
    "positions_from_mask",
    "layout_permutation",
    "convert_qk_layout",
]

LAYOUTS = ("interleaved", "half")
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")
# Scalings whose frequencies depend on the sequence length: every key's rotation changes as
# the sequence grows, so a KV cache holds them unrotated (attention.MultiHeadAttention.decode).
LENGTH_DEPENDENT_TYPES = ("dynamic", "longrope")

_TWO_PI = 2.0 * math.pi


# --------------------------------------------------------------------------------------
# Validation helpers (all run at trace time on static values).
# --------------------------------------------------------------------------------------


def _check_theta(theta: Any) -> float:
  if isinstance(theta, (bool, str)) or theta is None:
    raise TypeError(f"theta must be a positive real number, got {theta!r}.")
  try:
    theta = float(theta)
  except (TypeError, jax.errors.ConcretizationTypeError) as e:
    raise TypeError(
        "theta must be a static Python number (it sets trace-time float64 constants), got "
        f"{type(theta).__name__}; pass it as a Python float, e.g. theta=10000.0.") from e
  if not math.isfinite(theta) or theta <= 1.0:
    raise ValueError(f"theta must be a finite number > 1 (the paper uses 10000.0), got {theta}.")
  return theta


def _check_dim(dim: Any, what: str = "dim") -> int:
  if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
    raise TypeError(f"{what} must be a Python int, got {dim!r} ({type(dim).__name__}).")
  dim = int(dim)
  if dim <= 0 or dim % 2:
    raise ValueError(f"{what} must be a positive even integer (features rotate in pairs), got {dim}.")
  return dim


def _check_layout(layout: Any) -> str:
  if layout not in LAYOUTS:
    raise ValueError(
        f"layout must be one of {LAYOUTS} ('interleaved' = pairs (2i, 2i+1) as in the paper "
        f"and HF RoFormer; 'half' = pairs (i, i+R/2) as in GPT-NeoX/LLaMA), got {layout!r}.")
  return layout


def _check_seq_len(seq_len: Any) -> int | jax.Array | None:
  """None, a static positive int, or an integer array of per-row lengths (may be traced)."""
  if seq_len is None:
    return None
  if isinstance(seq_len, (jax.Array, np.ndarray)) and not isinstance(seq_len, bool):
    if not jnp.issubdtype(seq_len.dtype, jnp.integer):
      raise TypeError(f"seq_len as an array holds per-row lengths and must be an integer array, got dtype "
                      f"{seq_len.dtype}.")
    return jnp.asarray(seq_len)
  if isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral):
    raise TypeError(
        f"seq_len must be a static Python int, an integer array of per-row lengths, or None; got "
        f"{seq_len!r} ({type(seq_len).__name__}). Pass seq_len=None to derive each row's length "
        "from its positions.")
  if seq_len <= 0:
    raise ValueError(f"seq_len must be positive, got {seq_len}.")
  return int(seq_len)


def _positive(params: Mapping[str, Any], key: str, rope_type: str) -> float:
  value = params[key]
  if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
    raise ValueError(f"scaling[{key!r}] for rope_type {rope_type!r} must be a positive number, got {value!r}.")
  return float(value)


def _require(params: Mapping[str, Any], keys: tuple[str, ...], rope_type: str) -> None:
  missing = [k for k in keys if params.get(k) is None]
  if missing:
    raise ValueError(
        f"scaling with rope_type {rope_type!r} is missing required key(s) {missing}; "
        f"got keys {sorted(params)}. See roformer_jax.rope.rope_frequencies for what each type reads.")


def _normalise_scaling(scaling: Any, theta: float) -> dict[str, Any] | None:
  """Validates an HF-style rope_parameters dict; returns a copy with 'rope_type' set."""
  if scaling is None:
    return None
  if isinstance(scaling, Mapping) and not scaling:
    return None  # {} = no scaling, as an empty HF rope_parameters dict.
  if not isinstance(scaling, Mapping):
    raise TypeError(
        f"scaling must be None or a dict like {{'rope_type': 'yarn', 'factor': 4.0, ...}}, "
        f"got {type(scaling).__name__}.")
  params = dict(scaling)
  rope_type = params.get("rope_type", params.get("type"))
  if rope_type is None:
    raise ValueError(f"scaling needs a 'rope_type' key (one of {ROPE_TYPES}); got keys {sorted(params)}.")
  if rope_type not in ROPE_TYPES:
    raise ValueError(f"unknown rope_type {rope_type!r}; supported: {ROPE_TYPES}.")
  params["rope_type"] = rope_type
  if params.get("rope_theta") is not None and float(params["rope_theta"]) != theta:
    raise ValueError(
        f"scaling['rope_theta']={params['rope_theta']} disagrees with theta={theta}; pass "
        f"theta={params['rope_theta']} explicitly (the theta argument is the base used).")
  # HF's config.standardize_rope_params() falls back to config.max_position_embeddings.
  if rope_type in ("yarn", "longrope", "llama3") and params.get("original_max_position_embeddings") is None:
    if params.get("max_position_embeddings") is None:
      raise ValueError(
          f"scaling with rope_type {rope_type!r} needs 'original_max_position_embeddings' (the "
          "pre-training context length; HF falls back to the model's max_position_embeddings, "
          "so you may pass that key instead).")
    params["original_max_position_embeddings"] = params["max_position_embeddings"]
  return params


# --------------------------------------------------------------------------------------
# Frequencies (float64 NumPy at trace time; formulas follow HF transformers'
# modeling_rope_utils.py so checkpoints trained there rotate identically here).
# --------------------------------------------------------------------------------------


def _default_inv_freq(dim: int, base: float) -> np.ndarray:
  return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def _yarn(dim: int, theta: float, p: Mapping[str, Any]) -> tuple[np.ndarray, float]:
  omp = float(p["original_max_position_embeddings"])
  if p.get("factor") is None:
    _require(p, ("max_position_embeddings",), "yarn")
    factor = float(p["max_position_embeddings"]) / omp
  else:
    factor = _positive(p, "factor", "yarn")

  def get_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

  attention_factor = p.get("attention_factor")
  if attention_factor is None:
    mscale, mscale_all_dim = p.get("mscale"), p.get("mscale_all_dim")
    if mscale and mscale_all_dim:
      attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    else:
      attention_factor = get_mscale(factor)
  beta_fast = p.get("beta_fast") or 32
  beta_slow = p.get("beta_slow") or 1

  def correction_dim(num_rotations):
    return dim * math.log(omp / (num_rotations * _TWO_PI)) / (2 * math.log(theta))

  low, high = correction_dim(beta_fast), correction_dim(beta_slow)
  if p.get("truncate", True):
    low, high = math.floor(low), math.ceil(high)
  low, high = max(low, 0), min(high, dim - 1)
  if low == high:
    high += 0.001  # HF: prevents a singular ramp.
  ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
  extrapolation = 1.0 - ramp  # 1 = keep the original (high) frequency, 0 = interpolate.
  base_freq = _default_inv_freq(dim, theta)
  inv_freq = base_freq / factor * (1.0 - extrapolation) + base_freq * extrapolation
  return inv_freq, float(attention_factor)


def _longrope(dim: int, theta: float, p: Mapping[str, Any], long: bool) -> tuple[np.ndarray, float]:
  _require(p, ("short_factor", "long_factor"), "longrope")
  omp = float(p["original_max_position_embeddings"])
  if p.get("factor") is None:
    _require(p, ("max_position_embeddings",), "longrope")
    factor = float(p["max_position_embeddings"]) / omp
  else:
    factor = _positive(p, "factor", "longrope")
  attention_factor = p.get("attention_factor")
  if attention_factor is None:
    attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(omp))
  ext = np.asarray(p["long_factor" if long else "short_factor"], dtype=np.float64)
  if ext.shape != (dim // 2,):
    key = "long_factor" if long else "short_factor"
    raise ValueError(f"scaling[{key!r}] must have one entry per rotated pair, rotary dim {dim} // 2 = "
                     f"{dim // 2} entries; got shape {ext.shape}.")
  return 1.0 / (ext * theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)), float(attention_factor)


def _llama3(dim: int, theta: float, p: Mapping[str, Any]) -> np.ndarray:
  _require(p, ("factor", "low_freq_factor", "high_freq_factor"), "llama3")
  factor = _positive(p, "factor", "llama3")
  low_ff, high_ff = float(p["low_freq_factor"]), float(p["high_freq_factor"])
  if high_ff == low_ff:
    raise ValueError("scaling['high_freq_factor'] must differ from 'low_freq_factor' for rope_type 'llama3'.")
  old_len = float(p["original_max_position_embeddings"])
  inv_freq = _default_inv_freq(dim, theta)
  wavelen = _TWO_PI / inv_freq
  low_freq_wavelen, high_freq_wavelen = old_len / low_ff, old_len / high_ff
  out = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
  smooth = (old_len / wavelen - low_ff) / (high_ff - low_ff)
  smoothed = (1 - smooth) * out / factor + smooth * out
  medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
  return np.where(medium, smoothed, out)


def _dynamic_base(dim: int, theta: float, p: Mapping[str, Any], seq_len):
  """NTK-aware base for a (possibly traced) seq_len; HF clamps seq_len below at max_position_embeddings."""
  _require(p, ("factor", "max_position_embeddings"), "dynamic")
  factor = _positive(p, "factor", "dynamic")
  mpe = _positive(p, "max_position_embeddings", "dynamic")
  if dim <= 2:
    raise ValueError("rope_type 'dynamic' needs a rotary dim > 2 (its exponent is dim / (dim - 2)).")
  xp = np if isinstance(seq_len, (int, float)) else jnp
  seq_len = xp.maximum(seq_len, mpe)
  return theta * ((factor * seq_len / mpe) - (factor - 1)) ** (dim / (dim - 2))


def _inv_freq_f64(dim: int, theta: float, params: dict[str, Any] | None, seq_len: int | None,
                  *, long: bool | None = None) -> tuple[np.ndarray, float]:
  """float64 inverse frequencies and attention factor; `long` overrides longrope's choice."""
  rope_type = "default" if params is None else params["rope_type"]
  if rope_type == "default":
    return _default_inv_freq(dim, theta), 1.0
  if rope_type == "linear":
    _require(params, ("factor",), "linear")
    return _default_inv_freq(dim, theta) / _positive(params, "factor", "linear"), 1.0
  if rope_type == "dynamic":
    return _default_inv_freq(dim, float(_dynamic_base(dim, theta, params, seq_len or 0))), 1.0
  if rope_type == "yarn":
    return _yarn(dim, theta, params)
  if rope_type == "longrope":
    if long is None:
      long = bool(seq_len) and seq_len > params["original_max_position_embeddings"]
    return _longrope(dim, theta, params, long)
  return _llama3(dim, theta, params), 1.0  # llama3


def rope_frequencies(dim: int, theta: float = 10000.0, *, scaling: Mapping[str, Any] | None = None,
                     seq_len: int | None = None) -> tuple[jax.Array, float]:
  """Inverse frequencies theta_i of eq. (15), optionally with an HF-style context scaling.

  Without scaling, theta_i = theta ** (-2i / dim) for i in [0, dim / 2).

  Args:
    dim: the rotary dim R (even). For partial rotary pass the rotated width, not the head dim.
    theta: the base (10000 in the paper; 500000 in LLaMA-3).
    scaling: None, or a HuggingFace ``rope_parameters`` dict with a ``rope_type`` and the
      model-config lengths HF reads for that type:
        linear:   factor.
        dynamic:  factor, max_position_embeddings (NTK-aware base, grows with seq_len).
        yarn:     factor (or max_position_embeddings / original_max_position_embeddings when
                  factor is None), original_max_position_embeddings, optional beta_fast (32),
                  beta_slow (1), mscale, mscale_all_dim, attention_factor, truncate (True).
        longrope: short_factor, long_factor (dim / 2 each), original_max_position_embeddings,
                  factor or max_position_embeddings, optional attention_factor.
        llama3:   factor, low_freq_factor, high_freq_factor, original_max_position_embeddings.
      original_max_position_embeddings falls back to max_position_embeddings, as HF does.
      Keys a type does not use are ignored; ``rope_theta``, if present, must equal theta.
    seq_len: the sequence length, for the length-dependent types (dynamic: clamped below at
      max_position_embeddings; longrope: long factors iff seq_len > original length). None
      means "not longer than the model's length", matching HF's initialisation.

  Returns:
    (inv_freq, attention_factor): float32[dim // 2] and a Python float. ``apply_rotary``
    multiplies cos and sin by attention_factor, as HF does.

  Raises:
    ValueError / TypeError: bad dim, theta, seq_len, unknown rope_type or missing keys.
  """
  dim = _check_dim(dim)
  theta = _check_theta(theta)
  seq_len = _check_seq_len(seq_len)
  if seq_len is not None and not isinstance(seq_len, int):
    raise TypeError("seq_len must be a static Python int for rope_frequencies (it returns one set of "
                    "frequencies); pass per-row or traced lengths to rotary_cos_sin / apply_rotary.")
  params = _normalise_scaling(scaling, theta)
  inv_freq, attention_factor = _inv_freq_f64(dim, theta, params, seq_len)
  return jnp.asarray(inv_freq, dtype=jnp.float32), float(attention_factor)


def row_lengths(positions) -> jax.Array:
  """Each row's length as the length-dependent scalings read it: int[...] = max(positions of the
  row) + 1 over the last axis of positions [..., T] (padding has position 0: no length)."""
  return jnp.max(jnp.asarray(positions), axis=-1) + 1


def is_length_dependent(scaling: Mapping[str, Any] | None) -> bool:
  """True for the scalings whose frequencies change with the sequence length (dynamic,
  longrope): a key's rotation then depends on how long the sequence is, not only on its
  position, so cached keys must be rotated again as the sequence grows."""
  if not scaling:
    return False
  params = dict(scaling)
  return params.get("rope_type", params.get("type")) in LENGTH_DEPENDENT_TYPES


def frequencies_change(scaling: Mapping[str, Any] | None, old_len, new_len) -> jax.Array:
  """Whether the rotation at length new_len differs from that at old_len (per row).

  Only the length-dependent scalings ever change: dynamic's base grows with
  max(length, max_position_embeddings); longrope switches to its long factors once the
  length passes original_max_position_embeddings.

  Args:
    scaling: None or an HF-style rope_parameters dict.
    old_len, new_len: int arrays of the same shape (e.g. [B]), or Python ints.

  Returns:
    bool array of that shape.
  """
  old_len, new_len = jnp.asarray(old_len), jnp.asarray(new_len)
  params = _normalise_scaling(scaling, float(dict(scaling or {}).get("rope_theta") or 10000.0))
  rope_type = None if params is None else params["rope_type"]
  if rope_type == "dynamic":
    mpe = _positive(params, "max_position_embeddings", "dynamic")
    return jnp.maximum(old_len, mpe) != jnp.maximum(new_len, mpe)
  if rope_type == "longrope":
    omp = params["original_max_position_embeddings"]
    return (old_len > omp) != (new_len > omp)
  return jnp.zeros(jnp.broadcast_shapes(old_len.shape, new_len.shape), bool)


def check_scaling(scaling: Mapping[str, Any] | None, *, dim: int | None = None, theta: float = 10000.0,
                  dim_name: str | None = None) -> dict[str, Any] | None:
  """Validates a rope_parameters dict now (at config load), for the rotary dim it will rotate.

  Every branch a run can take is checked: both of longrope's factor sets, and dynamic's base
  past its original length.

  Args:
    scaling: None or an HF-style rope_parameters dict (see `rope_frequencies`).
    dim: the rotary dim R. None checks everything that does not depend on it (longrope's two
      factor lists must still have equal lengths); check again once R is known.
    theta: the RoPE base.
    dim_name: how to name R in an error, e.g. "the head dim 16 (rotary_dim is None)".

  Returns:
    The normalised dict (with 'rope_type'), or None for no scaling.

  Raises:
    ValueError / TypeError: naming the bad key, its value and what was expected.
  """
  theta = _check_theta(theta)
  params = _normalise_scaling(scaling, theta)
  if params is None:
    return None
  rope_type = params["rope_type"]
  if dim is None:
    if rope_type != "longrope":
      dim = 64  # nothing else these types check depends on R beyond R > 2
    else:
      _require(params, ("short_factor", "long_factor"), "longrope")
      short, long = (np.shape(params[k]) for k in ("short_factor", "long_factor"))
      if len(short) != 1 or short != long:
        raise ValueError(f"scaling['short_factor'] and ['long_factor'] for rope_type 'longrope' must be two "
                         f"lists of rotary_dim // 2 numbers each; got shapes {short} and {long}.")
      dim = 2 * short[0]
  dim = _check_dim(dim, dim_name or "dim")
  lengths = (None,)  # past the original length too, where the other branch is taken:
  if rope_type == "dynamic":
    lengths = (None, 2 * int(params.get("max_position_embeddings") or 1))
  elif rope_type == "longrope":
    lengths = (None, int(params["original_max_position_embeddings"]) + 1)
  for seq_len in lengths:
    try:
      _inv_freq_f64(dim, theta, params, seq_len)
    except ValueError as e:
      if dim_name is None:
        raise
      raise ValueError(f"{e} The rotary dim here is {dim_name}.") from None
  return params


# --------------------------------------------------------------------------------------
# Exact phase reduction.
# --------------------------------------------------------------------------------------


def _turn_words(inv_freq: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Splits f = inv_freq / 2pi mod 1 into 32-bit words: f ~= (a + c * 2^-32) * 2^-32.

  Returns uint32 arrays a, c and float32 f (for the fractional part of float positions).
  """
  turns = np.asarray(inv_freq, np.float64) / _TWO_PI
  frac = turns - np.floor(turns)
  scaled = frac * 2.0**32
  a = np.floor(scaled)
  c = np.floor((scaled - a) * 2.0**32)
  return a.astype(np.uint32), c.astype(np.uint32), turns.astype(np.float32)


def _phase_turns_int(pos: jax.Array, a: jax.Array, c: jax.Array) -> jax.Array:
  """frac(pos * f) in units of 2^-32 turns as int32 (so the phase lies in [-pi, pi)).

  pos: int32[..., T]; a, c: uint32[K], or traced uint32[..., 1, K] (per-row choices, longrope).
  Returns int32[..., T, K].
  uint32 products wrap modulo 2^32, which is exactly the reduction modulo one turn.
  The low word c contributes only the high half of pos * c, built from 16-bit pieces;
  the dropped carries are < 3 units of 2^-32 turns.
  """
  p = pos[..., None]
  negative = p < 0
  u = jnp.abs(p).astype(jnp.uint32)  # |int32 min| wraps to 2^31, which is still right as uint32.
  p_hi, p_lo = u >> 16, u & 0xFFFF
  c_hi, c_lo = c >> 16, c & 0xFFFF
  t = u * a + p_hi * c_hi + ((p_hi * c_lo) >> 16) + ((p_lo * c_hi) >> 16)
  t = jnp.where(negative, jnp.uint32(0) - t, t)
  return jax.lax.bitcast_convert_type(t, jnp.int32)


def _exact_angles(positions: jax.Array, a, c, f32, dtype) -> jax.Array:
  """Angles positions * inv_freq reduced to about [-pi, pi], exact to ~2e-7 rad."""
  scale = _TWO_PI / 2.0**32
  if jnp.issubdtype(positions.dtype, jnp.integer):
    pos = positions.astype(jnp.int32)
    return _phase_turns_int(pos, a, c).astype(dtype) * jnp.asarray(scale, dtype)
  # Float positions: exact integer part + the small fractional part in floating point.
  whole = jnp.floor(positions)
  frac = (positions - whole).astype(dtype)
  turns = _phase_turns_int(whole.astype(jnp.int32), a, c).astype(dtype) * jnp.asarray(2.0**-32, dtype)
  return (turns + frac[..., None] * jnp.asarray(f32, dtype)) * jnp.asarray(_TWO_PI, dtype)


def _plain_angles(positions: jax.Array, inv_freq) -> jax.Array:
  """The common float32 product positions * inv_freq (HF, MaxText): not phase-exact."""
  return positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq, jnp.float32)


def _compute_dtype(dtype) -> jnp.dtype:
  return jnp.dtype(jnp.float64) if jnp.dtype(dtype) == jnp.float64 else jnp.dtype(jnp.float32)


def rotary_cos_sin(positions, dim: int, theta: float = 10000.0, *,
                   scaling: Mapping[str, Any] | None = None, seq_len: int | None = None,
                   exact: bool = True, dtype=jnp.float32) -> tuple[jax.Array, jax.Array]:
  """cos and sin of the rotation angles m * theta_i, times the scaling's attention factor.

  Compute these once per layer (or per model) and pass them to `rotate` for both q and k.

  Args:
    positions: int or float array [..., T].
    dim: rotary dim R (even).
    theta, scaling: as in `rope_frequencies`.
    seq_len: the sequence length for the length-dependent scalings (dynamic, longrope):
      a static Python int for every row; an integer array [...] (may be traced) of per-row
      lengths, broadcastable to positions.shape[:-1]; or None (default), which gives each row
      its own length, max(positions of that row) + 1, as a full forward over that row alone
      would (padding has position 0, so it never adds length). A row's rotation therefore
      never depends on its neighbours in the batch. 'longrope' stays phase-exact either way
      (both factor sets are precomputed and selected per row); 'dynamic' with a traced length
      has a traced base, so its angles fall back to the float32 product (a static seq_len
      keeps exact phases). Other scalings ignore it.
    exact: True (default) reduces the phase exactly (module docstring). False uses the
      common float32 product positions * inv_freq, as HF/MaxText do; kept for comparison.
    dtype: float32 (default) or float64 (with jax_enable_x64) for the result.

  Returns:
    (cos, sin), each dtype[..., T, R // 2].
  """
  dim = _check_dim(dim)
  theta = _check_theta(theta)
  seq_len = _check_seq_len(seq_len)
  params = _normalise_scaling(scaling, theta)
  positions = jnp.asarray(positions)
  if not (jnp.issubdtype(positions.dtype, jnp.integer) or jnp.issubdtype(positions.dtype, jnp.floating)):
    raise TypeError(f"positions must be an integer or float array, got dtype {positions.dtype}.")
  dtype = _compute_dtype(dtype)
  rope_type = "default" if params is None else params["rope_type"]
  per_row = rope_type in LENGTH_DEPENDENT_TYPES and not isinstance(seq_len, int)
  if per_row:
    # [..., 1]: each row's length, broadcast over its T positions.
    lengths = (row_lengths(positions) if seq_len is None else seq_len)[..., None]

  if per_row and rope_type == "dynamic":
    # Traced base per row (float32, as HF computes it at run time): not phase-exact.
    base = _dynamic_base(dim, theta, params, lengths.astype(jnp.float32))
    angles = _plain_angles(positions, 1.0 / base[..., None] ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
    attention_factor = 1.0
  elif per_row:  # longrope: the long factors for rows longer than the original length
    short, attention_factor = _inv_freq_f64(dim, theta, params, None, long=False)
    long, _ = _inv_freq_f64(dim, theta, params, None, long=True)
    use_long = (lengths > params["original_max_position_embeddings"])[..., None]  # [..., 1, 1]
    if exact:
      words = [jnp.where(use_long, jnp.asarray(lw), jnp.asarray(sw))
               for lw, sw in zip(_turn_words(long), _turn_words(short))]
      angles = _exact_angles(positions, *words, dtype)
    else:
      angles = _plain_angles(positions, jnp.where(use_long, long.astype(np.float32), short.astype(np.float32)))
  else:
    inv_freq, attention_factor = _inv_freq_f64(dim, theta, params, seq_len if isinstance(seq_len, int) else None)
    if exact:
      angles = _exact_angles(positions, *_turn_words(inv_freq), dtype)
    else:
      angles = _plain_angles(positions, inv_freq)

  angles = angles.astype(dtype)
  cos, sin = jnp.cos(angles), jnp.sin(angles)
  if attention_factor != 1.0:
    cos, sin = cos * attention_factor, sin * attention_factor
  return cos, sin


# --------------------------------------------------------------------------------------
# Rotation.
# --------------------------------------------------------------------------------------


def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array, *, layout: str = "interleaved",
           rotary_dim: int | None = None) -> jax.Array:
  """Rotates feature pairs of x by precomputed angles (eq. 34): R x = x * cos + x' * sin.

  Args:
    x: float[..., T, N, H].
    cos, sin: float[..., T, K] from `rotary_cos_sin`, broadcastable against x without heads.
    layout: "interleaved" or "half".
    rotary_dim: R = 2K; defaults to 2 * cos.shape[-1]. Features R..H pass through unchanged.

  Returns:
    Array like x (same shape and dtype); internals in float32 (float64 for float64 x).
  """
  layout = _check_layout(layout)
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise TypeError(f"x must be a floating-point array [..., T, N, H], got dtype {x.dtype}; cast it first.")
  rd = 2 * cos.shape[-1] if rotary_dim is None else rotary_dim
  head_dim = x.shape[-1]
  if rd != 2 * cos.shape[-1] or rd > head_dim:
    raise ValueError(f"rotary_dim={rd} must equal 2 * cos.shape[-1] = {2 * cos.shape[-1]} "
                     f"and be <= head dim {head_dim}.")
  cdt = _compute_dtype(x.dtype)
  # Materialise the [..., T, K] tables once. Without the barrier XLA fuses the phase and
  # cos/sin computation into the output loop and redoes it for every head and batch row
  # (2x slower on CPU; bench/rope.py).
  cos, sin = jax.lax.optimization_barrier((cos.astype(cdt), sin.astype(cdt)))
  cos, sin = cos[..., None, :], sin[..., None, :]  # [..., T, 1, K]: broadcast over heads.
  xr = x[..., :rd].astype(cdt)
  half = rd // 2
  # bf16/fp16 x and the half layout view the rotated features as a pair axis and a K axis and
  # write the result with one stack, which XLA emits as a single streaming loop (a concatenate
  # of the two halves was 1.7x slower on CPU).
  if layout == "interleaved" and x.dtype == cdt:
    # float32/float64 x: out = x * C + swap(x) * S with the tables widened to [..., T, 1, R]
    # (C = cos repeated per pair, S = (-sin, sin) per pair) and swap(x) exchanging each pair's
    # members. Every output element then reads the same lanes of x, C and S: 1.4x faster on CPU
    # than the stack below (bench/rope.py). For bf16/fp16 x, which is cast, the stack is faster.
    wide_cos = jnp.repeat(cos, 2, axis=-1)
    wide_sin = jnp.stack([-sin, sin], axis=-1).reshape(wide_cos.shape)
    wide_cos, wide_sin = jax.lax.optimization_barrier((wide_cos, wide_sin))
    swapped = xr.reshape(*xr.shape[:-1], half, 2)[..., ::-1].reshape(xr.shape)
    out = xr * wide_cos + swapped * wide_sin
  elif layout == "interleaved":
    pairs = xr.reshape(*xr.shape[:-1], half, 2)
    x1, x2 = pairs[..., 0], pairs[..., 1]
    out = jnp.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).reshape(xr.shape)
  else:
    halves = xr.reshape(*xr.shape[:-1], 2, half)
    x1, x2 = halves[..., 0, :], halves[..., 1, :]
    out = jnp.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-2).reshape(xr.shape)
  out = out.astype(x.dtype)
  if rd < head_dim:
    out = jnp.concatenate([out, x[..., rd:]], axis=-1)
  return out


def _check_x_positions(x: jax.Array, positions: jax.Array) -> None:
  if x.ndim < 3:
    raise ValueError(
        f"x must be [..., T, N, H] (length, heads, head dim last), got shape {x.shape}; "
        "add a heads axis with x[..., None, :] if you have a single head.")
  lead = x.shape[:-2]
  ok = positions.ndim <= len(lead)
  if ok:
    try:
      ok = np.broadcast_shapes(positions.shape, lead) == lead
    except ValueError:
      ok = False
  if not ok:
    raise ValueError(
        f"positions shape {positions.shape} does not broadcast to x.shape[:-2] = {lead} "
        f"(x is [..., T, N, H] with shape {x.shape}). Positions must be [..., T]; if x is laid "
        "out [B, N, T, H], transpose it to [B, T, N, H] first.")


def apply_rotary(x, positions, theta: float = 10000.0, *, layout: str = "interleaved",
                 rotary_dim: int | None = None, scaling: Mapping[str, Any] | None = None,
                 seq_len: int | None = None, exact: bool = True) -> jax.Array:
  """Applies RoPE (eq. 34, the fast form of the block-diagonal rotation of eq. 15) to x.

  For queries q_m and keys k_n rotated with this function, q_m . k_n depends on the
  positions only through m - n (eq. 16). Apply it to queries and keys, never to values.

  Args:
    x: float[..., T, N, H], any float dtype; bf16/fp16 are rotated with float32 internals.
    positions: int (or float) array broadcastable to x.shape[:-2], i.e. [..., T]. May be
      traced and may differ per example (packing, left padding, decode offsets).
    theta: the base of theta_i = theta ** (-2i / R) (the paper's 10000).
    layout: "interleaved" (pairs (2i, 2i+1), eq. 34, HF RoFormer) or "half" (pairs
      (i, i + R/2), GPT-NeoX / LLaMA).
    rotary_dim: R, rotate only the first R features (partial rotary, even, <= H);
      None rotates all H.
    scaling: None or an HF-style rope_parameters dict (see `rope_frequencies`). Its
      attention factor multiplies cos and sin, as in HF.
    seq_len: length for 'dynamic' / 'longrope' scaling: a static int, per-row lengths, or
      None = each row's max position + 1; see `rotary_cos_sin`.
    exact: exact phase reduction (default); False = the common float32 product.

  Returns:
    Array with x's shape and dtype.

  Raises:
    TypeError: integer x, non-numeric positions, traced theta.
    ValueError: bad layout, odd or oversized rotary_dim, positions that do not broadcast,
      unknown rope_type or a missing scaling key.
  """
  x = jnp.asarray(x)
  positions = jnp.asarray(positions)
  _check_x_positions(x, positions)  # x's dtype and the layout are checked by `rotate`.
  head_dim = x.shape[-1]
  if rotary_dim is None:
    if head_dim % 2:
      raise ValueError(f"x's head dim H={head_dim} (x shape {x.shape}) is odd, but RoPE rotates feature pairs; "
                       "give x an even head dim, or pass an even rotary_dim < H to rotate only part of it.")
    rd = head_dim
  else:
    rd = _check_dim(rotary_dim, "rotary_dim")
  if rd > head_dim:
    raise ValueError(f"rotary_dim={rd} exceeds the head dim H={head_dim} of x (shape {x.shape}); "
                     "use rotary_dim <= H or None to rotate all features.")
  cos, sin = rotary_cos_sin(positions, rd, theta, scaling=scaling, seq_len=seq_len, exact=exact,
                            dtype=_compute_dtype(x.dtype))
  return rotate(x, cos, sin, layout=layout, rotary_dim=rd)


# --------------------------------------------------------------------------------------
# References and analysis (float64 NumPy).
# --------------------------------------------------------------------------------------


def rotation_matrix(position, dim: int, theta: float = 10000.0) -> np.ndarray:
  """The dense rotation matrix R^d_{Theta,m} of eq. (15), in float64 (a test reference).

  Block-diagonal with 2x2 blocks [[cos m t_i, -sin m t_i], [sin m t_i, cos m t_i]] acting
  on the interleaved pairs (2i, 2i + 1), t_i = theta ** (-2i / dim).

  Returns:
    float64[dim, dim]; f(x, m) = R @ x (eq. 14) for a single vector x of size dim.
  """
  dim = _check_dim(dim)
  theta = _check_theta(theta)
  angles = float(position) * _default_inv_freq(dim, theta)
  c, s = np.cos(angles), np.sin(angles)
  r = np.zeros((dim, dim), dtype=np.float64)
  i = np.arange(0, dim, 2)
  r[i, i], r[i, i + 1], r[i + 1, i], r[i + 1, i + 1] = c, -s, s, c
  return r


def long_term_decay(distances, dim: int, theta: float = 10000.0) -> np.ndarray:
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
  dim = _check_dim(dim)
  theta = _check_theta(theta)
  m = np.asarray(distances, dtype=np.float64).reshape(-1)
  phases = np.exp(1j * np.outer(m, _default_inv_freq(dim, theta)))  # [M, d/2]
  partial_sums = np.cumsum(phases, axis=-1)  # S_{j+1} for j = 0 .. d/2 - 1
  return np.abs(partial_sums).mean(axis=-1)


# --------------------------------------------------------------------------------------
# Position helpers.
# --------------------------------------------------------------------------------------


def positions_from_segments(segment_ids) -> jax.Array:
  """Positions that restart at 0 at every packed segment.

  A new segment starts wherever the id changes from the previous token, so padding
  (conventionally id 0) at the end forms its own segment; mask it out of attention.

  Args:
    segment_ids: int[..., T].

  Returns:
    int32[..., T]. Example: [1, 1, 1, 2, 2, 0] -> [0, 1, 2, 0, 1, 0].
  """
  seg = jnp.asarray(segment_ids)
  if seg.ndim < 1 or not jnp.issubdtype(seg.dtype, jnp.integer):
    raise TypeError(f"segment_ids must be an integer array [..., T], got dtype {seg.dtype}, shape {seg.shape}.")
  t = seg.shape[-1]
  index = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), seg.shape)
  starts = jnp.concatenate([jnp.ones(seg.shape[:-1] + (1,), bool), seg[..., 1:] != seg[..., :-1]], axis=-1)
  last_start = jax.lax.cummax(jnp.where(starts, index, 0), axis=seg.ndim - 1)
  return index - last_start


def positions_from_mask(mask) -> jax.Array:
  """Positions 0, 1, ... over the real tokens of a left- or right-padded batch.

  Args:
    mask: bool or int[..., T], nonzero for real tokens.

  Returns:
    int32[..., T]; padding gets position 0. Example: [0, 0, 1, 1, 1] -> [0, 0, 0, 1, 2].
  """
  mask = jnp.asarray(mask)
  if mask.ndim < 1 or not (jnp.issubdtype(mask.dtype, jnp.integer) or mask.dtype == jnp.bool_):
    raise TypeError(f"mask must be a bool or integer array [..., T], got dtype {mask.dtype}, shape {mask.shape}.")
  real = mask.astype(bool)
  pos = jnp.cumsum(real.astype(jnp.int32), axis=-1) - 1
  return jnp.where(real, pos, 0)


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
  head_dim = _check_dim(head_dim, "head_dim")
  rd = _check_dim(head_dim if rotary_dim is None else rotary_dim, "rotary_dim")
  if rd > head_dim:
    raise ValueError(f"rotary_dim={rd} exceeds head_dim={head_dim}.")
  _check_layout(src), _check_layout(dst)
  perm = np.arange(head_dim)
  if src == dst:
    return perm
  to_half = np.concatenate([np.arange(0, rd, 2), np.arange(1, rd, 2)])  # half[j] = inter[to_half[j]]
  perm[:rd] = to_half if dst == "half" else np.argsort(to_half)
  return perm


def convert_qk_layout(w, *, head_dim: int, src: str, dst: str, rotary_dim: int | None = None,
                      axis: int = -1):
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
