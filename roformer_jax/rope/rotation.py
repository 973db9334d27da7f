"""Rotation: exact phases, cos/sin tables, `rotate` and `apply_rotary` (eq. 34)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from roformer_jax.rope import float2
from roformer_jax.rope.frequencies import (LENGTH_DEPENDENT_TYPES, check_dim, check_layout, check_seq_len,
                                           check_theta, dynamic_base, inv_freq_f64, normalise_scaling,
                                           pair_axes, pair_frequencies, positive, row_lengths)

_TWO_PI = 2.0 * math.pi

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


def _dynamic_turn_words(lengths: jax.Array, dim: int, theta: float,
                        params: Mapping[str, Any]) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`_turn_words` of dynamic NTK's frequencies at traced per-row lengths, formed at run time.

  inv_freq_i = base ** (-2i / R) with base = theta * s ** (R / (R - 2)) and
  s = factor * max(L, mpe) / mpe - (factor - 1) (`frequencies.dynamic_base`), so
  ln(inv_freq_i / 2pi) = -(2i / R) ln(theta) - ln(2pi) - (2i / (R - 2)) ln(s). s, its log and the
  exponential are taken in float-float (`float2`, ~1e-14), then split into the words: the same
  exact phase reduction as a static length gets, to a word error of ~2^-52 turns per position.
  Rows no longer than mpe keep the static words (base = theta), bit for bit.

  lengths: int[...] per-row lengths (float for float positions). Returns uint32 a, c and float32
  f, each [..., K].
  """
  static = _turn_words(inv_freq_f64(dim, theta, params, None)[0])  # also checks the keys and R > 2
  factor = positive(params, "factor", "dynamic")
  mpe = positive(params, "max_position_embeddings", "dynamic")
  length = jnp.asarray(lengths)[..., None]  # [..., 1]
  if jnp.issubdtype(length.dtype, jnp.integer):
    longer, length_pair = length > math.floor(mpe), float2.from_int(length)  # L > mpe for an integer L
  else:  # float positions give a float length (max position + 1)
    length = length.astype(jnp.float32)
    longer, length_pair = length > mpe, (length, jnp.zeros_like(length))
  d = float2.add(length_pair, float2.const(-mpe))  # L - mpe, exact for an integer mpe
  s = float2.add(float2.const(1.0), float2.mul(float2.const(factor / mpe), d))
  s = float2.where(longer, s, float2.const(2.0))  # any s >= 1 for short rows (discarded below)
  i2 = np.arange(0, dim, 2, dtype=np.float64)
  log_f = float2.add(float2.const(-i2 / dim * math.log(theta) - math.log(_TWO_PI)),
                     float2.mul(float2.const(-i2 / (dim - 2)), float2.log(s)))
  f = float2.exp(log_f)  # [..., K] turns per position
  a, c = float2.turn_words(f)
  return (jnp.where(longer, a, static[0]), jnp.where(longer, c, static[1]),
          jnp.where(longer, f[0], static[2]))


def _phase_turns_int(pos: jax.Array, a: jax.Array | np.ndarray, c: jax.Array | np.ndarray) -> jax.Array:
  """frac(pos * f) in units of 2^-32 turns as int32 (so the phase lies in [-pi, pi)).

  pos: int32[..., T, 1] (one axis) or [..., T, K] (each pair's own axis, `_pair_positions`);
  a, c: uint32[K], or traced uint32[..., 1, K] (per-row choices, longrope).
  Returns int32[..., T, K].
  uint32 products wrap modulo 2^32, which is exactly the reduction modulo one turn.
  The low word c contributes only the high half of pos * c, built from 16-bit pieces;
  the dropped carries are < 3 units of 2^-32 turns.
  """
  negative = pos < 0
  u = jnp.abs(pos).astype(jnp.uint32)  # |int32 min| wraps to 2^31, which is still right as uint32.
  p_hi, p_lo = u >> 16, u & 0xFFFF
  c_hi, c_lo = c >> 16, c & 0xFFFF
  t = u * a + p_hi * c_hi + ((p_hi * c_lo) >> 16) + ((p_lo * c_hi) >> 16)
  t = jnp.where(negative, jnp.uint32(0) - t, t)
  return jax.lax.bitcast_convert_type(t, jnp.int32)


