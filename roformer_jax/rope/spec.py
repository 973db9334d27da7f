"""The RoPE spec: one frozen, hashable object that says how a model rotates q and k.

Every variant in `roformer_jax.rope` is one formula: pair p of the rotated features turns by
phi_p = sum_a pos_a * F[a, p] over A position axes, in a layout that maps pairs to channels,
optionally with amplitudes on q and k. The spec's fields pick F (frequencies, sections), the
positions' shape (position_shape), the layout and the amplitudes; `apply` / `cos_sin` +
`rotate` do the rest. Layers, caches, exports and checks take the spec whole and name none of
its fields, so a new field is an edit here (and its math in the rope package), nowhere else.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from roformer_jax.rope.frequencies import (FREQUENCY_KINDS, LAYOUTS, SECTION_LAYOUTS, check_dim, check_scaling,
                                           frequencies_change, is_length_dependent, mixed_frequencies, pair_axes,
                                           pair_frequencies, row_lengths)
from roformer_jax.rope.rotation import CHANNELS, TABLES, apply_rotary, check_heads, rotary_cos_sin, rotate, xpos_amplitude


def freeze_scaling(scaling: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...] | None:
  """An HF-style rope_parameters dict as a sorted tuple of items (hashable, for static config)."""
  if scaling is None:
    return None
  if isinstance(scaling, tuple):
    return scaling
  if not isinstance(scaling, Mapping):
    raise TypeError(f"rope scaling must be None or a dict like {{'rope_type': 'yarn', 'factor': 4.0}}, "
                    f"got {type(scaling).__name__}.")
  return tuple(sorted((str(k), tuple(v) if isinstance(v, list) else v) for k, v in scaling.items()))


def _tuple_or_none(value: Any, what: str) -> tuple[Any, ...] | None:
  if value is None:
    return None
  if isinstance(value, str) or not hasattr(value, "__iter__"):
    raise TypeError(f"{what} must be a sequence, got {value!r}.")
  return tuple(np.asarray(value).reshape(-1).tolist())


@dataclasses.dataclass(frozen=True)
class RotaryConfig:
  """The RoPE spec: static settings shared by every rotated attention of a model (or of one
  layer type, `rope.from_hf_config(config, layer=i)`).

  This frozen, hashable object is the one way RoPE settings travel: `ModelConfig.rotary`
  builds it, and every attention (softmax and linear, full-sequence and cached), the
  context-parallel path, the decode caches (`position_shape`), the HF export (`hf`'s
  allow-list) and the checks (`check`) take it whole; none of them names a field. A new
  RoPE setting is a field here (its default must leave the rotation as it was, so every
  model and checkpoint without it is unchanged) and its math in the rope package.

  Positions are int[..., T] for one position axis; with `sections` (A axes) they are
  [..., T, A] (`position_shape` (A,)). Layers and caches carry either without looking inside.

  Attributes:
    theta: base of theta_i = theta ** (-2i / R) (Sec. 3.2.2: 10000).
    layout: "interleaved" (eq. 34, HF RoFormer, GPT-J, Llama 4) or "half" (GPT-NeoX / LLaMA).
    rotary_dim: rotate only the first R features of each head; None = all.
    scaling: None or an HF rope_parameters dict (stored frozen so the config stays hashable),
      including "proportional" (p-RoPE).
    exact: exact phase reduction (rope package docstring); False = plain float32 product.
    sections: None, or rotated pairs per position axis (M-RoPE (16, 24, 24); a 2-D vision
      layout (R/4, R/4)); positions are then [..., T, len(sections)].
    section_layout: "chunked", "interleaved" (Qwen3-VL) or "videorope" (how sections lie over
      the pairs; `rope.SECTION_LAYOUTS`).
    frequencies: "shared", "per_axis", "split" (`rope.FREQUENCY_KINDS`) or a tuple of R / 2
      frequencies in radians per position.
    blocks: the half layout inside `blocks` equal blocks of the rotated features (Gemma 4
      vision: 2); 1 = over all of them.
    xpos_scale_base: None, or xPos's gamma (512): q and k get amplitudes zeta ** (+-(n - c) /
      gamma) (`rope.xpos_amplitude`), which make attention decay with distance.
    xpos_center: c, the one centre shared by q and k (so cached decoding equals the full call).
    q_temperature: None, or (beta, length): the query (key=False) is also scaled by
      1 + beta * log(1 + floor(n / length)) at token position n, after its rotation
      (Ministral 3's `llama_4_scaling_beta` over `original_max_position_embeddings`; keys are not
      scaled). Every channel must rotate (rotary_dim None): the scale rides on cos and sin.
    direction: +1, or -1 to turn every pair by -phi (nanochat's rotate_half is the other way
      round: x_i' = x_i cos + x_j sin). q . k then depends on n - m where +1 gives m - n.
    channels: which R = rotary_dim features of a head rotate: "first" ([0, R), GPT-NeoX's
      partial rotary) or "last" ([H - R, H), DeepSeek-V4's [nope | rope] heads).
    rotate_value: v is rotated too, at the key positions, with the keys' table (HF RoFormer's
      `rotary_value`, CLVP, DeepSeek-V4 whose shared latent is both k and v). The output
      sum_n p_mn R(n) v_n then carries each value's absolute rotation.
    unrotate_output: the attention output o_m is rotated back by R(m)^-1 at its query's
      position (`unrotate`), after the softmax-weighted sum: with rotate_value, o_m =
      sum_n p_mn R(n - m) v_n, a function of relative positions only (DeepSeek-V4). Needs
      rotate_value; the attention calls it (`attention.dot_product_attention`, the layers).
    heads: None (every head rotates), or (start, stop): only heads [start, stop) of q and k
      rotate, the others pass unchanged (Qwen2.5-Omni's DiT rotates its first head alone:
      (0, 1)); a count n means (0, n). x must have a head axis with at least stop heads.
    tables: "pairs" (default: both channels of a pair turn by its angle, a rotation) or "half"
      (NOT a rotation; layout "interleaved" only): in each of the `blocks` blocks the pairs'
      angles are laid out per channel as rotate_half's tables, [a | a], so channel c of a block
      turns by angle c mod (pairs per block) while channels (2k, 2k + 1) are mixed, as V-JEPA 2's
      `rotate_queries_or_keys` does. The two channels of a pair then turn by different angles:
      the map is not orthogonal and q . k is no function of relative position, so `unrotate`,
      unrotate_output and xPos refuse it (docs/rope.md).
  """

  theta: float = 10000.0
  layout: str = "interleaved"
  rotary_dim: int | None = None
  scaling: Any = None
  exact: bool = True
  sections: tuple[int, ...] | None = None
  section_layout: str = "chunked"
  frequencies: Any = "shared"
  blocks: int = 1
  xpos_scale_base: float | None = None
  xpos_center: int = 0
  direction: int = 1
  q_temperature: tuple[float, float] | None = None
  channels: str = "first"
  rotate_value: bool = False
  unrotate_output: bool = False
  heads: tuple[int, int] | None = None
  tables: str = "pairs"

  # The fields that change no parameter and that a fine-tuning run may therefore set anew
  # (context extension: PI, YaRN, NTK, ABF); `checkpoints.init_from` reports their changes.
  RETUNABLE: ClassVar[tuple[str, ...]] = ("theta", "scaling")

  def __post_init__(self):
    object.__setattr__(self, "scaling", freeze_scaling(self.scaling))
    object.__setattr__(self, "sections", _tuple_or_none(self.sections, "sections"))
    if not isinstance(self.frequencies, str):
      object.__setattr__(self, "frequencies", _tuple_or_none(self.frequencies, "frequencies"))
    elif self.frequencies not in FREQUENCY_KINDS:
      raise ValueError(f"rope frequencies={self.frequencies!r}; expected one of {FREQUENCY_KINDS} or a tuple of "
                       "R / 2 numbers.")
    if self.layout not in LAYOUTS:
      raise ValueError(f"rope layout={self.layout!r}; expected one of {LAYOUTS}.")
    if self.section_layout not in SECTION_LAYOUTS:
      raise ValueError(f"rope section_layout={self.section_layout!r}; expected one of {SECTION_LAYOUTS}.")
    if self.frequencies == "mixed" and (self.sections is None or len(self.sections) < 2):
      raise ValueError("rope frequencies='mixed' (learned dense frequencies: RoPE-Mixed's 2-D, Mochi's 3-D) rotate by "
                       "two or more position axes: set sections to one entry per axis adding up to R / 2 (only their "
                       "number is read: every pair turns by every axis), e.g. (8, 8) for a 2-D grid of head dim 32.")
    if self.frequencies in ("per_axis", "split") and self.sections is None:
      raise ValueError(f"rope frequencies={self.frequencies!r} gives each position axis its own spectrum and "
                       "needs sections (pairs per axis), e.g. sections=(8, 8) for a 2-D grid of head dim 32.")
    if self.frequencies != "shared" and self.scaling is not None:
      raise ValueError(f"rope frequencies={self.frequencies!r} takes no scaling (got {dict(self.scaling)}); "
                       "the scalings rescale the one shared spectrum.")
    if isinstance(self.blocks, bool) or not isinstance(self.blocks, int) or self.blocks < 1:
      raise ValueError(f"rope blocks={self.blocks!r} must be a positive int.")
    if self.xpos_scale_base is not None and not float(self.xpos_scale_base) > 0:
      raise ValueError(f"rope xpos_scale_base={self.xpos_scale_base!r} must be a positive number (xPos: 512).")
    if self.direction not in (1, -1) or isinstance(self.direction, bool):
      raise ValueError(f"rope direction={self.direction!r} must be 1 or -1 (-1: every pair turns by -phi).")
    if self.q_temperature is not None:
      qt = self.q_temperature
      if (not isinstance(qt, (tuple, list)) or len(qt) != 2
          or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in qt)
          or not qt[1] > 0):
        raise ValueError(f"rope q_temperature={qt!r} must be (beta, length) with finite numbers and length > 0 "
                         "(Ministral 3: (0.1, 16384)).")
      if self.rotary_dim is not None:
        raise ValueError(f"rope q_temperature={tuple(qt)!r} scales q through cos and sin, so every channel must "
                         f"rotate; got rotary_dim={self.rotary_dim}. Scale q yourself with `query_temperature`.")
      object.__setattr__(self, "q_temperature", (float(qt[0]), float(qt[1])))
    if self.channels not in CHANNELS:
      raise ValueError(f"rope channels={self.channels!r}; expected one of {CHANNELS} (which rotary_dim features of "
                       "a head rotate: 'last' for DeepSeek-V4's [nope | rope] heads).")
    if self.tables not in TABLES:
      raise ValueError(f"rope tables={self.tables!r}; expected one of {TABLES} ('half': rotate_half's per-channel "
                       "tables over interleaved pairs, V-JEPA 2; not a rotation).")
    if self.tables == "half":
      if self.layout != "interleaved":
        raise ValueError("rope tables='half' lays rotate_half's tables over interleaved pairs (V-JEPA 2); with "
                         "layout='half' those tables are the ordinary rotation: use tables='pairs'.")
      if self.xpos_scale_base is not None or self.unrotate_output:
        raise ValueError("rope tables='half' is not a rotation (the two channels of a pair turn by different "
                         "angles): xPos's relative decay and unrotate_output's inverse assume one, so neither is "
                         "defined with it.")
    for name in ("rotate_value", "unrotate_output"):
      if not isinstance(getattr(self, name), bool):
        raise ValueError(f"rope {name}={getattr(self, name)!r} must be True or False.")
    if self.unrotate_output and not self.rotate_value:
      raise ValueError("rope unrotate_output=True rotates the attention output back at the query positions, which "
                       "makes it relative only when the values were rotated at the key positions: set "
                       "rotate_value=True too (DeepSeek-V4).")
    if self.unrotate_output and (self.learned or self.xpos_scale_base is not None or self.q_temperature is not None
                                 or self.length_dependent):
      raise ValueError("rope unrotate_output=True takes a plain rotation: no learned frequencies, xPos amplitudes, "
                       "q_temperature or length-dependent scaling (their inverse on the output is not defined here).")
    if self.heads is not None:
      object.__setattr__(self, "heads", check_heads(self.heads))
    if self.rotary_dim is not None:  # odd or zero fails here, not at the first forward
      check_dim(self.rotary_dim, "rope rotary_dim")
    # Theta and every scaling key now; what depends on the rotary dim too when it is set (the
    # head dim, if rotary_dim is None, is only known to `check`).
    check_scaling(self.scaling_dict, dim=self.rotary_dim, theta=self.theta,
                  dim_name=None if self.rotary_dim is None else f"rotary_dim={self.rotary_dim}")
    if self.rotary_dim is not None:
      self._check_pairs(self.rotary_dim)

  def _check_pairs(self, rd: int) -> None:
    """The sections, frequencies and blocks against R = rd (ValueErrors name the mismatch)."""
    if self.sections is not None:
      pair_axes(self.sections, rd // 2, layout=self.section_layout)
    if not isinstance(self.frequencies, str) or self.frequencies not in ("shared", "mixed"):
      pair_frequencies(rd, self.theta, sections=self.sections, kind=self.frequencies, layout=self.section_layout)
    if (rd // 2) % self.blocks:
      raise ValueError(f"rope blocks={self.blocks} must divide the {rd // 2} rotated pairs of R = {rd}.")

  def check(self, width: int, what: str = "head dim") -> int:
    """Validates these settings for vectors of `width` features; returns the rotary dim R.

    width is the head dim for softmax attention (linear attention rotates its F features).
    Raises a ValueError naming that width when R is odd or wider than it, or when a scaling
    or the sections do not fit R (e.g. longrope's factor lists need R // 2 entries each).
    """
    if self.rotary_dim is None:
      if width % 2:
        raise ValueError(f"RoPE rotates feature pairs, so the {what} must be even; got {width}. Use an even "
                         f"{what}, or set rotary_dim to an even width < the {what}.")
      rd, name = width, f"the {what} {width} (rotary_dim is None)"
    else:
      rd, name = self.rotary_dim, f"rotary_dim={self.rotary_dim}"
      if rd > width:
        raise ValueError(f"rotary_dim={rd} exceeds the {what} {width}; use rotary_dim <= {width} or None to "
                         f"rotate all of it.")
    check_scaling(self.scaling_dict, dim=rd, theta=self.theta, dim_name=name)
    self._check_pairs(rd)
    return rd

  @classmethod
  def of(cls, rotary: "RotaryConfig | None" = None, **settings: Any) -> "RotaryConfig":
    """The spec `rotary`, or one built from loose keywords (`theta=`, `layout=`, `rotary_dim=`,
    `scaling=`, `exact=`, ...; None = the field's default), for functions that take either.

    Raises a TypeError when both are given (one source of truth) or a keyword is unknown.
    """
    given = {k: v for k, v in settings.items() if v is not None}
    unknown = sorted(set(given) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
      raise TypeError(f"unknown RoPE settings {unknown}; RotaryConfig fields: "
                      f"{[f.name for f in dataclasses.fields(cls)]}.")
    if rotary is not None:
      if given:
        raise TypeError(f"pass rotary=RotaryConfig(...) or the loose settings {sorted(given)}, not both.")
      if not isinstance(rotary, cls):
        raise TypeError(f"rotary must be a RotaryConfig, got {type(rotary).__name__}.")
      return rotary
    return cls(**given)

  def changed(self) -> dict[str, Any]:
    """{field: value} for every field not at its default (what an exporter must be able to write)."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
            if getattr(self, f.name) != f.default}

  @property
  def position_shape(self) -> tuple[int, ...]:
    """Trailing shape of one token's position: () for positions [..., T] (one axis); (A,) for a
    rotation over A position axes, positions [..., T, A]. The decode caches keep each row's next
    position in this shape."""
    return () if self.sections is None else (len(self.sections),)

  @property
  def scaling_dict(self) -> dict[str, Any] | None:
    return None if self.scaling is None else {k: (list(v) if isinstance(v, tuple) else v)
                                              for k, v in self.scaling}

  @property
  def length_dependent(self) -> bool:
    """True for 'dynamic' and 'longrope': rotations depend on the sequence length too."""
    return is_length_dependent(self.scaling_dict)

  def seq_len(self, k_positions: jax.Array) -> jax.Array | None:
    """What attention passes as `seq_len` to rotate q and k of one sequence: None unless the
    scaling is length-dependent, then each row's length read from its key positions [..., S]
    (or [..., S, A]: its largest key position on any axis + 1)."""
    if not self.length_dependent:
      return None
    return row_lengths(k_positions if self.sections is None else k_positions.max(axis=-1))

  def frequencies_change(self, old_len: ArrayLike, new_len: ArrayLike) -> jax.Array:
    """bool[...]: whether growing a row from old_len to new_len tokens changes its rotation
    frequencies (only a length-dependent scaling does; `rope.frequencies_change`)."""
    return frequencies_change(self.scaling_dict, old_len, new_len)

  def _frequencies(self):
    return self.frequencies if isinstance(self.frequencies, str) else np.asarray(self.frequencies, np.float64)

  @property
  def learned(self) -> bool:
    """True when the frequencies are a layer's parameter (frequencies='mixed')."""
    return self.frequencies == "mixed"

  def initial_frequencies(self, key: jax.Array, num_heads: int, head_dim: int) -> jax.Array:
    """For a learned spec: the layer's initial frequencies float32[A, N, R/2]: with two axes
    RoPE-Mixed's (`rope.mixed_frequencies` with theta, one uniform angle per head); with more,
    zeros, as Mochi's class builds its pos_frequencies (its checkpoint sets them)."""
    rd = head_dim if self.rotary_dim is None else self.rotary_dim
    axes = len(self.sections or ())
    if axes != 2:
      return jnp.zeros((axes, num_heads, rd // 2), jnp.float32)
    angles: jax.Array | np.ndarray = jax.random.uniform(key, (num_heads,), maxval=2 * np.pi)
    if not isinstance(angles, jax.core.Tracer):  # eager: the float64 formula, then rounded
      angles = np.asarray(angles, np.float64)
    return jnp.asarray(mixed_frequencies(angles, rd, self.theta), jnp.float32)

  def cos_sin(self, positions: jax.Array, head_dim: int, *, seq_len: int | jax.Array | None = None, key: bool = False,
              frequencies: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """cos/sin float32[..., T, R/2] for `rotate`: compute once per layer.

    seq_len: for the length-dependent scalings, a static int or per-row lengths int[...];
    None = each row's largest position + 1 (`rope.rotary_cos_sin`).
    key: with xPos, the keys' (inverse) amplitudes; q and k then need a table each
    (`needs_key_table`). Without xPos the table is the same for both.
    frequencies: a learned spec's frequencies [2, N, R/2] (the layer's parameter); the
    tables are then per head, [..., T, N, R/2].
    """
    rd = head_dim if self.rotary_dim is None else self.rotary_dim
    if rd > head_dim:
      raise ValueError(f"rotary_dim={rd} exceeds the head dim {head_dim}.")
    if self.learned:
      if frequencies is None:
        raise ValueError("a spec with frequencies='mixed' rotates with the layer's learned frequencies: pass "
                         "frequencies=F [A, N, R/2].")
      cos, sin = rotary_cos_sin(positions, rd, self.theta, exact=False, frequencies=frequencies)
    else:
      cos, sin = rotary_cos_sin(positions, rd, self.theta, scaling=self.scaling_dict, seq_len=seq_len,
                                exact=self.exact, sections=self.sections, section_layout=self.section_layout,
                                frequencies=self._frequencies())
    if self.xpos_scale_base is not None:
      token_pos = positions if self.sections is None else positions[..., 0]
      amp = xpos_amplitude(token_pos, rd, scale_base=self.xpos_scale_base, center=self.xpos_center, key=key)
      cos, sin = cos * amp, sin * amp
    if self.q_temperature is not None and not key:
      scale = self.query_temperature(positions)[..., None]
      if cos.ndim > scale.ndim:  # a learned spec's per-head tables [..., T, N, R/2]
        scale = scale[..., None]
      cos, sin = cos * scale, sin * scale
    return (cos, sin) if self.direction > 0 else (cos, -sin)

  def query_temperature(self, positions: jax.Array) -> jax.Array:
    """The query's scale float32[..., T] at token positions [..., T] (or [..., T, A]: the first
    axis): 1 + beta * log(1 + floor(n / length)) under q_temperature, else ones. The bucket
    is computed on the int positions, so it is exact at any length."""
    pos = jnp.asarray(positions)
    if self.sections is not None:  # positions [..., T, A] (`position_shape`): the token position is axis 0
      pos = pos[..., 0]
    if self.q_temperature is None:
      return jnp.ones(pos.shape, jnp.float32)
    beta, length = self.q_temperature
    if float(length).is_integer():
      bucket = jnp.floor_divide(pos.astype(jnp.int32), jnp.int32(int(length))).astype(jnp.float32)
    else:
      bucket = jnp.floor(pos.astype(jnp.float32) / jnp.float32(length))
    return (1.0 + beta * jnp.log1p(bucket)).astype(jnp.float32)

  @property
  def needs_key_table(self) -> bool:
    """True when keys need their own cos/sin table (xPos's inverse amplitudes, q_temperature)."""
    return self.xpos_scale_base is not None or self.q_temperature is not None

  def rotate(self, x: jax.Array, cos_sin: tuple[jax.Array, jax.Array]) -> jax.Array:
    cos, sin = cos_sin
    return rotate(x, cos, sin, layout=self.layout, blocks=self.blocks, channels=self.channels, heads=self.heads,
                  tables=self.tables)

  def unrotate(self, x: jax.Array, positions: jax.Array, *, seq_len: int | jax.Array | None = None) -> jax.Array:
    """The inverse rotation R(n)^-1 x at positions [..., T] (or [..., T, A]): what the
    attention applies to its output o [..., T, N, H] at the query positions under
    `unrotate_output` (DeepSeek-V4). R(n)^-1 turns every pair by -phi: unrotate(apply(x, n), n)
    == x up to rounding."""
    if self.tables != "pairs":
      raise ValueError("unrotate inverts a rotation by turning every pair back; tables='half' (V-JEPA 2) is not a "
                       "rotation (the two channels of a pair turn by different angles), so it has no such inverse.")
    cos, sin = self.cos_sin(positions, x.shape[-1], seq_len=seq_len)
    return self.rotate(x, (cos, -sin))

  def apply(self, x: jax.Array, positions: jax.Array, *, seq_len: int | jax.Array | None = None, key: bool = False,
            frequencies: jax.Array | None = None) -> jax.Array:
    """Rotates x [..., T, N, H] at positions [..., T] (or [..., T, A] with sections) with these
    settings; key=True for keys under xPos (their inverse amplitudes); frequencies: a learned
    spec's [A, N, R/2]."""
    if (self.learned or self.direction < 0 or self.q_temperature is not None or self.channels != "first"
        or self.heads is not None or self.tables != "pairs"):
      return self.rotate(x, self.cos_sin(positions, x.shape[-1], seq_len=seq_len, key=key, frequencies=frequencies))
    xpos = None if self.xpos_scale_base is None else {"scale_base": self.xpos_scale_base,
                                                      "center": self.xpos_center, "key": key}
    return apply_rotary(x, positions, self.theta, layout=self.layout, rotary_dim=self.rotary_dim,
                        scaling=self.scaling_dict, seq_len=seq_len, exact=self.exact, sections=self.sections,
                        section_layout=self.section_layout, frequencies=self._frequencies(), blocks=self.blocks,
                        xpos=xpos)
