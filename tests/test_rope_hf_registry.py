"""`rope.from_hf_config` across the whole RoPE registry (issue 39): every model type transformers
registers is exact, or refused naming why. Enumerated, not hand-picked.

The registry (roformer_jax/rope/hf_registry.json) and the goldens (tests/golden/hf_rope_registry.npz
and _configs.json) come from scripts/make_hf_rope_registry.py, which runs each model's own code:
a meta-device forward finds which layers call which apply function with which rotary module, and
that rotary module (rebuilt on the CPU, float64) and apply function rotate a random q at
positions up to 2^15. The test walks every entry:

- "exact": from_hf_config on the model's default config.json (every key the config class
  writes), on the bare {"model_type": ...} (every key from the registry's defaults) and on a
  changed config.json (rope_theta x 4, and YaRN where the model follows transformers' YaRN)
  gives a spec that rotates q as the model's own code does, per distinct rotation, and None for
  each layer that does not rotate;
- hand-written families (`hf_config.SUPPORTED_MODEL_TYPES`, checked against tests/golden/hf_rope_families)
  that the registry observed: also against these transformers-5.24 goldens;
- "refused" / "no_default_config": ValueError naming the recorded mechanism;
- "no_rope": ValueError saying so; "delegates": the sub-config's spec (Llava -> its Llama);
- a model_type the registry does not hold: ValueError, and family= reads it explicitly.
"""

import collections
import dataclasses
import functools
import json
import math
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roformer_jax import attention, rope
from roformer_jax.rope import hf_config
from roformer_jax.rope.frequencies import inv_freq_f64

GOLDEN = pathlib.Path(__file__).parent / "golden"
REGISTRY = hf_config.registry()
TYPES = REGISTRY["model_types"]
CONFIGS = json.loads((GOLDEN / "hf_rope_registry_configs.json").read_text())
ARRAYS = np.load(GOLDEN / "hf_rope_registry.npz")
HAND = set(hf_config.SUPPORTED_MODEL_TYPES)


def _check_rotation(mt, i, r, config, golden="q_out", part=""):
  """None when `config` read at the rotation's first layer rotates q as the golden does, else what differs."""
  pos = np.asarray(ARRAYS[f"{mt}/{i}/positions"])
  if pos.ndim == 3:  # [A, B, T] (M-RoPE) -> ours [B, T, A]
    pos = np.moveaxis(pos, 0, -1)
  q, want = np.asarray(ARRAYS[f"{mt}/{i}/q"]), np.asarray(ARRAYS[f"{mt}/{i}/{golden}"])
  try:
    spec = rope.from_hf_config(config, layer=r["layers"][0], part=r.get("part") if part == "" else part)
  except ValueError as e:
    return f"refused: {e}"
  if spec is None:
    return "None for a layer that rotates"
  if spec.rotate_value != bool(r.get("rotates_value")):  # observed: the apply rotates v too (CLVP), or not
    return f"rotate_value={spec.rotate_value}, but the model {'rotates' if r.get('rotates_value') else 'keeps'} v"
  got = np.array(spec.apply(q, pos.astype(np.int32)), np.float64)
  if r.get("output") == "half":  # DeepSeek-V3: interleaved pairs written out in half order
    h, (start, stop) = q.shape[-1], r["block"]
    order = rope.layout_permutation(h, rotary_dim=stop - start, src="interleaved", dst="half")
    first, last = spec.heads or (0, got.shape[-2])  # (only the heads that rotate are written out permuted: the DiT)
    got[..., first:last, :] = got[..., first:last, order]
  scale = max(1.0, float(np.abs(want).max()))
  err = float(np.abs(got - want).max())
  return None if err <= 1e-5 * scale + 1e-5 * float(np.abs(want).max()) else f"max error {err:.2e}"


def _outcome(config):
  try:
    return rope.from_hf_config(config)
  except ValueError as e:
    return str(e)


def _outcome_of(config, **kwargs):
  """The spec at each of the first layers (or the refusal): what a reading gives, to compare two readings."""
  out = []
  for layer in range(8):
    try:
      out.append(rope.from_hf_config(config, layer=layer, **kwargs))
    except ValueError as e:
      out.append(str(e).replace(repr(layer), "L"))
  return out


def test_the_registry_covers_every_model_type_with_its_versions():
  assert REGISTRY["versions"]["transformers"] == "5.24.0"
  counts = collections.Counter(e["status"] for e in TYPES.values())
  assert set(counts) <= {"exact", "refused", "no_rope", "delegates", "no_default_config"}, counts
  assert len(TYPES) > 800 and counts["exact"] > 100, counts
  perturbed = [k for k in CONFIGS if k.endswith("/perturbed")]
  assert len(perturbed) > 100, len(perturbed)
  for mt, e in TYPES.items():
    assert (e["status"] in ("refused", "no_default_config")) == bool(e.get("reason")), mt


def _pixel_positions(numbering, grid):
  """rope.grid_positions for the registry's numbering of a pixel tower's tokens: (row, column) or (column, row)
  of each patch, from 0 or 1, or DINOv3's centred coordinates; `extra` tokens at 0 first or last."""
  extra = numbering["extra"]
  return rope.grid_positions(*grid, axes=numbering["order"], start=numbering["start"], cls=numbering["where"] if extra
                             else None, cls_tokens=max(extra, 1),
                             normalize="center" if numbering["scale"] == "centre_2pi" else None)


def _rotation_error(mt, spec, x, want, positions):
  got = np.asarray(spec.apply(x.astype(np.float32), positions), np.float64)
  err = float(np.abs(got - want).max())
  return None if err <= 2e-6 * max(1.0, float(np.abs(want).max())) else f"max error {err:.2e}"


def _check_windows(mt, fam):
  """A windowed tower (SAM 3): rope.sam3_positions of each kind of layer must be the positions the fit found, and
  the one spec must rotate a window's recorded q and the whole image's as the model's own applies did, at every
  layer; a wrong scale of the global positions (1 for window / grid) must not."""
  win = fam["windows"]
  assert win["global_numbering"] == {**fam["numbering"], "times": "window/columns"}, win  # what sam3_positions gives
  assert fam["numbering"] == {"extra": 0, "order": "wh", "scale": "integer", "start": 0, "where": "first"}, fam
  grid = tuple(int(n) for n in ARRAYS[f"{mt}/pixel/grid"])
  window = tuple(int(n) for n in ARRAYS[f"{mt}/pixel/window_grid"])
  assert grid[0] == grid[1] and window == (win["window_default"],) * 2, (grid, window)
  kinds = {"global": ("", rope.sam3_positions(grid[0], window[0], kind="global")),
           "window": ("window_", rope.sam3_positions(grid[0], window[0], kind="window"))}
  for kind, (prefix, built) in kinds.items():
    if not np.allclose(built, ARRAYS[f"{mt}/pixel/{prefix}positions"], rtol=1e-6, atol=1e-6):
      return f"rope.sam3_positions(kind={kind!r}) gives {built[:4].tolist()}..."
  for config in (CONFIGS[mt], {"model_type": mt}):
    specs = {rope.from_hf_config(config, layer=i) for i in range(win["num_hidden_layers"])}
    if len(specs) != 1:
      return f"{len(specs)} specs over its layers; observed: one"
    spec = specs.pop()
    for kind, (prefix, built) in kinds.items():
      x, want = np.asarray(ARRAYS[f"{mt}/pixel/{prefix}x"]), np.asarray(ARRAYS[f"{mt}/pixel/{prefix}out"])
      problem = _rotation_error(mt, spec, x, want, built)
      if problem:
        return f"{kind} layers: {problem}"
  x, want = np.asarray(ARRAYS[f"{mt}/pixel/x"]), np.asarray(ARRAYS[f"{mt}/pixel/out"])
  if _rotation_error(mt, spec, x, want, kinds["global"][1] * (grid[0] / window[0])) is None:
    return "the golden does not tell the global layers' scale from none"
  return None


def _check_memory(mt, fam, part):
  """A video tracker's memory attention (SAM 2 video, EdgeTAM video, SAM 3 tracker video), against the apply calls its
  own code made on the generator's probe (a non-square frame grid, 2 memory frames, 3 object pointers): the spec
  rotates the self-attention's q and the cross-attention's q at grid_positions(axes="wh") of the frame's grid and the
  cross-attention's keys at rope.sam2_memory_positions (the grid per frame, any unrotated tokens before it, the
  pointers unrotated last), which must be the positions the generator fitted; keys with the pointers (or EdgeTAM's
  1-D latents) rotated as the grid's first token must not match."""
  mem, g = fam["memory"], (lambda k: np.asarray(ARRAYS[f"{mt}/pixel/{k}"]))
  rows, cols = (int(n) for n in g("grid"))
  k_rows, k_cols = (int(n) for n in g("k_grid"))
  frames, pointers, latents = (int(n) for n in g("memory"))
  if fam["numbering"] != {"extra": 0, "order": "wh", "scale": "integer", "start": 0, "where": "first"}:
    return f"a memory attention numbered {fam['numbering']}, which sam2_memory_positions does not give"
  q_pos = rope.grid_positions(rows, cols, axes="wh")
  k_pos = rope.sam2_memory_positions(k_rows, k_cols, frames=frames, object_pointers=pointers,
                                     unrotated_per_frame=latents)
  if not np.array_equal(q_pos, g("positions")) or not np.array_equal(k_pos, g("k_positions")):
    return f"the builders give {q_pos[:3].tolist()} / {k_pos[-4:].tolist()}, the model rotated by others"
  if (mem["key_grid_key"] is None) != (latents == 0 and (k_rows, k_cols) == (rows, cols)):
    return f"key grid {(k_rows, k_cols)} with {latents} unrotated tokens per frame, against the entry's {mem}"
  for config in (CONFIGS[mt], {"model_type": mt}):
    spec = rope.from_hf_config(config, part=part, layer=mem["layers_default"] - 1)
    for name, x, want, positions in (("self-attention q", g("x"), g("out"), q_pos),
                                     ("cross-attention q", g("cross_x"), g("cross_out"), q_pos),
                                     ("memory keys", g("k_x"), g("k_out"), k_pos)):
      problem = _rotation_error(mt, spec, x, want, positions)
      if problem:
        return f"{name}: {problem}"
    for wrong in ((slice(len(k_pos) - pointers, None)), slice(0, latents or 1)):  # pointers (latents) rotated
      moved = k_pos.copy()
      moved[wrong] = (1, 0)
      if _rotation_error(mt, spec, g("k_x"), g("k_out"), moved) is None:
        return "the golden keys do not tell unrotated tokens from rotated ones"
  return None


