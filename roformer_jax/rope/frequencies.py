"""RoPE frequencies: validation of the static settings, the HF context scalings, and the
pair tables of the multi-axis variants (which position axis and which frequency each rotated
pair gets). Everything here runs at trace time in float64 NumPy on static values."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

LAYOUTS = ("interleaved", "half")
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional", "ntk_alpha")
# Scalings whose frequencies depend on the sequence length: every key's rotation changes as
# the sequence grows, so a KV cache holds them unrotated (attention.MultiHeadAttention.decode).
LENGTH_DEPENDENT_TYPES = ("dynamic", "longrope")

_TWO_PI = 2.0 * math.pi


# --------------------------------------------------------------------------------------
# Validation helpers (all run at trace time on static values).
# --------------------------------------------------------------------------------------


def check_theta(theta: Any) -> float:
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


def check_dim(dim: Any, what: str = "dim") -> int:
  if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
    raise TypeError(f"{what} must be a Python int, got {dim!r} ({type(dim).__name__}).")
  dim = int(dim)
  if dim <= 0 or dim % 2:
    raise ValueError(f"{what} must be a positive even integer (features rotate in pairs), got {dim}.")
  return dim


def check_layout(layout: Any) -> str:
  if layout not in LAYOUTS:
    raise ValueError(
        f"layout must be one of {LAYOUTS} ('interleaved' = pairs (2i, 2i+1) as in the paper "
        f"and HF RoFormer; 'half' = pairs (i, i+R/2) as in GPT-NeoX/LLaMA), got {layout!r}.")
  return layout


def check_seq_len(seq_len: Any) -> int | jax.Array | None:
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


def positive(params: Mapping[str, Any], key: str, rope_type: str) -> float:
  value = params[key]
  if isinstance(value, bool) or not isinstance(value, numbers.Real) or not cast(float, value) > 0:
    raise ValueError(f"scaling[{key!r}] for rope_type {rope_type!r} must be a positive number, got {value!r}.")
  return float(value)


def require(params: Mapping[str, Any], keys: tuple[str, ...], rope_type: str) -> None:
  missing = [k for k in keys if params.get(k) is None]
  if missing:
    raise ValueError(
        f"scaling with rope_type {rope_type!r} is missing required key(s) {missing}; "
        f"got keys {sorted(params)}. See roformer_jax.rope.rope_frequencies for what each type reads.")


def normalise_scaling(scaling: Any, theta: float) -> dict[str, Any] | None:
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


class RopeConfigWarning(UserWarning):
  """A rope_parameters dict that loads and runs but is probably not what was meant: one that
  transformers' config validation warns about (or refuses), so a config written for it behaves
  the same here. Raised by `check_scaling` (every `RotaryConfig`, hence `ModelConfig` and
  `from_hf_config`); silence it with `warnings.filterwarnings("ignore", category=RopeConfigWarning)`."""


# transformers 5.24's RotaryEmbeddingConfigMixin._validate_yarn_rope_parameters: the keys it
# requires and allows (partial_rotary_factor and the legacy "type" are allowed for every type).
# max_position_embeddings is the model config's length, which this dict carries (HF reads it
# from the config, not from rope_parameters).
_YARN_REQUIRED = ("factor", "original_max_position_embeddings")
_YARN_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor", "max_position_embeddings",
                        *_YARN_REQUIRED, "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                        "truncate"})


def scaling_warnings(params: Mapping[str, Any] | None) -> list[tuple[str, str]]:
  """(condition, message) for each thing transformers 5.24 warns about in this rope_parameters dict.

  The conditions are exactly those of transformers' `_validate_yarn_rope_parameters` (5.24), for
  rope_type 'yarn' (other types give none yet): "missing_keys" (no 'factor': transformers
  refuses the config with a KeyError; here factor = max_position_embeddings / original length),
  "unrecognized_keys", "factor" (None, not a number, or < 1), "attention_factor" (not a float,
  or < 0), "beta_fast_type", "beta_slow_type", "beta_order" (beta_fast < beta_slow, defaults 32
  and 1), "implicit_factor" (max_position_embeddings / original_max_position_embeddings is
  neither factor nor 1; skipped when the dict has no max_position_embeddings, which transformers
  takes from the model config). A missing original_max_position_embeddings is no condition:
  both fall back to max_position_embeddings, which makes the implicit factor 1.

  Args:
    params: a dict as `normalise_scaling` returns it (rope_type set, original length filled in).
  """
  if not params or params.get("rope_type") != "yarn":
    return []
  out = []
  where = "scaling for rope_type 'yarn'"
  if "factor" not in params:
    mpe, omp = params.get("max_position_embeddings"), params.get("original_max_position_embeddings")
    implied = f" = {mpe} / {omp} = {mpe / omp:g}" if isinstance(mpe, numbers.Real) and omp else ""
    out.append(("missing_keys", f"{where} has no 'factor'. transformers refuses such a config (KeyError: missing "
                f"required key 'factor'); here factor = max_position_embeddings / original_max_position_embeddings"
                f"{implied} is used. Set 'factor' explicitly (the context extension ratio)."))
  unknown = sorted(str(k) for k in params if k not in _YARN_KEYS)
  if unknown:
    out.append(("unrecognized_keys", f"{where} has key(s) {unknown} that YaRN does not read (transformers warns: "
                f"unrecognized keys); it reads {sorted(_YARN_KEYS - {'rope_type', 'type'})}. Check the spelling."))
  factor = params.get("factor")
  number = (float, int)
  if "factor" in params and (factor is None or not isinstance(factor, number) or factor < 1.0):
    out.append(("factor", f"{where}: 'factor'={factor!r} should be a number >= 1, the ratio of the extended to "
                "the original context length (transformers warns). Set it to new length / original length."))
  af = params.get("attention_factor")
  if af is not None and (not isinstance(af, float) or af < 0):
    fix = f"write it as {float(af)!r}" if isinstance(af, number) and af >= 0 else "use a float >= 0, or leave it out"
    out.append(("attention_factor", f"{where}: 'attention_factor'={af!r} should be a float >= 0 (transformers warns "
                f"for anything else, an int included); {fix}."))
  beta_fast, beta_slow = params.get("beta_fast"), params.get("beta_slow")
  for key, value, default in (("beta_fast", beta_fast, 32), ("beta_slow", beta_slow, 1)):
    if value is not None and not isinstance(value, number):
      out.append((f"{key}_type", f"{where}: '{key}'={value!r} should be a number (default {default}; transformers "
                  "warns)."))
  if all(isinstance(v, number) or v is None for v in (beta_fast, beta_slow)) and (beta_fast or 32) < (beta_slow or 1):
    out.append(("beta_order", f"{where}: 'beta_fast'={beta_fast!r} (32 if unset) is below 'beta_slow'={beta_slow!r} "
                "(1 if unset); YaRN ramps from beta_fast rotations down to beta_slow (transformers warns). Swap "
                "them, or leave both out for 32 and 1."))
  mpe, omp = params.get("max_position_embeddings"), params.get("original_max_position_embeddings")
  if "factor" in params and isinstance(mpe, numbers.Real) and isinstance(omp, numbers.Real) and omp:
    implicit = mpe / omp  # without a factor (missing_keys) the factor used is this one
    if implicit != factor and implicit != 1:
      out.append(("implicit_factor", f"{where}: 'factor'={factor!r} does not match max_position_embeddings / "
                  f"original_max_position_embeddings = {mpe} / {omp} = {implicit:g}; the explicit factor is used (as "
                  "in transformers, which warns). Set original_max_position_embeddings to the pre-training length "
                  f"(max_position_embeddings / factor), or factor to {implicit:g}."))
  return out


# --------------------------------------------------------------------------------------
# Frequencies (float64 NumPy at trace time; formulas follow HF transformers'
# modeling_rope_utils.py so checkpoints trained there rotate identically here).
# --------------------------------------------------------------------------------------


def default_inv_freq(dim: int, base: float) -> np.ndarray:
  return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def _yarn(dim: int, theta: float, p: Mapping[str, Any]) -> tuple[np.ndarray, float]:
  omp = float(p["original_max_position_embeddings"])
  if p.get("factor") is None:
    require(p, ("max_position_embeddings",), "yarn")
    factor = float(p["max_position_embeddings"]) / omp
  else:
    factor = positive(p, "factor", "yarn")

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
  base_freq = default_inv_freq(dim, theta)
  inv_freq = base_freq / factor * (1.0 - extrapolation) + base_freq * extrapolation
  return inv_freq, float(attention_factor)


def _longrope(dim: int, theta: float, p: Mapping[str, Any], long: bool) -> tuple[np.ndarray, float]:
  require(p, ("short_factor", "long_factor"), "longrope")
  omp = float(p["original_max_position_embeddings"])
  if p.get("factor") is None:
    require(p, ("max_position_embeddings",), "longrope")
    factor = float(p["max_position_embeddings"]) / omp
  else:
    factor = positive(p, "factor", "longrope")
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
  require(p, ("factor", "low_freq_factor", "high_freq_factor"), "llama3")
  factor = positive(p, "factor", "llama3")
  low_ff, high_ff = float(p["low_freq_factor"]), float(p["high_freq_factor"])
  if high_ff < low_ff:
    raise ValueError(f"scaling['high_freq_factor']={high_ff} must be >= 'low_freq_factor'={low_ff} for rope_type "
                     "'llama3'.")
  old_len = float(p["original_max_position_embeddings"])
  inv_freq = default_inv_freq(dim, theta)
  wavelen = _TWO_PI / inv_freq
  low_freq_wavelen, high_freq_wavelen = old_len / low_ff, old_len / high_ff
  out = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
  # Equal factors (Llama 4 Scout: 1.0 and 1.0) leave no medium band: the smoothing, a 0/0,
  # is never selected, as in transformers (which divides by zero and discards the result).
  with np.errstate(divide="ignore", invalid="ignore"):
    smooth = (old_len / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * out / factor + smooth * out
  medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
  return np.where(medium, smoothed, out)


def dynamic_base(dim: int, theta: float, p: Mapping[str, Any], seq_len: ArrayLike) -> Any:
  """NTK-aware base for a (possibly traced) seq_len; HF clamps seq_len below at max_position_embeddings."""
  require(p, ("factor", "max_position_embeddings"), "dynamic")
  factor = positive(p, "factor", "dynamic")
  mpe = positive(p, "max_position_embeddings", "dynamic")
  if dim <= 2:
    raise ValueError("rope_type 'dynamic' needs a rotary dim > 2 (its exponent is dim / (dim - 2)).")
  xp = np if isinstance(seq_len, (int, float)) else jnp
  seq_len = xp.maximum(seq_len, mpe)
  return theta * ((factor * seq_len / mpe) - (factor - 1)) ** (dim / (dim - 2))


def inv_freq_f64(dim: int, theta: float, params: Mapping[str, Any] | None, seq_len: int | None,
                  *, long: bool | None = None) -> tuple[np.ndarray, float]:
  """float64 inverse frequencies and attention factor; `long` overrides longrope's choice."""
  if params is None or params["rope_type"] == "default":
    return default_inv_freq(dim, theta), 1.0
  rope_type = params["rope_type"]
  if rope_type == "linear":
    require(params, ("factor",), "linear")
    return default_inv_freq(dim, theta) / positive(params, "factor", "linear"), 1.0
  if rope_type == "dynamic":
    return default_inv_freq(dim, float(dynamic_base(dim, theta, params, seq_len or 0))), 1.0
  if rope_type == "yarn":
    return _yarn(dim, theta, params)
  if rope_type == "longrope":
    if long is None:
      long = bool(seq_len) and seq_len is not None and seq_len > params["original_max_position_embeddings"]
    return _longrope(dim, theta, params, long)
  if rope_type == "proportional":
    return _proportional(dim, theta, params), 1.0
  if rope_type == "ntk_alpha":
    return default_inv_freq(dim, ntk_alpha_base(dim, theta, params)), 1.0
  return _llama3(dim, theta, params), 1.0  # llama3


