"""Rematerialisation (`model.remat`): XLA's temporary memory and the step time it costs.

Run (from the repository root):
  .venv/bin/python bench/remat.py                    # B2's shapes a and c (about 4 min on 2 cores)
  .venv/bin/python bench/remat.py --smoke            # seconds: the tiny shape, 1 round of 1 step

Other flags, e.g. `--shapes tiny --rounds 2`.
Settled figures (issue 24): moved here from bench/; bench/remat.py, the command its recorded figures
carry, runs this file, and `make bench` no longer does.

The step is B2's JAX "masked" step (experiments/train_step.py: `trainer.train_step` on the masked
batch: forward, MLM loss at the masked positions, backward, AdamW; float32, dropout 0) of a
freshly initialised model, compiled once
per policy: "none" (every activation kept for the backward pass), "full" (each layer keeps
only its input and recomputes its forward pass) and "dots" (the matmul outputs are kept).
For each it reports XLA's temporary buffer size of the compiled step (`memory_analysis`,
exact) and the median ms/step over --rounds rounds, the policies alternating (order rotated,
bench/harness.py) with one untimed step at the start of each block and the timed steps
dispatched back to back. The ratio is the time against "none" in
the same run. The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
from flax import nnx  # noqa: E402

from bench import _record, harness  # noqa: E402
from experiments import train_step as b2  # noqa: E402
from roformer_jax import models  # noqa: E402

POLICIES = ("none", "full", "dots")


class Policy:
  def __init__(self, remat: str, spec: dict, batch, tx):
    cfg = models.ModelConfig(**spec["model"], dropout=0.0, attention_dropout=0.0, remat=remat)
    graphdef, self.state = b2.new_state(models.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0)), tx)
    self.step = b2.train_step(graphdef).lower(self.state, batch).compile()
    memory = self.step.memory_analysis()  # None where the backend does not report it
    self.temp_gib = memory.temp_size_in_bytes / 2 ** 30 if memory is not None else float("nan")
    self.batch, self.ms, self.losses = batch, [], []

  def block(self, steps: int) -> harness.Seconds:
    """A harness call: one untimed step (the first after another policy's block), then `steps`
    dispatched back to back, as the trainer runs them; returns the seconds per timed step."""
    self.state, out = self.step(self.state, self.batch)
    float(out["loss"])
    start, losses = time.perf_counter(), []
    for _ in range(steps):
      self.state, out = self.step(self.state, self.batch)
      losses.append(out["loss"])
    jax.block_until_ready(losses)
    seconds = (time.perf_counter() - start) / steps
    self.losses += [float(x) for x in losses]
    return harness.Seconds(seconds)


def bench_shape(name: str, rounds: int, steps: int) -> tuple[dict, list[str]]:
  spec = b2.SHAPES[name]
  batch = b2.jax_batch(b2.make_batch(spec["batch"], spec["seq"], spec["model"]["vocab_size"]), masked=True)
  tx, _ = b2.mlm_optimizer()
  runs = {p: Policy(p, spec, batch, tx) for p in POLICIES}
  for p, ts in harness.round_robin({p: functools.partial(run.block, steps) for p, run in runs.items()}, rounds,
                                   rewarm=0).items():
    runs[p].ms = [1000 * t for t in ts]
  base = statistics.median(runs["none"].ms)
  rows, lines = {}, []
  for p, run in runs.items():
    ms = statistics.median(run.ms)
    rows[p] = {"temp_gib": run.temp_gib, "ms": ms, "ms_min": min(run.ms), "ms_max": max(run.ms),
               "time_vs_none": ms / base, "memory_vs_none": run.temp_gib / runs["none"].temp_gib,
               "losses": run.losses}
    lines.append(f"{name:<5} {p:<6} {run.temp_gib:>9.3f} {rows[p]['memory_vs_none']:>8.2f} {ms:>10.1f} "
                 f"{min(run.ms):>9.1f}..{max(run.ms):<9.1f} {rows[p]['time_vs_none']:>7.2f}")
  # Same initial weights and batch: the policies must train identically.
  first = {p: run.losses[0] for p, run in runs.items()}
  assert max(first.values()) - min(first.values()) <= 1e-5 * abs(first["none"]), first
  return {"description": b2.DESCRIPTIONS[name], "rows": rows}, lines


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shapes", default="a,c", help=f"comma-separated subset of {','.join(b2.SHAPES)}")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--steps", type=int, default=0, help="timed steps per block (0: 3 for a/b/tiny, 1 for c)")
  _record.add_record_arg(parser)
  _record.add_smoke_arg(parser, "the tiny shape, 1 round of 1 timed step per policy (overrides --shapes, --rounds, "
                        "--steps)")
  args = parser.parse_args()
  if args.smoke:
    args.shapes, args.rounds, args.steps = "tiny", 1, 1
  names = [s for s in args.shapes.split(",") if s]
  unknown = [s for s in names if s not in b2.SHAPES]
  if unknown or not names:
    parser.error(f"--shapes {args.shapes!r}: unknown {unknown}; expected some of {list(b2.SHAPES)}")
  results, lines = {}, [f"{'shape':<5} {'remat':<6} {'temp GiB':>9} {'vs none':>8} {'ms/step':>10} "
                        f"{'min..max':>20} {'time x':>7}"]
  for name in names:
    steps = args.steps or (1 if name == "c" else 3)
    results[name], shape_lines = bench_shape(name, args.rounds, steps)
    lines += shape_lines
  table = "\n".join([f"model.remat on B2's masked MLM step, float32, {args.rounds} rounds, jax {jax.__version__}"] + lines)
  print(table)
  summary = {"bench": "remat", "shapes": names, "rounds": args.rounds, "results": results,
             "machine": _record.machine(), "versions": _record.versions(),
             "command": "python bench/remat.py " + " ".join(sys.argv[1:])}
  bench = _record.record_name("remat", args)
  if bench:
    figures = []
    for name, res in results.items():
      for p in ("full", "dots"):
        row = res["rows"][p]
        if math.isfinite(row["memory_vs_none"]):  # not reported by every backend
          figures.append(_record.figure(f"remat.{name}.{p}.memory_vs_none", f"remat={p}: XLA temp memory / none, shape {name}",
                                        row["memory_vs_none"], "x"))
        figures.append(_record.figure(f"remat.{name}.{p}.time_vs_none", f"remat={p}: step time / none, shape {name}",
                                      row["time_vs_none"], "x"))
    path = _record.save(bench, figures=figures, table=table, result=summary)
    print(f"# recorded {path}", file=sys.stderr)
  print(json.dumps(summary))


if __name__ == "__main__":
  main()
