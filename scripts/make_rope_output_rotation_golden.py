"""Golden for the spec's last-R channels, rotated values and output un-rotation: DeepSeek-V4's own code.

DeepSeek-V4 (transformers 5.24, `modeling_deepseek_v4`) rotates the *last* R channels of each
head ([nope | rope], interleaved pairs), uses its one rotated latent as both keys and values, and
rotates the attention output back at each query's position (its apply with -sin). This script
runs its rotary module (`DeepseekV4RotaryEmbedding`, the "main" rope of its default config) and
its apply function (`apply_rotary_pos_emb`) in float64, composed as `DeepseekV4Attention.forward`
composes them around a plain causal softmax (its projections, norms, sinks and compressors are
left out: they are not part of the rotation), and writes tests/golden/rope_output_rotation.npz
for tests/test_rope_output_rotation.py.

Run in the throwaway reference venv (Python 3.11, torch 2.13 CPU, transformers 5.24):
  python scripts/make_rope_output_rotation_golden.py
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_hf_rope_families_golden import float64_transformers  # noqa: E402

import transformers  # noqa: E402
from transformers import DeepseekV4Config  # noqa: E402
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "golden",
                   "rope_output_rotation.npz")
POSITIONS = [0, 1, 2, 3, 7, 100, 1023, 4095, 30000]  # increasing: the causal mask by index is by position


def main():
  torch.manual_seed(0)
  config = DeepseekV4Config()
  heads, head_dim, tokens = 2, config.head_dim, len(POSITIONS)
  with float64_transformers(v4):
    rotary = v4.DeepseekV4RotaryEmbedding(config)
    x = torch.zeros(1, tokens, config.hidden_size, dtype=torch.float64)
    positions = torch.tensor([POSITIONS])
    cos, sin = rotary(x, position_ids=positions, layer_type="main")
    q = torch.randn(1, heads, tokens, head_dim, dtype=torch.float64)
    kv = torch.randn(1, 1, tokens, head_dim, dtype=torch.float64)
    q_rot = v4.apply_rotary_pos_emb(q, cos, sin)
    kv_rot = v4.apply_rotary_pos_emb(kv, cos, sin)
    logits = torch.einsum("bntd,bsd->bnts", q_rot, kv_rot[:, 0]) / head_dim ** 0.5
    logits = logits.masked_fill(~torch.ones(tokens, tokens, dtype=torch.bool).tril(), float("-inf"))
    out = torch.einsum("bnts,bsd->bntd", logits.softmax(-1), kv_rot[:, 0])
    out = v4.apply_rotary_pos_emb(out, cos, -sin)  # [B, N, T, D], as its attention un-rotates its output
  main_rope = config.rope_parameters["main"]
  np.savez_compressed(
      OUT, positions=np.asarray(POSITIONS, np.int64), q=q.numpy(), kv=kv.numpy(), q_rot=q_rot.numpy(),
      out=out.numpy(), theta=np.float64(main_rope["rope_theta"]),
      rotary_dim=np.int64(int(head_dim * main_rope["partial_rotary_factor"])),
      versions=np.asarray([f"transformers {transformers.__version__}", f"torch {torch.__version__.split('+')[0]}"]))
  print(f"wrote {OUT}: rotary_dim {int(head_dim * main_rope['partial_rotary_factor'])} of head_dim {head_dim}, "
        f"theta {main_rope['rope_theta']}")


if __name__ == "__main__":
  main()
