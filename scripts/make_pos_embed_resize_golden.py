"""Golden values for resizing a ViT's learned position table, from timm's `resample_abs_pos_embed`.

What it makes
-------------
``tests/golden/pos_embed_resize.npz`` (``np.savez_compressed``) and ``tests/golden/pos_embed_resize.json``
(``{"meta": {...}, "cases": [...]}``). ``tests/test_vit.py`` checks `roformer_jax.vit.resize_position_table`
against them.

The anchor
----------
``timm.layers.pos_embed.resample_abs_pos_embed(posemb[1, P + h*w, D], new_size=[H, W], old_size=[h, w],
num_prefix_tokens=P, interpolation="bicubic", antialias=...)`` of timm 1.0.31. It keeps the P prefix rows (CLS,
registers) as they are, reshapes the rest to the ``h x w`` grid (raster order) and calls
``torch.nn.functional.interpolate(..., mode="bicubic", align_corners=None (= False), antialias=...)`` in float32.
Two settings of it are stored per case:

* ``antialias=False``: DeiT's resize (facebookresearch/deit ``main.py`` fine-tuning, and naver-ai/rope-vit's
  ``deit/main.py``, call ``F.interpolate(pos_tokens, size, mode="bicubic", align_corners=False)``, whose
  antialias is off), also timm's deprecated ``resize_pos_embed``: Keys' cubic with a = -0.75, sampled at
  ``(i + 0.5) * h / H - 0.5`` with indices clamped to the grid (edge replication), the same 4 taps whether the
  grid grows or shrinks (no antialiasing when downsizing). Arrays ``out_deit`` (float32, timm's own output) and
  ``out_deit_f64`` (the same ``F.interpolate`` call timm makes, on the float64 grid: timm casts to float32).
* ``antialias=True``: timm's default for ``resample_abs_pos_embed``, its checkpoint filter and
  ``dynamic_img_size``: torch's antialiased bicubic, which is PIL's (a = -0.5, weights renormalised at the border,
  the kernel widened by h / H when shrinking). Arrays ``out_timm`` and ``out_timm_f64`` likewise.

Inputs ``posemb`` are float32 values on a 2**-8 grid (``round(normal * 256) / 256`` from
``numpy.random.default_rng([SEED, crc32(case name)])``): exact in float32. Every case stores ``posemb``
``[1, P + h*w, D]`` as timm takes it; the grid part is ``posemb[0, P:].reshape(h, w, D)``, the layout of our
``VisionTransformer.position_table`` (which holds no prefix rows: the CLS token carries no table row there).

How to run
----------
From the repository root, in the reference venv (Python 3.11)::

    python3.11 -m venv /work/refvenv
    /work/refvenv/bin/pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
    /work/refvenv/bin/pip install --no-deps timm==1.0.31 && /work/refvenv/bin/pip install numpy
    /work/refvenv/bin/python scripts/make_pos_embed_resize_golden.py

timm's package ``__init__`` imports torchvision (through ``timm.layers.create_norm``), which this venv does not
install: the script registers empty ``timm`` and ``timm.layers`` package modules and imports
``timm.layers.pos_embed`` by itself (its own imports are ``timm.layers._fx`` and ``timm.layers.helpers``, torch
only). ``meta.versions`` records that. The output is deterministic; runtime is about a second.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import types
import zlib

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NPZ_PATH = os.path.join(ROOT, "tests", "golden", "pos_embed_resize.npz")
JSON_PATH = os.path.join(ROOT, "tests", "golden", "pos_embed_resize.json")
SEED = 20261127


def _import_timm_pos_embed():
  """`timm.layers.pos_embed` without running timm's package __init__ (which imports torchvision)."""
  root = os.path.dirname(importlib.util.find_spec("timm").origin)
  for name, path in (("timm", root), ("timm.layers", os.path.join(root, "layers"))):
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
  from timm.layers import pos_embed
  return pos_embed


pos_embed = _import_timm_pos_embed()

