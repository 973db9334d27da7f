"""Benchmark of the RoPE op: exact phases vs the plain float32 product vs the dense eq. (16).

Run (from the repository root):
  .venv/bin/python bench/rope.py                      # [8, 2048, 16, 128], fp32 and bf16
  .venv/bin/python bench/rope.py --shape 2,512,8,64   # other shapes

Bandwidth counts bytes = read + write of x (2 * x.nbytes); the cos/sin tables and the
positions are not counted. All methods are timed round-robin in the same process so that
machine noise hits them alike; the table reports the median and the spread (min..max) of
the per-round times, and ratios against the baseline measured in the same run.
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from roformer_jax import rope  # noqa: E402


def _dense_rotation_fn(dim: int):
  """Eq. (16) as written: multiply each token by its dense d x d rotation matrix."""

  def fn(x, positions):
    cos, sin = rope.rotary_cos_sin(positions, dim)  # [T, K]
    t, k = cos.shape
    idx = jnp.arange(k)
    r = jnp.zeros((t, dim, dim), jnp.float32)
    r = r.at[:, 2 * idx, 2 * idx].set(cos).at[:, 2 * idx, 2 * idx + 1].set(-sin)
    r = r.at[:, 2 * idx + 1, 2 * idx].set(sin).at[:, 2 * idx + 1, 2 * idx + 1].set(cos)
    out = jnp.einsum("btnh,tgh->btng", x.astype(jnp.float32), r)
    return out.astype(x.dtype)

  return fn


def _time_round_robin(fns: dict, args: dict, rounds: int, inner: int) -> dict[str, list[float]]:
  times = {name: [] for name in fns}
  for name, fn in fns.items():  # compile + warm up
    jax.block_until_ready(fn(*args[name]))
  for _ in range(rounds):
    for name, fn in fns.items():
      start = time.perf_counter()
      for _ in range(inner):
        out = fn(*args[name])
      jax.block_until_ready(out)
      times[name].append((time.perf_counter() - start) / inner)
  return times


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shape", default="8,2048,16,128", help="B,T,N,H of x")
  parser.add_argument("--rounds", type=int, default=7)
  parser.add_argument("--inner", type=int, default=3)
  parser.add_argument("--no-dense", action="store_true", help="skip the (slow) dense-matrix method")
  args = parser.parse_args()
  b, t, n, h = (int(v) for v in args.shape.split(","))
  rng = np.random.default_rng(0)
  x32 = jnp.asarray(rng.uniform(-1, 1, (b, t, n, h)).astype(np.float32))
  x16 = x32.astype(jnp.bfloat16)
  positions = jnp.arange(t, dtype=jnp.int32)

  per_example = jnp.asarray(rng.integers(0, 2**24, (b, t)), dtype=jnp.int32)  # packing/decode offsets
  exact = jax.jit(lambda x, p: rope.apply_rotary(x, p))
  plain = jax.jit(lambda x, p: rope.apply_rotary(x, p, exact=False))
  exact_half = jax.jit(lambda x, p: rope.apply_rotary(x, p, layout="half"))
  copy = jax.jit(lambda x: -x)  # reads and writes x once: the effective memory bandwidth
  # name -> (fn, args, dtype tag, baseline row for the time ratio)
  cases = {}
  for tag, x in (("fp32", x32), ("bf16", x16)):
    cases[f"copy {tag}"] = (copy, (x,), tag, f"plain {tag}")
    cases[f"plain {tag}"] = (plain, (x, positions), tag, f"plain {tag}")
    cases[f"exact {tag}"] = (exact, (x, positions), tag, f"plain {tag}")
    cases[f"exact half {tag}"] = (exact_half, (x, positions), tag, f"plain {tag}")
  cases["plain pos[B,T] fp32"] = (plain, (x32, per_example), "fp32", "plain pos[B,T] fp32")
  cases["exact pos[B,T] fp32"] = (exact, (x32, per_example), "fp32", "plain pos[B,T] fp32")
  if not args.no_dense:
    cases["dense eq.16 fp32"] = (jax.jit(_dense_rotation_fn(h)), (x32, positions), "fp32", "plain fp32")

  times = _time_round_robin({k: v[0] for k, v in cases.items()}, {k: v[1] for k, v in cases.items()},
                            args.rounds, args.inner)
  nbytes = {"fp32": 2 * x32.nbytes, "bf16": 2 * x16.nbytes}
  rows = {}
  for name, ts in times.items():
    med = statistics.median(ts)
    rows[name] = {"ms": med * 1e3, "ms_min": min(ts) * 1e3, "ms_max": max(ts) * 1e3,
                  "gb_s": nbytes[cases[name][2]] / med / 1e9}
  for name, row in rows.items():
    _, _, tag, baseline = cases[name]
    row["frac_of_copy_bw"] = row["gb_s"] / rows[f"copy {tag}"]["gb_s"]
    row["time_vs_baseline"] = row["ms"] / rows[baseline]["ms"]
    row["baseline"] = baseline

  device = jax.devices()[0]
  print(f"RoPE op on x[{b},{t},{n},{h}], device {device.device_kind} ({jax.device_count()} x {device.platform}), "
        f"jax {jax.__version__}, {args.rounds} rounds x {args.inner}")
  print("positions [T] shared by the batch unless the row says pos[B,T] (random, up to 2^24)")
  print(f"{'method':<22}{'ms (median)':>12}{'min..max':>18}{'GB/s':>8}{'of copy':>9}{'time ratio':>12}  baseline")
  for name, row in rows.items():
    print(f"{name:<22}{row['ms']:>12.2f}{row['ms_min']:>9.2f}..{row['ms_max']:<7.2f}{row['gb_s']:>8.2f}"
          f"{row['frac_of_copy_bw']:>9.0%}{row['time_vs_baseline']:>12.3f}  {row['baseline']}")
  summary = {
      "bench": "rope_op", "shape": [b, t, n, h], "device": device.device_kind, "platform": device.platform,
      "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "jax": jax.__version__,
      "command": "python bench/rope.py " + " ".join(sys.argv[1:]), "results": rows,
      "goal_exact_overhead_le_15pct": max(rows["exact fp32"]["time_vs_baseline"],
                                          rows["exact pos[B,T] fp32"]["time_vs_baseline"]) <= 1.15,
      "goal_exact_ge_50pct_copy_bw": rows["exact fp32"]["frac_of_copy_bw"] >= 0.5,
  }
  print(json.dumps(summary))


if __name__ == "__main__":
  main()
