"""Observes the RoPE of the SAM 2-family video trackers' memory attention (issue 39): SAM 2 video, EdgeTAM video,
SAM 3 tracker video.

Used by scripts/make_hf_rope_registry.py (the throwaway reference venv: torch, transformers).

Their model's forward requires an inference_session, a state object only their processor builds from a whole video
and its prompts, so no forward of the model is run. Their RoPE is in one part of the model, the memory attention
(`memory_attention`: self-attention over the current frame's feature map, then cross-attention from it to the memory
bank of earlier frames). That part alone is built from the model's default config in float64 on the CPU and run on
tensor inputs of the shapes its forward takes, derived from the config (hand-written, and why: the shapes only; what
rotates how is observed):

- current_vision_features [H * W, 1, memory_attention_hidden_size]: the feature map, H x W as its rotary module's
  position table says (memory_attention_rope_feat_sizes);
- memory [F * per_frame + P, 1, kv], its positional embeddings alike: F = MEMORY_FRAMES memory frames, then
  P = POINTERS object-pointer tokens (num_object_pointer_tokens); kv the width its cross-attention's k projection
  takes. Per frame: SAM 2's memory is the H x W feature map again; EdgeTAM's, its perceiver's U 1-D latents
  (perceiver_resampler_num_latents) then its 2-D latents on the key grid (memory_attention_rope_k_sizes), with
  num_spatial_memory_tokens = F as its model passes it.

Every call of the modeling module's rotary apply functions is recorded with q and k before and after. q's rotation
is *fitted* over the feature map's numbering (pixel_rope_observer's numberings and the diffusers observer's fit),
and k's is then checked against the rotation the fit gives at the keys' positions built here (`memory_positions`:
the grid's positions per memory frame, U tokens before them and the P pointers after at position 0, which is no
rotation): a self-attention's k at q's positions, the cross-attention's at the memory's. The keys are confirmed by
perturbation: the grid keys on a non-square probe (which entry is the width, which the height), the head dim
(hidden size + 16 per head, the head count, the downsample rate) and theta x 4.
"""

from __future__ import annotations

import copy
import inspect
import json
import sys

import numpy as np
import torch

import diffusers_rope_observer as fit
import pixel_rope_observer as pixel

Refused = fit.Refused
MEMORY_FRAMES = 2  # memory frames in the probe's memory bank
POINTERS = 3  # object-pointer tokens after them
PROBE_GRID = [6, 5]  # a non-square probe of the grid keys (as the configs list them: [width, height])
PROBE_K_GRID = [4, 3]
PROBE_LATENTS = 2  # EdgeTAM's 1-D latents per memory frame in the perturbed probes (its default's 256 in the main run)
HEAD_KEYS = ("memory_attention_hidden_size", "memory_attention_num_attention_heads", "memory_attention_downsample_rate")
GRID_KEY, K_GRID_KEY, LATENTS_KEY = ("memory_attention_rope_feat_sizes", "memory_attention_rope_k_sizes",
                                     "perceiver_resampler_num_latents")
LAYERS_KEY = "memory_attention_num_layers"


def memory_part(model) -> str | None:
  """The path of the model's part whose forward takes a frame's features and a memory bank (SAM 2 video's
  memory_attention), where that part holds a rotary module; else None."""
  for path, m in model.named_children():
    params = inspect.signature(m.forward).parameters
    if {"current_vision_features", "memory"} <= set(params) and \
        any("rotary" in type(sub).__name__.lower() for sub in m.modules()):
      return path
  return None


def memory_positions(grid: tuple[int, int], frames: int, pointers: int, latents: int, order: str) -> np.ndarray:
  """[frames * (latents + rows * cols) + pointers, 2]: each memory frame's `latents` tokens at 0, then its grid's
  (rows, cols) patches in raster order numbered as `order` ("wh": (column, row)) says; the pointers at 0 last.
  What roformer_jax's rope.sam2_memory_positions gives (tests/test_rope_hf_registry.py checks it against these)."""
  numbering = {"order": order, "scale": "integer", "start": 0, "extra": 0, "where": "first"}
  one = np.concatenate([np.zeros((latents, 2)), pixel.numbering_positions(numbering, grid)])
  return np.concatenate([np.tile(one, (frames, 1)), np.zeros((pointers, 2))])


def _build(cls, config):
  torch.manual_seed(0)
  default = torch.get_default_dtype()
  torch.set_default_dtype(torch.float64)
  try:
    return cls(config).eval()
  finally:
    torch.set_default_dtype(default)


