"""Observes the RoPE of transformers vision towers that take pixels (issue 39): Pixtral, MLCD, ...

Used by scripts/make_hf_rope_registry.py (the throwaway reference venv: torch, transformers).

A tower whose forward takes `pixel_values` (no token ids, no Qwen-VL grid_thw) runs for real on the
CPU in float64, built from `shrunk(config)` (its head dim and RoPE keys kept, 2 heads), on one
random image of PIXEL_GRID patches. Every call of a rotary apply function in transformers' code is
recorded (the profiler of scripts/diffusers_rope_observer.py), and the rotation is *fitted*, not
read from names, by the same code that fits the diffusers transformers' latent grids:

- the numbering of the image's tokens: its patches in raster order at (row, column) or
  (column, row), from 0 or from 1 (Llama 4), or at DINOv3's centred coordinates times 2 pi; the
  tokens before them (a class token, registers) or after them at position 0 (which is no rotation);
- which axis owns each channel pair, at what frequency: each axis its own spectrum
  (frequencies="per_axis"), one spectrum over the head dealt in sections ("shared"), or dealt
  round-robin to the axes ("split", Pixtral);
- the pairing (interleaved or rotate_half) and theta;

and the fitted spec must reproduce every recorded apply to 1e-12 in float64 (or float32's
rounding where the model computes its tables in float32). Then the keys are confirmed by
perturbation: the head dim (hidden_size + 16 per head) must move the split, and rope_theta x 4
must move theta. What is hand-written, and why: the image's size in patches and the input names
(a tower's forward needs pixels whose shape the config implies); nothing here decides the rotation.
"""

from __future__ import annotations

import copy
import inspect
import json

import numpy as np
import torch

import diffusers_rope_observer as fit

PIXEL_GRID = (5, 6)  # patches per (row, column) of the probe image: 30 tokens, enough near the origin to fit on
MAX_BYTES = 8e9  # as the registry's: the largest model made real on the CPU
MAX_PREFIX = 16
MAX_SIDE = 72  # (SAM 3's 1008 / 14) the largest image side, in patches, a tower that needs its own image size is run at  # the most tokens before (or after) the patches a tower may add (a class token, registers)


Refused = fit.Refused
LAST_MODEL = [None]  # the tower `run` built last


def takes_pixels(cls, model_type: str | None = None) -> bool:
  """A tower run on pixels alone: pixel_values, and neither token ids nor a Qwen-VL patch grid; or one whose
  inputs `TOWERS` writes (Kimi-K2.5's patches and their grid_thw)."""
  params = inspect.signature(cls.forward).parameters
  return model_type in TOWERS or ("pixel_values" in params and
                                  not {"input_ids", "grid_thw", "image_grid_thw"} & set(params))


def _size(config, *keys, default):
  for k in keys:
    v = getattr(config, k, None)
    if isinstance(v, (list, tuple)) and v and isinstance(v[0], int):
      return int(v[0])
    if isinstance(v, int) and not isinstance(v, bool):
      return v
  return default


def pixel_inputs(config, grid: tuple[int, int] = PIXEL_GRID) -> dict:
  """One random image of `grid` patches, [1, channels, rows * patch, columns * patch], float64."""
  patch = _size(config, "patch_size", default=14)
  channels = _size(config, "num_channels", "in_channels", "in_chans", default=3)
  torch.manual_seed(0)
  if "inputs" in TOWERS.get(getattr(config, "model_type", None), {}):
    return TOWERS[config.model_type]["inputs"](config, grid, patch, channels)
  return {"pixel_values": torch.randn(1, channels, grid[0] * patch, grid[1] * patch, dtype=torch.float64)}


def _gemma4(config, grid: tuple[int, int], patch: int, channels: int) -> dict:
  rows, cols = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
  return {"pixel_values": torch.rand(1, grid[0] * grid[1], channels * patch * patch, dtype=torch.float64),
          "pixel_position_ids": torch.from_numpy(np.stack([cols, rows], -1).reshape(1, -1, 2))}


def _kimi_k25(config, grid: tuple[int, int], patch: int, channels: int) -> dict:
  return {"pixel_values": torch.randn(grid[0] * grid[1], channels, patch, patch, dtype=torch.float64),
          "grid_thw": torch.tensor([[1, grid[0], grid[1]]])}


def _muse(config, grid: tuple[int, int], patch: int, channels: int) -> dict:
  width = getattr(config, "patch_temporal", 1) * channels * patch * patch
  return {"pixel_values": torch.randn(grid[0] * grid[1], width, dtype=torch.float64),
          "grid_thw": torch.tensor([[1, grid[0], grid[1]]])}


def _image_pair(config, grid: tuple[int, int], patch: int, channels: int) -> dict:
  """A pair of random grey images [1, 2, 3, H, W] whose coarse feature map, aggregated, is `grid`: each side
  grid x the backbone's stride (the product of its stage_stride) x its query aggregation's stride, which must be
  its kernel too (else the aggregated map is no such grid)."""
  if config.q_aggregation_kernel_size != config.q_aggregation_stride:
    raise Refused(f"its query aggregation's kernel ({config.q_aggregation_kernel_size}) is not its stride "
                  f"({config.q_aggregation_stride}): the probe image's size for a {grid} grid is not derived")
  cell = int(np.prod(config.stage_stride)) * config.q_aggregation_stride
  grey = torch.randn(1, 2, 1, grid[0] * cell, grid[1] * cell, dtype=torch.float64)
  return {"pixel_values": grey.expand(-1, -1, 3, -1, -1).contiguous()}


def _efficientloftr_wider(config):
  """EfficientLoFTR's config with its attention width (hidden_size) doubled: its validation ties hidden_size to its
  backbone's last stage width (out_features[-1]), so both move; built anew, as its __post_init__ derives the
  stages' widths from out_features."""
  width = 2 * config.hidden_size
  kwargs = {k: getattr(config, k) for k in ("stage_num_blocks", "stage_stride", "num_attention_heads",
                                           "q_aggregation_kernel_size", "q_aggregation_stride",
                                           "kv_aggregation_kernel_size", "kv_aggregation_stride",
                                           "num_attention_layers", "rope_parameters")}
  return type(config)(**kwargs, hidden_size=width, out_features=[*config.out_features[:-1], width])


