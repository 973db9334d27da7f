"""Benchmark: softmax attention vs causal linear attention (eq. 19), both with RoPE, over length N.

Run (from the repository root):
  .venv/bin/python bench/attention.py                  # N = 256 .. 16384 (CPU: a few minutes)
  .venv/bin/python bench/attention.py --quick          # N = 256 .. 4096, fewer repeats
  .venv/bin/python bench/attention.py --max-len 65536  # on a GPU
  .venv/bin/python bench/attention.py --record         # also save the figures for bench/report.py
  .venv/bin/python bench/attention.py --smoke          # seconds: N = 64, 128, tiny heads; writes nothing

What is measured, for x [B=1, N, heads=4, H=64] in float32 (defaults):
  softmax: `dot_product_attention` with RoPE on q, k and a causal mask (`make_attention_mask`).
  linear:  `linear_attention(..., causal=True, feature_map="elu")` with RoPE on phi(q), phi(k)
           (chunked scan, chunk 64).
Both are timed forward and forward+backward (grad of a random projection of the output
w.r.t. q, k, v). Time: median of `--repeats` runs (3x more for calls under 50 ms, at most 3
for calls over `--slow-s`) after a compile and a warm-up call, one method after the other.
Peak memory: XLA's compiled memory analysis (argument + output + temp bytes), which is
deterministic and needs no run; it is reported even where a run is skipped because the
analysis says it would not fit in `--mem-limit-gb`.

Prints a markdown table, one JSON line per measured figure (with the machine and the command),
and a summary JSON line (crossover length, linear-fit ratio of linear attention's memory);
writes the log-log figure to docs/figures/attention_scaling.png (--smoke: to a temporary
directory, then deleted).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench import _record  # noqa: E402
from bench._machine import cpu_name  # noqa: E402
from roformer_jax import attention as attn  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ("softmax", "linear")


def machine_info() -> dict:
  dev = jax.devices()[0]
  return {"platform": dev.platform, "device_kind": dev.device_kind, "device_count": jax.device_count(),
          "os": platform.platform(), "cpu": cpu_name(), "cpu_count": os.cpu_count(),
          "python": platform.python_version(), "jax": jax.__version__}


def default_mem_limit_gb() -> float:
  dev = jax.devices()[0]
  if dev.platform != "cpu":
    stats = dev.memory_stats() or {}
    if stats.get("bytes_limit"):
      return 0.8 * stats["bytes_limit"] / 2**30
    return 16.0
  try:
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
  except (ValueError, OSError):
    ram = 16.0
  return min(8.0, 0.4 * ram)


def make_fns(method: str, chunk_size: int):
  """(forward, forward+backward) as functions of (q, k, v, positions, cotangent)."""
  if method == "softmax":
    def fwd(q, k, v, pos):
      t = q.shape[1]
      idx = jnp.arange(t, dtype=jnp.int32)
      mask = attn.make_attention_mask(causal=True, q_index=idx, kv_index=idx)
      return attn.dot_product_attention(q, k, v, mask=mask, q_positions=pos, k_positions=pos)
  else:
    def fwd(q, k, v, pos):
      return attn.linear_attention(q, k, v, q_positions=pos, k_positions=pos, causal=True, feature_map="elu",
                                   chunk_size=chunk_size)

  def fwd_bwd(q, k, v, pos, ct):
    out, vjp = jax.vjp(lambda q, k, v: fwd(q, k, v, pos), q, k, v)
    return out, vjp(ct)

  return jax.jit(lambda q, k, v, pos, ct: fwd(q, k, v, pos)), jax.jit(fwd_bwd)


def memory_bytes(compiled) -> dict:
  ma = compiled.memory_analysis()
  if ma is None:
    return {}
  arg, out, tmp = ma.argument_size_in_bytes, ma.output_size_in_bytes, ma.temp_size_in_bytes
  alias = getattr(ma, "alias_size_in_bytes", 0)
  return {"argument": int(arg), "output": int(out), "temp": int(tmp), "alias": int(alias),
          "peak": int(arg + out + tmp - alias)}


def run(args) -> dict:
  info = machine_info()
  command = " ".join([".venv/bin/python", "bench/attention.py"] + [shlex.quote(a) for a in sys.argv[1:]])
  lengths = []
  n = args.min_len
  while n <= args.max_len:
    lengths.append(n)
    n *= 2
  passes = ("fwd",) if args.no_backward else ("fwd", "fwd+bwd")
  b, nh, h = args.batch, args.heads, args.head_dim
  rng = np.random.default_rng(0)
  results = []  # one dict per (method, pass, N)
  load_before = os.getloadavg()
  t_start = time.perf_counter()
  for n in lengths:
    q, k, v, ct = (jnp.asarray(rng.normal(size=(b, n, nh, h)), jnp.float32) for _ in range(4))
    pos = jnp.arange(n, dtype=jnp.int32)
    for pas in passes:
      runnable = {}
      for method in METHODS:
        fns = make_fns(method, args.chunk_size)
        fn = fns[0] if pas == "fwd" else fns[1]
        t0 = time.perf_counter()
        compiled = fn.lower(q, k, v, pos, ct).compile()
        compile_s = time.perf_counter() - t0
        mem = memory_bytes(compiled)
        row = {"method": method, "pass": pas, "N": n, "mem": mem, "compile_s": compile_s, "ms": None,
               "ms_min": None, "ms_max": None, "repeats": 0, "skipped": None}
        if mem and mem["peak"] > args.mem_limit_gb * 2**30:
          row["skipped"] = f"compiled peak {mem['peak'] / 2**30:.2f} GiB > --mem-limit-gb {args.mem_limit_gb:.1f}"
        else:
          runnable[method] = compiled
        results.append(row)
      # Each method in its own block: a warm-up call, then the repeats back to back. (Round-robin
      # with softmax made linear attention re-fault the pages that softmax's GiB-sized buffers
      # had returned to the OS, which tripled its time at N=8192 on CPU.)
      times = {}
      for m, c in runnable.items():
        t0 = time.perf_counter()
        jax.block_until_ready(c(q, k, v, pos, ct))
        first = time.perf_counter() - t0
        reps = args.repeats
        if first > args.slow_s:
          reps = min(reps, 3)
        elif first < 0.05:
          reps = 3 * reps  # cheap calls: more samples against machine noise
        times[m] = []
        for _ in range(reps):
          t0 = time.perf_counter()
          jax.block_until_ready(c(q, k, v, pos, ct))
          times[m].append(time.perf_counter() - t0)
      for row in results:
        if row["N"] == n and row["pass"] == pas and row["method"] in times:
          ts = times[row["method"]]
          row.update(ms=1e3 * statistics.median(ts), ms_min=1e3 * min(ts), ms_max=1e3 * max(ts), repeats=len(ts))
      del runnable
    print(f"# N={n} done ({time.perf_counter() - t_start:.0f}s elapsed)", file=sys.stderr, flush=True)
  load_after = os.getloadavg()

  def get(method, pas, n, key="ms"):
    for r in results:
      if r["method"] == method and r["pass"] == pas and r["N"] == n:
        return r[key] if key != "peak" else (r["mem"] or {}).get("peak")
    return None

  summary = {"bench": "attention_scaling_summary", "shape": {"B": b, "heads": nh, "H": h, "dtype": "float32"},
             "lengths": lengths, "chunk_size": args.chunk_size, "mem_limit_gb": args.mem_limit_gb, "machine": info, "command": command,
             "date": datetime.date.today().isoformat(), "loadavg_before": load_before, "loadavg_after": load_after,
             "total_s": time.perf_counter() - t_start}
  for pas in passes:
    cross = None
    for n in lengths:
      s, l = get("softmax", pas, n), get("linear", pas, n)
      if s is not None and l is not None and l < s:
        cross = n
        break
    summary[f"crossover_{pas}"] = cross
    later = [(get("softmax", pas, n), get("linear", pas, n)) for n in lengths if cross is not None and n >= cross]
    summary[f"linear_faster_at_every_measured_N_from_crossover_{pas}"] = (
        None if cross is None else all(l < s for s, l in later if s is not None and l is not None))
    # Memory: least-squares fit mem = a + b N for linear attention over the whole range.
    for method in METHODS:
      mems = np.array([get(method, pas, n, "peak") for n in lengths], np.float64)
      ns = np.array(lengths, np.float64)
      a_, b_ = np.linalg.lstsq(np.stack([np.ones_like(ns), ns], 1), mems, rcond=None)[0]
      fit = a_ + b_ * ns
      ratio = mems / fit
      slope = np.polyfit(np.log(ns), np.log(mems), 1)[0]
      summary[f"mem_fit_{method}_{pas}"] = {"a_bytes": a_, "b_bytes_per_token": b_,
                                            "max_mem_over_fit": float(ratio.max()),
                                            "max_fit_over_mem": float((1 / ratio).max()),
                                            "loglog_slope": float(slope)}
    lin = summary[f"mem_fit_linear_{pas}"]
    summary[f"linear_mem_within_1.2x_of_linear_fit_{pas}"] = bool(max(lin["max_mem_over_fit"],
                                                                       lin["max_fit_over_mem"]) <= 1.2)
  return {"results": results, "summary": summary, "passes": passes, "lengths": lengths}


def fmt_bytes(x):
  if x is None:
    return "-"
  return f"{x / 2**20:.1f}"


def print_report(rep) -> str:
  """Prints the tables and the JSON lines; returns the tables (the text before the JSON lines)."""
  res, summ = rep["results"], rep["summary"]
  table = []
  out = table.append
  m = summ["machine"]
  out(f"\nAttention scaling: B={summ['shape']['B']}, heads={summ['shape']['heads']}, H={summ['shape']['H']}, "
      f"float32, causal, RoPE; linear = elu, chunk {summ['chunk_size']}")
  out(f"device {m['platform']} ({m['device_kind']}), {m['cpu_count']} CPUs ({m['cpu']}), jax {m['jax']}; "
      f"load average before/after {summ['loadavg_before'][0]:.2f}/{summ['loadavg_after'][0]:.2f}")
  out(f"command: {summ['command']}\n")
  for pas in rep["passes"]:
    out(f"| N | softmax {pas} ms, median (min) | linear {pas} ms, median (min) | linear / softmax time | softmax peak MiB | "
        f"linear peak MiB | softmax / linear memory |")
    out("|---:|---:|---:|---:|---:|---:|---:|")
    for n in rep["lengths"]:
      s = next(r for r in res if r["method"] == "softmax" and r["pass"] == pas and r["N"] == n)
      l = next(r for r in res if r["method"] == "linear" and r["pass"] == pas and r["N"] == n)
      cell = lambda r: (f"{r['ms']:.2f} ({r['ms_min']:.2f})" if r["ms"] is not None
                        else f"not run ({r['mem']['peak'] / 2**30:.2f} GiB)")
      st, lt = cell(s), cell(l)
      ratio = f"{l['ms'] / s['ms']:.2f}" if s["ms"] and l["ms"] else "-"
      sp, lp = s["mem"].get("peak"), l["mem"].get("peak")
      mr = f"{sp / lp:.1f}" if sp and lp else "-"
      out(f"| {n} | {st} | {lt} | {ratio} | {fmt_bytes(sp)} | {fmt_bytes(lp)} | {mr} |")
    lin = summ[f"mem_fit_linear_{pas}"]
    sm = summ[f"mem_fit_softmax_{pas}"]
    out(f"\n{pas}: crossover (first N where linear is faster): {summ[f'crossover_{pas}']}; linear faster at "
        f"every larger N measured: {summ[f'linear_faster_at_every_measured_N_from_crossover_{pas}']}")
    out(f"{pas}: linear memory vs least-squares fit a + bN (a={lin['a_bytes'] / 2**20:.2f} MiB, "
        f"b={lin['b_bytes_per_token']:.0f} B/token): max mem/fit {lin['max_mem_over_fit']:.3f}, "
        f"max fit/mem {lin['max_fit_over_mem']:.3f}; log-log slope {lin['loglog_slope']:.2f} "
        f"(softmax: {sm['loglog_slope']:.2f}, its linear fit is off by up to "
        f"{max(sm['max_mem_over_fit'], sm['max_fit_over_mem']):.1f}x)\n")
  print("\n".join(table))
  base = {"machine": summ["machine"], "command": summ["command"], "date": summ["date"]}
  for r in res:
    print(json.dumps({"bench": "attention_scaling", **{k: r[k] for k in ("method", "pass", "N", "ms", "ms_min",
                                                                           "ms_max", "repeats", "skipped")},
                      "peak_bytes": r["mem"].get("peak"), "memory": r["mem"], "compile_s": round(r["compile_s"], 3),
                      "shape": summ["shape"], **base}))
  print(json.dumps(summ))
  return "\n".join(table)


def plot(rep, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  res, summ = rep["results"], rep["summary"]
  fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
  colors = {"softmax": "tab:red", "linear": "tab:blue"}
  styles = {"fwd": "-", "fwd+bwd": "--"}
  notes = []
  for method in METHODS:
    for pas in rep["passes"]:
      rows = [r for r in res if r["method"] == method and r["pass"] == pas]
      timed = [r for r in rows if r["ms"] is not None]
      label = f"{method} {pas}"
      ms = np.array([r["ms"] for r in timed])
      err = np.array([[r["ms"] - r["ms_min"] for r in timed], [r["ms_max"] - r["ms"] for r in timed]])
      ax_t.errorbar([r["N"] for r in timed], ms, yerr=err.reshape(2, -1), fmt=styles[pas], marker="o", ms=3,
                    capsize=2, color=colors[method], label=label)
      notes += [f"{method} {pas} N={r['N']} ({r['mem']['peak'] / 2**30:.1f} GiB)" for r in rows if r["ms"] is None]
      ax_m.plot([r["N"] for r in rows], [r["mem"]["peak"] / 2**20 for r in rows], styles[pas], marker="o", ms=3,
                color=colors[method], label=label)
  ns = np.array(rep["lengths"], np.float64)
  lin = summ["mem_fit_linear_fwd"]
  ax_m.plot(ns, (lin["a_bytes"] + lin["b_bytes_per_token"] * ns) / 2**20, ":", color="gray",
            label="linear fit a + bN (linear fwd)")
  for ax, ylabel in ((ax_t, "time per call (ms, median, bars min..max)"), (ax_m, "peak memory (MiB, XLA memory analysis)")):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
  if notes:
    ax_t.text(0.98, 0.02, "not run (compiled peak over the memory limit):\n" + "\n".join(notes),
              transform=ax_t.transAxes, fontsize=7, ha="right", va="bottom")
  cross = summ.get("crossover_fwd")
  if cross:
    ax_t.axvline(cross, color="gray", lw=0.8)
  m = summ["machine"]
  fig.suptitle(f"Causal attention with RoPE, B={summ['shape']['B']}, {summ['shape']['heads']} heads, "
               f"H={summ['shape']['H']}, fp32 — {m['platform']} ({m['cpu_count']} CPUs), jax {m['jax']}", fontsize=10)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--min-len", type=int, default=256)
  p.add_argument("--max-len", type=int, default=16384)
  p.add_argument("--quick", action="store_true", help="N up to 4096 (or --max-len if smaller), 3 repeats")
  p.add_argument("--batch", type=int, default=1)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--head-dim", type=int, default=64)
  p.add_argument("--chunk-size", type=int, default=64)
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--slow-s", type=float, default=2.0, help="at most 3 repeats when one call takes longer")
  p.add_argument("--no-backward", action="store_true", help="forward only")
  p.add_argument("--mem-limit-gb", type=float, default=None,
                 help="do not run a configuration whose compiled peak memory exceeds this (its memory is "
                      "still reported); default: 80%% of the accelerator's memory, or min(8, 40%% of RAM) on CPU")
  p.add_argument("--figure", default=None,
                 help="where the figure goes (default docs/figures/attention_scaling.png; --smoke: a temporary "
                      "directory, deleted afterwards)")
  p.add_argument("--no-figure", action="store_true")
  _record.add_record_arg(p)
  _record.add_smoke_arg(p, "--quick, and N = 64 and 128 only, 2 heads of 16, chunk 16, 1 repeat (overrides those "
                        "flags)")
  args = p.parse_args(argv)
  if args.quick or args.smoke:
    args.max_len = min(args.max_len, 4096)
    args.repeats = min(args.repeats, 3)
  if args.smoke:
    args.min_len, args.max_len, args.heads, args.head_dim, args.chunk_size, args.repeats = 64, 128, 2, 16, 16, 1
  if args.mem_limit_gb is None:
    args.mem_limit_gb = default_mem_limit_gb()
  rep = run(args)
  table = print_report(rep)
  if not args.no_figure:
    _record.write_figure(lambda path: plot(rep, path), "attention_scaling.png", figure=args.figure, smoke=args.smoke)
  bench = _record.record_name("attention", args)
  if bench:
    path = _record.save(bench, figures=_figures(rep), table=table,
                        result={"summary": rep["summary"], "results": rep["results"]})
    print(f"# recorded {path}", file=sys.stderr)


def _figures(rep) -> list[dict]:
  """B4's headline figures per pass: crossover length, linear attention's memory against a linear fit."""
  summ, out = rep["summary"], []
  n_max = max(rep["lengths"])
  for pas in rep["passes"]:
    key = pas.replace("+", "_")
    cross = summ[f"crossover_{pas}"]
    if cross is not None:
      out.append(_record.figure(f"B4.crossover_{key}", f"first N at which causal linear attention is faster ({pas})",
                                cross, "tokens"))
    lin = summ[f"mem_fit_linear_{pas}"]
    off = max(lin["max_mem_over_fit"], lin["max_fit_over_mem"])
    out.append(_record.figure(f"B4.linear_mem_vs_linear_fit_{key}",
                              f"linear attention peak memory vs a least-squares fit a + bN, worst ratio ({pas}, "
                              f"N <= {n_max})", off, "x", goal="<= 1.2x", met=off <= 1.2))
    out.append(_record.figure(f"B4.linear_mem_loglog_slope_{key}",
                              f"log-log slope of linear attention's peak memory vs N ({pas})", lin["loglog_slope"], ""))
    peaks = {r["method"]: (r["mem"] or {}).get("peak") for r in rep["results"] if r["pass"] == pas and r["N"] == n_max}
    if peaks.get("softmax") and peaks.get("linear"):
      out.append(_record.figure(f"B4.softmax_over_linear_mem_{key}",
                                f"softmax / linear attention peak memory at N={n_max} ({pas})",
                                peaks["softmax"] / peaks["linear"], "x"))
  return out


if __name__ == "__main__":
  main()