def run(part_cls, config, latents: int | None = None) -> dict:
  """The memory attention built from `config` (float64, CPU), run once on the probe's inputs: its recorded apply
  calls (q and k before and after, the apply's name), the feature map's (rows, cols), the key grid's, U."""
  config = copy.deepcopy(config)
  config._attn_implementation = "eager"
  part = _build(part_cls, config)
  feat = list(getattr(config, GRID_KEY))
  k_feat = list(getattr(config, K_GRID_KEY, None) or feat)
  params = inspect.signature(part.forward).parameters
  grouped = "num_spatial_memory_tokens" in params  # EdgeTAM: per frame, its 1-D latents then its 2-D ones
  u = (getattr(config, LATENTS_KEY) if latents is None else latents) if grouped else 0
  hidden = config.memory_attention_hidden_size
  kv = next(m.k_proj.in_features for n, m in part.named_modules() if n.endswith("cross_attn_image"))
  n = feat[0] * feat[1]
  m = MEMORY_FRAMES * (u + k_feat[0] * k_feat[1]) + POINTERS
  inputs = {"current_vision_features": torch.randn(n, 1, hidden, dtype=torch.float64),
            "memory": torch.randn(m, 1, kv, dtype=torch.float64),
            "current_vision_position_embeddings": torch.randn(n, 1, hidden, dtype=torch.float64),
            "memory_posision_embeddings": torch.randn(m, 1, kv, dtype=torch.float64),
            "num_object_pointer_tokens": POINTERS}
  if grouped:
    inputs["num_spatial_memory_tokens"] = MEMORY_FRAMES
  inputs = {k: v for k, v in inputs.items() if k in params}
  module = sys.modules[part_cls.__module__]
  calls, depth = [], [0]
  originals = {name: f for name, f in vars(module).items()
               if inspect.isfunction(f) and name.startswith("apply_") and fit.APPLY.search(name)}

  def wrap(name, f):
    def wrapper(*a, **k):
      if depth[0]:
        return f(*a, **k)
      depth[0] += 1
      try:
        out = f(*a, **k)
      finally:
        depth[0] -= 1
      caller = sys._getframe(1).f_locals.get("self")
      calls.append({"function": f"{module.__name__.split('.')[-1]}.py:{name}", "caller": type(caller).__name__,
                    "x": a[0].detach().to(torch.float64).numpy(), "out": out[0].detach().to(torch.float64).numpy(),
                    "k": a[1].detach().to(torch.float64).numpy(), "k_out": out[1].detach().to(torch.float64).numpy()})
      return out
    return wrapper

  for name, f in originals.items():
    setattr(module, name, wrap(name, f))
  try:
    with torch.no_grad():
      part(**inputs)
  finally:
    for name, f in originals.items():
      setattr(module, name, f)
  return {"calls": calls, "grid": (feat[1], feat[0]), "k_grid": (k_feat[1], k_feat[0]), "latents": u, "tokens": n,
          "memory": m}


def fit_memory(got: dict) -> dict:
  """q's rotation fitted over the feature map; every k checked at its positions under it: a k of q's token count
  (self-attention) at q's, a k of the memory's at `memory_positions`. Refused where either does not hold."""
  calls, n = got["calls"], got["tokens"]
  if not calls:
    raise Refused("its memory attention, run on a frame and a memory bank, calls no rotary apply function")
  q = fit.fit_grid(calls, (n,), pixel._numberings(n, got["grid"]))
  numbering = q["numbering"]
  order = json.loads(numbering)
  if order != {"extra": 0, "order": order["order"], "scale": "integer", "start": 0, "where": "first"}:
    raise Refused(f"its memory attention numbers the feature map's tokens as {order}, not from 0 on the grid")
  memory = memory_positions(got["k_grid"], MEMORY_FRAMES, POINTERS, got["latents"], order["order"])
  errors = []
  kinds = []
  for c in calls:
    tokens = c["k"].shape[-2]
    positions = q["positions"] if tokens == n else memory if tokens == got["memory"] else None
    if positions is None:
      raise Refused(f"{c['function']} gets keys of {tokens} tokens: neither the frame's {n} nor the memory's "
                    f"{got['memory']}")
    applied = [(fit._to_bthd(c["k"], tokens), fit._to_bthd(c["k_out"], tokens), positions)]
    err = fit._rotation_error(applied, q["axes"], q["theta"], q["layout"], q["tables"], q["frequencies"])
    if err > fit._tolerance(q["tables"], applied):
      what = "q's positions" if tokens == n else (
          f"the memory's ({MEMORY_FRAMES} frames of {got['latents']} unrotated tokens then the "
          f"{got['k_grid'][0]} x {got['k_grid'][1]} key grid, {POINTERS} unrotated pointers last)")
      raise Refused(f"{c['function']} ({c['caller']}) rotates its keys by other than {what}: off by {err:.1e}")
    errors.append(err)
    kinds.append("self" if tokens == n else "memory")
  if "memory" not in kinds:
    raise Refused("no apply of its memory attention rotates the memory bank's keys")
  return {**q, "error": max(q["error"], *errors), "k_positions": memory, "kinds": kinds}