# Hand-written inputs of the towers whose forward takes its image in a form of its own, each with its reason:
# {model_type: {"grid": the probe's patches, "inputs": fn(config, grid, patch, channels) -> forward inputs}}; and,
# where a tower's config ties its attention width to other keys (validated), "wider": fn(config) -> the config
# with its width doubled, for the head-dim perturbation of a tower that rotates its whole width.
TOWERS = {
    # EfficientLoFTR: an image matcher on a pair of images [B, 2, C, H, W], grey (it keeps the first of three equal
    # channels), sized so that its coarse features, aggregated, are the grid its RoPE numbers (a 5 x 6 grid)
    "efficientloftr": {"grid": (5, 6), "inputs": _image_pair, "wider": _efficientloftr_wider},
    # Gemma 4: pre-patchified pixels in [0, 1] and each patch's (x, y) = (column, row), as its processor gives
    # them; a grid of 3-multiples for its 3 x 3 output pooling
    "gemma4_vision": {"grid": (6, 6), "inputs": _gemma4},
    # Kimi-K2.5: one [3, patch, patch] image per patch, and the image's (frames, rows, columns) in patches
    "kimi_k25_vision": {"grid": (4, 6), "inputs": _kimi_k25},  # (rows even: it pools 2 x 2 patches after)
    # Muse: each patch's pixels flattened, and the image's (frames, rows, columns) in patches; even sides for its
    # 2 x 2 pixel shuffle
    "muse_glimmer_vision": {"grid": (4, 6), "inputs": _muse},
    "muse_spark_vision": {"grid": (4, 6), "inputs": _muse},
    # EoMT: its mask head reshapes the patches to config.image_size // patch_size per side, so the probe image is
    # that size: the config's image_size set to a 6 x 6 patch image (its 640 would make a 40 x 40 golden of 7 MB)
    "eomt_dinov3": {"grid": (6, 6), "image_size": True},
}


def numbering_positions(numbering: dict, grid: tuple[int, int]) -> np.ndarray:
  """[tokens, 2] positions of a numbering: the patches in raster order (rows slowest) at (row, column) ("hw")
  or (column, row) ("wh"), counted from `start`, or ("centre_2pi") at 2 pi ((i + 0.5) / n * 2 - 1) per axis
  (DINOv3's coordinates times its 2 pi); `extra` tokens at position 0 before ("first") or after them."""
  rows, cols = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
  rows, cols = rows.reshape(-1), cols.reshape(-1)
  if numbering["scale"] == "centre_2pi":
    r, c = 2 * np.pi * (((rows + 0.5) / grid[0]) * 2 - 1), 2 * np.pi * (((cols + 0.5) / grid[1]) * 2 - 1)
  else:
    r, c = rows + numbering["start"], cols + numbering["start"]
  pos = np.stack([r, c] if numbering["order"] == "hw" else [c, r], -1)
  zeros = np.zeros((numbering["extra"], 2), pos.dtype)
  return np.concatenate([zeros, pos] if numbering["where"] == "first" else [pos, zeros])


def _numberings(tokens: int, grid: tuple[int, int]) -> list[tuple[str, None, dict[int, np.ndarray]]]:
  """The token numberings a tower may rotate by, as fit.fit_grid takes them (named by their JSON): every
  `numbering_positions` with the `tokens - rows * columns` other tokens before or after the patches."""
  extra = tokens - grid[0] * grid[1]
  if not 0 <= extra <= MAX_PREFIX:
    return []
  out = []
  for order in ("hw", "wh"):
    for scale, start in (("integer", 0), ("integer", 1), ("centre_2pi", 0)):
      for where in ("first", "last") if extra else ("first",):
        numbering = {"order": order, "scale": scale, "start": start, "extra": extra, "where": where}
        out.append((json.dumps(numbering, sort_keys=True), None, {tokens: numbering_positions(numbering, grid)}))
  return out


def run(model_cls, config, keep_on_error: bool = False) -> tuple[list[dict], tuple[int, int]]:
  """The tower built from `config` in float64 on the CPU, run on the probe image (PIXEL_GRID patches; or, where
  its forward needs its own image size, config.image_size): its recorded applies, and the grid it ran on.
  keep_on_error: at its own image size, a forward that fails after it rotated keeps what it recorded."""
  torch.manual_seed(0)
  config = copy.deepcopy(config)
  grid = TOWERS.get(getattr(config, "model_type", None), {}).get("grid", PIXEL_GRID)
  if TOWERS.get(getattr(config, "model_type", None), {}).get("image_size"):  # the model sized to the probe image
    config = _sized(config, grid)
  config._attn_implementation = "eager"  # the reference attention (Sapiens 2's GQA breaks sdpa); RoPE is before it
  default = torch.get_default_dtype()
  torch.set_default_dtype(torch.float64)  # built in float64: .double() would drop the imaginary part of a complex
  try:  # buffer (Llama 4's freqs_ci)
    model = model_cls(config).eval()
  finally:
    torch.set_default_dtype(default)
  LAST_MODEL[0] = model  # (its parameters: where a class token's learned angles are found)
  try:
    return _probe(model, pixel_inputs(config, grid)), grid
  except Exception as small_error:  # noqa: BLE001  a learned position table or a window sized for its image
    side = _size(config, "image_size", default=0) // _size(config, "patch_size", default=14)
    try:
      if not 0 < side <= MAX_SIDE:
        raise small_error
      calls = fit._applies(model, pixel_inputs(config, (side, side)), library="transformers",
                           keep_on_error=keep_on_error)
      return calls, (side, side)
    except Exception:  # noqa: BLE001  last, where one image fails at either size: an image matcher's forward on a
      # pair of images [B, 2, C, H, W] (LightGlue, EfficientLoFTR); its failure too raises the first error
      try:
        return fit._applies(model, _paired(pixel_inputs(config, grid)), library="transformers"), grid
      except Exception:  # noqa: BLE001
        raise small_error from None


DEGENERATE = 1e-6  # a probe whose q stays below this everywhere in some apply call is too small to fit a rotation on


def _probe(model, inputs: dict) -> list[dict]:
  """fit._applies of the tower on its probe image; where its own initialisation leaves the q of some apply call
  vanishingly small (EfficientLoFTR: BatchNorm weights ~ N(0, 0.02) through its 21 RepVGG blocks give q ~ 1e-38,
  which float32 rounds to nothing), run again with its normalisation layers reset to PyTorch's defaults (weight 1,
  bias 0, running mean 0 and variance 1). Any q is a probe: the rotation is the same linear map whatever q is; only
  its scale must let the float32 tables' rounding be told from the rotation."""
  calls = fit._applies(model, inputs, library="transformers")
  if calls and min(float(np.abs(c["x"]).max()) for c in calls) < DEGENERATE:
    with torch.no_grad():
      for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._NormBase):
          m.reset_parameters()
    calls = fit._applies(model, inputs, library="transformers")
  return calls


