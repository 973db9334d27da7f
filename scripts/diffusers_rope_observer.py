"""Observes the RoPE of diffusers transformers whose forward takes position ids (issue 39).

Used by scripts/make_hf_rope_registry.py (the throwaway reference venv: torch, diffusers).

For every diffusers class whose forward takes `img_ids` and `txt_ids` (Flux and the models
built on it), this runs the class's own forward, for real on the CPU in float64, on a shrunk
config and random inputs, and records every call of a rotary apply function (found with
`sys.setprofile`: a function whose name says rotary/rope, given and returning a tensor of the
same shape). What the rotation is, is then *fitted*, not read from names:

- the token order: the ids as the forward was given them, text first or image first;
- theta: from the angle by which the apply turned pair 1 of the last axis at a token whose ids
  are all 1 (theta = f ** (-d / 2) for f = theta ** (-2 / d));
- the pairing: interleaved pairs or rotate_half, each axis its own spectrum over its own
  `axes_dims_rope` entry (RotaryConfig sections, frequencies="per_axis");

and the fitted spec must reproduce every recorded apply to 1e-12 in float64, or the class is
refused with the largest difference. The theta key is found by perturbation: the class is
built again with `rope_theta` (or `theta`) x 4, and the observed theta must follow.

What is hand-written, and why: the shrunk config (one layer of each kind, 2 heads of 16
channels, the axes split as 4+6+6 or 4 x 4, every width 8) and the forward's inputs by
parameter name (hidden_states [1, S, in_channels], encoder_hidden_states [1, T, width], ...).
A diffusers forward needs latents, timesteps and text states whose shapes the config implies
per family; nothing here decides what the rotation is.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys

import numpy as np
import torch

APPLY = re.compile(r"rot|rope", re.I)
S_IMG, T_TXT = 6, 3  # image and text tokens of the probe
WIDTH = 8  # every width the shrunk config sets
HEAD_DIM = 16
SPLITS = {2: (8, 8), 3: (4, 6, 6), 4: (4, 4, 4, 4)}  # axes_dims_rope of the shrunk config, by axis count
WIDTH_KEYS = ("joint_attention_dim", "pooled_projection_dim", "text_encoder_dim", "approximator_hidden_dim",
              "timestep_guidance_channels", "timestep_channels")
LAYER_KEYS = ("num_layers", "num_single_layers", "depth")


class Refused(Exception):
  pass


def ids_classes(classes: dict) -> list[str]:
  """The classes whose forward takes img_ids and txt_ids (Flux's position ids)."""
  import diffusers
  out = []
  for name in classes:
    cls = getattr(diffusers, name, None)
    forward = getattr(cls, "forward", None)
    if forward is not None and {"img_ids", "txt_ids"} <= set(inspect.signature(forward).parameters):
      out.append(name)
  return out


def _axes_key(defaults: dict) -> str:
  keys = [k for k, v in defaults.items() if "axes" in k and isinstance(v, (list, tuple))
          and all(isinstance(x, int) for x in v)]
  if len(keys) != 1:
    raise Refused(f"no single axes-dims key among its init parameters (found {keys})")
  return keys[0]


def shrunk_kwargs(cls) -> tuple[dict, str, dict]:
  params = inspect.signature(cls.__init__).parameters
  defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
  axes_key = _axes_key(defaults)
  axes = SPLITS.get(len(defaults[axes_key]))
  if axes is None:
    raise Refused(f"{axes_key}={defaults[axes_key]}: no probe split for {len(defaults[axes_key])} axes")
  kw: dict = {axes_key: list(axes)}
  for k in LAYER_KEYS:
    if k in defaults:
      kw[k] = 1
  if "attention_head_dim" in defaults:
    kw["attention_head_dim"] = HEAD_DIM
  if "num_attention_heads" in defaults:
    kw["num_attention_heads"] = 2
  for k in ("in_channels", "cond_in_channels"):
    if k in defaults:
      kw[k] = WIDTH
  if defaults.get("out_channels") is not None:
    kw["out_channels"] = WIDTH
  for k in WIDTH_KEYS:
    if k in defaults:
      kw[k] = WIDTH
  return kw, axes_key, defaults


def _inputs(cls, kw: dict, ids_img: torch.Tensor, ids_txt: torch.Tensor) -> dict:
  names = list(inspect.signature(cls.forward).parameters)[1:]
  width = kw.get("joint_attention_dim", WIDTH)
  x = {"hidden_states": torch.randn(1, S_IMG, kw.get("in_channels", WIDTH), dtype=torch.float64),
       "encoder_hidden_states": torch.randn(1, T_TXT, width, dtype=torch.float64),
       "pooled_projections": torch.randn(1, kw.get("pooled_projection_dim", WIDTH), dtype=torch.float64),
       "timestep": torch.tensor([0.5], dtype=torch.float64),
       "img_ids": ids_img, "txt_ids": ids_txt,
       # Bria-Fibo: one text-encoder state per layer
       "text_encoder_layers": [torch.randn(1, T_TXT, kw.get("text_encoder_dim", WIDTH), dtype=torch.float64)
                               for _ in range(sum(kw.get(k, 0) for k in LAYER_KEYS))]}
  return {k: v for k, v in x.items() if k in names}


def _applies(model, inputs: dict) -> list[dict]:
  """Runs the forward, recording every rotary apply: its tensor argument and what it returned."""
  calls, stack = [], []

  def prof(frame, event, arg):
    if not APPLY.search(frame.f_code.co_name) or "diffusers" not in frame.f_code.co_filename:
      return
    if event == "call":
      tensors = [v for v in frame.f_locals.values() if isinstance(v, torch.Tensor) and v.ndim == 4]
      stack.append((frame, tensors[0].detach().clone() if tensors else None))
    elif event == "return" and stack and stack[-1][0] is frame:
      _, x = stack.pop()
      if x is not None and isinstance(arg, torch.Tensor) and arg.shape == x.shape:
        calls.append({"function": f"{frame.f_code.co_filename.split('/')[-1]}:{frame.f_code.co_name}",
                      "x": x.numpy(), "out": arg.detach().numpy().astype(np.float64)})

  sys.setprofile(prof)
  try:
    with torch.no_grad():
      model(**inputs)
  finally:
    sys.setprofile(None)
  return calls


def _to_bthd(a: np.ndarray, tokens: int) -> np.ndarray:
  axis = [i for i in (1, 2) if a.shape[i] == tokens]
  if len(axis) != 1:
    raise Refused(f"cannot tell the token axis of an applied tensor of shape {a.shape}")
  return a if axis[0] == 1 else np.swapaxes(a, 1, 2)


def _angles(x: np.ndarray, out: np.ndarray, layout: str) -> np.ndarray:
  """[B, T, H, D/2]: the angle each pair was turned by, under `layout`'s pairing."""
  d = x.shape[-1]
  if layout == "interleaved":
    a, b, c, e = x[..., 0::2], x[..., 1::2], out[..., 0::2], out[..., 1::2]
  else:
    a, b, c, e = x[..., : d // 2], x[..., d // 2:], out[..., : d // 2], out[..., d // 2:]
  return np.arctan2(a * e - b * c, a * c + b * e)


def reference_rotation(x: np.ndarray, positions: np.ndarray, axes: list[int], theta: float, layout: str,
                       tables: str = "float64") -> np.ndarray:
  """float64 NumPy: x [B, T, H, D] turned pair by pair, axis a's pairs by pos_a * theta ** (-2j / d_a);
  tables="float32": as diffusers' apply_rotary_emb computes whatever the model's dtype: cos and sin
  of the float64 angle rounded to float32 (FluxPosEmbed's `.float()` tables), x cast to float32
  (`x.float()`), the products and their sum in float32."""
  freqs = np.concatenate([theta ** (-np.arange(0, d, 2, dtype=np.float64) / d) for d in axes])
  owner = np.concatenate([np.full(d // 2, i) for i, d in enumerate(axes)])
  ang = positions[:, owner].astype(np.float64) * freqs  # [T, D/2]
  c, s = np.cos(ang)[None, :, None], np.sin(ang)[None, :, None]
  if tables == "float32":
    c, s, x = c.astype(np.float32), s.astype(np.float32), x.astype(np.float32)
  if layout == "interleaved":
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out.astype(np.float64)
  h = x.shape[-1] // 2
  a, b = x[..., :h], x[..., h:]
  return np.concatenate([a * c - b * s, a * s + b * c], -1).astype(np.float64)


# The largest difference from the NumPy reference that still counts as the same rotation: float64
# to 1e-12; a float32 apply to float32's rounding (|x| < 5 here: 2 ulp ~ 1e-6).
TOLERANCE = {"float64": 1e-12, "float32": 1e-6}


def _integer_theta(theta: float) -> float:
  """theta read off an angle: float32 tables give it to ~1e-6, so an integer that close is taken."""
  return float(round(theta)) if abs(theta - round(theta)) <= 1e-5 * theta else theta


def _rotation_error(applied: list[tuple[np.ndarray, np.ndarray, np.ndarray]], axes: list[int], theta: float,
                    layout: str, tables: str) -> float:
  """The largest difference between each recorded (x, out, positions) and `reference_rotation`."""
  return max(float(np.abs(reference_rotation(x, pos, axes, theta, layout, tables) - out).max())
             for x, out, pos in applied)


def _refusals(failing: str):
  """Turns an observation's Refused, or any failure of the model's own code, into a refused entry:
  (entry, None). `failing` says what was run, for the failure's reason."""
  def wrap(observe_fn):
    @functools.wraps(observe_fn)
    def run(*args, **kwargs):
      try:
        return observe_fn(*args, **kwargs)
      except Refused as e:
        return {"status": "refused", "reason": str(e)}, None
      except Exception as e:  # noqa: BLE001  the observation itself failed
        return {"status": "refused", "reason": f"{failing} fails: {type(e).__name__}: {str(e)[:200]}"}, None
    return run
  return wrap


def _tokens_of(shape: tuple, counts: set[int]) -> int:
  found = [n for n in shape[1:3] if n in counts]
  if len(found) != 1:
    raise Refused(f"cannot tell the token axis of an applied tensor of shape {shape}")
  return found[0]


def fit(calls: list[dict], ids_img: np.ndarray, ids_txt: np.ndarray, axes: list[int]) -> dict:
  """A call over text and image tokens rotates by both streams' ids in one order; a call over one
  stream alone (Flux 3 rotates its streams apart) by that stream's ids."""
  counts = {len(ids_img) + len(ids_txt), len(ids_img), len(ids_txt)}
  orders = {"text_first": np.concatenate([ids_txt, ids_img]), "image_first": np.concatenate([ids_img, ids_txt])}
  last = len(axes) - 1
  pair = sum(axes[:last]) // 2 + 1  # pair 1 of the last axis
  sized = [(c, _tokens_of(c["x"].shape, counts)) for c in calls]
  streams = "joint" if any(n == len(ids_img) + len(ids_txt) for _, n in sized) else "apart"
  best = None
  for order, both in orders.items():
    pos_of = {len(both): both, len(ids_img): ids_img, len(ids_txt): ids_txt}
    # the theta probe: a call whose positions hold the token with every id 1 (the first text token)
    probe_call, n = next(((c, n) for c, n in sized if (pos_of[n] == 1).all(1).any()), (None, 0))
    if probe_call is None:
      raise Refused("no apply call rotates its text tokens")
    row = int(np.flatnonzero((pos_of[n] == 1).all(1))[0])
    for layout in ("interleaved", "half"):
      x, out = (_to_bthd(probe_call[k], n) for k in ("x", "out"))
      f = float(np.median(_angles(x, out, layout)[:, row, :, pair]))
      if not 0 < f < 1:
        continue
      theta = _integer_theta(f ** (-axes[last] / 2))
      applied = [(_to_bthd(c["x"], m), _to_bthd(c["out"], m), pos_of[m]) for c, m in sized]
      for tables in TOLERANCE:
        err = _rotation_error(applied, axes, theta, layout, tables)
        if best is None or err < best["error"]:
          best = {"order": order, "layout": layout, "theta": theta, "tables": tables, "error": err,
                  "streams": streams}
  if best is None or best["error"] > TOLERANCE[best["tables"]]:
    raise Refused(f"no fit of its rotation as per-axis RoPE over {axes} (best {best})")
  return best


def probe(cls, kw: dict, axes_key: str, seed: int) -> tuple[list[dict], np.ndarray, np.ndarray]:
  torch.manual_seed(seed)
  rng = np.random.default_rng(seed)
  axes = len(kw[axes_key])
  ids_img = rng.integers(0, 7, (S_IMG, axes)).astype(np.float64)
  ids_txt = rng.integers(0, 7, (T_TXT, axes)).astype(np.float64)
  ids_img[(ids_img == 1).all(1)] = 2.0  # only the first text token has every id 1:
  ids_txt[(ids_txt == 1).all(1)] = 2.0
  ids_txt[0] = 1.0  # the token by which theta is read
  model = cls(**kw).double().eval()
  calls = _applies(model, _inputs(cls, kw, torch.from_numpy(ids_img), torch.from_numpy(ids_txt)))
  if not calls:
    raise Refused("its forward calls no rotary apply function")
  return calls, ids_img, ids_txt


@_refusals("its observation")
def observe(name: str, seed: int) -> tuple[dict, dict | None]:
  """(registry entry, goldens) of one class; the entry is refused, naming why, when the fit fails."""
  import diffusers
  cls = getattr(diffusers, name)
  kw, axes_key, defaults = shrunk_kwargs(cls)
  calls, ids_img, ids_txt = probe(cls, kw, axes_key, seed)
  got = fit(calls, ids_img, ids_txt, kw[axes_key])
  theta_key = next((k for k in ("rope_theta", "theta") if k in defaults), None)
  if theta_key is not None:  # perturbed: the observed theta must follow the key
    kw4 = {**kw, theta_key: 4 * defaults[theta_key]}
    calls4, i4, t4 = probe(cls, kw4, axes_key, seed)
    got4 = fit(calls4, i4, t4, kw[axes_key])
    if not np.isclose(got4["theta"], 4 * got["theta"], rtol=1e-6):
      theta_key = None  # the key does not set the rotation's theta
  if theta_key is None and not np.isclose(got["theta"], round(got["theta"])):
    raise Refused(f"observed theta {got['theta']} is not an integer constant")
  family = {"axes_key": axes_key, "axes_default": list(defaults[axes_key]), "layout": got["layout"],
            "order": got["order"], "frequencies": "per_axis", "head_dim_key": "attention_head_dim",
            "tables": got["tables"], "streams": got["streams"]}
  if theta_key is not None:
    family["theta_key"] = theta_key
    family["theta_default"] = float(defaults[theta_key])
    if not np.isclose(got["theta"], defaults[theta_key]):
      raise Refused(f"observed theta {got['theta']} differs from its {theta_key}={defaults[theta_key]}")
  else:
    family["theta"] = float(round(got["theta"]))
  entry = {"status": "exact", "family": family, "functions": sorted({c["function"] for c in calls}),
           "max_abs_error": got["error"]}
  # the golden: the first call over both streams, else over the image's tokens, with its positions
  both = np.concatenate([ids_txt, ids_img] if got["order"] == "text_first" else [ids_img, ids_txt])
  n = next((m for m in (S_IMG + T_TXT, S_IMG) for c in calls if m in c["x"].shape[1:3]), None)
  call = next(c for c in calls if n in c["x"].shape[1:3])
  goldens = {"config": dict(kw), "ids_img": ids_img, "ids_txt": ids_txt,
             "positions": both if n == S_IMG + T_TXT else ids_img,
             "x": _to_bthd(call["x"], n), "out": _to_bthd(call["out"], n)}
  return entry, goldens


def pipeline_ids() -> dict[str, np.ndarray]:
  """The ids the pipelines' own static methods build for a 3 x 5 latent grid and 4 text tokens
  (FluxPipeline: zeros for the text; Flux2Pipeline: its text and latent ids), for rope.flux_positions."""
  from diffusers import Flux2Pipeline, FluxPipeline
  flux_img = FluxPipeline._prepare_latent_image_ids(1, 3, 5, "cpu", torch.float64)
  flux2_img = Flux2Pipeline._prepare_latent_ids(torch.zeros(1, 2, 3, 5))[0]
  flux2_txt = Flux2Pipeline._prepare_text_ids(torch.zeros(1, 4, 2))[0]
  return {"pipelines/flux/img_ids": flux_img.numpy(), "pipelines/flux2/img_ids": flux2_img.numpy(),
          "pipelines/flux2/txt_ids": flux2_txt.numpy()}


# ----------------------------------------------------------------------------------------
# Video and image transformers that number their latent grid themselves (Wan, HunyuanVideo, ...)
# ----------------------------------------------------------------------------------------
MAX_PARAMS = 200e6  # float64 on the CPU: 1.6 GB
GRID = (2, 2, 3)  # latent patches per axis (frames, rows, columns) of the probe
GRID_WIDTH_KEYS = ("text_dim", "joint_attention_dim", "freq_dim", "ffn_dim", "text_embed_dim", "pooled_projection_dim", "image_dim",
                   "time_embed_dim", "text_embed_2_dim", "image_embed_dim", "image_proj_dim", "caption_channels",
                   "cap_feat_dim")


def grid_kwargs(cls) -> tuple[dict, dict, tuple[int, int, int]]:
  """A shrunk config that keeps the head dim and RoPE keys at their defaults (so what is observed is the
  default config's rotation), one head, one layer of each kind, narrow everything else; and the patch sizes."""
  params = inspect.signature(cls.__init__).parameters
  defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
  kw: dict = {}
  for k in ("num_layers", "num_single_layers", "num_refiner_layers", "depth", "n_layers", "n_refiner_layers",
            "dit_depth", "num_text_layers"):
    if isinstance(defaults.get(k), int) and defaults[k] > 0:
      kw[k] = 1
  # one head, of the default head dim: a width given with a head count shrinks to width / heads
  for width, heads in (("hidden_size", "num_attention_heads"), ("dim", "n_heads"), ("dim", "num_heads"),
                       ("hidden_size", "num_heads"), ("dit_dim", "dit_heads"), ("model_dim", "num_heads")):
    if isinstance(defaults.get(heads), int) and isinstance(defaults.get(width), int) and \
        "attention_head_dim" not in defaults:
      kw[width], kw[heads] = defaults[width] // defaults[heads], 1
  if "num_attention_heads" in defaults:
    kw["num_attention_heads"] = 1
  for k in ("num_kv_heads", "num_key_value_heads", "n_kv_heads"):
    if isinstance(defaults.get(k), int):
      kw[k] = 1
  if isinstance(defaults.get("vace_layers"), (list, tuple)):  # VACE blocks sit at layer indices: the one layer
    kw["vace_layers"] = [0]
  for k in GRID_WIDTH_KEYS:
    if isinstance(defaults.get(k), int):
      kw[k] = WIDTH
  p = defaults.get("patch_size", 1)
  if isinstance(p, (tuple, list)):
    patch = tuple(int(x) for x in p) if len(p) == 3 else (1, *(int(x) for x in p))
  else:
    patch = (int(defaults.get("patch_size_t", 1) or 1), int(p), int(p))
  return kw, defaults, patch


def is_video(cls, defaults: dict) -> bool:
  """3-D latents [B, C, F, H, W] (a video model), or 2-D [B, C, H, W] (an image model)."""
  p = defaults.get("patch_size")
  return "3D" in cls.__name__ or "patch_size_t" in defaults or (isinstance(p, (tuple, list)) and len(p) == 3)


def _grid_inputs(cls, kw: dict, defaults: dict, patch: tuple[int, int, int]) -> dict:
  names = list(inspect.signature(cls.forward).parameters)[1:]
  c = defaults.get("in_channels", 16)
  f, h, w = (g * p for g, p in zip(GRID, patch, strict=True))
  if not is_video(cls, defaults):
    f = 1  # one frame: the latent is [B, C, H, W] (squeezed below)
  text = next((kw[k] for k in ("text_dim", "text_embed_dim", "joint_attention_dim", "caption_channels", "cap_feat_dim")
               if k in kw), WIDTH)
  x = {"hidden_states": torch.randn(1, c, f, h, w, dtype=torch.float64),
       "control_hidden_states": torch.randn(1, defaults.get("vace_in_channels", c), f, h, w, dtype=torch.float64),
       "original_size": torch.tensor([[8.0 * h, 8.0 * w]], dtype=torch.float64),  # CogView: SDXL-style sizes
       "target_size": torch.tensor([[8.0 * h, 8.0 * w]], dtype=torch.float64),
       "crop_coords": torch.zeros(1, 2, dtype=torch.float64),
       # HunyuanVideo 1.5 / Framepack: a second text encoder and image embeddings
       "encoder_hidden_states_2": torch.randn(1, T_TXT, kw.get("text_embed_2_dim", WIDTH), dtype=torch.float64),
       "encoder_attention_mask_2": torch.ones(1, T_TXT, dtype=torch.bool),
       "image_embeds": torch.randn(1, T_TXT, kw.get("image_embed_dim", kw.get("image_proj_dim", WIDTH)),
                                   dtype=torch.float64),
       "indices_latents": torch.arange(f),
       "encoder_hidden_states": torch.randn(1, T_TXT, text, dtype=torch.float64),
       "encoder_attention_mask": torch.ones(1, T_TXT, dtype=torch.bool),
       "pooled_projections": torch.randn(1, kw.get("pooled_projection_dim", WIDTH), dtype=torch.float64),
       "timestep": torch.tensor([500.0], dtype=torch.float64),
       "guidance": torch.tensor([3500.0], dtype=torch.float64),
       "num_frames": GRID[0], "height": GRID[1], "width": GRID[2],  # LTX: the grid of packed tokens
       "img_shapes": [[(GRID[0], GRID[1], GRID[2])]]}  # QwenImage: (frames, rows, columns) per image
  if defaults.get("guidance_embeds") is False:  # QwenImage: a guidance input only with guidance embeddings
    del x["guidance"]
  if "img_shapes" in names or "num_frames" in names:  # packed latents [B, tokens, channels]
    x["hidden_states"] = torch.randn(1, int(np.prod(GRID)), c, dtype=torch.float64)
  elif f == 1:
    x["hidden_states"] = x["hidden_states"][:, :, 0]
  return {k: v for k, v in x.items() if k in names}


def fit_pairs(x: np.ndarray, out: np.ndarray, positions: np.ndarray, layout: str) -> tuple[list[int], np.ndarray]:
  """Which position axis turns each pair, and at what frequency: a least-squares line through 0 of
  the pair's angle against each axis's positions; the axis it fits to 1e-5 owns the pair."""
  ang = np.median(_angles(x, out, layout), axis=(0, 2))  # [T, pairs]: every head alike
  owners, freqs = [], []
  for j in range(ang.shape[1]):
    fits = []
    for a in range(positions.shape[1]):
      p = positions[:, a].astype(np.float64)
      f = float(p @ ang[:, j] / max(p @ p, 1e-30))
      fits.append((float(np.abs(ang[:, j] - f * p).max()), a, f))
    err, a, f = min(fits)
    if err > 1e-5 or f <= 0:
      raise Refused(f"pair {j} ({layout} pairing) is not turned by one grid axis at one frequency (residual {err:.1e})")
    owners.append(a)
    freqs.append(f)
  return owners, np.asarray(freqs)


def observe_grid(name: str, seed: int) -> tuple[dict, dict | None]:
  """A class that builds its own latent grid's positions: observed at its default head dim. A
  config key whose default equals the observed channels per axis is confirmed by perturbation
  (4 channels moved from the last axis to the first): the observed split must follow it."""
  entry, goldens = _observe_grid(name, seed)
  family = entry.get("family")
  if family and "axes_key" in family:
    key, axes = family["axes_key"], family["axes_default"]
    moved = [axes[0] + 4, *axes[1:-1], axes[-1] - 4]
    again, _ = _observe_grid(name, seed, {key: moved})
    if again.get("family", {}).get("axes_default") != moved:
      del family["axes_key"]  # the default's value matched, but the model does not read its split from it
      family["axes_key_not_followed"] = key
  return entry, goldens


def _grid_candidates(dims: tuple[int, ...]) -> list[tuple[str, np.ndarray]]:
  """The numberings of the probe's latent grid a model may rotate by, each [tokens, axes]:
  "raster" (t, h, w) from 0; "centred", h and w from -ceil(n / 2) (QwenImage's scale_rope); for an
  image model also "after_text", its image at (caption length, row, column) (Lumina 2)."""
  n = len(dims)
  raster = np.stack(np.meshgrid(*(np.arange(g) for g in dims), indexing="ij"), -1).reshape(-1, n)
  shift = np.array([0] * (n - 2) + [-(-dims[-2] // 2), -(-dims[-1] // 2)])
  candidates = [("raster", raster), ("centred", raster - shift)]
  if n == 2:
    candidates.append(("after_text", np.column_stack([np.full(len(raster), T_TXT), raster])))
  return candidates


def _blocks(owners: list[int]) -> list[int]:
  """The axes in the order their runs of consecutive pairs come: [0, 1, 2] when one block per axis."""
  runs = owners[:1]
  for o in owners[1:]:
    if o != runs[-1]:
      runs.append(o)
  return runs


def fit_grid(rotated: list[dict], dims: tuple[int, ...]) -> dict:
  """The rotation of the latent-grid calls as per-axis RoPE: the first numbering and pairing whose
  fitted axes and theta reproduce every call within TOLERANCE; Refused, with the nearest miss, if none."""
  tokens = int(np.prod(dims))
  x, out = (_to_bthd(rotated[0][k], tokens) for k in ("x", "out"))
  best = None
  for numbering, grid in _grid_candidates(dims):
    na = grid.shape[1]
    applied = [(_to_bthd(c["x"], tokens), _to_bthd(c["out"], tokens), grid) for c in rotated]
    for layout in ("interleaved", "half"):
      try:
        owners, freqs = fit_pairs(x, out, grid, layout)
      except Refused as e:
        best = best or e
        continue
      runs = _blocks(owners)
      if runs != list(range(na)):
        best = Refused(f"its pairs belong to the grid axes in the order {runs}, not as one block per axis")
        continue
      sections = [owners.count(a) for a in range(na)]
      theta = _integer_theta(float(np.median([freqs[sum(sections[:a]) + 1] ** (-sections[a]) for a in range(na)])))
      axes = [2 * s for s in sections]
      for tables in TOLERANCE:
        err = _rotation_error(applied, axes, theta, layout, tables)
        if err <= TOLERANCE[tables]:
          return {"numbering": numbering, "grid": grid, "layout": layout, "axes": axes, "theta": theta,
                  "tables": tables, "error": err}
      best = Refused(f"its rotation over the grid fits per-axis RoPE {axes}, theta {theta}, {layout} pairs only to "
                     f"{err:.1e}")
  raise best if isinstance(best, Refused) else Refused("no pairing fits its rotation")


@_refusals("its observation on a latent video")
def _observe_grid(name: str, seed: int, extra: dict | None = None) -> tuple[dict, dict | None]:
  import diffusers
  cls = getattr(diffusers, name)
  kw, defaults, patch = grid_kwargs(cls)
  kw.update(extra or {})
  with torch.device("meta"):
    size = sum(p.numel() for p in cls(**kw).parameters())
  if size > MAX_PARAMS:
    raise Refused(f"its probe keeps {size / 1e6:.0f}M parameters (widths this probe does not narrow); "
                  f"the limit is {MAX_PARAMS / 1e6:.0f}M")
  torch.manual_seed(seed)
  model = cls(**kw).double().eval()
  calls = _applies(model, _grid_inputs(cls, kw, defaults, patch))
  if not calls:
    raise Refused("its forward on a latent video calls no rotary apply function")
  names = list(inspect.signature(cls.forward).parameters)
  dims = GRID if is_video(cls, defaults) or "img_shapes" in names or "num_frames" in names else GRID[1:]
  tokens = int(np.prod(dims))
  rotated = [c for c in calls if tokens in c["x"].shape[1:3]]
  if not rotated:
    raise Refused(f"no apply call over its {tokens} latent tokens (shapes {sorted({c['x'].shape for c in calls})})")
  got = fit_grid(rotated, dims)
  axes = got["axes"]
  axes_key = next((k for k in defaults if isinstance(defaults[k], (list, tuple)) and list(defaults[k]) == axes), None)
  family = {"grid": got["numbering"], "axes_default": axes, "layout": got["layout"],
            "order": "grid_hw" if len(axes) == 2 else "grid_thw", "frequencies": "per_axis",
            "tables": got["tables"], "theta": got["theta"], "head_dim_default": sum(axes), "patch": list(patch),
            "head_dim_key": "attention_head_dim" if "attention_head_dim" in defaults else None}
  if axes_key:
    family["axes_key"] = axes_key
  elif family["head_dim_key"] is None:
    raise Refused(f"its split of the head over the grid axes {axes} comes from no config key this probe can confirm")
  entry = {"status": "exact", "family": family, "functions": sorted({c["function"] for c in rotated}),
           "max_abs_error": got["error"]}
  goldens = {"config": kw, "grid": got["grid"], "x": _to_bthd(rotated[0]["x"], tokens),
             "out": _to_bthd(rotated[0]["out"], tokens)}
  return entry, goldens