def _check_queries(mt, fam):
  """A tower whose last layers put query tokens first (EoMT): rope.grid_positions with them among the tokens at 0 in
  front must be the positions its query layers rotated by, and the spec of such a layer must rotate their recorded q
  as its own apply did; the same q with the queries left out of the count (the patches' positions shifted) must not
  (the golden tells the layers apart)."""
  q = fam["queries"]
  scale = 2 * np.pi if fam["numbering"]["scale"] == "centre_2pi" else 1
  grid = tuple(int(n) for n in ARRAYS[f"{mt}/pixel/grid"])
  numbering = {**fam["numbering"], "extra": fam["numbering"]["extra"] + q["count_default"]}
  built = _pixel_positions(numbering, grid)
  if not np.allclose(built * scale, ARRAYS[f"{mt}/pixel/queries_positions"], rtol=1e-6, atol=1e-6):
    return f"rope.grid_positions with {q['count_default']} queries first gives {built[:4].tolist()}..."
  x, want = np.asarray(ARRAYS[f"{mt}/pixel/queries_x"]), np.asarray(ARRAYS[f"{mt}/pixel/queries_out"])
  last = q["num_hidden_layers"] - 1
  for config in (CONFIGS[mt], {"model_type": mt}):
    problem = _rotation_error(mt, rope.from_hf_config(config, layer=last), x, want, built)
    if problem:
      return f"a query layer: {problem}"
  uncounted = np.concatenate([_pixel_positions(fam["numbering"], grid), np.zeros((q["count_default"], 2))])
  if _rotation_error(mt, rope.from_hf_config(CONFIGS[mt], layer=last), x, want, uncounted) is None:
    return "the golden does not tell the query layers' positions from the others'"
  return None


def _check_class_angles(mt, fam):
  """A tower whose class token turns by learned angles of its own (MLCD): rope.grid_positions with the class token's
  own axis must be the positions the fit found, and the spec with rope.hf_frequencies of the model's own parameter
  (the golden's: the values its forward ran with) must rotate the recorded q as its apply did; with the class angles
  left out (0), not (the golden tells)."""
  numbering = fam["numbering"]
  grid = tuple(int(n) for n in ARRAYS[f"{mt}/pixel/grid"])
  built = rope.grid_positions(*grid, axes=numbering["order"], start=numbering["start"], cls="first", cls_axis=True)
  if not np.array_equal(built, ARRAYS[f"{mt}/pixel/positions"]):
    return f"rope.grid_positions(..., cls_axis=True) gives {built[:4].tolist()}..."
  x, want = np.asarray(ARRAYS[f"{mt}/pixel/x"]), np.asarray(ARRAYS[f"{mt}/pixel/out"])
  parameter = {fam["class_angles"]["parameter"]: np.asarray(ARRAYS[f"{mt}/pixel/class_parameter"])}
  for config in (CONFIGS[mt], {"model_type": mt}):
    spec = rope.from_hf_config(config)
    freqs = rope.hf_frequencies(config, parameter)
    got = np.asarray(spec.apply(x.astype(np.float32), built, frequencies=jnp.asarray(freqs)), np.float64)
    err = float(np.abs(got - want).max())
    if err > 2e-6 * max(1.0, float(np.abs(want).max())) * max(grid):
      return f"max error {err:.2e}"
  without = np.asarray(spec.apply(x.astype(np.float32), built, frequencies=jnp.asarray(freqs).at[-1].set(0)))
  if np.abs(without - want).max() < 1e-3:
    return "the golden does not tell the class token's angles from none"
  return None


def _lightglue_normalised(keypoints, height, width):
  """float64 NumPy transcription of LightGlue's normalize_keypoints (its modeling file): size = (width, height),
  (kp - size / 2) / (max(size) / 2)."""
  size = np.array([width, height], np.float64)
  return (np.asarray(keypoints, np.float64) - size / 2) / (size.max() / 2)


def _check_keypoints(mt, fam):
  """An image matcher's keypoints (LightGlue): rope.keypoint_positions of the golden's keypoints must be the positions
  its positional encoder took, and the spec with rope.hf_frequencies of the model's own parameter must rotate the
  recorded q as its apply did; a wrong normalisation (each side by its own half, or uncentred) or a zeroed parameter
  must not (the golden tells them apart)."""
  g = {k: np.asarray(ARRAYS[f"{mt}/pixel/{k}"]) for k in ("keypoints", "image_size", "positions", "parameter", "x",
                                                           "out")}
  height, width = (int(v) for v in g["image_size"])
  built = rope.keypoint_positions(g["keypoints"], height, width)
  if np.abs(built - g["positions"]).max() > 1e-12:
    return f"rope.keypoint_positions gives {built[0, :2].tolist()}..., it rotated by {g['positions'][0, :2].tolist()}"
  x, want = g["x"].astype(np.float32), g["out"]
  tol = 2e-6 * max(1.0, float(np.abs(want).max()))

  def err(config, positions, weight):
    spec = rope.from_hf_config(config)
    freqs = rope.hf_frequencies(config, {fam["parameter"]: weight})
    got = spec.apply(jnp.asarray(x), jnp.asarray(positions, jnp.float32), frequencies=jnp.asarray(freqs))
    return float(np.abs(np.asarray(got, np.float64) - want).max())

  for config in (CONFIGS[mt], {"model_type": mt}):
    e = err(config, built, g["parameter"])
    if e > tol:
      return f"max error {e:.2e}"
  size = np.array([width, height], np.float64)
  wrong = {"each side by its own half": (g["keypoints"] - size / 2) / (size / 2),
           "uncentred": g["keypoints"] / (size.max() / 2)}
  for name, positions in wrong.items():
    if err(CONFIGS[mt], positions, g["parameter"]) < 100 * tol:
      return f"the golden does not tell its normalisation from one {name}"
  if err(CONFIGS[mt], built, 0 * g["parameter"]) < 100 * tol:
    return "the golden does not tell its learned frequencies from none"
  return None


def _check_pixel(mt, fam, part=None):
  """None when from_hf_config of the tower's config rotates the recorded q as its own apply did, else what differs."""
  if fam.get("memory"):
    problem = _check_memory(mt, fam, part)
    if problem:
      return problem
  elif fam.get("windows"):
    problem = _check_windows(mt, fam)
    if problem:
      return problem
  elif fam.get("class_angles"):
    problem = _check_class_angles(mt, fam)
    if problem:
      return problem
  else:
    x, want = np.asarray(ARRAYS[f"{mt}/pixel/x"]), np.asarray(ARRAYS[f"{mt}/pixel/out"])
    positions = np.asarray(ARRAYS[f"{mt}/pixel/positions"])
    grid = tuple(int(n) for n in ARRAYS[f"{mt}/pixel/grid"])
    built = _pixel_positions(fam["numbering"], grid)
    scale = 2 * np.pi if fam["numbering"]["scale"] == "centre_2pi" else 1  # the spec's frequencies hold the 2 pi
    if not np.allclose(built * scale, positions, rtol=1e-6, atol=1e-6):
      return f"rope.grid_positions gives {built[:4].tolist()}..., the tower rotated by {positions[:4].tolist()}..."
    for config in (CONFIGS[mt], {"model_type": mt}):
      problem = _rotation_error(mt, rope.from_hf_config(config), x, want, built)
      if problem:
        return problem

  if fam.get("queries"):
    problem = _check_queries(mt, fam)
    if problem:
      return problem

  def keyed(keys):  # a config of the tower with these keys, where its attention reads them (SAM 3: backbone_config)
    return {"model_type": mt, fam["sub"]: keys} if fam.get("sub") else {"model_type": mt, **keys}

  if fam.get("theta_key"):  # observed to follow it (x 4 in the generator)
    key = fam["theta_key"].split(".")[-1]
    config = keyed({"rope_parameters": {key: 4 * fam["theta_default"]}})
    if "." not in fam["theta_key"]:
      config = keyed({key: 4 * fam["theta_default"]})
    if rope.from_hf_config(config, part=part).theta != 4 * fam["theta_default"]:
      return f"does not follow {fam['theta_key']}"
    other = "rope_theta" if "." in fam["theta_key"] else "rope_parameters"  # the place it was not seen to read
    try:
      rope.from_hf_config(keyed({other: 4 * fam["theta_default"] if other == "rope_theta"
                                 else {"rope_theta": 4 * fam["theta_default"]}}), part=part)
      return f"reads a theta from {other}, where it was not observed to"
    except ValueError as e:
      if "observed this tower read its theta from" not in str(e):
        raise
  return None


