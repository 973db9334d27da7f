"""Golden RoPE outputs from HuggingFace transformers' own rotary code, per model family.

What it makes
-------------
``tests/golden/hf_rope_families.npz`` (``np.savez_compressed``) and
``tests/golden/hf_rope_families.json`` (the index into it). They exist so that
``roformer_jax.rope.from_hf_config(config, layer=...)`` can be checked against what each model
family's attention actually does to q and k, layer by layer.

For every *rotary case* (``"kind": "rotary"``) the JSON holds the config.json-style text config
dict the HF config was built from (``ConfigClass.from_dict(copy.deepcopy(config))``; keys left out
there are left out here, so defaults come from the config class), the standardised
``rope_parameters`` HF ended up with, and per layer:

* ``rope``: whether that layer's attention rotates q/k at all (NoPE layers: ``false``, no arrays);
* ``entry``: the exact transformers callables used (rotary class + apply function, with the
  ``layer_type`` argument the model passes);
* ``layout``: a descriptor of what the entry does (pairing, rotary block, M-RoPE axes), which the
  script checks against an independent float64 NumPy rotation;
* arrays (npz keys): ``q_f64`` (float64 output), ``q_f32`` (ordinary float32 output),
  ``inv_freq_f64`` (the float64 inverse frequencies the module ended up using, read after the
  forward call, so Phi-3's long/short branch shows), and ``attention_scaling`` (float, what HF
  multiplies into cos/sin).

Layouts: ``x`` is ``[B, T, N, H]`` float32 (B=2, T=7, N=2; H = the family's real head dim; HF's
``[B, N, T, H]`` is a transpose of it), ``positions`` is ``[B, T]`` int64, or ``[B, T, 3]``
(last axis = t, h, w) for M-RoPE (HF: ``[3, B, T]``). Outputs are ``[B, T, N, H]`` in HF's q/k
weight channel order, rotated exactly as the layer's attention rotates q (k gets the same op:
every entry is called with ``k = q.clone()`` and asserted equal), channels outside the rotary
block untouched, attention factor included. Row 0 of ``positions`` is always < 2048, row 1 goes
up to 2**20 (except Phi-3's short-branch case, whose max+1 must stay <= 4096). ``q_f32`` holds
only the batch rows listed in ``f32_rows`` (those with every position < 2048), taken from a
float32 run on the whole batch (so batch-global decisions such as Phi-3's branch are the same).

float64 ("exact") goldens: transformers hard-codes float32 (``torch.float``, ``torch.float32``,
``Tensor.float()``) in its rope init functions and rotary forwards. Inside
``float64_transformers(...)`` the script (1) replaces the module-global ``torch`` of
``transformers.modeling_rope_utils`` and of the family's ``modeling_*.py`` by a proxy whose
``float``/``float32`` attributes are ``torch.float64`` (everything else is the real torch), (2)
patches ``torch.Tensor.float`` to return float64, and (3) sets torch's default dtype to float64;
then it builds the rotary module and runs it and the apply function on float64 x and int64
positions. Nothing is cast from float32: the inverse frequencies are computed in float64 by
transformers' own init function. The script asserts that every ``inv_freq_f64`` is float64,
differs from the float32 one, and matches an independent float64 NumPy transcription of the
rope type (default, linear, llama3, yarn, longrope, proportional) to 1e-14 relative; and that
every ``q_f64`` matches an independent NumPy rotation built from ``inv_freq_f64`` and the
``layout`` descriptor to 1e-12 absolute (so no float32 step hides inside the forward).

M-RoPE position cases (``"kind": "mrope_positions"``): ``get_rope_index`` of
``Qwen2VLModel`` / ``Qwen2_5_VLModel`` / ``Qwen3VLModel`` (5.23 has no
``modeling_rope_utils.get_mrope_index``), bound to a stub object that holds only ``config`` and
the model's own ``get_vision_position_ids``. Inputs are described as runs per batch row; outputs
are ``position_ids`` ``[B, T, 3]`` and ``rope_deltas`` ``[B]``, plus ``*_v4`` arrays from a NumPy
transcription of the transformers-4.5x semantics (see ``v4_rope_index``).

Entry points per family (modeling module = ``transformers.models.<family>.modeling_<family>``):

* llama (3.1, v4 and v5 keys): ``LlamaRotaryEmbedding(cfg)(x, pos)`` + ``apply_rotary_pos_emb``
* mistral / qwen2 (+ YaRN) / qwen3 / gemma2 / smollm3 / gpt_neox / phi3: ``<X>RotaryEmbedding``
  + the module's ``apply_rotary_pos_emb`` (gpt_neox, phi3: partial/prefix form); smollm3 only
  where ``no_rope_layers[i] == 1``; phi3 longrope picks short/long from ``max(position_ids)+1``
* qwen2_vl / qwen2_5_vl: ``<X>RotaryEmbedding(cfg)(x, pos[3,B,T])`` (chunked
  ``recomposition_frequencies``) + ``apply_rotary_pos_emb``
* qwen3_vl / qwen3_5: ``Qwen3VLTextRotaryEmbedding`` / ``Qwen3_5TextRotaryEmbedding`` (interleaved
  ``recomposition_frequencies``) + ``apply_rotary_pos_emb``; qwen3_5 only on ``full_attention``
  layers (``linear_attention`` = Gated DeltaNet, no RoPE)
* gemma3 / modernbert: ``<X>RotaryEmbedding(cfg)(x, pos, layer_type)`` + ``apply_rotary_pos_emb``
* gemma4: ``Gemma4TextRotaryEmbedding(cfg)(x, pos, layer_type)`` +
  ``apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=2)`` (one tensor, [B,T,N,H]); global layers
  use ``per_layer_config`` head dim 512 (their own ``x`` array)
* cohere2: ``Cohere2RotaryEmbedding`` (``repeat_interleave`` cos/sin) + ``apply_rotary_pos_emb``
  (interleaved ``rotate_half``), only on sliding layers (``if self.sliding_window is not None``)
* glm / glm4: ``<X>RotaryEmbedding`` + ``apply_rotary_pos_emb`` (first half of cos/sin
  ``repeat_interleave``d: interleaved pairs inside the partial rotary block)
* deepseek_v2: ``DeepseekV2RotaryEmbedding`` (complex ``freqs_cis``) +
  ``modeling_deepseek_v2.apply_rotary_emb`` on the last ``qk_rope_head_dim`` channels
  (interleaved in, interleaved out)
* deepseek_v3: ``DeepseekV3RotaryEmbedding`` + ``apply_rotary_pos_emb_interleave`` (since
  ``rope_interleave`` defaults to True) on the last ``qk_rope_head_dim`` channels: interleaved in,
  de-interleaved (half layout) out
* gptj: ``create_sinusoidal_positions(max(pos)+1, rotary_dim)`` + the gather done in
  ``GPTJAttention.forward`` + ``apply_rotary_pos_emb(q_rot, sin, cos)`` (``rotate_every_two``)
* codegen: ``CodeGenRotaryEmbedding(cfg)(x, pos)`` (its own ``create_sinusoidal_positions`` table, built with
  ``n_positions = max(pos)+1``) + ``CodeGenAttention.forward``'s slicing + ``apply_rotary_pos_emb(q_rot, sin, cos)``
  (``rotate_every_two``): GPT-J's mechanism, in CodeGen's own code
* llama4: ``Llama4TextRotaryEmbedding`` (complex) + ``apply_rotary_emb`` where
  ``no_rope_layers[i] == 1``; NoPE layers also get ``Llama4TextAttention.forward``'s temperature
  tuning recorded (identity q_proj, stub cache with 8188 past tokens, captured q).

How to run
----------
From the repository root::

    /tmp/refvenv/bin/python scripts/make_hf_rope_families_golden.py

with the venv made by::

    python3.11 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch==2.13.0 transformers==5.24.0 numpy

(CPU torch; numpy 2.4.6 was used). If the venv also holds an unloadable torchvision (pip's CUDA build
next to CPU torch, e.g. pulled in by timm), the script hides it from transformers; it uses no image
code. Deterministic: inputs come from a seeded ``numpy.random.default_rng`` and all computations
run on CPU; two runs give byte-identical files (about 20 s).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import sys
import time
import types

import numpy as np
import torch


def _hide_unloadable_torchvision():
    """``import transformers`` imports torchvision whenever it is installed. pip's torchvision wheel is a CUDA
    build, which cannot load its ops next to a CPU-only torch (``operator torchvision::nms does not exist``),
    e.g. when timm pulled it into the venv. Nothing here needs image code, so an unloadable torchvision is
    hidden (``importlib.util.find_spec`` returns None for a ``None`` entry in ``sys.modules``)."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("torchvision") is None:
        return
    if subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True).returncode != 0:
        sys.modules["torchvision"] = None


_hide_unloadable_torchvision()

import transformers  # noqa: E402
from transformers import modeling_rope_utils  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_NPZ = os.path.join(REPO_ROOT, "tests", "golden", "hf_rope_families.npz")
OUT_JSON = os.path.join(REPO_ROOT, "tests", "golden", "hf_rope_families.json")
SCRIPT = "scripts/make_hf_rope_families_golden.py"
SEED = 20251126

