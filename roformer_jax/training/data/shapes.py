"""shapes2d: an offline image classification set whose label is a 2-D relation (issue 26).

Made for comparing 2-D RoPE variants at resolutions above the training one (RoPE-ViT, Heo et
al. 2024: train at 224 px, test at 320-512 px). Nothing is downloaded and nothing but NumPy
draws the images. The TFDS records hold **scene parameters**, not pixels; the input pipeline
renders each scene at the resolution it is asked for (``render(scene, resolution)``), so the
same scenes can be seen at 1x, 1.5x and 2x the training resolution.

A scene (coordinates are continuous, in units of the image side: x to the right, y down, the
image is [0, 1] x [0, 1], pixel (row i, column j) of an R-px image covers
[j/R, (j+1)/R] x [i/R, (i+1)/R]) holds ``NUM_OBJECTS`` = 3 objects, always in this order:

  0. A, a disk: ``sizes[0]`` is its radius, in [0.08, 0.14];
  1. B, an axis-aligned square: ``sizes[1]`` is its half-side, in [0.07, 0.12];
  2. a distractor, an axis-aligned plus sign: ``sizes[2]`` is its half-length, in [0.07, 0.12],
     each arm ``CROSS_ARM`` = 1/3 of that as half-width;

with ``centers`` float32[3, 2] (x, y), ``colors`` float32[3, 3] (RGB), ``background`` (a
grey level in [0, 0.2]) and ``kinds`` int32[3] = (0, 1, 2) (``CIRCLE``, ``SQUARE``,
``CROSS``). An object's grey level (the mean of its RGB channels) is drawn from its own band,
``INTENSITY_RANGES``: A bright [0.75, 0.85], B dim [0.4, 0.5], the distractor in between
[0.6, 0.7]; a colour is its grey level plus a tint (per-channel offsets uniform in +-``TINT``
= 0.1, less their mean), so A and B differ both in shape and in intensity, and the distractor
is a third blob that matches neither. Every object lies inside the image with a border of 0.02, and no two objects overlap
(their bounding discs are 0.03 apart or more).

The label is where A is relative to B, comparing centres (``relation_label``):

  label = (A.x > B.x) + 2 * (A.y > B.y)
  0 left_above, 1 right_above, 2 left_below, 3 right_below   ("above": smaller y)

with a margin: |A.x - B.x| >= 0.1 and |A.y - B.y| >= 0.1 (``MARGIN``), 3.2 px at 32 px and
0.8 px even at the smallest resolution, 8 px, so no rendering makes a label ambiguous. The
sampling distribution is symmetric under x -> 1 - x and y -> 1 - y, so the four labels are
equally likely.

Determinism: a split is scenes 0 .. n-1 (train 20,000, validation 2,000, test 2,000) drawn
in blocks of ``BLOCK`` = 1,000 by NumPy generators seeded ``[SEED, crc32(split), block]``
(``scenes``, vectorised), with the builder's fixed ``SEED``: scene i depends on (seed, split,
i) alone (``scene(split, i)``), and a smaller split is a prefix of a larger one. Records also
hold their ``index`` (TFDS stores them in a shuffled order).

Rendering (``render``): the background, then the objects in order composited with their
coverage (the fraction of each pixel's area that the shape covers) as alpha. The square and the
plus sign (a union of two bars) get their exact coverage analytically (products of 1-D
interval overlaps); the disk's is supersampled, ``supersampling(R)`` x ``supersampling(R)``
points per pixel (max(4, ceil(256 / R)): 64 per pixel at 32 px, 16 at 64 px and above), over
its bounding box only. Area-exact anti-aliasing keeps each shape's centre of mass where the
scene puts it, whatever the resolution (measured on 200 scenes: within 0.03 px at 32, 64 and
77 px, 0.1 px at 8 px; areas exact for the square and plus sign, within 0.7% for the disk), so
the same scene at 32 and 64 px has the same centres, scaled. Any resolution >= 8
(``MIN_RESOLUTION``) renders; one channel gives the grey level (the mean of the RGB channels).

Learnable and position-bound: a throwaway tiny ViT (4 layers, d 64, 4 heads, patch 4, [CLS]
head, AdamW 1e-3, batch 64) at 32 px reached 98.5% validation accuracy after 1,000 steps (5 min
on this project's 2-core CPU while it was busy, 2026-11-26) with fixed 2-D sin-cos position
embeddings, but only 35% with learned absolute ones in the same budget: the position encoding
is what the task is about.

  from roformer_jax.training.data import shapes
  s = shapes.scene("train", 0)
  small, large = shapes.render(s, 32), shapes.render(s, 64)   # float32[32, 32, 3], [64, 64, 3]

Build (seconds; the pipeline does it on first use):
``python -m roformer_jax.training.data.prepare dataset shapes2d``.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from roformer_jax.training.data.corpus import LocalBuilder, default_data_dir, file_lock

NAME = "shapes2d"
SEED = 2026_0326  # fixed: every machine builds the same scenes.
SPLIT_SIZES = {"train": 20_000, "validation": 2_000, "test": 2_000}

CIRCLE, SQUARE, CROSS = 0, 1, 2
KIND_NAMES = ("circle", "square", "cross")
NUM_OBJECTS = 3
LABELS = ("left_above", "right_above", "left_below", "right_below")  # where A is, relative to B.
NUM_CLASSES = len(LABELS)

SIZE_RANGES = ((0.08, 0.14), (0.07, 0.12), (0.07, 0.12))  # radius, half-side, half-length.
CROSS_ARM = 1 / 3  # the plus sign's arm half-width, as a fraction of its half-length.
MARGIN = 0.1  # |A.x - B.x| and |A.y - B.y| are at least this.
BORDER = 0.02  # every shape lies this far inside the image.
GAP = 0.03  # between the objects' bounding discs.
BLOCK = 1000  # scenes drawn by one generator (see ``scenes``).
# Grey levels (the channel mean of an object's colour): A bright, B dim, the distractor in
# between. A colour is its grey level plus a tint: offsets uniform in [-TINT, TINT] per channel,
# less their mean (so the grey level is exact and every channel stays in [0.26, 0.99]).
INTENSITY_RANGES = ((0.75, 0.85), (0.4, 0.5), (0.6, 0.7))
TINT = 0.1
BACKGROUND_RANGE = (0.0, 0.2)
MIN_RESOLUTION = 8
SCENE_FIELDS = ("kinds", "centers", "sizes", "colors", "background")
# Per-channel mean and standard deviation of the rendered pixels (32 px, the train split), for
# normalising: (x - mean) / std.
PIXEL_MEAN = (0.151, 0.151, 0.151)
PIXEL_STD = (0.165, 0.165, 0.165)


# --------------------------------------------------------------------------------------
# Scenes.
# --------------------------------------------------------------------------------------


def relation_label(centers: np.ndarray) -> int:
  """Where object 0 (A) is relative to object 1 (B): (A.x > B.x) + 2 * (A.y > B.y)."""
  (ax, ay), (bx, by) = np.asarray(centers)[0], np.asarray(centers)[1]
  return int(ax > bx) + 2 * int(ay > by)


def extents(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Each object's axis-aligned half-extent and bounding-disc radius, float64[..., 3] (units of the
  side), from ``sizes`` [..., 3] (radius, half-side, half-length)."""
  sizes = np.asarray(sizes, np.float64)
  r, s, l = sizes[..., 0], sizes[..., 1], sizes[..., 2]
  half = np.stack([r, s, l], axis=-1)
  return half, np.stack([r, s * math.sqrt(2), l * math.hypot(1, CROSS_ARM)], axis=-1)