# (name, old grid (h, w), new grid (H, W), prefix tokens P, width D)
CASES = [
    ("up_4x4_to_6x6", (4, 4), (6, 6), 0, 8),
    ("up_4x4_to_6x6_cls", (4, 4), (6, 6), 1, 8),  # one prefix row (CLS), as timm's ViTs hold
    ("up_8x8_to_12x12", (8, 8), (12, 12), 1, 8),  # E7: 32 px -> 48 px (1.5x)
    ("up_8x8_to_16x16", (8, 8), (16, 16), 0, 4),  # E7: 32 px -> 64 px (2x)
    ("nonsquare_4x6_to_7x5", (4, 6), (7, 5), 0, 6),  # each axis its own scale, one of them shrinking
    ("nonsquare_3x5_to_6x8_reg", (3, 5), (6, 8), 5, 4),  # CLS + 4 registers (DINOv2-style prefix)
    ("down_8x8_to_6x6", (8, 8), (6, 6), 0, 8),
    ("down_12x12_to_8x8_cls", (12, 12), (8, 8), 1, 4),  # E7: fine-tuned at 48 px, evaluated at 32 px
    ("down_8x8_to_3x3", (8, 8), (3, 3), 0, 4),  # strong shrink: antialiasing matters most
    ("same_5x5", (5, 5), (5, 5), 0, 4),  # timm returns the table itself
]


def main() -> None:
  torch.set_num_threads(1)
  arrays, cases = {}, []
  for name, (h, w), (hh, ww), prefix, d in CASES:
    rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])
    posemb = (np.round(rng.standard_normal((1, prefix + h * w, d)) * 256) / 256).astype(np.float32)  # exact
    arrays[f"{name}/posemb"] = posemb
    for label, antialias in (("deit", False), ("timm", True)):
      out = pos_embed.resample_abs_pos_embed(torch.tensor(posemb, dtype=torch.float32), new_size=[hh, ww],
                                             old_size=[h, w], num_prefix_tokens=prefix, interpolation="bicubic",
                                             antialias=antialias)
      arrays[f"{name}/out_{label}"] = out.numpy()
      # The same F.interpolate call as timm's, in float64 (timm casts its input to float32 first).
      grid = torch.tensor(posemb[:, prefix:], dtype=torch.float64).reshape(1, h, w, d).permute(0, 3, 1, 2)
      grid = F.interpolate(grid, size=[hh, ww], mode="bicubic", align_corners=None, antialias=antialias)
      grid = grid.permute(0, 2, 3, 1).reshape(1, hh * ww, d).numpy()
      arrays[f"{name}/out_{label}_f64"] = np.concatenate([posemb[:, :prefix], grid], axis=1)
      np.testing.assert_allclose(arrays[f"{name}/out_{label}"], arrays[f"{name}/out_{label}_f64"], atol=1e-5)
    cases.append({"name": name, "old_size": [h, w], "new_size": [hh, ww], "num_prefix_tokens": prefix, "dim": d,
                  "arrays": {k: f"{name}/{k}" for k in ("posemb", "out_deit", "out_deit_f64", "out_timm",
                                                        "out_timm_f64")}})
  meta = {
      "versions": {"torch": torch.__version__, "timm": importlib.metadata.version("timm"), "numpy": np.__version__,
                   "python": platform.python_version(), "torchvision": None,
                   "timm_import": "timm.layers.pos_embed imported without timm's package __init__ (no torchvision)"},
      "seed": SEED,
      "script": "scripts/make_pos_embed_resize_golden.py",
      "anchor": "timm.layers.pos_embed.resample_abs_pos_embed(posemb, new_size, old_size, num_prefix_tokens, "
                "interpolation='bicubic', antialias=False (out_deit) | True (out_timm))",
      "layout": "posemb and outputs [1, P + h*w, D]: P prefix rows, then the grid in raster order (row-major)",
      "f64": "out_*_f64: torch.nn.functional.interpolate(grid, size, mode='bicubic', align_corners=None, "
             "antialias=...) on the float64 grid, prefix rows copied: timm's call without its float32 cast",
  }
  os.makedirs(os.path.dirname(NPZ_PATH), exist_ok=True)
  np.savez_compressed(NPZ_PATH, **arrays)
  with open(JSON_PATH, "w") as f:
    json.dump({"meta": meta, "cases": cases}, f, indent=1)
    f.write("\n")
  print(f"wrote {len(cases)} cases: {NPZ_PATH} ({os.path.getsize(NPZ_PATH)} bytes), {JSON_PATH}")


if __name__ == "__main__":
  main()