B, T, N = 2, 7, 2
POS_SMALL = [0, 1, 2, 255, 256, 1000, 2047]
POS_LARGE = [4096, 8191, 8192, 65535, 131071, 524287, 1 << 20]
F32_MAX_POS = 2048


# ----------------------------------------------------------------------------- float64 mode


class _Float64Torch:
    """Stands in for the ``torch`` module inside transformers' rope code: float32 names -> float64."""

    float = torch.float64
    float32 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


@contextlib.contextmanager
def float64_transformers(*modules):
    """Run transformers' rope init/forward/apply code in float64 (see module docstring)."""
    saved = [(m, m.torch) for m in modules]
    orig_float = torch.Tensor.float
    orig_default = torch.get_default_dtype()
    proxy = _Float64Torch()
    try:
        for m in modules:
            m.torch = proxy
        torch.Tensor.float = lambda self, *a, **k: self.to(torch.float64)
        torch.set_default_dtype(torch.float64)
        yield
    finally:
        torch.set_default_dtype(orig_default)
        torch.Tensor.float = orig_float
        for m, t in saved:
            m.torch = t


# ----------------------------------------------------------------------------- array store


class Store:
    """npz arrays with content de-duplication (identical arrays share one key)."""

    def __init__(self):
        self.arrays = {}
        self._by_hash = {}

    def put(self, key, arr):
        arr = np.ascontiguousarray(arr)
        h = hashlib.sha256(arr.dtype.str.encode() + str(arr.shape).encode() + arr.tobytes()).hexdigest()
        if h in self._by_hash:
            return self._by_hash[h]
        assert key not in self.arrays, key
        self.arrays[key] = arr
        self._by_hash[h] = key
        return key


# ----------------------------------------------------------------------------- NumPy references