def _pair_positions(positions: jax.Array, axes: np.ndarray | None) -> jax.Array:
  """Each pair's position: [..., T, 1] from positions [..., T] (one axis), or [..., T, K] from
  positions [..., T, A], pair p reading axis axes[p] (a static gather, shared by all heads)."""
  if axes is None:
    return positions[..., None]
  return jnp.take(positions, jnp.asarray(axes), axis=-1)


def _exact_angles(positions: jax.Array, a: jax.Array | np.ndarray, c: jax.Array | np.ndarray,
                  f32: jax.Array | np.ndarray, dtype: DTypeLike) -> jax.Array:
  """Angles positions * inv_freq reduced to about [-pi, pi], exact to ~2e-7 rad.

  positions: [..., T, 1] or [..., T, K] (`_pair_positions`)."""
  scale = _TWO_PI / 2.0**32
  if jnp.issubdtype(positions.dtype, jnp.integer):
    pos = positions.astype(jnp.int32)
    return _phase_turns_int(pos, a, c).astype(dtype) * jnp.asarray(scale, dtype)
  # Float positions: exact integer part + the small fractional part in floating point.
  whole = jnp.floor(positions)
  frac = (positions - whole).astype(dtype)
  turns = _phase_turns_int(whole.astype(jnp.int32), a, c).astype(dtype) * jnp.asarray(2.0**-32, dtype)
  return (turns + frac * jnp.asarray(f32, dtype)) * jnp.asarray(_TWO_PI, dtype)


def _plain_angles(positions: jax.Array, inv_freq: ArrayLike) -> jax.Array:
  """The common float32 product positions * inv_freq (HF, MaxText): not phase-exact."""
  return positions.astype(jnp.float32) * jnp.asarray(inv_freq, jnp.float32)


def _compute_dtype(dtype: DTypeLike) -> jnp.dtype:
  return jnp.dtype(jnp.float64) if jnp.dtype(dtype) == jnp.float64 else jnp.dtype(jnp.float32)