def _sized(config, grid: tuple[int, int]):
  """A copy of `config` whose image_size is the probe image's (a square grid of patches)."""
  if grid[0] != grid[1]:
    raise ValueError(f"a tower sized by its image_size takes a square probe grid, not {grid}")
  sized = copy.deepcopy(config)
  sized.image_size = grid[0] * _size(config, "patch_size", default=14)
  return sized


def fit_tower(calls: list[dict], grid: tuple[int, int]) -> dict:
  """The rotation the recorded applies make, fitted over the image's numbering (fit.fit_grid)."""
  if not calls:
    raise Refused("its forward on an image calls no rotary apply function")
  shapes = {c["x"].shape for c in calls}
  patches = grid[0] * grid[1]
  tokens = sorted({n for shape in shapes for n in (shape[:2] if len(shape) == 3 else shape[1:3])
                   if patches <= n <= patches + MAX_PREFIX})
  no_one_axis = Refused(f"its applies' shapes {sorted(shapes)} hold no one token axis of the image's {patches} "
                        f"patches (plus up to {MAX_PREFIX} others)")
  if not tokens:
    raise no_one_axis
  n = tokens[0]
  rotated = [c for c in calls if fit._token_count(c["x"].shape, (n,))]
  if len(tokens) > 1:  # the fewest, and more in some layers: query tokens first there (EoMT), or refused as before
    queries = _queries(calls, rotated, n, grid)
    if queries is None:
      raise no_one_axis
    return queries
  if len(rotated) != len(calls):
    windows = _windows(calls, rotated, n, grid)
    if windows is not None:
      return windows
    queries = _queries(calls, rotated, n, grid)
    if queries is not None:
      return queries
    raise Refused(f"it also rotates tensors of shapes {sorted(shapes)} that hold no {n}-token axis: not observed")
  try:
    return fit.fit_grid(rotated, (n,), _numberings(n, grid))
  except Refused:
    if n == patches:
      raise
  for side, keep in (("before", slice(n - patches, n)), ("after", slice(0, patches))):  # the patches alone
    alone = [{**c, "x": _tokens(c["x"], n, keep), "out": _tokens(c["out"], n, keep)} for c in rotated]
    try:
      patches_fit = fit.fit_grid(alone, (patches,), _numberings(patches, grid))
    except Refused:
      continue
    if side == "before" and n - patches == 1:  # one class token first: its angles, to be found among the parameters
      learned = _class_angles(rotated, n, grid, patches_fit)
      if learned is not None:
        return learned
    raise Refused(f"its patches rotate as 2-D RoPE, but the {n - patches} token(s) {side} them turn by angles of "
                  "their own, at no position of the grid (a learned class-token rotation)")
  return fit.fit_grid(rotated, (n,), _numberings(n, grid))  # refused again, with the fit's own reason


CLASS_TOLERANCE = 1e-5  # how near (radians) a parameter must be to the class token's observed angles (float32 applies)


def class_positions(numbering: dict, grid: tuple[int, int]) -> np.ndarray:
  """[1 + patches, 3]: the class token at (0, 0, 1), the patches at their numbering's (., ., 0): the third axis the
  one by which the class token turns, by learned angles of its own (rope.grid_positions(..., cls="first",
  cls_axis=True))."""
  patches = numbering_positions({**numbering, "extra": 0}, grid)
  own = np.zeros((len(patches) + 1, 1))
  own[0] = 1
  return np.concatenate([np.concatenate([np.zeros((1, 2)), patches]), own], axis=1)


def class_reference(x: np.ndarray, positions: np.ndarray, frequencies: np.ndarray, layout: str,
                    tables: str) -> np.ndarray:
  """float64 NumPy: x [B, T, H, D] turned pair by pair by positions [T, A] . frequencies [A, D / 2] (dense: every pair
  by every axis); tables="float32" as a float32 apply (x and the cos/sin in float32)."""
  ang = positions.astype(np.float64) @ frequencies.astype(np.float64)
  c, s = np.cos(ang)[None, :, None], np.sin(ang)[None, :, None]
  if tables == "float32":
    c, s, x = c.astype(np.float32), s.astype(np.float32), x.astype(np.float32)
  i, j = fit.pairs(x.shape[-1], layout)
  out = np.empty_like(x)
  out[..., i], out[..., j] = x[..., i] * c - x[..., j] * s, x[..., i] * s + x[..., j] * c
  return out.astype(np.float64)


def dense_grid_frequencies(axes: list[int], theta: float, frequencies: str) -> np.ndarray:
  """[2, D / 2]: the patches' per-axis spectrum as dense frequencies (each pair's own axis its frequency, the other
  0), as fit.reference_rotation gives it."""
  probe = np.eye(2)  # the angle of each pair at unit position on each axis
  x = np.zeros((1, 2, 1, sum(axes)))
  i, _ = fit.pairs(sum(axes), "interleaved")
  x[..., i] = 1.0  # (1, 0) per interleaved pair: its angle is its turn
  out = fit.reference_rotation(x, probe, axes, theta, "interleaved", "float64", frequencies)
  return np.arctan2(out[0, :, 0, 1::2], out[0, :, 0, 0::2])


