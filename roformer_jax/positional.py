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
from typing import Any

import jax
import jax.numpy as jnp

from roformer_jax import rope
# The RoPE spec lives with the RoPE math (roformer_jax.rope.spec); the model config names it here.
from roformer_jax.rope import RotaryConfig, freeze_scaling

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


def freeze_rope_extra(extra: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...] | None:
  """`ModelConfig.rope` (further spec fields) as sorted frozen items; refuses a field that has
  a key of its own (one source of truth) or that is no spec field."""
  frozen = freeze_scaling(extra)
  if frozen:
    fields = {f.name for f in dataclasses.fields(RotaryConfig)}
    own = sorted(k for k, _ in frozen if k in MODEL_CONFIG_KEYS)
    if own:
      raise ValueError(f"rope={dict(frozen)} sets {own}; set them by their own keys "
                       f"{[MODEL_CONFIG_KEYS[k] for k in own]}.")
    unknown = sorted(k for k, _ in frozen if k not in fields)
    if unknown:
      raise ValueError(f"rope={dict(frozen)}: {unknown} are not RoPE spec fields; RotaryConfig has "
                       f"{sorted(fields)}.")
  return frozen or None


def rotary_from_config(cfg) -> "RotaryConfig":
  """The spec from a `ModelConfig`: its MODEL_CONFIG_KEYS fields, then its `rope` dict."""
  return RotaryConfig(**{f: getattr(cfg, key) for f, key in MODEL_CONFIG_KEYS.items()},
                      **dict(getattr(cfg, EXTRA_KEY) or ()))


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

