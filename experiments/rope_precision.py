"""Phase precision of rope.rotary_cos_sin against float64 NumPy, exact vs plain float32.

Run from the repository root:
  .venv/bin/python bench/rope_precision.py
  .venv/bin/python bench/rope_precision.py --record   # also save the figures for bench/report.py
  .venv/bin/python bench/rope_precision.py --smoke    # seconds: positions up to 2^16 only

Settled figures (issue 24): moved here from bench/; bench/rope_precision.py, the command its recorded figures
carry, runs this file, and `make bench` no longer does.

Reports the max |cos - cos64|, |sin - sin64| (which bounds the error of apply_rotary on
unit-scale inputs, per feature) over (a) every integer position 0..2^24 for the frequencies
of d = 4 (theta_0 = 1 rad, theta_1 = 0.01 rad), (b) 200k random positions < 2^24 plus
windows around every power of two, all 64 frequencies of d = 128, and (c) the single
positions 5,000 and 2^24. The last line is JSON.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from bench import _record  # noqa: E402
from roformer_jax import rope  # noqa: E402

# The bound on the exact method: 1e-5 at every integer position up to 2^24 (docs/rope.md).
EXACT_BOUND = 1e-5
TOP_LOG2, SAMPLED = 24, 200_000  # positions up to 2^24; --smoke: 2^16 and 2,000 sampled


def cases(top_log2: int = TOP_LOG2):
  """(name, figure id suffix, d) of each case, for positions up to 2^top_log2."""
  return (
      (f"all positions 0..2^{top_log2}, d=4", f"all_0_2p{top_log2}_d4", 4),
      (f"sampled positions < 2^{top_log2}, d=128", f"sampled_2p{top_log2}_d128", 128),
      ("position 5000, d=128", "pos_5000_d128", 128),
      (f"position 2^{top_log2}, d=128", f"pos_2p{top_log2}_d128", 128),
  )


def max_err(positions, dim, exact, chunk=2**22):
  fn = jax.jit(lambda p: rope.rotary_cos_sin(p, dim, exact=exact))
  inv = 10000.0 ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
  worst = 0.0
  for s in range(0, len(positions), chunk):
    p = positions[s:s + chunk]
    cos, sin = fn(p)
    ang = p.astype(np.float64)[:, None] * inv
    worst = max(worst, float(np.abs(np.asarray(cos) - np.cos(ang)).max()),
                float(np.abs(np.asarray(sin) - np.sin(ang)).max()))
  return worst


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  _record.add_record_arg(parser)
  _record.add_smoke_arg(parser, "positions up to 2^16 (every one) and 2,000 sampled instead of 2^24 and 200,000")
  args = parser.parse_args()
  top, n_sampled = (16, 2_000) if args.smoke else (TOP_LOG2, SAMPLED)
  case_list = cases(top)
  rng = np.random.default_rng(0)
  every = np.arange(0, 2**top + 1, dtype=np.int32)
  sampled = np.concatenate([rng.integers(0, 2**top + 1, n_sampled)] +
                           [np.arange(2**k - 16, 2**k + 16) for k in range(5, top + 1)]).astype(np.int32)
  positions = (every, sampled, np.array([5000], np.int32), np.array([2**top], np.int32))
  rows, table = {}, []
  for (name, _, dim), pos in zip(case_list, positions, strict=True):
    rows[name] = {"exact": max_err(pos, dim, True), "plain_fp32": max_err(pos, dim, False)}
    table.append(f"{name:<34} exact {rows[name]['exact']:.2e}   plain fp32 {rows[name]['plain_fp32']:.2e}")
    print(table[-1])
  summary = {"bench": "rope_precision", "jax": jax.__version__, "max_abs_err": rows,
             "command": "python bench/rope_precision.py"}
  print(json.dumps(summary))
  bench = _record.record_name("rope_precision", args)
  if bench:
    figures = []
    for name, key, _ in case_list:
      err = rows[name]["exact"]
      figures.append(_record.figure(f"precision.exact.{key}", f"max cos/sin error vs float64, exact, {name}", err,
                                    "", goal="<= 1e-5", met=err <= EXACT_BOUND))
      figures.append(_record.figure(f"precision.plain_fp32.{key}",
                                    f"max cos/sin error vs float64, plain float32 product, {name}",
                                    rows[name]["plain_fp32"], ""))
    path = _record.save(bench, figures=figures, table="\n".join(table), result=summary)
    print(f"# recorded {path}", file=sys.stderr)


if __name__ == "__main__":
  main()
