"""Generate golden values for RoPE *variants* from their reference (anchor) implementations.

What it makes
-------------
``tests/golden/rope_variants.npz`` (arrays, ``np.savez_compressed``) and
``tests/golden/rope_variants.json`` (metadata). The JSON holds
``{"meta": {...}, "cases": [...]}``; every case has ``name``, ``anchor`` (the exact entry
point called), ``params`` (every constructor / call argument), ``arrays`` (keys into the
npz, all ``"<case name>/<array>"``) and ``notes`` (conventions needed to reproduce).

Array conventions (all cases unless a case's notes say otherwise)
-----------------------------------------------------------------
* Activations are stored in roformer-jax's layout ``x[B, T, N, H]`` (batch, tokens, heads,
  head dim), whatever layout the anchor itself uses; the script transposes on the way in
  and out. Inputs are float32 values on a 2**-8 grid (``round(normal * 256) / 256``), so
  they are exact in float32 and float64 and compress well.
* Spatial grids are flattened into ``T`` in raster order (row-major over the grid, last
  grid axis fastest), the order the anchors use for their tokens; the one exception is
  Qwen2-VL's vision tower, whose token order (2x2 merge blocks) is kept as the anchor builds it.
* For xPos at L=300 only selected token rows of ``q_out``/``k_out``/``logits`` are stored
  (``logit_rows``) to keep the file small.
* Outputs keep the anchor's own dtype (float32 for everything here). Where the anchor can
  run in float64, a second run is stored with the key suffix ``_f64``. "f64 run" always
  means: module constructed under ``torch.set_default_dtype(torch.float64)`` and then
  ``.double()``, inputs ``x.double()`` (the same values). Frequencies that the anchor
  hard-codes in float32 (``.float()``) are then the float32 values upcast; the notes say
  which. Exception: timm RoPE-Axial's f64 run passes timm's float32 bands upcast
  (``build_rotary_pos_embed(bands=bands.double(), dtype=torch.float64)``). HF vision
  encoders and timm's ``get_mixed_freqs`` force float32, so they have no f64 run; VideoRoPE
  is NumPy float64 only (``x`` float64 there).
* Per-token positions are stored as float64, shape ``[T, A]`` (or ``[B, T, A]``), in the
  axis order the anchor uses (stated per case). They are the exact values the anchor fed
  into its phase computation (e.g. float32 ``linspace`` values upcast).
* Logits are ``q_out @ k_out^T`` per head, shape ``[B, N, Tq, Tk]``.

Cases (anchor entry points and conventions)
-------------------------------------------
rotary-embedding-torch 0.9.1 (``rotary_embedding_torch.RotaryEmbedding``, "RET"; interleaved
pairs ``(2p, 2p+1)``; ``rotate_*`` methods take ``(B, N, T, H)`` with seq_before_head_dim False):

* ``ret_axial_{pixel,lang}_8x6x4[_offsets]``: ``RotaryEmbedding(dim=16, freqs_for=...,
  max_freq=256, cache_if_possible=False).get_axial_freqs(8, 6, 4[, offsets=(1.5, 0, 2)])``
  then ``apply_rotary_emb(freqs, t)`` with ``t`` of shape ``(1, 8, 6, 4, 64)``. Axis ``a``
  owns channels ``[16a, 16a+16)`` (8 interleaved pairs each), channels 48..63 pass through.
  Axis positions: pixel ``linspace(-1, 1, n)`` (float32), lang ``arange(n)``, plus the
  offset. Stored as ``x[1, 192, 1, 64]``. Lang with offsets also stores
  ``out_default_cache``: the same call on a default (``cache_if_possible=True``) module,
  where RET's ``forward`` cache returns axis 0's offset positions for the later, shorter
  axes (a RET bug; see the case notes).
* ``ret_custom_freqs_learned``: ``RotaryEmbedding(dim=16, custom_freqs=tensor([8 values]),
  learned_freq=True).rotate_queries_or_keys(q)`` (q ``(2, 2, 7, 32)``), and
  ``d(sum(out * w))/d(freqs)`` by autograd. ``ret_lang_learned``: the same with the default
  lang frequencies (``theta=10000``) and ``learned_freq=True``.
* ``ret_theta_rescale_{1,2,8}``: ``RotaryEmbedding(dim=16, theta_rescale_factor=s)
  .rotate_queries_or_keys(q)``; RET uses ``theta * s ** (dim / (dim - 2))``.
* ``ret_interpolate2_offset3``: ``RotaryEmbedding(dim=16, interpolate_factor=2.)
  .rotate_queries_or_keys(q, offset=3)``: positions ``(arange(T) + 3) / 2``.
* ``ret_lang_large_positions``: explicit positions up to ``2**20`` through
  ``RotaryEmbedding(dim=16).forward(pos)`` + ``apply_rotary_emb(freqs, q)``; also
  ``rotate_queries_or_keys(q, offset=2**20 - T + 1)`` in float32 and in bfloat16 (RET builds
  positions in the query dtype, so the bf16 positions collapse).
* ``ret_xpos_L{5,8,300}``: ``RotaryEmbedding(dim=32, use_xpos=True, xpos_scale_base=512,
  cache_if_possible=False).rotate_queries_and_keys(q, k)``, q/k ``(1, 2, L, 64)``; xPos
  centre ``c = L // 2`` (``get_scale``: power ``(t - len(t)//2) / 512``); q scaled by
  ``zeta**((n-c)/512)``, k by the inverse.
* ``ret_xpos_cached_keys_L8``: ``rotate_queries_with_cached_keys(q[:, :, -1:], k)``: the
  query scale is centred at ``q_len // 2 = 0`` and the key scale at ``k_len // 2 = 4``, so
  its logits differ from the last row of the full call by ``zeta**(4/512)`` per pair.

torchscale 0.3.0 (``torchscale.component.xpos_relative_position.XPOS``; interleaved pairs):

* ``torchscale_xpos_L{5,8,300}``: ``XPOS(head_dim=64, scale_base=512)``, ``q_out = xpos(q,
  offset=0, downscale=False)``, ``k_out = xpos(k, offset=0, downscale=True)`` on
  ``(B*N, L, 64)`` tensors (row ``b*N + n``), as ``torchscale.component.multihead_attention``
  does. All 64 channels rotate. Scale exponent ``(i + min_pos)/512`` with
  ``min_pos = -(L + offset) // 2`` (Python floor) i.e. centre ``c = ceil((L + offset)/2)``.
  Decode: ``xpos(q[:, -1:], offset=L-1, downscale=False)`` (one query at position L-1, as
  MultiheadAttention does incrementally) against the full ``k_out``.

timm 1.0.31 (``timm.layers.pos_embed_sincos``; applied as ``timm.models.eva.EvaAttention``
does: ``apply_rot_embed_cat(q[:, :, npt:], emb, half=...)``, prefix tokens unrotated):

* ``timm_rope_axial_{14x14,12x20}``: ``build_rotary_pos_embed(feat_shape=[H, W], dim=32,
  temperature=100, in_pixels=False, grid_indexing='xy')`` -> ``emb = cat([sin, cos], -1)``
  (checked equal to ``RotaryEmbeddingCat(...).get_embed()``), ``apply_rot_embed_cat``
  (interleaved). Token 0 is a CLS token (npt=1, unrotated). Pairs 0..7 use x = column,
  pairs 8..15 use y = row, bands ``100**(-j/8)``.
* ``timm_rope_mixed_12x20``: seeded ``F`` (2, depth=2, heads=2, 16); ``t_x, t_y =
  get_mixed_grid([12, 20], 'xy')``; ``emb = get_mixed_freqs(F, t_x, t_y)``; per block
  ``apply_rot_embed_cat(q[:, :, 1:], emb[block])`` (interleaved, CLS unrotated); gradient
  ``dF`` of ``sum_block sum(out_block * w_block)``. Also ``F`` from timm's own init
  (``RotaryEmbeddingMixed(...)`` after ``torch.manual_seed``), which calls
  ``init_random_2d_freqs``.
* ``timm_dinov3_12x20``: ``RotaryEmbeddingDinoV3(dim=32, temperature=100)`` in eval mode,
  ``get_embed(shape=[12, 20])``; applied with ``apply_rot_embed_cat(..., half=True)``
  after 5 prefix tokens (CLS + 4 registers, as timm's DINOv3 ViTs). Coordinates
  ``2 * (i + 0.5) / n - 1`` per axis (h, w), periods ``100**(2j/16)``,
  angle ``2*pi*coord/period``; half layout, pairs 0..7 use h, 8..15 use w.

transformers 5.23.0 (tiny configs, float32 only: each anchor casts to float32 internally):

* ``hf_qwen2vl_vision``: ``Qwen2VLVisionRotaryEmbedding(Qwen2VLVisionConfig(embed_dim=32,
  num_heads=2))(x, get_vision_position_ids(grid_thw, 2))`` then
  ``apply_rotary_pos_emb_vision``; grid_thw ``[[1, 4, 6], [2, 6, 4]]`` concatenated in one
  sequence as the vision tower does. Positions ``(h, w)`` in merge-block order (2x2 blocks
  in raster order, raster inside each block), repeated over t. Half layout.
* ``hf_llama4_vision_{4x4_d16,6x6_d88}``: ``Llama4VisionRotaryEmbedding(cfg).freqs_ci`` +
  ``vision_apply_rotary_emb``. Grids are square by construction (``image_size //
  patch_size``). Positions ``x = col + 1``, ``y = row + 1``; CLS appended last with all
  angles 0 (stored as position (0, 0)). Interleaved (complex view): pairs ``< d/4`` use x.
* ``hf_pixtral_vision``: ``PixtralVisionRotaryEmbedding(cfg)(x, position_ids)`` +
  ``modeling_pixtral.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=0)``; two images
  (3x5 and 2x4 patches) in one sequence as ``PixtralVisionModel`` builds it; positions
  (row, col) restart per image. Half layout; h takes even, w odd entries of
  ``theta**(-2j/d)``.
* ``hf_gemma4_vision``: ``Gemma4VisionRotaryEmbedding(cfg)(x, pixel_position_ids)`` +
  ``apply_multidimensional_rope``; batch of 2 images (3x5 and 5x3 patches, rows x cols).
  ``pixel_position_ids[..., 0]`` is x = column and ``[..., 1]`` is y = row (as
  ``Gemma4ImageProcessor`` builds them); channels ``[0, d/2)`` rotate by x, ``[d/2, d)`` by y,
  half layout inside each half (pairs ``(i, i + d/4)``), theta 100.

VideoRoPE (no pip package): ``videorope_text3_video2x2x3_text2`` is a NumPy float64
transcription of ``Wiselnn570/VideoRoPE`` ``videorope-transformer/modeling_videorope.py``
(commit 7712ca3f52b795284e0453badc6cf1642c1368c4):
``Qwen2VLForConditionalGeneration.get_t_scale_rope_index(..., scale_factor=2.0)`` (the
``which_rope == 'videorope'`` branch) for the positions, ``Qwen2VLRotaryEmbedding.forward``
(``inv_freq = 1/theta**(arange(0, 128, 2)/128)``, ``emb = cat(freqs, freqs)``) and
``apply_m_modify_multimodal_rotary_pos_emb(q, k, cos, sin, [16, 24, 24])`` for the rotation.

How to run
----------
From the repository root::

    /tmp/refvenv/bin/python scripts/make_rope_variant_golden.py

where the venv is created with (torchscale 0.3.0 pins timm==0.6.13 and fairscale, which
its XPOS module does not use, hence ``--no-deps``; timm needs torchvision)::

    python3.11 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0 torchvision==0.28.0 transformers==5.23.0 \\
        rotary-embedding-torch==0.9.1 timm==1.0.31 numpy
    /tmp/refvenv/bin/pip install --no-deps torchscale==0.3.0

CPU-only torch is enough (the goldens were made with the ``torch-2.13.0+cpu`` wheel next to
PyPI's ``torchvision-0.28.0``, a CUDA build whose ops cannot load there; the script then
applies the small import shim in ``_ensure_torchvision_importable`` and records that in
``meta.versions``; nothing here calls a torchvision op). The output is deterministic: every case draws its inputs from
``numpy.random.default_rng([SEED, crc32(case name)])`` (independent of case order), torch
runs single-threaded on CPU, and the one torch RNG use (timm's Mixed init) is seeded with
``torch.manual_seed``. Runtime is a few seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import zlib

import numpy as np
import torch



def _ensure_torchvision_importable() -> None:
    """timm imports torchvision. PyPI's torchvision wheels are CUDA builds; next to a CPU-only torch wheel their
    ``_C`` extension cannot load, and torchvision 0.28's ``_meta_registrations`` then fails on its unguarded
    ``register_fake("torchvision::nms")``. In exactly that case define the two op schemas (no kernels; nothing here
    calls them) and import again. No effect when torchvision imports normally; no effect on any RoPE numerics."""
    try:
        import torchvision  # noqa: F401
    except RuntimeError as e:
        if "torchvision::nms" not in str(e):
            raise
        for mod in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[mod]
        global _TV_SHIM_LIB
        _TV_SHIM_LIB = torch.library.Library("torchvision", "DEF")
        _TV_SHIM_LIB.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _TV_SHIM_LIB.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import torchvision  # noqa: F401


_TV_SHIM_LIB = None
_ensure_torchvision_importable()

import rotary_embedding_torch  # noqa: E402
import timm  # noqa: E402
import torchscale
import transformers
from rotary_embedding_torch import RotaryEmbedding as RETRotaryEmbedding
from rotary_embedding_torch import apply_rotary_emb as ret_apply_rotary_emb
from timm.layers import pos_embed_sincos as timm_pe
from torchscale.component.xpos_relative_position import XPOS
from transformers.models.gemma4 import modeling_gemma4
from transformers.models.gemma4.configuration_gemma4 import Gemma4VisionConfig
from transformers.models.llama4 import modeling_llama4
from transformers.models.llama4.configuration_llama4 import Llama4VisionConfig
from transformers.models.pixtral import modeling_pixtral
from transformers.models.pixtral.configuration_pixtral import PixtralVisionConfig
from transformers.models.qwen2_vl import modeling_qwen2_vl
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
from transformers.vision_utils import get_vision_position_ids

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NPZ_PATH = os.path.join(REPO_ROOT, "tests", "golden", "rope_variants.npz")
JSON_PATH = os.path.join(REPO_ROOT, "tests", "golden", "rope_variants.json")
SEED = 20241125
TIMM_MIXED_INIT_TORCH_SEED = 1234

ARRAYS: dict[str, np.ndarray] = {}
CASES: list[dict] = []
SKIPPED: list[dict] = []


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def case_rng(name: str) -> np.random.Generator:
    return np.random.default_rng([SEED, zlib.crc32(name.encode())])


def grid_normal(rng: np.random.Generator, shape) -> np.ndarray:
    """float32 standard-normal values rounded to a 2**-8 grid (exact in f32/f64)."""
    return (np.round(rng.standard_normal(shape) * 256.0) / 256.0).astype(np.float32)


def npy(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy().copy()
    return np.asarray(t).copy()


def bnth(x_ours: np.ndarray) -> torch.Tensor:
    """Our [B, T, N, H] numpy -> torch (B, N, T, H)."""
    return torch.from_numpy(np.ascontiguousarray(x_ours.transpose(0, 2, 1, 3)))


def ours(t_bnth) -> np.ndarray:
    """torch/numpy (B, N, T, H) -> our [B, T, N, H]."""
    return np.ascontiguousarray(npy(t_bnth).transpose(0, 2, 1, 3))


@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def jsonable(v):
    if isinstance(v, torch.Tensor):
        return jsonable(v.tolist())
    if isinstance(v, np.ndarray):
        return jsonable(v.tolist())
    if isinstance(v, (list, tuple)):
        return [jsonable(u) for u in v]
    if isinstance(v, dict):
        return {str(k): jsonable(u) for k, u in v.items()}
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, torch.dtype):
        return str(v)
    return v


def add_case(name: str, anchor: str, params: dict, arrays: dict, notes: str) -> None:
    keys = []
    for k, a in arrays.items():
        key = f"{name}/{k}"
        assert key not in ARRAYS, key
        a = npy(a)
        assert a.dtype in (np.float32, np.float64, np.int64, np.int32), (key, a.dtype)
        assert np.all(np.isfinite(a)), key
        ARRAYS[key] = a
        keys.append(key)
    CASES.append({"name": name, "anchor": anchor, "params": jsonable(params), "arrays": keys, "notes": notes})


def raster_positions(*axis_positions: np.ndarray) -> np.ndarray:
    """Per-axis position vectors -> [prod(n_a), A] float64, raster order (last axis fastest)."""
    mesh = np.meshgrid(*[np.asarray(p, dtype=np.float64) for p in axis_positions], indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=-1)


def logits(q_bnth: torch.Tensor, k_bnth: torch.Tensor) -> torch.Tensor:
    return torch.matmul(q_bnth, k_bnth.transpose(-1, -2))


# --------------------------------------------------------------------------------------
# rotary-embedding-torch
# --------------------------------------------------------------------------------------

AXIAL_DIMS = (8, 6, 4)
AXIAL_OFFSETS = (1.5, 0, 2)


def _ret_axial_positions(freqs_for: str, offsets, dtype) -> list[torch.Tensor]:
    """The per-axis positions exactly as RotaryEmbedding.get_axial_freqs builds them."""
    out = []
    off_t = torch.tensor(offsets) if offsets is not None else None  # default dtype, as RET
    for ind, n in enumerate(AXIAL_DIMS):
        offset = off_t[ind] if off_t is not None else 0
        pos = torch.linspace(-1, 1, steps=n) if freqs_for == "pixel" else torch.arange(n)
        out.append((pos + offset).to(dtype))
    return out


def case_ret_axial(freqs_for: str, with_offsets: bool) -> None:
    name = f"ret_axial_{freqs_for}_8x6x4" + ("_offsets" if with_offsets else "")
    rng = case_rng(name)
    offsets = AXIAL_OFFSETS if with_offsets else None
    ctor = dict(dim=16, freqs_for=freqs_for, max_freq=256, cache_if_possible=False)
    t_np = grid_normal(rng, (1, *AXIAL_DIMS, 64))
    arrays = {"x": t_np.reshape(1, -1, 1, 64)}
    for suffix, dtype in (("", torch.float32), ("_f64", torch.float64)):
        with default_dtype(dtype):
            rot = RETRotaryEmbedding(**ctor).to(dtype)
            freqs = rot.get_axial_freqs(*AXIAL_DIMS, offsets=offsets)
            t = torch.from_numpy(t_np).to(dtype)
            out = ret_apply_rotary_emb(freqs, t)
            pos = _ret_axial_positions(freqs_for, offsets, dtype)
        assert freqs.dtype == dtype and out.dtype == dtype
        # check that the reconstructed positions are the ones RET used
        for a, p in enumerate(pos):
            ref = rot.forward(p)
            sl = [0] * len(AXIAL_DIMS)
            sl[a] = slice(None)
            got = freqs[tuple(sl) + (slice(16 * a, 16 * (a + 1)),)]
            assert torch.equal(got, ref), (name, a)
        arrays[f"out{suffix}"] = npy(out).reshape(1, -1, 1, 64)
        arrays[f"positions{suffix}"] = raster_positions(*[npy(p).astype(np.float64) for p in pos])
        arrays[f"freqs{suffix}"] = npy(freqs).reshape(-1, 48)
        arrays[f"inv_freq{suffix}"] = npy(rot.freqs)
    notes = (
        f"RET axial: get_axial_freqs{AXIAL_DIMS} -> freqs (8,6,4,48) (stored flattened [192, 48] in raster "
        "order), apply_rotary_emb(freqs, t) with t (1,8,6,4,64) stored as x[1,192,1,64] (T raster over (8,6,4), "
        "last axis fastest, N=1). Axis a rotates channels [16a,16a+16) with interleaved pairs (2p,2p+1) of that "
        "block using positions[:, a] * inv_freq[p]; channels 48..63 pass through. "
    )
    if freqs_for == "pixel":
        notes += ("pixel: inv_freq = pi*linspace(1, max_freq/2=128, 8); axis positions = linspace(-1, 1, n) "
                  "(endpoints included) + offset. ")
    else:
        notes += "lang: inv_freq = 1/10000**(arange(0,16,2)/16) (float32); axis positions = arange(n) + offset. "
    notes += ("float32 run: positions are float32 values (stored upcast). _f64 run: default dtype float64, "
              "module .double(); ")
    notes += ("pixel linspace and inv_freq are genuine float64 there. " if freqs_for == "pixel" else
              "RET computes lang inv_freq with .float(), so inv_freq_f64 holds the float32 values. ")
    if with_offsets and freqs_for == "lang":
        with default_dtype(torch.float32):
            rot_c = RETRotaryEmbedding(dim=16, freqs_for=freqs_for, max_freq=256)  # cache_if_possible=True
            freqs_c = rot_c.get_axial_freqs(*AXIAL_DIMS, offsets=offsets)
            out_c = ret_apply_rotary_emb(freqs_c, torch.from_numpy(t_np))
        assert not torch.equal(out_c, torch.from_numpy(arrays["out"].reshape(out_c.shape)))
        arrays["out_default_cache"] = npy(out_c).reshape(1, -1, 1, 64)
        notes += ("out_default_cache: same call on RotaryEmbedding(dim=16, freqs_for='lang', max_freq=256) with the "
                  "default cache_if_possible=True: forward() caches axis 0's angles (positions arange(8)+1.5) and "
                  "returns cached rows 0..n-1 for axes 1 and 2, so those axes get arange(n)+1.5 instead of their own "
                  "offsets (0 and 2). A RET caching bug, recorded so a test can show it; `out` is the intended math. ")
    if with_offsets and freqs_for == "pixel":
        notes += "pixel never uses RET's cache, so cache_if_possible does not matter here. "
    add_case(
        name,
        "rotary_embedding_torch.RotaryEmbedding.get_axial_freqs + apply_rotary_emb",
        {"constructor": ctor, "get_axial_freqs_dims": list(AXIAL_DIMS), "offsets": offsets,
         "t_shape": [1, *AXIAL_DIMS, 64], "apply_rotary_emb": {"start_index": 0, "scale": 1.0}},
        arrays,
        notes,
    )


CUSTOM_FREQS = [2.0, 1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001]


def case_ret_learned(custom: bool) -> None:
    name = "ret_custom_freqs_learned" if custom else "ret_lang_learned"
    rng = case_rng(name)
    B, N, T, H = 2, 2, 7, 32
    x = grid_normal(rng, (B, T, N, H))
    w = grid_normal(rng, (B, T, N, H))
    arrays = {"x": x, "w": w}
    for suffix, dtype in (("", torch.float32), ("_f64", torch.float64)):
        with default_dtype(dtype):
            if custom:
                cf = torch.tensor(CUSTOM_FREQS, dtype=torch.float32).to(dtype)
                rot = RETRotaryEmbedding(dim=16, custom_freqs=cf, learned_freq=True)
            else:
                rot = RETRotaryEmbedding(dim=16, learned_freq=True)
            rot = rot.to(dtype)
            q = bnth(x).to(dtype)
            out = rot.rotate_queries_or_keys(q)
            loss = (out * bnth(w).to(dtype)).sum()
            loss.backward()
            angles = rot.forward(rot.get_seq_pos(T, dtype=dtype))
        assert out.dtype == dtype and rot.freqs.grad.dtype == dtype
        arrays[f"out{suffix}"] = ours(out)
        arrays[f"inv_freq{suffix}"] = npy(rot.freqs)
        arrays[f"grad_inv_freq{suffix}"] = npy(rot.freqs.grad)
        arrays[f"angles{suffix}"] = npy(angles)
        arrays[f"loss{suffix}"] = npy(loss).reshape(1)
    arrays["positions"] = np.arange(T, dtype=np.float64)[:, None]
    if custom:
        ctor = {"dim": 16, "custom_freqs": CUSTOM_FREQS, "custom_freqs_dtype": "float32", "learned_freq": True}
        fdesc = ("custom_freqs (8 values, float32; the f64 run upcasts the same float32 values) used verbatim as "
                 "inv_freq; dim=16 only sizes RET's cache. ")
    else:
        ctor = {"dim": 16, "learned_freq": True}
        fdesc = ("default lang inv_freq = 1/10000**(arange(0,16,2)/16) computed in float32 (the f64 run holds the "
                 "float32 values upcast). ")
    add_case(
        name,
        "rotary_embedding_torch.RotaryEmbedding.rotate_queries_or_keys (+ torch autograd)",
        {"constructor": ctor, "rotate_queries_or_keys": {"seq_dim": -2, "offset": 0}, "q_shape_BNTH": [B, N, T, H]},
        arrays,
        fdesc + "q is (B,N,T,H)=(2,2,7,32) in RET (stored as x[B,T,N,H]); positions arange(7); the first 16 "
        "channels rotate with interleaved pairs (2p,2p+1) at angle pos*inv_freq[p], channels 16..31 pass through. "
        "angles = RET forward() output (T,16), each angle repeated twice. loss = sum(out * w); grad_inv_freq = "
        "d loss / d rot.freqs (learned_freq=True, caching is off for learned freqs). _f64: default dtype float64, "
        "module .double(), q/w float64.",
    )


def case_ret_theta_rescale(s: float) -> None:
    name = f"ret_theta_rescale_{int(s)}"
    rng = case_rng(name)
    B, N, T, H = 1, 2, 9, 32
    x = grid_normal(rng, (B, T, N, H))
    arrays = {"x": x, "positions": np.arange(T, dtype=np.float64)[:, None]}
    for suffix, dtype in (("", torch.float32), ("_f64", torch.float64)):
        with default_dtype(dtype):
            rot = RETRotaryEmbedding(dim=16, theta_rescale_factor=s).to(dtype)
            out = rot.rotate_queries_or_keys(bnth(x).to(dtype))
        arrays[f"out{suffix}"] = ours(out)
        arrays[f"inv_freq{suffix}"] = npy(rot.freqs)
    theta_eff = 10000.0 * s ** (16 / 14)
    add_case(
        name,
        "rotary_embedding_torch.RotaryEmbedding(theta_rescale_factor=s).rotate_queries_or_keys",
        {"constructor": {"dim": 16, "freqs_for": "lang", "theta": 10000, "theta_rescale_factor": s},
         "rotate_queries_or_keys": {"offset": 0}, "q_shape_BNTH": [B, N, T, H], "theta_effective": theta_eff},
        arrays,
        "RET NTK-aware rescale: theta' = theta * s**(dim/(dim-2)) (Python float), inv_freq = 1/theta'**(arange(0,16,2)/16) "
        "evaluated by torch in float32 (stored: inv_freq). Positions arange(9); interleaved pairs over the first 16 of 32 "
        "channels. _f64: module .double() (inv_freq_f64 = the float32 values), q float64.",
    )


def case_ret_interpolate() -> None:
    name = "ret_interpolate2_offset3"
    rng = case_rng(name)
    B, N, T, H = 1, 2, 9, 32
    x = grid_normal(rng, (B, T, N, H))
    arrays = {"x": x}
    for suffix, dtype in (("", torch.float32), ("_f64", torch.float64)):
        with default_dtype(dtype):
            rot = RETRotaryEmbedding(dim=16, interpolate_factor=2.0).to(dtype)
            out = rot.rotate_queries_or_keys(bnth(x).to(dtype), offset=3)
            seq = rot.get_seq_pos(T, dtype=dtype, offset=3)
        arrays[f"out{suffix}"] = ours(out)
        arrays[f"inv_freq{suffix}"] = npy(rot.freqs)
        arrays[f"positions{suffix}"] = npy(seq).astype(np.float64)[:, None]
    add_case(
        name,
        "rotary_embedding_torch.RotaryEmbedding(interpolate_factor=2).rotate_queries_or_keys(q, offset=3)",
        {"constructor": {"dim": 16, "freqs_for": "lang", "interpolate_factor": 2.0},
         "rotate_queries_or_keys": {"offset": 3}, "q_shape_BNTH": [B, N, T, H]},
        arrays,
        "Positions (arange(9) + 3) / 2 built in the query dtype (get_seq_pos), inv_freq lang theta 1e4 dim 16 "
        "(float32). Interleaved pairs on channels 0..15 of 32. Fresh module, so RET's cache (filled only by "
        "offset-0 calls) is not involved. _f64: module .double(), q float64.",
    )


LARGE_POSITIONS = [0, 1, 255, 256, 257, 4095, 4096, 65535, 65537, 500001, 999999, 1048575, 1048576]


def case_ret_large_positions() -> None:
    name = "ret_lang_large_positions"
    rng = case_rng(name)
    T = len(LARGE_POSITIONS)
    B, N, H = 1, 2, 32
    x = grid_normal(rng, (B, T, N, H))
    arrays = {"x": x, "positions": np.asarray(LARGE_POSITIONS, dtype=np.float64)[:, None]}
    for suffix, dtype in (("", torch.float32), ("_f64", torch.float64)):
        with default_dtype(dtype):
            rot = RETRotaryEmbedding(dim=16).to(dtype)
            pos = torch.tensor(LARGE_POSITIONS, dtype=dtype)
            freqs = rot(pos)  # forward(t) with seq_len=None: no cache
            out = ret_apply_rotary_emb(freqs, bnth(x).to(dtype))
        arrays[f"out{suffix}"] = ours(out)
        arrays[f"angles{suffix}"] = npy(freqs)
        arrays[f"inv_freq{suffix}"] = npy(rot.freqs)
    # rotate_queries_or_keys with a large offset: positions are built in the query dtype
    offset = 2**20 - T + 1
    rot = RETRotaryEmbedding(dim=16)
    q32 = bnth(x)
    out_off32 = rot.rotate_queries_or_keys(q32, offset=offset)
    pos32 = rot.get_seq_pos(T, dtype=torch.float32, offset=offset)
    qbf = q32.to(torch.bfloat16)
    out_offbf = rot.rotate_queries_or_keys(qbf, offset=offset)
    posbf = rot.get_seq_pos(T, dtype=torch.bfloat16, offset=offset)
    arrays["offset_positions"] = npy(pos32).astype(np.float64)[:, None]
    arrays["offset_out"] = ours(out_off32)
    arrays["offset_x_bf16"] = ours(qbf)
    arrays["offset_positions_bf16"] = npy(posbf).astype(np.float64)[:, None]
    arrays["offset_out_bf16"] = ours(out_offbf)
    add_case(
        name,
        "rotary_embedding_torch.RotaryEmbedding.forward(pos) + apply_rotary_emb; RotaryEmbedding.rotate_queries_or_keys(q, offset)",
        {"constructor": {"dim": 16, "freqs_for": "lang", "theta": 10000}, "positions": LARGE_POSITIONS,
         "offset": offset, "q_shape_BNTH": [B, N, T, H]},
        arrays,
        "Explicit integer positions up to 2**20: angles = rot.forward(pos) (T,16) (positions times float32 inv_freq, "
        "each angle twice), out = apply_rotary_emb(angles, q) on the first 16 of 32 channels, interleaved. The float32 "
        "run multiplies in float32 (phase error ~ pos * 2**-24 rad, i.e. ~0.06 rad at 2**20); out_f64 multiplies the "
        "float32 inv_freq values by float64 positions (the accurate reference). offset_*: rotate_queries_or_keys(q, "
        f"offset={offset}) so positions are 2**20-12 .. 2**20; RET builds positions in the query dtype: exact in float32 "
        "(offset_positions), but with a bfloat16 query (offset_x_bf16 = x rounded to bf16) they round to "
        "offset_positions_bf16 (all 1048576) before the phase; offset_out_bf16 is the bf16 output upcast to float32.",
    )


def case_ret_xpos(L: int) -> None:
    name = f"ret_xpos_L{L}"
    rng = case_rng(f"xpos_L{L}")  # same q/k as torchscale_xpos_L{L}
    B, N, H = 1, 2, 64
    q_np = grid_normal(rng, (B, L, N, H))
    k_np = grid_normal(rng, (B, L, N, H))
    ctor = dict(dim=32, use_xpos=True, xpos_scale_base=512, cache_if_possible=False)
    rows = None if L <= 8 else np.array([0, 1, 2, L // 2 - 1, L // 2, L // 2 + 1, L - 3, L - 2, L - 1])
    arrays = {"q": q_np, "k": k_np}
    for suffix, dtype in (("", torch.float32), ("_f64", torch.float64)):
        with default_dtype(dtype):
            rot = RETRotaryEmbedding(**ctor).to(dtype)
            q, k = bnth(q_np).to(dtype), bnth(k_np).to(dtype)
            q_out, k_out = rot.rotate_queries_and_keys(q, k)
            seq = rot.get_seq_pos(L, dtype=dtype)
            scale = rot.get_scale(seq, seq_len=L)
            angles = rot.forward(seq, seq_len=L)
            lg = logits(q_out, k_out)
        if rows is not None:
            lg, q_out, k_out = lg[:, :, rows], q_out[:, :, rows], k_out[:, :, rows]
        arrays[f"q_out{suffix}"] = ours(q_out)
        arrays[f"k_out{suffix}"] = ours(k_out)
        arrays[f"logits{suffix}"] = npy(lg)
        arrays[f"scale{suffix}"] = npy(scale)
        arrays[f"angles{suffix}"] = npy(angles)
        arrays[f"zeta{suffix}"] = npy(rot.scale)
    arrays["positions"] = np.arange(L, dtype=np.float64)[:, None]
    if rows is not None:
        arrays["logit_rows"] = rows.astype(np.int64)
    notes = (
        "RET xPos: q,k (B,N,L,64) in RET (stored [B,L,N,64]); only channels 0..31 rotate (dim=32, interleaved pairs, "
        "theta 1e4). zeta_p = (2p + 0.4*32)/(1.4*32) (buffer `scale`, 16 values); scale = zeta**((n - L//2)/512) "
        "repeated twice per pair ([L,32]); q_out = rot(q)*scale, k_out = rot(k)/scale (scale multiplies cos and "
        "sin terms). Centre c = L//2 (floor). logits[B,N,Lq,Lk] = q_out @ k_out^T over all 64 channels. "
        "_f64: default dtype float64 (zeta genuinely float64), module .double(); lang inv_freq are the float32 values. "
    )
    if rows is not None:
        notes += ("L=300 (size): q_out, k_out (token axis) and logits (query axis) keep only the tokens listed in "
                  "logit_rows, for both runs; logits use all 300 keys. ")
    notes += "Inputs identical to torchscale_xpos_L%d (same rng stream)." % L
    add_case(name, "rotary_embedding_torch.RotaryEmbedding(use_xpos=True).rotate_queries_and_keys",
             {"constructor": ctor, "q_shape_BNTH": [B, N, L, H], "logit_rows": rows}, arrays, notes)


def case_ret_xpos_cached() -> None:
    name = "ret_xpos_cached_keys_L8"
    L = 8
    rng = case_rng("xpos_L8")  # same q/k as ret_xpos_L8
    B, N, H = 1, 2, 64
    q_np = grid_normal(rng, (B, L, N, H))
    k_np = grid_normal(rng, (B, L, N, H))
    ctor = dict(dim=32, use_xpos=True, xpos_scale_base=512, cache_if_possible=False)
    arrays = {"q": q_np[:, -1:], "k": k_np}
    for suffix, dtype in (("", torch.float32), ("_f64", torch.float64)):
        with default_dtype(dtype):
            rot = RETRotaryEmbedding(**ctor).to(dtype)
            q, k = bnth(q_np).to(dtype), bnth(k_np).to(dtype)
            q_out, k_out = rot.rotate_queries_with_cached_keys(q[:, :, -1:], k)
            fq, fk = rot.rotate_queries_and_keys(q, k)
        arrays[f"q_out{suffix}"] = ours(q_out)
        arrays[f"k_out{suffix}"] = ours(k_out)
        arrays[f"logits{suffix}"] = npy(logits(q_out, k_out))
        arrays[f"logits_full_last_row{suffix}"] = npy(logits(fq, fk)[:, :, -1:])
    assert not np.allclose(arrays["logits"], arrays["logits_full_last_row"], rtol=1e-5, atol=0)
    arrays["positions_q"] = np.array([[L - 1]], dtype=np.float64)
    arrays["positions_k"] = np.arange(L, dtype=np.float64)[:, None]
    add_case(
        name,
        "rotary_embedding_torch.RotaryEmbedding(use_xpos=True).rotate_queries_with_cached_keys",
        {"constructor": ctor, "call": "rotate_queries_with_cached_keys(q[:, :, -1:], k)", "q_shape_BNTH": [B, N, 1, H],
         "k_shape_BNTH": [B, N, L, H]},
        arrays,
        "One query (position 7) against 8 keys (positions 0..7), q = last token of ret_xpos_L8's q. RET rotates q at "
        "offset k_len - q_len = 7 with q_scale = get_scale(seq[-1:]) -> centre q_len//2 = 0, i.e. zeta**(7/512), and k "
        "with get_scale(seq) (centre k_len//2 = 4), inverse. So logits = logits_full_last_row * zeta_p**(4/512) per pair "
        "(they differ; the full call has one centre for q and k). k_out equals ret_xpos_L8's k_out. Layouts: "
        "q_out [B,1,N,64], k_out [B,8,N,64], logits [B,N,1,8].",
    )


# --------------------------------------------------------------------------------------
# torchscale
# --------------------------------------------------------------------------------------


def case_torchscale_xpos(L: int) -> None:
    name = f"torchscale_xpos_L{L}"
    rng = case_rng(f"xpos_L{L}")
    B, N, H = 1, 2, 64
    q_np = grid_normal(rng, (B, L, N, H))
    k_np = grid_normal(rng, (B, L, N, H))
    rows = None if L <= 8 else np.array([0, 1, 2, L // 2 - 1, L // 2, L // 2 + 1, L - 3, L - 2, L - 1])

    def to_ts(x):  # [B, L, N, H] -> (B*N, L, H)
        return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 2, 1, 3).reshape(B * N, L, H)))

    def from_ts(t):  # (B*N, l, H) -> [B, l, N, H]
        a = npy(t)
        return np.ascontiguousarray(a.reshape(B, N, a.shape[1], H).transpose(0, 2, 1, 3))

    arrays = {"q": q_np, "k": k_np}
    for suffix, dtype in (("", torch.float32), ("_f64", torch.float64)):
        with default_dtype(dtype):
            xpos = XPOS(H, scale_base=512).to(dtype)
            q, k = to_ts(q_np).to(dtype), to_ts(k_np).to(dtype)
            q_out = xpos(q, offset=0, downscale=False)
            k_out = xpos(k, offset=0, downscale=True)
            q_dec = xpos(q[:, -1:], offset=L - 1, downscale=False)
        assert q_out.dtype == dtype
        lg = torch.bmm(q_out, k_out.transpose(1, 2)).reshape(B, N, L, L)
        lg_dec = torch.bmm(q_dec, k_out.transpose(1, 2)).reshape(B, N, 1, L)
        if rows is not None:
            lg, q_out, k_out = lg[:, :, rows], q_out[:, rows], k_out[:, rows]
        arrays[f"q_out{suffix}"] = from_ts(q_out)
        arrays[f"k_out{suffix}"] = from_ts(k_out)
        arrays[f"logits{suffix}"] = npy(lg)
        arrays[f"q_dec_out{suffix}"] = from_ts(q_dec)
        arrays[f"logits_dec{suffix}"] = npy(lg_dec)
        arrays[f"zeta{suffix}"] = npy(xpos.scale)
    arrays["positions"] = np.arange(L, dtype=np.float64)[:, None]
    if rows is not None:
        arrays["logit_rows"] = rows.astype(np.int64)
    notes = (
        "torchscale XPOS on (B*N, L, 64) tensors (row b*N+n; stored as [B,L,N,64]); all 64 channels rotate, interleaved "
        "pairs (2p,2p+1), inv_freq 1/10000**(j/32) (fixed_pos_embedding with dim=32, i.e. 10000**(-2j/64)). "
        "zeta_p = (2p + 0.4*64)/(1.4*64) (32 values). Rotation positions offset..offset+L-1; scale exponent for "
        "position n is (n - c)/512 with c = ceil((L+offset)/2) (min_pos = -(L+offset)//2, Python floor); q_out = "
        "xpos(q, offset=0, downscale=False) (x zeta**((n-c)/512)), k_out = xpos(k, offset=0, downscale=True) (inverse). "
        "logits [B,N,Lq,Lk] = q_out @ k_out^T. Decode (as MultiheadAttention with incremental_state): q_dec_out = "
        "xpos(q[:, -1:], offset=L-1) -> position L-1, same centre ceil(L/2) as the keys, so logits_dec equals the last "
        "row of the full logits. _f64: XPOS built under default dtype float64 and .double() (zeta and inv_freq float64). "
        "Inputs identical to ret_xpos_L%d; note c differs from RET's floor(L/2) for odd L (q/k differ, logits agree). "
        % L
    )
    if rows is not None:
        notes += ("L=300 (size): q_out, k_out (token axis) and logits (query axis) keep only the tokens listed in "
                  "logit_rows, for both runs; logits use all 300 keys. ")
    add_case(name, "torchscale.component.xpos_relative_position.XPOS.forward",
             {"constructor": {"head_dim": H, "scale_base": 512},
              "q_call": {"offset": 0, "downscale": False}, "k_call": {"offset": 0, "downscale": True},
              "decode_q_call": {"offset": L - 1, "downscale": False, "q_len": 1},
              "x_shape": [B * N, L, H], "logit_rows": rows}, arrays, notes)


# --------------------------------------------------------------------------------------
# timm
# --------------------------------------------------------------------------------------


def _eva_apply(q_bnth: torch.Tensor, emb: torch.Tensor, npt: int, half: bool) -> torch.Tensor:
    """timm.models.eva.EvaAttention.forward's rope application (prefix tokens unrotated)."""
    return torch.cat([q_bnth[:, :, :npt, :], timm_pe.apply_rot_embed_cat(q_bnth[:, :, npt:, :], emb, half=half)], dim=2)