def _class_angles(rotated: list[dict], n: int, grid: tuple[int, int], patches_fit: dict) -> dict | None:
  """Where the patches fit 2-D RoPE and the one token before them turns by angles of its own: those angles [D / 2]
  (the median over the calls, heads and batch, each call's within CLASS_TOLERANCE of them, its pairs keeping their
  lengths), and the fit of the whole call as dense frequencies over (row, column, class) with the class token at
  (0, 0, 1); None where the class token's turn is no rotation by one set of angles."""
  numbering = json.loads(patches_fit["numbering"])
  if numbering["scale"] != "integer" or patches_fit.get("rotary_dim", sum(patches_fit["axes"])) != sum(
      patches_fit["axes"]):
    return None
  layout = patches_fit["layout"]
  if layout not in ("interleaved", "half"):
    return None
  calls = [(fit._to_bthd(c["x"], n), fit._to_bthd(c["out"], n)) for c in rotated]
  if not all(fit._pairs_keep_norms(x[:, :1], out[:, :1], layout) for x, out in calls):
    return None
  seen = np.stack([np.median(fit._angles(x[:, :1], out[:, :1], layout), axis=(0, 1, 2)) for x, out in calls])
  angles = np.median(seen, axis=0)
  if np.abs(np.angle(np.exp(1j * (seen - angles)))).max() > CLASS_TOLERANCE:
    return None
  positions = class_positions(numbering, grid)
  dense = np.concatenate([dense_grid_frequencies(patches_fit["axes"], patches_fit["theta"],
                                                 patches_fit["frequencies"]), angles[None]])
  tables = patches_fit["tables"]
  err = max(float(np.abs(class_reference(x, positions, dense, layout, tables) - out).max()) for x, out in calls)
  if err > fit._tolerance(tables, [(x, out, positions) for x, out in calls]):
    return None
  return {**patches_fit, "positions": positions, "error": max(err, patches_fit["error"]),
          "class_angles": angles, "class_frequencies": dense}


def window_scaled_positions(numbering: dict, grid: tuple[int, int], window: int) -> np.ndarray:
  """`numbering_positions` times window / columns, in float32 as SAM 3 computes them (its global layers number the
  whole image's grid so that it spans the window's range: (column, row) * window_size / grid width)."""
  pos = numbering_positions(numbering, grid).astype(np.float32)
  return (pos * np.float32(window / grid[1])).astype(np.float64)


def _windows(calls: list[dict], rotated: list[dict], n: int, grid: tuple[int, int]) -> dict | None:
  """Where some applies rotate the whole image's n tokens and the others a square window's w * w (SAM 3's windowed
  layers: 24 x 24 windows): the fit of both, or None where the calls are not so (the caller refuses as before).
  Each window's tokens must fit a numbering of their own w x w grid, and the whole image's tokens the same numbering
  of the image's grid, either as is or scaled by w / columns (SAM 3's global layers), with the same pairing, split,
  frequencies and theta: one spec whose positions differ by layer. Refused, naming the mechanism, where they fit
  but differ, or where the whole image's positions are none of those."""
  kept = {id(c) for c in rotated}
  others = [c for c in calls if id(c) not in kept]
  sides = {int(round(k ** 0.5)) for c in others for k in c["x"].shape[1:3] if 4 <= k < n and
           int(round(k ** 0.5)) ** 2 == k}
  if len(sides) != 1:
    return None
  w = sides.pop()
  windowed = [c for c in others if fit._token_count(c["x"].shape, (w * w,))]
  if len(windowed) != len(others):
    return None
  try:
    local = fit.fit_grid(windowed, (w * w,), _numberings(w * w, (w, w)))
  except Refused:
    return None
  numbering = json.loads(local["numbering"])
  candidates = _numberings(n, grid)
  scaled = {**numbering, "times": "window/columns"}
  candidates.append((json.dumps(scaled, sort_keys=True), None, {n: window_scaled_positions(numbering, grid, w)}))
  try:
    whole = fit.fit_grid(rotated, (n,), candidates)
  except Refused as e:
    raise Refused(f"windowed attention with per-layer positions: {len(windowed)} apply call(s) rotate {w} x {w} "
                  f"windows, each window's tokens numbered from its own corner ({numbering}), and {len(rotated)} "
                  f"rotate the whole {grid[0]} x {grid[1]} image by positions that neither an integer numbering of "
                  f"its grid nor that numbering times {w}/{grid[1]} gives ({e})") from None
  same = ("layout", "axes", "theta", "frequencies", "section_layout")
  if any(local.get(k) != whole.get(k) for k in same) or \
      {k: v for k, v in json.loads(whole["numbering"]).items() if k != "times"} != numbering:
    raise Refused(f"windowed attention with per-layer rotations: its {w} x {w} windows rotate as "
                  f"{ {k: local.get(k) for k in same} } numbered {numbering}, its whole-image layers as "
                  f"{ {k: whole.get(k) for k in same} } numbered {json.loads(whole['numbering'])}: not one spec")
  return {**whole, "tables": "float32" if "float32" in (local["tables"], whole["tables"]) else "float64",
          "error": max(local["error"], whole["error"]), "numbering": local["numbering"],
          "global_numbering": whole["numbering"],
          "windows": {"window": w, "kinds": ["global" if id(c) in kept else "window" for c in calls],
                      "local": local, "windowed": windowed, "rotated": rotated}}


def _queries(calls: list[dict], rotated: list[dict], n: int, grid: tuple[int, int]) -> dict | None:
  """Where the other applies rotate m > n tokens, the m - n more all in front of the n (EoMT: its last num_blocks
  layers put num_queries query tokens before the class and register tokens): the fit of both, or None where the
  calls are not so (the caller refuses as before). The n-token calls must fit a numbering of the image with its
  other tokens first, and the m-token calls the same numbering with m - n more tokens first, each at position 0
  (which turns nothing), with the same pairing, split, frequencies and theta: one spec whose positions differ by
  layer only in how many unrotated tokens come first. Refused, naming the mechanism, where the m-token calls
  rotate otherwise."""
  kept = {id(c) for c in rotated}
  others = [c for c in calls if id(c) not in kept]
  shape = others[0]["x"].shape
  more = {k for c in others for k in (c["x"].shape[:2] if len(c["x"].shape) == 3 else c["x"].shape[1:3]) if k > n}
  if len(more) != 1:
    return None
  m = more.pop()
  if not all(fit._token_count(c["x"].shape, (m,)) for c in others):
    return None
  whole = fit.fit_grid(rotated, (n,), _numberings(n, grid))
  numbering = json.loads(whole["numbering"])
  if numbering["where"] != "first" and numbering["extra"]:
    return None  # its other tokens after the patches: where the m - n go is another question
  front = {**numbering, "extra": numbering["extra"] + m - n, "where": "first"}
  candidate = [(json.dumps(front, sort_keys=True), None, {m: numbering_positions(front, grid)})]
  try:
    local = fit.fit_grid(others, (m,), candidate)
  except Refused as e:
    raise Refused(f"{len(others)} apply call(s) rotate {m} tokens of shape {shape}, {m - n} more than the image's "
                  f"{n}, but not as that numbering with the {m - n} more first at position 0 (unrotated): {e}") from None
  same = ("layout", "axes", "theta", "frequencies", "section_layout", "tables")
  if any(local.get(k) != whole.get(k) for k in same):
    raise Refused(f"its {m}-token layers rotate as { {k: local.get(k) for k in same} }, its {n}-token layers as "
                  f"{ {k: whole.get(k) for k in same} }: not one spec")
  return {**whole, "error": max(local["error"], whole["error"]),
          "queries": {"tokens": m - n, "kinds": ["queries" if id(c) not in kept else "plain" for c in calls],
                      "first": others[0], "positions": local["positions"]}}


