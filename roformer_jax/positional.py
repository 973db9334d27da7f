"""The position-encoding choice: one enum, and the settings of each kind.

The paper's baselines differ only in how position enters the model:

- ``"rope"``: rotate queries and keys in every self-attention (eq. 34); nothing is added to
  the token embeddings.
- ``"sinusoidal"``: Vaswani et al.'s fixed absolute table added to the embeddings (eq. 3).
- ``"learned"``: BERT's trained absolute table added to the embeddings.
- ``"none"``: no position information (causal models can still infer some).

Models read ``ModelConfig.position`` and nothing else decides this.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from roformer_jax import rope

POSITION_ENCODINGS = ("rope", "sinusoidal", "learned", "none")
# Each RotaryConfig field's key in `models.ModelConfig` (and so in `config.model`): the flat
# names the configs and saved config.json files use. Every other spec field is set through
# the one dict `ModelConfig.rope` ({field: value}, config key "rope.<field>" in messages), so
# a new field needs no ModelConfig edit. `rotary_from_config` builds the spec from both.
MODEL_CONFIG_KEYS = {"theta": "rope_theta", "layout": "rope_layout", "rotary_dim": "rotary_dim",
                     "scaling": "rope_scaling", "exact": "rope_exact"}
EXTRA_KEY = "rope"


def config_key(field: str) -> str:
  """The `config.model` key that sets the RoPE spec field `field`."""
  return MODEL_CONFIG_KEYS.get(field, f"{EXTRA_KEY}.{field}")
ABSOLUTE_ENCODINGS = ("sinusoidal", "learned")


def check_position_encoding(name: Any) -> str:
  if name not in POSITION_ENCODINGS:
    raise ValueError(f"position={name!r} is not a position encoding; expected one of "
                     f"{POSITION_ENCODINGS} ('rope' is the paper's, the others its baselines).")
  return name


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


def freeze_rope_extra(extra: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...] | None:
  """`ModelConfig.rope` (further spec fields) as sorted frozen items; refuses a field that has
  a key of its own (one source of truth) or that is no spec field."""
  extra = freeze_scaling(extra)
  if extra:
    fields = {f.name for f in dataclasses.fields(RotaryConfig)}
    own = sorted(k for k, _ in extra if k in MODEL_CONFIG_KEYS)
    if own:
      raise ValueError(f"rope={dict(extra)} sets {own}; set them by their own keys "
                       f"{[MODEL_CONFIG_KEYS[k] for k in own]}.")
    unknown = sorted(k for k, _ in extra if k not in fields)
    if unknown:
      raise ValueError(f"rope={dict(extra)}: {unknown} are not RoPE spec fields; RotaryConfig has "
                       f"{sorted(fields)}.")
  return extra or None


def rotary_from_config(cfg) -> "RotaryConfig":
  """The spec from a `ModelConfig`: its MODEL_CONFIG_KEYS fields, then its `rope` dict."""
  return RotaryConfig(**{f: getattr(cfg, key) for f, key in MODEL_CONFIG_KEYS.items()},
                      **dict(getattr(cfg, EXTRA_KEY) or ()))


@dataclasses.dataclass(frozen=True)
class RotaryConfig:
  """The RoPE spec: static settings shared by every rotated attention in a model.

  This frozen, hashable object is the one way RoPE settings travel: `ModelConfig.rotary`
  builds it, and every attention (softmax and linear, full-sequence and cached), the
  context-parallel path, the decode caches (`position_shape`), the HF export (`hf`'s
  allow-list) and the checks (`check`) take it whole; none of them names a field. A new
  RoPE setting is a field here (its default must leave the rotation as it was, so every
  model and checkpoint without it is unchanged) and its math in `rope.py`.

  Positions are int[..., T] today; a spec whose rotation reads several position axes (the
  multi-axis variants) says so by `position_shape` (A,), and positions are then [..., T, A].
  Layers and caches carry positions of either shape without looking inside.

  Attributes:
    theta: base of theta_i = theta ** (-2i / R) (Sec. 3.2.2: 10000).
    layout: "interleaved" (eq. 34, HF RoFormer) or "half" (GPT-NeoX / LLaMA).
    rotary_dim: rotate only the first R features of each head; None = all.
    scaling: None or an HF rope_parameters dict (stored frozen so the config stays hashable).
    exact: exact phase reduction (rope module docstring); False = plain float32 product.
  """

  theta: float = 10000.0
  layout: str = "interleaved"
  rotary_dim: int | None = None
  scaling: Any = None
  exact: bool = True

  # The fields that change no parameter and that a fine-tuning run may therefore set anew
  # (context extension: PI, YaRN, NTK, ABF); `checkpoints.init_from` reports their changes.
  RETUNABLE: ClassVar[tuple[str, ...]] = ("theta", "scaling")

  def __post_init__(self):
    object.__setattr__(self, "scaling", freeze_scaling(self.scaling))
    # Theta and every scaling key now; what depends on the rotary dim too when it is set (the
    # head dim, if rotary_dim is None, is only known to `check`).
    rope.check_scaling(self.scaling_dict, dim=self.rotary_dim, theta=self.theta,
                       dim_name=None if self.rotary_dim is None else f"rotary_dim={self.rotary_dim}")
    if self.layout not in rope.LAYOUTS:
      raise ValueError(f"rope layout={self.layout!r}; expected one of {rope.LAYOUTS}.")

  def check(self, width: int, what: str = "head dim") -> int:
    """Validates these settings for vectors of `width` features; returns the rotary dim R.

    width is the head dim for softmax attention (linear attention rotates its F features).
    Raises a ValueError naming that width when R is odd or wider than it, or when a scaling
    does not fit R (e.g. longrope's factor lists need R // 2 entries each).
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
    rope.check_scaling(self.scaling_dict, dim=rd, theta=self.theta, dim_name=name)
    return rd

  @classmethod
  def of(cls, rotary: "RotaryConfig | None" = None, **settings) -> "RotaryConfig":
    """The spec `rotary`, or one built from loose keywords (`theta=`, `layout=`, `rotary_dim=`,
    `scaling=`, `exact=`; None = the field's default), for functions that take either.

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
    """Trailing shape of one token's position: () for positions [..., T] (one axis, every spec
    today); (A,) for a rotation over A position axes, positions [..., T, A]. The decode caches
    keep each row's next position in this shape."""
    return ()

  @property
  def scaling_dict(self) -> dict[str, Any] | None:
    return None if self.scaling is None else {k: (list(v) if isinstance(v, tuple) else v)
                                              for k, v in self.scaling}

  @property
  def length_dependent(self) -> bool:
    """True for 'dynamic' and 'longrope': rotations depend on the sequence length too."""
    return rope.is_length_dependent(self.scaling_dict)

  def seq_len(self, k_positions: jax.Array):
    """What attention passes as `seq_len` to rotate q and k of one sequence: None unless the
    scaling is length-dependent, then each row's length read from its key positions [..., S]
    (its largest key position + 1; q's own, shorter positions would pick another length)."""
    return rope.row_lengths(k_positions) if self.length_dependent else None

  def frequencies_change(self, old_len, new_len) -> jax.Array:
    """bool[...]: whether growing a row from old_len to new_len tokens changes its rotation
    frequencies (only a length-dependent scaling does; `rope.frequencies_change`)."""
    return rope.frequencies_change(self.scaling_dict, old_len, new_len)

  def cos_sin(self, positions: jax.Array, head_dim: int, *, seq_len=None):
    """cos/sin float32[..., T, R/2] for `rope.rotate`; compute once, use for q and k.

    seq_len: for the length-dependent scalings, a static int or per-row lengths int[...];
    None = each row's largest position + 1 (`rope.rotary_cos_sin`).
    """
    rd = head_dim if self.rotary_dim is None else self.rotary_dim
    if rd > head_dim:
      raise ValueError(f"rotary_dim={rd} exceeds the head dim {head_dim}.")
    return rope.rotary_cos_sin(positions, rd, self.theta, scaling=self.scaling_dict,
                               seq_len=seq_len, exact=self.exact)

  def rotate(self, x: jax.Array, cos_sin) -> jax.Array:
    cos, sin = cos_sin
    return rope.rotate(x, cos, sin, layout=self.layout)

  def apply(self, x: jax.Array, positions: jax.Array, *, seq_len=None) -> jax.Array:
    """`rope.apply_rotary` with these settings; x [..., T, N, H], positions [..., T]."""
    return rope.apply_rotary(x, positions, self.theta, layout=self.layout, rotary_dim=self.rotary_dim,
                             scaling=self.scaling_dict, seq_len=seq_len, exact=self.exact)


