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

Every other class runs its own forward on a latent video (GRID patches) or image: `observe_grid`
fits the applies over the numberings a latent grid may have (raster, centred, the image after
its caption, a caption rotated apart), per-axis RoPE or M-RoPE's shared spectrum, and perturbs
the keys the split and theta may come from. `RECIPES` holds, per class, the inputs the generic
names do not cover, each with its reason; a class whose forward takes the positions its pipeline
builds (Krea 2) is given random ids, and the fit must find that the rotation follows them.
scripts/pixel_rope_observer.py fits transformers' pixel towers with the same code.
"""

from __future__ import annotations

from collections.abc import Iterator
import functools
import inspect
import re
import sys
import warnings

import numpy as np
import torch

APPLY = re.compile(r"rot|rope", re.I)
THETA_KEY = re.compile(r"theta|rope_base", re.I)  # an init key that may set the rotation's base (confirmed by perturbing)
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


def requires(name: str, inputs: list[str]) -> bool:
  """Whether the class's forward requires any of these inputs (has no default for it)."""
  import diffusers
  params = inspect.signature(getattr(diffusers, name).forward).parameters
  return any(params[k].default is inspect.Parameter.empty for k in inputs)


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


def _applies(model, inputs: dict, library: str = "diffusers", keep_on_error: bool = False,
             ndims: tuple[int, ...] | None = None) -> list[dict]:
  """Runs the forward, recording every rotary apply (a function of `library`'s whose name says rot/rope, given a
  q-like tensor [B, T, H, D], [B, H, T, D] or [T, H, D]): its tensor argument and what it returned.
  keep_on_error: a forward that fails after it rotated returns what it recorded (the first call says how it
  failed), for a tower whose default config breaks in a module after its attention layers."""
  calls, stack = [], []
  if ndims is None:  # diffusers' applies take [B, T, H, D] or [B, H, T, D] (LTX's [B, T, heads * D]: its recipe)
    ndims = (4,) if library == "diffusers" else (3, 4)

  def prof(frame, event, arg):
    if not APPLY.search(frame.f_code.co_name) or library not in frame.f_code.co_filename:
      return
    if event == "call":
      tensors = [v for v in frame.f_locals.values() if isinstance(v, torch.Tensor) and v.ndim in ndims]
      inner = any(x is not None for _, x in stack)  # a helper inside an apply (JoyImage's _rotate_half): not one
      stack.append((frame, tensors[0].detach().clone() if tensors and not inner else None))
    elif event == "return" and stack and stack[-1][0] is frame:
      _, x = stack.pop()
      if isinstance(arg, tuple) and arg and isinstance(arg[0], torch.Tensor):  # JoyImage: apply(q, k) -> (q, k)
        arg = arg[0]
      if x is not None and isinstance(arg, torch.Tensor) and arg.shape == x.shape:
        calls.append({"function": f"{frame.f_code.co_filename.split('/')[-1]}:{frame.f_code.co_name}",
                      "x": x.numpy(), "out": arg.detach().to(torch.float64).numpy(),
                      "out_dtype": str(arg.dtype).replace("torch.", "")})  # (Kandinsky 5's: bfloat16)

  sys.setprofile(prof)
  try:
    with torch.no_grad():
      model(**inputs)
  except Exception as e:  # noqa: BLE001
    if not (keep_on_error and calls):
      raise
    calls[0]["failed_after"] = f"{type(e).__name__}: {str(e)[:120]}"  # Llama 4: its adapter, after every layer
  finally:
    sys.setprofile(None)
  return calls


def _attention_applies(model, inputs: dict, entry: str) -> list[dict]:
  """Runs the forward, recording each attention's q as it was before its rotation and as the attention gets it:
  for a class whose rotation no rotary function performs (Stable Audio slices its head and rotates the first half
  inline; Ideogram 4 writes its cos/sin apply in the attention). Before: the output of the attention's `norm_q`,
  else of its `to_q` [B, T, heads * D] split into heads. After: the query `entry` gets ("sdpa": torch's
  scaled_dot_product_attention, [B, H, T, D]; "dispatch": diffusers' dispatch_attention_fn, [B, T, H, D]). An
  attention that leaves q as it was (cross-attention) records nothing."""
  import importlib

  import torch.nn.functional as F
  before, calls, hooks = [], [], []
  for m in model.modules():
    norm, to_q = getattr(m, "norm_q", None), getattr(m, "to_q", None)
    heads = getattr(m, "heads", None) or getattr(m, "num_heads", None)
    added = getattr(m, "norm_added_q", None)  # Cosmos3-Omni: its generation tokens' q (norm_q: its text prefix's)
    if isinstance(added, torch.nn.Module) and isinstance(norm, torch.nn.Module):
      hooks.append(added.register_forward_hook(lambda mod, args, out: before.append(out.detach().clone())))
    if isinstance(norm, torch.nn.Module):
      hooks.append(norm.register_forward_hook(lambda mod, args, out: before.append(out.detach().clone())))
    elif isinstance(to_q, torch.nn.Module) and isinstance(heads, int):
      hooks.append(to_q.register_forward_hook(
          lambda mod, args, out, h=heads: before.append(out.detach().clone().unflatten(-1, (h, -1)))))

  def record(query: torch.Tensor, heads_first: bool) -> None:
    q = (query.transpose(1, 2) if heads_first else query).detach().to(torch.float64)
    # the latest q of this shape (an unbatched [T, H, D] one batched: Cosmos3-Omni); a q of another shape waits
    # for its own attention call (Cosmos3-Omni's two pathways, whose norms both ran before either call)
    at = next((i for i in reversed(range(len(before))) if before[i].shape == q.shape or
               (before[i].ndim == q.ndim - 1 and before[i][None].shape == q.shape)), None)
    x = None if at is None else before.pop(at)
    if x is not None and x.ndim == q.ndim - 1:
      x = x[None]
    if x is not None and x.shape == q.shape and not torch.equal(x.to(q.dtype), q):
      calls.append({"function": f"attention ({entry})", "x": x.to(torch.float64).numpy(), "out": q.numpy()})

  owner, name, heads_first = ((F, "scaled_dot_product_attention", True) if entry == "sdpa" else
                               (importlib.import_module(type(model).__module__), "dispatch_attention_fn", False))
  original = getattr(owner, name)

  def recorded(query, *args, **kwargs):
    record(query, heads_first)
    return original(query, *args, **kwargs)
  setattr(owner, name, recorded)
  try:
    with torch.no_grad():
      model(**inputs)
  finally:
    setattr(owner, name, original)
    for h in hooks:
      h.remove()
  return calls


def _to_bthd(a: np.ndarray, tokens: int) -> np.ndarray:
  if a.ndim == 3:  # [T, H, D]: an unbatched vision tower's q
    a = a[None]
  axis = [i for i in (1, 2) if a.shape[i] == tokens]
  if len(axis) != 1:
    raise Refused(f"cannot tell the token axis of an applied tensor of shape {a.shape}")
  return a if axis[0] == 1 else np.swapaxes(a, 1, 2)


# pairings tried: "halfN" is rotate_half inside each of N equal blocks (Gemma 4 vision: 2; Allegro: 3, one per axis)
LAYOUTS = ("interleaved", "half", "half2", "half3")


def layouts(d: int) -> list[str]:
  """The pairings a head of d channels can have: halfN only where N blocks of pairs divide it."""
  return [lay for lay in LAYOUTS if lay in ("interleaved", "half") or d % (2 * int(lay[len("half"):])) == 0]