def observe(model_type: str, config, part_cls) -> tuple[dict, dict]:
  """(the registry's pixel family of the memory attention, its golden), or Refused naming why."""
  main = fit_memory(run(part_cls, config))
  family = {"numbering": json.loads(main["numbering"]), "layout": main["layout"], "frequencies": main["frequencies"],
            "axes_default": main["axes"], "theta_default": main["theta"], "tables": main["tables"],
            "head_dim_default": sum(main["axes"]), "split": "equal"}
  if len(set(main["axes"])) != 1:
    raise Refused(f"its memory attention splits the head over the grid's axes as {main['axes']}, not equally")

  def changed(**keys):
    moved = copy.deepcopy(config)
    for k, v in keys.items():
      setattr(moved, k, v)
    return moved

  grouped = hasattr(config, K_GRID_KEY)
  probe = {GRID_KEY: PROBE_GRID, **({K_GRID_KEY: PROBE_K_GRID} if grouped else {})}
  small = changed(**probe)
  got = run(part_cls, small, latents=PROBE_LATENTS)
  seen = fit_memory(got)
  want_q, want_k = (PROBE_GRID[1], PROBE_GRID[0]), (PROBE_K_GRID[1], PROBE_K_GRID[0]) if grouped else None
  if got["grid"] != want_q or json.loads(seen["numbering"]) != family["numbering"] or \
      (grouped and got["k_grid"] != want_k):
    raise Refused(f"{GRID_KEY}={PROBE_GRID} did not rotate a {want_q[0]} x {want_q[1]} grid as the default did")
  error = max(main["error"], seen["error"])
  # the head dim: hidden_size // (downsample_rate * heads), each key confirmed
  hidden, heads, rate = (getattr(config, k) for k in HEAD_KEYS)
  head = sum(main["axes"])
  if hidden // (rate * heads) != head:
    raise Refused(f"its rotated head ({head}) is not memory_attention_hidden_size // (downsample_rate * heads) = "
                  f"{hidden // (rate * heads)}")
  for keys, want in (({HEAD_KEYS[0]: hidden + 16 * heads * rate}, head + 16), ({HEAD_KEYS[1]: 2 * heads}, head // 2),
                     ({HEAD_KEYS[2]: 2 * rate}, head // 2)):
    again = fit_memory(run(part_cls, changed(**probe, **keys), latents=PROBE_LATENTS))
    if sum(again["axes"]) != want or len(set(again["axes"])) != 1:
      raise Refused(f"{keys} gave a rotated head of {again['axes']}, not {want} split equally")
  params = config.rope_parameters
  theta4 = fit_memory(run(part_cls, changed(**probe, rope_parameters={**params, "rope_theta": 4 * params["rope_theta"]}),
                          latents=PROBE_LATENTS))["theta"]
  if not np.isclose(theta4, 4 * main["theta"], rtol=1e-6):
    raise Refused(f"its theta ({main['theta']}) does not follow rope_parameters.rope_theta (x 4 gave {theta4})")
  layers = getattr(config, LAYERS_KEY)
  if len(main["kinds"]) != 2 * layers or main["kinds"] != ["self", "memory"] * layers:
    raise Refused(f"its memory attention's {len(main['kinds'])} rotary calls are not a self-attention and a "
                  f"cross-attention in each of its {LAYERS_KEY}={layers} layers")
  family.update(theta_key="rope_parameters.rope_theta", rope_type=params.get("rope_type"),
                head_dim_keys=list(HEAD_KEYS), head_dim_defaults=[hidden, heads, rate],
                memory={"grid_key": GRID_KEY, "grid_default": list(getattr(config, GRID_KEY)),
                        "key_grid_key": K_GRID_KEY if grouped else None,
                        "key_grid_default": list(getattr(config, K_GRID_KEY)) if grouped else None,
                        "latents_key": LATENTS_KEY if grouped else None,
                        "latents_default": getattr(config, LATENTS_KEY) if grouped else 0,
                        "layers_key": LAYERS_KEY, "layers_default": layers,
                        "functions": sorted({c["function"] for c in got["calls"]})})
  first = got["calls"][0]
  cross = next(c for c, kind in zip(got["calls"], seen["kinds"], strict=True) if kind == "memory")
  m = got["memory"]
  golden = {"positions": seen["positions"], "grid": np.asarray(got["grid"]), "x": fit._to_bthd(first["x"], got["tokens"]),
            "out": fit._to_bthd(first["out"], got["tokens"]), "k_x": fit._to_bthd(cross["k"], m),
            "k_out": fit._to_bthd(cross["k_out"], m), "k_positions": seen["k_positions"],
            "k_grid": np.asarray(got["k_grid"]), "memory": np.asarray([MEMORY_FRAMES, POINTERS, got["latents"]]),
            "cross_x": fit._to_bthd(cross["x"], got["tokens"]), "cross_out": fit._to_bthd(cross["out"], got["tokens"])}
  return {"family": family, "error": error, "functions": sorted({c["function"] for c in got["calls"]})}, golden

