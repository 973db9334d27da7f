"""Generate golden RoPE reference values from HuggingFace transformers.

What it makes
-------------
``tests/golden/hf_rope.json``: an independent reference that the roformer-jax
tests read. It holds two lists:

* ``frequencies``: ``inv_freq`` (float32) and ``attention_factor`` as returned
  by ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config,
  "cpu", seq_len=seq_len)`` on a real ``LlamaConfig`` (for ``rope_type ==
  "default"``, which is not in ``ROPE_INIT_FUNCTIONS``,
  ``LlamaRotaryEmbedding.compute_default_rope_parameters(config)``).
* ``rotary``: small float32 tensors ``x`` of shape ``[B, T, N, H]``, integer
  ``positions`` of shape ``[B, T]`` and the rotated output ``out`` produced by
  HF's own code paths:

  - ``layout == "interleaved"``: RoFormer
    (``RoFormerSinusoidalPositionalEmbedding`` with its ``create_weight`` table,
    gathered by position, then
    ``RoFormerSelfAttention.apply_rotary_position_embeddings``);
  - ``layout == "half"``: Llama (``LlamaRotaryEmbedding`` +
    ``modeling_llama.apply_rotary_pos_emb``), or GPT-NeoX
    (``GPTNeoXRotaryEmbedding`` + ``modeling_gpt_neox.apply_rotary_pos_emb``) for
    the partial-rotary case, which rotates only the first ``rotary_dim``
    features.

``scaling`` dicts use roformer-jax's convention: HF's ``rope_parameters`` as
they stand after ``standardize_rope_params`` minus ``rope_theta`` and
``partial_rotary_factor`` (``theta`` is a separate field, ``dim`` is the rotary
dimension), plus ``max_position_embeddings`` where HF reads that config field
(``dynamic``; ``yarn`` and ``longrope`` when ``factor`` is None/absent).
``original_max_position_embeddings`` is always explicit for
``llama3``/``yarn``/``longrope``.

Floats are float32 values written as Python floats (the exact float64 value
of the float32, so ``np.float32(v)`` round-trips bit-exactly).

How to run
----------
From the repository root::

    /tmp/hfvenv/bin/python scripts/make_hf_golden.py

where the venv is created with::

    python3.11 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch==2.13.0 transformers==5.23.0 numpy

(CPU-only torch is enough.) The output is deterministic: inputs come from a
seeded ``numpy.random.default_rng`` and all HF computations are float32 on CPU.
Building the RoFormer table for the 1_000_000+ positions case takes ~20 s.
"""

from __future__ import annotations

import copy
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import GPTNeoXConfig, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox import modeling_gpt_neox
from transformers.models.llama import modeling_llama
from transformers.models.roformer import modeling_roformer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_PATH = os.path.join(REPO_ROOT, "tests", "golden", "hf_rope.json")
SEED = 20240611

# Keys of HF rope_parameters that are NOT part of our "scaling" dict.
_DROP_KEYS = ("rope_theta", "partial_rotary_factor")


def f32_list(t) -> list:
    """float32 tensor/array -> nested list of Python floats (exact float32 values)."""
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().numpy()
    a = np.asarray(t)
    assert a.dtype == np.float32, a.dtype
    assert np.all(np.isfinite(a))
    return a.astype(np.float64).tolist()


def llama_config(dim: int, theta: float, rope_parameters: dict | None, max_position_embeddings: int):
    """A real LlamaConfig whose rotary dim equals ``dim`` (head_dim=dim, partial_rotary_factor=1.0)."""
    rp = copy.deepcopy(rope_parameters) if rope_parameters else {"rope_type": "default"}
    rp["rope_theta"] = float(theta)
    rp["partial_rotary_factor"] = 1.0
    return LlamaConfig(
        vocab_size=8,
        hidden_size=dim,
        intermediate_size=8,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=dim,
        max_position_embeddings=max_position_embeddings,
        rope_parameters=rp,
    )


def our_scaling(config) -> dict | None:
    """HF rope_parameters (post-standardization) -> our "scaling" convention."""
    rp = config.rope_parameters
    rope_type = rp["rope_type"]
    if rope_type == "default":
        return None
    out = {k: v for k, v in rp.items() if k not in _DROP_KEYS}
    if rope_type in ("llama3", "yarn", "longrope"):
        assert "original_max_position_embeddings" in out, out
    reads_mpe = rope_type == "dynamic" or (rope_type in ("yarn", "longrope") and out.get("factor") is None)
    if reads_mpe:
        out["max_position_embeddings"] = int(config.max_position_embeddings)
    return out


