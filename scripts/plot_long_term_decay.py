"""Writes docs/figures/long_term_decay.png: the long-term decay of RoPE (paper Fig. 2, eq. 37).

Run from the repository root:
  .venv/bin/python scripts/plot_long_term_decay.py      (or: make figures)
  .venv/bin/python scripts/plot_long_term_decay.py --out /tmp/decay.png   # elsewhere
  .venv/bin/python scripts/plot_long_term_decay.py --smoke   # for tests: into a temporary directory, then deleted

Plots rope.long_term_decay for d = 128 over relative distances 0..256 with the paper's base
10000, and with a large base of 500000 (as in LLaMA 3) to show the effect of theta.
"""

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from roformer_jax import rope  # noqa: E402

OUT = os.path.join("docs", "figures", "long_term_decay.png")


def plot(out: str) -> None:
  distances = np.arange(0, 257)
  fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
  for theta, style in ((10000.0, "-"), (500000.0, "--")):
    curve = rope.long_term_decay(distances, 128, theta)
    ax.plot(distances, curve, style, label=f"theta = {theta:,.0f}")
    print(f"theta={theta:>9,.0f}: f(0)={curve[0]:.2f}  f(64)={curve[64]:.2f}  f(256)={curve[256]:.2f}")
  ax.set_xlabel("relative distance")
  ax.set_ylabel("relative upper bound  (1/(d/2)) sum_j |S_j|")
  ax.set_title("Long-term decay of RoPE, d = 128 (RoFormer eq. 37, Fig. 2)")
  ax.set_xlim(0, 256)
  ax.set_ylim(bottom=0)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
  fig.savefig(out)
  plt.close(fig)
  print(f"wrote {out}")


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default=None,
                      help=f"where the PNG goes (default {OUT}, relative to the current directory)")
  parser.add_argument("--smoke", action="store_true",
                      help="for tests: the same figure into a temporary directory (deleted afterwards) unless --out "
                      "is given; docs/figures is never touched")
  args = parser.parse_args(argv)
  if args.out is not None:
    plot(args.out)
  elif args.smoke:
    scratch = tempfile.mkdtemp(prefix="long_term_decay_smoke_")
    try:
      plot(os.path.join(scratch, os.path.basename(OUT)))
      print("(--smoke: deleted again)")
    finally:
      shutil.rmtree(scratch, ignore_errors=True)
  else:
    plot(OUT)


if __name__ == "__main__":
  main()