def _check_half_tables(mt, part, fam):
  """A part whose attention lays rotate_half's tables over interleaved pairs (V-JEPA 2, `tables="half"`, not a
  rotation): from_hf_config of its default config and of the bare model_type, at rope.video_grid_positions over the
  grid its config keys give (its own numbering of two frames and part of a third; the predictor's sorted grid ids),
  must turn the recorded q as the model's own attention did; the same spec with tables="pairs" (a rotation) must
  not; and the head width must follow the keys the generator saw move it, with the segment widths it saw."""
  g = CONFIGS[mt][fam["grid_keys"][0]] // CONFIGS[mt][fam["grid_keys"][1]]
  if g != fam["grid_default"]:
    return f"its grid keys give {g}, the model numbered its tokens over {fam['grid_default']}"
  prefix = f"{mt}/{part}/half_tables"
  for how in ("", "_ids"):
    ids, x = np.asarray(ARRAYS[f"{prefix}/ids{how}"]), np.asarray(ARRAYS[f"{prefix}/x{how}"])
    want = np.asarray(ARRAYS[f"{prefix}/out{how}"], np.float64)
    built = rope.video_grid_positions(int(ids.max()) // (g * g) + 1, g, g)[ids]
    if not np.array_equal(built, ARRAYS[f"{prefix}/positions{how}"]):
      return f"rope.video_grid_positions gives {built[:3].tolist()}..., the model turned by other positions"
    for config in (CONFIGS[mt], {"model_type": mt}):
      spec = rope.from_hf_config(config, part=part)
      if spec.tables != "half":
        return f"tables={spec.tables!r}"
      err = float(np.abs(np.asarray(spec.apply(x, built), np.float64) - want).max())
      if err > 1e-5 * max(1.0, float(np.abs(want).max())):
        return f"max error {err:.2e} ({'given ids' if how else 'its own numbering'})"
    rotation = rope.RotaryConfig(**{**spec.changed(), "tables": "pairs"})
    if np.abs(np.asarray(rotation.apply(x, built), np.float64) - want).max() < 1e-3:
      return "the golden does not tell rotate_half's tables from a rotation"
  num, den = fam["head_dim_keys"]
  for head, width in fam["segment_widths_seen"].items():
    config = {"model_type": mt, num: int(head) * fam["head_dim_key_defaults"][den]}
    if rope.from_hf_config(config, part=part).rotary_dim != fam["segments"] * width:
      return f"does not follow {num} to a head of {head} channels ({fam['segments']} segments of {width})"
  try:
    rope.from_hf_config({"model_type": mt, "rope_theta": 2 * fam["theta"]}, part=part)
    return "reads a rope_theta its model does not read"
  except ValueError as e:
    if "reads no rope key" not in str(e):
      raise
  return None


def test_every_entry_is_exact_or_refused_by_name():
  wrong = {}
  for mt, entry in sorted(TYPES.items()):
    status = entry["status"]
    if status == "exact" and "pixel" in entry:  # a vision tower observed on an image (Pixtral)
      problem = _check_pixel(mt, entry["pixel"])
      if problem:
        wrong[mt] = problem
    elif status == "exact" and "keypoints" in entry:  # an image matcher's keypoints (LightGlue)
      problem = _check_keypoints(mt, entry["keypoints"])
      if problem:
        wrong[mt] = problem
    elif status == "exact" and "parts" in entry and "rotations" not in entry:  # parts read one at a time (SAM 3
      # tracker video: its memory attention, observed alone, and its vision tower, its vision_config's type)
      for part, fam in entry["parts"].items():
        if "pixel" in fam:
          problem = _check_pixel(mt, fam["pixel"], part)
        elif "half_tables" in fam:  # V-JEPA 2's encoder and predictor: rotate_half's tables over interleaved pairs
          problem = _check_half_tables(mt, part, fam["half_tables"])
        else:
          sub = {**CONFIGS[mt][fam["sub"]], "model_type": fam["delegates"]}
          got = [_outcome_of(cfg, part=part) for cfg in (CONFIGS[mt], {"model_type": mt})]
          problem = None if got == [_outcome_of(sub)] * 2 else f"does not read its {fam['sub']} as {fam['delegates']}"
        if problem:
          wrong[f"{mt} part {part}"] = problem
      if "pass part= one of" not in str(_outcome(CONFIGS[mt])):
        wrong[mt] = "reads a model whose parts rotate differently without part="
    elif status == "exact" and "observed_via" in entry:  # a sub-config type observed inside its composite
      parent, key, part = entry["observed_via"]
      sub = dict(CONFIGS[parent][key])
      for i, r in enumerate(TYPES[parent]["rotations"]):
        if r.get("part") == part:
          for name, cfg in (("its composite's", sub), ("bare", {"model_type": mt})):
            problem = _check_rotation(parent, i, r, cfg, part=None)
            if problem:
              wrong[f"{mt} ({name} {key} of {parent}), rotation {i}"] = problem
    elif status == "exact" or (mt in HAND and mt in CONFIGS):
      config = CONFIGS[mt]
      for i, r in enumerate(entry["rotations"]):
        bare = {"model_type": mt, **entry.get("observed_at", {})}  # GLM-4.1V: the key its default config lacks
        cases = [("default config", config, "q_out"), ("bare model_type", bare, "q_out")]
        if f"{mt}/{i}/perturbed" in CONFIGS:  # rope_theta x 4 (and YaRN where the class follows it)
          cases.append(("changed config", CONFIGS[f"{mt}/{i}/perturbed"], "q_out_perturbed"))
        for name, cfg, golden in cases:
          problem = _check_rotation(mt, i, r, cfg, golden)
          if problem:
            wrong[f"{mt} rotation {i} ({name}, layer {r['layers'][0]})"] = problem
      for part in sorted({r.get("part") for r in entry["rotations"]}, key=str):
        rotating = {layer for r in entry["rotations"] if r.get("part") == part for layer in r["layers"]}
        fam = entry["parts"][part] if part else entry.get("family", {})
        n = fam.get("num_hidden_layers") or max(rotating) + 1
        for layer in sorted(set(range(n)) - rotating)[:2]:
          if rope.from_hf_config(config, layer=layer, part=part) is not None:
            wrong[f"{mt} layer {layer}"] = "a spec for a layer that does not rotate"
      if "observed_at" in entry and "the config sets no" not in str(_outcome({"model_type": mt})):
        wrong[mt] = "reads a config without the keys its default config lacks"
      if "parts" in entry and "pass part= one of" not in str(_outcome(config)):
        wrong[mt] = "reads a model whose parts rotate differently without part="
    elif status == "delegates":
      key, sub_type = next(iter(entry["sub_configs"].items()))
      if _outcome({"model_type": mt}) != _outcome({"model_type": sub_type}):
        wrong[mt] = f"does not read its {key} ({sub_type})"
    elif mt not in HAND:
      want = "applies no RoPE" if status == "no_rope" else re.escape(entry["reason"][:60])
      try:
        rope.from_hf_config({"model_type": mt})
        wrong[mt] = f"{status} but returned a spec"
      except ValueError as e:
        if not re.search(want, str(e)):
          wrong[mt] = f"error does not say {want!r}: {e}"
  assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())


def test_sam3_windowed_tower_reads_its_layer_keys_and_refuses_what_was_not_observed():
  """SAM 3's vision tower: one spec for every layer (the positions differ by kind: rope.sam3_positions); its vision
  model reads its backbone_config; a non-square image, a layer outside the model or a bad window is refused."""
  win = TYPES["sam3_vit_model"]["pixel"]["windows"]
  assert (win["window_key"], win["global_key"]) == ("window_size", "global_attn_indexes"), win
  spec = rope.from_hf_config({"model_type": "sam3_vit_model"}, layer=win["global_default"][0])
  assert spec == rope.from_hf_config({"model_type": "sam3_vision_model", "backbone_config": {}}, layer=0)
  assert rope.from_hf_config({"model_type": "sam3_vision_model", "backbone_config": {"rope_parameters": {
      "rope_type": "axial", "rope_theta": 40000.0}}}).theta == 40000.0
  for bad, match in (({"image_size": [1008, 840]}, "not square"), ({"window_size": 0}, "window side"),
                     ({"global_attn_indexes": [40]}, "must list layers")):
    with pytest.raises(ValueError, match=match):
      rope.from_hf_config({"model_type": "sam3_vit_model", **bad})
  with pytest.raises(ValueError, match="is not a layer"):
    rope.from_hf_config({"model_type": "sam3_vit_model"}, layer=32)
  assert rope.sam3_positions(72, 24, kind="global")[1].tolist() == [np.float32(1 / 3), 0.0]
  assert rope.sam3_positions(72, 24, kind="window")[25].tolist() == [1.0, 1.0]
  with pytest.raises(ValueError, match="kind="):
    rope.sam3_positions(72, 24, kind="local")


def test_sam2_memory_positions_repeat_the_grid_per_frame_and_leave_the_rest_unrotated():
  """rope.sam2_memory_positions against positions written out by hand: a 2 x 3 key grid (column, row), 2 frames, one
  unrotated token before each frame's grid (EdgeTAM's 1-D latents), 2 unrotated pointers last."""
  grid = [[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 1]]
  want = ([[0, 0]] + grid) * 2 + [[0, 0]] * 2
  got = rope.sam2_memory_positions(2, 3, frames=2, object_pointers=2, unrotated_per_frame=1)
  assert got.dtype == np.int32 and got.tolist() == want
  assert rope.sam2_memory_positions(2, 3, frames=1).tolist() == grid == rope.grid_positions(2, 3, axes="wh").tolist()
  for bad in ({"frames": 0}, {"frames": 1, "object_pointers": -1}, {"frames": 1, "unrotated_per_frame": 1.5}):
    with pytest.raises(ValueError):
      rope.sam2_memory_positions(2, 3, **bad)


def test_video_trackers_read_their_memory_attention_keys():
  """SAM 2 video / EdgeTAM video / SAM 3 tracker video: the head dim is memory_attention_hidden_size //
  (downsample_rate * heads) (each key observed to move it), the grid keys must be [width, height], the layer one of
  memory_attention_num_layers; SAM 3 reads its vision tower (observed on an image and token ids) and SAM 3 tracker
  video its two parts by name."""
  base = rope.from_hf_config({"model_type": "sam2_video"})
  assert base.sections == (64, 64) and base.layout == "interleaved" and base.frequencies == "per_axis"
  for keys, sections in (({"memory_attention_num_attention_heads": 2}, (32, 32)),
                         ({"memory_attention_downsample_rate": 2}, (32, 32)),
                         ({"memory_attention_hidden_size": 512}, (128, 128))):
    assert rope.from_hf_config({"model_type": "edgetam_video", **keys}).sections == sections, keys
  for bad, match in (({"memory_attention_rope_feat_sizes": [64]}, r"\[width, height\]"),
                     ({"memory_attention_rope_k_sizes": [16, 0]}, r"\[width, height\]"),
                     ({"memory_attention_num_attention_heads": 3}, "multiple of")):
    with pytest.raises(ValueError, match=match):
      rope.from_hf_config({"model_type": "edgetam_video", **bad})
  with pytest.raises(ValueError, match="4-layer memory attention"):
    rope.from_hf_config({"model_type": "sam2_video"}, layer=4)
  assert rope.from_hf_config({"model_type": "sam2_video", "rope_parameters": {"rope_type": "axial",
                                                                               "rope_theta": 4e4}}).theta == 4e4
  assert TYPES["sam3"] == {"status": "delegates", "sub_configs": {"vision_config": "sam3_vision_model"},
                           "observed": TYPES["sam3"]["observed"]}
  assert rope.from_hf_config({"model_type": "sam3"}, layer=7) == \
      rope.from_hf_config({"model_type": "sam3_vision_model"}, layer=7)
  assert rope.from_hf_config({"model_type": "sam3_tracker_video"}, part="memory_attention") == base
  assert rope.from_hf_config({"model_type": "sam3_tracker_video"}, part="vision_config") == \
      rope.from_hf_config({"model_type": "sam3_vision_model"})


def test_eomt_query_layers_read_their_keys_and_refuse_what_was_not_observed():
  """EoMT-DINOv3: its last num_blocks layers put num_queries query tokens first, unrotated (at 0): one spec for every
  layer, the keys observed to say it; a count or a layer count it cannot have, or a layer outside, is refused."""
  q = TYPES["eomt_dinov3"]["pixel"]["queries"]
  assert (q["count_key"], q["count_default"], q["layers_key"], q["layers_default"]) == \
      ("num_queries", 200, "num_blocks", 4), q
  specs = {rope.from_hf_config({"model_type": "eomt_dinov3"}, layer=i) for i in range(q["num_hidden_layers"])}
  assert len(specs) == 1, specs
  for bad, match in (({"num_queries": -1}, "count of query tokens"), ({"num_blocks": 25}, "must count its last"),
                     ({"num_blocks": True}, "must count its last")):
    with pytest.raises(ValueError, match=match):
      rope.from_hf_config({"model_type": "eomt_dinov3", **bad})
  with pytest.raises(ValueError, match="is not a layer"):
    rope.from_hf_config({"model_type": "eomt_dinov3"}, layer=24)