def hf_init(config, seq_len):
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        assert seq_len is None
        inv_freq, attn = modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        inv_freq, attn = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    assert inv_freq.dtype == torch.float32, inv_freq.dtype
    return inv_freq, float(attn)


def freq_case(name, dim, theta, rope_parameters=None, max_position_embeddings=2048, seq_len=None):
    config = llama_config(dim, theta, rope_parameters, max_position_embeddings)
    inv_freq, attn = hf_init(config, seq_len)
    assert inv_freq.shape == (dim // 2,), (name, inv_freq.shape)
    return {
        "name": name,
        "dim": dim,
        "theta": float(theta),
        "scaling": our_scaling(config),
        "seq_len": seq_len,
        "inv_freq": f32_list(inv_freq),
        "attention_factor": attn,
    }


def seeded_factors(rng, n):
    """Increasing LongRoPE factors: short ones in [1, 1.1], long ones in [1, 8]."""
    short = np.sort(rng.uniform(1.0, 1.1, size=n))
    long = np.sort(rng.uniform(1.0, 8.0, size=n))
    short[0] = 1.0
    long[0], long[-1] = 1.0, 8.0
    return [round(float(v), 6) for v in short], [round(float(v), 6) for v in long]


def build_frequencies(rng):
    cases = []
    add = cases.append

    # --- default (no scaling) ---
    add(freq_case("default_d64_t1e4", 64, 10000.0))
    add(freq_case("default_d128_t1e4", 128, 10000.0))
    add(freq_case("default_d128_t5e5", 128, 500000.0))
    add(freq_case("default_d32_t1e4", 32, 10000.0))
    add(freq_case("default_d40_t1e4", 40, 10000.0))

    # --- linear ---
    add(freq_case("linear_f2_d64", 64, 10000.0, {"rope_type": "linear", "factor": 2.0}))
    add(freq_case("linear_f4_d128", 128, 10000.0, {"rope_type": "linear", "factor": 4.0}))
    add(freq_case("linear_f2_d32", 32, 10000.0, {"rope_type": "linear", "factor": 2.0}))

    # --- dynamic NTK (reads config.max_position_embeddings) ---
    for seq_len in (None, 1000, 4096, 8192):
        add(
            freq_case(
                f"dynamic_f2_mpe2048_d64_seq{seq_len}",
                64,
                10000.0,
                {"rope_type": "dynamic", "factor": 2.0},
                max_position_embeddings=2048,
                seq_len=seq_len,
            )
        )
    add(
        freq_case(
            "dynamic_f2_mpe2048_d32_seq4096",
            32,
            10000.0,
            {"rope_type": "dynamic", "factor": 2.0},
            max_position_embeddings=2048,
            seq_len=4096,
        )
    )
    add(
        freq_case(
            "dynamic_f4_mpe4096_d128_t5e5_seq10000",
            128,
            500000.0,
            {"rope_type": "dynamic", "factor": 4.0},
            max_position_embeddings=4096,
            seq_len=10000,
        )
    )

    # --- yarn ---
    # max_position_embeddings = factor * original, otherwise HF only warns (explicit factor wins).
    yarn4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    add(freq_case("yarn_f4_orig2048_d64", 64, 10000.0, yarn4, max_position_embeddings=8192))
    add(
        freq_case(
            "yarn_f4_orig2048_beta16_2_d64",
            64,
            10000.0,
            {**yarn4, "beta_fast": 16.0, "beta_slow": 2.0},
            max_position_embeddings=8192,
        )
    )
    add(
        freq_case(
            "yarn_f4_orig2048_attn1.3_d64",
            64,
            10000.0,
            {**yarn4, "attention_factor": 1.3},
            max_position_embeddings=8192,
        )
    )
    deepseek = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096}
    add(
        freq_case(
            "yarn_deepseek_f40_ms0.707_msall0.707_d64",
            64,
            10000.0,
            {**deepseek, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707},
            max_position_embeddings=163840,
        )
    )
    add(
        freq_case(
            "yarn_deepseek_f40_ms1.0_msall0.8_d64",
            64,
            10000.0,
            {**deepseek, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.8},
            max_position_embeddings=163840,
        )
    )
    add(
        freq_case(
            "yarn_f4_orig2048_truncFalse_d64",
            64,
            10000.0,
            {**yarn4, "truncate": False},
            max_position_embeddings=8192,
        )
    )
    # factor=None: HF requires the "factor" key to be present (KeyError otherwise), logs a warning for None,
    # and then uses config.max_position_embeddings / original_max_position_embeddings.
    add(
        freq_case(
            "yarn_fNone_mpe8192_orig2048_d64",
            64,
            10000.0,
            {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 2048},
            max_position_embeddings=8192,
        )
    )
    add(freq_case("yarn_f4_orig2048_d32", 32, 10000.0, yarn4, max_position_embeddings=8192))
    add(
        freq_case(
            "yarn_f8_orig8192_d128_t5e5",
            128,
            500000.0,
            {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192},
            max_position_embeddings=65536,
        )
    )

    # --- longrope (factor absent -> max_position_embeddings / original) ---
    short96, long96 = seeded_factors(rng, 48)
    lr96 = {
        "rope_type": "longrope",
        "short_factor": short96,
        "long_factor": long96,
        "original_max_position_embeddings": 4096,
    }
    for seq_len in (None, 4096, 4097, 10000):
        add(
            freq_case(
                f"longrope_d96_orig4096_mpe131072_seq{seq_len}",
                96,
                10000.0,
                lr96,
                max_position_embeddings=131072,
                seq_len=seq_len,
            )
        )
    for seq_len in (None, 10000):
        add(
            freq_case(
                f"longrope_d96_orig4096_mpe131072_attn1.25_seq{seq_len}",
                96,
                10000.0,
                {**lr96, "attention_factor": 1.25},
                max_position_embeddings=131072,
                seq_len=seq_len,
            )
        )
    add(
        freq_case(
            "longrope_d96_orig4096_f16_seq10000",
            96,
            10000.0,
            {**lr96, "factor": 16.0},
            max_position_embeddings=131072,
            seq_len=10000,
        )
    )
    short32, long32 = seeded_factors(rng, 16)
    add(
        freq_case(
            "longrope_d32_orig4096_mpe131072_seq10000",
            32,
            10000.0,
            {
                "rope_type": "longrope",
                "short_factor": short32,
                "long_factor": long32,
                "original_max_position_embeddings": 4096,
            },
            max_position_embeddings=131072,
            seq_len=10000,
        )
    )

    # --- llama3 ---
    llama3 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    add(freq_case("llama3_f8_orig8192_d128_t5e5", 128, 500000.0, llama3, max_position_embeddings=131072))
    add(freq_case("llama3_f8_orig8192_d32_t5e5", 32, 500000.0, llama3, max_position_embeddings=131072))
    return cases


