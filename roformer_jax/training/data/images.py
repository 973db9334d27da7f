"""Pixel preprocessing for the image datasets (cifar10, imagenet2012), in NumPy.

Images arrive as uint8 [H, W, C] (any H, W) and leave as float32 [R, R, channels] in [0, 1];
``pipeline.py`` then normalises them with the dataset's per-channel mean and std.

- Evaluation (``center_crop``): resize the shorter side to R / ``crop_fraction`` and take the
  central R x R (ImageNet's 0.875 convention; 1.0 = the whole shorter side).
- Training (``random_resized_crop``): Inception-style random crop, an area fraction in
  [``min_area``, 1] of the image and an aspect ratio in [3/4, 4/3] (log-uniform), resized to
  R x R, then a horizontal flip with probability 1/2.

Resizing (``resize``) is separable and linear: bilinear when enlarging, a triangle filter
widened by the reduction factor when shrinking (anti-aliased, like PIL's and
``jax.image.resize(..., antialias=True)``'s "linear"), as two small matrix products.
"""

from __future__ import annotations

import functools
import math

import numpy as np

RATIO_RANGE = (3 / 4, 4 / 3)


@functools.lru_cache(maxsize=256)
def _weights(n_in: int, n_out: int) -> np.ndarray:
  """float32[n_out, n_in]: each output sample as a normalised triangle-filter average of inputs."""
  scale = n_in / n_out
  support = max(scale, 1.0)
  centers = (np.arange(n_out) + 0.5) * scale - 0.5  # output pixel centres in input coordinates.
  w = np.maximum(0.0, 1.0 - np.abs(np.arange(n_in)[None, :] - centers[:, None]) / support)
  empty = w.sum(axis=1) == 0  # cannot happen with support >= 1, kept for safety.
  w[empty, np.clip(np.round(centers[empty]).astype(int), 0, n_in - 1)] = 1.0
  return (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
  """float32[height, width, C] from [H, W, C] (separable linear, anti-aliased when shrinking)."""
  image = np.asarray(image, np.float32)
  h, w = image.shape[:2]
  if (h, w) == (height, width):
    return image
  rows = np.einsum("oh,hwc->owc", _weights(h, height), image)
  return np.einsum("pw,owc->opc", _weights(w, width), rows)


def to_unit(image: np.ndarray, channels: int) -> np.ndarray:
  """uint8 [H, W, C] (or [H, W]) -> float32 [H, W, channels] in [0, 1]; 3 -> 1 channel by the
  mean, 1 -> 3 by repeating."""
  image = np.asarray(image)
  if image.ndim == 2:
    image = image[..., None]
  image = image.astype(np.float32) / (255.0 if image.dtype == np.uint8 else 1.0)
  if image.shape[-1] == channels:
    return image
  if channels == 1:
    return image.mean(axis=-1, keepdims=True)
  if image.shape[-1] == 1:
    return np.repeat(image, channels, axis=-1)
  raise ValueError(f"cannot turn a {image.shape[-1]}-channel image into {channels} channels.")


def center_crop(image: np.ndarray, size: int, crop_fraction: float = 1.0) -> np.ndarray:
  """The central ``size`` x ``size`` after resizing the shorter side to size / crop_fraction."""
  h, w = image.shape[:2]
  short = max(size, int(round(size / crop_fraction)))
  nh, nw = (short, max(size, int(round(w * short / h)))) if h <= w else (max(size, int(round(h * short / w))), short)
  image = resize(image, nh, nw)
  top, left = (nh - size) // 2, (nw - size) // 2
  return image[top:top + size, left:left + size]


def random_resized_crop(image: np.ndarray, size: int, rng: np.random.Generator, *,
                        min_area: float = 0.08, flip: bool = True) -> np.ndarray:
  """A random crop (area fraction in [min_area, 1], aspect in [3/4, 4/3]) resized to size x size,
  flipped left-right with probability 1/2 when ``flip``; after 10 failed draws, the central
  square crop of the whole image (Inception's fallback)."""
  h, w = image.shape[:2]
  log_ratio = (math.log(RATIO_RANGE[0]), math.log(RATIO_RANGE[1]))
  for _ in range(10):
    area = h * w * rng.uniform(min_area, 1.0)
    ratio = math.exp(rng.uniform(*log_ratio))
    cw, ch = int(round(math.sqrt(area * ratio))), int(round(math.sqrt(area / ratio)))
    if 0 < cw <= w and 0 < ch <= h:
      top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
      break
  else:
    ch = cw = min(h, w)
    top, left = (h - ch) // 2, (w - cw) // 2
  out = resize(image[top:top + ch, left:left + cw], size, size)
  if flip and rng.random() < 0.5:
    out = out[:, ::-1]
  return np.ascontiguousarray(out)


__all__ = ["RATIO_RANGE", "center_crop", "random_resized_crop", "resize", "to_unit"]