def test_mlcd_class_token_angles_come_from_the_named_parameter_and_nothing_else():
  """MLCD: a learned spec over (row, column, class); rope.hf_frequencies builds its F from theta and the parameter the
  registry found holding the class token's angles, and refuses a missing, ambiguous or wrongly sized one, or a model
  with no such parameter."""
  fam = TYPES["mlcd_vision_model"]["pixel"]
  assert fam["class_angles"] == {"parameter": "class_pos_emb", "tokens": 1, "where": "first"}, fam
  config = {"model_type": "mlcd_vision_model", "hidden_size": 64, "num_attention_heads": 2,
            "rope_parameters": {"rope_type": "axial", "rope_theta": 100.0}}
  spec = rope.from_hf_config(config)
  assert spec.learned and len(spec.sections) == 3 and spec.layout == "half", spec
  angles = np.linspace(-3, 3, 16)
  freqs = rope.hf_frequencies(config, {"vision_model.class_pos_emb": angles[None]})
  row = 100.0 ** (-np.arange(8) / 8)  # per axis: 8 pairs of 16 channels, theta ** (-2j / 16)
  np.testing.assert_allclose(freqs, np.stack([np.r_[row, np.zeros(8)], np.r_[np.zeros(8), row], angles]), rtol=1e-6)
  positions = rope.grid_positions(2, 3, cls="first", cls_axis=True)
  assert positions[0].tolist() == [0, 0, 1] and positions[1:, 2].tolist() == [0] * 6, positions
  for bad, match in (({}, "hold none"), ({"a.class_pos_emb": angles, "b.class_pos_emb": angles}, "several"),
                     ({"class_pos_emb": angles[:8]}, "holds 8 values")):
    with pytest.raises(ValueError, match=match):
      rope.hf_frequencies(config, bad)
  with pytest.raises(ValueError, match="no learned class-token angles"):
    rope.hf_frequencies({"model_type": "pixtral"}, {"class_pos_emb": angles})
  with pytest.raises(ValueError, match="cls_axis"):
    rope.grid_positions(2, 3, cls_axis=True)


def test_lightglue_keypoints_turn_by_its_projector_weight_at_their_normalised_coordinates():
  """LightGlue: a learned spec over the keypoints' normalised (x, y); rope.keypoint_positions is its
  normalize_keypoints (a float64 NumPy transcription of its code, non-square images, float32 as it computes);
  rope.hf_frequencies gives F = W^T of its projector weight [R/2, 2] and refuses a missing, ambiguous or misshapen
  one; the head dim follows descriptor_dim // num_attention_heads."""
  fam = TYPES["lightglue"]["keypoints"]
  assert fam["parameter"] == "positional_encoder.projector.weight" and fam["layout"] == "interleaved", fam
  assert "positional_encoder" in fam["encoder_input"], fam
  rng = np.random.default_rng(0)
  for height, width in ((70, 84), (480, 640), (641, 480), (1, 1)):
    kp = rng.uniform(0, 1, (2, 7, 2)) * [width, height]
    np.testing.assert_allclose(rope.keypoint_positions(kp, height, width), _lightglue_normalised(kp, height, width),
                               rtol=0, atol=1e-15)
    got32 = rope.keypoint_positions(kp.astype(np.float32), height, width)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, _lightglue_normalised(kp, height, width), rtol=0, atol=1e-6)
  assert np.abs(rope.keypoint_positions([[[640.0, 240.0]]], 480, 640) - [[[1.0, 0.0]]]).max() == 0
  for bad in (np.zeros((3, 3)), np.zeros(2)):
    with pytest.raises(ValueError, match="keypoints must be"):
      rope.keypoint_positions(bad, 4, 4)
  with pytest.raises(ValueError, match="height"):
    rope.keypoint_positions(np.zeros((1, 2)), 0, 4)
  config = {"model_type": "lightglue", "descriptor_dim": 64, "num_attention_heads": 2}
  spec = rope.from_hf_config(config)
  assert spec.learned and len(spec.sections) == 2 and sum(spec.sections) == 16 and spec.layout == "interleaved"
  weight = rng.normal(size=(16, 2))
  freqs = rope.hf_frequencies(config, {"matcher.positional_encoder.projector.weight": weight})
  np.testing.assert_allclose(freqs, weight.T, rtol=1e-6)
  # float64 NumPy: pair k (channels 2k, 2k + 1) turns by x W[k, 0] + y W[k, 1]
  pos = rope.keypoint_positions(rng.uniform(0, 100, (1, 5, 2)), 60, 100)
  q = rng.normal(size=(1, 5, 2, 32))
  ang = (pos[0] @ weight.T)[:, None]
  want = q.copy()
  want[..., 0::2] = q[..., 0::2] * np.cos(ang) - q[..., 1::2] * np.sin(ang)
  want[..., 1::2] = q[..., 1::2] * np.cos(ang) + q[..., 0::2] * np.sin(ang)
  got = spec.apply(jnp.asarray(q, jnp.float32), jnp.asarray(pos, jnp.float32), frequencies=jnp.asarray(freqs))
  np.testing.assert_allclose(np.asarray(got), want, atol=2e-5)
  name = "positional_encoder.projector.weight"
  for bad, match in (({}, "hold none"), ({"a." + name: weight, "b." + name: weight}, "several"),
                     ({name: weight.T}, r"shape \(2, 16\)"), ({name: weight[:15]}, r"shape \(15, 2\)"),
                     ({name: np.full((16, 2), np.nan)}, "finite")):
    with pytest.raises(ValueError, match=match):
      rope.hf_frequencies(config, bad)
  with pytest.raises(ValueError, match=r"shape \(32, 2\)"):  # the default head dim (256 / 4) wants 32 pairs
    rope.hf_frequencies({"model_type": "lightglue"}, {name: weight})
  with pytest.raises(ValueError, match="even head dim"):
    rope.from_hf_config({"model_type": "lightglue", "descriptor_dim": 60, "num_attention_heads": 4})


def test_an_unknown_model_type_is_refused_and_family_reads_it_explicitly():
  config = {"model_type": "my_model", "rope_theta": 5e5, "hidden_size": 64, "num_attention_heads": 4}
  with pytest.raises(ValueError, match=r"'my_model' is not in the RoPE registry \(made from .*transformers 5\.24"):
    rope.from_hf_config(config)
  with pytest.raises(ValueError, match="family='llama'"):
    rope.from_hf_config({**config, "model_type": None})
  assert rope.from_hf_config(config, family="llama") == rope.RotaryConfig(theta=5e5, layout="half")
  assert rope.from_hf_config(config, family="cohere") == rope.RotaryConfig(theta=5e5, layout="interleaved")
  with pytest.raises(ValueError, match="'qwen_2' is not in the RoPE registry.* Did you mean 'qwen2'"):
    rope.from_hf_config({"model_type": "qwen_2"})
  with pytest.raises(ValueError, match="family='my_family' is not a family"):
    rope.from_hf_config(config, family="my_family")
  assert {"llama", "cohere"} <= set(rope.hf_families())


def test_a_model_whose_parts_rotate_differently_is_read_one_part_at_a_time():
  """T5Gemma's encoder and decoder stacks read their own sub-configs; DeepSeek-V3.2's attention pairs its channels
  interleaved and its indexer half (observed per calling module): part= names which, and is never implied."""
  parts = {mt: sorted(e["parts"]) for mt, e in TYPES.items() if "parts" in e}
  assert parts["t5gemma"] == ["decoder", "encoder"] and parts["deepseek_v32"] == ["self_attn", "self_attn.indexer"]
  config = CONFIGS["deepseek_v32"]
  with pytest.raises(ValueError, match=r"'deepseek_v32': its parts rotate differently.*no part.*"
                                       r"\['self_attn', 'self_attn.indexer'\]"):
    rope.from_hf_config(config)
  with pytest.raises(ValueError, match="part='indexer' is not one of them"):
    rope.from_hf_config(config, part="indexer")
  assert rope.from_hf_config(config, part="self_attn").layout == "interleaved"
  assert rope.from_hf_config(config, part="self_attn.indexer").layout == "half"
  with pytest.raises(ValueError, match="part='encoder': model_type 'llama' rotates alike"):
    rope.from_hf_config({"model_type": "llama"}, part="encoder")


def test_a_composite_whose_towers_rotate_differently_is_read_one_tower_at_a_time():
  """Towers of one composite that rotate each their own way (PE-Audio's audio encoder and its ModernBERT text tower,
  Nemotron 3.5 Transcribe's ASR encoder and its diarization model's audio encoder, CLVP's two encoders): a part per
  sub-config, named by its (dotted) key, each read from that sub-config of the file."""
  for mt, parts in (("pe_audio", ["audio_config", "text_config"]), ("clvp", ["speech_config", "text_config"]),
                    ("voxtral_realtime", ["audio_config", "text_config"]),
                    ("nemotron3_5_transcribe_audio", ["asr_config", "diarization_config.audio_config"])):
    assert sorted(TYPES[mt]["parts"]) == parts
    with pytest.raises(ValueError, match="pass part= one of"):
      rope.from_hf_config({"model_type": mt})
  part = "diarization_config.audio_config"
  theta = rope.from_hf_config({"model_type": "nemotron3_5_transcribe_audio"}, part=part).theta
  cfg = {"model_type": "nemotron3_5_transcribe_audio",
         "diarization_config": {"audio_config": {"rope_parameters": {"rope_theta": 4 * theta, "rope_type": "default"}}}}
  assert rope.from_hf_config(cfg, part=part).theta == 4 * theta


def test_per_layer_config_is_followed_where_observed_and_refused_elsewhere():
  """transformers 5.24's per_layer_config ({layer: overrides}, any model): EmbeddingGemma 2 was observed to take its
  full-attention layers' head dim from it (else from global_head_dim, the key its config class builds it from);
  an override the model was not observed to follow is refused, one that cannot touch the rotation is not."""
  fam = TYPES["embedding_gemma2_text"]["family"]
  assert fam["per_layer_keys"] == ["head_dim"] and fam["type_head_dim"] == {"full_attention": ["global_head_dim", 512]}
  config = {"model_type": "embedding_gemma2_text", "partial_rotary_factor": 0.5}
  with pytest.raises(ValueError, match="per_layer_config sets rope_parameters=.* for layer 5; .*only per-layer head_dim"):
    rope.from_hf_config({**config, "per_layer_config": {"05": {"rope_parameters": {"rope_theta": 1.0}}}}, layer=5)
  with pytest.raises(ValueError, match="per_layer_config sets head_dim=64 for layer 0; .*no per-layer key"):
    rope.from_hf_config({"model_type": "llama", "per_layer_config": {"0": {"head_dim": 64}}})
  assert rope.from_hf_config({"model_type": "llama", "per_layer_config": {"0": {"num_key_value_heads": 2}}}) == \
      rope.from_hf_config({"model_type": "llama"})
  with pytest.raises(ValueError, match=r"per_layer_config\['x'\]"):
    rope.from_hf_config({"model_type": "llama", "per_layer_config": {"x": {}}})