# ----------------------------------------------------------------------------- rotary


def roformer_rotate(x_bthd: np.ndarray, positions: np.ndarray) -> torch.Tensor:
    """HF RoFormer: sinusoidal table (create_weight) gathered by position + apply_rotary_position_embeddings."""
    B, T, N, H = x_bthd.shape
    n_pos = int(positions.max()) + 1
    emb = modeling_roformer.RoFormerSinusoidalPositionalEmbedding(n_pos, H)
    with torch.no_grad():
        emb.weight.copy_(emb.create_weight())  # what RoFormerPreTrainedModel._init_weights does
    pos = torch.from_numpy(positions.astype(np.int64))
    sinusoidal_pos = emb((B, T), position_ids=pos)  # [B, T, H]
    sinusoidal_pos = sinusoidal_pos[:, None, :, :]  # [B, 1, T, H], broadcasts over heads
    q = torch.from_numpy(x_bthd).transpose(1, 2)  # [B, N, T, H]
    apply = modeling_roformer.RoFormerSelfAttention.apply_rotary_position_embeddings  # static method
    q_out, k_out = apply(sinusoidal_pos, q, q.clone())
    assert torch.equal(q_out, k_out)
    return q_out.transpose(1, 2).contiguous()  # [B, T, N, H]


def llama_rotate(x_bthd: np.ndarray, positions: np.ndarray, config) -> torch.Tensor:
    rot = modeling_llama.LlamaRotaryEmbedding(config)
    q = torch.from_numpy(x_bthd).transpose(1, 2)  # [B, N, T, H]
    pos = torch.from_numpy(positions.astype(np.int64))
    cos, sin = rot(q, pos)  # [B, T, H]
    q_out, k_out = modeling_llama.apply_rotary_pos_emb(q, q.clone(), cos, sin)
    assert torch.equal(q_out, k_out)
    return q_out.transpose(1, 2).contiguous()


def neox_rotate(x_bthd: np.ndarray, positions: np.ndarray, config) -> torch.Tensor:
    rot = modeling_gpt_neox.GPTNeoXRotaryEmbedding(config)
    q = torch.from_numpy(x_bthd).transpose(1, 2)
    pos = torch.from_numpy(positions.astype(np.int64))
    cos, sin = rot(q, pos)  # [B, T, rotary_dim]
    q_out, k_out = modeling_gpt_neox.apply_rotary_pos_emb(q, q.clone(), cos, sin)
    assert torch.equal(q_out, k_out)
    return q_out.transpose(1, 2).contiguous()