def _paired(inputs: dict) -> dict:
  """The probe image and a second random one of its shape as one pair [1, 2, C, H, W]."""
  image = inputs["pixel_values"]
  return {**inputs, "pixel_values": torch.stack([image, torch.randn_like(image)], dim=1)}


def _fits(model_cls, config):
  """`config`, if a model of it fits in float64 in MAX_BYTES; else Refused."""
  with torch.device("meta"):
    size = sum(p.numel() for p in model_cls(config).parameters())
  if size * 8 > MAX_BYTES:
    raise Refused(f"its tower keeps {size / 1e9:.1f}B parameters: too large to run in float64 on the CPU")
  return config


def _meta_failure(model_cls, config) -> str | None:
  """The error of the default config's forward on the meta device (the probe image's shapes, no values: a width
  one module gives and another does not take, DeepSeek-OCR 2's SAM features of 896 into a 4096-wide encoder), or
  None where that forward runs (or stops on values, which a meta tensor has none of: not a shape error)."""
  try:
    with torch.device("meta"):
      model = model_cls(copy.deepcopy(config))
    side = _size(config, "image_size", default=0) // _size(config, "patch_size", default=14)
    grid = (side, side) if 0 < side <= MAX_SIDE else PIXEL_GRID  # its own image size where it names one
    inputs = {k: v.to("meta", torch.float32) if torch.is_tensor(v) and v.is_floating_point() else v
              for k, v in pixel_inputs(config, grid).items()}
    with torch.no_grad():
      model(**inputs)
  except RuntimeError as e:
    text = str(e)
    if "size" in text.lower() and "meta" not in text.lower():  # a shape mismatch, not a meta-device limitation
      return f"{type(e).__name__}: {next((x for x in text.splitlines() if x.strip()), '')[:160]}"
  except Exception:  # noqa: BLE001
    return None
  return None


def _tokens(a: np.ndarray, n: int, keep: slice) -> np.ndarray:
  b = fit._to_bthd(a, n)
  return b[:, keep]


def rope_config(config) -> tuple[str | None, object]:
  """(key, sub-config) where the keys a tower's attention reads (hidden_size, num_attention_heads) are in one
  sub-config and not in the config itself (SAM 3's vision model: its ViT's backbone_config), else (None, config)."""
  if isinstance(getattr(config, "hidden_size", None), int) and isinstance(getattr(config, "num_attention_heads", None),
                                                                          int):
    return None, config
  subs = [k for k in getattr(config, "sub_configs", {}) or {}
          if isinstance(getattr(getattr(config, k, None), "num_attention_heads", None), int)]
  return (subs[0], getattr(config, subs[0])) if len(subs) == 1 else (None, config)


WINDOW_PROBE = 18  # the perturbed window side (SAM 3's 72-patch image: 4 x 4 windows); the whole-image layers are
# perturbed to the first and the last


def _window_keys(model_cls, small, got: dict, grid: tuple[int, int], keep: bool, changed) -> dict:
  """Which config keys say the window side and which layers rotate the whole image: the call of layer i is the
  i-th apply (one per layer: the calls must number the layers); the keys are those of the config holding exactly
  those values, confirmed by setting both to other values (WINDOW_PROBE) and observing again."""
  win = got["windows"]
  rc = rope_config(small)[1]
  kinds, w = win["kinds"], win["window"]
  if len(kinds) != getattr(rc, "num_hidden_layers", None):
    raise Refused(f"windowed attention: its {len(kinds)} apply calls do not number its "
                  f"{getattr(rc, 'num_hidden_layers', None)} layers one each, so which layer rotates what is not seen")
  whole = [i for i, k in enumerate(kinds) if k == "global"]
  values = rc.to_dict()
  window_keys = [k for k, v in values.items() if v == w and isinstance(v, int) and not isinstance(v, bool)]
  global_keys = [k for k, v in values.items() if isinstance(v, list) and list(v) == whole]
  if len(window_keys) != 1 or len(global_keys) != 1:
    raise Refused(f"windowed attention: {w} x {w} windows, the whole image at layers {whole}; the config keys "
                  f"holding those are not one each ({window_keys}, {global_keys})")
  window_key, global_key = window_keys[0], global_keys[0]

  probe_global = [0, len(kinds) - 1]

  def probe(cfg):
    setattr(cfg, window_key, WINDOW_PROBE)
    setattr(cfg, global_key, probe_global)

  again = fit_tower(*run(model_cls, changed(probe), keep_on_error=keep))
  seen = [i for i, k in enumerate(again.get("windows", {}).get("kinds", [])) if k == "global"]
  if again.get("windows", {}).get("window") != WINDOW_PROBE or seen != probe_global or \
      again.get("global_numbering") != got["global_numbering"]:
    raise Refused(f"windowed attention: {window_key}={WINDOW_PROBE} and {global_key}={probe_global} gave "
                  f"{again.get('windows', {}).get('window')} x "
                  f"{again.get('windows', {}).get('window')} windows, whole-image layers {seen}, numbered "
                  f"{again.get('global_numbering')}: the keys do not say it")
  return {"window_key": window_key, "window_default": w, "global_key": global_key, "global_default": whole,
          "global_numbering": json.loads(got["global_numbering"]), "num_hidden_layers": len(kinds)}


QUERY_PROBE = {"count": 7, "layers": 2}  # the perturbed query count and number of query layers (EoMT: 200 and 4)