@jax.named_scope("rope")  # profiles group the rotation's ops under "rope" (bench/trace_summary.py)
def rotary_cos_sin(positions: ArrayLike, dim: int, theta: float = 10000.0, *,
                   scaling: Mapping[str, Any] | None = None, seq_len: int | jax.Array | None = None,
                   exact: bool = True, dtype: DTypeLike = jnp.float32, sections: Any = None,
                   section_layout: str = "chunked",
                   frequencies: Any = "shared") -> tuple[jax.Array, jax.Array]:
  """cos and sin of the rotation angles m * theta_i, times the scaling's attention factor.

  Compute these once per layer (or per model) and pass them to `rotate` for both q and k.

  Args:
    positions: int or float array [..., T] (one position axis), or [..., T, A] with A =
      len(sections) position axes (multi-axis RoPE: pair p is rotated by its own axis's position).
    dim: rotary dim R (even).
    theta, scaling: as in `rope_frequencies`.
    seq_len: the sequence length for the length-dependent scalings (dynamic, longrope):
      a static Python int for every row; an integer array [...] (may be traced) of per-row
      lengths, broadcastable to positions.shape[:-1]; or None (default), which gives each row
      its own length, max(positions of that row) + 1, as a full forward over that row alone
      would (padding has position 0, so it never adds length). A row's rotation therefore
      never depends on its neighbours in the batch. Both are phase-exact either way:
      'longrope' precomputes both factor sets and selects per row; 'dynamic' with a traced
      length forms each row's frequency words at run time in float-float (`float2`), to
      ~3e-7 rad up to position 2^24 like a static length. Other scalings ignore it. With several
      axes a row's length is its largest position on any axis + 1.
    exact: True (default) reduces the phase exactly (module docstring). False uses the
      common float32 product positions * inv_freq, as HF/MaxText do; kept for comparison.
    dtype: float32 (default) or float64 (with jax_enable_x64) for the result.
    sections: None (one position axis), or the number of rotated pairs each of the A position
      axes drives, adding up to R / 2 (e.g. Qwen2-VL's mrope_section (16, 24, 24)).
    section_layout: how the sections lie over the pairs: "chunked", "interleaved" (Qwen3-VL)
      or "videorope" (`frequencies.SECTION_LAYOUTS`).
    frequencies: which frequency each pair gets: "shared" (theta ** (-2p / R), default),
      "per_axis" (each section its own spectrum: axial 2-D RoPE), "split" (Pixtral), or
      explicit values (radians per position): a tuple / NumPy array of R / 2 numbers is static
      (exact phases), a jax.Array is traced (learned frequencies: float32 product, with
      gradients). A traced array may also be dense, [A, R / 2] (every pair listens to every axis:
      phi_p = sum_a pos_a * F[a, p], RoPE-Mixed) or [A, N, R / 2] (per head, giving cos/sin
      [..., T, N, R / 2]). Explicit frequencies take no scaling.

  Returns:
    (cos, sin), each dtype[..., T, R // 2] ([..., T, N, R // 2] for per-head frequencies).
  """
  dim = check_dim(dim)
  theta = check_theta(theta)
  seq_len = check_seq_len(seq_len)
  params = normalise_scaling(scaling, theta)
  positions = jnp.asarray(positions)
  if not (jnp.issubdtype(positions.dtype, jnp.integer) or jnp.issubdtype(positions.dtype, jnp.floating)):
    raise TypeError(f"positions must be an integer or float array, got dtype {positions.dtype}.")
  dtype = _compute_dtype(dtype)
  k = dim // 2
  axes = None
  if sections is not None:
    axes = pair_axes(sections, k, layout=section_layout)
    num_axes = len(tuple(sections))
    if positions.ndim < 2 or positions.shape[-1] != num_axes:
      raise ValueError(
          f"sections={tuple(sections)} rotate by {num_axes} position axes, so positions must be "
          f"[..., T, {num_axes}]; got shape {positions.shape}. Build them with rope.multimodal_positions "
          "or rope.grid_positions.")
  custom = not isinstance(frequencies, str) or frequencies != "shared"
  if custom and params is not None:
    raise ValueError(f"frequencies={frequencies!r} takes no scaling (got rope_type {params['rope_type']!r}); "
                     "the scalings rescale the one shared spectrum.")
  if isinstance(frequencies, jax.Array):
    return _learned_cos_sin(positions, frequencies, k, axes, sections, dtype)

  rope_type = "default" if params is None else params["rope_type"]
  per_row = rope_type in LENGTH_DEPENDENT_TYPES and not isinstance(seq_len, int)
  if per_row:
    # [..., 1]: each row's length, broadcast over its T positions.
    lengths = row_lengths(positions if axes is None else positions.max(axis=-1))
    lengths = (lengths if seq_len is None else cast(jax.Array, seq_len))[..., None]  # per_row: not an int
    scaled = cast(Mapping[str, Any], params)  # per_row: a length-dependent rope_type, so a scaling
  pp = _pair_positions(positions, axes)  # [..., T, 1] or [..., T, K]

  if per_row and rope_type == "dynamic":
    attention_factor = 1.0
    if exact:  # the traced base's frequencies in float-float, split into words per row: exact phases
      # The barrier keeps the words [..., 1, K] out of the [..., T, K] phase fusion: fused, XLA
      # would redo the float-float exp and log at every position (2.3x the op's time on CPU).
      a, c, f32 = jax.lax.optimization_barrier(_dynamic_turn_words(lengths, dim, theta, scaled))
      angles = _exact_angles(pp, a, c, f32, dtype)
    else:  # a float32 base per row, as HF computes it at run time
      base = dynamic_base(dim, theta, scaled, lengths.astype(jnp.float32))
      angles = _plain_angles(pp, 1.0 / base[..., None] ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
  elif per_row:  # longrope: the long factors for rows longer than the original length
    short, attention_factor = inv_freq_f64(dim, theta, scaled, None, long=False)
    long, _ = inv_freq_f64(dim, theta, scaled, None, long=True)
    use_long = (lengths > scaled["original_max_position_embeddings"])[..., None]  # [..., 1, 1]
    if exact:
      a, c, f32 = [jnp.where(use_long, jnp.asarray(lw), jnp.asarray(sw))
                   for lw, sw in zip(_turn_words(long), _turn_words(short), strict=True)]
      angles = _exact_angles(pp, a, c, f32, dtype)
    else:
      angles = _plain_angles(pp, jnp.where(use_long, long.astype(np.float32), short.astype(np.float32)))
  else:
    if custom:
      inv_freq = pair_frequencies(dim, theta, sections=sections, kind=frequencies, layout=section_layout)
      attention_factor = 1.0
    else:
      inv_freq, attention_factor = inv_freq_f64(dim, theta, params, seq_len if isinstance(seq_len, int) else None)
    if exact:
      angles = _exact_angles(pp, *_turn_words(inv_freq), dtype)
    else:
      angles = _plain_angles(pp, inv_freq)

  angles = angles.astype(dtype)
  cos, sin = jnp.cos(angles), jnp.sin(angles)
  if attention_factor != 1.0:
    cos, sin = cos * attention_factor, sin * attention_factor
  return cos, sin


def _learned_cos_sin(positions: jax.Array, freqs: jax.Array, k: int, axes: np.ndarray | None, sections: Any,
                     dtype: DTypeLike) -> tuple[jax.Array, jax.Array]:
  """cos/sin from traced frequencies: [K] (per pair, one axis or gathered by sections),
  [A, K] dense, or [A, N, K] dense per head. float32 products, differentiable in freqs and in
  float positions."""
  cdt = jnp.promote_types(dtype, jnp.float32)
  freqs = freqs.astype(cdt)  # never the model dtype: bf16 frequencies would round every phase
  pos = positions.astype(cdt)
  if freqs.ndim == 1:
    if freqs.shape != (k,):
      raise ValueError(f"frequencies must have R / 2 = {k} entries, got shape {freqs.shape}.")
    angles = _pair_positions(pos, axes) * freqs
  else:
    a = freqs.shape[0]
    if freqs.ndim not in (2, 3) or freqs.shape[-1] != k or pos.ndim < 2 or pos.shape[-1] != a:
      raise ValueError(
          f"dense frequencies must be [A, {k}] or [A, N, {k}] with positions [..., T, A]; got frequencies "
          f"{freqs.shape} and positions {positions.shape}.")
    if sections is not None:
      raise ValueError("dense frequencies [A, ...] already say which axis each pair reads; pass sections=None.")
    spec = "...a,ak->...k" if freqs.ndim == 2 else "...a,ank->...nk"
    angles = jnp.einsum(spec, pos, freqs, precision=jax.lax.Precision.HIGHEST)
  return jnp.cos(angles).astype(dtype), jnp.sin(angles).astype(dtype)


def xpos_amplitude(positions: ArrayLike, dim: int, *, scale_base: float = 512.0, center: ArrayLike = 0,
                   key: bool = False, dtype: DTypeLike = jnp.float32) -> jax.Array:
  """xPos's per-pair amplitude (Sun et al. 2022): zeta_p ** ((n - c) / scale_base), inverted for keys.

  zeta_p = (2p + 0.4 R) / (1.4 R) in (0.29, 1). Scaling q_n by zeta ** ((n - c) / gamma) and k_m
  by zeta ** (-(m - c) / gamma) makes each pair's contribution to q . k decay as
  zeta_p ** ((n - m) / gamma): a function of n - m alone, for ANY centre c. One centre for q and k
  (not one per call, as rotary-embedding-torch's cached path does) is what makes cached
  decoding equal the full call. c keeps the amplitudes near 1: |n - c| / gamma must stay below
  about 80 / ln(1 / zeta_0) ~ 64 for float32 / bf16 (about 7 for fp16: compute in float32 and
  cast after the rotation, as `rotate` does).

  Args:
    positions: int or float [..., T] (n - c is formed in int32 for integer positions).
    dim: rotary dim R. scale_base: gamma (512). center: c, a static int or int array
      broadcastable to positions. key: True gives the keys' inverse amplitude.

  Returns:
    dtype[..., T, R // 2].
  """
  dim = check_dim(dim)
  positions = jnp.asarray(positions)
  zeta = (np.arange(0, dim, 2, dtype=np.float64) + 0.4 * dim) / (1.4 * dim)
  offset = (positions - jnp.asarray(center, positions.dtype)).astype(jnp.float32)
  exponent = offset[..., None] * jnp.asarray(np.log(zeta) / float(scale_base), jnp.float32)
  return jnp.exp(-exponent if key else exponent).astype(_compute_dtype(dtype))


# --------------------------------------------------------------------------------------
# Rotation.
# --------------------------------------------------------------------------------------


CHANNELS = ("first", "last")  # which R features of a head rotate (`rotate`'s channels)
TABLES = ("pairs", "half")  # how `rotate` lays the K angles over the R channels (`rotate`'s tables)


def check_heads(heads: Any) -> tuple[int, int]:
  """(start, stop) of the heads that rotate, from a count n (the first n: (0, n)) or a (start, stop) pair; a
  ValueError for anything else (negative, empty, not ints)."""
  pair = (0, heads) if isinstance(heads, int) and not isinstance(heads, bool) else heads
  if (not isinstance(pair, (tuple, list)) or len(pair) != 2
      or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in pair)
      or not 0 <= pair[0] < pair[1]):
    raise ValueError(f"rope heads={heads!r} must be a count n >= 1 (the first n heads rotate) or a (start, stop) "
                     "pair with 0 <= start < stop (heads [start, stop) rotate; the others pass unchanged).")
  return int(pair[0]), int(pair[1])


