"""Benchmark of the RoPE op: exact phases vs the plain float32 product vs the dense eq. (16).

Run (from the repository root):
  .venv/bin/python bench/rope.py                      # [8, 2048, 16, 128], fp32 and bf16
  .venv/bin/python bench/rope.py --shape 2,512,8,64   # other shapes
  .venv/bin/python bench/rope.py --torch-python /tmp/hfvenv/bin/python   # another torch venv
  .venv/bin/python bench/rope.py --record   # also save the figures for bench/report.py
  .venv/bin/python bench/rope.py --smoke    # seconds: x[1,16,2,8], 1 round; records nothing
  .venv/bin/python bench/rope.py --smoke --pallas   # also bench/rope_pallas.py's kernel (interpreted off a GPU)
  .venv/bin/python bench/rope.py --dynamic --record  # only the dynamic-NTK rows; records rope_dynamic

Bandwidth counts bytes = read + write of x (2 * x.nbytes); the cos/sin tables and the
positions are not counted. All methods are timed round-robin in the same run so that
machine noise hits them alike (the order rotates by one method each round); the table
reports the median and the spread (min..max) of the per-round times, and ratios against
the baseline measured in the same run.

The "HF torch fp32" row is HuggingFace transformers' RoFormer rotary op,
RoFormerSelfAttention.apply_rotary_position_embeddings, on the same fp32 x in HF's layout
[B, N, T, H], with sinusoidal_pos from RoFormerSinusoidalPositionalEmbedding (built once,
not timed, as the model builds it once per forward). torch is not a dependency of this
project: the op runs in bench/_torch_rope_worker.py under --torch-python (default
~/.cache/roformer_jax/bench-torch-venv/bin/python if it exists, else the HF row is skipped),
with --torch-threads threads, driven over stdin/stdout so that its rounds interleave with
the JAX ones. HF's op always rotates a query and a key together; the row times one call on
q and k (two tensors of x's size) and reports half of it, the time for one tensor. Once,
before timing, the rotated query is compared with ours (interleaved layout, as HF RoFormer)
on the same input and the max abs difference is printed.

The dynamic-NTK rows ("... dynamic fp32", issue 37) rotate x with rope_type 'dynamic' (factor 4,
max_position_embeddings T / 4) at positions [B, T] left-padded by a different amount per row,
so each row's length, and with it its base, is taken from its positions at run time, as a
model does. "exact" forms those frequencies' phase words per row in float-float
(rope/float2.py); "plain" is the float32 fallback it replaced (the float32 base and product,
HF's formula); "exact ... static" passes seq_len=T (float64 words at trace time) for the cost
of the exact path without run-time frequencies. --dynamic times only these rows and the copy.
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench import _record, harness  # noqa: E402
from roformer_jax import rope  # noqa: E402

DEFAULT_TORCH_PYTHON = os.path.join(harness.DEFAULT_TORCH_VENV, "bin", "python")
HF_ROW = "HF torch fp32"


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


def _start_hf(args, x32: np.ndarray, tmpdir: str):
  """Starts the torch worker on x32; returns (worker, init reply, HF's rotated x) or None if skipped.

  A missing or failing interpreter skips the row (with a note) when it is the default one, or
  under --smoke (a smoke run checks our side; torch is never a dependency); an explicit
  --torch-python that does not work is an error otherwise.
  """
  if not args.torch_python:
    print("HF torch row skipped: --torch-python is empty.")
    return None
  lenient = args.torch_python == DEFAULT_TORCH_PYTHON or args.smoke
  python = harness.find_torch_python(args.torch_python, lenient=lenient)
  if python is None:
    return None
  x_path, out_path = os.path.join(tmpdir, "x.f32"), os.path.join(tmpdir, "hf_out.f32")
  x32.tofile(x_path)
  try:
    worker = harness.TorchWorker(python, "_torch_rope_worker.py")
    info = worker.call("init", x_path=x_path, out_path=out_path, shape=list(x32.shape), threads=args.torch_threads,
                       device=args.torch_device)
  except RuntimeError as e:
    if "worker" in locals():
      worker.close()
    if lenient:
      print(f"HF torch row skipped: the worker failed under {python}: {e}")
      return None
    raise SystemExit(f"the torch worker failed under --torch-python {python}: {e}") from e
  hf_out = np.fromfile(out_path, dtype=np.float32).reshape(x32.shape)
  os.remove(x_path)
  os.remove(out_path)
  return worker, info, hf_out


def _per_call(fn, fn_args, inner: int):
  """A harness call: `inner` calls of fn, returning the seconds per call."""
  def call():
    start = time.perf_counter()
    for _ in range(inner):
      out = fn(*fn_args)
    jax.block_until_ready(out)
    return harness.Seconds((time.perf_counter() - start) / inner)
  return call


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shape", default="8,2048,16,128", help="B,T,N,H of x")
  parser.add_argument("--rounds", type=int, default=7)
  parser.add_argument("--inner", type=int, default=3)
  parser.add_argument("--tables-in", action="store_true",
                      help="add rows that rotate with cos/sin tables computed outside the timed op")
  parser.add_argument("--pallas", action="store_true",
                      help="add rows of bench/rope_pallas.py's Pallas kernel (half layout, tables in) beside XLA's "
                           "same op; a kernel that fails to compile here is reported and skipped")
  parser.add_argument("--no-dense", action="store_true", help="skip the (slow) dense-matrix method")
  parser.add_argument("--dynamic", action="store_true",
                      help="time only the dynamic-NTK rows (per-row lengths from traced positions: exact vs the "
                           "float32 fallback vs a static length) and the copy; --record saves them as rope_dynamic")
  parser.add_argument("--torch-python", default=DEFAULT_TORCH_PYTHON,
                      help="interpreter with torch + transformers for the HF row ('' skips it); default: the "
                           "bench-torch-venv if it exists, else the row is skipped")
  parser.add_argument("--torch-threads", type=int, default=2, help="torch.set_num_threads in the worker")
  parser.add_argument("--torch-device", default="cpu", help="torch device of the HF row: cpu, or cuda on a GPU machine "
                      "(then its times are read after torch.cuda.synchronize)")
  _record.add_record_arg(parser)
  _record.add_smoke_arg(parser, "x[1,16,2,8], 1 round of 1 call (overrides --shape, --rounds, --inner); the HF row "
                        "only if its torch python works")
  args = parser.parse_args()
  if args.smoke:
    args.shape, args.rounds, args.inner = "1,16,2,8", 1, 1
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
  # Dynamic NTK with each row's length read from its positions at run time (issue 37).
  dyn = {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": max(t // 4, 1)}
  dyn_pos = jnp.asarray(np.maximum(np.arange(t) - rng.integers(0, t // 2 + 1, (b, 1)), 0), jnp.int32)
  dynamic_rows = {
      "plain dynamic fp32": jax.jit(lambda x, p: rope.apply_rotary(x, p, scaling=dyn, exact=False)),
      "exact dynamic fp32": jax.jit(lambda x, p: rope.apply_rotary(x, p, scaling=dyn)),
      "exact dynamic static fp32": jax.jit(lambda x, p: rope.apply_rotary(x, p, scaling=dyn, seq_len=t)),
  }
  if args.dynamic:
    args.torch_python, args.no_dense, args.tables_in, args.pallas = "", True, False, False
    cases["copy fp32"] = (copy, (x32,), "fp32", "plain dynamic fp32")
  for tag, x in (("fp32", x32), ("bf16", x16)) if not args.dynamic else ():
    cases[f"copy {tag}"] = (copy, (x,), tag, f"plain {tag}")
    cases[f"plain {tag}"] = (plain, (x, positions), tag, f"plain {tag}")
    cases[f"exact {tag}"] = (exact, (x, positions), tag, f"plain {tag}")
    cases[f"exact half {tag}"] = (exact_half, (x, positions), tag, f"plain {tag}")
  if not args.dynamic:
    cases["plain pos[B,T] fp32"] = (plain, (x32, per_example), "fp32", "plain pos[B,T] fp32")
    cases["exact pos[B,T] fp32"] = (exact, (x32, per_example), "fp32", "plain pos[B,T] fp32")
  for name, fn in dynamic_rows.items():
    cases[name] = (fn, (x32, dyn_pos), "fp32", "plain dynamic fp32")
  # Multi-axis (M-RoPE) rows: positions [T, 3] (t, h, w), Qwen2-VL's chunked sections (16, 24, 24)
  # and Qwen3-VL's interleaved (24, 20, 20) at H = 128 (scaled to other H); baseline: the 1-D
  # half-layout op on the same x.
  k = h // 2
  mpos = jnp.asarray(np.stack([np.arange(t), rng.integers(0, 64, t), rng.integers(0, 64, t)], -1), jnp.int32)
  for name, sl, hw in (("exact M-RoPE fp32", "chunked", 3 * k // 8), ("exact M-RoPE intl fp32", "interleaved",
                                                                       5 * k // 16)) if not args.dynamic else ():
    sections = (k - 2 * hw, hw, hw)
    fn = jax.jit(functools.partial(lambda x, p, sl, sections: rope.apply_rotary(
        x, p, layout="half", sections=sections, section_layout=sl), sl=sl, sections=sections))
    cases[name] = (fn, (x32, mpos), "fp32", "exact half fp32")
  if args.tables_in:
    # The rotation alone, its cos/sin tables computed once outside the timed function (as the
    # models do, once per forward): against the exact rows it shows what computing the tables
    # inside the op's fusion costs (cos/sin per element of x on a GPU, not per [T, K] entry).
    cos, sin = jax.jit(lambda p: rope.rotary_cos_sin(p, h))(positions)
    rotate = jax.jit(lambda x, c, s: rope.rotate(x, c, s))
    for tag, x in (("fp32", x32), ("bf16", x16)):
      cases[f"rotate {tag} tables in"] = (rotate, (x, cos, sin), tag, f"plain {tag}")
  if args.pallas:
    # XLA's half-layout rotation with its tables computed outside, and the Pallas kernel doing
    # the same with blocks of 1, 2 or 4 rows of [N, H] (bf16; fp32 at 2), whose lowering may
    # fail on a backend: such a row is reported and left out.
    from bench import rope_pallas
    cos_h, sin_h = jax.jit(lambda p: rope.rotary_cos_sin(p, h))(positions)
    rotate_half = jax.jit(lambda x, c, s: rope.rotate(x, c, s, layout="half"))
    for tag, x, blocks in (("fp32", x32, (2,)), ("bf16", x16, (1, 2, 4))):
      cases[f"rotate half {tag} tables in"] = (rotate_half, (x, cos_h, sin_h), tag, f"plain {tag}")
      for bt in blocks:
        if (b * t) % bt:
          continue
        fn = jax.jit(functools.partial(rope_pallas.rotate_half, block_t=bt))
        try:
          jax.block_until_ready(fn(x, cos_h, sin_h))
        except Exception as e:  # noqa: BLE001 - a lowering this backend lacks: say so, time the rest
          print(f"# pallas {tag} block_t={bt} skipped: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
          continue
        cases[f"pallas half {tag} bt={bt}"] = (fn, (x, cos_h, sin_h), tag, f"plain {tag}")
  if not args.no_dense:
    cases["dense eq.16 fp32"] = (jax.jit(_dense_rotation_fn(h)), (x32, positions), "fp32", "plain fp32")

  tmpdir = tempfile.mkdtemp(prefix="roformer_rope_bench_")
  hf = external = None
  check = {}
  try:
    hf = _start_hf(args, np.asarray(x32), tmpdir)
    if hf is not None:
      worker, hf_info, hf_out = hf
      for label, fn in (("exact", exact), ("plain", plain)):
        ours = np.asarray(fn(x32, positions))
        check[label] = float(np.max(np.abs(ours - hf_out)))
      del hf_out
      cases[HF_ROW] = (None, None, "fp32", "plain fp32")
      # One HF call rotates q and k (each of x's size): half of it is the time for one tensor.
      external = {HF_ROW: lambda n: harness.Seconds(worker.call("time", inner=n)["seconds"] / 2)}
    calls = {k: _per_call(fn, fn_args, args.inner) for k, (fn, fn_args, _, _) in cases.items() if k != HF_ROW}
    calls.update({k: functools.partial(fn, args.inner) for k, fn in (external or {}).items()})
    for k, (fn, fn_args, _, _) in cases.items():  # compile + warm up
      if k == HF_ROW:
        external[k](1)
      else:
        jax.block_until_ready(fn(*fn_args))
    times = harness.round_robin(calls, args.rounds, rewarm=0)
  finally:
    if hf is not None:
      hf[0].close()
    shutil.rmtree(tmpdir, ignore_errors=True)
  nbytes = {"fp32": 2 * x32.nbytes, "bf16": 2 * x16.nbytes}
  if args.dynamic:
    # The float64 check of the dynamic rows' phases: max |cos - cos64|, |sin - sin64| over the batch.
    lengths = np.asarray(dyn_pos).max(-1) + 1
    base = 10000.0 * (4.0 * np.maximum(lengths, dyn["max_position_embeddings"]) / dyn["max_position_embeddings"]
                      - 3.0) ** (h / (h - 2))
    angles = np.asarray(dyn_pos, np.float64)[..., None] * base[:, None, None] ** (-np.arange(0, h, 2) / h)
    for label, exact_phases in (("exact", True), ("plain", False)):
      cos, sin = jax.jit(lambda p, e=exact_phases: rope.rotary_cos_sin(p, h, scaling=dyn, exact=e))(dyn_pos)
      check[label] = float(max(np.abs(np.asarray(cos) - np.cos(angles)).max(),
                               np.abs(np.asarray(sin) - np.sin(angles)).max()))
  rows = {}
  for name in cases:
    ts = times[name]
    med = statistics.median(ts)
    rows[name] = {"ms": med * 1e3, "ms_min": min(ts) * 1e3, "ms_max": max(ts) * 1e3,
                  "gb_s": nbytes[cases[name][2]] / med / 1e9}
  for name, row in rows.items():
    _, _, tag, baseline = cases[name]
    row["frac_of_copy_bw"] = row["gb_s"] / rows[f"copy {tag}"]["gb_s"]
    row["time_vs_baseline"] = row["ms"] / rows[baseline]["ms"]
    row["baseline"] = baseline
  hf_ratio = rows[HF_ROW]["ms"] / rows["exact fp32"]["ms"] if HF_ROW in rows else None

  device = jax.devices()[0]
  table = [f"RoPE op on x[{b},{t},{n},{h}], device {device.device_kind} ({jax.device_count()} x "
           f"{device.platform}), jax {jax.__version__}, {args.rounds} rounds x {args.inner}",
           "positions [T] shared by the batch unless the row says pos[B,T] (random, up to 2^24); dynamic rows: "
           f"factor 4, max_position_embeddings {dyn['max_position_embeddings']}, positions [B,T] 0..T-1 left-padded "
           "per row, each row's length from its positions"]
  if args.dynamic:
    table.append(f"check vs float64, dynamic rows' cos/sin: exact {check['exact']:.3g}, plain {check['plain']:.3g}")
  if hf is not None:
    info = hf[1]
    table.append(f"HF torch: transformers {info['transformers']}, torch {info['torch']}, python {info['python']}, "
                 f"{info['threads']} threads; x as [B,N,T,H] {info['q_shape']}; ms = one call on q and k / 2")
    table.append(f"check, same input, positions 0..{t - 1}: max |HF - exact| = {check['exact']:.3g}, "
                 f"max |HF - plain| = {check['plain']:.3g}")
  table.append(f"{'method':<27}{'ms (median)':>12}{'min..max':>18}{'GB/s':>8}{'of copy':>9}{'time ratio':>12}"
               "  baseline")
  for name, row in rows.items():
    table.append(f"{name:<27}{row['ms']:>12.2f}{row['ms_min']:>9.2f}..{row['ms_max']:<7.2f}{row['gb_s']:>8.2f}"
                 f"{row['frac_of_copy_bw']:>9.0%}{row['time_vs_baseline']:>12.3f}  {row['baseline']}")
  if hf_ratio is not None:
    table.append(f"HF torch fp32 / exact fp32 time: {hf_ratio:.2f}x "
                 f"(goal >= 8x: {'met' if hf_ratio >= 8 else 'missed'})")
  print("\n".join(table))
  summary = {
      "bench": "rope_op", "shape": [b, t, n, h], "device": device.device_kind, "platform": device.platform,
      "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "jax": jax.__version__,
      "command": "python bench/rope.py " + " ".join(sys.argv[1:]), "results": rows,
      "goal_exact_overhead_le_15pct": max(rows[name]["time_vs_baseline"] for name in (
          ("exact dynamic fp32",) if args.dynamic else ("exact fp32", "exact pos[B,T] fp32"))) <= 1.15,
      "goal_exact_ge_50pct_copy_bw": None if args.dynamic else rows["exact fp32"]["frac_of_copy_bw"] >= 0.5,
      "dynamic_cos_sin_error_vs_float64": check if args.dynamic else None,
      "hf": None if hf is None else {**hf[1], "timing": "one call rotates q and k; ms = per call / 2",
                                     "max_abs_diff_vs_exact": check["exact"],
                                     "max_abs_diff_vs_plain": check["plain"]},
      "hf_time_over_exact_fp32": hf_ratio,
      "goal_ge_8x_faster_than_hf": None if hf_ratio is None else hf_ratio >= 8,
  }
  print(json.dumps(summary))
  name = _record.record_name("rope_dynamic" if args.dynamic else "rope", args)
  if name:
    figures = _dynamic_figures(rows, check) if args.dynamic else _figures(rows, hf_ratio)
    path = _record.save(name, figures=figures, table="\n".join(table), result=summary)
    print(f"# recorded {path}", file=sys.stderr)


def _figures(rows: dict, hf_ratio: float | None) -> list[dict]:
  """B1's headline figures (issues #2 and #6)."""
  fig = _record.figure
  out = [fig("B1.exact_fp32_gb_s", "exact fp32: bandwidth (read + write of x)", rows["exact fp32"]["gb_s"], "GB/s")]
  for tag in ("fp32", "bf16"):
    frac = 100 * rows[f"exact {tag}"]["frac_of_copy_bw"]
    out.append(fig(f"B1.exact_{tag}_of_copy_bw", f"exact {tag}: share of the copy op's bandwidth", frac, "%",
                   goal=">= 50%", met=frac >= 50))
  for name, label in (("exact fp32", "positions [T]"), ("exact pos[B,T] fp32", "positions [B, T]")):
    ratio = rows[name]["time_vs_baseline"]
    key = "B1.exact_over_plain_fp32_time" if name == "exact fp32" else "B1.exact_over_plain_pos_bt_fp32_time"
    out.append(fig(key, f"exact / plain fp32 time, {label}", ratio, "x", goal="<= 1.15", met=ratio <= 1.15))
  for name, key in (("exact M-RoPE fp32", "B1.mrope_over_1d_fp32_time"),
                    ("exact M-RoPE intl fp32", "B1.mrope_interleaved_over_1d_fp32_time")):
    ratio = rows[name]["time_vs_baseline"]
    out.append(fig(key, f"{name[6:]} (positions [T, 3]) / 1-D half-layout time, exact", ratio, "x",
                   goal="<= 1.15", met=ratio <= 1.15))
  if hf_ratio is not None:
    out.append(fig("B1.exact_fp32_vs_hf", "HF torch fp32 time / exact fp32 time", hf_ratio, "x", goal=">= 8x",
                   met=hf_ratio >= 8))
  return out


def _dynamic_figures(rows: dict, check: dict) -> list[dict]:
  """--dynamic's figures (issue 37): the cost of exact phases when the frequencies are traced."""
  fig = _record.figure
  ratio = rows["exact dynamic fp32"]["time_vs_baseline"]
  return [
      fig("B1.exact_over_plain_dynamic_fp32_time", "dynamic NTK, length from traced positions: exact / float32 time",
          ratio, "x", goal="<= 1.15", met=ratio <= 1.15),
      fig("B1.exact_dynamic_over_static_fp32_time", "dynamic NTK: traced-length exact / static-length exact time",
          rows["exact dynamic fp32"]["ms"] / rows["exact dynamic static fp32"]["ms"], "x"),
      fig("B1.dynamic_exact_cos_sin_error", "dynamic NTK, traced length: max cos/sin error vs float64, exact",
          check["exact"], ""),
      fig("B1.dynamic_plain_cos_sin_error", "dynamic NTK, traced length: max cos/sin error vs float64, float32",
          check["plain"], ""),
  ]


if __name__ == "__main__":
  main()