def _query_keys(model_cls, small, got: dict, keep: bool, changed) -> dict:
  """Which config keys say how many query tokens come first and in how many layers (the last ones): the call of
  layer i is the i-th apply (one per layer: the calls must number the layers). Each int key holding the count (or
  the layer count) is set alone to QUERY_PROBE's value and the tower observed again: the one key that moves the
  count (or the query layers) to it, and only it, says it; then both at once must give both."""
  q = got["queries"]
  kinds, count = q["kinds"], q["tokens"]
  rc = rope_config(small)[1]
  if len(kinds) != getattr(rc, "num_hidden_layers", None):
    raise Refused(f"query tokens in some layers: its {len(kinds)} apply calls do not number its "
                  f"{getattr(rc, 'num_hidden_layers', None)} layers one each, so which layer rotates what is not seen")
  start = kinds.index("queries")
  if set(kinds[start:]) != {"queries"}:
    raise Refused(f"query tokens in layers {[i for i, k in enumerate(kinds) if k == 'queries']}, not the last ones")
  layers = len(kinds) - start

  def seen(edit):
    try:
      again = fit_tower(*run(model_cls, changed(edit), keep_on_error=keep))
    except Exception:  # noqa: BLE001  a key the tower cannot take at that value: not the key
      return None
    kinds2 = again.get("queries", {}).get("kinds", [])
    return (again.get("queries", {}).get("tokens"), kinds2.count("queries"),
            kinds2[len(kinds2) - kinds2.count("queries"):] == ["queries"] * kinds2.count("queries"))

  keys = {}
  ints = {k: v for k, v in rc.to_dict().items() if isinstance(v, int) and not isinstance(v, bool)}
  for what, value, want in (("count", count, lambda probe: (probe, layers, True)),
                            ("layers", layers, lambda probe: (count, probe, True))):
    probe = QUERY_PROBE[what]
    found = [k for k, v in ints.items() if v == value and
             seen(lambda cfg, k=k, p=probe: setattr(cfg, k, p)) == want(probe)]
    if len(found) != 1:
      raise Refused(f"{count} query tokens first in its last {layers} layers; the config keys that set the "
                    f"{'count' if what == 'count' else 'layers'} are not one ({found} of the keys holding {value})")
    keys[what] = found[0]

  def both(cfg):
    setattr(cfg, keys["count"], QUERY_PROBE["count"])
    setattr(cfg, keys["layers"], QUERY_PROBE["layers"])

  if seen(both) != (QUERY_PROBE["count"], QUERY_PROBE["layers"], True):
    raise Refused(f"{keys['count']}={QUERY_PROBE['count']} and {keys['layers']}={QUERY_PROBE['layers']} together "
                  f"gave {seen(both)} (query tokens, query layers, the last ones): the keys do not say it")
  return {"count_key": keys["count"], "count_default": count, "layers_key": keys["layers"], "layers_default": layers,
          "num_hidden_layers": len(kinds)}


def _class_parameter(angles: np.ndarray) -> dict:
  """The tower's one parameter whose values are the class token's observed angles (each pair's, wrapped to
  (-pi, pi], within CLASS_TOLERANCE): a parameter drawn at random by the class's init, so its match names where a
  checkpoint keeps them. Refused where none or several match."""
  model = LAST_MODEL[0]
  found = [name for name, p in model.named_parameters() if p.numel() == angles.size and np.abs(np.angle(np.exp(
      1j * (p.detach().double().numpy().reshape(-1) - angles)))).max() <= CLASS_TOLERANCE]
  if len(found) != 1:
    raise Refused(f"its patches rotate as 2-D RoPE, and the token before them turns by angles of its own, which "
                  f"{'no parameter' if not found else 'several parameters (' + ', '.join(found) + ')'} of the tower "
                  "holds (a learned class-token rotation, not read)")
  return {"parameter": found[0], "tokens": 1, "where": "first"}