@jax.named_scope("rope")
def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array, *, layout: str = "interleaved",
           rotary_dim: int | None = None, blocks: int = 1, channels: str = "first",
           heads: tuple[int, int] | None = None, tables: str = "pairs") -> jax.Array:
  """Rotates feature pairs of x by precomputed angles (eq. 34): R x = x * cos + x' * sin.

  Args:
    x: float[..., T, N, H].
    cos, sin: float[..., T, K] from `rotary_cos_sin`, broadcastable against x without heads;
      or float[..., T, N, K] (per-head angles: same rank as x).
    layout: "interleaved" or "half".
    rotary_dim: R = 2K; defaults to 2 * cos.shape[-1]. Features R..H pass through unchanged.
    blocks: the half layout inside each of `blocks` equal contiguous blocks of the R features
      (pairs (i, i + R / (2 blocks)) within a block; block b holds pairs [b K / blocks, (b + 1)
      K / blocks)), as Gemma 4's vision encoder rotates its h and w halves. Interleaved pairs
      are already local, so blocks changes nothing there.
    channels: "first" rotates features [0, R) and passes the rest (partial rotary, GPT-NeoX);
      "last" rotates the last R, [H - R, H), and passes the leading H - R (DeepSeek-V4's
      [nope | rope] heads).
    heads: None (every head rotates), or (start, stop): only heads [start, stop) of x's head
      axis (-2) rotate, the others pass unchanged (Qwen2.5-Omni's DiT rotates its first head
      only). x must then have a head axis, [..., T, N, H] with stop <= N.
    tables: "pairs" (default): both channels of a pair turn by that pair's angle, a rotation.
      "half" (layout "interleaved" only; NOT a rotation): each of the `blocks` blocks of the R
      features takes its K / blocks angles laid out per channel as rotate_half's tables,
      [a_0 .. a_{K/b-1}, a_0 .. a_{K/b-1}], so channel c of a block uses angle c mod (K / b),
      while the mixing is interleaved: out_{2k} = x_{2k} cos a_{2k mod K/b} - x_{2k+1} sin a_{2k mod K/b},
      out_{2k+1} = x_{2k+1} cos a_{2k+1 mod K/b} + x_{2k} sin a_{2k+1 mod K/b} (V-JEPA 2's
      `rotate_queries_or_keys`). The two channels of a pair turn by different angles: the map
      is not orthogonal and q . k is no function of relative position (docs/rope.md).

  Returns:
    Array like x (same shape and dtype); internals in float32 (float64 for float64 x).
  """
  layout = check_layout(layout)
  if tables not in TABLES:
    raise ValueError(f"tables={tables!r}; expected one of {TABLES}.")
  if tables == "half" and layout != "interleaved":
    raise ValueError("tables='half' lays rotate_half's tables over interleaved pairs (V-JEPA 2); with "
                     "layout='half' those tables are the ordinary rotation: use tables='pairs'.")
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise TypeError(f"x must be a floating-point array [..., T, N, H], got dtype {x.dtype}; cast it first.")
  if heads is not None:
    start, stop = check_heads(heads)
    if x.ndim < 3 or stop > x.shape[-2]:
      raise ValueError(f"heads={(start, stop)} rotates heads [{start}, {stop}) of x's head axis (-2), but x has shape "
                       f"{x.shape}: it needs [..., T, N, H] with N >= {stop} (a tensor without a head axis cannot "
                       "say which heads rotate).")
    if cos.ndim == x.ndim:  # per-head tables [..., T, N, K]: the rotated heads' rows
      cos, sin = cos[..., start:stop, :], sin[..., start:stop, :]
    turned = rotate(x[..., start:stop, :], cos, sin, layout=layout, rotary_dim=rotary_dim, blocks=blocks,
                    channels=channels, tables=tables)
    return jnp.concatenate([x[..., :start, :], turned, x[..., stop:, :]], axis=-2)
  rd = 2 * cos.shape[-1] if rotary_dim is None else rotary_dim
  head_dim = x.shape[-1]
  if channels not in CHANNELS:
    raise ValueError(f"channels={channels!r}; expected one of {CHANNELS} (which R features of the head rotate).")
  if channels == "last" and rd < head_dim:  # the same rotation on the trailing R features
    front = x[..., :head_dim - rd]
    return jnp.concatenate([front, rotate(x[..., head_dim - rd:], cos, sin, layout=layout, blocks=blocks,
                                          tables=tables)], axis=-1)
  if rd != 2 * cos.shape[-1] or rd > head_dim:
    raise ValueError(f"rotary_dim={rd} must equal 2 * cos.shape[-1] = {2 * cos.shape[-1]} "
                     f"and be <= head dim {head_dim}.")
  if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1 or (rd // 2) % blocks:
    raise ValueError(f"blocks={blocks!r} must be a positive int dividing the {rd // 2} rotated pairs.")
  cdt = _compute_dtype(x.dtype)
  # Materialise the [..., T, K] tables once. Without the barrier XLA fuses the phase and
  # cos/sin computation into the output loop and redoes it for every head and batch row
  # (2x slower on CPU; bench/rope.py).
  cos, sin = jax.lax.optimization_barrier((cos.astype(cdt), sin.astype(cdt)))
  if cos.ndim < x.ndim:
    cos, sin = cos[..., None, :], sin[..., None, :]  # [..., T, 1, K]: broadcast over heads.
  xr = x[..., :rd].astype(cdt)
  half = rd // 2
  # bf16/fp16 x and the half layout view the rotated features as a pair axis and a K axis and
  # write the result with one stack, which XLA emits as a single streaming loop (a concatenate
  # of the two halves was 1.7x slower on CPU).
  if tables == "half":  # per-channel tables [a_b | a_b] in each block b, mixed over interleaved pairs (not a rotation)
    per = half // blocks
    wide_cos = jnp.concatenate([cos.reshape(*cos.shape[:-1], blocks, per)] * 2, axis=-1).reshape(
        *cos.shape[:-1], rd)
    wide_sin = jnp.concatenate([sin.reshape(*sin.shape[:-1], blocks, per)] * 2, axis=-1).reshape(
        *sin.shape[:-1], rd)
    wide_sin = wide_sin * jnp.asarray(np.tile([-1.0, 1.0], half), cdt)  # -sin on the even, +sin on the odd channel
    swapped = xr.reshape(*xr.shape[:-1], half, 2)[..., ::-1].reshape(xr.shape)
    out = xr * wide_cos + swapped * wide_sin
  elif layout == "interleaved" and x.dtype == cdt:
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
  elif blocks == 1:
    halves = xr.reshape(*xr.shape[:-1], 2, half)
    x1, x2 = halves[..., 0, :], halves[..., 1, :]
    out = jnp.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-2).reshape(xr.shape)
  else:  # half layout inside each block: [..., blocks, 2, K / blocks]
    halves = xr.reshape(*xr.shape[:-1], blocks, 2, half // blocks)
    x1, x2 = halves[..., 0, :], halves[..., 1, :]
    cos = cos.reshape(*cos.shape[:-1], blocks, half // blocks)
    sin = sin.reshape(*sin.shape[:-1], blocks, half // blocks)
    out = jnp.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-2).reshape(xr.shape)
  out = out.astype(x.dtype)
  if rd < head_dim:
    out = jnp.concatenate([out, x[..., rd:]], axis=-1)
  return out


def _check_x_positions(x: jax.Array, positions: jax.Array, num_axes: int | None = None) -> None:
  if num_axes is not None:  # positions [..., T, A]: the leading [..., T] broadcast like 1-D positions
    if positions.ndim < 2 or positions.shape[-1] != num_axes:
      raise ValueError(f"positions must be [..., T, {num_axes}] for {num_axes} position axes (sections), got shape "
                       f"{positions.shape}.")
    positions = positions[..., 0]
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


def apply_rotary(x: ArrayLike, positions: ArrayLike, theta: float = 10000.0, *, layout: str = "interleaved",
                 rotary_dim: int | None = None, scaling: Mapping[str, Any] | None = None,
                 seq_len: int | jax.Array | None = None, exact: bool = True, sections: Any = None,
                 section_layout: str = "chunked", frequencies: Any = "shared", blocks: int = 1,
                 xpos: Mapping[str, Any] | None = None) -> jax.Array:
  """Applies RoPE (eq. 34, the fast form of the block-diagonal rotation of eq. 15) to x.

  For queries q_m and keys k_n rotated with this function, q_m . k_n depends on the
  positions only through m - n (eq. 16). Apply it to queries and keys, never to values.

  Args:
    x: float[..., T, N, H], any float dtype; bf16/fp16 are rotated with float32 internals.
    positions: int (or float) array broadcastable to x.shape[:-2], i.e. [..., T]; or
      [..., T, A] with `sections` (A position axes, e.g. (t, h, w)). May be traced and may
      differ per example (packing, left padding, decode offsets).
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
    sections, section_layout, frequencies: multi-axis RoPE and explicit or learned
      frequencies; see `rotary_cos_sin`.
    blocks: the half layout inside equal blocks of the rotated features; see `rotate`.
    xpos: None, or {"scale_base": 512.0, "center": 0, "key": False} for xPos amplitudes
      (`xpos_amplitude`): rotate queries with key False and keys with key True.

  Returns:
    Array with x's shape and dtype.

  Raises:
    TypeError: integer x, non-numeric positions, traced theta.
    ValueError: bad layout, odd or oversized rotary_dim, positions that do not broadcast,
      unknown rope_type or a missing scaling key, sections that do not add up to R / 2.
  """
  x = jnp.asarray(x)
  positions = jnp.asarray(positions)
  num_axes = None if sections is None else len(tuple(sections))
  if isinstance(frequencies, jax.Array) and frequencies.ndim >= 2:  # dense [A, ...]: A position axes
    num_axes = frequencies.shape[0]
  _check_x_positions(x, positions, num_axes)
  head_dim = x.shape[-1]
  if rotary_dim is None:
    if head_dim % 2:
      raise ValueError(f"x's head dim H={head_dim} (x shape {x.shape}) is odd, but RoPE rotates feature pairs; "
                       "give x an even head dim, or pass an even rotary_dim < H to rotate only part of it.")
    rd = head_dim
  else:
    rd = check_dim(rotary_dim, "rotary_dim")
  if rd > head_dim:
    raise ValueError(f"rotary_dim={rd} exceeds the head dim H={head_dim} of x (shape {x.shape}); "
                     "use rotary_dim <= H or None to rotate all features.")
  cdt = _compute_dtype(x.dtype)
  cos, sin = rotary_cos_sin(positions, rd, theta, scaling=scaling, seq_len=seq_len, exact=exact, dtype=cdt,
                            sections=sections, section_layout=section_layout, frequencies=frequencies)
  if xpos is not None:
    unknown = set(xpos) - {"scale_base", "center", "key"}
    if unknown:
      raise ValueError(f"xpos has unknown keys {sorted(unknown)}; expected scale_base, center, key.")
    token_pos = positions if num_axes is None else positions[..., 0]
    amp = xpos_amplitude(token_pos, rd, scale_base=xpos.get("scale_base", 512.0), center=xpos.get("center", 0),
                         key=bool(xpos.get("key", False)), dtype=cdt)
    cos, sin = cos * amp, sin * amp
  return rotate(x, cos, sin, layout=layout, rotary_dim=rd, blocks=blocks)
