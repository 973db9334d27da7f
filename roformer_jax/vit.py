"""A Vision Transformer with 2-D RoPE (RoPE-ViT, Heo et al., ECCV 2024).

Images [B, H, W, C] are cut into P x P patches, embedded, optionally prefixed with a CLS token,
and run through the pre-LN encoder blocks of `roformer_jax.models` (the same `Block`s, so
per-layer settings, chunked attention and sharding apply unchanged); the CLS state (or the mean
over patches) is classified. The position encoding (`ViTConfig.position`) is one of:

- "rope_axial": RoPE-Axial: the head's pairs split into an x half and a y half, each with its
  own spectrum 100 ** (-4j / H), interleaved pairs, positions (column, row) 0-based;
- "rope_mixed": RoPE-Mixed: learned 2-D frequencies per layer and head, initialised as in the
  paper (theta 10) and trained; they are named `rope_frequencies`, so the optimiser's weight
  decay (which decays only kernels and embeddings, `training.optim.decay_mask`) leaves them out;
- "rope_2d": the Qwen-VL vision encoders' 2-D RoPE: (row, column) halves, theta 1e4, half layout;
- "learned": a learned absolute table of the training grid, added to the patches and resized
  bicubically to another grid as DeiT does (`resize_position_table`; DeiT's and the paper's baseline);
- "none": no position information.

The CLS token takes position (0, 0): zero angle, so it is not rotated. Every RoPE variant works
at any grid: positions are the patch coordinates, so a larger image is a larger grid
(extrapolation), as RoPE-ViT evaluates at 320-512 px after training at 224.

Shapes: B batch, H x W pixels, C channels, P patch size, G = (H / P) (W / P) patches, D width.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer_jax import rope
from roformer_jax.models import ModelConfig, layer_norm, layer_stack, run_layers
from roformer_jax.partitioning import partitioned

POSITIONS_2D = ("rope_axial", "rope_mixed", "rope_2d", "learned", "none")
# Each RoPE variant's encoder settings: theta, pair layout, frequencies, and the axis order of
# the positions (`rope.grid_positions` axes: "wh" = (column, row), "hw" = (row, column)).
_ROPE_2D: dict[str, dict[str, Any]] = {
    "rope_axial": dict(theta=100.0, layout="interleaved", frequencies="per_axis", axes="wh"),
    "rope_mixed": dict(theta=10.0, layout="interleaved", frequencies="mixed", axes="wh"),
    "rope_2d": dict(theta=10000.0, layout="half", frequencies="per_axis", axes="hw"),
}


@dataclasses.dataclass(frozen=True)
class ViTConfig:
  """The image side of a ViT; the encoder's width, depth and heads are a `ModelConfig`.

  Attributes:
    image_size: the training resolution in pixels (square); the learned table's grid.
    patch_size: P; an image's height and width must be multiples of it.
    channels: C.
    num_classes: classifier outputs.
    cls_token: prefix a learned CLS token and classify its final state; False = mean pooling.
    position: one of POSITIONS_2D.
    rope_theta: None = the variant's own (Axial 100, Mixed 10, 2-D 1e4).
  """
  image_size: int = 32
  patch_size: int = 4
  channels: int = 3
  num_classes: int = 4
  cls_token: bool = True
  position: str = "rope_axial"
  rope_theta: float | None = None

  def __post_init__(self):
    if self.position not in POSITIONS_2D:
      raise ValueError(f"vit position={self.position!r}; expected one of {POSITIONS_2D}.")
    for name in ("image_size", "patch_size", "channels", "num_classes"):
      v = getattr(self, name)
      if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"vit {name}={v!r} must be a positive int.")
    if self.image_size % self.patch_size:
      raise ValueError(f"vit image_size={self.image_size} is not a multiple of patch_size={self.patch_size}.")

  @property
  def grid(self) -> int:
    return self.image_size // self.patch_size


def encoder_config(model: ModelConfig, vit: ViTConfig) -> ModelConfig:
  """The encoder's ModelConfig: pre-LN, and the 2-D RoPE spec of `vit.position` (position
  'none' for the learned table, which the ViT adds itself, and for no encoding)."""
  if vit.position not in _ROPE_2D:
    return model.replace(position="none", norm="pre")
  v = _ROPE_2D[vit.position]
  k = model.head_size // 2
  if k % 2:
    raise ValueError(f"2-D RoPE splits the head's {k} pairs between x and y: the head dim must be a multiple of 4, "
                     f"got {model.head_size}.")
  return model.replace(position="rope", norm="pre", rope_theta=vit.rope_theta or v["theta"], rope_layout=v["layout"],
                       rope={"sections": (k // 2, k // 2), "frequencies": v["frequencies"]})


# Keys' cubic convolution parameter of torch's (non-antialiased) bicubic, which DeiT resizes with.
_TORCH_BICUBIC_A = -0.75


def _bicubic_matrix(n_in: int, n_out: int) -> np.ndarray:
  """float64 [n_out, n_in]: torch's `interpolate(mode="bicubic", align_corners=False, antialias=False)` along one
  axis. Output i samples the input at (i + 0.5) n_in / n_out - 0.5 with Keys' cubic (a = -0.75) over 4 taps,
  indices clamped to [0, n_in) (the edge row repeats); the same 4 taps when shrinking (no antialiasing)."""
  a = _TORCH_BICUBIC_A
  src = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
  base = np.floor(src)
  t = src - base
  near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # |x| <= 1
  far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # 1 < |x| < 2
  weights = np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)  # taps base-1 .. base+2
  taps = np.clip(base[:, None].astype(int) + np.arange(-1, 3), 0, n_in - 1)
  m = np.zeros((n_out, n_in))
  np.add.at(m, (np.repeat(np.arange(n_out), 4), taps.ravel()), weights.ravel())
  return m


def resize_position_table(table: jax.Array, grid: tuple[int, int], *, antialias: bool = False) -> jax.Array:
  """A learned position table [h, w, D] resized to grid (H, W) bicubically: [H, W, D] in table's dtype.

  The default is DeiT's resize (facebookresearch/deit's and naver-ai/rope-vit's fine-tuning code:
  `torch.nn.functional.interpolate(mode="bicubic", align_corners=False)`), i.e. timm's
  `resample_abs_pos_embed(..., antialias=False)`: Keys' cubic with a = -0.75, borders clamped, no antialiasing
  when shrinking. It is written out as two [H, h] / [W, w] matrices because `jax.image.resize` and
  `jax.image.scale_and_translate` only have the a = -0.5 cubic. `antialias=True` is timm's own default
  (`resample_abs_pos_embed`, its checkpoint filter, `dynamic_img_size`): torch's antialiased bicubic, PIL's
  a = -0.5 with the kernel widened when shrinking, which is exactly `jax.image.resize(method="bicubic")`.
  Both match timm 1.0.31 (tests/golden/pos_embed_resize.*, scripts/make_pos_embed_resize_golden.py). Prefix
  tokens (CLS) have no row here: timm keeps theirs unchanged.
  """
  h, w, d = table.shape
  if (h, w) == tuple(grid):
    return table
  if antialias:
    return jax.image.resize(table, (*grid, d), method="bicubic").astype(table.dtype)
  my, mx = (jnp.asarray(_bicubic_matrix(n, m), jnp.float32) for n, m in zip((h, w), grid, strict=True))
  out = jnp.einsum("Yh,hwd,Xw->YXd", my, table.astype(jnp.float32), mx, precision=jax.lax.Precision.HIGHEST)
  return out.astype(table.dtype)


class VisionTransformer(nnx.Module):
  """Image classifier: patches -> [CLS] + pre-LN blocks with 2-D RoPE -> logits."""

  def __init__(self, model: ModelConfig, vit: ViTConfig, *, rngs: nnx.Rngs):
    self.vit, self.config = vit, encoder_config(model, vit)
    cfg = self.config
    init = nnx.initializers.normal(cfg.init_std)
    kw = dict(dtype=cfg.compute_dtype, param_dtype=cfg.param_dtype, rngs=rngs)
    self.patch = nnx.Linear(vit.patch_size ** 2 * vit.channels, cfg.d_model, kernel_init=partitioned(init, (None, "embed")),
                            bias_init=partitioned(nnx.initializers.zeros_init(), ("embed",)), **kw)
    self.cls_token = nnx.Param(jnp.zeros((1, 1, cfg.d_model), cfg.param_dtype)) if vit.cls_token else None
    self.position_table: nnx.Param | None
    if vit.position == "learned":
      self.position_table = nnx.Param(init(rngs.params(), (vit.grid, vit.grid, cfg.d_model), cfg.param_dtype))
    else:
      self.position_table = None
    self.layers = layer_stack(cfg, causal=False, cross=False, rngs=rngs)
    self.final_norm = layer_norm(cfg, cfg.d_model, rngs=rngs)
    self.head = nnx.Linear(cfg.d_model, vit.num_classes, kernel_init=partitioned(init, ("embed", None)),
                           bias_init=partitioned(nnx.initializers.zeros_init(), (None,)), **kw)

  def positions(self, gh: int, gw: int) -> jax.Array | None:
    """The 2-D RoPE positions of a gh x gw grid (CLS first at (0, 0)): [T, 2], or None."""
    if self.vit.position not in _ROPE_2D:
      return None
    v = _ROPE_2D[self.vit.position]
    pos = rope.grid_positions(gh, gw, axes=v["axes"], cls="first" if self.vit.cls_token else None)
    return jnp.asarray(pos, jnp.float32 if v["frequencies"] == "mixed" else jnp.int32)

  def __call__(self, images, *, deterministic: bool = True) -> jax.Array:
    """float32 logits [B, num_classes] of images float[B, H, W, C] (H, W multiples of P)."""
    images = jnp.asarray(images)
    p, vit = self.vit.patch_size, self.vit
    if images.ndim != 4 or images.shape[-1] != vit.channels or images.shape[1] % p or images.shape[2] % p:
      raise ValueError(f"images must be [B, H, W, {vit.channels}] with H and W multiples of patch_size={p}, got shape "
                       f"{images.shape}.")
    b, h, w, c = images.shape
    gh, gw = h // p, w // p
    patches = images.reshape(b, gh, p, gw, p, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, gh * gw, p * p * c)
    x = self.patch(patches.astype(self.config.compute_dtype))
    if self.position_table is not None:
      table = self.position_table[...]
      table = resize_position_table(table, (gh, gw))  # another resolution: resized to its grid
      x = x + table.reshape(1, gh * gw, -1).astype(x.dtype)
    if self.cls_token is not None:
      x = jnp.concatenate([jnp.broadcast_to(self.cls_token[...].astype(x.dtype), (b, 1, x.shape[-1])), x], axis=1)
    pos = self.positions(gh, gw)
    if pos is None:
      pos = jnp.zeros((x.shape[1],), jnp.int32)  # unused: no layer rotates
    positions = jnp.broadcast_to(pos, (b,) + pos.shape)
    x = run_layers(self.config, self.layers, x, positions=positions, mask=None, kv_valid=None,
                   deterministic=deterministic)
    x = self.final_norm(x)
    pooled = x[:, 0] if self.cls_token is not None else x.mean(axis=1)
    return self.head(pooled.astype(self.config.compute_dtype)).astype(jnp.float32)


__all__ = ["POSITIONS_2D", "ViTConfig", "VisionTransformer", "encoder_config", "resize_position_table"]