def observe(model_type: str, config, model_cls, shrink) -> tuple[dict, dict]:
  """(registry entry, goldens) of a pixel tower, or Refused naming why."""
  # shrunk, else (a width another module reads: Sapiens 2's per-layer KV heads) the default config; a default
  # config whose forward breaks after its attention layers (Llama 4's adapter) keeps the rotations it recorded
  first_error = None
  for small, keep in ((shrink(config), False), (copy.deepcopy(config), False), (copy.deepcopy(config), True)):
    try:
      calls, grid = run(model_cls, _fits(model_cls, small), keep_on_error=keep)
      break
    except Refused as too_large:
      shapes_fail = _meta_failure(model_cls, config)
      if shapes_fail is not None:  # too large to run, and its default config fails on shapes alone anyway
        shrunk_fail = f"{type(first_error).__name__}: {str(first_error).splitlines()[0][:160]}" if first_error \
            else None  # (shrunk, where that ran first: DeepSeek-OCR 2's tower fails alike, 896 vs 256)
        raise Refused(f"its default config's forward on the probe image fails on the meta device (on shapes alone, "
                      f"whatever the weights): {shapes_fail}" +
                      (f"; shrunk (its head dim kept, 2 heads) it fails alike: {shrunk_fail}" if shrunk_fail else "") +
                      f"; and unshrunk the {str(too_large).removeprefix('its ')}") from too_large
      raise
    except Exception as e:  # noqa: BLE001
      first_error = first_error or e
  else:
    raise first_error
  if not calls:  # as for a text model whose default config's forward calls none of its rotary code
    return {"status": "no_rope", "reason": "its forward on an image calls no rotary function (observed)"}, {}
  try:
    got = fit_tower(calls, grid)
  except Refused as no_grid:  # an image matcher whose tokens are keypoints, not patches (LightGlue): observed so
    if not str(no_grid).startswith("its applies' shapes"):
      raise
    return observe_keypoints(model_type, small, model_cls, grid, no_grid)
  head = sum(got["axes"])
  family = {"numbering": json.loads(got["numbering"]), "layout": got["layout"], "frequencies": got["frequencies"],
            "axes_default": got["axes"], "theta_default": got["theta"], "tables": got["tables"],
            "head_dim_default": head, **({"section_layout": got["section_layout"]} if got.get("section_layout") else {})}
  sub, _ = rope_config(small)
  if sub is not None:  # the keys the tower reads are in this sub-config (SAM 3's vision model: backbone_config)
    family["sub"] = sub

  def changed(edit):  # a copy of the observed config with `edit` applied to the config its rotation reads
    moved = copy.deepcopy(small)
    edit(rope_config(moved)[1])
    return moved

  if "windows" in got:
    family["windows"] = _window_keys(model_cls, small, got, grid, keep, changed)
  if "queries" in got:  # EoMT: query tokens first, unrotated, in its last layers
    family["queries"] = _query_keys(model_cls, small, got, keep, changed)
  if "class_angles" in got:  # MLCD: its class token turns by angles of its own, found among its parameters
    family["class_angles"] = _class_parameter(got["class_angles"])
    class_value = dict(LAST_MODEL[0].named_parameters())[family["class_angles"]["parameter"]].detach().double()
  rc = rope_config(small)[1]
  per_head = getattr(rc, "head_dim", None) or rc.hidden_size // rc.num_attention_heads
  if head == rc.hidden_size != per_head and model_type in TOWERS and "wider" in TOWERS[model_type]:
    # q rotated whole, before its split into heads (EfficientLoFTR): the rotated width must follow hidden_size; the
    # keys that set its frequency count besides (heads, head_dim, partial_rotary_factor) are read as observed only
    wide = TOWERS[model_type]["wider"](small)
    again = fit_tower(*run(model_cls, wide, keep_on_error=keep))
    if sum(again["axes"]) != wide.hidden_size:
      raise Refused(f"it rotates q's whole width ({head} = hidden_size) before splitting heads, but the rotated width "
                    f"does not follow hidden_size: {wide.hidden_size} gave {sum(again['axes'])}")
    params = getattr(rc, "rope_parameters", None) or {}
    family["width"] = {"key": "hidden_size", "observed": {
        "num_attention_heads": rc.num_attention_heads, "head_dim": getattr(rc, "head_dim", None),
        "partial_rotary_factor": params.get("partial_rotary_factor")}}
  else:
    # the head dim: 16 channels more per head must give a split that follows (equal shares, or the same shares)
    def wider(cfg):
      cfg.hidden_size = cfg.hidden_size + 16 * cfg.num_attention_heads
      if getattr(cfg, "head_dim", None):
        cfg.head_dim = cfg.head_dim + 16

    again = fit_tower(*run(model_cls, changed(wider), keep_on_error=keep))
    if sum(again["axes"]) != head + 16:
      raise Refused(f"its rotated head dim does not follow the head dim (hidden_size / num_attention_heads): "
                    f"{head} -> {sum(again['axes'])} for 16 channels more per head")
  if len(set(got["axes"])) == 1 and len(set(again["axes"])) == 1:
    family["split"] = "equal"  # every axis an equal share of the head's pairs
  else:
    raise Refused(f"its split of the head over the image's axes ({got['axes']} -> {again['axes']} for 16 channels "
                  "more) is not an equal share per axis")
  # theta: x 4 on the key the config holds it in
  rc = rope_config(small)[1]
  key = next((k for k in ("rope_theta",) if isinstance(getattr(rc, k, None), (int, float))), None)
  params = getattr(rc, "rope_parameters", None)
  if key is None and isinstance(params, dict) and isinstance(params.get("rope_theta"), (int, float)):
    key = "rope_parameters.rope_theta"
  if key is not None:
    value = (getattr(rc, key) if "." not in key else params["rope_theta"]) * 4

    def theta_x4(cfg):
      if "." in key:
        cfg.rope_parameters = {**params, "rope_theta": value}
      else:
        setattr(cfg, key, value)

    theta4 = fit_tower(*run(model_cls, changed(theta_x4), keep_on_error=keep))["theta"]
    if not np.isclose(theta4, 4 * got["theta"], rtol=1e-6):
      raise Refused(f"its theta ({got['theta']}) does not follow {key} (x 4 gave {theta4})")
    family["theta_key"] = key
  entry = {"status": "exact", "pixel": family, "functions": sorted({c["function"] for c in calls}),
           "max_abs_error": got["error"]}
  if calls[0].get("failed_after"):  # its default config's forward breaks after the attention layers
    entry["forward_failed_after_rotating"] = calls[0]["failed_after"]
  if "windows" in got:  # one apply of each kind of layer: the whole image's (x, out, ...) and a window's (window_)
    win = got["windows"]
    first, m = win["rotated"][0], len(got["positions"])
    local = win["local"]
    w_first, wm = win["windowed"][0], len(local["positions"])
    goldens = {"window_positions": local["positions"], "window_grid": np.asarray((win["window"],) * 2),
               "window_x": fit._to_bthd(w_first["x"], wm), "window_out": fit._to_bthd(w_first["out"], wm)}
  else:
    first, goldens = calls[0], {}
    m = fit._token_count(first["x"].shape, (len(got["positions"]),))
  if "queries" in got:  # one apply of a layer with the query tokens first (queries_)
    qf, qm = got["queries"]["first"], len(got["queries"]["positions"])
    goldens.update({"queries_positions": got["queries"]["positions"], "queries_x": fit._to_bthd(qf["x"], qm),
                    "queries_out": fit._to_bthd(qf["out"], qm)})
  if "class_angles" in got:  # the class token's learned angles, as its parameter holds them (the golden's x has it)
    goldens["class_parameter"] = class_value.numpy()
  goldens.update({"positions": got["positions"], "grid": np.asarray(grid), "x": fit._to_bthd(first["x"], m),
                  "out": fit._to_bthd(first["out"], m)})
  return entry, goldens


KEYPOINT_TOLERANCE = 1e-12  # float64: how near our normalisation must be to the positions the tower rotates by


def keypoint_reference(x: np.ndarray, positions: np.ndarray, frequencies: np.ndarray, layout: str) -> np.ndarray:
  """float64 NumPy: x [B, T, H, D] turned pair by pair by positions [B, T, 2] . frequencies [2, D / 2] (each pair by
  both coordinates: its angle sum_a p_a F[a, k]); x rounded to float32 first, as LightGlue's apply does (q.float())
  before it multiplies by its float64 tables."""
  ang = np.einsum("bta,ak->btk", positions.astype(np.float64), frequencies.astype(np.float64))
  c, s = np.cos(ang)[:, :, None], np.sin(ang)[:, :, None]
  x = x.astype(np.float32).astype(np.float64)
  i, j = fit.pairs(x.shape[-1], layout)
  out = np.empty_like(x)
  out[..., i], out[..., j] = x[..., i] * c - x[..., j] * s, x[..., i] * s + x[..., j] * c
  return out


def normalised_keypoints(keypoints: np.ndarray, height: int, width: int) -> np.ndarray:
  """float64 NumPy transcription of LightGlue's normalize_keypoints: (kp - (width, height) / 2) / (max(width, height)
  / 2), kp (x, y) in pixels. Checked here against the positions the tower's positional encoder takes."""
  size = np.array([width, height], np.float64)
  return (np.asarray(keypoints, np.float64) - size / 2) / (size.max() / 2)