def pairs(d: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
  """The two channels of each pair, in pair order: interleaved (2k, 2k + 1); half (k, k + D/2); halfN, the half
  layout inside each of N equal blocks of D/N: (b D/N + k, b D/N + D/2N + k) for block b, k < D/2N."""
  if layout == "interleaved":
    return np.arange(0, d, 2), np.arange(1, d, 2)
  n = 1 if layout == "half" else int(layout[len("half"):])
  w = d // n
  q = np.arange(w // 2)
  return np.concatenate([b * w + q for b in range(n)]), np.concatenate([b * w + w // 2 + q for b in range(n)])


def _angles(x: np.ndarray, out: np.ndarray, layout: str) -> np.ndarray:
  """[B, T, H, D/2]: the angle each pair was turned by, under `layout`'s pairing."""
  i, j = pairs(x.shape[-1], layout)
  a, b, c, e = x[..., i], x[..., j], out[..., i], out[..., j]
  return np.arctan2(a * e - b * c, a * c + b * e)


def _interleaved_owners(sections: list[int]) -> np.ndarray:
  """The axis of each pair under interleaved M-RoPE (Qwen3-VL, Ideogram 4): axis a >= 1 takes pairs a, a + A, ...
  below A * sections[a], axis 0 the rest."""
  n = len(sections)
  owners = np.zeros(sum(sections), np.int64)
  for a in range(1, n):
    owners[a:n * sections[a]:n] = a
  return owners

def reference_rotation(x: np.ndarray, positions: np.ndarray, axes: list[int], theta: float, layout: str,
                       tables: str = "float64", frequencies: str = "per_axis") -> np.ndarray:
  """float64 NumPy: x [B, T, H, D] turned pair by pair, axis a's pairs by pos_a * theta ** (-2j / d_a)
  (frequencies="shared": pair k of the head by theta ** (-2k / D), whichever axis owns it; "split":
  the same spectrum dealt round-robin, axis a taking entries a, a + A, ...);
  tables="float32": as diffusers' apply_rotary_emb computes whatever the model's dtype: cos and sin
  of the float64 angle rounded to float32 (FluxPosEmbed's `.float()` tables), x cast to float32
  (`x.float()`), the products and their sum in float32."""
  per = theta if isinstance(theta, (list, tuple)) else [theta] * len(axes)  # Cosmos: a theta per axis (per_axis)
  freqs = np.concatenate([t ** (-np.arange(0, d, 2, dtype=np.float64) / d) for d, t in zip(axes, per, strict=True)])
  if frequencies in ("shared", "split", "interleaved"):  # one spectrum over the whole head, its pairs dealt in
    freqs = theta ** (-np.arange(0, sum(axes), 2, dtype=np.float64) / sum(axes))  # sections (M-RoPE) or
    if frequencies == "split":  # round-robin, axis a taking pairs a, a + A, ... (Pixtral)
      freqs = np.concatenate([freqs[a::len(axes)] for a in range(len(axes))])
  owner = np.concatenate([np.full(d // 2, i) for i, d in enumerate(axes)])
  if frequencies == "interleaved":  # M-RoPE's one spectrum, axis a >= 1 taking every A-th pair from a (Ideogram 4)
    owner = _interleaved_owners([d // 2 for d in axes])
  if frequencies == "interleaved_per_axis":  # those pairs, each axis turning its own j-th by its own spectrum (Kimi)
    owner = _interleaved_owners([d // 2 for d in axes])
    rank = np.array([int((owner[:p] == owner[p]).sum()) for p in range(len(owner))])
    freqs = theta ** (-2.0 * rank / np.array([axes[a] for a in owner], np.float64))
  ang = positions[:, owner].astype(np.float64) * freqs  # [T, D/2]
  c, s = np.cos(ang)[None, :, None], np.sin(ang)[None, :, None]
  if tables == "float32":
    c, s, x = c.astype(np.float32), s.astype(np.float32), x.astype(np.float32)
  i, j = pairs(x.shape[-1], layout)
  a, b = x[..., i], x[..., j]
  out = np.empty_like(x)
  out[..., i], out[..., j] = a * c - b * s, a * s + b * c
  return out.astype(np.float64)


# The largest difference from the NumPy reference that still counts as the same rotation, for |x| and
# angles up to 1: float64 to 1e-12; a float32 apply to float32's rounding (a few ulp ~ 1e-6). Scaled by
# `_tolerance` with the largest |x| and position (a float32 angle is off by an ulp of itself).
TOLERANCE = {"float64": 1e-12, "float32": 1e-6}


def _tolerance(tables: str, applied: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> float:
  x = max(float(np.abs(a).max()) for a, _, _ in applied)
  pos = max(float(np.abs(p).max()) for _, _, p in applied)
  return TOLERANCE[tables] * max(1.0, x) * max(1.0, pos)


def _integer_theta(theta: float) -> float:
  """theta read off an angle: float32 tables give it to ~1e-6, so an integer that close is taken."""
  if not np.isfinite(theta):
    return theta
  return float(round(theta)) if abs(theta - round(theta)) <= 1e-5 * theta else theta


def _rotation_error(applied: list[tuple[np.ndarray, np.ndarray, np.ndarray]], axes: list[int], theta: float,
                    layout: str, tables: str, frequencies: str = "per_axis") -> float:
  """The largest difference between each recorded (x, out, positions) and `reference_rotation`."""
  return max(float(np.abs(reference_rotation(x, pos, axes, theta, layout, tables, frequencies) - out).max())
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
                   "cap_feat_dim", "text_in_dim", "context_in_dim", "ffn_hidden_size", "text_emb_dim")


HEAD_PAIRS = (("hidden_size", "num_attention_heads"), ("dim", "n_heads"), ("dim", "num_heads"),  # (width, heads) of
              ("hidden_size", "num_heads"), ("dit_dim", "dit_heads"), ("model_dim", "num_heads"),  # a class with no
              ("embed_dim", "num_heads"))  # attention_head_dim: its head is width / heads


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
  for width, heads in HEAD_PAIRS:
    if isinstance(defaults.get(heads), int) and isinstance(defaults.get(width), int) and \
        "attention_head_dim" not in defaults:
      kw[width], kw[heads] = defaults[width] // defaults[heads], 1
  if "num_attention_heads" in defaults:
    kw["num_attention_heads"] = 1
  if isinstance(defaults.get("cross_attention_dim"), int) and isinstance(defaults.get("attention_head_dim"), int):
    kw["cross_attention_dim"] = defaults["attention_head_dim"]  # Sana Video: cross-attention over the one head's width
    if isinstance(defaults.get("num_cross_attention_heads"), int):
      kw["num_cross_attention_heads"] = 1
      kw["cross_attention_head_dim"] = defaults["attention_head_dim"]
  for k in ("num_kv_heads", "num_key_value_heads", "n_kv_heads"):
    if isinstance(defaults.get(k), int):
      kw[k] = 1
  if isinstance(defaults.get("vace_layers"), (list, tuple)):  # VACE blocks sit at layer indices: the one layer
    kw["vace_layers"] = [0]
  for k in GRID_WIDTH_KEYS:
    if isinstance(defaults.get(k), int):
      kw[k] = WIDTH
  p = defaults.get("patch_size", (defaults.get("all_patch_size") or (1,))[0])  # Z-Image: all_patch_size[0]
  if p is None:  # HiDream, EasyAnimate: the class leaves it to config.json (every shipped one says 2); it only sizes
    p = kw["patch_size"] = 2  # the probe's latent, which is made in patches of it
  if "caption_channels" in defaults and defaults["caption_channels"] is None:  # HiDream: [T5 width, Llama width]
    kw["caption_channels"] = [WIDTH, WIDTH]
  if "llama_layers" in defaults and defaults["llama_layers"] is None:  # HiDream: the Llama layers it reads, one per
    kw["llama_layers"] = list(range(sum(kw.get(k, 0) for k in ("num_layers", "num_single_layers"))))  # block
  for k in ("in_channels", "out_channels"):  # EasyAnimate leaves them to config.json
    if k in defaults and defaults[k] is None:
      kw[k] = 16
  if defaults.get("has_clean_x_embedder") is False:  # HunyuanVideo Framepack: its forward calls the embedder always
    kw["has_clean_x_embedder"] = True
  if isinstance(p, (tuple, list)):
    patch = tuple(int(x) for x in p) if len(p) == 3 else (1, *(int(x) for x in p))
  else:
    patch = (int(defaults.get("patch_size_t", 1) or 1), int(p), int(p))
  return kw, defaults, patch


def is_video(cls, defaults: dict) -> bool:
  """3-D latents [B, C, F, H, W] (a video model), or 2-D [B, C, H, W] (an image model)."""
  p = defaults.get("patch_size")
  return "3D" in cls.__name__ or "patch_size_t" in defaults or (isinstance(p, (tuple, list)) and len(p) == 3)


def _grid_inputs(cls, kw: dict, defaults: dict, patch: tuple[int, int, int], grid: tuple[int, int, int]) -> dict:
  names = list(inspect.signature(cls.forward).parameters)[1:]
  c = kw.get("in_channels", defaults.get("in_channels", 16))
  f, h, w = (g * p for g, p in zip(grid, patch, strict=True))
  if not is_video(cls, defaults):
    f = 1  # one frame: the latent is [B, C, H, W] (squeezed below)
  text = next((kw[k] for k in ("text_dim", "text_embed_dim", "joint_attention_dim", "caption_channels", "cap_feat_dim")
               if isinstance(kw.get(k), int)), WIDTH)
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
       "num_frames": grid[0], "height": grid[1], "width": grid[2],  # LTX: the grid of packed tokens
       "img_shapes": [[tuple(grid)]],
       "img_mask": torch.zeros(1, T_TXT, dtype=torch.bool),  # QwenImage 2.1: which VLM tokens are image slots
       "text_bth": torch.randn(1, T_TXT, kw.get("text_in_dim", WIDTH), dtype=torch.float64),  # ERNIE-Image
       "text_lens": torch.tensor([T_TXT]),
       # HiDream: its T5 and Llama states (one per Llama layer it reads) and pooled embeddings
       "timesteps": torch.tensor([500.0], dtype=torch.float64),
       "r_timestep": torch.tensor([250.0], dtype=torch.float64),  # AnyFlow: the flow map's second time
       "chunk_partition": [grid[0]],  # AnyFlow-FAR: the latent frames in one chunk
       "encoder_hidden_states_t5": torch.randn(1, T_TXT, WIDTH, dtype=torch.float64),
       "encoder_hidden_states_llama3": torch.randn(len(kw.get("llama_layers", [])), 1, T_TXT, WIDTH,
                                                   dtype=torch.float64),
       "pooled_embeds": torch.randn(1, kw.get("text_emb_dim", WIDTH), dtype=torch.float64)}  # QwenImage: (frames, rows, columns) per image
  if "image_embed_dim" in defaults and kw.get("image_embed_dim", defaults["image_embed_dim"]) is None:
    del x["image_embeds"]  # Motif Video: no image embedder unless image_embed_dim is set
  if defaults.get("guidance_embeds") is False:  # QwenImage: a guidance input only with guidance embeddings
    del x["guidance"]
  if "shape_list" in names:  # JoyImage-Edit Plus: patches unfolded [B, tokens, C, pt, ph, pw], their (t, h, w) grid
    x["hidden_states"] = torch.randn(1, int(np.prod(grid)), c, *patch, dtype=torch.float64)
    x["shape_list"] = [[grid]]
  elif "img_shapes" in names or "num_frames" in names:  # packed latents [B, tokens, channels]
    x["hidden_states"] = torch.randn(1, int(np.prod(grid)), c, dtype=torch.float64)
  elif not is_video(cls, defaults):  # an image model: [B, C, H, W]
    x["hidden_states"] = x["hidden_states"][:, :, 0]
  return {k: v for k, v in x.items() if k in names}


def fit_pairs(x: np.ndarray, out: np.ndarray, positions: np.ndarray, layout: str) -> tuple[list[int], np.ndarray]:
  """Which position axis turns each pair, and at what frequency: a least-squares line through 0 of
  the pair's angle against each axis's positions; the axis it fits to 1e-5 owns the pair."""
  d = x.shape[-1]
  i, j = pairs(d, layout)
  first, second = x[..., i], x[..., j]
  turned = np.where(np.hypot(first, second) > 1e-9, _angles(x, out, layout), np.nan)  # a zero pair has no angle
  with warnings.catch_warnings():  # (Sana Video rotates ReLU'd q and k: some tokens' pairs are all zero)
    warnings.simplefilter("ignore", RuntimeWarning)
    ang = np.nanmedian(turned, axis=(0, 2))  # [T, pairs]: every head alike
  owners, freqs = [], []
  zero = [a for a in range(positions.shape[1]) if not np.any(positions[:, a])]  # an axis every token sits at 0 on
  near = np.abs(positions).max(1) <= 3  # tokens whose angles stay below pi at frequency 1 (no wrap): the fit's
  if near.sum() >= 4:  # (a large grid's other tokens are checked by the reference rotation that follows)
    ang, positions = ang[near], positions[near]
  for j in range(ang.shape[1]):
    fits = []
    seen = ~np.isnan(ang[:, j])
    if len(zero) == 1 and seen.any() and np.abs(ang[seen, j]).max() < 1e-6:  # a pair no token turns: that axis's
      owners.append(zero[0])  # (HiDream: images at frame 0, captions at 0), at a frequency not seen
      freqs.append(np.nan)
      continue
    for a in range(positions.shape[1]):
      p = positions[seen, a].astype(np.float64)
      f = float(p @ ang[seen, j] / max(p @ p, 1e-30))
      fits.append((float(np.abs(ang[seen, j] - f * p).max(initial=np.inf if not seen.any() else 0.0)), a, f))
    err, a, f = min(fits)
    if err > 1e-5 or f <= 0:
      raise Refused(f"pair {j} ({layout} pairing) is not turned by one grid axis at one frequency (residual {err:.1e})")
    owners.append(a)
    freqs.append(f)
  return owners, np.asarray(freqs)


def fit_pairs_by_steps(x: np.ndarray, out: np.ndarray, positions: np.ndarray, layout: str
                       ) -> tuple[list[int], np.ndarray]:
  """`fit_pairs` where the tokens sit far from position 0 (Z-Image's image at T + 1 on its first axis): each pair's
  turn between tokens one step apart on one axis (wrapped to (-pi, pi]: exact below a frequency of pi). The one axis
  whose steps turn the pair, by the same angle every step, owns it at that frequency; steps on the others leave it."""
  i, j = pairs(x.shape[-1], layout)
  turned = np.where(np.hypot(x[..., i], x[..., j]) > 1e-9, _angles(x, out, layout), np.nan)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    ang = np.nanmedian(turned, axis=(0, 2))  # [T, pairs]
  n = positions.shape[1]
  index = {tuple(p): t for t, p in enumerate(positions.tolist())}
  steps = {}
  for a in range(n):
    unit = tuple(int(a == b) for b in range(n))
    uv = [(t, index[q]) for p, t in index.items() if (q := tuple(x + u for x, u in zip(p, unit, strict=True))) in index]
    if uv:
      steps[a] = np.asarray(uv).T
  owners, freqs = [], []
  for k in range(ang.shape[1]):
    turns = {a: np.angle(np.exp(1j * (ang[v, k] - ang[u, k]))) for a, (u, v) in steps.items()}
    turning = [a for a, t in turns.items() if np.nanmax(np.abs(t)) > 1e-6]  # (float32 tables: a turn's rounding)
    if len(turning) != 1 or np.nanmax(turns[turning[0]]) - np.nanmin(turns[turning[0]]) > 1e-5 or \
        np.nanmean(turns[turning[0]]) <= 0:
      raise Refused(f"pair {k} ({layout} pairing) is not turned by one grid axis at one frequency (steps on axes "
                    f"{turning})")
    owners.append(turning[0])
    freqs.append(float(np.nanmean(turns[turning[0]])))
  return owners, np.asarray(freqs)

def observe_grid(name: str, seed: int) -> tuple[dict, dict | None]:
  """A class that builds its own latent grid's positions: observed at its default head dim. A
  config key whose default equals the observed channels per axis is confirmed by perturbation
  (4 channels moved from the last axis to the first): the observed split must follow it."""
  import diffusers
  defaults = {k: p.default for k, p in inspect.signature(getattr(diffusers, name).__init__).parameters.items()}
  if "observe" in RECIPES.get(name, {}):  # OmniGen: an observation of its own
    return RECIPES[name]["observe"](name, seed)
  if "refuse" in RECIPES.get(name, {}):  # SANA-WM: what its code does besides RoPE, which no probe here runs
    return {"status": "refused", "reason": RECIPES[name]["refuse"]}, None
  entry, goldens = _observe_grid(name, seed)
  family = entry.get("family")
  if family and family["grid"].startswith("stretched_by_"):  # CogView 4: the key (found and set in the fit)
    key = family["grid"][len("stretched_by_"):]
    family.update(grid="stretched", stretch_key=key, stretch_default=list(defaults[key]))
  if family and isinstance(family["theta"], list):  # Cosmos: a theta per axis, read from its recipe's NTK key
    checked = _ntk_thetas(name, seed, family, defaults)
    if checked:
      return {"status": "refused", "reason": checked}, None
  if family and "base_fps" in RECIPES.get(name, {}):  # Cosmos: a video's frame positions follow the fps it is given
    again, video = _observe_grid(name, seed, {"_fps": 30})
    if again.get("family", {}).get("grid") != "fps_scaled" or video is None:
      return {"status": "refused", "reason": f"its rotation at fps=None fits its raster grid, but at fps=30 not the "
                                             f"frames at t * {RECIPES[name]['base_fps']} / fps ({again.get('reason')})"
              }, None
    family["fps_base"] = RECIPES[name]["base_fps"]
    goldens.update(fps=np.asarray(30), fps_x=video["x"], fps_out=video["out"], fps_positions=video["positions"])
  for key in RECIPES.get(name, {}).get("guard", ()) if family else ():  # MiniMax-H3: a key its rotation was observed
    family.setdefault("guarded", {})[key] = defaults[key]  # at the default of only (a config may not change it)
  for key in RECIPES.get(name, {}).get("required", ()) if family else ():  # HiDream: its class default does not run
    family.setdefault("required", {})[key] = list(defaults[key])
  if family and family.get("crop_keys"):  # CogVideoX 1.0: the base grid's keys' defaults (the probe's crop)
    family["crop_default"] = [defaults[k] for k in family["crop_keys"]]
    for key in RECIPES[name].get("positions_guarded", ()):  # a key whose value makes the pipeline number otherwise
      family.setdefault("positions_guarded", {})[key] = defaults[key]
  if family and family["grid"].startswith("two_frames_at_"):  # ChronoEdit: which key places the second frame
    k = int(family["grid"].rsplit("_", 1)[1])
    key = next((n for n, v in defaults.items() if isinstance(v, int) and not isinstance(v, bool) and v == k + 1), None)
    moved = _observe_grid(name, seed, {key: 5})[0].get("family", {}).get("grid") if key else None
    if moved != "two_frames_at_4":
      return {"status": "refused", "reason": f"a two-frame video rotates its second frame at {k}, which no init key "
                                             "was seen to set"}, None
    family.update(grid="raster", two_frames_key=key, two_frames_default=k + 1)
  if family:  # a theta key: followed (x 4 moves the observed theta x 4) or guarded (a config may not change it)
    for key in [k for k, v in defaults.items() if THETA_KEY.search(k) and isinstance(v, (int, float))
                and not isinstance(v, bool)]:
      again, _ = _observe_grid(name, seed, {key: 4 * defaults[key]})
      # (to 1e-4: a theta of millions read off the small angles of a probe at positions below 3 (Ideogram 4's 5e6)
      # is known to ~1e-5 only; the key's own value is then the one the model computes with)
      if np.isclose(again.get("family", {}).get("theta", 0.0), 4 * family["theta"], rtol=1e-4) and \
          np.isclose(family["theta"], defaults[key], rtol=1e-4) and "theta_key" not in family:
        family.pop("theta")
        family.update(theta_key=key, theta_default=float(defaults[key]))
      else:
        family.setdefault("guarded", {})[key] = defaults[key]
  if family and family.get("head_dim_from"):  # Stable Audio 3: the head is width / heads; the probe's one head
    width = family["head_dim_from"][0]  # twice as wide must rotate a head twice as wide
    again = _observe_grid(name, seed, {width: 2 * family["head_dim_default"]})[0].get("family", {})
    if again.get("head_dim_default") != 2 * family["head_dim_default"]:
      return {"status": "refused", "reason": f"its head dim ({family['head_dim_default']}) was not seen to follow "
                                             f"{width} / {family['head_dim_from'][1]} nor any head-dim key"}, None
  if family and "rotary_dim" in family:  # MiniMax Music 3: an int key the rotated width follows (halved)
    for key in [k for k, v in defaults.items() if isinstance(v, int) and not isinstance(v, bool)
                and v == family["rotary_dim"]]:
      again = _observe_grid(name, seed, {key: family["rotary_dim"] // 2})[0].get("family", {})
      if again.get("rotary_dim") == family["rotary_dim"] // 2 and again.get("axes_default") == [family["rotary_dim"] // 2]:
        family["rotary_dim_key"] = key
        break
  if family and family.get("section_layout") == "interleaved" and "ltx" not in family:  # Ideogram 4: which key splits the pairs over the
    pairs_ = [a // 2 for a in family["axes_default"]]  # axes (axis 0 taking the rest): confirmed by moving 2 pairs
    args = {**defaults, **RECIPES.get(name, {}).get("kw", {})}  # (Cosmos3-Omni's rope_axes_dim: its recipe's)
    key = next((k for k, v in args.items() if isinstance(v, (list, tuple)) and len(v) == len(pairs_) and
                all(isinstance(x, int) for x in v) and list(v[1:]) == pairs_[1:]), None)
    # (2 pairs from axis 1 to axis 0's rest: axis a's pairs lie below 3 x its entry, which may not pass the head's
    # pairs, so no entry grows: Cosmos3-Omni's 20 of 64 is the most an axis can take)
    moved = None if key is None else [args[key][0], args[key][1] - 2, *args[key][2:]]
    again = _observe_grid(name, seed, {key: moved})[0].get("family", {}) if key else {}
    if key is None or [a // 2 for a in again.get("axes_default", [])][1:] != moved[1:]:
      return {"status": "refused", "reason": f"its interleaved M-RoPE gives the axes {pairs_} pairs, a split no "
                                             "config key was seen to set"}, None
    family.update(sections_key=key, sections_default=list(args[key]))
    fallback = RECIPES.get(name, {}).get("sections_fallback")
    if fallback:  # Cosmos3-Omni: with rope_axes_dim null, rope_scaling's mrope_section (its other keys not read)
      outer, inner = fallback
      again = _observe_grid(name, seed, {key: None, outer: {"rope_type": "yarn", "factor": 4.0, inner: moved}})[0]
      fam2 = again.get("family", {})
      theta = family.get("theta", family.get("theta_default"))  # (a theta of millions: to 1e-4, as above)
      if [a // 2 for a in fam2.get("axes_default", [])][1:] != moved[1:] or \
          not np.isclose(fam2.get("theta", 0.0), theta, rtol=1e-4):
        return {"status": "refused", "reason": f"with {key} null, its sections were not seen to follow "
                                               f"{outer}[{inner!r}] alone ({again.get('reason', fam2)})"}, None
      family["sections_fallback"] = [outer, inner]
  if family and ("scale_keys" in family or "scale_key" in family):  # the keys doubled: the fit must follow them
    doubled = ({family["scale_key"]: [2 * v for v in family["scale_default"]]} if "scale_key" in family else
               {k: 2 * v for k, v in zip(family["scale_keys"], family["scale_default"], strict=True)})
    again, _ = _observe_grid(name, seed, doubled)
    if again.get("family", {}).get("grid") != "scaled":
      return {"status": "refused", "reason": f"its positions fit its grid over "
                                             f"{family.get('scale_keys', family.get('scale_key'))} at their "
                                             f"defaults, but not with them doubled ({again.get('reason')})"}, None
  if family and "axes_key" in family:
    key, axes = family["axes_key"], family["axes_default"]
    moved = [axes[0] + 4, *axes[1:-1], axes[-1] - 4]
    again, _ = _observe_grid(name, seed, {key: moved})
    if again.get("family", {}).get("axes_default") != moved:
      del family["axes_key"]  # the default's value matched, but the model does not read its split from it
      family["axes_key_not_followed"] = key
      if family["head_dim_key"] is None:
        return {"status": "refused", "reason": f"its split of the head over the grid axes {axes} does not follow "
                                               f"{key} and comes from no config key this probe can confirm"}, None
  if family and "caption_part" in entry:  # Kandinsky 6: its video and its caption, two parts
    return _caption_part(name, seed, entry, goldens)
  return entry, goldens


def ntk_axis_thetas(base: float, scales: list[float], axes: list[int]) -> list[float]:
  """Cosmos's theta per axis: base * scale_a ** (d_a / (d_a - 2)) (CosmosRotaryPosEmbed's NTK factors)."""
  return [base * s ** (d / (d - 2)) for s, d in zip(scales, axes, strict=True)]


def _ntk_thetas(name: str, seed: int, family: dict, defaults: dict) -> str | None:
  """A class whose axes each turn by a theta of their own (fit_grid's per_axis_thetas): they must be its recipe's
  `ntk_base` * `ntk_key`[a] ** (d_a / (d_a - 2)) at the key's default and again at `ntk_check`, to 1e-5 (read off
  float32 tables); the family then holds that base as theta and the key. Else the refusal's reason."""
  recipe = RECIPES.get(name, {})
  key = recipe.get("ntk_key")
  if key is None:
    return f"each of its axes turns by a theta of its own ({family['theta']}), which no config key was seen to set"
  axes = family["axes_default"]
  for scales, seen in ((list(defaults[key]), family["theta"]),
                       (recipe["ntk_check"], _observe_grid(name, seed, {key: recipe["ntk_check"]})[0]
                        .get("family", {}).get("theta"))):
    want = ntk_axis_thetas(recipe["ntk_base"], scales, axes)
    if not isinstance(seen, list) and seen is not None:
      seen = [seen] * len(axes)  # every axis at one theta (scales that leave the factors equal)
    if seen is None or not np.allclose(seen, want, rtol=1e-5):
      return (f"its axes turn by thetas {seen} at {key}={scales}, not {recipe['ntk_base']} * {key}[a] ** "
              f"(d_a / (d_a - 2)) = {want}")
  family.update(theta=float(recipe["ntk_base"]), ntk_key=key, ntk_default=[float(v) for v in defaults[key]])
  return None


def raster_grid(dims: tuple[int, ...]) -> np.ndarray:
  """[prod(dims), len(dims)]: each token's index per axis in raster order (the first axis slowest)."""
  return np.stack(np.meshgrid(*(np.arange(g) for g in dims), indexing="ij"), -1).reshape(-1, len(dims))


def _grid_candidates(dims: tuple[int, ...], joint: bool) -> list[tuple[str, str | None, dict[int, np.ndarray]]]:
  """The numberings a model may rotate the probe's tokens by: (numbering, joint order, {tokens: [tokens, axes]}).
  The latent grid: "raster" (t, h, w) from 0; "centred", h and w from -ceil(n / 2) (QwenImage's scale_rope);
  for an image model also "after_text", its image at (caption length, row, column) (Lumina 2). Where a call
  rotates the caption with the image (`joint`), the caption's T_TXT tokens come first or last: at (i, 0, 0)
  with "after_text" (Lumina 2, ERNIE-Image), at zeros with the others (HiDream: Flux's text ids)."""
  n = len(dims)
  tokens = int(np.prod(dims))
  raster = raster_grid(dims)
  shift = np.array([0] * (n - 2) + [-(-dims[-2] // 2), -(-dims[-1] // 2)])
  grids = [("raster", raster), ("centred", raster - shift)]
  if n == 2:
    grids.append(("after_text", np.column_stack([np.full(len(raster), T_TXT), raster])))
    # Z-Image: the caption at (1 + i, 0, 0), the image after it at (T + 1, row, column)
    grids.append(("after_text_from_1", np.column_stack([np.full(len(raster), T_TXT + 1), raster])))
    grids.append(("raster_wh", raster[:, ::-1]))  # HunyuanDiT: (column, row)
    grids.append(("frame_0", np.column_stack([np.zeros(len(raster), np.int64), raster])))  # HiDream: (0, row, col)
  out = []
  for name, grid in grids:
    if not joint:
      out.append((name, None, {tokens: grid}))
      continue
    text = np.zeros((T_TXT, grid.shape[1]), np.int64)
    if name.startswith("after_text"):
      text[:, 0] = np.arange(T_TXT) + (name == "after_text_from_1")
    out.append((name, "text_first", {tokens: grid, tokens + T_TXT: np.concatenate([text, grid])}))
    out.append((name, "image_first", {tokens: grid, tokens + T_TXT: np.concatenate([grid, text])}))
  return out


def _blocks(owners: list[int]) -> list[int]:
  """The axes in the order their runs of consecutive pairs come: [0, 1, 2] when one block per axis."""
  runs = owners[:1]
  for o in owners[1:]:
    if o != runs[-1]:
      runs.append(o)
  return runs


def _pairs_keep_norms(x: np.ndarray, out: np.ndarray, layout: str) -> bool:
  """Whether `out` keeps the length of every channel pair of `x` under `layout`'s pairing (a rotation does)."""
  idx = pairs(x.shape[-1], layout)

  def norm(a):
    return a[..., idx[0]] ** 2 + a[..., idx[1]] ** 2
  return bool(np.allclose(norm(x), norm(out), rtol=1e-5, atol=1e-6))


def _token_count(shape: tuple, counts: tuple[int, ...]) -> int | None:
  token_axes = shape[:2] if len(shape) == 3 else shape[1:3]  # [T, H, D], else [B, T, H, D] or [B, H, T, D]
  return next((m for m in counts if m in token_axes), None)


def _rotated_width(calls: list[tuple[np.ndarray, np.ndarray]]) -> int:
  """How many leading channels of the head the rotation turns: all of them, or the first R, where the rest come out
  exactly as they went in (to float32's rounding, where the attention rotates in float32) in every call and every
  one of the first R clearly changed (by over 1e-5 of |x|). Else every channel: a rotation by tiny angles (a large
  theta's last pairs at small positions) is not taken for an untouched tail, and the fit decides."""
  scale = max(1.0, max(float(np.abs(x).max()) for x, _ in calls))
  change = np.max([np.abs(out - x).max(axis=(0, 1, 2)) for x, out in calls], axis=0)
  clear = change > 1e-5 * scale
  if not clear.any():  # Mochi: its frequencies are a parameter, zero until a checkpoint sets them
    raise Refused("its rotary calls change no channel (beyond rounding): every angle is 0 in the model as its class "
                  "builds it (its frequencies are parameters, zero until a checkpoint sets them), so what they "
                  "rotate by is not observed")
  r = int(np.argmin(clear)) if not clear.all() else len(clear)
  untouched = all(np.array_equal(out[..., r:], x[..., r:]) or
                  np.array_equal(out[..., r:], x[..., r:].astype(np.float32).astype(np.float64)) for x, out in calls)
  if r == len(clear) or r == 0 or r % 2 or clear[r:].any() or not untouched:
    return len(clear)
  return r


def fit_grid(rotated: list[dict], dims: tuple[int, ...], candidates: list | None = None) -> dict:
  """The rotation of the latent-grid calls as per-axis RoPE: the first numbering and pairing whose
  fitted axes and theta reproduce every call within TOLERANCE; Refused, with the nearest miss, if none.
  `candidates` (as `_grid_candidates` gives them): the ids a forward was given, instead of the grid's."""
  tokens = int(np.prod(dims))
  counts = tuple(candidates[0][2]) if candidates else (tokens, tokens + T_TXT)  # (Bria-Fibo 2: two call sizes)
  sized = [(c, _token_count(c["x"].shape, counts)) for c in rotated]
  if candidates is None:
    candidates = _grid_candidates(dims, joint=any(m == tokens + T_TXT for _, m in sized))
  first, m0 = sized[0]
  x, out = (_to_bthd(first[k], m0) for k in ("x", "out"))
  width = _rotated_width([(_to_bthd(c["x"], m), _to_bthd(c["out"], m)) for c, m in sized])
  if width < x.shape[-1]:  # Stable Audio: the first `width` channels rotate, the rest pass through as they came
    sized = [({**c, "x": _to_bthd(c["x"], m)[..., :width], "out": _to_bthd(c["out"], m)[..., :width]}, m)
             for c, m in sized]
    x, out = x[..., :width], out[..., :width]
  # ERNIE-Image, for one: its rotate_half pairs channel i with i + D/2 but gives them the angles of pairs i // 2
  # and (i + D/2) // 2, which no RotaryConfig (nor any rotation) does
  if not any(_pairs_keep_norms(x, out, layout) for layout in layouts(x.shape[-1])):
    raise Refused("its apply is no rotation of channel pairs: under interleaved and under half (rotate_half) "
                  "pairing alike, a pair's two channels change their joint length")
  if any(np.allclose(np.abs(_angles(x, out, layout)), np.pi / 2, atol=1e-6) for layout in layouts(x.shape[-1])):
    raise Refused(f"the rotary function it calls ({first['function']}) turns every pair by 90 degrees whatever the "
                  "position: a rotate_half helper, its cos/sin apply written inline in the attention, which this "
                  "probe does not see")
  best = None
  for numbering, order, pos_of in candidates:
    grid = pos_of[m0]
    na = grid.shape[1]
    applied = [(_to_bthd(c["x"], m), _to_bthd(c["out"], m), pos_of[m]) for c, m in sized]
    for layout in layouts(x.shape[-1]):
      try:
        owners, freqs = fit_pairs(x, out, grid, layout)
      except Refused as e:
        try:  # positions far from 0: by the steps between neighbours, over the call with the most tokens (Z-Image)
          c, m = max(sized, key=lambda cm: cm[1])
          owners, freqs = fit_pairs_by_steps(_to_bthd(c["x"], m), _to_bthd(c["out"], m), pos_of[m], layout)
        except Refused:
          best = best or e
          continue
      runs = _blocks(owners)
      sections = [owners.count(a) for a in range(na)]
      interleaved = runs != list(range(na)) and list(_interleaved_owners(sections)) == owners
      if runs != list(range(na)) and not interleaved:
        best = Refused(f"its pairs belong to the grid axes in the order {runs}, not as one block per axis")
        continue
      axes = [2 * s for s in sections]
      thetas = {  # read off pair 1 of each axis's own spectrum (per_axis), or pair 1 of the head's (shared); an
          # axis at 0 for every token (HiDream's first) turns nothing, and its spectrum is not seen (NaN: skipped)
          "per_axis": _integer_theta(float(np.nanmedian([freqs[sum(sections[:a]) + 1] ** (-sections[a])
                                                         for a in range(na)]))),
          "shared": _integer_theta(float(freqs[1] ** (-len(freqs)))),
          "split": _integer_theta(float(freqs[1] ** (-len(freqs) / na)))}
      if len(set(sections)) > 1:
        del thetas["split"]  # a round-robin deal gives every axis the same share
      axis_thetas = [float(freqs[sum(sections[:a]) + 1] ** (-sections[a])) for a in range(na)]
      if not interleaved and np.isfinite(axis_thetas).all() and not np.allclose(axis_thetas, axis_thetas[0]):
        thetas["per_axis_thetas"] = axis_thetas  # Cosmos: each axis its own spectrum, of a theta of its own
      if interleaved:  # interleaved M-RoPE: one spectrum over the head, dealt as _interleaved_owners says
        second = [int(np.flatnonzero(np.array(owners) == a)[1]) for a in range(na)]  # each axis's second pair
        thetas = {"interleaved": thetas["shared"],  # or each axis its own spectrum over its pairs (Kimi-K2.5)
                  "interleaved_per_axis": _integer_theta(float(np.nanmedian(
                      [freqs[second[a]] ** (-sections[a]) for a in range(na)])))}
      thetas = {k: v for k, v in thetas.items() if np.isfinite(v).all()}
      for frequencies, theta in thetas.items():
        for tables in TOLERANCE:
          err = _rotation_error(applied, axes, theta, layout, tables, frequencies)
          if err <= _tolerance(tables, applied):
            kind = {"interleaved": "shared", "interleaved_per_axis": "per_axis",
                    "per_axis_thetas": "per_axis"}.get(frequencies, frequencies)
            return {"numbering": numbering, "joint": order, "grid": pos_of[tokens], "positions": grid,
                    "layout": layout, "axes": axes, "theta": theta, "tables": tables, "error": err,
                    "frequencies": kind, "rotary_dim": width,
                    **({"section_layout": "interleaved"} if frequencies.startswith("interleaved") else {}),
                    "unseen": sorted({int(a) for a, f in zip(owners, freqs, strict=True) if np.isnan(f)})}
      best = Refused(f"its rotation over the grid fits per-axis RoPE {axes} (theta {thetas.get('per_axis')}) or "
                     f"M-RoPE (theta {thetas.get('shared', thetas.get('interleaved'))}), {layout} pairs, only to "
                     f"{err:.1e}")  # (interleaved owners: thetas holds the interleaved kinds alone)
  raise best if isinstance(best, Refused) else Refused("no pairing fits its rotation")


def fit_caption(calls: list[dict], got: dict) -> tuple[str, np.ndarray]:
  """The numbering of a caption rotated apart from the image, under the image's fitted rotation (token i at
  start + i on every axis, or at (i, 0, 0)); Refused if it is none of those."""
  na = got["grid"].shape[1]
  first = np.zeros((T_TXT, na), np.int64)
  first[:, 0] = np.arange(T_TXT)
  def after(start: int) -> np.ndarray:
    return np.repeat((np.arange(T_TXT) + start)[:, None], na, 1)
  known = {"after_grid": after(got["grid"].max() + 1),  # JoyImage
           # QwenImage, Nucleus-MoE: from max(h // 2, w // 2), one past the centred rows' and columns' largest
           "after_rows_columns": after(got["grid"][:, -2:].max() + 1),
           "first_axis": first,  # Lumina 2's caption refiner: token i at (i, 0, 0), as in its joint calls
           "first_axis_from_1": first + (np.arange(na) == 0)}  # Z-Image's: token i at (1 + i, 0, 0)
  errors = {}
  for name, positions in known.items():
    applied = [(_to_bthd(c["x"], T_TXT), _to_bthd(c["out"], T_TXT), positions) for c in calls]
    errors[name] = _rotation_error(applied, got["axes"], got["theta"], got["layout"], got["tables"],
                                   got["frequencies"])
    if errors[name] <= _tolerance(got["tables"], applied):
      return name, positions
  try:  # Kandinsky 6: its text blocks rotate the caption by a 1-D RoPE of their own, at 0, 1, ...
    own = fit_grid(calls, (T_TXT,), [("sequence", None, {T_TXT: np.arange(T_TXT)[:, None]})])
  except Refused:
    own = None
  if own is not None:
    raise Refused(f"it rotates its caption apart from the image by a rotation of its own (1-D RoPE over "
                  f"{own['axes'][0]} channels, theta {own['theta']:g}, {own['layout']} pairs, token i at i; its latent: "
                  f"per-axis RoPE over {got['axes']}): two specs, which one RotaryConfig does not hold")
  raise Refused(f"it rotates its caption apart from the image, by positions this probe does not know (off by "
                f"{errors} as {list(known)})")


# Hand-written inputs of the classes whose forward takes what the generic names above do not cover: the
# positions it rotates by, which its pipeline builds (the probe gives random ids, and the fit must find that
# the rotation follows them), or inputs of a shape of their own. Each is {"kw": init overrides (widths only),
# "inputs": fn(kw, defaults, ids, grid) -> forward inputs, "ids": whether it is given positions, "frames_first":
# latents [B, F, C, H, W] instead of [B, C, F, H, W]}.
GIVEN_TOKENS = T_TXT + 6  # a given-ids probe's sequence: the caption's tokens, then 6 image tokens


def _krea2(kw: dict, defaults: dict, ids: np.ndarray, grid: tuple[int, ...], extra: dict) -> dict:
  return {"hidden_states": torch.randn(1, GIVEN_TOKENS - T_TXT, kw.get("in_channels", defaults["in_channels"]),
                                       dtype=torch.float64),
          "encoder_hidden_states": torch.randn(1, T_TXT, kw["num_text_layers"], kw["text_hidden_dim"],
                                               dtype=torch.float64),
          "timestep": torch.tensor([0.5], dtype=torch.float64), "position_ids": torch.from_numpy(ids)}


def _minimax_h3(kw: dict, defaults: dict, ids: np.ndarray, grid: tuple[int, ...], extra: dict) -> dict:
  """MiniMax-H3: one packed sequence of GIVEN_TOKENS rows, its T_TXT caption rows, then 4 video rows and 2 audio rows
  (token_tags 1, 0, 2 and the indices of each), every row at one timestep, and the (t, h, w) position_ids its
  pipeline builds per row (random here: the fit must find that the rotation follows them)."""
  video, audio = 4, GIVEN_TOKENS - T_TXT - 4
  patch = int(np.prod(defaults["patch_size"]))
  tags = torch.tensor([1] * T_TXT + [0] * video + [2] * audio)
  rows = torch.arange(GIVEN_TOKENS)
  return {"hidden_states": torch.randn(1, video, defaults["in_channels"] * patch, dtype=torch.float64),
          "audio_hidden_states": torch.randn(1, audio, defaults["audio_in_channels"], dtype=torch.float64),
          "encoder_hidden_states": torch.randn(1, T_TXT, kw["text_dim"], dtype=torch.float64),
          "timestep": torch.tensor([0.5], dtype=torch.float64),
          "timestep_indices": torch.zeros(GIVEN_TOKENS, dtype=torch.long), "token_tags": tags,
          "position_ids": torch.from_numpy(ids), "video_indices": rows[tags == 0], "audio_indices": rows[tags == 2],
          "text_indices": rows[tags == 1]}


def _ideogram4(kw: dict, defaults: dict, ids: np.ndarray, grid: tuple[int, ...], extra: dict) -> dict:
  from diffusers.models.transformers import transformer_ideogram4 as module
  indicator = torch.tensor([[module.LLM_TOKEN_INDICATOR] * T_TXT + [module.OUTPUT_IMAGE_INDICATOR] *
                            (GIVEN_TOKENS - T_TXT)])
  return {"hidden_states": torch.randn(1, GIVEN_TOKENS, defaults["in_channels"], dtype=torch.float64),
          "encoder_hidden_states": torch.randn(1, GIVEN_TOKENS, kw["llm_features_dim"], dtype=torch.float64),
          "timestep": torch.tensor([0.5], dtype=torch.float64), "position_ids": torch.from_numpy(ids)[None],
          "segment_ids": torch.zeros(1, GIVEN_TOKENS, dtype=torch.long), "indicator": indicator}


def _anyflow(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  return {"timestep": torch.full((1, grid[0]), 500.0, dtype=torch.float64),  # a time per latent frame
          "r_timestep": torch.full((1, grid[0]), 250.0, dtype=torch.float64)}


def _wan_animate(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  size = kw["motion_encoder_size"]
  return {"pose_hidden_states": torch.randn(1, defaults["latent_channels"], grid[0] - 1, 2 * grid[1], 2 * grid[2],
                                            dtype=torch.float64),  # a pose latent per frame but the first
          "face_pixel_values": torch.randn(1, 3, 1, size, size, dtype=torch.float64)}  # a one-frame face video


def _cosmos3(kw: dict, defaults: dict, ids: np.ndarray, grid: tuple[int, ...], extra: dict) -> dict:
  """Cosmos3-Omni: one packed sequence, its T_TXT text tokens (the causal prefix, und_len) then one latent frame of
  2 x 3 patches (6 vision tokens, every frame noisy), and the [3, tokens] M-RoPE ids its pipeline builds (random
  here: the fit must find that the rotation follows them)."""
  p = defaults["latent_patch_size"]
  vision = GIVEN_TOKENS - T_TXT
  return {"input_ids": torch.arange(T_TXT) % kw["vocab_size"], "text_indexes": torch.arange(T_TXT),
          "position_ids": torch.from_numpy(ids).T.contiguous(), "und_len": T_TXT, "sequence_length": GIVEN_TOKENS,
          "vision_tokens": [torch.randn(1, defaults["latent_channel"], 1, 2 * p, 3 * p, dtype=torch.float64)],
          "vision_token_shapes": [(1, 2, 3)], "vision_sequence_indexes": torch.arange(T_TXT, GIVEN_TOKENS),
          "vision_mse_loss_indexes": torch.arange(T_TXT, GIVEN_TOKENS),
          "vision_timesteps": torch.full((vision,), 500.0, dtype=torch.float64),
          "vision_noisy_frame_indexes": [torch.tensor([0])]}


# QwenImage 2.1's probe: its joint sequence in runs, text (an int) and image blocks ((height, width) latent tokens): two
# text tokens, a 2 x 2 condition image (one slot of its vision-language sequence), a text token, the 2 x 4 target
QWEN_IMAGE21_RUNS = (2, (2, 2), 1, (2, 4))


def qwen_image21_hypothesis(runs: tuple) -> np.ndarray:
  """The positions QwenImage 2.1 is expected to rotate by (the docstring of its QwenImage21Rope, written out here,
  as rope.qwen_image21_positions also does; the fit checks its forward against it): a counter p from 0; text token i
  of a run at p + i on every axis; an image block at frame p, its rows and columns centred (-(n - n // 2) .. n // 2 -
  1), p then moved by max(height, width)."""
  out, p = [], 0
  for run in runs:
    if isinstance(run, int):
      out.append(np.repeat((np.arange(run) + p)[:, None], 3, 1))
      p += run
    else:
      h, w = run
      grid = raster_grid((h, w)) - np.array([h - h // 2, w - w // 2])
      out.append(np.column_stack([np.full(h * w, p), grid]))
      p += max(h, w)
  return np.concatenate(out)


def _qwen_image21(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """QwenImage 2.1: its packed latents (condition images first, the target last), the text states of its
  vision-language sequence with one placeholder per condition slot, and img_mask over that sequence and the target's
  slots it appends (each slot 2 x 2 latent tokens), as its pipeline lays them out (QWEN_IMAGE21_RUNS)."""
  images = [r for r in QWEN_IMAGE21_RUNS if not isinstance(r, int)]
  mask = []
  for run in QWEN_IMAGE21_RUNS:
    mask += [False] * run if isinstance(run, int) else [True] * (run[0] * run[1] // 4)
  target = images[-1][0] * images[-1][1] // 4
  tokens = sum(h * w for h, w in images)
  return {"hidden_states": torch.randn(1, tokens, kw.get("in_channels", defaults["in_channels"]), dtype=torch.float64),
          "encoder_hidden_states": torch.randn(1, len(mask) - target, kw["context_in_dim"], dtype=torch.float64),
          "img_shapes": [[(1, h, w) for h, w in images]], "img_mask": torch.tensor([mask]),
          "timestep": torch.tensor([0.5], dtype=torch.float64)}


# Bria-Fibo 2's probe: 4 gist tokens (its min and step; at most 8), a 2 x 3 image, a 2 x 2 context image to edit
BRIA_FIBO2 = {"gist": 4, "max_gist": 8, "image": (2, 3), "context": (2, 2)}


def bria_fibo2_hypothesis() -> dict[int, np.ndarray]:
  """The positions Bria-Fibo 2's forward is expected to rotate by (written out from its code's create_coordinate_grid
  calls; rope.bria_fibo2_positions builds the same): its gist (Perceiver) tokens at (1 + i, 0, 0), the image at
  (max_num_gist_tokens + 1, row, column), context image k at (max_num_gist_tokens + 2 + k, row, column); its noise
  refiner rotates the image and context tokens alone, its layers the gist tokens first, then those."""
  b = BRIA_FIBO2
  plane = b["max_gist"] + 1
  gist = np.zeros((b["gist"], 3), np.int64)
  gist[:, 0] = np.arange(b["gist"]) + 1
  image = np.column_stack([np.full(np.prod(b["image"]), plane), raster_grid(b["image"])])
  context = np.column_stack([np.full(np.prod(b["context"]), plane + 1), raster_grid(b["context"])])
  refined = np.concatenate([image, context])
  return {len(refined) + b["gist"]: np.concatenate([gist, refined]), len(refined): refined}


def _bria_fibo2(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """Bria-Fibo 2: its latent [B, C, H, W], one context latent to edit, and its text features [B, 1 + injected layers,
  T, cap_feat_dim] (the Perceiver's bundle first)."""
  p, c = defaults["patch_size"], defaults["in_channels"]
  (h, w), (ch, cw) = BRIA_FIBO2["image"], BRIA_FIBO2["context"]
  return {"hidden_states": torch.randn(1, c, h * p, w * p, dtype=torch.float64),
          "context_latents": [torch.randn(1, c, ch * p, cw * p, dtype=torch.float64)],
          "encoder_hidden_states": torch.randn(1, 1 + len(kw["injection_layer_ids"]), T_TXT, kw["cap_feat_dim"],
                                               dtype=torch.float64),
          "timestep": torch.tensor([0.5], dtype=torch.float64)}


def longrope_reference(x: np.ndarray, positions: np.ndarray, theta: float, factors: np.ndarray,
                       attention: float) -> np.ndarray:
  """OmniGen's rotation as its code is read (OmniGenSuScaledRotaryEmbedding, then apply_rotary_emb with
  use_real_unbind_dim=-2): pair k = (k, k + D/2) turned by position * inv_freq_k, inv_freq_k = 1 / (factor_k *
  theta ** (2k / D)), cos and sin both scaled by `attention`; float64 here, the model's float32 is within
  TOLERANCE's float32 bound."""
  d = x.shape[-1]
  inv = 1.0 / (np.asarray(factors, np.float64) * theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
  ang = positions.astype(np.float64)[:, None] * inv
  c, s_ = (np.cos(ang) * attention)[None, :, None], (np.sin(ang) * attention)[None, :, None]
  a, b = x[..., :d // 2], x[..., d // 2:]
  return np.concatenate([a * c - b * s_, a * s_ + b * c], -1)


OMNIGEN_SETTINGS = ({}, {"rope_base": 40000, "original_max_position_embeddings": 8, "max_position_embeddings": 256})


@_refusals("its observation with the ids its pipeline gives")
def observe_longrope(name: str, seed: int) -> tuple[dict, dict | None]:
  """OmniGen: 1-D positions its pipeline gives (position_ids), Phi-3's LongRoPE ("su") over the whole head: per-pair
  factors from rope_scaling's short_factor, or its long_factor once max(position_ids) + 1 passes
  original_max_position_embeddings, cos and sin scaled by sqrt(1 + ln s / ln original), s = max_position_embeddings /
  original_max_position_embeddings. Its class default rope_scaling (None) does not run, so a probe gives it random
  factors. Checked as a hypothesis (`longrope_reference`: the scale moves each pair's length, so no rotation is fitted)
  in both branches, at two settings of theta and both lengths (OMNIGEN_SETTINGS: the keys it reads are followed);
  else Refused with the largest difference."""
  import diffusers
  cls = getattr(diffusers, name)
  kw, defaults, _ = grid_kwargs(cls)
  kw.update(RECIPES[name]["kw"])
  head = kw["hidden_size"] // kw["num_attention_heads"]
  rng = np.random.default_rng(seed)
  goldens: dict = {"config": None}
  worst, functions = 0.0, set()
  h, w = GRID[1:]
  tokens = T_TXT + 1 + h * w  # the caption, its time token, the latent's patches
  for i, setting in enumerate(OMNIGEN_SETTINGS):
    args = {**kw, **setting, "rope_scaling": {"short_factor": (1 + rng.random(head // 2)).tolist(),
                                              "long_factor": (2 + rng.random(head // 2)).tolist()}}
    torch.manual_seed(seed)
    model = cls(**args).double().eval()
    original = args.get("original_max_position_embeddings", defaults["original_max_position_embeddings"])
    largest = args.get("max_position_embeddings", defaults["max_position_embeddings"])
    theta = float(args.get("rope_base", defaults["rope_base"]))
    scale = largest / original
    attention = 1.0 if scale <= 1 else float(np.sqrt(1 + np.log(scale) / np.log(original)))
    for long in (False, True):
      ids = rng.integers(0, original, tokens) if not long else rng.integers(0, 3 * original, tokens)
      ids[0] = 3 * original if long else original - 1  # max + 1 past the original length, or at it
      p = defaults["patch_size"]
      inputs = {"hidden_states": torch.randn(1, defaults["in_channels"], h * p, w * p, dtype=torch.float64),
                "timestep": torch.tensor([0.5], dtype=torch.float64),
                "input_ids": torch.randint(0, 100, (1, T_TXT)), "input_img_latents": [], "input_image_sizes": {},
                "attention_mask": torch.ones(1, tokens, tokens, dtype=torch.float64),
                "position_ids": torch.from_numpy(ids)[None]}
      calls = _applies(model, inputs)
      if not calls:
        raise Refused("its forward calls no rotary apply function")
      factors = args["rope_scaling"]["long_factor" if long else "short_factor"]
      applied = [(_to_bthd(c["x"], tokens), _to_bthd(c["out"], tokens), ids[:, None]) for c in calls]
      err = max(float(np.abs(longrope_reference(x, ids, theta, factors, attention) - out).max())
                for x, out, _ in applied)
      if err > _tolerance("float32", applied):
        raise Refused(f"its rotation is not Phi-3's LongRoPE as its code is read ({'long' if long else 'short'} "
                      f"factors, theta {theta:g}, attention factor {attention:.4f}; off by {err:.1e})")
      worst = max(worst, err)
      functions |= {c["function"] for c in calls}
      if i == 0:  # the goldens: the default setting's short and long runs
        prefix = "long_" if long else ""
        goldens.update({f"{prefix}x": applied[0][0], f"{prefix}out": applied[0][1], f"{prefix}positions": ids})
        goldens["config"] = {**args}
  family = {"grid": "given", "order": "given", "axes_default": [head], "layout": "half", "frequencies": "shared",
            "tables": "float32", "theta_key": "rope_base", "theta_default": float(defaults["rope_base"]),
            "head_dim_default": head, "head_dim_key": None, "patch": [1, 1, 1],
            "head_dim_from": ["hidden_size", "num_attention_heads", defaults["hidden_size"],
                              defaults["num_attention_heads"]],
            "longrope": {"key": "rope_scaling", "original_key": "original_max_position_embeddings",
                         "original_default": defaults["original_max_position_embeddings"],
                         "max_key": "max_position_embeddings", "max_default": defaults["max_position_embeddings"]},
            "required": {"rope_scaling": None}}
  if defaults["hidden_size"] // defaults["num_attention_heads"] != head:
    raise Refused(f"its probe's head ({head}) is not its default's")
  return {"status": "exact", "family": family, "functions": sorted(functions), "max_abs_error": worst}, goldens


def _framepack(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """HunyuanVideo Framepack: the history its pipeline always passes besides the latent (frames at indices_latents
  3, 4): clean latents (frames 0 and 2), a 2x history (frames 5, 6) and a 4x history (frames 7 .. 10), each with its
  frame indices, at the latent's height and width."""
  c = defaults["in_channels"]
  p = defaults["patch_size"]
  h, w = grid[1] * p, grid[2] * p

  def latent(frames: int) -> torch.Tensor:
    return torch.randn(1, c, frames, h, w, dtype=torch.float64)
  return {"hidden_states": latent(grid[0]), "indices_latents": torch.arange(3, 3 + grid[0]),
          "latents_clean": latent(2), "indices_latents_clean": torch.tensor([0, 2]),
          "latents_history_2x": latent(2), "indices_latents_history_2x": torch.tensor([5, 6]),
          "latents_history_4x": latent(4), "indices_latents_history_4x": torch.arange(7, 11)}


@_refusals("its observation with the history its pipeline passes")
def observe_framepack(name: str, seed: int) -> tuple[dict, dict | None]:
  """HunyuanVideo Framepack: its forward requires the history its pipeline passes every step (`_framepack`), and
  rotates one sequence of its 4x history tokens, its 2x history tokens, its clean latents and its latent. The clean
  latents and the latent are fitted (`fit_grid`) at (frame index, row, column); the history tokens' tables are its
  grid's cos/sin average-pooled over 2 x 2 x 2 and 4 x 4 x 4 blocks (_pad_rotary_emb), which turn no pair by an angle
  (a pair's length changes): the class is refused, saying what each part does. Anything else: the fit's refusal."""
  import diffusers
  cls = getattr(diffusers, name)
  kw, defaults, patch = grid_kwargs(cls)
  kw.update(RECIPES[name]["kw"])
  torch.manual_seed(seed)
  model = cls(**kw).double().eval()
  inputs = _grid_inputs(cls, kw, defaults, patch, GRID)
  inputs.update(_framepack(kw, defaults, None, GRID, {}))
  calls = _applies(model, inputs)
  f, h, w = GRID
  frames = np.concatenate([inputs["indices_latents_clean"].numpy(), inputs["indices_latents"].numpy()])
  plain = np.column_stack([np.repeat(frames, h * w), np.tile(raster_grid((h, w)), (len(frames), 1))])
  if not calls or calls[0]["x"].shape[1] < len(plain):
    raise Refused(f"its rotary calls ({[c['x'].shape for c in calls]}) are not over its history and latent tokens")
  history = calls[0]["x"].shape[1] - len(plain)  # the 4x and 2x history tokens come first
  tail = [{**c, "x": c["x"][:, history:], "out": c["out"][:, history:]} for c in calls]
  got = fit_grid(tail, (len(plain),), [("frame_indices", None, {len(plain): plain})])
  x, out = _to_bthd(calls[0]["x"], calls[0]["x"].shape[1]), _to_bthd(calls[0]["out"], calls[0]["x"].shape[1])
  layout = got["layout"]
  if _pairs_keep_norms(x[:, :history], out[:, :history], layout):
    raise Refused("its history tokens keep their pairs' lengths, which its pooled tables were not expected to")
  raise Refused(f"it rotates its clean latents and latent as per-axis RoPE over {got['axes']} (theta "
                f"{got['theta']:g}, {layout} pairs) at (frame index, row, column), but its {history} 2x and 4x history "
                "tokens, which its pipeline always passes, by its grid's cos/sin tables average-pooled over 2 x 2 x 2 "
                "and 4 x 4 x 4 blocks: no rotation (a pair's length changes), which no RotaryConfig expresses")


def wan_animate2_hypothesis(dims: tuple[int, int, int], offsets: tuple[int, int, int], stride: int) -> np.ndarray:
  """Wan-Animate 2's positions for a stream (rope_params' offset, rope_apply's time stride, as its code is read):
  token (f, h, w) at (offset_t + stride * f, offset_h + h, offset_w + w); its generation stream at offsets 0, stride
  1, its reference stream at its refer_offset_* (-1: the reference grid's size on that axis) and refer_stride."""
  return raster_grid(dims) * np.array([stride, 1, 1]) + np.array(offsets)


WAN_ANIMATE2_SETTINGS = ({}, {"refer_offset_t": 3, "refer_offset_h": -1, "refer_offset_w": 2, "refer_stride": 2})


@_refusals("its observation in its reference (extract) and generation (cached) passes")
def observe_wan_animate2(name: str, seed: int) -> tuple[dict, dict | None]:
  """Wan-Animate 2: a reference pass (kv_cache_mode "extract") rotates the reference tokens, then a generation pass
  ("cached") the generation tokens and the cached reference keys, as its pipeline runs them. Every rotary call of both
  passes must be Wan's per-axis RoPE (fitted on the generation stream at raster (t, h, w)) at the positions
  `wan_animate2_hypothesis` gives its stream, at the refer_* keys' defaults and again at WAN_ANIMATE2_SETTINGS' other
  values (so the keys are followed); else Refused."""
  import diffusers
  from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache
  cls = getattr(diffusers, name)
  kw, defaults, patch = grid_kwargs(cls)
  kw.update(RECIPES[name]["kw"])
  dims = GRID
  tokens = int(np.prod(dims))
  size = [g * q for g, q in zip(dims, patch, strict=True)]
  goldens: dict = {}
  worst, functions, got = 0.0, set(), None
  for i, setting in enumerate(WAN_ANIMATE2_SETTINGS):
    args = {**kw, **setting}
    torch.manual_seed(seed)
    model = cls(**args).double().eval()
    cache = WanAnimate2KVCache(args["num_layers"])
    grid = torch.tensor([list(dims)])

    def inputs(mode: str, args: dict = args, cache: WanAnimate2KVCache = cache, grid: torch.Tensor = grid) -> dict:
      return {"hidden_states": [torch.randn(16, *size, dtype=torch.float64)],
              "condition_latents": [torch.randn(defaults["in_dim"] - 16, *size, dtype=torch.float64)],
              "encoder_hidden_states": [torch.randn(T_TXT, args["text_dim"], dtype=torch.float64)],
              "encoder_hidden_states_image": torch.randn(1, T_TXT, 1280, dtype=torch.float64),
              "timestep": torch.tensor([500.0], dtype=torch.float64), "kv_cache": cache, "kv_cache_mode": mode,
              "seq_len": tokens, "offset_grid_sizes": grid, "reference_grid_sizes": grid,
              # the full video whose block mask the generation pass builds: dims' frames and patches
              "origin_len": 4 * (dims[0] - 1), "origin_area": [16 * dims[1] * patch[1], 16 * dims[2] * patch[2]]}
    calls = {mode: _applies(model, inputs(mode)) for mode in ("extract", "cached")}
    cfg = {**defaults, **args}
    offsets = tuple(o if o >= 0 else dims[a] for a, o in
                    enumerate((cfg["refer_offset_t"], cfg["refer_offset_h"], cfg["refer_offset_w"])))
    reference = wan_animate2_hypothesis(dims, offsets, cfg["refer_stride"])
    generation = wan_animate2_hypothesis(dims, (0, 0, 0), 1)
    if [len(calls["extract"]), len(calls["cached"])] != [2 * args["num_layers"], 3 * args["num_layers"]]:
      raise Refused(f"its passes made {len(calls['extract'])} and {len(calls['cached'])} rotary calls, not its "
                    "reference's q and k, then its generation's q and k and the reference's k")
    if got is None:  # the rotation: fitted on the generation pass's q at raster (t, h, w)
      got = fit_grid(calls["cached"][:1], dims, [("raster", None, {tokens: generation})])
    at = [(c, reference) for c in calls["extract"]] + [
        (c, reference if j % 3 == 2 else generation) for j, c in enumerate(calls["cached"])]
    applied = [(_to_bthd(c["x"], tokens), _to_bthd(c["out"], tokens), pos) for c, pos in at]
    err = _rotation_error(applied, got["axes"], got["theta"], got["layout"], got["tables"], got["frequencies"])
    if err > _tolerance(got["tables"], applied):
      raise Refused(f"its reference tokens are not rotated at (refer_offset_t + refer_stride * t, refer_offset_h + h, "
                    f"refer_offset_w + w) with {setting or 'its defaults'} (off by {err:.1e})")
    worst = max(worst, err)
    functions |= {c["function"] for c in calls["extract"] + calls["cached"]}
    if i == 0:
      goldens = {"config": dict(args), "grid": generation, "positions": reference, "dims": np.asarray(dims),
                 "x": applied[0][0], "out": applied[0][1], "generation_x": applied[-2][0],
                 "generation_out": applied[-2][1]}
  family = {"grid": "wan_animate2", "axes_default": got["axes"], "layout": got["layout"], "order": "grid_thw",
            "frequencies": got["frequencies"], "tables": got["tables"], "theta": got["theta"],
            "head_dim_default": int(defaults["dim"] // defaults["num_heads"]), "patch": list(patch),
            "head_dim_key": None, "head_dim_from": ["dim", "num_heads", defaults["dim"], defaults["num_heads"]],
            "reference": {k: defaults[k] for k in ("refer_offset_t", "refer_offset_h", "refer_offset_w",
                                                   "refer_stride")}}
  if got["axes"] != [44, 42, 42] or family["head_dim_default"] != 128:
    raise Refused(f"its probe's split {got['axes']} is not its default head's")
  return {"status": "exact", "family": family, "functions": sorted(functions), "max_abs_error": worst}, goldens


def mochi_hypothesis(dims: tuple[int, int, int], base: tuple[int, int] = (192, 192)) -> np.ndarray:
  """Mochi's positions as its MochiRoPE is read (float64 here): (t, row, column), rows and columns the centres of equal
  cells spanning [-n s / 2, n s / 2], s = sqrt(base area / (rows x columns))."""
  f, h, w = dims
  s = (base[0] * base[1] / (h * w)) ** 0.5
  grid = raster_grid(dims).astype(np.float64)
  grid[:, 1] = (grid[:, 1] + 0.5) * s - h * s / 2
  grid[:, 2] = (grid[:, 2] + 0.5) * s - w * s / 2
  return grid


MOCHI_GRIDS = ((2, 2, 3), (1, 3, 2))  # two aspects and areas: the cells' scale moves with both


@_refusals("its observation with its learned frequencies set")
def observe_mochi(name: str, seed: int) -> tuple[dict, dict | None]:
  """Mochi: dense learned RoPE. Its pos_frequencies [3, heads, head_dim / 2] are a parameter its class builds as zeros
  (its checkpoint sets them), so the probe sets them at random; pair k of head n must then turn by sum_a pos_a F[a, n,
  k] at `mochi_hypothesis`' positions, interleaved pairs, on two heads and two grids (MOCHI_GRIDS); else Refused."""
  import diffusers
  cls = getattr(diffusers, name)
  kw, defaults, patch = grid_kwargs(cls)
  kw.update(RECIPES[name]["kw"])
  goldens: dict = {}
  worst, functions = 0.0, set()
  for i, dims in enumerate(MOCHI_GRIDS):
    torch.manual_seed(seed)
    model = cls(**kw).double().eval()
    with torch.no_grad():
      model.pos_frequencies.uniform_(-0.05, 0.05)  # angles up to ~5 rad at its positions (|pos| <= ~100)
    freqs = model.pos_frequencies.detach().numpy().astype(np.float64)
    inputs = _grid_inputs(cls, kw, defaults, patch, dims)
    calls = _applies(model, inputs)
    tokens = int(np.prod(dims))
    rotated = [c for c in calls if _token_count(c["x"].shape, (tokens,))]
    if not rotated or len(rotated) != len(calls):
      raise Refused(f"its rotary calls ({[c['x'].shape for c in calls]}) are not over its {tokens} latent tokens")
    positions = mochi_hypothesis(dims)
    ang = np.einsum("ta,ank->tnk", positions, freqs)  # [T, N, K]
    c_, s_ = np.cos(ang)[None], np.sin(ang)[None]
    applied = []
    for call in rotated:
      x, out = _to_bthd(call["x"], tokens), _to_bthd(call["out"], tokens)
      a, b = x[..., 0::2], x[..., 1::2]
      want = np.empty_like(x)
      want[..., 0::2], want[..., 1::2] = a * c_ - b * s_, a * s_ + b * c_
      applied.append((x, out, positions))
      worst = max(worst, float(np.abs(want - out).max()))
    if worst > _tolerance("float32", applied):
      raise Refused(f"its rotation is not sum_a pos_a F[a, n, k] at Mochi's centred, rescaled positions on a {dims} "
                    f"grid (off by {worst:.1e})")
    functions |= {c["function"] for c in rotated}
    if i == 0:
      goldens = {"config": dict(kw), "grid": raster_grid(dims), "positions": positions, "dims": np.asarray(dims),
                 "frequencies": freqs, "x": applied[0][0], "out": applied[0][1]}
  family = {"grid": "mochi", "axes_default": [defaults["attention_head_dim"]], "layout": "interleaved",
            "order": "grid_thw", "frequencies": "mixed", "tables": "float32", "theta": 10000.0,
            "head_dim_default": defaults["attention_head_dim"], "head_dim_key": "attention_head_dim",
            "patch": list(patch), "learned": {"parameter": "pos_frequencies", "axes": 3, "base": [192, 192]}}
  return {"status": "exact", "family": family, "functions": sorted(functions), "max_abs_error": worst}, goldens


def _glm_image(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  tokens = grid[1] * grid[2]
  return {"prior_token_id": torch.zeros(1, tokens, dtype=torch.long),  # a prior VQ token per latent patch, kept
          "prior_token_drop": torch.zeros(1, tokens, dtype=torch.bool)}


def _pipeline_crop(pipeline: str):
  """Forward inputs: the rotary tables (cos, sin) the pipeline's own `_prepare_rotary_positional_embeddings` makes
  for the probe's latent (CogVideoX 1.0, ConsisID), called unbound on a stand-in with the attributes it reads (the
  VAE's 8x spatial factor and the transformer's config). Which positions they hold is fitted (`_cropped`)."""
  def inputs(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
    import importlib
    import types
    module, name = pipeline.rsplit(".", 1)
    config = types.SimpleNamespace(**{**defaults, **kw})
    stub = types.SimpleNamespace(vae_scale_factor_spatial=8, transformer=types.SimpleNamespace(config=config))
    p = config.patch_size
    cos, sin = getattr(importlib.import_module(module), name)._prepare_rotary_positional_embeddings(
        stub, grid[1] * 8 * p, grid[2] * 8 * p, grid[0], torch.device("cpu"))
    return {"image_rotary_emb": (cos.double(), sin.double())}
  return inputs


def _z_image(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """Z-Image: lists of latents [C, F, H, W] and captions [T, width]; caption and image both a multiple of 32 tokens
  (its SEQ_MULTI_OF), so that no padding token is rotated."""
  p = defaults["all_patch_size"][0]
  return {"x": [torch.randn(defaults["in_channels"], 1, grid[1] * p, grid[2] * p, dtype=torch.float64)],
          "t": torch.tensor([0.5], dtype=torch.float64),
          "cap_feats": [torch.randn(T_TXT, kw["cap_feat_dim"], dtype=torch.float64)]}

def _hidream(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """HiDream: its T5 states and those of the Llama layers it reads, 3 tokens each; its joint calls rotate the image
  with the 9 tokens of T5 and two Llama layers (T_TXT = 9 in its recipe), all at Flux's text ids (zeros)."""
  per = T_TXT // 3
  return {"encoder_hidden_states_t5": torch.randn(1, per, WIDTH, dtype=torch.float64),
          "encoder_hidden_states_llama3": torch.randn(len(kw["llama_layers"]), 1, per, WIDTH, dtype=torch.float64)}

def _allegro(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """Allegro: the rotary tables and grid ids its pipeline's own `_prepare_rotary_positional_embeddings` makes for the
  probe's latent (called unbound on a stand-in holding the VAE's 8x spatial factor and the transformer's config)."""
  import types
  from diffusers.pipelines.allegro import pipeline_allegro as pipeline
  config = types.SimpleNamespace(**{**defaults, **kw, **{k: v for k, v in extra.items() if not k.startswith("_")}})
  stub = types.SimpleNamespace(vae_scale_factor_spatial=8, transformer=types.SimpleNamespace(config=config))
  p = config.patch_size
  freqs, ids = pipeline.AllegroPipeline._prepare_rotary_positional_embeddings(
      stub, 1, grid[1] * 8 * p, grid[2] * 8 * p, grid[0], torch.device("cpu"))
  return {"encoder_hidden_states": torch.randn(1, T_TXT, kw["caption_channels"], dtype=torch.float64),
          "image_rotary_emb": (tuple((c.double(), s.double()) for c, s in freqs), ids)}

def _stable_audio(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """Stable Audio: an audio latent [B, C, L], its global (duration) token, which the forward prepends, and the
  rotary tables its pipeline makes (step 7 of pipeline_stable_audio.py: get_1d_rotary_pos_embed over its
  rotary_embed_dim = attention_head_dim // 2 channels and L + 1 tokens, use_real, repeat_interleave_real=False)."""
  from diffusers.models.embeddings import get_1d_rotary_pos_embed
  n = RECIPES["StableAudioDiTModel"]["sequence"]
  cos, sin = get_1d_rotary_pos_embed({**defaults, **kw}["attention_head_dim"] // 2, n, use_real=True,
                                     repeat_interleave_real=False)
  return {"hidden_states": torch.randn(1, defaults["in_channels"], n - 1, dtype=torch.float64),
          "encoder_hidden_states": torch.randn(1, T_TXT, kw["cross_attention_input_dim"], dtype=torch.float64),
          "global_hidden_states": torch.randn(1, 1, kw["global_states_input_dim"], dtype=torch.float64),
          "rotary_embedding": (cos.double(), sin.double())}

def _minimax_music3(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """MiniMax Music 3: a latent [B, C, L] and frame-aligned conditioning [B, L, condition_dim]; its forward puts one
  token of its own before the L frames, so the rotation runs over L + 1."""
  n = RECIPES["MiniMaxMusic3Transformer1DModel"]["sequence"] - 1
  return {"hidden_states": torch.randn(1, defaults["in_channels"], n, dtype=torch.float64),
          "encoder_hidden_states": torch.randn(1, n, kw["condition_dim"], dtype=torch.float64),
          "timestep": torch.tensor([0.5], dtype=torch.float64)}

def _stable_audio3(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """Stable Audio 3: a latent [B, C, L] (its forward puts its num_memory_tokens before it), a caption and a global
  conditioning vector."""
  n = RECIPES["StableAudio3DiTModel"]["sequence"] - defaults["num_memory_tokens"]
  return {"hidden_states": torch.randn(1, defaults["io_channels"], n, dtype=torch.float64),
          "encoder_hidden_states": torch.randn(1, T_TXT, kw["cond_token_dim"], dtype=torch.float64),
          "global_hidden_states": torch.randn(1, kw["global_cond_dim"], dtype=torch.float64),
          "timestep": torch.tensor([0.5], dtype=torch.float64)}

def _ace_step(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """ACE-Step: its latent [B, S, acoustic dim] and context latents [B, S, the rest of in_channels], concatenated and
  patchified in pairs of frames (S / patch_size tokens); a caption of the DiT's width; two timesteps."""
  p = defaults["patch_size"]
  n = RECIPES["AceStepTransformer1DModel"]["sequence"] * p
  acoustic = defaults["audio_acoustic_hidden_dim"]
  return {"hidden_states": torch.randn(1, n, acoustic, dtype=torch.float64),
          "context_latents": torch.randn(1, n, defaults["in_channels"] - acoustic, dtype=torch.float64),
          "encoder_hidden_states": torch.randn(1, T_TXT, kw["hidden_size"], dtype=torch.float64),
          "timestep": torch.tensor([0.5], dtype=torch.float64), "timestep_r": torch.tensor([0.25], dtype=torch.float64)}

def _longcat_audio(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """LongCat-Audio-DiT: a latent [B, L, latent_dim] and a caption [B, T, dit_text_dim] with its mask."""
  n = RECIPES["LongCatAudioDiTTransformer"]["sequence"]
  return {"hidden_states": torch.randn(1, n, defaults["latent_dim"], dtype=torch.float64),
          "encoder_hidden_states": torch.randn(1, T_TXT, kw["dit_text_dim"], dtype=torch.float64),
          "encoder_attention_mask": torch.ones(1, T_TXT, dtype=torch.bool),
          "timestep": torch.tensor([0.5], dtype=torch.float64)}

def _scales(recipe: dict, args: dict) -> list[float]:
  """The per-axis scales a scaled grid divides by: one key's (t, h, w), or one key per axis (Allegro)."""
  if "scale_key" in recipe:
    return [float(v) for v in args[recipe["scale_key"]]]
  return [float(args[k]) for k in recipe["scale_keys"]]


def _cosmos(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """Cosmos: the padding mask its pipelines pass (zeros [1, 1, H, W], resized to the latent and concatenated as one
  more input channel: off the rotary path), and, with `_fps` in `extra`, the fps its video pipelines pass (Cosmos
  1.0's text2world: 30), which scales its frame positions by base_fps / fps. Its module resizes the mask with
  torchvision's transforms, an optional import the reference venv lacks (torchvision breaks its transformers): a
  stand-in nearest resize is put where the module looks for it (a resize of zeros is zeros, whatever the method)."""
  from diffusers.models.transformers import transformer_cosmos as module
  if not hasattr(module, "transforms"):
    import types

    def resize(x: torch.Tensor, size: list[int], interpolation: str = "nearest") -> torch.Tensor:
      return torch.nn.functional.interpolate(x, size=size, mode="nearest")
    module.transforms = types.SimpleNamespace(functional=types.SimpleNamespace(resize=resize),
                                              InterpolationMode=types.SimpleNamespace(NEAREST="nearest"))
  p = defaults["patch_size"]
  inputs = {"padding_mask": torch.zeros(1, 1, grid[1] * p[1], grid[2] * p[2], dtype=torch.float64)}
  if extra.get("_fps"):
    inputs["fps"] = extra["_fps"]
  return inputs


def _kandinsky6(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """Kandinsky 6: a video latent [B, T, H, W, 2 * in_visual_dim + 1] (the latent, its condition and the condition's
  mask), a caption, its pooled embedding; no audio (its fused blocks then run the video alone)."""
  size = [g * p for g, p in zip(grid, defaults["patch_size"], strict=True)]
  return {"hidden_states": torch.randn(1, *size, 2 * defaults["in_visual_dim"] + 1, dtype=torch.float64),
          "encoder_hidden_states": torch.randn(1, T_TXT, kw["in_text_dim"], dtype=torch.float64),
          "pooled_projections": torch.randn(1, kw["in_text_dim2"], dtype=torch.float64),
          "timestep": torch.tensor([500.0], dtype=torch.float64)}


def _kandinsky6_sr(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """Kandinsky 6 SR: tiles [B, T, H, W, 2 * in_visual_dim + 1] (the latent, its anchor and the anchor mask), its
  token grid a multiple of its 8 x 8 attention blocks."""
  return {"hidden_states": torch.randn(1, *grid, 2 * defaults["in_visual_dim"] + 1, dtype=torch.float64),
          "timestep": torch.tensor([500.0], dtype=torch.float64)}

def ltx_layout(inner: int) -> tuple[int, list[int], np.ndarray]:
  """LTX's pairs over an attention width `inner` (every head together): `pad` pairs that do not turn come first,
  then pair pad + 3k + a turns by frequency k of axis a (t, h, w). Returns (pad, the spec's sections, each spec
  axis's LTX axis): interleaved M-RoPE gives axis b >= 1 the pairs b, b + 3, ... and axis 0 the rest, so spec axis
  b is LTX axis (b - pad) % 3. (rope.ltx_pair_layout says the same for the reader; written again here, since the
  reference venv has no roformer_jax and the observer stays independent of the code it checks.)"""
  pairs_ = inner // 2
  pad = (inner % 6) // 2
  counts = [sum(1 for q in range(pairs_) if q % 3 == b) for b in range(3)]
  return pad, counts, np.array([(b - pad) % 3 for b in range(3)])


def _ltx_fit(rotated: list[dict], dims: tuple[int, ...], args: dict, ltx: dict) -> dict:
  """LTX's rotation is fitted as a hypothesis, not read off angles: its frequencies run from pi / 2 up to
  theta * pi / 2 (theta ** linspace(0, 1, n) * pi / 2, n = width // 6 per axis), so at its positions in [-1, 1) the
  angles wrap and no least-squares line through them exists. The hypothesis is its code's formula with the
  constants it passes (theta 10000; base 20 frames, 2048 x 2048), at the coordinates its pipeline makes
  (`rope_interpolation_scale` = (VAE temporal ratio / frame rate, spatial ratio, spatial ratio)): positions
  2 * grid * scale * patch / base - 1 per axis. Every call's every pair at every token must match (to float32's
  rounding of angles up to theta * pi / 2), else Refused."""
  inner = args["num_attention_heads"] * args["attention_head_dim"]
  pad, counts, owner_of = ltx_layout(inner)
  n = inner // 6
  theta = float(ltx["theta"])
  freqs = (theta ** np.linspace(0.0, 1.0, n, dtype=np.float32)).astype(np.float32) * np.float32(np.pi / 2)
  grid = raster_grid(dims).astype(np.float32)
  patch = np.array([args["patch_size_t"], args["patch_size"], args["patch_size"]], np.float32)
  coords = grid * np.array(ltx["scale"], np.float32) * patch / np.array(ltx["base"], np.float32)
  positions = coords * 2 - 1  # [T, 3] in LTX's (t, h, w)
  pair_freq = np.zeros(inner // 2, np.float32)
  pair_axis = np.zeros(inner // 2, np.int64)
  q = np.arange(pad, inner // 2)
  pair_freq[pad:], pair_axis[pad:] = freqs[(q - pad) // 3], (q - pad) % 3
  ang = positions[:, pair_axis] * pair_freq  # float32, as LTX computes it
  c, s_ = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
  tokens = int(np.prod(dims))
  err, bound = 0.0, 0.0
  for call in rotated:
    x, out = _to_bthd(call["x"], tokens), _to_bthd(call["out"], tokens)
    if x.shape[-1] != inner:
      raise Refused(f"its apply takes {x.shape[-1]} channels, not its attention width {inner}")
    a, b = x[..., 0::2].astype(np.float32), x[..., 1::2].astype(np.float32)
    want = np.empty_like(x)
    want[..., 0::2] = a * c[None, :, None] - b * s_[None, :, None]
    want[..., 1::2] = b * c[None, :, None] + a * s_[None, :, None]
    err = max(err, float(np.abs(want - out).max()))
    bound = max(bound, 1e-6 * max(1.0, float(np.abs(x).max())) * float(np.abs(ang).max()))
  if err > bound:
    raise Refused(f"its rotation is not LTX's formula at its pipeline's coordinates (off by {err:.1e})")
  spec_positions = positions[:, owner_of]  # in the spec's axis order
  return {"numbering": "ltx", "joint": None, "grid": spec_positions, "positions": spec_positions,
          "layout": "interleaved", "axes": [2 * c_ for c_ in counts], "theta": theta, "tables": "float32",
          "error": err, "frequencies": "ltx", "section_layout": "interleaved"}


# LTX-2: a video stream and an audio stream, each rotated by LTX's formula over its whole attention width, and the
# audio-video cross-attentions, whose q and k turn by their stream's time alone. In each block its rotary calls come
# in this order (its forward: video self-attention q, k; audio's q, k; audio-to-video q (video), k (audio);
# video-to-audio q (audio), k (video)), each the part named here.
LTX2_CALLS = ("video", "video", "audio", "audio", "video_cross", "audio_cross", "audio_cross", "video_cross")
LTX2_POSITION_KEYS = ("vae_scale_factors", "pos_embed_max_pos", "base_height", "base_width", "causal_offset",
                      "audio_scale_factor", "audio_pos_embed_max_pos", "audio_sampling_rate", "audio_hop_length",
                      "patch_size", "patch_size_t", "audio_patch_size", "audio_patch_size_t")
# the probe: video 2 heads of 64 (a width of 128: one unturned pair in front), audio 4 heads of 16 (its
# cross-attention width 64); the second setting moves every rotation key (theta, rope_type "split", both widths and
# head counts; a video width of 96: no unturned pair) and the fps its pipeline passes
LTX2_KW = {"in_channels": 8, "out_channels": 8, "num_attention_heads": 2, "attention_head_dim": 64,
           "cross_attention_dim": 128, "audio_in_channels": 8, "audio_out_channels": 8,
           "audio_num_attention_heads": 4, "audio_attention_head_dim": 16, "audio_cross_attention_dim": 64,
           "caption_channels": WIDTH}
LTX2_SETTINGS = ({"_fps": 24.0}, {"_fps": 25.0, "rope_type": "split", "rope_theta": 40000.0,
                                  "attention_head_dim": 48, "cross_attention_dim": 96, "audio_num_attention_heads": 2,
                                  "audio_attention_head_dim": 24, "audio_cross_attention_dim": 48})
LTX2_AUDIO_FRAMES = 5


def ltx2_hypothesis(cfg: dict, dims: tuple[int, int, int], audio_frames: int, fps: float,
                    frame_ids: list[int] | None = None) -> dict[str, np.ndarray]:
  """LTX-2's positions per part, in LTX's axis order, as its LTX2AudioVideoRotaryPosEmbed is read (float32, as it
  computes them): each latent patch's [start, end) in pixels (video: index * vae_scale_factors, the time shifted by
  causal_offset - vae_scale_factors[0] and clamped at 0, over fps; audio: latent frame * audio_scale_factor, the same
  shift, in seconds of hop_length / sampling_rate), its midpoint over the base (pos_embed_max_pos, base_height,
  base_width; audio_pos_embed_max_pos; the cross-attentions: the larger of the two on time alone), times 2 - 1.
  frame_ids: each latent frame's absolute index instead of 0, 1, ... (the SANA-WM refiner's window)."""
  f32 = np.float32
  sf = np.asarray(cfg["vae_scale_factors"], f32)
  co = f32(cfg["causal_offset"])
  grid = raster_grid(dims).astype(f32)
  if frame_ids is not None:
    grid[:, 0] = np.asarray(frame_ids, f32)[grid[:, 0].astype(np.int64)]
  patch = np.asarray([cfg["patch_size_t"], cfg["patch_size"], cfg["patch_size"]], f32)
  start, end = grid * sf, (grid + patch) * sf
  start[:, 0] = np.maximum(start[:, 0] + co - sf[0], 0) / f32(fps)
  end[:, 0] = np.maximum(end[:, 0] + co - sf[0], 0) / f32(fps)
  mid = (start + end) / f32(2.0)
  base = np.asarray([cfg["pos_embed_max_pos"], cfg["base_height"], cfg["base_width"]], f32)
  cross = f32(max(cfg["pos_embed_max_pos"], cfg["audio_pos_embed_max_pos"]))
  a = np.arange(audio_frames, dtype=f32)
  asf, apt = f32(cfg["audio_scale_factor"]), f32(cfg["audio_patch_size_t"])
  a0 = np.maximum(a * asf + co - asf, 0) * f32(cfg["audio_hop_length"]) / f32(cfg["audio_sampling_rate"])
  a1 = np.maximum((a + apt) * asf + co - asf, 0) * f32(cfg["audio_hop_length"]) / f32(cfg["audio_sampling_rate"])
  amid = ((a0 + a1) / f32(2.0))[:, None]
  return {"video": mid / base * 2 - 1, "video_cross": mid[:, :1] / cross * 2 - 1,
          "audio": amid / f32(cfg["audio_pos_embed_max_pos"]) * 2 - 1, "audio_cross": amid / cross * 2 - 1}


def ltx2_reference(x: np.ndarray, positions: np.ndarray, theta: float, split_heads: int | None
                   ) -> tuple[np.ndarray, np.ndarray]:
  """LTX-2's rotation of x [B, T, W] (every head together) at positions [T, n] (LTX's axis order), as its code is
  read: n_f = W // (2 n) frequencies theta ** linspace(0, 1, n_f) * pi / 2 (float64, then float32), pair pad + n k + a
  turning by frequency k of axis a after pad = W / 2 - n n_f pairs that do not turn; "interleaved": pairs (2i, 2i + 1)
  of the width; "split" (split_heads = the rotary module's head count): the width in that many heads, pairs (j, j + r)
  within a head of 2 r channels, head h taking pairs h r .. (h + 1) r - 1 of that order. cos, sin and the products in
  float32. Returns it and each channel's angle [T, W] (the bound of float32's rounding of it)."""
  w, n = x.shape[-1], positions.shape[1]
  nf = w // (2 * n)
  pad = w // 2 - n * nf
  freqs = (torch.pow(float(theta), torch.linspace(0.0, 1.0, nf, dtype=torch.float64)) * torch.pi / 2.0).to(
      torch.float32).numpy()
  q = np.arange(pad, w // 2)
  pair_freq, pair_axis = np.zeros(w // 2, np.float32), np.zeros(w // 2, np.int64)
  pair_freq[pad:], pair_axis[pad:] = freqs[(q - pad) // n], (q - pad) % n
  ang = positions.astype(np.float32)[:, pair_axis] * pair_freq  # [T, W / 2]
  c, s_ = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
  x32 = x.astype(np.float32)
  out = np.empty_like(x32)
  if split_heads is None:
    a, b = x32[..., 0::2], x32[..., 1::2]
    out[..., 0::2], out[..., 1::2] = a * c - b * s_, b * c + a * s_
    return out.astype(np.float64), np.repeat(ang, 2, -1)
  r = w // 2 // split_heads
  xr = x32.reshape(*x.shape[:-1], split_heads, 2, r)
  c, s_ = c.reshape(-1, split_heads, r), s_.reshape(-1, split_heads, r)
  first, second = xr[..., 0, :], xr[..., 1, :]
  o = np.stack([first * c - second * s_, second * c + first * s_], -2)
  angles = np.repeat(ang.reshape(-1, split_heads, 1, r), 2, -2).reshape(-1, w)
  return o.reshape(x.shape).astype(np.float64), angles


LTX2_WIDTHS = {"video": (("num_attention_heads", "attention_head_dim"), "num_attention_heads"),
               "audio": (("audio_num_attention_heads", "audio_attention_head_dim"), "audio_num_attention_heads"),
               "video_cross": (("audio_cross_attention_dim",), "num_attention_heads"),
               "audio_cross": (("audio_cross_attention_dim",), "audio_num_attention_heads")}


def _ltx2_probes(name: str, seed: int) -> tuple[dict, Iterator[tuple]]:
  """An LTX-2-built class's init defaults, and per LTX2_SETTINGS (its defaults, then rope_type split, rope_theta x 4,
  other widths and head counts, fps 25), built in turn after seeding: (index, setting, init args, the config they
  give, the one-block model in float64, fps)."""
  import diffusers
  cls = getattr(diffusers, name)
  defaults = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
              if p.default is not inspect.Parameter.empty}

  def probes():
    for i, setting in enumerate(LTX2_SETTINGS):
      args = {**LTX2_KW, "num_layers": 1, **{k: v for k, v in setting.items() if not k.startswith("_")}}
      torch.manual_seed(seed)
      yield i, setting, args, {**defaults, **args}, cls(**args).double().eval(), setting["_fps"]
  return defaults, probes()


@_refusals("its observation with its audio stream")
def observe_ltx2(name: str, seed: int) -> tuple[dict, dict | None]:
  """LTX-2: its forward run on a video of GRID latent patches and LTX2_AUDIO_FRAMES audio latents, as its pipeline
  runs it (it passes coordinates its transformer's own prepare_video_coords / prepare_audio_coords make, which its
  forward makes alike when given none: the frame rate as fps). Each rotary call, the part LTX2_CALLS names, must be
  `ltx2_reference` at `ltx2_hypothesis`' positions over that part's width (LTX2_WIDTHS: the keys whose product it
  is, and the head count its "split" layout uses), at its defaults and again at LTX2_SETTINGS' other (rope_type
  split, rope_theta x 4, other widths and head counts, fps 25); else Refused. Its position keys (LTX2_POSITION_KEYS)
  are observed at their defaults only (the reader refuses others)."""
  defaults, probes = _ltx2_probes(name, seed)
  dims = GRID
  tokens = int(np.prod(dims))
  goldens: dict = {}
  worst, functions = 0.0, set()
  for i, setting, args, cfg, model, fps in probes:
    inputs = {"hidden_states": torch.randn(1, tokens, args["in_channels"], dtype=torch.float64),
              "audio_hidden_states": torch.randn(1, LTX2_AUDIO_FRAMES, args["audio_in_channels"], dtype=torch.float64),
              "encoder_hidden_states": torch.randn(1, T_TXT, WIDTH, dtype=torch.float64),
              "audio_encoder_hidden_states": torch.randn(1, T_TXT, WIDTH, dtype=torch.float64),
              "timestep": torch.tensor([500.0], dtype=torch.float64), "num_frames": dims[0], "height": dims[1],
              "width": dims[2], "fps": fps, "audio_num_frames": LTX2_AUDIO_FRAMES}
    calls = _applies(model, inputs, ndims=(3,))
    if len(calls) != len(LTX2_CALLS):
      raise Refused(f"its one block made {len(calls)} rotary calls, not the {len(LTX2_CALLS)} of its video and audio "
                    f"self-attentions and its two cross-attentions ({[c['x'].shape for c in calls]})")
    hyp = ltx2_hypothesis(cfg, dims, LTX2_AUDIO_FRAMES, fps)
    split = cfg["rope_type"] == "split"
    for j, (part, call) in enumerate(zip(LTX2_CALLS, calls, strict=True)):
      keys, heads_key = LTX2_WIDTHS[part]
      width = int(np.prod([cfg[k] for k in keys]))
      x, out = call["x"], call["out"]
      if x.shape != (1, len(hyp[part]), width):
        raise Refused(f"its rotary call {j} ({part}) took {x.shape}, not [1, {len(hyp[part])}, {width}]")
      want, ang = ltx2_reference(x, hyp[part], cfg["rope_theta"], cfg[heads_key] if split else None)
      err = float(np.abs(want - out).max())
      # each channel to float32's rounding of its own angle (a pair at a low frequency is held to its own small one)
      bound = 1e-6 * max(1.0, float(np.abs(x).max())) * np.maximum(1.0, np.abs(ang))
      if (np.abs(want - out) > bound).any():
        raise Refused(f"its {part} rotation (call {j}) is not LTX's formula over {width} channels at its pipeline's "
                      f"coordinates with {setting} (off by {err:.1e})")
      worst = max(worst, err)
      functions.add(call["function"])
      if part not in {k.split("/")[0] for k in goldens if "/" in k} or (i == 1 and f"{part}/split_x" not in goldens):
        prefix = f"{part}/" + ("split_" if i else "")
        goldens.update({f"{prefix}x": x, f"{prefix}out": out, f"{prefix}positions": hyp[part]})
    if i == 0:
      goldens.update({"config": dict(args), "video/dims": np.asarray(dims), "audio/dims": np.asarray([LTX2_AUDIO_FRAMES]),
                      "video/fps": np.asarray(fps)})
    else:
      goldens["video/split_fps"] = np.asarray(fps)
  checked = {k: v for k, v in LTX2_SETTINGS[1].items() if not k.startswith("_")}
  parts = {}
  for part, (keys, heads_key) in LTX2_WIDTHS.items():
    axes = 3 if part == "video" else 1
    parts[part] = {"grid": "ltx2", "layout": "interleaved", "order": "grid_thw" if axes == 3 else "sequence",
                   "frequencies": "ltx", "tables": "float32", "section_layout": "interleaved",
                   "theta_key": "rope_theta", "theta_default": float(defaults["rope_theta"]),
                   "head_dim_key": None, "head_dim_default": int(np.prod([defaults[k] for k in keys])),
                   "axes_default": [2 * c for c in ltx2_sections(int(np.prod([defaults[k] for k in keys])), axes)],
                   "ltx2": {"stream": part, "axes": axes, "width_keys": list(keys),
                            "width_defaults": [defaults[k] for k in keys], "heads_key": heads_key,
                            "heads_default": defaults[heads_key], "rope_type_key": "rope_type",
                            "rope_type_default": defaults["rope_type"], "rope_types": ["interleaved", "split"],
                            "checked": checked},
                   "guarded": {"rope_double_precision": defaults["rope_double_precision"]},
                   "positions_guarded": {k: list(defaults[k]) if isinstance(defaults[k], tuple) else defaults[k]
                                         for k in LTX2_POSITION_KEYS}}
  return {"status": "exact", "parts": parts, "functions": sorted(functions), "max_abs_error": worst}, goldens


SANA_WM_REFINER_FRAMES = [3, 4]  # the absolute latent frames of the probe's window (its pipeline's frame_positions)


@_refusals("its observation with the rotary tables its pipeline builds")
def observe_sana_wm_refiner(name: str, seed: int) -> tuple[dict, dict | None]:
  """SANA-WM's refiner: LTX-2's video self-attention alone (its forward is video-only). Its forward takes
  video_rotary_emb, which its pipeline builds with the model's own build_rotary_emb_for_absolute_positions over the
  window's absolute latent frames (SANA_WM_REFINER_FRAMES here) at the video's fps; the probe builds it so. Each
  rotary call must be `ltx2_reference` at `ltx2_hypothesis`' video positions with those frames, at its defaults and
  at LTX2_SETTINGS' other (rope_type split, rope_theta x 4, another width, fps 25); else Refused."""
  defaults, probes = _ltx2_probes(name, seed)
  dims = GRID
  tokens = int(np.prod(dims))
  goldens: dict = {}
  worst, functions = 0.0, set()
  for i, setting, args, cfg, model, fps in probes:
    table = model.build_rotary_emb_for_absolute_positions(1, SANA_WM_REFINER_FRAMES, dims[1], dims[2], "cpu", fps)
    inputs = {"hidden_states": torch.randn(1, tokens, args["in_channels"], dtype=torch.float64),
              "encoder_hidden_states": torch.randn(1, T_TXT, WIDTH, dtype=torch.float64),
              "timestep": torch.full((1, tokens), 500.0, dtype=torch.float64), "video_rotary_emb": table}
    calls = _applies(model, inputs, ndims=(3,))
    if len(calls) != 2:
      raise Refused(f"its one block made {len(calls)} rotary calls, not its self-attention's q and k")
    positions = ltx2_hypothesis(cfg, dims, 1, fps, SANA_WM_REFINER_FRAMES)["video"]
    heads = cfg["num_attention_heads"] if cfg["rope_type"] == "split" else None
    width = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    for j, call in enumerate(calls):
      x, out = call["x"], call["out"]
      if x.shape != (1, tokens, width):
        raise Refused(f"its rotary call {j} took {x.shape}, not [1, {tokens}, {width}]")
      want, ang = ltx2_reference(x, positions, cfg["rope_theta"], heads)
      err = float(np.abs(want - out).max())
      if (np.abs(want - out) > 1e-6 * max(1.0, float(np.abs(x).max())) * np.maximum(1.0, np.abs(ang))).any():
        raise Refused(f"its rotation (call {j}) is not LTX-2's video rotation over {width} channels at the window's "
                      f"absolute frames {SANA_WM_REFINER_FRAMES} with {setting} (off by {err:.1e})")
      worst = max(worst, err)
      functions.add(call["function"])
    prefix = "split_" if i else ""
    goldens.update({f"{prefix}x": calls[0]["x"], f"{prefix}out": calls[0]["out"], f"{prefix}positions": positions,
                    f"{prefix}fps": np.asarray(fps)})
    if i == 0:
      goldens.update({"config": dict(args), "dims": np.asarray(dims), "frame_ids": np.asarray(SANA_WM_REFINER_FRAMES)})
  checked = {k: v for k, v in LTX2_SETTINGS[1].items() if not k.startswith("_")}
  keys = ("num_attention_heads", "attention_head_dim")
  width = int(np.prod([defaults[k] for k in keys]))
  family = {"grid": "ltx2", "layout": "interleaved", "order": "grid_thw", "frequencies": "ltx", "tables": "float32",
            "section_layout": "interleaved", "theta_key": "rope_theta", "theta_default": float(defaults["rope_theta"]),
            "head_dim_key": None, "head_dim_default": width, "axes_default": [2 * c for c in ltx2_sections(width, 3)],
            "ltx2": {"stream": "video", "axes": 3, "width_keys": list(keys), "width_defaults": [defaults[k] for k in keys],
                     "heads_key": "num_attention_heads", "heads_default": defaults["num_attention_heads"],
                     "rope_type_key": "rope_type", "rope_type_default": defaults["rope_type"],
                     "rope_types": ["interleaved", "split"], "checked": checked, "frame_ids": True},
            "guarded": {"rope_double_precision": defaults["rope_double_precision"]},
            "positions_guarded": {k: list(defaults[k]) if isinstance(defaults[k], tuple) else defaults[k]
                                  for k in ("vae_scale_factors", "pos_embed_max_pos", "base_height", "base_width",
                                            "causal_offset", "patch_size", "patch_size_t")}}
  return {"status": "exact", "family": family, "functions": sorted(functions), "max_abs_error": worst}, goldens


@_refusals("its observation with the rotary positions its pipeline builds")
def observe_kandinsky5(name: str, seed: int) -> tuple[dict, dict | None]:
  """Kandinsky 5: its forward run on a latent video [B, T, H, W, C] of GRID patches with the visual_rope_pos and
  text_rope_pos its pipeline passes (arange over each latent axis after patching; arange over the caption), in
  float32 (its time embedding is float32 whatever the weights). Its apply is seen to round q and k to bfloat16
  (every value it returns is one, though what it was given was not), which no float32 spec matches: Refused saying
  so (else Refused as not observed further)."""
  import diffusers
  cls = getattr(diffusers, name)
  kw, defaults, patch = grid_kwargs(cls)
  kw.update(RECIPES[name]["kw"])
  torch.manual_seed(seed)
  model = cls(**kw).float().eval()
  size = [g * q for g, q in zip(GRID, patch, strict=True)]
  inputs = {"hidden_states": torch.randn(1, *size, kw.get("in_visual_dim", defaults["in_visual_dim"])),
            "encoder_hidden_states": torch.randn(1, T_TXT, kw["in_text_dim"]),
            "pooled_projections": torch.randn(1, kw["in_text_dim2"]),
            "timestep": torch.tensor([500.0]),
            "visual_rope_pos": [torch.arange(g) for g in GRID], "text_rope_pos": torch.arange(T_TXT)}
  calls = _applies(model, inputs, ndims=(3, 4))
  if not calls:
    raise Refused("its forward, given the rotary positions its pipeline builds, made no rotary call seen here")

  def bf16(a: np.ndarray) -> bool:
    return bool(np.array_equal(torch.from_numpy(a).to(torch.bfloat16).to(torch.float64).numpy(), a))
  if all(c["out_dtype"] == "bfloat16" and bf16(c["out"]) and not bf16(c["x"]) for c in calls):
    raise Refused(f"its apply ({calls[0]['function']}) rounds the rotated q and k to bfloat16 whatever the model's "
                  f"dtype (observed in float32: all {len(calls)} calls, caption and video, returned bfloat16 "
                  "tensors, of inputs that were float32 values no bfloat16 holds): its rotated q and k carry "
                  "bfloat16's 8 bits of mantissa, which no float32 spec reproduces")
  raise Refused(f"its rotation at the positions its pipeline builds was not fitted ({len(calls)} calls observed)")


def ltx2_sections(width: int, axes: int) -> list[int]:
  """The spec's sections of LTX-2's pairs over `width` for `axes` position axes, as interleaved M-RoPE (axis b >= 1
  the pairs b, b + axes, ..., axis 0 the rest)."""
  return [sum(1 for q in range(width // 2) if q % axes == b) for b in range(axes)]


def _ltx(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """LTX: the rope_interpolation_scale its pipeline passes (pipeline_ltx.py: VAE temporal ratio / frame rate and the
  spatial ratio twice; its defaults 8 / 25, 32, 32)."""
  return {"rope_interpolation_scale": RECIPES["LTXVideoTransformer3DModel"]["ltx"]["scale"]}

def _hunyuan_dit(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  """HunyuanDiT's inputs, and its rotary tables as its pipeline's __call__ makes them (step 7 of
  pipeline_hunyuandit.py, with that module's own functions): a crop of a square base grid of 512 // 8 // patch_size
  (a constant of the pipeline; `_base` replaces it for `_cropped`'s plain run)."""
  from diffusers.models.embeddings import get_2d_rotary_pos_embed
  from diffusers.pipelines.hunyuandit import pipeline_hunyuandit as pipeline
  h, w = grid[-2:]
  base = extra.get("_base", HUNYUAN_DIT_BASE_PIXELS // 8 // kw["patch_size"])
  cos, sin = get_2d_rotary_pos_embed(defaults["attention_head_dim"], pipeline.get_resize_crop_region_for_grid(
      (h, w), base), (h, w), output_type="pt")
  return {"encoder_hidden_states": torch.randn(1, T_TXT, kw["cross_attention_dim"], dtype=torch.float64),
          "text_embedding_mask": torch.ones(1, T_TXT, dtype=torch.long),
          "encoder_hidden_states_t5": torch.randn(1, T_TXT, kw["cross_attention_dim_t5"], dtype=torch.float64),
          "text_embedding_mask_t5": torch.ones(1, T_TXT, dtype=torch.long),
          "image_meta_size": torch.tensor([[8.0 * 8 * h, 8.0 * 8 * w, 8.0 * 8 * h, 8.0 * 8 * w, 0, 0]],
                                          dtype=torch.float64),
          "style": torch.zeros(1, dtype=torch.long), "image_rotary_emb": (cos.double(), sin.double())}


HUNYUAN_DIT_BASE_PIXELS = 512  # HunyuanDiTPipeline's base_size = 512 // 8 // patch_size (its __call__, step 7)

def crop_grid(dims: tuple[int, ...], base: tuple[int, int]) -> np.ndarray:
  """The hypothesis `_cropped` checks: (t, h, w) of each latent patch, the rows and columns spread over the part of
  a base grid (base_h, base_w) that the latent's aspect covers when fitted inside it and centred (halves rounded to
  even): row i of n at top + i * bottom / n (bottom = top + the covered rows), t from 0."""
  *frames, h, w = dims
  bh, bw = base
  if h / w > bh / bw:
    rh, rw = bh, int(round(bh / h * w))
  else:
    rw, rh = bw, int(round(bw / w * h))
  top, left = int(round((bh - rh) / 2.0)), int(round((bw - rw) / 2.0))
  rows = np.linspace(top, (top + rh) * (h - 1) / h, h, dtype=np.float32)
  cols = np.linspace(left, (left + rw) * (w - 1) / w, w, dtype=np.float32)
  axes = [np.arange(f, dtype=np.float32) for f in frames] + [rows, cols]
  return np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(axes)).astype(np.float64)


def _cropped(name: str, seed: int, extra: dict | None, rotated: list[dict], dims: tuple[int, ...],
             init_args: dict, failed: Refused) -> dict:
  """Positions spread over a crop of a base grid (`crop_grid`): CogVideoX 1.0 and ConsisID, the base from a pair of
  config keys (sample_height, sample_width) in latent pixels over the patch size; HunyuanDiT, a square base its
  pipeline fixes (512 px // 8 // patch_size). The base set to the probe's own grid (the crop then is the grid
  itself) must give a raster fit, and that fit at the crop's positions must reproduce the calls, and again on the
  other aspect (with the keys' height doubled: the positions follow the keys); else the refusal."""
  extra = extra or {}
  recipe = RECIPES[name]
  keys = recipe.get("crop_keys")
  p = int(init_args["patch_size"])
  if "_base" in extra:
    base = extra["_base"]
  elif keys:
    base = (init_args[keys[0]] // p, init_args[keys[1]] // p)
  elif "crop_base_latent" in recipe:  # EasyAnimate: a base its rotary module fixes, in latent pixels
    base = tuple(b // p for b in recipe["crop_base_latent"])
  else:
    base = (recipe["crop_base_pixels"] // 8 // p,) * 2
  base = (base, base) if isinstance(base, int) else tuple(base)
  fam = extra.get("_crop_family")
  frames = (1,) * (3 - len(dims)) + tuple(dims[:-2])  # the probe's grid is (frames, rows, columns), an image too
  if fam is None:
    if keys:
      plain, _ = _observe_grid.__wrapped__(name, seed, {**extra, keys[0]: dims[-2] * p, keys[1]: dims[-1] * p,
                                                        "_plain": True}, (*frames, *dims[-2:]))
    elif "crop_base_latent" in recipe:  # a base the model fixes: the plain run on a grid of the base's own size
      plain, _ = _observe_grid.__wrapped__(name, seed, {**extra, "_plain": True}, (1, *base))
    else:  # a square base: the plain run on a square grid of the same
      n = max(dims[-2:])
      plain, _ = _observe_grid.__wrapped__(name, seed, {**extra, "_base": n, "_plain": True}, (*frames, n, n))
    fam = plain.get("family")
    if fam is None or fam["grid"] not in ("raster", "raster_wh"):
      raise failed
  positions = crop_grid(dims, base)
  if fam["grid"] == "raster_wh":  # HunyuanDiT: (column, row)
    positions = positions[:, ::-1]
  got = _fitted_at(fam, rotated, dims, positions, "cropped" + fam["grid"][len("raster"):])
  if got is None:
    raise failed
  got["crop_keys"] = list(keys) if keys else None
  if "_crop_family" in extra:  # the check on the other aspect (below)
    return got
  other = (*frames, dims[-1], dims[-2])  # the other aspect (and the base twice as high): the crop moves
  moved = {keys[0]: 2 * init_args[keys[0]]} if keys else {}
  again, _ = _observe_grid.__wrapped__(name, seed, {**extra, **moved, "_crop_family": fam}, other)
  if again.get("family", {}).get("grid") != got["numbering"]:
    raise Refused(f"its positions fit a crop of the base grid {keys or base} at their defaults, but not on a {other} "
                  f"grid{f' with {keys[0]} doubled' if keys else ''} "
                  f"({again.get('reason', again.get('family', {}).get('grid'))})")
  return got


CROPS = {"crop_keys", "crop_base_pixels", "crop_base_latent"}  # a recipe's crop base: see `_cropped`


def _easyanimate(kw: dict, defaults: dict, ids: None, grid: tuple[int, ...], extra: dict) -> dict:
  return {"encoder_hidden_states": torch.randn(1, T_TXT, kw["text_embed_dim"], dtype=torch.float64),
          "encoder_hidden_states_t5": None}  # (no second text encoder unless text_embed_dim_t5 is set)


RECIPES: dict[str, dict] = {
    "GlmImageTransformer2DModel": {"inputs": _glm_image},
    # Cosmos: each axis its own theta, 10000 * rope_scale[a] ** (d_a / (d_a - 2)) (an NTK factor per axis; confirmed
    # with rope_scale changed); a video's frames at t * 24 / fps (24: its rotary module's base_fps, which the model
    # does not pass; confirmed at the fps 30 its text2world pipeline passes)
    "CosmosTransformer3DModel": {"inputs": _cosmos, "ntk_key": "rope_scale", "ntk_base": 10000.0, "base_fps": 24,
                                 "ntk_check": [1.0, 3.0, 2.0]},
    # CogVideoX, ConsisID: [B, F, C, H, W] latents; their learned position table sized for the probe's caption
    # CogVideoX 1.0 and ConsisID rotate by the tables their pipeline makes, over a crop of (sample_height,
    # sample_width) / patch_size; probed on 3 x 2 patches, an aspect whose crop (12 of 45 columns left of it, 12.5
    # rounded to even) the default base does not fit
    # HunyuanDiT: the same crop of a square base the pipeline fixes (columns on the first half of the head)
    "HunyuanDiT2DModel": {"kw": {"cross_attention_dim": WIDTH, "cross_attention_dim_t5": WIDTH, "text_len": T_TXT,
                                 "text_len_t5": T_TXT, "pooled_projection_dim": WIDTH, "hidden_size": 88},
                          "inputs": _hunyuan_dit, "crop_base_pixels": HUNYUAN_DIT_BASE_PIXELS, "grid": (1, 3, 2)},
    # Z-Image: a caption of 32 tokens and 4 x 16 patches, whole multiples of its padding unit
    "ZImageTransformer2DModel": {"inputs": _z_image, "text_tokens": 32, "grid": (1, 4, 16)},
    # HiDream: its class default axes_dims_rope (32, 32) does not run (its ids have 3 axes); observed at the split its
    # checkpoints ship, [64, 32, 32], which config.json must then give (`required`). Its image padded to no more than
    # the probe's own 2 x 3 patches (max_resolution in pixels of the latent)
    "HiDreamImageTransformer2DModel": {"kw": {"axes_dims_rope": [64, 32, 32], "max_resolution": [4, 6]},
                                       "inputs": _hidream, "text_tokens": 3 * T_TXT, "required": ("axes_dims_rope",)},
    # EasyAnimate: CogVideoX's crop, of a base of 60 x 90 latent pixels its rotary module fixes (not its sample_height
    # and sample_width); its one text encoder
    "EasyAnimateTransformer3DModel": {"kw": {"text_embed_dim": WIDTH}, "inputs": _easyanimate,
                                      "crop_base_latent": (60, 90), "grid": (2, 3, 2)},
    # Allegro: each axis's third of the head rotate_half'd on its own, at the grid over interpolation_scale_{t,h,w}
    "AllegroTransformer3DModel": {"kw": {"caption_channels": WIDTH}, "inputs": _allegro,
                                  "scale_keys": ("interpolation_scale_t", "interpolation_scale_h",
                                                 "interpolation_scale_w")},
    # Stable Audio: 6 latent frames after its global token; its attention slices each head and rotates the first
    # half inline (observed at the attention: q before the rotation and as torch's attention gets it)
    "StableAudioDiTModel": {"kw": {"cross_attention_input_dim": WIDTH, "global_states_input_dim": WIDTH},
                            "inputs": _stable_audio, "sequence": 7, "attention": "sdpa"},
    # MiniMax Music 3: 6 latent frames after a token of its own; its partial rotary turns the first rotary_dim
    # channels of each head
    "MiniMaxMusic3Transformer1DModel": {"kw": {"condition_dim": WIDTH, "ff_inner_dim": WIDTH},
                                        "inputs": _minimax_music3, "sequence": 7},
    # Stable Audio 3: 64 memory tokens, then 6 latent frames
    "StableAudio3DiTModel": {"kw": {"cond_token_dim": WIDTH, "global_cond_dim": WIDTH}, "inputs": _stable_audio3,
                             "sequence": 70},
    # ACE-Step: 12 frames patchified into 6 tokens
    "AceStepTransformer1DModel": {"kw": {"intermediate_size": WIDTH}, "inputs": _ace_step, "sequence": 6},
    # LongCat-Audio-DiT: 6 latent frames; its cross-attention rotates the caption's keys too, from 0
    "LongCatAudioDiTTransformer": {"kw": {"dit_text_dim": WIDTH}, "inputs": _longcat_audio, "sequence": 6},
    # Kandinsky 6 SR: one head of its axes' 64 channels; a 2 x 8 x 8 grid, one 8 x 8 attention block per frame (its
    # tokens then in raster order); positions over its scale_factor
    # Kandinsky 6: one head of its axes' 128 channels, one text and one fused block, every other width narrowed
    "Kandinsky6Transformer3DModel": {"kw": {"model_dim": 128, "ff_dim": WIDTH, "num_text_blocks": 1,
                                            "num_visual_blocks": 1, "time_dim": WIDTH, "in_text_dim": WIDTH,
                                            "in_text_dim2": WIDTH},
                                     "inputs": _kandinsky6, "scale_key": "scale_factor",
                                     # its text blocks' own 1-D RoPE over sum(axes_dims) (the head of its text
                                     # blocks), a part of its own; confirmed at a head of 64 (model_dim with it)
                                     "caption_part": {"axes_sum_key": "axes_dims",
                                                      "check": {"axes_dims": [16, 24, 24], "model_dim": 64}}},
    "Kandinsky6SRTransformer3DModel": {"kw": {"model_dim": 64, "ff_dim": WIDTH, "num_visual_blocks": 1,
                                              "time_dim": WIDTH},
                                       "inputs": _kandinsky6_sr, "grid": (2, 8, 8), "scale_key": "scale_factor"},
    # LTX: two heads (an attention width of 128 leaves one unturned pair in front, as its 2048 does), its apply on
    # [B, T, heads * D]; the hypothesis' constants are those its code passes (see _ltx_fit)
    "LTXVideoTransformer3DModel": {"kw": {"num_attention_heads": 2, "cross_attention_dim": 128}, "inputs": _ltx,
                                   "ndims": (3,),
                                   "ltx": {"theta": 10000.0, "base": (20, 2048, 2048), "scale": (8 / 25, 32, 32)}},
    "CogVideoXTransformer3DModel": {"frames_first": True, "kw": {"max_text_seq_length": T_TXT},
                                    "inputs": _pipeline_crop("diffusers.pipelines.cogvideo.pipeline_cogvideox.CogVideoXPipeline"),
                                    "crop_keys": ("sample_height", "sample_width"), "grid": (2, 3, 2),
                                    # CogVideoX 1.5 (patch_size_t set): its pipeline's "slice" grid, not observed
                                    "positions_guarded": ("patch_size_t",)},
    "ConsisIDTransformer3DModel": {"frames_first": True, "kw": {"max_text_seq_length": T_TXT},
                                   "inputs": _pipeline_crop("diffusers.pipelines.consisid.pipeline_consisid.ConsisIDPipeline"),
                                   "crop_keys": ("sample_height", "sample_width"), "grid": (2, 3, 2)},
    # LTX-2: its video and audio streams and their cross-attentions, observed by `observe_ltx2`
    "LTX2VideoTransformer3DModel": {"observe": observe_ltx2},
    # MiniMax-H3: one head of its 128 channels, one layer and refiner layer; its packed sequence of caption, video and
    # audio rows at the position_ids its pipeline gives (random here). Its rotated width 2 * 3 * rope_freq_dim (the
    # three axes' shared spectrum of rope_freq_dim frequencies) was observed at the default only (`guard`)
    "MiniMaxH3Transformer3DModel": {"kw": {"hidden_size": 128, "time_embed_hidden_dim": WIDTH, "time_embed_dim": WIDTH},
                                    "inputs": _minimax_h3, "ids": True, "guard": ("rope_freq_dim",)},
    # Kandinsky 5: one head of its axes' 64 channels, one text and one visual block; `observe_kandinsky5`
    "Kandinsky5Transformer3DModel": {"kw": {"model_dim": 64, "ff_dim": WIDTH, "time_dim": WIDTH, "in_text_dim": WIDTH,
                                            "in_text_dim2": WIDTH, "num_text_blocks": 1, "num_visual_blocks": 1},
                                     "observe": observe_kandinsky5},
    # SANA-WM's refiner: LTX-2's video self-attention, at the rotary tables its pipeline builds (a window of absolute
    # frames); `observe_sana_wm_refiner`
    "SanaWMLTX2RefinerTransformer3DModel": {"observe": observe_sana_wm_refiner},
    # Wan-Animate: a pose latent and a face video besides the latent; its face's motion encoder at 16 px
    "WanAnimateTransformer3DModel": {"kw": {"motion_encoder_size": 16, "inject_face_latents_blocks": 1},
                                     "inputs": _wan_animate},
    "AnyFlowTransformer3DModel": {"frames_first": True, "inputs": _anyflow},
    "AnyFlowFARTransformer3DModel": {"frames_first": True, "inputs": _anyflow},
    # Ideogram 4: one packed sequence of caption and image tokens, with each token's role; its cos/sin apply is
    # written in its attention, so it is observed there (q after norm_q, and as dispatch_attention_fn gets it)
    "Ideogram4Transformer2DModel": {"kw": {"llm_features_dim": WIDTH, "intermediate_size": WIDTH},
                                    "inputs": _ideogram4, "ids": True, "attention": "dispatch"},
    # Cosmos3-Omni: one layer, a vocabulary of 16; its cos/sin apply is written in its attention processor, which
    # rotates its text prefix (q after norm_q) and its generation tokens (q after norm_added_q) apart, by the two
    # slices of one table over the packed sequence: observed at the attention, the two calls joined in sequence
    # order (`join_streams`). rope_axes_dim given as register_to_config writes it into every config.json it saves
    "Cosmos3OmniTransformer": {"kw": {"num_hidden_layers": 1, "intermediate_size": WIDTH, "vocab_size": 16,
                                      "rope_axes_dim": [24, 20, 20]},
                               "inputs": _cosmos3, "ids": True, "attention": "dispatch", "join_streams": True,
                               # a config without rope_axes_dim: rope_scaling["mrope_section"] (confirmed with a yarn
                               # rope_type and factor there, which it does not read), else [24, 20, 20]
                               "sections_fallback": ("rope_scaling", "mrope_section")},
    # QwenImage 2.1: one joint sequence of text and image blocks (QWEN_IMAGE21_RUNS), fitted at the positions its
    # rotary module's docstring describes (`hypothesis`; they reach 5, where frequency 1 wraps)
    "QwenImage21Transformer2DModel": {"kw": {"context_in_dim": WIDTH}, "inputs": _qwen_image21,
                                      "hypothesis": ("qwen_image21", lambda: qwen_image21_hypothesis(QWEN_IMAGE21_RUNS)),
                                      "runs": QWEN_IMAGE21_RUNS},
    # Bria-Fibo 2: 4 gist tokens of at most 8 (its gist count from the text length, min 4, step 4), one Perceiver
    # layer, its one layer injected; fitted at the positions its code is read to give (`hypothesis`)
    "BriaFibo2Transformer2DModel": {"kw": {"min_num_gist_tokens": BRIA_FIBO2["gist"],
                                           "max_num_gist_tokens": BRIA_FIBO2["max_gist"],
                                           "gist_step": BRIA_FIBO2["gist"], "perceiver_num_layers": 1,
                                           "injection_layer_ids": [0]},
                                    "inputs": _bria_fibo2, "hypothesis": ("bria_fibo2", bria_fibo2_hypothesis),
                                    # the golden's layout: gist tokens, their most, the image's and context's sizes
                                    "layout": [BRIA_FIBO2["gist"], BRIA_FIBO2["max_gist"], *BRIA_FIBO2["image"],
                                               *BRIA_FIBO2["context"]]},
    # OmniGen: one head of its default 96 channels, one layer; observed by `observe_longrope`
    "OmniGenTransformer2DModel": {"kw": {"intermediate_size": WIDTH, "vocab_size": 128, "pad_token_id": 0,
                                         "pos_embed_max_size": 8}, "observe": observe_longrope},
    # HunyuanVideo Framepack: its history inputs, as its pipeline passes them every step
    "HunyuanVideoFramepackTransformer3DModel": {"kw": {"image_proj_dim": WIDTH, "has_image_proj": True},
                                                "inputs": _framepack, "observe": observe_framepack},
    # Wan-Animate 2: one head of its default 128 channels, a caption of T_TXT tokens; `observe_wan_animate2`
    "WanAnimate2Transformer3DModel": {"kw": {"text_len": T_TXT}, "observe": observe_wan_animate2},
    # Mochi: two heads (its frequencies are per head) of its default 128 channels; `observe_mochi`
    "MochiTransformer3DModel": {"kw": {"num_attention_heads": 2}, "observe": observe_mochi},
    # SANA-WM: refused as its code reads, so that a probe that one day runs its forward cannot fit the RoPE calls
    # alone and call it exact: its pipeline always passes camera_conditions (pipeline_sana_wm.py's
    # _build_camera_kwargs), and then its attentions transform q by P^T, k and v by P^-1 and the output by P, per-token
    # 4 x 4 ray matrices built from the camera (_prepare_ucpe_ray_transforms, _apply_ucpe_transform)
    "SanaWMTransformer3DModel": {"refuse": "its pipeline always passes camera_conditions, and its attentions then "
                                           "transform q, k, v and the output by per-token 4 x 4 camera ray matrices "
                                           "(UCPE: _prepare_ucpe_ray_transforms, _apply_ucpe_transform) besides its "
                                           "RoPE: a camera-dependent transform no RotaryConfig expresses (read from "
                                           "its code; not probed)"},
    # Krea 2: its text-fusion tower, narrowed to one head of the DiT's head dim
    "Krea2Transformer2DModel": {"kw": {"text_hidden_dim": 128, "text_num_attention_heads": 1,
                                       "text_num_key_value_heads": 1, "text_intermediate_size": WIDTH,
                                       "intermediate_size": WIDTH},
                                "inputs": _krea2, "ids": True},
}


def _two_frames(name: str, seed: int, extra: dict | None, rotated: list[dict], dims: tuple[int, ...],
                failed: Refused) -> dict:
  """ChronoEdit: a video of exactly two latent frames rotates its second frame at a position of its own. The
  rotation fitted on three frames (raster order) must reproduce the two-frame calls with frame 1 at some k; else
  the fit's own refusal. (Least squares on the angles cannot see it: k lies where the angles wrap.)"""
  try:
    three, _ = _observe_grid.__wrapped__(name, seed, extra, (3, *GRID[1:]))  # one run of three frames
  except Refused:
    raise failed from None
  fam = three["family"]
  if fam["grid"] != "raster":
    raise failed
  raster = raster_grid(dims)
  for k in range(2, 65):
    grid = raster.copy()
    grid[:, 0] *= k
    got = _fitted_at(fam, rotated, dims, grid, f"two_frames_at_{k}")
    if got:
      return got
  raise failed


def _fitted_at(fam: dict, rotated: list[dict], dims: tuple[int, ...], grid: np.ndarray, numbering: str) -> dict | None:
  """fit_grid's result for the calls at `grid`, rotated by an observed family's spec; None if they are not."""
  tokens = int(np.prod(dims))
  applied = [(_to_bthd(c["x"], tokens), _to_bthd(c["out"], tokens), grid) for c in rotated]
  err = _rotation_error(applied, fam["axes_default"], fam["theta"], fam["layout"], fam["tables"], fam["frequencies"])
  if err > _tolerance(fam["tables"], applied):
    return None
  return {"numbering": numbering, "joint": None, "grid": grid, "positions": grid, "layout": fam["layout"],
          "axes": fam["axes_default"], "theta": fam["theta"], "tables": fam["tables"], "error": err,
          "frequencies": fam["frequencies"]}


def _stretched(name: str, seed: int, extra: dict | None, rotated: list[dict], dims: tuple[int, ...],
               init_args: dict, failed: Refused) -> dict:
  """CogView 4: row i of n at i * A // n, A a key's entry per axis (rope_axes_dim (256, 256)): the grid stretched
  over A positions. The key set to the grid's own sizes must give the raster fit, and that fit, with the default
  A, must reproduce the calls; else the fit's own refusal. (Least squares cannot see it: the angles wrap.)"""
  for key, value in init_args.items():
    if not (isinstance(value, (list, tuple)) and len(value) == len(dims) and all(isinstance(v, int) for v in value)
            and all(v > g for v, g in zip(value, dims, strict=True))):
      continue
    try:
      plain, _ = _observe_grid.__wrapped__(name, seed, {**(extra or {}), key: list(dims)})
    except Exception:  # noqa: BLE001  a key the class cannot take as a grid's sizes (HiDream's caption_channels)
      continue
    fam = plain["family"]
    if fam["grid"] != "raster":
      continue
    grid = np.stack(np.meshgrid(*(np.arange(g) * a // g for g, a in zip(dims, value, strict=True)), indexing="ij"),
                    -1).reshape(-1, len(dims))
    got = _fitted_at(fam, rotated, dims, grid, f"stretched_by_{key}")
    if got:
      return got
  raise failed


@_refusals("its observation on a latent video")
def _observe_grid(name: str, seed: int, extra: dict | None = None, grid: tuple[int, int, int] | None = None
                  ) -> tuple[dict, dict | None]:
  global T_TXT
  saved, T_TXT = T_TXT, RECIPES.get(name, {}).get("text_tokens", T_TXT)  # the caption's tokens (Z-Image: 32)
  try:
    return _observe_grid_at(name, seed, extra, grid)
  finally:
    T_TXT = saved


def _observe_grid_at(name: str, seed: int, extra: dict | None, grid: tuple[int, int, int] | None
                     ) -> tuple[dict, dict | None]:
  import diffusers
  cls = getattr(diffusers, name)
  kw, defaults, patch = grid_kwargs(cls)
  recipe = RECIPES.get(name, {})
  grid = grid or recipe.get("grid", GRID)
  kw.update(recipe.get("kw", {}))
  kw.update({k: v for k, v in (extra or {}).items() if not k.startswith("_")})
  with torch.device("meta"):
    size = sum(p.numel() for p in cls(**kw).parameters())
  if size > MAX_PARAMS:
    raise Refused(f"its probe keeps {size / 1e6:.0f}M parameters (widths this probe does not narrow); "
                  f"the limit is {MAX_PARAMS / 1e6:.0f}M")
  torch.manual_seed(seed)
  model = cls(**kw).double().eval()
  inputs = _grid_inputs(cls, kw, defaults, patch, grid)
  given = None
  if recipe.get("frames_first"):  # AnyFlow: latents [B, F, C, H, W]
    inputs["hidden_states"] = inputs["hidden_states"].transpose(1, 2)
  if "inputs" in recipe:  # its own inputs; the ids it is given, if it takes its positions from its pipeline
    rng = np.random.default_rng(seed)
    given = rng.integers(0, 3, (GIVEN_TOKENS, 3)) if recipe.get("ids") else None  # angles below pi: no wrap
    inputs.update(recipe["inputs"](kw, defaults, given, grid, extra or {}))
  try:
    calls = (_attention_applies(model, inputs, recipe["attention"]) if "attention" in recipe else
             _applies(model, inputs, ndims=recipe.get("ndims")))
  except RuntimeError as e:  # Motif Video casts its timestep embedding to float32 unless the weights are half;
    # Cosmos's learnable position embedding takes a float32 norm no float64 input may narrow to: run it in float32
    if "same dtype" not in str(e) and "without narrowing" not in str(e):  # (the fit then allows float32's rounding)
      raise
    calls = _applies(model.float(), {k: v.float() if torch.is_tensor(v) and v.is_floating_point() else v
                                     for k, v in inputs.items()})
  if recipe.get("join_streams"):  # Cosmos3-Omni: its two pathways' calls, each layer's pair joined in sequence order
    calls = [{"function": a["function"], "x": np.concatenate([a["x"], b["x"]], 1),
              "out": np.concatenate([a["out"], b["out"]], 1)} for a, b in zip(calls[::2], calls[1::2], strict=True)]
  if not calls:  # as for a transformers type whose default config's forward calls none of its rotary code
    return {"status": "no_rope", "reason": "its forward on a latent calls no rotary function (observed; its module "
                                           "has names that match rot/rope)"}, None
  names = list(inspect.signature(cls.forward).parameters)
  dims = grid if is_video(cls, defaults) or {"img_shapes", "num_frames", "shape_list"} & set(names) else grid[1:]
  if given is not None:
    dims = (GIVEN_TOKENS,)
  if "sequence" in recipe:  # Stable Audio: one sequence of tokens at 0, 1, ... (its global token first)
    dims = (recipe["sequence"],)
  if "hypothesis" in recipe:  # QwenImage 2.1: one joint sequence, at the positions its module is said to give;
    numbering, hypothesis = recipe["hypothesis"][0], recipe["hypothesis"][1]()  # Bria-Fibo 2: {tokens: positions}
    hypothesis = hypothesis if isinstance(hypothesis, dict) else {len(hypothesis): hypothesis}  # per call size,
    dims = (max(hypothesis),)  # the longest the golden's
  tokens = int(np.prod(dims))
  sizes = tuple(hypothesis) if "hypothesis" in recipe else (tokens, tokens + T_TXT)
  rotated = [c for c in calls if _token_count(c["x"].shape, sizes)]
  if not rotated:
    raise Refused(f"no apply call over its {tokens} latent tokens (shapes {sorted({c['x'].shape for c in calls})})")
  candidates = None if given is None else [("given", None, {tokens: given})]
  if "sequence" in recipe:
    candidates = [("sequence", None, {tokens: np.arange(tokens)[:, None]})]
  if "hypothesis" in recipe:
    candidates = [(numbering, None, hypothesis)]
  if (extra or {}).get("_fps"):  # Cosmos: a video at the fps its pipeline passes, its frames at t * base_fps / fps
    candidates = [("fps_scaled", None, {tokens: raster_grid(dims) * np.array(
        [recipe["base_fps"] / extra["_fps"], 1.0, 1.0])})]
  if "scale_keys" in recipe or "scale_key" in recipe:  # Allegro, Kandinsky 6 SR: the grid over per-axis scales
    raster = raster_grid(dims)
    candidates = [("scaled", None, {tokens: raster / np.array(_scales(recipe, {**defaults, **kw}))})]
  try:
    if "ltx" in recipe:  # LTX: its rotation over the whole attention width, checked against its own formula
      got = _ltx_fit(rotated, dims, {**defaults, **kw}, recipe["ltx"])
    else:
      got = fit_grid(rotated, dims, candidates)
  except Refused as e:
    if given is not None:
      raise
    if CROPS & set(recipe) and not (extra or {}).get("_plain"):
      got = _cropped(name, seed, extra, rotated, dims, {**defaults, **kw}, e)
    elif len(dims) == 3 and dims[0] == 2:
      got = _two_frames(name, seed, extra, rotated, dims, e)
    else:
      got = _stretched(name, seed, extra, rotated, dims, {**defaults, **kw}, e)
  axes = got["axes"]
  caption = [c for c in calls if all(c is not r for r in rotated) and _token_count(c["x"].shape, (T_TXT,))]
  other = [c for c in calls if all(c is not r for r in rotated + caption)]
  if other:  # a rotation over tokens this probe cannot place (neither the latent's nor the caption's)
    raise Refused(f"it also rotates {other[0]['x'].shape} in {other[0]['function']}, tokens that are neither its "
                  f"latent's ({tokens}) nor its caption's ({T_TXT}): not observed")
  init_args = {**defaults, **recipe.get("kw", {}), **(extra or {})}  # the init arguments this probe ran with
  axes_key = next((k for k in init_args if isinstance(init_args[k], (list, tuple)) and list(init_args[k]) == axes),
                  None)
  if axes_key is None and not got.get("section_layout"):  # PRX: an axes key left None, which the class fills in
    # (observe_grid confirms it is followed; an interleaved M-RoPE's split is its sections key's, found there)
    axes_key = next((k for k in defaults if defaults[k] is None and "axes" in k), None)
  if got["numbering"] == "ltx":  # LTX: the spec is for its whole attention width, read by its own rule
    family_ltx = {"base": list(recipe["ltx"]["base"]), "scale_default": list(recipe["ltx"]["scale"]),
                  "heads_key": "num_attention_heads", "heads_default": defaults["num_attention_heads"]}
  family = {"grid": got["numbering"], **({"joint": got["joint"]} if got["joint"] else {}), "axes_default": axes,
            "layout": got["layout"],
            "order": "given" if given is not None else {1: "sequence", 2: "grid_hw"}.get(len(axes), "grid_thw"),
            "frequencies": got["frequencies"],
            "tables": got["tables"], "theta": got["theta"], "head_dim_default": int(rotated[0]["x"].shape[-1]),
            "patch": list(patch),
            "head_dim_key": next((k for k in ("attention_head_dim", "head_dim") if isinstance(defaults.get(k), int)),
                                 None)}
  if got["numbering"].startswith("cropped"):  # CogVideoX 1.0: the base grid is (these keys) / patch_size, or
    family["crop_keys"] = got["crop_keys"]  # HunyuanDiT: a size its pipeline fixes
    for key in ("crop_base_pixels", "crop_base_latent"):
      if got["crop_keys"] is None and key in recipe:
        family[key] = list(recipe[key]) if isinstance(recipe[key], tuple) else recipe[key]
  if got.get("rotary_dim", family["head_dim_default"]) < family["head_dim_default"]:  # Stable Audio: first R rotate
    family["rotary_dim"] = got["rotary_dim"]
  if got.get("section_layout"):  # Ideogram 4: interleaved M-RoPE
    family["section_layout"] = got["section_layout"]
  if got["numbering"] == "ltx":  # the defaults of the class's own width (32 heads of 64), not the probe's two heads
    family["ltx"] = family_ltx
    width = defaults["num_attention_heads"] * defaults["attention_head_dim"]
    family.update(head_dim_default=defaults["attention_head_dim"],
                  axes_default=[2 * n for n in ltx_layout(width)[1]])
    family["positions_guarded"] = {"patch_size": defaults["patch_size"], "patch_size_t": defaults["patch_size_t"]}
  if got.get("unseen"):  # HiDream: an axis at 0 for every token its forward numbers; its spectrum is not observed
    family["unseen_axes"] = got["unseen"]
  if "scale_keys" in recipe or "scale_key" in recipe:  # positions = the grid over these scales (observe_grid
    if "scale_key" in recipe:  # confirms them doubled): one key's (t, h, w) (Kandinsky 6 SR), or a key per axis
      family["scale_key"] = recipe["scale_key"]
    else:
      family["scale_keys"] = list(recipe["scale_keys"])
    family["scale_default"] = _scales(recipe, defaults)
  caption_part = None
  if caption and "caption_part" in recipe:  # Kandinsky 6: its text blocks rotate the caption by a 1-D RoPE of their
    # own (a part of its own), fitted at token i at i over the whole head
    caption_positions = np.arange(T_TXT)[:, None]
    own = fit_grid(caption, (T_TXT,), [("sequence", None, {T_TXT: caption_positions})])
    caption_part = {"grid": "sequence", "axes_default": own["axes"], "layout": own["layout"], "order": "sequence",
                    "frequencies": own["frequencies"], "tables": own["tables"], "theta": own["theta"],
                    "head_dim_default": int(caption[0]["x"].shape[-1]), "head_dim_key": None,
                    "axes_sum_key": recipe["caption_part"]["axes_sum_key"],
                    "axes_sum_default": list(init_args[recipe["caption_part"]["axes_sum_key"]]),
                    "max_abs_error": own["error"], "functions": sorted({c["function"] for c in caption})}
  elif caption:  # the caption rotated apart (QwenImage): by which numbering, under the spec fitted to the image
    family["caption"], caption_positions = fit_caption(caption, got)
  if axes_key:
    family["axes_key"] = axes_key
  elif family["head_dim_key"] is None:
    # Stable Audio 3: no head-dim key; its head is a width over a head count (the pair the probe shrank to one head)
    width = next(((w, h) for w, h in HEAD_PAIRS if w in kw and h in kw and isinstance(defaults.get(w), int) and
                  isinstance(defaults.get(h), int) and kw[w] // kw[h] == family["head_dim_default"]), None)
    if width is None:
      raise Refused(f"its split of the head over the grid axes {axes} comes from no config key this probe can "
                    "confirm")
    family["head_dim_from"] = [width[0], width[1], defaults[width[0]], defaults[width[1]]]
  entry = {"status": "exact", "family": family, "functions": sorted({c["function"] for c in rotated}),
           "max_abs_error": got["error"]}
  if caption_part is not None:
    entry["caption_part"] = caption_part  # (observe_grid makes the entry's parts of it)
  first, positions = rotated[0], got["positions"]
  if "hypothesis" in recipe:  # the golden: a call over the whole sequence (Bria-Fibo 2's refiner's comes first)
    first = next(c for c in rotated if _token_count(c["x"].shape, sizes) == tokens)
    positions = hypothesis[tokens]
  m = _token_count(first["x"].shape, sizes)
  goldens = {"config": kw, "grid": got["grid"], "positions": positions, "dims": np.asarray(dims),
             "x": _to_bthd(first["x"], m), "out": _to_bthd(first["out"], m)}
  if "layout" in recipe:  # Bria-Fibo 2: the probe's sequence, for the test's position builder
    goldens["layout"] = np.asarray(recipe["layout"])
  if "runs" in recipe:  # QwenImage 2.1: its runs, a row each: (n, 0, 0) n text tokens, (0, h, w) an image block
    goldens["runs"] = np.array([(r, 0, 0) if isinstance(r, int) else (0, *r) for r in recipe["runs"]])
  if caption:
    goldens.update(caption_positions=caption_positions, caption_x=_to_bthd(caption[0]["x"], T_TXT),
                   caption_out=_to_bthd(caption[0]["out"], T_TXT))
  return entry, goldens


def _caption_part(name: str, seed: int, entry: dict, goldens: dict) -> tuple[dict, dict | None]:
  """Kandinsky 6: the entry of a class whose caption rotates by a 1-D RoPE of its own, as two parts: "video" (the
  latent's family, as observed) and "caption" (token i of the caption at i, over as many channels as its
  `axes_sum_key` adds up to: confirmed at the recipe's `check` widths, where the caption's rotated width must be the
  sum there). Goldens per part: `video/...` and `caption/...`."""
  recipe = RECIPES[name]["caption_part"]
  cap = entry.pop("caption_part")
  key = cap["axes_sum_key"]
  again = _observe_grid(name, seed, recipe["check"])[0].get("caption_part", {})
  want = [sum(recipe["check"][key])]
  if again.get("axes_default") != want or again.get("theta") != cap["theta"] or again.get("layout") != cap["layout"]:
    return {"status": "refused", "reason": f"its caption's 1-D RoPE was observed over {cap['axes_default']} channels "
                                           f"(theta {cap['theta']:g}) at its defaults, but with {recipe['check']} not "
                                           f"over sum({key}) = {want} ({again or 'no caption part'})"}, None
  video = {k: v for k, v in goldens.items() if k != "config" and not k.startswith("caption_")}
  caption = {k[len("caption_"):]: v for k, v in goldens.items() if k.startswith("caption_")}
  caption["dims"] = np.asarray([len(caption["positions"])])
  functions = sorted(set(entry["functions"]) | set(cap.pop("functions")))
  worst = max(entry["max_abs_error"], cap.pop("max_abs_error"))
  out = {"status": "exact", "parts": {"video": entry["family"], "caption": cap}, "functions": functions,
         "max_abs_error": worst}
  return out, {"config": goldens["config"], **{f"video/{k}": v for k, v in video.items()},
               **{f"caption/{k}": v for k, v in caption.items()}}