def _place(rng: np.random.Generator, sizes: np.ndarray, candidates: int = 32) -> np.ndarray:
  """float32[N, 3, 2] centres: for each scene the first of its candidate placements that keeps
  the shapes inside (``BORDER``), apart (``GAP``) and A, B ``MARGIN`` apart on both axes; scenes
  whose candidates all fail (rare) draw again."""
  half, radius = extents(sizes)
  lo, hi = half + BORDER, 1 - half - BORDER  # [N, 3]
  pairs = np.triu_indices(NUM_OBJECTS, 1)
  centers = np.zeros(sizes.shape[:1] + (NUM_OBJECTS, 2), np.float32)
  todo = np.arange(len(sizes))
  for _ in range(1000):
    if not todo.size:
      return centers
    shape = (len(todo), candidates, NUM_OBJECTS, 2)
    u = rng.uniform(size=shape)
    c = (lo[todo, None, :, None] + u * (hi - lo)[todo, None, :, None]).astype(np.float32)
    margin = np.abs(c[:, :, 0] - c[:, :, 1]).min(axis=-1) >= MARGIN
    c64 = c.astype(np.float64)
    dist = np.linalg.norm(c64[:, :, :, None] - c64[:, :, None], axis=-1)  # [n, K, 3, 3]
    need = radius[todo][:, None, :, None] + radius[todo][:, None, None, :] + GAP
    apart = (dist >= need)[..., pairs[0], pairs[1]].all(axis=-1)
    fits = margin & apart  # [n, K]
    found = fits.any(axis=1)
    centers[todo[found]] = c[found, fits[found].argmax(axis=1)]
    todo = todo[~found]
  raise RuntimeError("could not place the shapes of a scene; the size ranges are too large.")