def observe_keypoints(model_type: str, config, model_cls, grid: tuple[int, int], no_grid: Exception,
                      confirm: bool = True) -> tuple[dict, dict]:
  """An image matcher whose applies rotate its keypoints (LightGlue): each token a keypoint, turned pair by pair by
  learned frequencies F [2, D / 2] applied to its normalised (x, y). Observed on the probe pair of images: the
  keypoints the forward returns ([0, 1] of the image's width and height), normalised by `normalised_keypoints`, must
  be the [B, T, 2] tensor some module takes (its positional encoder) to 1e-12; exactly one of the tower's parameters,
  as F^T [D / 2, 2], with one pairing, must reproduce every recorded apply (`keypoint_reference`). Refused with
  `no_grid` (why the grid fit failed) where the calls are no such rotation, naming what was seen."""
  config = copy.deepcopy(config)
  config._attn_implementation = "eager"
  torch.manual_seed(0)
  default = torch.get_default_dtype()
  torch.set_default_dtype(torch.float64)
  try:
    model = model_cls(config).eval()
  finally:
    torch.set_default_dtype(default)
  inputs = _paired(pixel_inputs(config, grid))
  height, width = inputs["pixel_values"].shape[-2:]
  taken, output, hooks = [], [], []
  for name, m in model.named_modules():
    hooks.append(m.register_forward_pre_hook(lambda mod, args, n=name: taken.extend(
        (n, a.detach().double().numpy()) for a in args if isinstance(a, torch.Tensor) and a.ndim == 3 and
        a.shape[-1] == 2 and a.is_floating_point())))
  hooks.append(model.register_forward_hook(lambda mod, args, out: output.append(out)))
  try:
    calls = fit._applies(model, inputs, library="transformers")
  finally:
    for h in hooks:
      h.remove()
  relative = getattr(output[0], "keypoints", None) if output else None
  if not calls or not isinstance(relative, torch.Tensor) or relative.shape[-1] != 2:
    raise no_grid
  absolute = relative.detach().double().numpy().reshape(-1, relative.shape[-2], 2) * np.array([width, height])
  positions = normalised_keypoints(absolute, height, width)  # [images, keypoints, 2]
  encoders = sorted({n for n, a in taken if a.shape == positions.shape and
                     np.abs(a - positions).max() <= KEYPOINT_TOLERANCE})
  if not encoders:
    raise Refused(f"{no_grid}; nor does any module take its keypoints normalised as (kp - size / 2) / (max(size) / 2) "
                  "(a keypoint rotation whose positions are not read)")
  n = positions.shape[1]
  try:
    applied = [(fit._to_bthd(c["x"], n), fit._to_bthd(c["out"], n)) for c in calls]
  except Refused:
    raise Refused(f"{no_grid}; its {n} keypoints are no token axis of every apply") from None
  if any(x.shape[0] != positions.shape[0] for x, _ in applied):
    raise Refused(f"{no_grid}; its applies' batch is not its {positions.shape[0]} images' keypoints")
  d = applied[0][0].shape[-1]
  found = []
  for name, p in model.named_parameters():
    if tuple(p.shape) != (d // 2, 2):
      continue
    freqs = p.detach().double().numpy().T
    for layout in ("interleaved", "half"):
      err = max(float(np.abs(keypoint_reference(x, positions, freqs, layout) - out).max()) for x, out in applied)
      tol = fit.TOLERANCE["float64"] * max(1.0, max(float(np.abs(x).max()) for x, _ in applied))
      if err <= tol:
        found.append((name, layout, err, freqs))
  if len(found) != 1:
    raise Refused(f"{no_grid}; its keypoints (normalised, as its positional encoder takes them) turn its applies by "
                  f"learned 2-D frequencies, which {'no' if not found else 'several'} [D / 2, 2] parameter(s) of the "
                  f"tower hold{': ' + ', '.join(f[0] + ' ' + f[1] for f in found) if found else ''} (not read)")
  name, layout, err, freqs = found[0]
  # a zeroed parameter must not do (the probe tells the rotation from none)
  if max(float(np.abs(keypoint_reference(x, positions, 0 * freqs, layout) - out).max()) for x, out in applied) < 1e-3:
    raise Refused(f"{no_grid}; its probe's keypoint rotation is too small to tell from none")
  read = config
  heads = getattr(read, "num_attention_heads", None)
  width_key = next((k for k in ("descriptor_dim", "hidden_size") if isinstance(getattr(read, k, None), int) and
                    isinstance(heads, int) and getattr(read, k) // heads == d), None)
  if width_key is None:
    raise Refused(f"{no_grid}; its rotated head dim {d} is no width key // num_attention_heads of its config")
  if confirm:  # the head dim must follow the width key and the head count, each changed alone (built anew: the
    # config class derives hidden_size from descriptor_dim)
    wide = getattr(read, width_key)
    for key, value in ((width_key, wide + 16 * heads), ("num_attention_heads", 2 * heads)):
      moved = type(config).from_dict({**config.to_dict(), key: value})
      try:
        seen = observe_keypoints(model_type, moved, model_cls, grid, no_grid, confirm=False)[0]["keypoints"]
      except Exception as e:  # noqa: BLE001
        raise Refused(f"{no_grid}; with {key}={value} its keypoint rotation is not observed again: {e}") from None
      want = (value if key == width_key else wide) // (heads if key == width_key else value)
      if (seen["head_dim_default"], seen["parameter"], seen["layout"]) != (want, name, layout):
        raise Refused(f"{no_grid}; with {key}={value} its keypoints turn a head dim of {seen['head_dim_default']} by "
                      f"{seen['parameter']} ({seen['layout']}), not {want} by {name} ({layout})")
  family = {"parameter": name, "layout": layout, "normalisation": "centre_max_side", "order": "xy",
            "encoder_input": encoders, "head_dim_default": d, "width_key": width_key,
            "num_attention_heads": heads, width_key: getattr(read, width_key)}
  entry = {"status": "exact", "keypoints": family, "functions": sorted({c["function"] for c in calls}),
           "max_abs_error": err}
  goldens = {"keypoints": absolute, "image_size": np.asarray((height, width)), "positions": positions,
             "parameter": freqs.T, "x": applied[0][0], "out": applied[0][1]}
  return entry, goldens