def ntk_alpha_base(dim: int, theta: float, p: Mapping[str, Any]) -> float:
  """NTK-alpha (HunYuan's "dynamic" rope with a fixed `alpha`): the base stretched once,
  theta * alpha ** (R / (R - 2)), whatever the sequence length (unlike "dynamic", whose stretch
  grows with the length). transformers' HunYuan models compute it as their `ntk_alpha` type."""
  require(p, ("alpha",), "ntk_alpha")
  if dim <= 2:
    raise ValueError("rope_type 'ntk_alpha' needs a rotary dim > 2 (its exponent is dim / (dim - 2)).")
  return theta * positive(p, "alpha", "ntk_alpha") ** (dim / (dim - 2))


def _proportional(dim: int, theta: float, p: Mapping[str, Any]) -> np.ndarray:
  """p-RoPE (Barbero et al. 2025; transformers' "proportional", Gemma 4's global layers).

  The full-width spectrum theta ** (-2i / dim) over all dim // 2 pairs, of which only the first
  (highest-frequency) k = int(partial_rotary_factor * dim // 2) keep their frequency; the others
  get frequency 0 (those channels carry no position). Divided by `factor` (default 1). Unlike
  partial rotary (rotary_dim), the kept frequencies are the full-width ones and the pairs span
  the whole head: pass the head dim as dim, not a reduced rotary dim.
  """
  prf = p.get("partial_rotary_factor", 1.0)
  if isinstance(prf, bool) or not isinstance(prf, numbers.Real) or not 0.0 <= cast(float, prf) <= 1.0:
    raise ValueError(f"scaling['partial_rotary_factor'] for rope_type 'proportional' must be a number in "
                     f"[0, 1] (the fraction of the spectrum kept), got {prf!r}.")
  factor = 1.0 if p.get("factor") is None else positive(p, "factor", "proportional")
  kept = int(cast(float, prf) * dim // 2)  # transformers: int(partial_rotary_factor * head_dim // 2)
  inv_freq = default_inv_freq(dim, theta)
  inv_freq[kept:] = 0.0
  return inv_freq / factor


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
        ntk_alpha: alpha (the base stretched once, theta * alpha ** (R / (R - 2)): HunYuan).
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
  dim = check_dim(dim)
  theta = check_theta(theta)
  checked_len = check_seq_len(seq_len)
  if checked_len is not None and not isinstance(checked_len, int):
    raise TypeError("seq_len must be a static Python int for rope_frequencies (it returns one set of "
                    "frequencies); pass per-row or traced lengths to rotary_cos_sin / apply_rotary.")
  seq_len = checked_len
  params = normalise_scaling(scaling, theta)
  inv_freq, attention_factor = inv_freq_f64(dim, theta, params, seq_len)
  return jnp.asarray(inv_freq, dtype=jnp.float32), float(attention_factor)


def row_lengths(positions: ArrayLike) -> jax.Array:
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


def frequencies_change(scaling: Mapping[str, Any] | None, old_len: ArrayLike, new_len: ArrayLike) -> jax.Array:
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
  params = normalise_scaling(scaling, float(dict(scaling or {}).get("rope_theta") or 10000.0))
  rope_type = None if params is None else params["rope_type"]
  if params is not None and rope_type == "dynamic":
    mpe = positive(params, "max_position_embeddings", "dynamic")
    return jnp.maximum(old_len, mpe) != jnp.maximum(new_len, mpe)
  if params is not None and rope_type == "longrope":
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

  Warns:
    RopeConfigWarning: for each condition transformers' validation warns about (or refuses):
      `scaling_warnings`.
  """
  theta = check_theta(theta)
  params = normalise_scaling(scaling, theta)
  if params is None:
    return None
  for _, message in scaling_warnings(params):
    # One location: the default filter shows each message once, however often a spec is checked.
    warnings.warn(message, RopeConfigWarning, stacklevel=1)
  rope_type = params["rope_type"]
  if dim is None:
    if rope_type != "longrope":
      dim = 64  # nothing else these types check depends on R beyond R > 2
    else:
      require(params, ("short_factor", "long_factor"), "longrope")
      short, long = (np.shape(params[k]) for k in ("short_factor", "long_factor"))
      if len(short) != 1 or short != long:
        raise ValueError(f"scaling['short_factor'] and ['long_factor'] for rope_type 'longrope' must be two "
                         f"lists of rotary_dim // 2 numbers each; got shapes {short} and {long}.")
      dim = 2 * short[0]
  dim = check_dim(dim, dim_name or "dim")
  lengths: tuple[int | None, ...] = (None,)  # past the original length too, where the other branch is taken:
  if rope_type == "dynamic":
    lengths = (None, 2 * int(params.get("max_position_embeddings") or 1))
  elif rope_type == "longrope":
    lengths = (None, int(params["original_max_position_embeddings"]) + 1)
  for seq_len in lengths:
    try:
      inv_freq_f64(dim, theta, params, seq_len)
    except ValueError as e:
      if dim_name is None:
        raise
      raise ValueError(f"{e} The rotary dim here is {dim_name}.") from None
  return params




# --------------------------------------------------------------------------------------
# Multi-axis pair tables. Every variant rotates pair p by phi_p = pos[a(p)] * f_p: a position
# axis a(p) and a frequency f_p per pair (rope/__init__.py's formula with one nonzero F[a, p]).
# --------------------------------------------------------------------------------------

# How sections (pairs per position axis) are laid over the pairs:
#   "chunked":     contiguous runs in axis order (Qwen2/2.5-VL M-RoPE; the 2-D vision layouts).
#   "interleaved": Qwen3-VL / Qwen3.5: axis a >= 1 takes pairs a, a + A, a + 2A, ... below
#                  A * sections[a]; axis 0 takes the rest (T H W T H W ... T T).
#   "videorope":   VideoRoPE (Wei et al. 2025), sections (t, h, w): the first h + w pairs (the
#                  highest frequencies) alternate H (even p) and W (odd p); the last t go to T.
SECTION_LAYOUTS = ("chunked", "interleaved", "videorope")
# Which frequency each pair gets, given the rotary dim R and the sections s_a:
#   "shared":   one spectrum theta ** (-2p / R) over all R / 2 pairs (M-RoPE, VideoRoPE).
#   "per_axis": each axis's section its own spectrum theta ** (-2j / (2 s_a)), j < s_a (axial
#               2-D RoPE: Qwen-VL vision, Llama 4 vision, RoPE-Axial, Gemma 4 vision, RET axial).
#   "split":    the full spectrum theta ** (-2p / R) dealt round-robin to the A axes: axis a
#               takes entries a, a + A, ... (Pixtral: H even, W odd).
#   "mixed":    learned: each attention layer owns dense frequencies per head [A, N, R / 2] (every
#               pair turns by every axis), A = len(sections): 2-D initialised by `mixed_frequencies`
#               (RoPE-Mixed, Heo et al. 2024), more axes by zeros (Mochi's 3-D, from its
#               checkpoint); the spec says so and the layer holds the parameter
#               (`cos_sin(..., frequencies=F)`).
#   a tuple of R / 2 numbers: those frequencies (radians per position), verbatim.
FREQUENCY_KINDS = ("shared", "per_axis", "split", "mixed")


def check_sections(sections: Any, num_pairs: int, *, layout: str = "chunked") -> tuple[int, ...]:
  """Validates sections (pairs per position axis) for num_pairs = R / 2 rotated pairs."""
  if layout not in SECTION_LAYOUTS:
    raise ValueError(f"section layout {layout!r} is not one of {SECTION_LAYOUTS}.")
  try:
    sec = tuple(int(s) for s in sections)
  except TypeError:
    raise TypeError(f"sections must be a sequence of ints (rotated pairs per position axis), got {sections!r}.") from None
  if not sec or any(s < 0 for s in sec) or any(s != v for s, v in zip(sec, sections, strict=True)):
    raise ValueError(f"sections={tuple(sections)} must be non-negative ints, one per position axis.")
  if sum(sec) != num_pairs:
    raise ValueError(
        f"sections={sec} give {sum(sec)} rotated pairs, but the rotary dim has R / 2 = {num_pairs}; the sections "
        f"must add up to R / 2 (e.g. Qwen2-VL: head dim 128, sections (16, 24, 24)). For a partial rotary dim R "
        "(rotary_dim / partial_rotary_factor), count pairs of R, not of the head dim.")
  if layout == "videorope" and (len(sec) != 3 or sec[1] != sec[2]):
    raise ValueError(f"section layout 'videorope' needs sections (t, h, w) with h == w (H and W alternate), "
                     f"got {sec}.")
  return sec


def pair_axes(sections: Any, num_pairs: int, *, layout: str = "chunked") -> np.ndarray:
  """int32[num_pairs]: the position axis each rotated pair reads (see SECTION_LAYOUTS).

  Raises a ValueError when the layout does not give each axis exactly its section's number of
  pairs. transformers' interleaved M-RoPE saturates silently instead (its strided slice stops at
  the last pair); every published Qwen3-VL / Qwen3.5 config fits exactly, so refusing loses
  nothing and catches a mistyped section.
  """
  sec = check_sections(sections, num_pairs, layout=layout)
  a = len(sec)
  if layout == "chunked":
    return np.repeat(np.arange(a), sec).astype(np.int32)
  axes = np.zeros(num_pairs, np.int32)
  if layout == "interleaved":
    for axis in range(1, a):
      axes[axis:a * sec[axis]:a] = axis
  else:  # videorope: (t, h, w)
    spatial = sec[1] + sec[2]
    axes[:spatial:2], axes[1:spatial:2], axes[spatial:] = 1, 2, 0
  counts = tuple(int((axes == i).sum()) for i in range(a))
  if counts != sec:
    raise ValueError(
        f"section layout {layout!r} with sections={sec} over {num_pairs} pairs gives each axis {counts} pairs, "
        f"not the sections' {sec}: axis a >= 1 takes every {a}th pair below {a} * sections[a], which must fit in "
        f"{num_pairs} pairs (transformers silently clamps; e.g. Qwen3-VL: (24, 20, 20) of 64 pairs).")
  return axes


def pair_frequencies(dim: int, theta: float, *, sections: Any = None, kind: Any = "shared",
                     layout: str = "chunked") -> np.ndarray:
  """float64[dim // 2]: the frequency of each rotated pair (see FREQUENCY_KINDS), no scaling. With
  kind="per_axis", axis a's j-th pair (in pair order, its pairs laid out by `layout` as `pair_axes`
  says) turns by its own spectrum's j-th frequency (Kimi-K2.5's vision tower: interleaved)."""
  k = dim // 2
  if not isinstance(kind, str):
    f = np.asarray(kind, np.float64).reshape(-1)
    if f.shape != (k,) or not np.isfinite(f).all():
      raise ValueError(f"custom frequencies must be {k} finite numbers (one per rotated pair of R = {dim}), "
                       f"got shape {np.shape(kind)}.")
    return f
  if kind == "shared":
    return default_inv_freq(dim, theta)
  if sections is None:
    raise ValueError(f"frequencies={kind!r} assigns a spectrum per position axis and needs sections.")
  sec = check_sections(sections, k)
  if kind == "per_axis":
    owners = pair_axes(sec, k, layout=layout)
    freqs = np.zeros(k, np.float64)
    for a, s in enumerate(sec):  # axis a's pairs, in pair order, take its own spectrum
      if s:
        freqs[owners == a] = default_inv_freq(2 * s, theta)
    return freqs
  if kind == "mixed":
    raise ValueError("frequencies='mixed' are learned: the attention layer holds them as a parameter; pass them to "
                     "rotary_cos_sin(frequencies=F) (F [2, N, R / 2], rope.mixed_frequencies for the initial values).")
  if kind == "split":
    a = len(sec)
    if len(set(sec)) != 1:
      raise ValueError(f"frequencies='split' deals the spectrum round-robin and needs equal sections, got {sec}.")
    full = default_inv_freq(dim, theta)
    return np.concatenate([full[i::a] for i in range(a)])
  raise ValueError(f"frequencies={kind!r} is not one of {FREQUENCY_KINDS} or a tuple of R / 2 numbers.")


def pixel_frequencies(num_pairs: int, max_freq: float = 10.0) -> np.ndarray:
  """rotary-embedding-torch's freqs_for='pixel': pi * linspace(1, max_freq / 2, num_pairs), for
  positions in [-1, 1] (`rope.pixel_grid`). Pass one vector per axis, concatenated, as
  frequencies=."""
  return math.pi * np.linspace(1.0, max_freq / 2.0, num_pairs)


def rescaled_theta(theta: float, factor: float, dim: int) -> float:
  """rotary-embedding-torch's theta_rescale_factor (NTK-aware, bloc97): theta * factor ** (dim / (dim - 2))."""
  dim = check_dim(dim)
  if dim <= 2:
    raise ValueError("theta_rescale_factor needs a rotary dim > 2 (its exponent is dim / (dim - 2)).")
  return float(theta) * float(factor) ** (dim / (dim - 2))