def sample_scenes(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
  """``n`` scenes (see the module docstring) drawn with ``rng``, as arrays with a leading [n]
  axis: ``kinds`` int32[n, 3], ``centers`` float32[n, 3, 2], ``sizes`` float32[n, 3],
  ``colors`` float32[n, 3, 3], ``background`` float32[n], ``label`` int64[n]."""
  sizes = rng.uniform(*np.array(SIZE_RANGES).T, size=(n, NUM_OBJECTS)).astype(np.float32)
  centers = _place(rng, sizes)
  grey = rng.uniform(*np.array(INTENSITY_RANGES).T, size=(n, NUM_OBJECTS))
  tint = rng.uniform(-TINT, TINT, size=(n, NUM_OBJECTS, 3))
  colors = (grey[..., None] + tint - tint.mean(-1, keepdims=True)).astype(np.float32)
  labels = (centers[:, 0, 0] > centers[:, 1, 0]).astype(np.int64) + 2 * (centers[:, 0, 1] > centers[:, 1, 1])
  return {"kinds": np.tile(np.array([CIRCLE, SQUARE, CROSS], np.int32), (n, 1)), "centers": centers,
          "sizes": sizes, "colors": colors,
          "background": rng.uniform(*BACKGROUND_RANGE, size=n).astype(np.float32), "label": labels}


def _block(split: str, block: int, seed: int) -> dict[str, np.ndarray]:
  return sample_scenes(np.random.default_rng([seed, zlib.crc32(split.encode()), block]), BLOCK)


def scenes(split: str, n: int, seed: int = SEED) -> dict[str, np.ndarray]:
  """Scenes 0 .. n-1 of ``split``, as arrays with a leading [n] axis (and ``index`` int64[n]).

  They are drawn in blocks of ``BLOCK`` scenes, block k by ``np.random.default_rng([seed,
  crc32(split), k])``, so scene i depends on (seed, split, i) alone and fewer scenes are a
  prefix of more.
  """
  blocks = [_block(split, k, seed) for k in range(-(-n // BLOCK))] or [sample_scenes(np.random.default_rng(0), 0)]
  out = {key: np.concatenate([b[key] for b in blocks])[:n] for key in blocks[0]}
  out["index"] = np.arange(n, dtype=np.int64)
  return out


def scene(split: str, index: int, seed: int = SEED) -> dict[str, np.ndarray]:
  """Scene ``index`` of ``split``: the dataset's record ``index`` (``index`` included)."""
  block = _block(split, index // BLOCK, seed)
  return {**{key: value[index % BLOCK] for key, value in block.items()}, "index": np.int64(index)}


# --------------------------------------------------------------------------------------
# Rendering.
# --------------------------------------------------------------------------------------


def supersampling(resolution: int) -> int:
  """Points per pixel side when supersampling a disk: max(4, ceil(256 / R))."""
  return max(4, -(-256 // resolution))


def _interval_coverage(lo: float, hi: float, resolution: int) -> np.ndarray:
  """The length of [lo, hi] (in pixels) inside each pixel [j, j + 1]."""
  j = np.arange(resolution, dtype=np.float64)
  return np.clip(np.minimum(j + 1, hi) - np.maximum(j, lo), 0.0, 1.0)


def _box(cx: float, cy: float, hx: float, hy: float, resolution: int) -> np.ndarray:
  r = resolution
  return np.outer(_interval_coverage(r * (cy - hy), r * (cy + hy), r),
                  _interval_coverage(r * (cx - hx), r * (cx + hx), r))


def _disk(cx: float, cy: float, radius: float, resolution: int) -> np.ndarray:
  r, n = resolution, supersampling(resolution)
  out = np.zeros((r, r))
  x0, x1 = max(0, math.floor(r * (cx - radius))), min(r, math.ceil(r * (cx + radius)))
  y0, y1 = max(0, math.floor(r * (cy - radius))), min(r, math.ceil(r * (cy + radius)))
  if x1 <= x0 or y1 <= y0:
    return out
  sub = (np.arange(n) + 0.5) / n
  dx2 = ((np.arange(x0, x1)[:, None] + sub) / r - cx) ** 2  # [columns, n]
  dy2 = ((np.arange(y0, y1)[:, None] + sub) / r - cy) ** 2  # [rows, n]
  inside = dy2[:, :, None, None] + dx2[None, None] <= radius * radius  # [rows, n, columns, n]
  out[y0:y1, x0:x1] = inside.mean(axis=(1, 3))
  return out


def coverage(kind: int, center, size: float, resolution: int) -> np.ndarray:
  """float32[R, R]: the fraction of each pixel's area covered by one shape.

  Args:
    kind: ``CIRCLE`` (``size`` = radius), ``SQUARE`` (half-side) or ``CROSS`` (half-length).
    center: (x, y) in units of the image side.
    size: see ``kind``, in units of the image side.
    resolution: R, the image side in pixels.
  """
  cx, cy, size = float(center[0]), float(center[1]), float(size)
  if kind == CIRCLE:
    cov = _disk(cx, cy, size, resolution)
  elif kind == SQUARE:
    cov = _box(cx, cy, size, size, resolution)
  elif kind == CROSS:
    arm = size * CROSS_ARM  # union of two bars: both, less their shared centre.
    cov = (_box(cx, cy, size, arm, resolution) + _box(cx, cy, arm, size, resolution)
           - _box(cx, cy, arm, arm, resolution))
  else:
    raise ValueError(f"shape kind {kind!r}; expected one of {dict(enumerate(KIND_NAMES))}.")
  return cov.astype(np.float32)


def render(scene: Mapping[str, np.ndarray], resolution: int, channels: int = 3) -> np.ndarray:
  """The scene drawn at ``resolution`` x ``resolution`` pixels: float32[R, R, channels] in [0, 1].

  Args:
    scene: a mapping with the ``SCENE_FIELDS`` (a record of the dataset, or ``scene(...)``).
    resolution: R >= ``MIN_RESOLUTION`` (8).
    channels: 3 (RGB) or 1 (grey: the mean of the RGB channels).
  """
  resolution = int(resolution)
  if resolution < MIN_RESOLUTION:
    raise ValueError(f"resolution={resolution}; shapes2d renders at {MIN_RESOLUTION} px or more.")
  if channels not in (1, 3):
    raise ValueError(f"channels={channels}; expected 1 (grey) or 3 (RGB).")
  colors = np.asarray(scene["colors"], np.float32)
  image = np.full((resolution, resolution, 3), float(np.asarray(scene["background"])), np.float32)
  for kind, center, size, color in zip(np.asarray(scene["kinds"]), np.asarray(scene["centers"]),
                                       np.asarray(scene["sizes"]), colors, strict=True):
    alpha = coverage(int(kind), center, size, resolution)[..., None]
    image = image * (1 - alpha) + color * alpha
  if channels == 1:
    image = image.mean(axis=-1, keepdims=True)
  return image.astype(np.float32)


# --------------------------------------------------------------------------------------
# The TFDS builder.
# --------------------------------------------------------------------------------------


class Shapes2dConfig(tfds.core.BuilderConfig):
  """How many scenes each split holds, and the seed they are drawn with."""

  def __init__(self, *, num_examples: Mapping[str, int], seed: int = SEED, **kwargs):
    super().__init__(**kwargs)
    self.num_examples = dict(num_examples)
    self.seed = seed


DEFAULT = Shapes2dConfig(name="default", num_examples=SPLIT_SIZES,
                         description="20,000 / 2,000 / 2,000 train / validation / test scenes.")


class Shapes2d(LocalBuilder):
  """Scenes of a disk A, a square B and a plus-sign distractor; label: A's place relative to B."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Scene parameters of 3 shapes; 4 relation classes with a 0.1 margin."}
  BUILDER_CONFIGS = [DEFAULT]

  def _info(self) -> tfds.core.DatasetInfo:
    n = NUM_OBJECTS
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({
            "index": np.int64,
            "kinds": tfds.features.Tensor(shape=(n,), dtype=np.int32),
            "centers": tfds.features.Tensor(shape=(n, 2), dtype=np.float32),
            "sizes": tfds.features.Tensor(shape=(n,), dtype=np.float32),
            "colors": tfds.features.Tensor(shape=(n, 3), dtype=np.float32),
            "background": np.float32,
            "label": tfds.features.ClassLabel(names=LABELS),
        }),
        supervised_keys=None,
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing to download.
    return {split: self._generate_examples(split, n)
            for split, n in self.builder_config.num_examples.items()}

  def _generate_examples(self, split: str, n: int):
    drawn = scenes(split, n, self.builder_config.seed)
    for i in range(n):
      yield i, {key: value[i] for key, value in drawn.items()}


def build_shapes2d(data_dir: str | os.PathLike | None = None, *,
                   config: Shapes2dConfig | None = None) -> Shapes2d:
  """Builds shapes2d into ``data_dir`` unless it is there already; returns its builder.

  Args:
    data_dir: TFDS data directory (default ``corpus.default_data_dir()``).
    config: the split sizes and seed (default ``DEFAULT``: 20,000 / 2,000 / 2,000).

  Returns:
    The prepared builder; read a split with ``builder.as_data_source(split)``.
  """
  data_dir = Path(data_dir) if data_dir else default_data_dir()
  config = config or DEFAULT
  with file_lock(data_dir / f".{NAME}_{config.name}.lock"):
    registered = {c.name: c for c in Shapes2d.BUILDER_CONFIGS}
    builder = Shapes2d(data_dir=str(data_dir), file_format="array_record",
                       config=config.name if registered.get(config.name) is config else config)
    if not builder.is_prepared():
      builder.download_and_prepare()
  return builder


__all__ = ["CIRCLE", "CROSS", "DEFAULT", "LABELS", "MARGIN", "MIN_RESOLUTION", "NAME", "NUM_CLASSES",
           "NUM_OBJECTS", "PIXEL_MEAN", "PIXEL_STD", "SCENE_FIELDS", "SEED", "SPLIT_SIZES", "SQUARE",
           "Shapes2d", "Shapes2dConfig", "build_shapes2d", "coverage", "relation_label", "render",
           "sample_scenes", "scene", "scenes", "supersampling"]