def np_inv_freq(rp, head_dim, max_position_embeddings, seq_len=None):
    """Independent float64 transcription of transformers' inverse frequencies for one rope dict."""
    rope_type = rp.get("rope_type", "default")
    base = float(rp["rope_theta"])
    prf = rp.get("partial_rotary_factor", 1.0)
    if rope_type == "proportional":
        k = int(prf * head_dim // 2)
        inv = 1.0 / base ** (np.arange(0, 2 * k, 2, dtype=np.float64) / head_dim)
        inv = np.concatenate([inv, np.zeros(head_dim // 2 - k)])
        return inv / rp.get("factor", 1.0)
    dim = int(head_dim * prf)
    expo = np.arange(0, dim, 2, dtype=np.float64) / dim
    if rope_type == "default":
        return 1.0 / base**expo
    if rope_type == "linear":
        return 1.0 / base**expo / rp["factor"]
    if rope_type == "ntk_alpha":  # HunYuan's fixed-alpha NTK: the base stretched by alpha ** (dim / (dim - 2))
        return 1.0 / (base * rp["alpha"] ** (dim / (dim - 2)))**expo
    if rope_type == "llama3":
        inv = 1.0 / base**expo
        factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        inv_l = np.where(wl > low_wl, inv / factor, inv)
        with np.errstate(divide="ignore", invalid="ignore"):
            smooth = (old / wl - lo) / (hi - lo)
            smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l  # nan where hi == lo; never selected
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        return np.where(medium, smoothed, inv_l)
    if rope_type == "yarn":
        orig = rp["original_max_position_embeddings"]
        factor = rp.get("factor") or max_position_embeddings / orig
        beta_fast = rp.get("beta_fast") or 32
        beta_slow = rp.get("beta_slow") or 1

        def corr(rot):
            return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

        low, high = corr(beta_fast), corr(beta_slow)
        if rp.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        pos_freqs = base**expo
        extra = 1.0 - ramp
        return (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra
    if rope_type == "longrope":
        orig = rp["original_max_position_embeddings"]
        ext = rp["long_factor"] if (seq_len and seq_len > orig) else rp["short_factor"]
        return 1.0 / (np.asarray(ext, dtype=np.float64) * base**expo)
    raise ValueError(rope_type)


def mrope_axes(mrope, n_pairs):
    """Axis (0=t, 1=h, 2=w) of each frequency pair, as HF's recomposition_frequencies assigns it."""
    sec = mrope["section"]
    if mrope["style"] == "chunked":
        axes = np.concatenate([np.full(s, i % 3) for i, s in enumerate(sec)])
    else:  # interleaved: T everywhere, then H at 1::3 below 3*s_h, W at 2::3 below 3*s_w
        axes = np.zeros(n_pairs, dtype=np.int64)
        for d, off in ((1, 1), (2, 2)):
            axes[off : sec[d] * 3 : 3] = d
    assert axes.shape == (n_pairs,), (axes.shape, n_pairs)
    return axes


def np_rotate(x, pos, inv_freq, attn, layout):
    """Independent float64 rotation described by ``layout`` (x [B,T,N,H], pos [B,T] or [B,T,3])."""
    P = inv_freq.shape[0]
    o, r = layout["rotary_offset"], layout["rotary_dim"]
    assert r == 2 * P
    if pos.ndim == 2:
        ang = pos.astype(np.float64)[..., None] * inv_freq
    else:
        ang = pos.astype(np.float64)[..., mrope_axes(layout["mrope"], P)] * inv_freq
    c = (np.cos(ang) * attn)[:, :, None, :]
    s = (np.sin(ang) * attn)[:, :, None, :]
    blk = x[..., o : o + r]
    if layout["pairing"] == "half":
        x1, x2 = blk[..., :P], blk[..., P:]
    else:
        x1, x2 = blk[..., 0::2], blk[..., 1::2]
    y1, y2 = x1 * c - x2 * s, x2 * c + x1 * s
    if layout["pairing"] == "half" or layout["output"] == "deinterleaved":
        yb = np.concatenate([y1, y2], axis=-1)
    else:
        yb = np.stack([y1, y2], axis=-1).reshape(blk.shape)
    out = x.copy()
    out[..., o : o + r] = yb
    return out


def layout_desc(pairing, rotary_dim, rotary_offset=0, output="in_place", mrope=None):
    return {
        "pairing": pairing,
        "rotary_offset": rotary_offset,
        "rotary_dim": rotary_dim,
        "output": output,
        "mrope": mrope,
    }


# ----------------------------------------------------------------------------- family runners
# Each runner: (config, x [B,T,N,H] torch, pos torch, layer_idx, layer_type) ->
#   (out [B,T,N,H], inv_freq tensor, attention_scaling, entry, layout)


def _bnth(x):
    return x.transpose(1, 2)


def std_runner(mod, rot_name, *, per_layer_type=False, mrope=None, pairing="half"):
    def run(config, x, pos, i, layer_type):
        rot = getattr(mod, rot_name)(config)
        q = _bnth(x)
        p = pos.permute(2, 0, 1) if mrope else pos  # HF: [3, B, T]
        cos, sin = rot(q, p, layer_type) if per_layer_type else rot(q, p)
        qo, ko = mod.apply_rotary_pos_emb(q, q.clone(), cos, sin)
        assert torch.equal(qo, ko)
        pre = f"{layer_type}_" if per_layer_type else ""
        inv = getattr(rot, f"{pre}inv_freq")
        att = getattr(rot, f"{pre}attention_scaling")
        lt_arg = f", {layer_type!r}" if per_layer_type else ""
        pos_arg = "position_ids[3,B,T]" if mrope else "position_ids"
        entry = (
            f"{mod.__name__.split('.')[-1]}.{rot_name}(config).forward(x, {pos_arg}{lt_arg}) + "
            f"{mod.__name__.split('.')[-1]}.apply_rotary_pos_emb(q, k, cos, sin)"
        )
        r = 2 * inv.shape[0]
        if mrope:
            sec = config.rope_parameters["mrope_section"]
            mr = {"style": mrope, "section": list(sec)}
        else:
            mr = None
        return _bthn(qo), inv, att, entry, layout_desc(pairing, r, mrope=mr)

    return run


def _bthn(q):
    return q.transpose(1, 2).contiguous()


def gemma4_runner(mod):
    def run(config, x, pos, i, layer_type):
        rot = mod.Gemma4TextRotaryEmbedding(config)
        cos, sin = rot(x, pos, layer_type)
        qo = mod.apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=2)
        ko = mod.apply_rotary_pos_emb(x.clone(), cos, sin, unsqueeze_dim=2)
        assert torch.equal(qo, ko)
        inv = getattr(rot, f"{layer_type}_inv_freq")
        att = getattr(rot, f"{layer_type}_attention_scaling")
        entry = (
            f"modeling_gemma4.Gemma4TextRotaryEmbedding(config).forward(x, position_ids, {layer_type!r}) + "
            "modeling_gemma4.apply_rotary_pos_emb(x[B,T,N,H], cos, sin, unsqueeze_dim=2) (q and k separately)"
        )
        return qo, inv, att, entry, layout_desc("half", 2 * inv.shape[0])

    return run


def llama4_runner(mod):
    def run(config, x, pos, i, layer_type):
        rot = mod.Llama4TextRotaryEmbedding(config)
        freqs_cis = rot(x, pos)
        qo, ko = mod.apply_rotary_emb(x, x.clone(), freqs_cis)
        assert torch.equal(qo, ko)
        entry = (
            "modeling_llama4.Llama4TextRotaryEmbedding(config).forward(x, position_ids) -> freqs_cis (complex) + "
            "modeling_llama4.apply_rotary_emb(q[B,T,N,H], k, freqs_cis)"
        )
        return qo, rot.inv_freq, rot.attention_scaling, entry, layout_desc("interleaved", 2 * rot.inv_freq.shape[0])

    return run


def deepseek_v2_runner(mod):
    def run(config, x, pos, i, layer_type):
        rot = mod.DeepseekV2RotaryEmbedding(config)
        q = _bnth(x)
        freqs_cis = rot(q, pos)
        q_nope, q_pe = torch.split(q, [config.qk_nope_head_dim, config.qk_rope_head_dim], dim=-1)
        q_pe_o, k_pe_o = mod.apply_rotary_emb(q_pe, q_pe.clone(), freqs_cis)
        assert torch.equal(q_pe_o, k_pe_o)
        qo = torch.cat((q_nope, q_pe_o), dim=-1)
        entry = (
            "modeling_deepseek_v2.DeepseekV2RotaryEmbedding(config).forward(x, position_ids) -> freqs_cis (complex) + "
            "modeling_deepseek_v2.apply_rotary_emb(q_pe, k_pe, freqs_cis) on q[..., qk_nope_head_dim:], "
            "then cat((q_nope, q_pe)) as DeepseekV2Attention.forward"
        )
        lay = layout_desc("interleaved", config.qk_rope_head_dim, rotary_offset=config.qk_nope_head_dim)
        return _bthn(qo), rot.inv_freq, rot.attention_scaling, entry, lay

    return run


def deepseek_v3_runner(mod):
    def run(config, x, pos, i, layer_type):
        rot = mod.DeepseekV3RotaryEmbedding(config)
        q = _bnth(x)
        cos, sin = rot(q, pos)
        q_pass, q_rot = torch.split(q, [config.qk_nope_head_dim, config.qk_rope_head_dim], dim=-1)
        assert config.rope_interleave
        qr, kr = mod.apply_rotary_pos_emb_interleave(q_rot, q_rot.clone(), cos, sin)
        assert torch.equal(qr, kr)
        qo = torch.cat((q_pass, qr), dim=-1)
        entry = (
            "modeling_deepseek_v3.DeepseekV3RotaryEmbedding(config).forward(x, position_ids) + "
            "modeling_deepseek_v3.apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin) on q[..., qk_nope_head_dim:] "
            "(config.rope_interleave=True), then cat((q_pass, q_rot)) as DeepseekV3Attention.forward"
        )
        lay = layout_desc(
            "interleaved", config.qk_rope_head_dim, rotary_offset=config.qk_nope_head_dim, output="deinterleaved"
        )
        return _bthn(qo), rot.inv_freq, rot.attention_scaling, entry, lay

    return run


def gptj_runner(mod):
    def run(config, x, pos, i, layer_type):
        rd = config.rotary_dim
        num_pos = int(pos.max()) + 1
        table = mod.create_sinusoidal_positions(num_pos, rd)  # what GPTJAttention builds (for n_positions)
        # --- GPTJAttention.forward ---
        embed_positions = table.repeat(pos.shape[0], 1, 1)  # _get_embed_positions
        repeated_position_ids = pos.unsqueeze(-1).repeat(1, 1, embed_positions.shape[-1])
        sincos = torch.gather(embed_positions, 1, repeated_position_ids).to(x.dtype)
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        qo, inv = _rotate_every_two_first(mod, x, rd, sin, cos)
        entry = (
            "modeling_gptj.create_sinusoidal_positions(max(position_ids)+1, rotary_dim) + the gather of "
            "GPTJAttention.forward + modeling_gptj.apply_rotary_pos_emb(q[..., :rotary_dim], sin, cos) "
            "(rotate_every_two); inv_freq_f64 recomputed by the script with create_sinusoidal_positions' expression"
        )
        return qo, inv, 1.0, entry, layout_desc("interleaved", rd)

    return run


def _rotate_every_two_first(mod, x, rd, sin, cos):
    """GPT-J's and CodeGen's attention: q[..., :rotary_dim] (and k, checked equal) through the module's
    apply_rotary_pos_emb (rotate_every_two), the rest passed; and the inverse frequencies of
    create_sinusoidal_positions' expression (not exposed by transformers)."""
    q_rot, q_pass = x[:, :, :, :rd], x[:, :, :, rd:]
    k_rot = mod.apply_rotary_pos_emb(x.clone()[:, :, :, :rd], sin, cos)
    q_rot = mod.apply_rotary_pos_emb(q_rot, sin, cos)
    assert torch.equal(q_rot, k_rot)
    inv = 1.0 / (10000 ** (torch.arange(0, rd, 2, dtype=torch.int64) / rd))
    return torch.cat([q_rot, q_pass], dim=-1), inv


def codegen_runner(mod):
    def run(config, x, pos, i, layer_type):
        rd = config.rotary_dim
        # CodeGen's own rotary module, its table of n_positions rows built with max(position_ids)+1 rows (the same
        # function) so that row 1 (up to 2**20) can be gathered
        table_config = copy.deepcopy(config)
        table_config.n_positions = int(pos.max()) + 1
        sin, cos = mod.CodeGenRotaryEmbedding(table_config)(x, pos)
        # --- CodeGenAttention.forward (rotary_dim set) ---
        qo, inv = _rotate_every_two_first(mod, x, rd, sin, cos)
        entry = (
            "modeling_codegen.CodeGenRotaryEmbedding(config with n_positions = max(position_ids)+1)(x, position_ids) "
            "+ CodeGenAttention.forward's slicing + modeling_codegen.apply_rotary_pos_emb(q[..., :rotary_dim], sin, "
            "cos) (rotate_every_two); inv_freq_f64 recomputed by the script with create_sinusoidal_positions' "
            "expression"
        )
        return qo, inv, 1.0, entry, layout_desc("interleaved", rd)

    return run


# ----------------------------------------------------------------------------- layer plans


def plan_all(config, n_layers, what="all layers rotate"):
    lts = getattr(config, "layer_types", None) or ["full_attention"] * n_layers
    return [(i, lts[i], True, what) for i in range(n_layers)]


def plan_no_rope_layers(config, n_layers, cls_attn):
    out = []
    for i in range(n_layers):
        use = bool(config.no_rope_layers[i])
        why = f"{cls_attn}: use_rope = config.no_rope_layers[{i}] = {config.no_rope_layers[i]}"
        out.append((i, config.layer_types[i], use, why))
    return out


def plan_cohere2(config, n_layers):
    out = []
    for i in range(n_layers):
        lt = config.layer_types[i]
        use = lt == "sliding_attention" and config.sliding_window is not None
        out.append((i, lt, use, "Cohere2Attention: RoPE only if self.sliding_window is not None (sliding layers)"))
    return out


def plan_qwen3_5(config, n_layers):
    return [
        (i, lt, lt == "full_attention", "Qwen3_5DecoderLayer: linear_attention = Gated DeltaNet (no RoPE)")
        for i, lt in enumerate(config.layer_types[:n_layers])
    ]


# ----------------------------------------------------------------------------- cases

PHI3_LONG = [
    1.0299999713897705, 1.0499999523162842, 1.0499999523162842, 1.0799999237060547, 1.2299998998641968,
    1.2299998998641968, 1.2999999523162842, 1.4499999284744263, 1.5999999046325684, 1.6499998569488525,
    1.8999998569488525, 2.859999895095825, 3.68999981880188, 5.419999599456787, 5.489999771118164,
    5.489999771118164, 9.09000015258789, 11.579999923706055, 15.65999984741211, 15.769999504089355,
    15.789999961853027, 18.360000610351562, 21.989999771118164, 23.079999923706055, 30.009998321533203,
    32.35000228881836, 32.590003967285156, 35.56000518798828, 39.95000457763672, 53.840003967285156,
    56.20000457763672, 57.95000457763672, 59.29000473022461, 59.77000427246094, 59.920005798339844,
    61.190006256103516, 61.96000671386719, 62.50000762939453, 63.3700065612793, 63.48000717163086,
    63.48000717163086, 63.66000747680664, 63.850006103515625, 64.08000946044922, 64.760009765625,
    64.80001068115234, 64.81001281738281, 64.81001281738281,
]  # fmt: skip
PHI3_SHORT = (
    [1.05] * 3 + [1.1] * 3 + [1.2500000000000002] * 2 + [1.4000000000000004, 1.4500000000000004,
     1.5500000000000005, 1.8500000000000008, 1.9000000000000008] + [2.000000000000001] * 19
    + [2.1000000000000005] * 2 + [2.2] + [2.3499999999999996] * 4 + [2.3999999999999995] * 2
    + [2.6499999999999986, 2.6999999999999984, 2.8999999999999977, 2.9499999999999975] + [3.049999999999997] * 3
)  # fmt: skip
assert len(PHI3_SHORT) == len(PHI3_LONG) == 48

LLAMA31_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}
GEMMA3_V5_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
}


def rotary_cases():
    """(name, model_type, module, config class, config dict, format, runner factory, plan, extra)."""
    M = {
        n: __import__(f"transformers.models.{n}.modeling_{n}", fromlist=["x"])
        for n in (
            "llama", "mistral", "qwen2", "qwen3", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "gemma2",
            "gemma3", "gemma4", "phi3", "deepseek_v2", "deepseek_v3", "gpt_neox", "gptj", "llama4", "smollm3",
            "cohere2", "modernbert", "glm", "glm4", "codegen",
        )
    }  # fmt: skip
    tf = transformers
    C = []

    def add(name, model_type, mod, cls, cfg, fmt, runner, plan=None, notes="", pos_kind="text", x_group=None, **kw):
        C.append(
            dict(
                name=name,
                model_type=model_type,
                mod=mod,
                cls=cls,
                config=cfg,
                fmt=fmt,
                runner=runner,
                plan=plan or (lambda c, n: plan_all(c, n)),
                notes=notes,
                pos_kind=pos_kind,
                x_group=x_group or name,
                **kw,
            )
        )

    m = M["llama"]
    llama = {
        "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_hidden_layers": 2, "max_position_embeddings": 131072, "vocab_size": 128256,
    }  # fmt: skip
    add(
        "llama3_1", "llama", m, tf.LlamaConfig, {**llama, "rope_theta": 500000.0, "rope_scaling": dict(LLAMA31_SCALING)},
        "v4", std_runner(m, "LlamaRotaryEmbedding"),
        notes="Llama-3.1-8B rope (v4 keys rope_theta + rope_scaling). All layers identical.", x_group="llama3_1",
    )
    add(
        "llama3_1_v5", "llama", m, tf.LlamaConfig,
        {**llama, "rope_parameters": {**LLAMA31_SCALING, "rope_theta": 500000.0}},
        "v5", std_runner(m, "LlamaRotaryEmbedding"),
        notes="Same as llama3_1 in v5 rope_parameters form; same x, so arrays are shared (identical).",
        x_group="llama3_1",
    )
    m = M["mistral"]
    add(
        "mistral_7b_v0_3", "mistral", m, tf.MistralConfig,
        {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
         "num_hidden_layers": 2, "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": None},
        "v4", std_runner(m, "MistralRotaryEmbedding"), notes="Mistral-7B-v0.3: default RoPE, theta 1e6, head 128.",
    )  # fmt: skip
    m = M["qwen2"]
    qwen25 = {
        "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
        "num_hidden_layers": 2, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
    }  # fmt: skip
    add("qwen2_5_7b", "qwen2", m, tf.Qwen2Config, dict(qwen25), "v4", std_runner(m, "Qwen2RotaryEmbedding"),
        notes="Qwen2.5-7B: default RoPE, theta 1e6, head 3584/28 = 128.")  # fmt: skip
    add(
        "qwen2_5_7b_yarn", "qwen2", m, tf.Qwen2Config,
        {**qwen25, "max_position_embeddings": 131072,
         "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}},
        "v4", std_runner(m, "Qwen2RotaryEmbedding"),
        notes="Qwen2.5 long-context recipe from the model card (legacy key 'type': 'yarn'); attention_scaling = "
        "0.1*ln(4)+1 multiplies cos/sin.",
    )  # fmt: skip
    m = M["qwen3"]
    add(
        "qwen3_8b", "qwen3", m, tf.Qwen3Config,
        {"hidden_size": 4096, "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 8,
         "head_dim": 128, "num_hidden_layers": 2, "max_position_embeddings": 40960, "rope_theta": 1000000.0},
        "v4", std_runner(m, "Qwen3RotaryEmbedding"), notes="Qwen3-8B: default RoPE, theta 1e6, head 128.",
    )  # fmt: skip
    m = M["qwen2_vl"]
    add(
        "qwen2_vl_7b_text", "qwen2_vl", m, tf.Qwen2VLTextConfig,
        {"hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
         "num_hidden_layers": 2, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
         "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}},
        "v4", std_runner(m, "Qwen2VLRotaryEmbedding", mrope="chunked"), pos_kind="mrope",
        notes="Qwen2-VL-7B text: chunked M-RoPE [16,24,24] over the 64 pairs (t: pairs 0-15, h: 16-39, w: 40-63), "
        "half layout; v4 'type': 'mrope' is rewritten to rope_type 'default' by Qwen2VLTextConfig.",
    )  # fmt: skip
    m = M["qwen2_5_vl"]
    add(
        "qwen2_5_vl_7b_text", "qwen2_5_vl", m, tf.Qwen2_5_VLTextConfig,
        {"hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
         "num_hidden_layers": 2, "max_position_embeddings": 128000,
         "rope_parameters": {"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1000000.0}},
        "v5", std_runner(m, "Qwen2_5_VLRotaryEmbedding", mrope="chunked"), pos_kind="mrope",
        notes="Qwen2.5-VL-7B text in v5 rope_parameters form: chunked M-RoPE [16,24,24], theta 1e6.",
    )  # fmt: skip
    m = M["qwen3_vl"]
    add(
        "qwen3_vl_8b_text", "qwen3_vl", m, tf.Qwen3VLTextConfig,
        {"hidden_size": 4096, "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 8,
         "head_dim": 128, "num_hidden_layers": 2, "max_position_embeddings": 262144, "rope_theta": 5000000,
         "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"}},
        "v4", std_runner(m, "Qwen3VLTextRotaryEmbedding", mrope="interleaved"), pos_kind="mrope",
        notes="Qwen3-VL-8B text: interleaved M-RoPE [24,20,20] (pair p: h if p%3==1 and p<60, w if p%3==2 and "
        "p<60, else t), theta 5e6. Qwen3VLTextRotaryEmbedding ignores the mrope_interleaved flag (always "
        "interleaved).",
    )  # fmt: skip
    m = M["qwen3_5"]
    add(
        "qwen3_5_text", "qwen3_5", m, tf.Qwen3_5TextConfig,
        {"hidden_size": 4096, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256,
         "num_hidden_layers": 8, "full_attention_interval": 4, "max_position_embeddings": 262144,
         "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "default",
                             "rope_theta": 10000000, "partial_rotary_factor": 0.25}},
        "v5", std_runner(m, "Qwen3_5TextRotaryEmbedding", mrope="interleaved"), plan=plan_qwen3_5, pos_kind="mrope",
        notes="Qwen3.5 text: partial 0.25 of head 256 -> rotary block = channels 0..63 (half layout inside it, "
        "inv_freq = theta^(-2p/64)), interleaved M-RoPE [11,11,10], theta 1e7; channels 64..255 pass through. "
        "linear_attention layers (Gated DeltaNet) have no RoPE.",
    )  # fmt: skip
    m = M["gemma2"]
    add(
        "gemma2_9b", "gemma2", m, tf.Gemma2Config,
        {"hidden_size": 3584, "intermediate_size": 14336, "num_attention_heads": 16, "num_key_value_heads": 8,
         "head_dim": 256, "num_hidden_layers": 4, "max_position_embeddings": 8192, "rope_theta": 10000.0,
         "sliding_window": 4096, "query_pre_attn_scalar": 256},
        "v4", std_runner(m, "Gemma2RotaryEmbedding"),
        notes="Gemma-2-9B: sliding/full alternate but share one default RoPE (theta 1e4, head 256).",
    )  # fmt: skip
    m = M["gemma3"]
    g3 = {"hidden_size": 2560, "intermediate_size": 10240, "num_attention_heads": 8, "num_key_value_heads": 4,
          "head_dim": 256, "num_hidden_layers": 8, "sliding_window": 1024}  # fmt: skip
    g3_runner = std_runner(m, "Gemma3RotaryEmbedding", per_layer_type=True)
    add(
        "gemma3_v4", "gemma3_text", m, tf.Gemma3TextConfig,
        {**g3, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
         "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window_pattern": 6},
        "v4", g3_runner, x_group="gemma3",
        notes="Gemma 3 (4B-like) with v4 keys: rope_theta -> full_attention, rope_local_base_freq -> "
        "sliding_attention, rope_scaling applies to full_attention only. Pattern 6 -> layer 5 full.",
    )  # fmt: skip
    add(
        "gemma3_v5", "gemma3_text", m, tf.Gemma3TextConfig,
        {**g3, "rope_parameters": copy.deepcopy(GEMMA3_V5_ROPE),
         "layer_types": ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 2},
        "v5", g3_runner, x_group="gemma3",
        notes="Same as gemma3_v4 in v5 form (rope_parameters keyed by layer type, explicit layer_types); same x, "
        "arrays shared.",
    )  # fmt: skip
    add(
        "gemma3_4b_published", "gemma3_text", m, tf.Gemma3TextConfig,
        {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 8,
         "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
        "v4", g3_runner, x_group="gemma3",
        notes="google/gemma-3-4b-it text_config as published (num_hidden_layers cut 34 -> 8): no rope_theta, "
        "rope_local_base_freq, head_dim or sliding_window_pattern, so Gemma3TextConfig defaults give global theta "
        "1e6 (+ linear 8), local 1e4, head_dim 256, pattern 6. Arrays equal gemma3_v4's.",
    )  # fmt: skip
    add(
        "gemma3_1b_like", "gemma3_text", m, tf.Gemma3TextConfig,
        {"hidden_size": 1152, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
         "num_hidden_layers": 8, "rope_theta": 1000000, "rope_local_base_freq": 10000, "rope_scaling": None,
         "sliding_window": 512, "sliding_window_pattern": 6},
        "v4", g3_runner, x_group="gemma3",
        notes="Gemma-3-1B-style: rope_scaling null -> full_attention is plain default RoPE theta 1e6.",
    )  # fmt: skip
    m = M["gemma4"]
    g4 = {"hidden_size": 2560, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
          "num_hidden_layers": 6, "sliding_window": 512}  # fmt: skip
    add(
        "gemma4_text", "gemma4_text", m, tf.Gemma4TextConfig,
        {**g4, "global_head_dim": 512,
         "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                "rope_theta": 1000000.0}}},
        "v5", gemma4_runner(m), x_group="gemma4", per_layer_head_dim=True,
        notes="Gemma 4 text: sliding default theta 1e4 on head 256; full_attention 'proportional' on the global "
        "head dim 512 (per_layer_config): inv_freq = theta^(-2p/512) for p < int(0.25*512//2) = 64, then 64 zeros; "
        "half layout across the whole 512 head (pairs (p, p+256)), so channels 64..255 and 320..511 are unrotated. "
        "Global layers have their own x (layer arrays 'x').",
    )  # fmt: skip
    add(
        "gemma4_text_defaults", "gemma4_text", m, tf.Gemma4TextConfig, dict(g4), "v5", gemma4_runner(m),
        x_group="gemma4", per_layer_head_dim=True,
        notes="Gemma 4 text with rope_parameters and global_head_dim left out: Gemma4TextConfig defaults "
        "(identical to gemma4_text; arrays shared).",
    )  # fmt: skip
    m = M["phi3"]
    phi3 = {
        "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 32,
        "num_hidden_layers": 2, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0, "sliding_window": 262144,
        "rope_scaling": {"long_factor": PHI3_LONG, "short_factor": PHI3_SHORT, "type": "longrope"},
    }  # fmt: skip
    phi_note = (
        "Phi-3-mini-128k-style longrope (factors of the published Phi-3(-vision)-128k-instruct config; that config "
        "says 'type': 'su', which 5.23 cannot load: KeyError for original_max_position_embeddings, so 'longrope' is "
        "used). factor = 131072/4096 = 32, attention_scaling = sqrt(1 + ln 32 / ln 4096) on both branches. "
        "transformers picks the branch for the whole batch from max(position_ids)+1 > 4096 "
        "(dynamic_rope_update / longrope_frequency_update). "
    )
    add("phi3_longrope_short", "phi3", m, tf.Phi3Config, copy.deepcopy(phi3), "v4", std_runner(m, "Phi3RotaryEmbedding"),
        pos_kind="phi3_short", x_group="phi3",
        notes=phi_note + "Here max+1 = 4096 <= 4096: short factors (row 1 is 2048..4095, no 2**20 row).")  # fmt: skip
    add("phi3_longrope_long", "phi3", m, tf.Phi3Config, copy.deepcopy(phi3), "v4", std_runner(m, "Phi3RotaryEmbedding"),
        x_group="phi3",
        notes=phi_note + "Here max+1 > 4096: long factors for every row, including row 0 (positions < 2048).")  # fmt: skip
    m = M["deepseek_v2"]
    add(
        "deepseek_v2_lite", "deepseek_v2", m, tf.DeepseekV2Config,
        {"hidden_size": 2048, "intermediate_size": 10944, "num_attention_heads": 16, "num_key_value_heads": 16,
         "num_hidden_layers": 2, "q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
         "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 163840, "rope_theta": 10000,
         "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                          "original_max_position_embeddings": 4096, "type": "yarn"}},
        "v4", deepseek_v2_runner(m), deepseek=True,
        notes="DeepSeek-V2-Lite: YaRN on the 64 rope channels (head_dim := qk_rope_head_dim), q head = 128 nope + "
        "64 rope. attention_scaling = mscale(40,0.707)/mscale(40,0.707) = 1; the softmax scale gets "
        "mscale(40, mscale_all_dim)^2 (layer field softmax_scaling, from modeling_deepseek_v2.yarn_apply_mscale). "
        "Interleaved pairs in and out (complex view_as_complex / view_as_real).",
    )  # fmt: skip
    m = M["deepseek_v3"]
    add(
        "deepseek_v3", "deepseek_v3", m, tf.DeepseekV3Config,
        {"hidden_size": 7168, "intermediate_size": 18432, "num_attention_heads": 128, "num_key_value_heads": 128,
         "num_hidden_layers": 2, "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
         "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 163840,
         "rope_theta": 10000,
         "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                          "original_max_position_embeddings": 4096, "type": "yarn"}},
        "v4", deepseek_v3_runner(m), deepseek=True,
        notes="DeepSeek-V3: YaRN (mscale 1.0/1.0 -> attention_scaling 1; softmax_scaling = 192^-0.5 * "
        "(0.1 ln 40 + 1)^2). rope_interleave (default True): apply_rotary_pos_emb_interleave reads pairs "
        "(2p, 2p+1) of the 64 rope channels and writes them DE-interleaved: out[128+p] = x[2p]cos - x[2p+1]sin, "
        "out[160+p] = x[2p+1]cos + x[2p]sin (q and k get the same permutation, so q.k is unchanged).",
    )  # fmt: skip
    m = M["gpt_neox"]
    add(
        "gpt_neox_pythia_1_4b", "gpt_neox", m, tf.GPTNeoXConfig,
        {"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 16, "num_hidden_layers": 2,
         "max_position_embeddings": 2048, "rotary_pct": 0.25, "rotary_emb_base": 10000},
        "v4", std_runner(m, "GPTNeoXRotaryEmbedding"),
        notes="Pythia-1.4B keys rotary_pct / rotary_emb_base (GPTNeoXConfig maps them to partial_rotary_factor / "
        "rope_theta): rotary block = first 32 of 128 channels, half layout inside it (pairs (p, p+16)).",
    )  # fmt: skip
    m = M["gptj"]
    add(
        "gptj_6b", "gptj", m, tf.GPTJConfig,
        {"n_embd": 4096, "n_head": 16, "n_layer": 2, "n_positions": 2048, "rotary_dim": 64},
        "v4", gptj_runner(m),
        notes="GPT-J-6B: theta fixed 10000 (no config key), rotary_dim 64 of head 256, interleaved "
        "(rotate_every_two). The real model's table has n_positions = 2048 rows (positions beyond raise in gather); "
        "here the table is built with max(position_ids)+1 rows by the same function so row 1 (up to 2**20) "
        "can be computed.",
    )  # fmt: skip
    m = M["llama4"]
    add(
        "llama4_scout_text", "llama4_text", m, tf.Llama4TextConfig,
        {"hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_attention_heads": 40,
         "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 8, "max_position_embeddings": 10485760,
         "rope_theta": 500000.0,
         "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                          "original_max_position_embeddings": 8192, "rope_type": "llama3"},
         "attention_chunk_size": 8192, "use_qk_norm": True, "attn_temperature_tuning": True, "floor_scale": 8192,
         "attn_scale": 0.1},
        "v4", llama4_runner(m), plan=lambda c, n: plan_no_rope_layers(c, n, "Llama4TextAttention"), llama4=True,
        notes="Llama-4-Scout text: no_rope_layers left out -> [int((i+1) % 4 != 0)] (1 = USES RoPE); layers 3, 7 "
        "NoPE ('full_attention'), others 'chunked_attention'. Interleaved complex RoPE, llama3 scaling with "
        "low_freq_factor == high_freq_factor == 1 (HF warns; the smoothing branch divides by zero but is never "
        "selected). qk_norm (L2, after RoPE) is not part of q_f64. NoPE layers carry temperature_tuning.",
    )  # fmt: skip
    m = M["smollm3"]
    add(
        "smollm3_3b", "smollm3", m, tf.SmolLM3Config,
        {"hidden_size": 2048, "intermediate_size": 11008, "num_attention_heads": 16, "num_key_value_heads": 4,
         "num_hidden_layers": 8, "max_position_embeddings": 65536, "rope_theta": 5000000.0,
         "no_rope_layers": [1, 1, 1, 0, 1, 1, 1, 0], "no_rope_layer_interval": 4, "use_sliding_window": False},
        "v4", std_runner(m, "SmolLM3RotaryEmbedding"),
        plan=lambda c, n: plan_no_rope_layers(c, n, "SmolLM3Attention"),
        notes="SmolLM3-3B: no_rope_layers (1 = uses RoPE) -> layers 3, 7 NoPE; theta 5e6, head 128, half layout.",
    )  # fmt: skip
    m = M["cohere2"]
    add(
        "cohere2_r7b", "cohere2", m, tf.Cohere2Config,
        {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
         "num_hidden_layers": 8, "max_position_embeddings": 132096, "rope_theta": 50000.0, "sliding_window": 4096,
         "sliding_window_pattern": 4},
        "v4", std_runner(m, "Cohere2RotaryEmbedding", pairing="interleaved"), plan=plan_cohere2,
        notes="Command R7B-like: sliding_window_pattern 4 -> layers 3, 7 full_attention WITHOUT RoPE; sliding "
        "layers rotate interleaved pairs (2p, 2p+1) (cos/sin repeat_interleave'd, rotate_half on ::2/1::2, q/k "
        "upcast with .float()). head_dim forced to hidden/heads = 128.",
    )  # fmt: skip
    m = M["modernbert"]
    add(
        "modernbert_base", "modernbert", m, tf.ModernBertConfig,
        {"hidden_size": 768, "intermediate_size": 1152, "num_attention_heads": 12, "num_hidden_layers": 6,
         "max_position_embeddings": 8192, "global_rope_theta": 160000.0, "local_rope_theta": 10000.0,
         "global_attn_every_n_layers": 3, "local_attention": 128},
        "v4", std_runner(m, "ModernBertRotaryEmbedding", per_layer_type=True),
        notes="ModernBERT-base: layer i full_attention iff i % 3 == 0 (theta 160000 = global_rope_theta), others "
        "sliding (theta 10000 = local_rope_theta); head 64, half layout.",
    )  # fmt: skip
    m = M["glm"]
    add(
        "glm_4_9b_chat_hf", "glm", m, tf.GlmConfig,
        {"hidden_size": 4096, "intermediate_size": 13696, "num_attention_heads": 32, "num_key_value_heads": 2,
         "head_dim": 128, "num_hidden_layers": 2, "max_position_embeddings": 131072, "partial_rotary_factor": 0.5,
         "rope_theta": 10000.0},
        "v4", std_runner(m, "GlmRotaryEmbedding", pairing="interleaved"),
        notes="GLM-4-9B-chat-hf: partial 0.5 -> first 64 of 128 channels rotate, INTERLEAVED pairs (2p, 2p+1) with "
        "inv_freq theta^(-2p/64) (apply_rotary_pos_emb takes the first half of cos/sin and repeat_interleaves it).",
    )  # fmt: skip
    m = M["glm4"]
    add(
        "glm4_9b_0414", "glm4", m, tf.Glm4Config,
        {"hidden_size": 4096, "intermediate_size": 13696, "num_attention_heads": 32, "num_key_value_heads": 2,
         "head_dim": 128, "num_hidden_layers": 2, "max_position_embeddings": 32768, "partial_rotary_factor": 0.5,
         "rope_theta": 10000.0},
        "v4", std_runner(m, "Glm4RotaryEmbedding", pairing="interleaved"),
        notes="GLM-4-0414: same rotary as glm (partial 0.5, interleaved inside the rotary block).",
    )  # fmt: skip
    m = M["codegen"]  # last: the cases before it draw the same inputs as before it was added
    add(
        "codegen_2b", "codegen", m, tf.CodeGenConfig,
        {"n_embd": 2560, "n_head": 32, "n_layer": 2, "n_positions": 2048, "rotary_dim": 64},
        "v4", codegen_runner(m),
        notes="CodeGen-2B (Salesforce/codegen-2B-mono's geometry): GPT-J's mechanism in CodeGen's own code: theta "
        "fixed 10000 (no config key), rotary_dim 64 of head 80, interleaved (rotate_every_two). The real model's "
        "table has n_positions = 2048 rows; here CodeGenRotaryEmbedding is built with max(position_ids)+1 rows so "
        "row 1 (up to 2**20) can be computed.",
    )  # fmt: skip
    return C


# ----------------------------------------------------------------------------- Llama 4 temperature tuning


class _StubCache:
    def __init__(self, past):
        self.past = past

    def get_seq_length(self, layer_idx=0):
        return self.past

    def update(self, k, v, layer_idx, **kwargs):  # 5.24 passes kwargs=
        return k, v


def llama4_temperature(mod, config_dict, layer_idx, x_bthd, past_seen):
    """q after Llama4TextAttention.forward on a NoPE layer (q_proj = identity), captured at the attention call."""
    cfg_d = copy.deepcopy(config_dict)
    H = x_bthd.shape[-1]
    cfg_d.update(hidden_size=N * H, num_attention_heads=N, num_key_value_heads=N, head_dim=H)
    config = transformers.Llama4TextConfig.from_dict(cfg_d)
    config._attn_implementation = "eager"
    attn = mod.Llama4TextAttention(config, layer_idx)
    assert not attn.use_rope
    with torch.no_grad():
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj):
            lin.weight.copy_(torch.eye(N * H, dtype=lin.weight.dtype))
    captured = {}

    def capture(module, query, key, value, attention_mask, **kw):
        captured["q"] = query
        return torch.zeros_like(query).transpose(1, 2), None

    orig = mod.eager_attention_forward
    mod.eager_attention_forward = capture
    try:
        hs = x_bthd.reshape(x_bthd.shape[0], x_bthd.shape[1], N * H)
        with torch.no_grad():
            attn(hs, None, None, past_key_values=_StubCache(past_seen))
    finally:
        mod.eager_attention_forward = orig
    return captured["q"].transpose(1, 2).contiguous()  # [B, T, N, H]


# ----------------------------------------------------------------------------- building one rotary case


def make_positions(kind, rng):
    if kind == "text":
        return np.array([POS_SMALL, POS_LARGE], dtype=np.int64)
    if kind == "phi3_short":
        return np.array([POS_SMALL, [2048, 2049, 3000, 4000, 4093, 4094, 4095]], dtype=np.int64)
    if kind == "mrope":
        small = rng.integers(0, F32_MAX_POS, size=(T, 3))
        large = rng.integers(F32_MAX_POS, (1 << 20) + 1, size=(T, 3))
        large[3, 0] = 1 << 20
        large[5, 2] = 1 << 20
        return np.stack([small, large]).astype(np.int64)
    raise ValueError(kind)


def build_config(case):
    cfg = case["cls"].from_dict(copy.deepcopy(case["config"]))
    return cfg


def rope_params_for(config, layer_type):
    rp = config.rope_parameters
    keys = config.nested_rope_parameter_keys(rp) if hasattr(config, "nested_rope_parameter_keys") else []
    return rp[layer_type] if keys else rp


def run_rotary_case(case, rng, store, xs_cache):
    name = case["name"]
    mod = case["mod"]
    config = build_config(case)
    n_layers = config.num_hidden_layers
    plan = case["plan"](config, n_layers)

    pos = make_positions(case["pos_kind"], rng)
    f32_rows = [b for b in range(B) if int(pos[b].max()) < F32_MAX_POS]

    def head_dim_of(i):
        if case.get("deepseek"):
            return config.qk_nope_head_dim + config.qk_rope_head_dim
        if case.get("per_layer_head_dim"):
            return config.per_layer_config[i].head_dim
        if case["model_type"] in ("gptj", "codegen"):
            return config.n_embd // config.n_head
        return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads

    main_hd = head_dim_of(0)

    def x_for(hd):
        k = (case["x_group"], hd)
        if k not in xs_cache:
            xs_cache[k] = rng.standard_normal((B, T, N, hd), dtype=np.float32)
        return xs_cache[k]

    x_main = x_for(main_hd)
    entry_case = {
        "name": name,
        "kind": "rotary",
        "model_type": case["model_type"],
        "config": case["config"],
        "config_format": case["fmt"],
        "hf_config_class": case["cls"].__name__,
        "hf_rope_parameters": getattr(config, "rope_parameters", None),
        "head_dim": int(main_hd),
        "num_heads": N,
        "num_layers": int(n_layers),
        "f32_rows": f32_rows,
        "arrays": {"x": store.put(f"{name}/x", x_main), "positions": store.put(f"{name}/positions", pos)},
        "notes": case["notes"],
        "layers": [],
    }
    for i, lt, use, why in plan:
        lay = {"layer": i, "layer_type": lt, "rope": bool(use)}
        hd = head_dim_of(i)
        if not use:
            lay["entry"] = why
            if case.get("llama4"):
                lay["temperature_tuning"] = llama4_temperature_entry(case, config, i, x_for(hd), store)
            entry_case["layers"].append(lay)
            continue
        x = x_for(hd)
        pos_t = torch.from_numpy(pos)
        # float64: transformers' own code with float32 names mapped to float64
        with float64_transformers(modeling_rope_utils, mod):
            cfg64 = build_config(case)
            out64, inv64, att64, entry, layout = case["runner"](cfg64, torch.from_numpy(x.astype(np.float64)), pos_t, i, lt)
        # float32: unmodified
        cfg32 = build_config(case)
        out32, inv32, att32, _, _ = case["runner"](cfg32, torch.from_numpy(x), pos_t, i, lt)
        assert out64.dtype == torch.float64 and inv64.dtype == torch.float64, (name, out64.dtype, inv64.dtype)
        assert out32.dtype == torch.float32 and inv32.dtype == torch.float32, (name, out32.dtype, inv32.dtype)
        assert float(att64) == float(att32), (name, att64, att32)
        q64, q32 = out64.numpy(), out32.numpy()
        inv64n, inv32n = inv64.numpy(), inv32.numpy()
        assert q64.shape == x.shape and q32.shape == x.shape
        check_case_layer(case, config, lt, hd, pos, x, q64, q32, inv64n, inv32n, float(att64), layout, f32_rows)
        lay.update(
            entry=entry,
            layout=layout,
            arrays={
                "q_f64": store.put(f"{name}/L{i}/q_f64", q64),
                "q_f32": store.put(f"{name}/L{i}/q_f32", q32[f32_rows]),
                "inv_freq_f64": store.put(f"{name}/L{i}/inv_freq_f64", inv64n),
                "attention_scaling": float(att64),
            },
        )
        if hd != main_hd:
            lay["head_dim"] = int(hd)
            lay["arrays"]["x"] = store.put(f"{name}/x_h{hd}", x)
        if case.get("deepseek"):
            scaling = mod.yarn_apply_mscale(config.rope_parameters, config.qk_head_dim ** (-0.5))
            lay["softmax_scaling"] = float(scaling)
        entry_case["layers"].append(lay)
    return entry_case


def llama4_temperature_entry(case, config, i, x, store):
    past = 8188
    name = case["name"]
    mod = case["mod"]
    with float64_transformers(modeling_rope_utils, mod):
        q64 = llama4_temperature(mod, case["config"], i, torch.from_numpy(x.astype(np.float64)), past).numpy()
    q32 = llama4_temperature(mod, case["config"], i, torch.from_numpy(x), past).numpy()
    assert q64.dtype == np.float64 and q32.dtype == np.float32
    positions = np.arange(T) + past
    scale = np.log1p(np.floor((positions + 1.0) / config.floor_scale)) * config.attn_scale + 1.0
    np.testing.assert_allclose(q64, x.astype(np.float64) * scale[None, :, None, None], rtol=1e-15, atol=0)
    np.testing.assert_allclose(q32, q64, rtol=1e-6, atol=1e-6)
    return {
        "entry": "modeling_llama4.Llama4TextAttention(config with hidden=N*H, identity q_proj).forward(x, "
        "past_key_values=<stub: get_seq_length()=8188>) with eager_attention_forward patched to capture q; "
        "q <- q * (log1p(floor((arange(T) + past_seen + 1) / floor_scale)) * attn_scale + 1) (position_ids ignored)",
        "past_seen_tokens": past,
        "positions": positions.tolist(),
        "floor_scale": config.floor_scale,
        "attn_scale": config.attn_scale,
        "scale_f64": scale.tolist(),
        "arrays": {
            "q_f64": store.put(f"{name}/L{i}/temperature_q_f64", q64),
            "q_f32": store.put(f"{name}/L{i}/temperature_q_f32", q32),
        },
    }


def check_case_layer(case, config, lt, hd, pos, x, q64, q32, inv64, inv32, att, layout, f32_rows):
    name = case["name"]
    # (1) inv_freq really float64: differs from the float32 result and matches a float64 NumPy transcription
    assert np.any(inv64 != inv32.astype(np.float64)), name
    if case["model_type"] in ("gptj", "codegen"):
        rp = {"rope_type": "default", "rope_theta": 10000.0}
        rdim = config.rotary_dim
    else:
        rp = rope_params_for(config, lt)
        rdim = config.qk_rope_head_dim if case.get("deepseek") else hd
    ref = np_inv_freq(rp, rdim, config.max_position_embeddings, seq_len=int(pos.max()) + 1)
    np.testing.assert_allclose(inv64, ref, rtol=1e-14, atol=0, err_msg=f"{name} {lt} inv_freq")
    np.testing.assert_allclose(inv32, ref, rtol=5e-7, atol=0, err_msg=f"{name} {lt} inv_freq f32")
    # (2) q_f64 = independent NumPy rotation from inv_freq_f64 and the layout descriptor
    ref_q = np_rotate(x.astype(np.float64), pos, inv64, att, layout)
    np.testing.assert_allclose(q64, ref_q, rtol=0, atol=1e-12, err_msg=f"{name} {lt} q_f64")
    # (3) channels outside the rotary block untouched
    o, r = layout["rotary_offset"], layout["rotary_dim"]
    assert np.array_equal(q64[..., :o], x[..., :o]) and np.array_equal(q64[..., o + r :], x[..., o + r :])
    assert np.array_equal(q32[..., :o], x[..., :o]) and np.array_equal(q32[..., o + r :], x[..., o + r :])
    # (4) float32 close to float64 where positions < 2048
    np.testing.assert_allclose(q32[f32_rows], q64[f32_rows], rtol=0, atol=2e-3, err_msg=f"{name} {lt} q_f32")


# ----------------------------------------------------------------------------- M-RoPE position ids


def v4_rope_index(rows, L, merge, model, tokens_per_second=None, video_seconds=()):
    """NumPy transcription of transformers-4.5x Qwen2-VL / Qwen2.5-VL get_rope_index (and vLLM).

    Per row, over the unpadded tokens: each run starts at st = max(all ids so far) + 1 (0 first);
    text: st + arange(L) on t, h, w; vision grid (t, h/merge, w/merge) in t-major raster order:
    t = st + tau(i_t), h = st + i_h, w = st + i_w, with tau(i) = i, except Qwen2.5-VL videos:
    tau(i) = floor(i * second_per_grid_t * tokens_per_second) computed in float (vLLM and the Qwen
    team's PR #35569; HF 4.5x cast second_per_grid_t to int64 first). Padded slots hold 1 (as 4.5x)
    and rope_deltas = max + 1 - padded row length (4.5x; vLLM has no padding).
    Qwen3-VL (4.57) splits videos into T=1 frames before this loop, which the caller does.
    """
    pos = np.ones((len(rows), L, 3), dtype=np.int64)
    deltas = []
    vid = iter(video_seconds)
    for b, runs in enumerate(rows):
        blocks, cur_max, n_pad = [], -1, 0
        for run in runs:
            kind = run["type"]
            if kind == "pad":
                n_pad += run["len"]
                continue
            st = cur_max + 1
            if kind == "text":
                blk = np.repeat((st + np.arange(run["len"]))[:, None], 3, axis=1)
            else:
                gt, gh, gw = run["grid_thw"][0], run["grid_thw"][1] // merge, run["grid_thw"][2] // merge
                it, ih, iw = np.meshgrid(np.arange(gt), np.arange(gh), np.arange(gw), indexing="ij")
                tau = it.astype(np.float64)
                if kind == "video" and model == "qwen2_5_vl":
                    tau = np.floor(it * float(next(vid, 1.0)) * tokens_per_second)  # HF default: 1
                blk = np.stack([tau.astype(np.int64) + st, ih + st, iw + st], axis=-1).reshape(-1, 3)
            blocks.append(blk)
            cur_max = int(blk.max())
        seq = np.concatenate(blocks, axis=0)
        pos[b, n_pad:] = seq
        deltas.append(cur_max + 1 - L)
    return pos, np.array(deltas, dtype=np.int64)


def mrope_inputs(rows, merge, cfg):
    """input_ids / mm_token_type_ids / attention_mask / grids from a runs description."""
    ids, types_, mask = [], [], []
    images, videos = [], []
    for runs in rows:
        r_ids, r_ty, r_m = [], [], []
        for run in runs:
            k = run["type"]
            if k in ("pad", "text"):
                n = run["len"]
                r_ids += [0 if k == "pad" else 1000 + j for j in range(n)]
                r_ty += [0] * n
                r_m += [0 if k == "pad" else 1] * n
            else:
                t, h, w = run["grid_thw"]
                n = t * h * w // merge**2
                tok = cfg.image_token_id if k == "image" else cfg.video_token_id
                r_ids += [tok] * n
                r_ty += [1 if k == "image" else 2] * n
                r_m += [1] * n
                if k == "image":
                    images.append(run["grid_thw"])
                elif run.get("frame", 0) == 0:  # Qwen3-VL per-frame runs: one video_grid_thw entry per video
                    videos.append(run.get("video_grid_thw", run["grid_thw"]))
        ids.append(r_ids)
        types_.append(r_ty)
        mask.append(r_m)
    L = {len(r) for r in ids}
    assert len(L) == 1, L
    return (
        torch.tensor(ids, dtype=torch.int64),
        torch.tensor(types_, dtype=torch.int64),
        torch.tensor(mask, dtype=torch.int64),
        torch.tensor(images, dtype=torch.int64) if images else None,
        torch.tensor(videos, dtype=torch.int64) if videos else None,
    )


def text(n):
    return {"type": "text", "len": n}


def pad(n):
    return {"type": "pad", "len": n}


def image(t, h, w):
    return {"type": "image", "grid_thw": [t, h, w]}


def video(t, h, w):
    return {"type": "video", "grid_thw": [t, h, w]}


def mrope_position_cases():
    mq2 = __import__("transformers.models.qwen2_vl.modeling_qwen2_vl", fromlist=["x"])
    mq25 = __import__("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", fromlist=["x"])
    mq3 = __import__("transformers.models.qwen3_vl.modeling_qwen3_vl", fromlist=["x"])
    text_cfg = {"hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 2}
    q2 = ("qwen2_vl", transformers.Qwen2VLConfig, mq2.Qwen2VLModel,
          {"text_config": {**text_cfg, "rope_parameters": {"rope_type": "default", "mrope_section": [16, 24, 24],
                                                           "rope_theta": 1000000.0}},
           "vision_config": {"spatial_merge_size": 2}})  # fmt: skip
    q25 = ("qwen2_5_vl", transformers.Qwen2_5_VLConfig, mq25.Qwen2_5_VLModel,
           {"text_config": {**text_cfg, "rope_parameters": {"rope_type": "default", "mrope_section": [16, 24, 24],
                                                            "rope_theta": 1000000.0}},
            "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2}})  # fmt: skip
    q3 = ("qwen3_vl", transformers.Qwen3VLConfig, mq3.Qwen3VLModel,
          {"text_config": {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                           "num_hidden_layers": 2,
                           "rope_parameters": {"rope_type": "default", "mrope_section": [24, 20, 20],
                                               "mrope_interleaved": True, "rope_theta": 5000000}},
           "vision_config": {"spatial_merge_size": 2}})  # fmt: skip
    cases = []
    for fam in (q2, q25):
        cases += [
            (fam, "text_image_text", [[text(3), image(1, 4, 4), text(2)]], None),
            (fam, "text_video_text", [[text(2), video(3, 4, 4), text(2)]], None),
            (fam, "two_images", [[text(2), image(1, 4, 4), text(1), image(1, 4, 6), text(2)]], None),
            (fam, "text_only", [[text(6)]], None),
            (fam, "left_padded_batch", [[text(3), image(1, 4, 4), text(2)], [pad(4), text(1), image(1, 4, 4)]], None),
        ]
    for sec in (1.0, 0.5, 1.5, 0.75):
        cases.append((q25, f"text_video_text_sec{sec}", [[text(2), video(3, 4, 4), text(2)]], [sec]))
    # Qwen3-VL: one video of 3 frames, split per frame by get_rope_index; timestamps/vision_start/end are text
    frames = [text(2)]
    for f in range(3):
        frames += [text(2), {"type": "video", "grid_thw": [1, 4, 4], "video": 0, "frame": f, "video_grid_thw": [3, 4, 4]},
                   text(1)]  # fmt: skip
    frames += [text(2)]
    cases.append((q3, "video_per_frame", [frames], None))
    cases.append((q3, "text_image_text", [[text(3), image(1, 4, 6), text(2)]], None))
    return cases


def run_mrope_position_case(fam, label, rows, seconds, store):
    model_type, cfg_cls, model_cls, cfg_dict = fam
    name = f"{model_type}_pos_{label}"
    cfg = cfg_cls.from_dict(copy.deepcopy(cfg_dict))
    merge = cfg.vision_config.spatial_merge_size
    stub = types.SimpleNamespace(config=cfg)
    stub.get_vision_position_ids = types.MethodType(model_cls.get_vision_position_ids, stub)
    get_rope_index = types.MethodType(model_cls.get_rope_index, stub)
    input_ids, mm_types, mask, img, vid = mrope_inputs(rows, merge, cfg)
    kwargs = dict(image_grid_thw=img, video_grid_thw=vid, attention_mask=mask)
    if model_type == "qwen2_5_vl" and seconds is not None:
        kwargs["second_per_grid_ts"] = torch.tensor(seconds)
    position_ids, deltas = get_rope_index(input_ids, mm_types, **kwargs)
    pos = position_ids.permute(1, 2, 0).numpy().astype(np.int64)  # [B, T, 3]
    deltas = deltas.reshape(-1).numpy().astype(np.int64)
    L = input_ids.shape[1]
    tps = getattr(cfg.vision_config, "tokens_per_second", None)
    v4_rows = rows
    if model_type == "qwen3_vl":  # per-frame runs are already T=1 grids
        v4_rows = [[{k: v for k, v in r.items() if k not in ("video", "frame", "video_grid_thw")} for r in row] for row in rows]
    pos4, del4 = v4_rope_index(v4_rows, L, merge, model_type, tokens_per_second=tps, video_seconds=seconds or ())
    valid = mask.numpy().astype(bool)
    same_valid = bool(np.array_equal(pos[valid], pos4[valid]))
    same_deltas = bool(np.array_equal(deltas, del4))
    entry = (
        f"modeling_{model_type}.{model_cls.__name__}.get_rope_index(input_ids, mm_token_type_ids, image_grid_thw, "
        f"video_grid_thw{', second_per_grid_ts' if 'second_per_grid_ts' in kwargs else ''}, attention_mask) bound "
        "to a stub holding config (+ the model's get_vision_position_ids)"
    )
    diffs = []
    if not same_valid:
        diffs.append("unpadded position ids differ (5.23: a vision run advances the start by max(H', W') only, "
                     "ignoring its temporal extent; v4: next run starts at max(previous ids) + 1)")  # fmt: skip
    if not valid.all():
        diffs.append("padded slots: 5.23 fills 0, v4 fills 1")
    if not same_deltas:
        diffs.append("rope_deltas: 5.23 = max + 1 - unpadded length, v4 = max + 1 - padded length"
                     if not valid.all() else "rope_deltas differ because the positions differ")  # fmt: skip
    return {
        "name": name,
        "kind": "mrope_positions",
        "model_type": model_type,
        "config": cfg_dict,
        "hf_config_class": cfg_cls.__name__,
        "entry": entry,
        "runs": rows,
        "second_per_grid_ts": seconds,
        "tokens_per_second": tps,
        "spatial_merge_size": merge,
        "arrays": {
            "attention_mask": store.put(f"{name}/attention_mask", mask.numpy().astype(np.int64)),
            "mm_token_type_ids": store.put(f"{name}/mm_token_type_ids", mm_types.numpy().astype(np.int64)),
            "position_ids": store.put(f"{name}/position_ids", pos),
            "rope_deltas": store.put(f"{name}/rope_deltas", deltas),
            "position_ids_v4": store.put(f"{name}/position_ids_v4", pos4),
            "rope_deltas_v4": store.put(f"{name}/rope_deltas_v4", del4),
        },
        "v4_equal_on_unpadded": same_valid,
        "v4_equal_deltas": same_deltas,
        "notes": "; ".join(diffs) if diffs else "5.23 and the v4 transcription agree.",
    }


# ----------------------------------------------------------------------------- main


def main():
    t0 = time.time()
    torch.manual_seed(SEED)  # nothing draws from torch's RNG except Linear init in the Llama 4 stub (overwritten)
    assert torch.get_default_dtype() == torch.float32
    rng = np.random.default_rng(SEED)
    store = Store()
    xs_cache = {}
    cases = []
    for case in rotary_cases():
        cases.append(run_rotary_case(case, rng, store, xs_cache))
        print(f"  {case['name']}", file=sys.stderr)
    for fam, label, rows, seconds in mrope_position_cases():
        cases.append(run_mrope_position_case(fam, label, rows, seconds, store))
    meta = {
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__},
        "seed": SEED,
        "script": SCRIPT,
        "conventions": {
            "x": "[B, T, N, H] float32 (HF [B, N, T, H] transposed); q_f64 uses x upcast exactly to float64",
            "positions": "[B, T] int64, or [B, T, 3] (t, h, w) for M-RoPE (HF [3, B, T])",
            "q_f64": "[B, T, N, H] float64: HF rotary class + apply function run in float64 (see script docstring)",
            "q_f32": "[len(f32_rows), T, N, H] float32: rows f32_rows of the plain float32 HF output on the whole batch",
            "f32_rows": "batch rows whose positions are all < 2048",
            "inv_freq_f64": "the module's float64 inv_freq after the forward call (Phi-3: the branch used)",
            "attention_scaling": "HF's attention_scaling, multiplied into cos and sin (1.0 when unused)",
            "layout": "descriptor checked against a NumPy rotation: pairing half (p, p+r/2) or interleaved "
            "(2p, 2p+1) inside channels [rotary_offset, rotary_offset+rotary_dim); output 'deinterleaved' = "
            "results written in half order; mrope.style chunked|interleaved with section",
            "shared arrays": "identical arrays are stored once; several layers/cases may name the same npz key",
            "layer x": "a layer whose head dim differs from the case's (Gemma 4 global) names its own 'x'",
        },
        "float64_method": "module-global torch of modeling_rope_utils and the family's modeling file replaced by a "
        "proxy with float/float32 -> float64, torch.Tensor.float -> float64, default dtype float64; inv_freq "
        "computed by transformers' own init functions in float64 (checked: differs from float32, equals a NumPy "
        "float64 transcription to 1e-14 rel; q_f64 equals an independent NumPy rotation to 1e-12 abs)",
        "skipped": [
            {"case": "phi3 with 'type': 'su' (as in the published Phi-3-vision-128k-instruct config)",
             "reason": "transformers 5.23 Phi3Config raises KeyError: standardize_rope_params only copies "
                       "original_max_position_embeddings for llama3/yarn/longrope, and 'su' is renamed to "
                       "'longrope' after that; the cases use 'longrope'"},
            {"case": "transformers.modeling_rope_utils.get_mrope_index",
             "reason": "not in 5.23; the models' own get_rope_index is used"},
        ],  # fmt: skip
    }
    data = {"meta": meta, "cases": cases}
    os.makedirs(os.path.dirname(OUT_NPZ), exist_ok=True)
    np.savez_compressed(OUT_NPZ, **store.arrays)
    with open(OUT_JSON, "w") as f:
        json.dump(data, f, indent=1, allow_nan=False)
        f.write("\n")
    print(
        f"wrote {OUT_NPZ} ({os.path.getsize(OUT_NPZ) / 1024:.1f} KiB, {len(store.arrays)} arrays) and {OUT_JSON} "
        f"({os.path.getsize(OUT_JSON) / 1024:.1f} KiB, {len(cases)} cases) in {time.time() - t0:.1f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