def test_legacy_layer_type_names_read_as_transformers_renames_them():
  """transformers renames "attention" to "full_attention" (and "mamba" to "linear_attention") in every config it
  loads; a config.json with the old names reads as the new ones, not as layers of an unknown type."""
  assert TYPES and hf_config.registry()["legacy_layer_types"]["attention"] == "full_attention"
  new = dict(CONFIGS["qwen3_next"])
  old = {**new, "layer_types": ["attention" if t == "full_attention" else t for t in new["layer_types"]]}
  layer = new["layer_types"].index("full_attention")
  assert old["layer_types"] != new["layer_types"]
  assert rope.from_hf_config(old, layer=layer) == rope.from_hf_config(new, layer=layer) is not None


def test_proportional_rope_reads_its_factor_from_the_rope_parameters():
  """transformers' proportional init (Gemma 4's full layers; any model's rotary class that takes ROPE_INIT_FUNCTIONS,
  Llama's included, observed) reads partial_rotary_factor from the rope parameters, default 1, even in a model whose
  default RoPE ignores the key: the reading follows it there and only there."""
  assert "proportional" in TYPES["llama"]["family"]["scalings"]
  spec = rope.from_hf_config({"model_type": "llama", "partial_rotary_factor": 0.5,
                              "rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4,
                                                  "partial_rotary_factor": 0.25}})
  assert spec is not None and spec.scaling_dict["partial_rotary_factor"] == 0.25
  spec = rope.from_hf_config({"model_type": "llama", "partial_rotary_factor": 0.5,
                              "rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4}})
  assert spec is not None and spec.scaling_dict["partial_rotary_factor"] == 1.0


def test_a_config_mrope_section_lands_on_the_axes_the_model_gives_it():
  """Ernie 4.5-VL's mrope_section lists (h, w, t) while its positions are (t, h, w): the generator rebuilt its rotary
  module with moved sections and saw the last entry turn the first axis (mrope_key_order). Its checkpoints' own
  [22, 22, 20] reads as the observed default (20, 22, 22); read in list order it would be refused (h != w)."""
  assert TYPES["ernie4_5_vl_moe"]["family"]["mrope_key_order"] == [2, 0, 1]
  default = rope.from_hf_config({"model_type": "ernie4_5_vl_moe"})
  given = {"rope_type": "default", "rope_theta": 5e5, "mrope_section": [22, 22, 20]}
  spec = rope.from_hf_config({"model_type": "ernie4_5_vl_moe", "text_config": {"rope_parameters": given}})
  assert spec == default and spec.sections == (20, 22, 22) and spec.section_layout == "videorope"
  moved = rope.from_hf_config({"model_type": "ernie4_5_vl_moe", "text_config": {
      "rope_parameters": {**given, "mrope_section": [21, 21, 22]}}})
  assert moved.sections == (22, 21, 21)


def test_a_config_that_rotates_v_reads_as_a_spec_that_rotates_v():
  """RoFormer's rotary_value turns v too, by the key positions: the spec's rotate_value, which the attention honours
  as its own rotary_value=True (tests/test_hf.py checks that against HF RoFormer); without the key v stays."""
  assert not rope.from_hf_config({"model_type": "roformer", "rotary_value": False}).rotate_value
  spec = rope.from_hf_config({"model_type": "roformer", "rotary_value": True})
  assert spec.rotate_value and spec.layout == "interleaved"
  q, k, v = (jax.random.normal(jax.random.key(i), (1, 5, 2, 64)) for i in range(3))
  pos = jnp.arange(5)[None] * 7
  plain = dataclasses.replace(spec, rotate_value=False)
  np.testing.assert_array_equal(
      attention.dot_product_attention(q, k, v, q_positions=pos, k_positions=pos, rotary=spec),
      attention.dot_product_attention(q, k, v, q_positions=pos, k_positions=pos, rotary=plain, rotary_value=True))


def test_a_model_observed_to_rotate_v_reads_as_a_spec_that_rotates_v():
  """CLVP's apply rotates q, k and v on every call (the registry observed three tensors of q's layout rotated alike):
  the spec's rotate_value, in each of its encoders (parts); its class reads no rope key (theta 10000 and a width of
  max(projection_dim // (2 * heads), 32) in its code), so a config that sets one, or changes those keys, is refused.
  The golden walk above checks each entry's q and that its spec rotates v exactly where the model does."""
  assert TYPES["clvp_encoder"]["family"]["rotates_value"]
  spec = rope.from_hf_config({"model_type": "clvp_encoder"})
  assert spec.rotate_value and spec.rotary_dim == 32 and spec.theta == 10000.0 and spec.layout == "half"
  for part in ("text_config", "speech_config"):
    assert rope.from_hf_config({"model_type": "clvp"}, part=part) == spec
  with pytest.raises(ValueError, match="reads no rope key"):
    rope.from_hf_config({"model_type": "clvp_encoder", "rope_theta": 5e5})
  with pytest.raises(ValueError, match="projection_dim"):
    rope.from_hf_config({"model_type": "clvp_encoder", "projection_dim": 2048})


def test_ntk_alpha_reads_where_the_registry_observed_it():
  """HunYuan's checkpoints write NTK-alpha as rope_type "dynamic" with a fixed alpha, which its class computes as
  theta * alpha ** (R / (R - 2)) whatever the length (observed by the generator against an independent NumPy
  transcription): read as the spec's "ntk_alpha" scaling, checked here against that formula in float64. A model not
  observed to follow it reads "dynamic" as its class does (Llama: transformers' dynamic ignores alpha)."""
  cfg = {"model_type": "hunyuan_v1_dense", "hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128,
         "max_position_embeddings": 32768, "rope_parameters": {"rope_type": "dynamic", "alpha": 1000.0,
                                                                "factor": 1.0, "rope_theta": 10000.0}}
  spec = rope.from_hf_config(cfg)
  assert spec.scaling_dict["rope_type"] == "ntk_alpha" and not spec.length_dependent
  base = 10000.0 * 1000.0 ** (128 / 126)
  want = base ** (-np.arange(0, 128, 2) / 128)
  np.testing.assert_allclose(inv_freq_f64(128, spec.theta, spec.scaling_dict, None)[0], want, rtol=1e-12)
  with pytest.raises(ValueError, match="head_dim"):  # observed at the head_dim its checkpoints set
    rope.from_hf_config({k: v for k, v in cfg.items() if k != "head_dim"})
  assert rope.from_hf_config({**cfg, "model_type": "llama"}).scaling_dict["rope_type"] == "dynamic"


def test_keys_the_model_ignores_are_ignored():
  """transformers' Llama rotates every channel whatever partial_rotary_factor says (observed in the
  registry: its rotary class does not follow the key); GPT-NeoX follows it."""
  assert TYPES["llama"]["rotations"][0]["follows"]["partial_rotary_factor"] is False
  spec = rope.from_hf_config({"model_type": "llama", "head_dim": 128, "partial_rotary_factor": 0.25})
  assert spec is not None and spec.rotary_dim is None
  neox = rope.from_hf_config({"model_type": "gpt_neox", "hidden_size": 512, "num_attention_heads": 4,
                              "rotary_pct": 0.5})
  assert neox is not None and neox.rotary_dim == 64


def test_the_registry_page_is_generated_from_the_registry():
  """docs/hf_rope_registry.md (counts per mechanism, every refused type with its reason) is what
  scripts/render_hf_registry_doc.py makes from the registry now: regenerate it after a refresh."""
  import importlib.util

  path = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "render_hf_registry_doc.py"
  spec = importlib.util.spec_from_file_location("render_hf_registry_doc", path)
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  assert module.PAGE.read_text() == module.render(), "run .venv/bin/python scripts/render_hf_registry_doc.py"


DIFFUSERS_CONFIGS = json.loads((GOLDEN / "diffusers_rope_registry_configs.json").read_text())
DIFFUSERS_ARRAYS = np.load(GOLDEN / "diffusers_rope_registry.npz")


def _ltx2_positions(name, part, n, cfg, fam, fps):
  """LTX-2's positions for a part's golden call of n tokens, by the library's builders (its defaults otherwise); the
  SANA-WM refiner's (no parts: its video alone) at its window's absolute frames."""
  stream = fam["ltx2"]["stream"]
  if stream.startswith("video"):
    f, h, w = (int(v) for v in DIFFUSERS_ARRAYS[f"{name}/video/dims" if part else f"{name}/dims"])
    frames = [int(v) for v in DIFFUSERS_ARRAYS[f"{name}/frame_ids"]] if fam["ltx2"].get("frame_ids") else None
    assert f * h * w == n
    if stream == "video_cross":
      return rope.ltx2_video_positions(f, h, w, fps=fps, time_only=True)
    width = math.prod(cfg.get(k, d) for k, d in zip(fam["ltx2"]["width_keys"], fam["ltx2"]["width_defaults"],
                                                     strict=True))
    return rope.ltx2_video_positions(f, h, w, fps=fps, attention_width=width, frame_ids=frames)
  return rope.ltx2_audio_positions(n)


def _check_ltx2(name, part, fam, g, read):
  """LTX-2: each part's golden call (its defaults, interleaved pairs) and the second setting's (rope_type "split",
  rope_theta x 4, other widths and head counts, fps 25), rotated by the spec its config reads, at the positions the
  library's builders give; its guarded keys refused."""
  cfg = DIFFUSERS_CONFIGS[name]
  at = f"{name}/video/" if part else f"{name}/"
  for prefix, config, fps in (("", cfg, float(DIFFUSERS_ARRAYS[at + "fps"])),
                              ("split_", {**cfg, **fam["ltx2"]["checked"]}, float(DIFFUSERS_ARRAYS[at + "split_fps"]))):
    x, out = g[prefix + "x"], g[prefix + "out"]
    positions = _ltx2_positions(name, part, x.shape[1], config, fam, fps)
    observed = g[prefix + "positions"]  # in LTX's axis order (t, h, w); the builder's: the spec's
    if fam["ltx2"]["stream"] == "video":
      observed = observed[:, rope.ltx_pair_layout(x.shape[-1])[2]]
    np.testing.assert_allclose(positions, observed, rtol=0, atol=1e-6, err_msg=f"{name} {part}")
    spec = read({"_class_name": name, **config})
    assert (spec.layout, spec.blocks > 1) == (("half", True) if prefix else ("interleaved", False)), (name, part)
    got = np.asarray(spec.apply(x[:, :, None].astype(np.float32), positions), np.float64)[:, :, 0]
    top = max(spec.frequencies)
    np.testing.assert_allclose(got, out, atol=2e-6 * max(1.0, float(np.abs(positions).max()) * top),
                               err_msg=f"{name} {part} {prefix}")
  default = read({"_class_name": name})  # its defaults: a width of 4096 (video) or 2048
  assert 2 * sum(default.sections) == fam["head_dim_default"] and default.theta == fam["theta_default"], part
  assert [2 * n for n in default.sections] == fam["axes_default"], part
  with pytest.raises(ValueError, match="attention_width= is required"):
    rope.ltx2_video_positions(1, 2, 2)
  with pytest.raises(ValueError, match="rope_type='rotate' is not one of"):
    read({"_class_name": name, "rope_type": "rotate"})
  for key, value in fam["guarded"].items():
    with pytest.raises(ValueError, match=f"sets {key}=.*not to follow {key}"):
      read({"_class_name": name, key: not value})
  for key, value in fam["positions_guarded"].items():
    with pytest.raises(ValueError, match=f"sets {key}=.*its pipeline then builds the rotary positions"):
      read({"_class_name": name, key: [2 * v for v in value] if isinstance(value, list) else 2 * value + 1})


def _check_diffusers_family(name, part, fam):
  """One observed family of a diffusers class (a part of it, where its streams rotate differently): its spec, read
  from its shrunk config.json and its defaults (with `part`), rotates that part's golden q as its forward did."""
  read = functools.partial(rope.from_hf_config, part=part)
  prefix = f"{name}/{part}/" if part else f"{name}/"
  g = {k[len(prefix):]: np.asarray(v) for k, v in DIFFUSERS_ARRAYS.items() if k.startswith(prefix)}
  assert g, f"{prefix}: no goldens"
  if fam.get("grid") == "ltx2":  # LTX-2: a stream (or its side of the cross-attentions) over its whole width
    _check_ltx2(name, part, fam, g, read)
    return
  if fam.get("grid") == "given":  # Krea 2: its pipeline builds the positions; the probe gave random ones
    positions = g["positions"]
  elif fam.get("grid") == "qwen_image21":  # QwenImage 2.1: its joint sequence's runs of text and image blocks
    positions = g["positions"]
    runs = [int(n) if n else (int(h), int(w)) for n, h, w in g["runs"]]
    np.testing.assert_array_equal(positions, rope.qwen_image21_positions(runs))
    with pytest.raises(ValueError, match="a text length .int. or an image's .height, width."):
      rope.qwen_image21_positions([2, (1, 2, 3)])
  elif fam.get("grid") == "bria_fibo2":  # Bria-Fibo 2: gist tokens from 1, the image and its contexts after
    positions = g["positions"]
    gist, most, h, w, ch, cw = (int(n) for n in g["layout"])
    np.testing.assert_array_equal(positions, rope.bria_fibo2_positions(h, w, gist, max_gist_tokens=most,
                                                                       contexts=[(ch, cw)]))
  elif fam.get("grid") == "wan_animate2":  # Wan-Animate 2: its reference stream at refer_offset_*, refer_stride
    positions = g["positions"]
    f, h, w = (int(n) for n in g["dims"])
    ref = fam["reference"]
    o_t, o_h, o_w = (o if o >= 0 else n for o, n in zip(
        (ref["refer_offset_t"], ref["refer_offset_h"], ref["refer_offset_w"]), (f, h, w), strict=True))
    built = rope.video_grid_positions(f, h, w, frame_ids=[o_t + ref["refer_stride"] * i for i in range(f)])
    np.testing.assert_array_equal(positions, built + np.array([0, o_h, o_w], np.int32))
    generation = rope.video_grid_positions(f, h, w)  # its generation stream: raster (t, h, w)
    np.testing.assert_array_equal(g["grid"], generation)
    spec = read({"_class_name": name, **DIFFUSERS_CONFIGS[name]})
    np.testing.assert_allclose(np.asarray(spec.apply(g["generation_x"].astype(np.float32), generation)),
                               g["generation_out"], atol=2e-6 * f * h * w, err_msg=name)
  elif fam.get("grid") == "mochi":  # Mochi: dense learned frequencies (its checkpoint's pos_frequencies)
    f, h, w = (int(n) for n in g["dims"])
    positions = g["positions"]
    np.testing.assert_allclose(rope.mochi_positions(f, h, w), positions, rtol=0, atol=1e-4)
    spec = read({"_class_name": name, **DIFFUSERS_CONFIGS[name]})
    assert spec.frequencies == "mixed" and len(spec.sections) == fam["learned"]["axes"], name
    freqs = jnp.asarray(g["frequencies"], jnp.float32)
    got = np.asarray(spec.apply(g["x"].astype(np.float32), rope.mochi_positions(f, h, w)[None], frequencies=freqs))
    np.testing.assert_allclose(got, g["out"], atol=2e-6 * float(np.abs(positions).max()), err_msg=name)
    init = spec.initial_frequencies(jnp.zeros(2, jnp.uint32), 2, fam["head_dim_default"])  # as its class: zeros
    assert init.shape == (3, 2, fam["head_dim_default"] // 2) and not np.asarray(init).any(), name
    with pytest.raises(ValueError, match="pass frequencies=F"):
      spec.apply(g["x"].astype(np.float32), rope.mochi_positions(f, h, w))
    with pytest.raises(ValueError, match="attention_head_dim=7 must be an even int"):
      read({"_class_name": name, "attention_head_dim": 7})
    return
  elif fam.get("grid") == "sequence":  # Stable Audio: its global token, then the latent, at 0, 1, ...
    positions = g["positions"]
    np.testing.assert_array_equal(positions[:, 0], np.arange(len(positions)))
  elif fam.get("grid"):  # Wan & co. number their latent grid themselves: (t, h, w) raster order
    grid, positions = g["grid"], g["positions"]  # the image's tokens; every token of the golden call
    sizes = [int(n) for n in np.ptp(grid, axis=0) + 1]
    if fam["grid"].startswith("after_text"):  # Lumina 2, ERNIE-Image: the image after a caption of grid[0, 0]
      start = int(fam["grid"] == "after_text_from_1")  # tokens; Z-Image: the caption from 1, the image after it
      text = int(grid[0, 0]) - start
      image_first = fam.get("joint") == "image_first"
      built = rope.lumina_positions(sizes[1], sizes[2], text, image_first=image_first, start=start)
      assert (rope.lumina_positions(sizes[1], sizes[2], text, start=start)[:text] ==
              np.stack([np.arange(text) + start, 0 * np.arange(text), 0 * np.arange(text)], -1)).all()
      image = built[:len(grid)] if image_first else built[-len(grid):]
      np.testing.assert_array_equal(positions, built if len(positions) == len(built) else image)
    elif fam["grid"] == "stretched":  # CogView 4: row i of n at i * rope_axes_dim[0] // n
      h, w = (int(n) for n in g["dims"][-2:])
      np.testing.assert_array_equal(positions, rope.video_grid_positions(
          1, h, w, stretch_to=fam["stretch_default"])[:, 1:])
    elif fam["grid"].startswith("cropped"):  # a crop of (sample_height, sample_width) // patch (CogVideoX 1.0),
      *f, h, w = (int(n) for n in g["dims"])  # or of HunyuanDiT's fixed 512 px // 8 // patch, (column, row)
      p = DIFFUSERS_CONFIGS[name].get("patch_size", fam["patch"][-1])
      base = ([DIFFUSERS_CONFIGS[name].get(k, d) // p for k, d in zip(fam["crop_keys"], fam["crop_default"],
                                                                        strict=True)]
              if fam["crop_keys"] else [b // p for b in fam["crop_base_latent"]] if "crop_base_latent" in fam
              else [fam["crop_base_pixels"] // 8 // p] * 2)  # EasyAnimate: 60 x 90 latent pixels its module fixes
      built = rope.video_grid_positions(*(f or [1]), h, w, crop_to=base)
      built = built[:, [2, 1]] if fam["grid"] == "cropped_wh" else built[:, 3 - len(g["dims"]):]
      np.testing.assert_allclose(positions, built, rtol=0, atol=2e-6 * float(np.abs(positions).max()))
    elif fam["grid"] == "scaled":  # Allegro, Kandinsky 6 SR: its grid over per-axis scales
      f, h, w = (int(n) for n in g["dims"])
      scale = (DIFFUSERS_CONFIGS[name].get(fam["scale_key"], fam["scale_default"]) if "scale_key" in fam else
               [DIFFUSERS_CONFIGS[name].get(k, d) for k, d in zip(fam["scale_keys"], fam["scale_default"], strict=True)])
      np.testing.assert_allclose(positions, rope.video_grid_positions(f, h, w, scale=scale), rtol=1e-6)
    elif fam["grid"] == "ltx":  # LTX: its coordinates over the whole attention width, in the spec's axis order
      f, h, w = (int(n) for n in g["dims"])
      cfg = DIFFUSERS_CONFIGS[name]
      width = cfg.get(fam["ltx"]["heads_key"], fam["ltx"]["heads_default"]) * cfg.get(fam["head_dim_key"],
                                                                                       fam["head_dim_default"])
      np.testing.assert_allclose(positions, rope.ltx_positions(f, h, w, attention_width=width), rtol=0, atol=1e-6)
    elif fam["grid"] == "frame_0":  # HiDream: the image at (0, row, column), its captions at Flux's zeros
      h, w = (int(n) for n in g["dims"][-2:])
      text = len(positions) - len(grid)
      ids = rope.flux_positions(h, w, text)  # text first
      built = np.concatenate([ids[text:], ids[:text]]) if fam.get("joint") == "image_first" else ids
      np.testing.assert_array_equal(positions, built)
    elif fam.get("two_frames_key"):  # ChronoEdit: two latent frames, the second at rope_temporal_skip_len - 1
      np.testing.assert_array_equal(positions, rope.video_grid_positions(
          2, sizes[1], sizes[2], frame_ids=(0, fam["two_frames_default"] - 1)))
    else:
      assert "joint" not in fam, f"{name}: a joint call over {fam['grid']} ids has no position builder yet"
      built = rope.video_grid_positions(*([1] * (3 - len(sizes)) + sizes), centred=fam["grid"] == "centred")
      np.testing.assert_array_equal(positions, built[:, 3 - len(sizes):])  # an image model: (row, column)
  else:  # the ids the forward was given: both streams in the observed order, or the image's alone
    both = np.concatenate([g["ids_txt"], g["ids_img"]] if fam["order"] == "text_first" else
                          [g["ids_img"], g["ids_txt"]])
    positions = both if len(g["positions"]) == len(both) else g["ids_img"]
    np.testing.assert_array_equal(g["positions"], positions)
  spec = read({"_class_name": name, **DIFFUSERS_CONFIGS[name]})
  floats = fam.get("grid", "").startswith("cropped") or fam.get("grid") in ("scaled", "ltx")  # float positions
  positions = positions.astype(np.float32) if floats else positions.astype(np.int32)
  got = np.asarray(spec.apply(g["x"].astype(np.float32), positions), np.float64)
  # the model's apply is float32: its angles off by float32's rounding of themselves (CogView 4's reach 128, LTX's
  # frequencies theta * pi / 2)
  top = max(spec.frequencies) if isinstance(spec.frequencies, tuple) else 1.0
  np.testing.assert_allclose(got, g["out"], atol=2e-6 * max(1.0, float(np.abs(positions).max()) * top),
                             err_msg=name)
  if "longrope" in fam:  # OmniGen: its long factors once max(position) + 1 passes the original length
    lr, cfg = fam["longrope"], DIFFUSERS_CONFIGS[name]
    long_positions = g["long_positions"].astype(np.int32)
    assert int(long_positions.max()) + 1 > cfg.get(lr["original_key"], lr["original_default"]), name
    got = np.asarray(spec.apply(g["long_x"].astype(np.float32), long_positions,
                                seq_len=int(long_positions.max()) + 1), np.float64)
    np.testing.assert_allclose(got, g["long_out"], atol=2e-6 * float(long_positions.max()), err_msg=name)
    with pytest.raises(ValueError, match=f"must give {lr['key']}; the class default"):
      read({"_class_name": name})
    scaling = {lr["key"]: cfg[lr["key"]]}
    default = read({"_class_name": name, **scaling, "hidden_size": 3072, "num_attention_heads": 32})
    assert default.theta == fam["theta_default"] and dict(default.scaling)["max_position_embeddings"] == 131072
    with pytest.raises(ValueError, match="observed at 96 only"):
      read({"_class_name": name, **scaling, "hidden_size": 3072, "num_attention_heads": 16})
    with pytest.raises(ValueError, match="short_factor'. must be 48 positive numbers"):
      read({"_class_name": name, lr["key"]: {"short_factor": [1.0], "long_factor": [1.0]}})
    return
  if "ltx" in fam:  # its defaults: 32 heads of 64, one rotation over 2048 channels; nothing else is read
    default = read({"_class_name": name})
    assert default.sections == tuple(d // 2 for d in fam["axes_default"]) and default.rotary_dim is None, name
    with pytest.raises(ValueError, match="patch_size=2"):
      read({"_class_name": name, "patch_size": 2})
    return
  if fam.get("caption"):  # a caption rotated apart from the image (QwenImage), at the positions its builder gives
    text, axes_n = len(g["caption_positions"]), g["grid"].shape[1]
    start = {"after_grid": g["grid"].max() + 1, "after_rows_columns": g["grid"][:, -2:].max() + 1}
    built = (rope.lumina_positions(1, 1, text, start=int(fam["caption"] == "first_axis_from_1"))[:text, :axes_n]
             if fam["caption"].startswith("first_axis") else  # (LongCat-Audio: one axis, token i at i)
             rope.caption_positions(text, start=start[fam["caption"]], axes=axes_n))
    np.testing.assert_array_equal(g["caption_positions"], built)
    got = np.asarray(spec.apply(g["caption_x"].astype(np.float32), built), np.float64)
    np.testing.assert_allclose(got, g["caption_out"], atol=2e-6, err_msg=name)
  axes = fam["axes_default"]
  required = {k: axes for k in fam.get("required", {})}  # HiDream: no class default that runs
  for key in required:
    with pytest.raises(ValueError, match=f"must give {key}; the class default"):
      read({"_class_name": name})
  default = read({"_class_name": name, **required})  # ConfigMixin's defaults: the class's own
  assert default.sections == tuple(d // 2 for d in axes), name
  if "fps_base" in fam:  # Cosmos: a video at the fps its pipeline passes, its frames at t * 24 / fps
    f, h, w = (int(n) for n in g["dims"])
    built = rope.video_grid_positions(f, h, w, scale=(float(g["fps"]) / fam["fps_base"], 1.0, 1.0))
    np.testing.assert_allclose(built, g["fps_positions"], rtol=1e-6)
    got = np.asarray(spec.apply(g["fps_x"].astype(np.float32), built), np.float64)
    np.testing.assert_allclose(got, g["fps_out"], atol=2e-6 * max(1.0, float(built.max())), err_msg=name)
  if "ntk_key" in fam:  # Cosmos: each axis's spectrum of theta * rope_scale[a] ** (d_a / (d_a - 2)), explicit
    want = np.concatenate([theta ** (-np.arange(0, d, 2) / d) for d, theta in zip(axes, (
        fam["theta"] * s ** (d / (d - 2)) for d, s in zip(axes, fam["ntk_default"], strict=True)), strict=True)])
    np.testing.assert_allclose(default.frequencies, want, rtol=1e-12, err_msg=name)
    unscaled = read({"_class_name": name, fam["ntk_key"]: [1.0] * len(axes)})
    np.testing.assert_allclose(unscaled.frequencies, rope.pair_frequencies(
        sum(axes), fam["theta"], sections=default.sections, kind="per_axis"), rtol=1e-12, err_msg=name)
    with pytest.raises(ValueError, match=f"{fam['ntk_key']}=.*must be {len(axes)} positive numbers"):
      read({"_class_name": name, fam["ntk_key"]: [2.0, 1.0]})
  else:
    assert default.frequencies == fam["frequencies"], name
  assert default.theta == fam.get("theta", fam.get("theta_default")), name
  if "theta_key" in fam:  # observed to follow the key (x 4 in the generator)
    assert read({"_class_name": name, **required, fam["theta_key"]: 500.0}).theta == 500.0
  for key, value in fam.get("guarded", {}).items():  # a theta-like key it was not seen to follow
    assert read({"_class_name": name, **required, key: value}) is not None
    with pytest.raises(ValueError, match=f"sets {key}=.*not to follow {key}"):
      read({"_class_name": name, **required, key: 2 * value})
  if "axes_sum_key" in fam:  # Kandinsky 6's caption: one axis over its text blocks' head, sum(axes_dims)
    key = fam["axes_sum_key"]
    assert read({"_class_name": name, key: [16, 24, 24]}).sections == (32,), name
    with pytest.raises(ValueError, match=f"{key}=.*must be a list of positive even ints"):
      read({"_class_name": name, key: [16, 23, 24]})
  if fam.get("head_dim_from"):  # Stable Audio 3: embed_dim / num_heads, observed at its default only
    width, heads, w, n = fam["head_dim_from"]
    with pytest.raises(ValueError, match="observed at"):
      read({"_class_name": name, width: 2 * w, heads: n})
  if "rotary_dim_key" in fam:  # MiniMax Music 3: its first rotary_dim channels rotate, theta ** (-2j / R)
    half = read({"_class_name": name, fam["rotary_dim_key"]: fam["rotary_dim"] // 2})
    assert half.rotary_dim == fam["rotary_dim"] // 2 and half.sections == (fam["rotary_dim"] // 4,), name
  if "sections_key" in fam:  # Ideogram 4: mrope_section gives axes 1.. their pairs, axis 0 the rest
    s0, s1, s2 = fam["sections_default"]
    moved = read({"_class_name": name, fam["sections_key"]: [s0, s1 + 2, s2 - 2]})
    assert moved.sections == (sum(axes) // 2 - s1 - s2, s1 + 2, s2 - 2), name
    assert moved.section_layout == default.section_layout == fam["section_layout"], name
    if fam.get("sections_fallback"):  # Cosmos3-Omni: with rope_axes_dim absent, rope_scaling's mrope_section
      outer, inner = fam["sections_fallback"]
      assert read({"_class_name": name, outer: {inner: [s0, s1 + 2, s2 - 2]}}) == moved, name
      assert read({"_class_name": name, fam["sections_key"]: [s0, s1, s2],
                                  outer: {inner: [s0, s1 + 2, s2 - 2]}}) == default, name
      with pytest.raises(ValueError, match=f"{outer}=.*must be a dict"):
        read({"_class_name": name, outer: [1, 2]})
  for key in fam.get("positions_guarded", {}):  # CogVideoX 1.5: patch_size_t set, positions by another rule
    with pytest.raises(ValueError, match=f"sets {key}=2; its pipeline then builds the rotary positions"):
      read({"_class_name": name, key: 2})
  if fam.get("head_dim_key"):
    with pytest.raises(ValueError, match="adds up to|observed at (attention_)?head_dim"):
      read({"_class_name": name, **required, fam["head_dim_key"]: sum(axes) + 2})


def test_every_diffusers_class_is_exact_or_refused_by_name():
  """Every diffusers transformer class: an observed one (Flux's img_ids/txt_ids forward) rotates the
  golden q as its own forward's apply did, from its shrunk config.json and from its defaults;
  every other one raises naming its reason."""
  classes = REGISTRY["diffusers"]
  assert REGISTRY["versions"]["diffusers"] == "0.42.1" and len(classes) > 70
  assert {"FluxTransformer2DModel", "WanTransformer3DModel", "HunyuanVideoTransformer3DModel"} <= set(classes)
  exact = sorted(n for n, e in classes.items() if e["status"] == "exact")
  assert {"FluxTransformer2DModel", "Flux2Transformer2DModel",
          "ChromaTransformer2DModel"} <= set(exact) and set(exact) == set(DIFFUSERS_CONFIGS)
  for name, entry in classes.items():
    if entry["status"] != "exact":
      with pytest.raises(ValueError, match=f"diffusers class '{name}' is refused: " + re.escape(entry["reason"][:40])):
        rope.from_hf_config({"_class_name": name, "_diffusers_version": "0.42.1", "num_layers": 2})
      continue
    if "parts" in entry:  # its streams rotate differently (Kandinsky 6's video and caption): one part at a time
      with pytest.raises(ValueError, match=f"'{name}': its streams rotate differently.*no part is not one of them: "
                                           "pass part= one of"):
        rope.from_hf_config({"_class_name": name})
      with pytest.raises(ValueError, match="part='nope' is not one of them"):
        rope.from_hf_config({"_class_name": name}, part="nope")
      for part, fam in entry["parts"].items():
        _check_diffusers_family(name, part, fam)
      continue
    with pytest.raises(ValueError, match="rotates alike wherever it rotates; leave part out"):
      rope.from_hf_config({"_class_name": name}, part="video")
    _check_diffusers_family(name, None, entry["family"])
  with pytest.raises(ValueError, match="diffusers class 'MyTransformer' is not in the RoPE registry"):
    rope.from_hf_config({"_class_name": "MyTransformer"})


def test_flux_positions_are_the_ids_the_pipelines_build():
  """rope.flux_positions against FluxPipeline's and Flux2Pipeline's own static methods (3 x 5 grid, 4 text tokens)."""
  flux = rope.flux_positions(3, 5, 4)
  np.testing.assert_array_equal(flux[4:], DIFFUSERS_ARRAYS["pipelines/flux/img_ids"])
  assert flux.dtype == np.int32 and not flux[:4].any()  # FluxPipeline's txt_ids: zeros
  flux2 = rope.flux_positions(3, 5, 4, axes=4)
  np.testing.assert_array_equal(flux2[:4], DIFFUSERS_ARRAYS["pipelines/flux2/txt_ids"])
  np.testing.assert_array_equal(flux2[4:], DIFFUSERS_ARRAYS["pipelines/flux2/img_ids"])
  with pytest.raises(ValueError, match="axes=5"):
    rope.flux_positions(3, 5, 4, axes=5)


def test_a_scaling_the_model_was_not_observed_to_follow_is_refused():
  """The registry perturbs each model's rope_parameters to linear, YaRN and llama3 and compares its rotary class's
  frequencies with a NumPy transcription of transformers' standard ones; a generic family reads only those."""
  observed = [mt for mt, e in TYPES.items() if e["status"] == "exact" and mt not in HAND and "family" in e]
  assert observed and all("scalings" in TYPES[mt]["family"] for mt in observed)
  mt = next(mt for mt in observed if "yarn" in TYPES[mt]["family"]["scalings"])
  config = {"model_type": mt, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}}
  with pytest.raises(ValueError, match=f"'{mt}' with rope_type 'dynamic': its rotary class was observed"):
    rope.from_hf_config(config)
  spec = rope.from_hf_config({**config, "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4,
                                                            "original_max_position_embeddings": 1024}})
  assert spec is not None and spec.scaling_dict["rope_type"] == "yarn"


def test_a_layer_key_the_registry_did_not_observe_changed_is_refused():
  """Granite's layer_rope_theta (a theta per layer, 0 = NoPE) is not read by the generic reading: a config that
  changes it from the observed default is refused, naming the key; the default itself reads."""
  guarded = {mt: e["family"]["guarded"] for mt, e in TYPES.items()
             if e["status"] == "exact" and "guarded" in e.get("family", {})}
  assert "layer_rope_theta" in guarded["granite_swa"]
  config = dict(CONFIGS["granite_swa"])
  assert rope.from_hf_config(config) is not None
  config["layer_rope_theta"] = [0.0] + list(config["layer_rope_theta"][1:])
  with pytest.raises(ValueError, match="sets layer_rope_theta=.*observed this model only with layer_rope_theta="):
    rope.from_hf_config(config)


def test_vision_towers_number_their_tokens_as_grid_positions_does():
  """A vision tower observed on one image (scripts/make_hf_rope_registry.py's VISION_GRID: 1 x 4 x 10 patches)
  gave its rotary module these (h, w) ids, from its own code (get_vision_position_ids and kin). The spec's
  positions for that image are rope.grid_positions(4, 10, merge_size=m), m the config's spatial_merge_size
  where the tower orders its tokens in merge blocks (the registry's merge_size_key) and 1 where it keeps raster
  order (merge_size 1: PaddleOCR-VL), with axes="thw" where the tower puts the frame index in front (MiniMax-M3-VL),
  window=window_size // (merge * patch_size) where the tower reorders its tokens into attention windows
  (Qwen2.5-VL), and start=1 with cls="first" where class tokens at (0, 0) precede 1-based patches, axes="wh"
  where its sections read (col, row) (Inkling 2): the same ids in the same token order, for every tower the registry reads."""
  towers = sorted(mt for mt in (k[:-len("/vision_ids")] for k in ARRAYS.files if k.endswith("/vision_ids"))
                  if TYPES[mt]["status"] == "exact")
  assert len(towers) >= 10, towers
  wrong = {}
  for mt in towers:
    ids = np.asarray(ARRAYS[f"{mt}/vision_ids"])
    fam = TYPES[mt]["family"]  # merge blocks of the config's merge size (Qwen2-VL), or raster (PaddleOCR-VL)
    merge = int(CONFIGS[mt][fam["merge_size_key"]]) if "merge_size_key" in fam else fam["merge_size"]
    window = None  # Qwen2.5-VL: its tokens in attention windows of window_size // (merge * patch) merge blocks
    if "window_size_key" in fam:
      window = int(CONFIGS[mt][fam["window_size_key"]]) // merge // int(CONFIGS[mt][fam["patch_size_key"]])
    cls = {"cls": "first", "cls_tokens": fam["cls_tokens"]} if fam.get("cls_tokens") else {}  # Inkling 2: a class
    # token in front at (0, 0), the patches from 1
    axes = "thw" if fam.get("frame_axis") else fam.get("position_axes", "hw")  # Inkling 2: (col, row)
    want = rope.grid_positions(4, 10, merge_size=merge, axes=axes, window=window,
                               start=fam.get("start", 0), **cls)
    if ids.shape != want.shape or not np.array_equal(ids, want):
      wrong[mt] = (f"ids {ids[:6].tolist()}... vs grid_positions(4, 10, merge_size={merge}, window={window}) "
                   f"{want[:6].tolist()}...")
    spec = rope.from_hf_config(CONFIGS[mt], layer=TYPES[mt]["rotations"][0]["layers"][0])
    assert spec is not None and spec.sections is not None and len(spec.sections) == ids.shape[1], mt
  assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())


def test_a_vision_config_without_its_model_type_reads_with_family():
  """Qwen2-VL's published config.json (v4) keeps a vision_config with no model_type: refused as unknown, read
  with family='qwen2_vl_vision' exactly as the tower's own config class (the golden's config.json) reads."""
  published = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3, "hidden_size": 3584,
               "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14, "temporal_patch_size": 2}
  with pytest.raises(ValueError, match="family="):
    rope.from_hf_config(published)
  spec = rope.from_hf_config(published, family="qwen2_vl_vision")
  assert spec == rope.from_hf_config(CONFIGS["qwen2_vl_vision"])
  assert spec.sections == (20, 20) and spec.frequencies == "per_axis" and spec.layout == "half"


def test_dory_reads_its_layer_types_as_its_config_class_does_and_the_dit_rotates_one_head():
  """Dory's config.json writes each layer as its attention type followed by "mlp" (its class keeps [::2] and halves
  num_hidden_layers): layer i is entry 2 i, another form of the list is refused. Qwen2.5-Omni's DiT rotates its first
  head of 16 only (observed by value), the spec's heads, read only at the head count observed."""
  fam = TYPES["dory"]["family"]
  assert fam["layer_types_filler"] == ["mlp", 2] and fam["num_hidden_layers"] == 36, fam
  config = CONFIGS["dory"]
  assert config["layer_types"][:4] == ["sliding_attention", "mlp", "sliding_attention", "mlp"]
  thetas = fam["theta"]
  assert [rope.from_hf_config(config, layer=i).theta for i in range(4)] == [
      thetas["sliding_attention"]] * 3 + [thetas["full_attention"]]
  with pytest.raises(ValueError, match="not in that form"):
    rope.from_hf_config({**config, "layer_types": config["layer_types"][::2]})
  with pytest.raises(ValueError, match="must count layer_types"):
    rope.from_hf_config({**config, "num_hidden_layers": 36})
  with pytest.raises(ValueError, match="36-layer"):
    rope.from_hf_config(config, layer=36)
  for mt in ("qwen2_5_omni_dit", "qwen2_5_omni_token2wav"):
    spec = rope.from_hf_config(CONFIGS[mt])
    assert spec.heads == (0, 1) and spec.layout == "interleaved", spec
    assert [r["heads"] for r in TYPES[mt]["rotations"]] == [[0, 1, 16]]
  with pytest.raises(ValueError, match="num_attention_heads=16"):
    rope.from_hf_config({"model_type": "qwen2_5_omni_dit", "num_attention_heads": 8})

def _efficientloftr_reference(x, height, width, hidden, theta, head_dim, partial):
  """float64 NumPy of EfficientLoFTR's own rotation (transformers 5.24 modeling_efficientloftr: compute_embeddings,
  its rotary module's repeat_interleave, Cohere's interleaved apply on q viewed [B, T, 1, hidden]): inv_freq over
  dim = head_dim * partial_rotary_factor; pair p of the hidden width turns by (row if p even else column) *
  inv_freq[p // 2], rows and columns of the aggregated grid counted from 1."""
  dim = int(head_dim * partial)
  inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
  rows, cols = np.meshgrid(np.arange(1, height + 1), np.arange(1, width + 1), indexing="ij")
  emb = np.zeros((height, width, hidden // 2))
  emb[..., 0::2] = rows[..., None] * inv_freq
  emb[..., 1::2] = cols[..., None] * inv_freq
  ang = emb.reshape(height * width, hidden // 2)[None, :, None, :]
  even, odd = x[..., 0::2], x[..., 1::2]
  out = np.empty_like(x)
  out[..., 0::2] = even * np.cos(ang) - odd * np.sin(ang)
  out[..., 1::2] = even * np.sin(ang) + odd * np.cos(ang)
  return out


def test_efficientloftr_rotates_its_whole_hidden_width_as_its_own_code_does():
  """EfficientLoFTR rotates q whole ([B, T, 1, hidden_size], before its heads split) by 2-D RoPE over its
  aggregated coarse grid, rows and columns from 1, the two axes taking alternate pairs, each its own spectrum:
  the spec (width hidden_size, as the registry observed it follow) against a float64 NumPy rewrite of its code, at
  the default and a doubled width; the keys that set its frequency count are read only as observed."""
  rng = np.random.default_rng(0)
  height, width = 5, 6
  positions = rope.grid_positions(height, width, axes="hw", start=1)
  for hidden, theta in ((256, 10000.0), (512, 40000.0)):
    config = {"model_type": "efficientloftr", "hidden_size": hidden, "out_features": [64, 64, 128, hidden],
              "rope_parameters": {"rope_theta": theta, "partial_rotary_factor": 4.0, "rope_type": "default"}}
    spec = rope.from_hf_config(config)
    assert spec.sections == (hidden // 4, hidden // 4) and spec.section_layout == "interleaved", spec
    x = rng.standard_normal((1, height * width, 1, hidden))
    want = _efficientloftr_reference(x, height, width, hidden, theta, hidden // 8, 4.0)
    got = np.asarray(spec.apply(x.astype(np.float32), positions), np.float64)
    np.testing.assert_allclose(got, want, atol=2e-5)
    zero_based = _efficientloftr_reference(x, height, width, hidden, theta, hidden // 8, 4.0)  # the reference tells
    assert np.abs(np.asarray(spec.apply(x.astype(np.float32), positions - 1), np.float64) - zero_based).max() > 1e-2
  for changed, key in (({"num_attention_heads": 16}, "num_attention_heads"),
                       ({"head_dim": 64}, "head_dim"),
                       ({"rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 2.0}}, "partial_rotary_factor")):
    with pytest.raises(ValueError, match=f"{key}=.* is not read: this tower rotates q whole"):
      rope.from_hf_config({"model_type": "efficientloftr", **changed})