def case_timm_axial(Hg: int, Wg: int) -> None:
    name = f"timm_rope_axial_{Hg}x{Wg}"
    rng = case_rng(name)
    B, N, d = 1, 2, 32
    T = 1 + Hg * Wg
    x = grid_normal(rng, (B, T, N, d))
    kw = dict(feat_shape=[Hg, Wg], dim=d, temperature=100, in_pixels=False, grid_indexing="xy")
    sin, cos = timm_pe.build_rotary_pos_embed(**kw)
    emb = torch.cat([sin, cos], -1)
    mod = timm_pe.RotaryEmbeddingCat(dim=d, temperature=100, in_pixels=False, feat_shape=[Hg, Wg], grid_indexing="xy")
    assert torch.equal(mod.get_embed(), emb)
    out = _eva_apply(bnth(x), emb, npt=1, half=False)
    bands = timm_pe.freq_bands(d // 4, temperature=100.0, step=1)
    grid = timm_pe._build_grid([Hg, Wg], grid_type="index", grid_indexing="xy").reshape(-1, 2)
    sin64, cos64 = timm_pe.build_rotary_pos_embed(
        feat_shape=[Hg, Wg], bands=bands.double(), dim=d, in_pixels=False, grid_indexing="xy", dtype=torch.float64)
    emb64 = torch.cat([sin64, cos64], -1)
    assert emb64.dtype == torch.float64
    out64 = _eva_apply(bnth(x).double(), emb64, npt=1, half=False)
    arrays = {"x": x, "out": ours(out), "emb": emb, "bands": bands, "positions": npy(grid).astype(np.float64),
              "out_f64": ours(out64), "emb_f64": emb64}
    add_case(
        name,
        "timm.layers.pos_embed_sincos.build_rotary_pos_embed + apply_rot_embed_cat (as timm.models.eva.EvaAttention)",
        {"build_rotary_pos_embed": kw, "num_prefix_tokens": 1, "half": False, "x_shape_BTNH": [B, T, N, d]},
        arrays,
        f"RoPE-Axial (naver rope-vit via timm vit_*_patch16_rope_224). Token 0 is CLS and passes through (npt=1); "
        f"tokens 1.. are the {Hg}x{Wg} grid (H={Hg} rows, W={Wg} cols) in raster order. positions[HW,2] = (x=col, "
        "y=row) in timm's channel order for grid_indexing='xy'. bands = 100**(-j/8), j<8 (float32). emb[HW,64] = "
        "cat([sin, cos]) with interleaved layout: channel pair (2p,2p+1) has angle x*bands[p] for p<8 and "
        "y*bands[p-8] for p>=8. _f64: build_rotary_pos_embed(bands=bands.double(), dtype=float64) (the float32 band "
        "values, integer positions, sin/cos in float64) and x float64.",
    )


def case_timm_mixed() -> None:
    Hg, Wg = 12, 20
    name = f"timm_rope_mixed_{Hg}x{Wg}"
    rng = case_rng(name)
    B, N, d, depth = 1, 2, 32, 2
    T = 1 + Hg * Wg
    x = grid_normal(rng, (B, T, N, d))
    F = (rng.standard_normal((2, depth, N, d // 2)) * 0.5).astype(np.float32)
    w = grid_normal(rng, (depth, B, T, N, d))
    t_x, t_y = timm_pe.get_mixed_grid([Hg, Wg], grid_indexing="xy")
    F_t = torch.from_numpy(F.copy()).requires_grad_(True)
    emb = timm_pe.get_mixed_freqs(F_t, t_x, t_y)  # (depth, heads, HW, 2d)
    outs = []
    loss = 0.0
    for blk in range(depth):
        o = _eva_apply(bnth(x), emb[blk], npt=1, half=False)
        outs.append(ours(o))
        loss = loss + (o * bnth(w[blk])).sum()
    loss.backward()
    # timm's own init, as RotaryEmbeddingMixed.__init__ does (calls init_random_2d_freqs)
    torch.manual_seed(TIMM_MIXED_INIT_TORCH_SEED)
    m = timm_pe.RotaryEmbeddingMixed(dim=N * d, depth=depth, num_heads=N, temperature=10.0, grid_indexing="xy")
    torch.manual_seed(TIMM_MIXED_INIT_TORCH_SEED)
    init_angles = torch.rand(depth, N, 1) * 2 * torch.pi
    torch.manual_seed(TIMM_MIXED_INIT_TORCH_SEED)
    m_vits = timm_pe.RotaryEmbeddingMixed(dim=384, depth=12, num_heads=6, temperature=10.0, grid_indexing="xy")
    mag = 1.0 / (10.0 ** (torch.arange(0, d, 4, dtype=torch.float32) / d))
    ref = torch.stack([torch.cat([mag * torch.cos(init_angles), mag * torch.cos(init_angles + torch.pi / 2)], -1),
                       torch.cat([mag * torch.sin(init_angles), mag * torch.sin(init_angles + torch.pi / 2)], -1)])
    assert torch.allclose(m.freqs.detach(), ref, rtol=0, atol=1e-7)
    arrays = {
        "x": x, "F": F, "w": w,
        "positions": np.stack([npy(t_x), npy(t_y)], -1).astype(np.float64),
        "out": np.stack(outs, 0),
        "emb_block0": emb[0].detach(),
        "loss": np.asarray([loss.item()], dtype=np.float32),
        "grad_F": F_t.grad,
        "F_timm_init": m.freqs.detach(),
        "F_timm_init_angles": init_angles,
        "F_timm_init_vit_s": m_vits.freqs.detach(),
    }
    add_case(
        name,
        "timm.layers.pos_embed_sincos.get_mixed_grid + get_mixed_freqs + apply_rot_embed_cat (+ torch autograd); "
        "RotaryEmbeddingMixed.__init__ (init_random_2d_freqs)",
        {"get_mixed_grid": {"shape": [Hg, Wg], "grid_indexing": "xy"}, "F_shape": [2, depth, N, d // 2],
         "F_source": "numpy default_rng standard_normal * 0.5, float32", "num_prefix_tokens": 1, "half": False,
         "x_shape_BTNH": [B, T, N, d], "timm_init": {"torch_manual_seed": TIMM_MIXED_INIT_TORCH_SEED,
                                                    "RotaryEmbeddingMixed": {"dim": N * d, "depth": depth,
                                                                             "num_heads": N, "temperature": 10.0}},
         "timm_init_vit_s": {"torch_manual_seed": TIMM_MIXED_INIT_TORCH_SEED,
                             "RotaryEmbeddingMixed": {"dim": 384, "depth": 12, "num_heads": 6, "temperature": 10.0}}},
        arrays,
        "RoPE-Mixed (naver rope-vit via timm). F[2,depth,heads,16]: F[0] = x-frequencies, F[1] = y-frequencies. "
        "positions[HW,2] = (t_x=col, t_y=row) from get_mixed_grid([12,20],'xy'), raster order (row-major, H=12 rows, "
        "W=20 cols). Angle of pair p for block b, head h, token i: t_x[i]*F[0,b,h,p] + t_y[i]*F[1,b,h,p] (float32, "
        "get_mixed_freqs forces float32, so no f64 run); interleaved pairs (2p,2p+1). emb_block0[heads,HW,64] = "
        "cat([sin, cos]) for block 0. out[depth,B,T,N,H]: block b applied to the same x, token 0 = CLS unrotated. "
        "loss = sum_b sum(out[b] * w[b]); grad_F = dloss/dF. F_timm_init[2,2,2,16]: RotaryEmbeddingMixed(dim=64, "
        "depth=2, num_heads=2, temperature=10) right after torch.manual_seed(1234); F_timm_init_angles[depth,heads,1] "
        "= torch.rand(depth, heads, 1)*2*pi from the same seed (what init_random_2d_freqs draws): F[0] = "
        "[m cos(a), m cos(a+pi/2)], F[1] = [m sin(a), m sin(a+pi/2)], m = 10**(-4j/32), j<8. F_timm_init_vit_s: "
        "the ViT-S/16 shape (2,12,6,32) from the same seed, for distribution checks.",
    )


def case_timm_dinov3() -> None:
    Hg, Wg = 12, 20
    name = f"timm_dinov3_{Hg}x{Wg}"
    rng = case_rng(name)
    B, N, d, npt = 1, 2, 32, 5
    T = npt + Hg * Wg
    x = grid_normal(rng, (B, T, N, d))
    ctor = dict(dim=d, temperature=100.0)
    m = timm_pe.RotaryEmbeddingDinoV3(**ctor).eval()
    emb = m.get_embed(shape=[Hg, Wg])
    out = _eva_apply(bnth(x), emb, npt=npt, half=True)
    coords = timm_pe.make_coords_dinov3(Hg, Wg)
    with default_dtype(torch.float64):
        m64 = timm_pe.RotaryEmbeddingDinoV3(**ctor).double().eval()
    emb64 = m64.get_embed(shape=[Hg, Wg])
    assert emb64.dtype == torch.float64
    out64 = _eva_apply(bnth(x).double(), emb64, npt=npt, half=True)
    arrays = {"x": x, "out": ours(out), "emb": emb, "periods": m.periods, "positions": npy(coords).astype(np.float64),
              "out_f64": ours(out64), "emb_f64": emb64, "periods_f64": m64.periods}
    add_case(
        name,
        "timm.layers.pos_embed_sincos.RotaryEmbeddingDinoV3.get_embed + apply_rot_embed_cat(half=True)",
        {"constructor": {**ctor, "rotate_half": True, "grid_indexing": "ij", "normalize_coords": "separate",
                         "shift_coords": None, "jitter_coords": None, "rescale_coords": None},
         "mode": "eval", "get_embed_shape": [Hg, Wg], "num_prefix_tokens": npt, "half": True,
         "x_shape_BTNH": [B, T, N, d]},
        arrays,
        "DINOv3 RoPE (timm port), eval mode (no coordinate augmentation). Tokens 0..4 are CLS + 4 register tokens and "
        "pass through (as timm vit_*_dinov3, num_prefix_tokens=5); tokens 5.. are the 12x20 grid in raster order. "
        "positions[HW,2] = (h, w) coords = 2*((i+0.5)/n) - 1 per axis (float32, make_coords_dinov3). periods[8] = "
        "100**(2j/16) (float32). angle = 2*pi*coord/period; emb[HW,64] = cat([sin, cos]), half layout: pair p = "
        "channels (p, p+16), p<8 uses h, 8<=p<16 uses w. _f64: module under default float64 + .double(): periods and "
        "coords are the float32 values upcast, angles and sin/cos in float64; x float64.",
    )


# --------------------------------------------------------------------------------------
# transformers vision encoders
# --------------------------------------------------------------------------------------


def case_hf_qwen2vl_vision() -> None:
    name = "hf_qwen2vl_vision"
    rng = case_rng(name)
    cfg = Qwen2VLVisionConfig(embed_dim=32, num_heads=2, depth=1, spatial_merge_size=2)
    grid_thw = torch.tensor([[1, 4, 6], [2, 6, 4]])
    pos = get_vision_position_ids(grid_thw, cfg.spatial_merge_size)  # (T, 2) long (h, w)
    T = pos.shape[0]
    N, d = 2, 16
    q_np = grid_normal(rng, (1, T, N, d))
    k_np = grid_normal(rng, (1, T, N, d))
    rot = modeling_qwen2_vl.Qwen2VLVisionRotaryEmbedding(cfg)
    hidden = torch.zeros(T, cfg.embed_dim)
    cos, sin = rot(hidden, pos)
    q_out, k_out = modeling_qwen2_vl.apply_rotary_pos_emb_vision(torch.from_numpy(q_np[0]), torch.from_numpy(k_np[0]),
                                                                 cos, sin)
    arrays = {"q": q_np, "k": k_np, "q_out": npy(q_out)[None], "k_out": npy(k_out)[None],
              "positions": npy(pos).astype(np.float64), "cos": cos, "sin": sin, "inv_freq": rot.inv_freq,
              "grid_thw": npy(grid_thw).astype(np.int64)}
    add_case(
        name,
        "transformers.vision_utils.get_vision_position_ids + models.qwen2_vl.modeling_qwen2_vl."
        "Qwen2VLVisionRotaryEmbedding + apply_rotary_pos_emb_vision",
        {"config": {"embed_dim": 32, "num_heads": 2, "head_dim": d, "spatial_merge_size": 2,
                    "rope_parameters": dict(cfg.rope_parameters)},
         "grid_thw": grid_thw, "x_shape_BTNH": [1, T, N, d]},
        arrays,
        "Qwen2-VL vision tower RoPE. Two visual inputs in one packed sequence: grid_thw (1,4,6) -> tokens 0..23, "
        "(2,6,4) -> tokens 24..71. positions[T,2] = (h, w), 0-based, block-major over 2x2 merge windows (windows in "
        "raster order, raster inside a window), repeated for each t (t itself is not a position here). inv_freq[4] "
        "= 1/10000**(arange(0,8,2)/8) = 10000**(-4j/16). cos/sin[T,16] = [h*inv (4), w*inv (4)] duplicated: half "
        "layout, pair p = channels (p, p+8); p<4 uses h, 4<=p<8 uses w. q/k are (seq, heads, dim) in HF (stored with "
        "B=1). apply_rotary_pos_emb_vision computes in float32 (no f64 run). Attention is block-diagonal per "
        "image/frame in the model; only the rotation is tested here.",
    )


def case_hf_llama4_vision(grid: int, head_dim: int) -> None:
    name = f"hf_llama4_vision_{grid}x{grid}_d{head_dim}"
    rng = case_rng(name)
    N = 2
    patch = 14
    cfg = Llama4VisionConfig(hidden_size=N * head_dim, num_attention_heads=N, image_size=grid * patch,
                             patch_size=patch, num_hidden_layers=1, intermediate_size=64)
    rot = modeling_llama4.Llama4VisionRotaryEmbedding(cfg)
    freqs_ci = rot.freqs_ci  # (grid**2 + 1, 1, head_dim/2) complex64
    T = grid * grid + 1
    q_np = grid_normal(rng, (1, T, N, head_dim))
    k_np = grid_normal(rng, (1, T, N, head_dim))
    q_out, k_out = modeling_llama4.vision_apply_rotary_emb(torch.from_numpy(q_np), torch.from_numpy(k_np),
                                                           freqs_ci=freqs_ci)
    idx = np.arange(grid * grid)
    positions = np.zeros((T, 2), dtype=np.float64)
    positions[:-1, 0] = idx % grid + 1  # x = col + 1
    positions[:-1, 1] = idx // grid + 1  # y = row + 1
    arrays = {"q": q_np, "k": k_np, "q_out": q_out, "k_out": k_out, "positions": positions,
              "cos": freqs_ci.real[:, 0], "sin": freqs_ci.imag[:, 0]}
    add_case(
        name,
        "transformers.models.llama4.modeling_llama4.Llama4VisionRotaryEmbedding._compute_freqs_ci + vision_apply_rotary_emb",
        {"config": {"hidden_size": N * head_dim, "num_attention_heads": N, "head_dim": head_dim,
                    "image_size": grid * patch, "patch_size": patch, "rope_parameters": dict(cfg.rope_parameters)},
         "x_shape_BTNH": [1, T, N, head_dim]},
        arrays,
        f"Llama 4 vision RoPE, grid {grid}x{grid} (the anchor only supports square grids: idx = image_size // "
        "patch_size). Tokens 0..grid*grid-1 are patches in raster order (x fastest); the last token is CLS (appended "
        "last by Llama4VisionModel) with all angles 0 (masked), stored as position (0, 0). positions[T,2] = (x = col+1, "
        "y = row+1), 1-based. freqs f_j = 1/10000**(2j/(d/2)) = 10000**(-4j/d), j < d/4. Interleaved (complex "
        "view_as_complex) pairs (2p, 2p+1): p < d/4 rotates by x*f_p, p >= d/4 by y*f_{p-d/4}. cos/sin[T, d/2] = "
        "real/imag of freqs_ci. q/k are (B, T, heads, d) in HF (our layout). vision_apply_rotary_emb computes in "
        "float32 (no f64 run).",
    )


def case_hf_pixtral_vision() -> None:
    name = "hf_pixtral_vision"
    rng = case_rng(name)
    N, d = 2, 16
    cfg = PixtralVisionConfig(hidden_size=N * d, num_attention_heads=N, head_dim=d, num_hidden_layers=1,
                              intermediate_size=64, patch_size=16, image_size=128)
    grids = [(3, 5), (2, 4)]  # (rows, cols) in patches
    # positions exactly as PixtralVisionModel.forward builds them
    position_ids = []
    for ph, pw in grids:
        hpos_ids, wpos_ids = torch.meshgrid(torch.arange(ph), torch.arange(pw), indexing="ij")
        position_ids.append(torch.stack([hpos_ids.flatten(), wpos_ids.flatten()], dim=-1))
    position_ids = torch.cat(position_ids, dim=0)
    T = position_ids.shape[0]
    q_np = grid_normal(rng, (1, T, N, d))
    k_np = grid_normal(rng, (1, T, N, d))
    rot = modeling_pixtral.PixtralVisionRotaryEmbedding(cfg)
    patch_embeds = torch.zeros(1, T, N * d)
    cos, sin = rot(patch_embeds, position_ids)
    q_out, k_out = modeling_pixtral.apply_rotary_pos_emb(bnth(q_np), bnth(k_np), cos, sin, unsqueeze_dim=0)
    arrays = {"q": q_np, "k": k_np, "q_out": ours(q_out), "k_out": ours(k_out),
              "positions": npy(position_ids).astype(np.float64), "cos": cos, "sin": sin, "inv_freq": rot.inv_freq}
    add_case(
        name,
        "transformers.models.pixtral.modeling_pixtral.PixtralVisionRotaryEmbedding + apply_rotary_pos_emb(unsqueeze_dim=0)",
        {"config": {"hidden_size": N * d, "num_attention_heads": N, "head_dim": d,
                    "rope_parameters": dict(cfg.rope_parameters)},
         "image_grids_rows_cols": grids, "x_shape_BTNH": [1, T, N, d]},
        arrays,
        "Pixtral vision RoPE (HF, half layout). Two images in one sequence (3x5 then 2x4 patches, rows x cols), each "
        "in raster order; positions[T,2] = (row, col), 0-based, restarting per image (meshgrid 'ij' as "
        "PixtralVisionModel.forward). inv_freq[8] = cat(f[0::2], f[1::2]) with f = 1/10000**(arange(0,16,2)/16): h uses "
        "the even entries 10000**(-4j/16), w the odd ones 10000**(-(4j+2)/16). cos/sin[T,16] = [h angles (4), w angles "
        "(4)] duplicated: pair p = channels (p, p+8). q/k are (B, heads, T, d) in HF (stored [B,T,N,d]). Angles in "
        "float32 (no f64 run). Attention is block-diagonal per image in the model; only the rotation is tested.",
    )


def case_hf_gemma4_vision() -> None:
    name = "hf_gemma4_vision"
    rng = case_rng(name)
    N, d = 2, 16
    cfg = Gemma4VisionConfig(hidden_size=N * d, num_attention_heads=N, num_key_value_heads=N, head_dim=d,
                             num_hidden_layers=1, intermediate_size=64)
    grids = [(3, 5), (5, 3)]  # (patch rows, patch cols) per batch element
    pos = []
    for ph, pw in grids:  # Gemma4ImageProcessor step 5
        patch_grid = torch.meshgrid(torch.arange(pw), torch.arange(ph), indexing="xy")
        pos.append(torch.stack(patch_grid, dim=-1).reshape(ph * pw, 2))
    pos = torch.stack(pos, 0)  # (B, T, 2) = (x, y)
    B, T = pos.shape[:2]
    q_np = grid_normal(rng, (B, T, N, d))
    rot = modeling_gemma4.Gemma4VisionRotaryEmbedding(cfg)
    hidden = torch.zeros(B, T, N * d)
    cos, sin = rot(hidden, pos)
    out = modeling_gemma4.apply_multidimensional_rope(torch.from_numpy(q_np), cos, sin, pos)
    arrays = {"x": q_np, "out": out, "positions": npy(pos).astype(np.float64), "cos": cos, "sin": sin,
              "inv_freq": rot.inv_freq}
    add_case(
        name,
        "transformers.models.gemma4.modeling_gemma4.Gemma4VisionRotaryEmbedding + apply_multidimensional_rope",
        {"config": {"hidden_size": N * d, "num_attention_heads": N, "head_dim": d,
                    "rope_parameters": dict(cfg.rope_parameters)},
         "image_grids_rows_cols": grids, "x_shape_BTNH": [B, T, N, d]},
        arrays,
        "Gemma 4 vision RoPE, theta 100. Batch of 2 images: 3 rows x 5 cols and 5 rows x 3 cols (15 patches each, "
        "raster order). positions[B,T,2] = pixel_position_ids as Gemma4ImageProcessor builds them: [...,0] = x = "
        "column, [...,1] = y = row (meshgrid(arange(pw), arange(ph), indexing='xy')). inv_freq[4] = "
        "1/100**(arange(0,8,2)/8). cos/sin[B,T,16] = [x-angles, x-angles, y-angles, y-angles] (4 each). "
        "apply_multidimensional_rope splits the head into 2 halves of 8 channels: channels 0..7 rotate by x, 8..15 by "
        "y, each half in half layout (pairs (i, i+4) within the half). q/k are (B, T, heads, d) (our layout). Angles "
        "float32, no f64 run. q_norm (RMSNorm) precedes RoPE in the model; not included here.",
    )


# --------------------------------------------------------------------------------------
# VideoRoPE (NumPy float64 transcription)
# --------------------------------------------------------------------------------------


# Qwen2-VL special token ids (Qwen2VLConfig defaults), used to build the input_ids the official code parses.
QWEN2VL_VISION_START, QWEN2VL_VISION_END, QWEN2VL_IMAGE, QWEN2VL_VIDEO = 151652, 151653, 151655, 151656


def get_t_scale_rope_index_np(input_ids, image_grid_thw, video_grid_thw, spatial_merge_size=2, scale_factor=2.0):
    """Line-by-line NumPy transcription of VideoRoPE's get_t_scale_rope_index for one unpadded row.

    input_ids: 1-D int list. Returns ((3, S) float64 positions, rope delta).
    """
    input_tokens = list(input_ids)
    input_ids = np.asarray(input_ids)
    vision_start_indices = np.argwhere(input_ids == QWEN2VL_VISION_START)[:, 0]
    vision_tokens = input_ids[vision_start_indices + 1]
    image_nums = int((vision_tokens == QWEN2VL_IMAGE).sum())
    video_nums = int((vision_tokens == QWEN2VL_VIDEO).sum())
    image_index, video_index = 0, 0
    llm_pos_ids_list = []
    st = 0
    remain_images, remain_videos = image_nums, video_nums
    for _ in range(image_nums + video_nums):
        if QWEN2VL_IMAGE in input_tokens and remain_images > 0:
            ed_image = input_tokens.index(QWEN2VL_IMAGE, st)
        else:
            ed_image = len(input_tokens) + 1
        if QWEN2VL_VIDEO in input_tokens and remain_videos > 0:
            ed_video = input_tokens.index(QWEN2VL_VIDEO, st)
        else:
            ed_video = len(input_tokens) + 1
        if ed_image < ed_video:
            t, h, w = image_grid_thw[image_index]
            image_index += 1
            remain_images -= 1
            ed = ed_image
        else:
            t, h, w = video_grid_thw[video_index]
            video_index += 1
            remain_videos -= 1
            ed = ed_video
        llm_grid_t, llm_grid_h, llm_grid_w = t, h // spatial_merge_size, w // spatial_merge_size
        text_len = ed - st
        st_idx = llm_pos_ids_list[-1][0].max() + 1 if len(llm_pos_ids_list) > 0 else 0
        llm_pos_ids_list.append(np.broadcast_to(np.arange(text_len, dtype=np.float64), (3, text_len)) + st_idx)
        # body-diagonal symmetry
        t_index = np.repeat(np.arange(llm_grid_t), llm_grid_h * llm_grid_w)
        h_index = np.tile(np.repeat(np.arange(llm_grid_h), llm_grid_w), llm_grid_t) - (llm_grid_h - 1) // 2
        w_index = np.tile(np.arange(llm_grid_w), llm_grid_t * llm_grid_h) - (llm_grid_w - 1) // 2
        # time dim adjust step size
        t_index = t_index * scale_factor
        t_index = t_index + text_len + st_idx
        h_index = h_index + t_index
        w_index = w_index + t_index
        llm_pos_ids_list.append(np.stack([t_index, h_index, w_index]).astype(np.float64))
        st = ed + llm_grid_t * llm_grid_h * llm_grid_w
    if st < len(input_tokens):
        # next text token near last video token position = last t + 1
        st_idx = llm_pos_ids_list[-1][0].max() + 1 if len(llm_pos_ids_list) > 0 else 0
        text_len = len(input_tokens) - st
        llm_pos_ids_list.append(np.broadcast_to(np.arange(text_len, dtype=np.float64), (3, text_len)) + st_idx)
    llm_positions = np.concatenate(llm_pos_ids_list, axis=1).reshape(3, -1)
    delta = llm_positions[0].max() + 1 - len(input_tokens)
    return llm_positions, delta


def videorope_axis_of_pair(mrope_section):
    """Pair -> axis (0=T, 1=H, 2=W) of apply_m_modify_multimodal_rotary_pos_emb over the first half of the channels."""
    sec = [mrope_section[0], mrope_section[1] + mrope_section[2]]
    sec = (sec * 2)[::-1]  # (48, 16, 48, 16)
    axis = []
    for i, section in enumerate(sec):
        if i % 2 == 0:
            axis += [1 if j % 2 == 0 else 2 for j in range(section)]
        else:
            axis += [0] * section
    axis = np.asarray(axis)  # over the 2*P channels of cat(freqs, freqs)
    P = sum(mrope_section)
    assert np.array_equal(axis[:P], axis[P:])
    return axis[:P]


def case_videorope() -> None:
    name = "videorope_text3_video2x2x3_text2"
    rng = case_rng(name)
    d, theta, mrope_section = 128, 1e6, [16, 24, 24]
    video_grid_thw = [(2, 4, 6)]
    input_ids = [101, 102, QWEN2VL_VISION_START] + [QWEN2VL_VIDEO] * (2 * 2 * 3) + [QWEN2VL_VISION_END, 103]
    pos, delta = get_t_scale_rope_index_np(input_ids, [], video_grid_thw, spatial_merge_size=2, scale_factor=2.0)
    S = pos.shape[1]
    N = 2
    q_np = grid_normal(rng, (1, S, N, d)).astype(np.float64)
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    freqs = pos[:, :, None] * inv_freq[None, None, :]  # (3, S, 64)
    emb = np.concatenate([freqs, freqs], -1)  # (3, S, 128)
    cos3, sin3 = np.cos(emb), np.sin(emb)
    axis = videorope_axis_of_pair(mrope_section)  # (64,)
    ch_axis = np.concatenate([axis, axis])  # (128,)
    cos = cos3[ch_axis, :, np.arange(d)].T  # (S, 128)
    sin = sin3[ch_axis, :, np.arange(d)].T

    def rotate_half(x):
        return np.concatenate([-x[..., d // 2:], x[..., : d // 2]], -1)

    q = q_np.transpose(0, 2, 1, 3)  # (B, N, S, d)
    q_out = q * cos[None, None] + rotate_half(q) * sin[None, None]
    arrays = {"x": q_np, "out_f64": q_out.transpose(0, 2, 1, 3), "positions": pos.T.copy(),
              "inv_freq": inv_freq, "pair_axis": axis.astype(np.int64), "cos": cos, "sin": sin}
    add_case(
        name,
        "NumPy float64 transcription of Wiselnn570/VideoRoPE videorope-transformer/modeling_videorope.py "
        "(commit 7712ca3f52b795284e0453badc6cf1642c1368c4): Qwen2VLForConditionalGeneration.get_t_scale_rope_index "
        "(scale_factor=2.0, the which_rope=='videorope' branch) + Qwen2VLRotaryEmbedding.forward + "
        "apply_m_modify_multimodal_rotary_pos_emb",
        {"head_dim": d, "rope_theta": theta, "mrope_section": mrope_section, "scale_factor": 2.0,
         "spatial_merge_size": 2, "input_ids": input_ids,
         "token_ids": {"vision_start": QWEN2VL_VISION_START, "vision_end": QWEN2VL_VISION_END,
                       "video": QWEN2VL_VIDEO, "image": QWEN2VL_IMAGE},
         "video_grid_thw_unmerged": [2, 4, 6], "video_grid_merged": [2, 2, 3], "rope_delta": float(delta),
         "x_shape_BTNH": [1, S, N, d]},
        arrays,
        "Sequence text(3) + video (T=2, H'=2, W'=3 merged; grid_thw (2,4,6), merge 2) + text(2) = 17 tokens, B=1; "
        "input_ids = [101, 102, <vision_start>, 12 x <video>, <vision_end>, 103] (Qwen2-VL token ids), parsed as the "
        "official code does. "
        "positions[S,3] = (t, h, w) floats: text 0,1,2 on all rows; video t = 3 + 2.0*i_t, h = t + i_h - (H'-1)//2, "
        "w = t + i_w - (W'-1)//2 (tokens t-major, then h, then w); next text starts at max(video t row)+1 = 6. "
        "rope_delta = max(t row)+1 - 17. inv_freq[64] = 1/1e6**(arange(0,128,2)/128) (float64 here; the official "
        "code uses float32). pair_axis[64] (0=T,1=H,2=W): pairs 0..47 alternate H (even p) / W (odd p), pairs "
        "48..63 are T; half layout, pair p = channels (p, p+64), angle = positions[:, pair_axis[p]] * inv_freq[p]. "
        "cos/sin[S,128] after the recomposition. x/out_f64 are float64 (NumPy only; no torch float32 run).",
    )


# --------------------------------------------------------------------------------------


SKIPPED.extend([
    {"case": "hf_llama4_vision non-square grid",
     "reason": "Llama4VisionRotaryEmbedding._compute_freqs_ci builds an idx x idx grid with idx = image_size // "
               "patch_size (integer image_size only), so only square grids exist; 4x4 (d=16) and 6x6 (d=88) stored."},
    {"case": "_f64 runs of hf_* vision cases",
     "reason": "the HF vision rotary modules compute angles from position_ids.float() * inv_freq.float() (float32); "
               "apply_rotary_pos_emb_vision and vision_apply_rotary_emb also cast q/k with .float(); a float64 run "
               "would not be a float64 anchor computation."},
    {"case": "timm_rope_mixed_12x20 _f64 run",
     "reason": "timm get_mixed_freqs casts freqs and t_x/t_y to float32 (.float()) before the angles."},
    {"case": "videorope float32 torch run",
     "reason": "VideoRoPE has no pip package; only the NumPy float64 transcription is stored (checked while writing "
               "this script against the official functions extracted from the file and run in torch float64)."},
])


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float32)

    for freqs_for in ("pixel", "lang"):
        for with_offsets in (False, True):
            case_ret_axial(freqs_for, with_offsets)
    case_ret_learned(custom=True)
    case_ret_learned(custom=False)
    for s in (1.0, 2.0, 8.0):
        case_ret_theta_rescale(s)
    case_ret_interpolate()
    case_ret_large_positions()
    for L in (5, 8, 300):
        case_ret_xpos(L)
    case_ret_xpos_cached()
    for L in (5, 8, 300):
        case_torchscale_xpos(L)
    case_timm_axial(14, 14)
    case_timm_axial(12, 20)
    case_timm_mixed()
    case_timm_dinov3()
    case_hf_qwen2vl_vision()
    case_hf_llama4_vision(4, 16)
    case_hf_llama4_vision(6, 88)
    case_hf_pixtral_vision()
    case_hf_gemma4_vision()
    case_videorope()

    meta = {
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "rotary-embedding-torch": getattr(rotary_embedding_torch, "__version__", None)
            or _dist_version("rotary-embedding-torch"),
            "timm": timm.__version__,
            "torchscale": getattr(torchscale, "__version__", None) or _dist_version("torchscale"),
            "torchvision": _dist_version("torchvision"),
            "torchvision_nms_schema_shim": _TV_SHIM_LIB is not None,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "videorope_commit": "7712ca3f52b795284e0453badc6cf1642c1368c4",
        },
        "seed": SEED,
        "timm_mixed_init_torch_seed": TIMM_MIXED_INIT_TORCH_SEED,
        "script": "scripts/make_rope_variant_golden.py",
        "layout": "activations x[B, T, N, H]; spatial grids flattened into T in raster order; positions float64 "
                  "[T, A] or [B, T, A]; logits [B, N, Tq, Tk]; suffix _f64 = float64 run of the same anchor",
        "input_rng": "numpy.random.default_rng([seed, zlib.crc32(case_key)]) with case_key = the case name, except the "
                     "xPos cases (case_key 'xpos_L<L>', shared by ret_xpos_L<L>, torchscale_xpos_L<L> and "
                     "ret_xpos_cached_keys_L8); values round(normal*256)/256 as float32",
        "skipped": SKIPPED,
    }
    os.makedirs(os.path.dirname(NPZ_PATH), exist_ok=True)
    np.savez_compressed(NPZ_PATH, **ARRAYS)
    with open(JSON_PATH, "w") as f:
        json.dump({"meta": meta, "cases": CASES}, f, indent=1)
        f.write("\n")
    print(f"wrote {len(CASES)} cases, {len(ARRAYS)} arrays: {NPZ_PATH} ({os.path.getsize(NPZ_PATH)} bytes), "
          f"{JSON_PATH} ({os.path.getsize(JSON_PATH)} bytes)")


def _dist_version(dist: str):
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    sys.exit(main())