def mixed_frequencies(angles: np.ndarray | jax.Array, head_dim: int, theta: float = 10.0) -> np.ndarray:
  """RoPE-Mixed's initial 2-D frequencies (Heo et al. 2024, rope-vit `init_random_2d_freqs`).

  Each head gets magnitudes m_j = theta ** (-4j / head_dim), j < head_dim / 4, pointed along
  its angle a (the first head_dim / 4 pairs) and along a + pi / 2 (the rest):
  F[0] = [m cos a, m cos(a + pi/2)] (x frequencies), F[1] = [m sin a, m sin(a + pi/2)] (y).

  Args:
    angles: float [...] (e.g. [depth, heads]), drawn uniformly in [0, 2 pi) at initialisation.
    head_dim: H (a multiple of 4). theta: 10 for RoPE-Mixed.

  Returns:
    float64[2, ..., H / 2] (float32 for traced angles): the dense frequencies
    `rotary_cos_sin(frequencies=...)` takes for positions [..., T, 2] = (x, y); train them, and
    keep them out of weight decay.
  """
  head_dim = check_dim(head_dim, "head_dim")
  if head_dim % 4:
    raise ValueError(f"RoPE-Mixed needs a head dim divisible by 4 (two axes of pairs), got {head_dim}.")
  # Traced angles (a layer initialised inside jit, as the trainer does) give a float32 jax
  # array by the same formula; anything else float64 NumPy.
  xp = jnp if isinstance(angles, jax.core.Tracer) else np
  a = (angles.astype(jnp.float32) if xp is jnp else np.asarray(angles, np.float64))[..., None]
  m = float(theta) ** (-np.arange(0, head_dim, 4, dtype=np.float64) / head_dim)
  m = m.astype(np.float32) if xp is jnp else m
  fx = xp.concatenate(xp.broadcast_arrays(m * xp.cos(a), m * xp.cos(a + np.pi / 2)), axis=-1)
  fy = xp.concatenate(xp.broadcast_arrays(m * xp.sin(a), m * xp.sin(a + np.pi / 2)), axis=-1)
  return xp.stack([fx, fy])