def sinusoidal_embedding(positions: jax.Array, dim: int, *, base: float = 10000.0,
                         dtype=jnp.float32) -> jax.Array:
  """Vaswani et al.'s absolute encoding (eq. 3 of the paper): [sin(m w_i), cos(m w_i)] pairs.

  Computed from the positions rather than read from a table, so packed segments and left
  padding get the same per-token positions as RoPE does. Uses the exact phase reduction of
  `rope.rotary_cos_sin`, so large positions keep full precision.

  Args:
    positions: int[..., T].
    dim: D, even.
    base: the 10000 of w_i = base ** (-2i / D).

  Returns:
    dtype[..., T, D] with p[2i] = sin(m w_i), p[2i+1] = cos(m w_i), as in eq. (3).
  """
  if dim % 2:
    raise ValueError(f"sinusoidal position embedding needs an even model dim, got {dim}.")
  cos, sin = rope.rotary_cos_sin(positions, dim, base)
  return jnp.stack([sin, cos], axis=-1).reshape(*sin.shape[:-1], dim).astype(dtype)


def default_positions(shape: tuple[int, ...], *, attention_mask=None, segment_ids=None,
                      offset: jax.Array | int = 0) -> jax.Array:
  """Positions for a batch: per segment if packed, over the real tokens if masked, else 0..T-1.

  Counting over real tokens means left-padded rows get the same positions as right-padded
  ones, which matters for the absolute encodings (RoPE is relative and does not care).
  """
  if segment_ids is not None:
    return rope.positions_from_segments(segment_ids)
  if attention_mask is not None:
    return rope.positions_from_mask(attention_mask) + offset
  return jnp.broadcast_to(jnp.arange(shape[-1], dtype=jnp.int32), shape) + offset

