"""B5: the default config's time to first step (compile) and steady-state training throughput.

Run (from the repository root):
  .venv/bin/python bench/default_config.py                 # configs/default.py, 300 steps
  .venv/bin/python bench/default_config.py --steps 100 --config configs/default.py:smoke
  .venv/bin/python bench/default_config.py --record       # also save the figures for bench/report.py
  .venv/bin/python bench/default_config.py --smoke        # seconds: configs/default.py:smoke, 3 steps

It trains the config in a fresh temporary workdir through `trainer.train_and_evaluate` (the
same code path as `make train`, checkpoints and metrics included) and reports:
- time to first step: wall time from the call until step 1 has finished (data pipeline start,
  model creation, XLA compilation of the step, the step itself);
- XLA compile time: the sum of JAX's backend-compile events during the run (all jitted
  functions: init, train step, eval step);
- steady-state tokens/s and ms/step: the median over the logging windows after the first one
  (evaluation time is excluded by the trainer);
- the same step's model FLOP/s (6N + attention, the task's `flops_per_token`, as the trainer's MFU) as a fraction
  of this machine's float32 matmul rate, measured in the same run on [2048 x 2048] matrices:
  the CPU stand-in for MFU, a ratio rather than a lone absolute figure.
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from bench import _record  # noqa: E402
from bench.harness import load_config, matmul_flops  # noqa: E402
from roformer_jax.training import hooks, metrics as metrics_lib, tasks, trainer  # noqa: E402


def matmul_gflops(n: int = 2048) -> float:
  """float32 GFLOP/s of one jitted [n, n] x [n, n] product."""
  return matmul_flops(jnp.float32, n) / 1e9


class FirstStep(hooks.Hook):
  """The time the first step's loss is on the host: due once, after the first step; as a hook
  that reads the state, the loop checks the step's losses (a device sync) before `run`."""

  def __init__(self):
    self.at = None

  def due(self, loop) -> bool:
    return self.at is None

  def run(self, loop) -> None:
    self.at = time.perf_counter()


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--config", default=None, help="config file[:variant] (default configs/default.py; --smoke: "
                      "configs/default.py:smoke)")
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--log-every", type=int, default=25)
  _record.add_record_arg(parser)
  _record.add_smoke_arg(parser, "configs/default.py:smoke (unless --config is given), 3 steps logged every step, a "
                        "[128 x 128] matmul for the rate (overrides --steps, --log-every)")
  args = parser.parse_args()
  if args.config is None:
    args.config = "configs/default.py:smoke" if args.smoke else "configs/default.py"
  if args.smoke:
    args.steps, args.log_every = 3, 1  # 3 logging windows: the first (compilation) is left out of the medians
  matmul_n = 128 if args.smoke else 2048

  compile_s = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, duration, **kw: compile_s.append(duration) if event.endswith("backend_compile_duration") else None)

  peak_before = matmul_gflops(matmul_n)
  config = load_config(args.config)
  config.total_steps = args.steps
  config.log_every_steps = args.log_every
  config.eval_every_steps = args.steps  # one evaluation, at the end (excluded from throughput)
  config.checkpoint_every_steps = args.steps
  config.async_checkpoints = False
  with tempfile.TemporaryDirectory() as workdir:
    probe = FirstStep()
    t0 = time.perf_counter()
    trainer.train_and_evaluate(config, workdir, hooks=[probe])
    total_s = time.perf_counter() - t0
    first_step = probe.at
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      rows = [json.loads(line) for line in f]
  peak_after = matmul_gflops(matmul_n)
  train_rows = [r for r in rows if "tokens_per_sec" in r][1:]  # the first window holds compilation
  tokens_per_sec = statistics.median(r["tokens_per_sec"] for r in train_rows)
  step_ms = 1000 * statistics.median(r["step_time"] for r in train_rows)
  from flax import nnx
  task = tasks.get(config.task)
  model = nnx.eval_shape(lambda: task.build_model(config, nnx.Rngs(0)))
  num_params = metrics_lib.count_params(model)
  flops_per_token = task.flops_per_token(config, model, num_params)(config.data.max_length)  # the trainer's MFU count
  model_gflops = tokens_per_sec * flops_per_token / 1e9
  peak = statistics.mean([peak_before, peak_after])
  result = {
      "figure": "B5", "config": args.config, "steps": args.steps, "num_params": num_params,
      "time_to_first_step_s": round(first_step - t0, 2),
      "xla_compile_s": round(sum(compile_s), 2), "xla_compiles": len(compile_s),
      "run_wall_s": round(total_s, 1), "steady_tokens_per_sec": round(tokens_per_sec, 1),
      "steady_step_ms": round(step_ms, 2), "model_gflops": round(model_gflops, 2),
      "matmul_gflops": round(peak, 2), "matmul_gflops_before_after": [round(peak_before, 2), round(peak_after, 2)],
      "fraction_of_matmul_rate": round(model_gflops / peak, 3),
      "machine": platform.machine(), "cpus": os.cpu_count(), "device": str(jax.devices()[0].device_kind),
      "jax": jax.__version__, "command": "python bench/default_config.py " + " ".join(sys.argv[1:]),
  }
  table = [f"B5 {args.config}: {num_params / 1e6:.2f}M params, {args.steps} steps",
           f"  time to first step   {result['time_to_first_step_s']} s (XLA compile {result['xla_compile_s']} s "
           f"over {len(compile_s)} compilations)",
           f"  steady state         {tokens_per_sec:,.0f} tokens/s, {step_ms:.1f} ms/step",
           f"  model FLOP rate      {model_gflops:.1f} GFLOP/s = {result['fraction_of_matmul_rate']:.0%} of the "
           f"{peak:.1f} GFLOP/s float32 matmul rate measured in this run"]
  print("\n".join(table))
  print(json.dumps(result))
  bench = _record.record_name("default_config", args)
  if bench:
    path = _record.save(bench, figures=_figures(result, args.config), table="\n".join(table),
                        result=result)
    print(f"# recorded {path}", file=sys.stderr)


def _figures(result: dict, config: str) -> list[dict]:
  """B5's headline figures: time to first step, compile time, steady-state speed, share of the matmul rate."""
  out = []
  if result["time_to_first_step_s"] is not None:
    out.append(_record.figure("B5.time_to_first_step", f"{config}: time to first step", result["time_to_first_step_s"],
                              "s"))
  out += [
      _record.figure("B5.xla_compile", f"{config}: XLA compile time ({result['xla_compiles']} compilations)",
                     result["xla_compile_s"], "s"),
      _record.figure("B5.steady_tokens_per_s", f"{config}: steady-state training throughput",
                     result["steady_tokens_per_sec"], "tokens/s"),
      _record.figure("B5.steady_step_ms", f"{config}: steady-state ms per step", result["steady_step_ms"], "ms"),
      _record.figure("B5.fraction_of_matmul_rate", f"{config}: model FLOP rate / measured fp32 matmul rate",
                     100 * result["fraction_of_matmul_rate"], "%"),
  ]
  return out


if __name__ == "__main__":
  main()
