"""B4, attention scaling, is folded into B8: this runs `bench/long_context.py --b4`.

Run (from the repository root):
  .venv/bin/python bench/long_context.py --b4 --record   # what this script runs (N = 256 .. 16384)
  .venv/bin/python bench/attention.py --record           # the same; the recorded B4 figures carry this command

Softmax (dense, `dot_product_attention` with a causal mask) vs causal linear attention (eq. 19),
both with RoPE, forward and forward+backward, B=1, 4 heads of 64, float32; peak memory from
XLA's memory analysis, time with bench/harness.py's timer. It records as `attention` with B4's
figure ids and draws docs/figures/attention_scaling.png. Every flag of bench/long_context.py
applies (e.g. `--max-len 65536` on a GPU, `--smoke`).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import long_context  # noqa: E402

if __name__ == "__main__":
  long_context.main(["--b4", *sys.argv[1:]])