def rotary_entry(name, layout, theta, rotary_dim, scaling, x, positions, out):
    assert out.dtype == torch.float32 and tuple(out.shape) == x.shape
    return {
        "name": name,
        "layout": layout,
        "theta": float(theta),
        "rotary_dim": rotary_dim,
        "scaling": scaling,
        "seq_len": None,
        "x": f32_list(x),
        "positions": positions.astype(np.int64).tolist(),
        "out": f32_list(out),
    }


def build_rotary(rng):
    B, T, N, H = 2, 7, 3, 16
    ar = np.arange(T, dtype=np.int64)
    pos_small = np.stack([ar, ar + 3])  # row 0: 0..6, row 1: 3..9
    pos_leftpad = np.array([[0, 1, 2, 3, 4, 5, 6], [1, 1, 1, 0, 1, 2, 3]], dtype=np.int64)  # left-padded-like
    pos_large = np.stack([ar + 5000, ar + 1_000_000])

    def new_x():
        return rng.standard_normal((B, T, N, H), dtype=np.float32)

    cases = []

    # --- interleaved: RoFormer (theta fixed at 10000 in HF's create_weight) ---
    for name, pos in (("interleaved_roformer", pos_small), ("interleaved_roformer_large_pos", pos_large)):
        x = new_x()
        cases.append(rotary_entry(name, "interleaved", 10000.0, None, None, x, pos, roformer_rotate(x, pos)))

    # --- half: Llama ---
    llama_cases = [
        ("half_llama_default", 10000.0, None, 2048, pos_small),
        ("half_llama_default_large_pos", 10000.0, None, 2048, pos_large),
        ("half_llama_default_t5e5_leftpad", 500000.0, None, 2048, pos_leftpad),
        ("half_llama_linear_f2", 10000.0, {"rope_type": "linear", "factor": 2.0}, 2048, pos_small),
        (
            "half_llama_yarn_f4_orig2048",
            10000.0,
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
            8192,
            pos_small,
        ),
        (
            "half_llama_yarn_f4_orig2048_large_pos",
            10000.0,
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
            8192,
            np.stack([ar + 5000, ar + 8000]),
        ),
        (
            "half_llama_llama3_f8_orig8192_t5e5",
            500000.0,
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            131072,
            pos_small,
        ),
    ]
    for name, theta, rp, mpe, pos in llama_cases:
        config = llama_config(H, theta, rp, mpe)
        x = new_x()
        out = llama_rotate(x, pos, config)
        cases.append(rotary_entry(name, "half", theta, None, our_scaling(config), x, pos, out))

    # --- half, partial rotary: GPT-NeoX (rotary_dim = head_dim * partial_rotary_factor = 8) ---
    # NOTE: GPTNeoXConfig ignores a `partial_rotary_factor=` kwarg (defaults to 0.25); it honours
    # rope_parameters["partial_rotary_factor"] or the legacy `rotary_pct=` kwarg.
    neox = GPTNeoXConfig(
        vocab_size=8,
        hidden_size=N * H,
        num_hidden_layers=1,
        num_attention_heads=N,
        intermediate_size=8,
        max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    )
    assert neox.rope_parameters["partial_rotary_factor"] == 0.5
    x = new_x()
    out = neox_rotate(x, pos_small, neox)
    assert torch.equal(out[..., 8:], torch.from_numpy(x)[..., 8:])
    cases.append(rotary_entry("half_neox_partial_rd8", "half", 10000.0, 8, None, x, pos_small, out))
    return cases


def main():
    torch.manual_seed(SEED)  # nothing here draws from torch RNG except nn.Embedding init (overwritten)
    assert torch.get_default_dtype() == torch.float32
    rng = np.random.default_rng(SEED)
    data = {
        "generator": "scripts/make_hf_golden.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "frequencies": build_frequencies(rng),
        "rotary": build_rotary(rng),
    }
    os.makedirs(os.path.dirname(OUT_PATH), exist_ok=True)
    with open(OUT_PATH, "w") as f:
        json.dump(data, f, allow_nan=False, separators=(",", ":"))
        f.write("\n")
    size = os.path.getsize(OUT_PATH)
    print(
        f"wrote {OUT_PATH}: {len(data['frequencies'])} frequency cases, "
        f"{len(data['rotary'])} rotary cases, {size / 1024:.1f} KiB",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
