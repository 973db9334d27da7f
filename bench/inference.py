"""B9: the RoFormer encoder forward on CPU (inference), our JAX model vs HF transformers' PyTorch model.

Run (from the repository root):
  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python bench/inference.py --record   # shapes short, a, b (minutes)
  python bench/inference.py --smoke        # seconds: the tiny shape, 1 round; torch if at hand

What is timed, on the same weights (the torch worker writes its seeded model with
save_pretrained; `hf.from_pretrained` loads it): one forward of the encoder, input ids
[B, T] -> last hidden state [B, T, D], no padding, dropout off.

- "nnx.jit": `nnx.jit(lambda m, x: m.encode(x))(model, x)`, the call a Flax user writes first:
  it flattens every state array of the model on each call.
- "jitted": `models.jitted(model, "encode")(x)`, the model split once (issue 28's fast path).
- "jitted bf16": the same, loaded with dtype and param_dtype bfloat16.
- "torch" / "torch bf16": `RoFormerModel(input_ids)` under `torch.inference_mode()`, the
  fp32 model and a bfloat16 copy (bench/_torch_forward_worker.py, in a separate venv with torch
  and transformers; torch.set_num_threads(--threads)).

Timing: bench/harness.py's round robin (the order rotates every round, one untimed call per
block). The table gives median ms per forward, min..max over rounds, and torch time / ours for
the same dtype (> 1: we are faster). Before timing, the outputs are checked: our two fp32
paths must agree to 1e-5 and torch's fp32 output to 1e-3 (absolute, on 16 values of row 0).

The record is named per CPU kind (inference.amd_epyc.json, inference.intel_xeon.json), so
docs/benchmarks.md keeps one row per CPU measured, with its ISA (AVX-512, AMX) and whether
huge pages were on (GLIBC_TUNABLES=glibc.malloc.hugetlb=1 applies to both processes: the
worker inherits the environment).

--smoke: the tiny shape, 1 round of 1 call, torch only if --torch-python or the bench venv
already imports it (never created); records nothing (bench/_record.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from bench import _record, harness  # noqa: E402
from roformer_jax import hf, models  # noqa: E402
from roformer_jax.training import metrics  # noqa: E402

SEED = 0
VOCAB = 30522  # BERT's
_SMALL = dict(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
SHAPES = {  # HF RoFormerConfig fields; B, T; rounds x calls per round
    "short": dict(model=_SMALL, batch=8, seq=8, rounds=7, calls=10),  # per-call overhead dominates
    "a": dict(model=_SMALL, batch=8, seq=128, rounds=7, calls=3),
    "b": dict(model=_SMALL, batch=8, seq=512, rounds=5, calls=2),
    "tiny": dict(model=dict(vocab_size=1000, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                            intermediate_size=256), batch=2, seq=16, rounds=1, calls=1),
}
CHECK_ATOL = {"jax": 1e-5, "torch": 1e-3}


def hf_config(model: dict) -> dict:
  """The HF RoFormerConfig both sides use: post-LN, exact gelu, dropout off, 1024 positions."""
  return dict(model, max_position_embeddings=1024, hidden_act="gelu", hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, type_vocab_size=2, rotary_value=False)


def jax_contenders(model_dir: str, ids) -> dict:
  """name -> a call that runs one forward and waits for it; the first output of each, for the check."""
  fp32 = hf.from_pretrained(model_dir, head="encoder")
  bf16 = hf.from_pretrained(model_dir, head="encoder", dtype="bfloat16", param_dtype="bfloat16")
  encode_nnx = nnx.jit(lambda m, x: m.encode(x))
  fast, fast_bf16 = models.jitted(fp32, "encode"), models.jitted(bf16, "encode")
  return {"nnx.jit": lambda: encode_nnx(fp32, ids).block_until_ready(),
          "jitted": lambda: fast(ids).block_until_ready(),
          "jitted bf16": lambda: fast_bf16(ids).block_until_ready()}


def bench_shape(name: str, spec: dict, worker, args, workdir: str) -> dict:
  b, t = spec["batch"], spec["seq"]
  rounds, per_round = (1, 1) if args.smoke else (spec["rounds"], spec["calls"])
  ids_np = np.random.default_rng(SEED).integers(1, spec["model"]["vocab_size"], (b, t))
  model_dir = os.path.join(workdir, name)
  config = hf_config(spec["model"])
  if worker is not None:
    info = worker.call("init", config=config, seed=SEED, save_dir=model_dir, threads=args.threads)
  else:  # --smoke without torch: our own seeded init, written as an HF checkpoint
    model = models.RoFormerModel(hf.config_from_hf({"model_type": "roformer", **config}), rngs=nnx.Rngs(SEED))
    hf.save_pretrained(model, model_dir)
    info = {"params": metrics.count_params(model)}
  ids = jax.numpy.asarray(ids_np, jax.numpy.int32)
  calls = jax_contenders(model_dir, ids)
  outputs = {k: np.asarray(c(), np.float32)[0, :4, :4] for k, c in calls.items()}  # also compiles
  check = {"jitted vs nnx.jit": float(np.abs(outputs["jitted"] - outputs["nnx.jit"]).max())}
  if worker is not None:
    for dtype, key in (("float32", "torch"), ("bfloat16", "torch bf16")):
      out = worker.call("forward", input_ids=ids_np.tolist(), dtype=dtype, n=1)
      if dtype == "float32":
        check["jitted vs torch"] = float(np.abs(outputs["jitted"] - np.asarray(out["sample"], np.float32)).max())
      # the worker keeps the ids of the last call that sent them: the timed calls send none
      calls[key] = (lambda d: lambda: harness.Seconds(worker.call("forward", dtype=d, n=1)["seconds"][0]))(dtype)
  bad = {k: v for k, v in check.items() if not v <= CHECK_ATOL["torch" if "torch" in k else "jax"]}
  if bad:
    raise SystemExit(f"OUTPUT MISMATCH on shape {name}: {bad} (tolerances {CHECK_ATOL}); the contenders do not "
                     "compute the same thing, and their timings would mean nothing.")
  times = harness.round_robin(calls, rounds, rewarm=1, timed=per_round)
  rows = {k: harness.timing(ts) for k, ts in times.items()}
  for k, row in rows.items():
    row["tokens_per_s"] = b * t / (row["ms"] / 1e3)
    base = rows.get("torch bf16" if "bf16" in k else "torch") if not k.startswith("torch") else None
    row["torch_over_this"] = base["ms"] / row["ms"] if base else None
  rows["jitted"]["nnx_jit_over_this"] = rows["nnx.jit"]["ms"] / rows["jitted"]["ms"]
  return {"batch": b, "seq": t, "model": spec["model"], "params": info["params"], "rounds": rounds,
          "calls_per_round": per_round, "check_max_abs_diff": check, "rows": rows}


def table(results: dict) -> str:
  lines = [f"{'shape':6} {'B x T':>8}  {'contender':12} {'ms':>9} {'min..max':>17} {'torch/this':>10}"]
  for name, r in results.items():
    for k, row in r["rows"].items():
      ratio = row.get("torch_over_this")
      lines.append(f"{name:6} {r['batch']:>3} x {r['seq']:<4} {k:12} {row['ms']:9.2f} "
                   f"{row['ms_min']:8.2f}..{row['ms_max']:<8.2f} {'' if ratio is None else f'{ratio:.2f}x':>10}")
  return "\n".join(lines)


def figures(results: dict) -> list[dict]:
  out = []
  for name, r in results.items():
    rows, shape = r["rows"], f"B={r['batch']}, T={r['seq']}"
    out.append(_record.figure(f"B9.{name}.nnx_jit_over_jitted", f"encoder forward, nnx.jit / models.jitted time, {shape}",
                              rows["jitted"]["nnx_jit_over_this"], "x"))
    for k, dtype, goal in (("jitted", "fp32", ">= 1.2x"), ("jitted bf16", "bf16", ">= 1.0x")):
      if rows[k].get("torch_over_this") is not None:
        ratio = rows[k]["torch_over_this"]
        out.append(_record.figure(f"B9.{name}.torch_over_ours_{dtype}",
                                  f"encoder forward, torch / ours time ({dtype}), {shape}", ratio, "x",
                                  goal=goal if name != "short" else None,
                                  met=(ratio >= float(goal[3:-1])) if name != "short" else None))
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shapes", default="short,a,b", help=f"comma-separated subset of {','.join(SHAPES)}")
  parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch.set_num_threads")
  parser.add_argument("--torch-python", default="", help="a python that has torch and transformers (skips the venv)")
  parser.add_argument("--torch-venv", default=harness.DEFAULT_TORCH_VENV, help="the torch venv (created if missing)")
  parser.add_argument("--no-torch", action="store_true", help="the JAX contenders alone")
  _record.add_record_arg(parser)
  _record.add_smoke_arg(parser, "the tiny shape, 1 round of 1 call; torch only if it is at hand")
  args = parser.parse_args()
  names = ["tiny"] if args.smoke else [s.strip() for s in args.shapes.split(",") if s.strip()]
  unknown = [s for s in names if s not in SHAPES]
  if unknown:
    raise SystemExit(f"unknown shapes {unknown}; expected some of {list(SHAPES)}.")
  python = None if args.no_torch else harness.find_torch_python(
      args.torch_python, args.torch_venv, create=not args.smoke, lenient=args.smoke)
  worker = harness.TorchWorker(python, "_torch_forward_worker.py") if python else None
  machine = _record.machine()
  print(f"# {machine['cpu']}, {machine['cpu_count']} cores, ISA {'+'.join(machine['isa']) or '-'}, huge pages "
        f"{'on' if machine['huge_pages'] else 'off'} (both processes)", flush=True)
  results = {}
  try:
    with tempfile.TemporaryDirectory(prefix="b9_inference_") as workdir:
      for name in names:
        results[name] = bench_shape(name, SHAPES[name], worker, args, workdir)
        print(table({name: results[name]}).split("\n", 1)[1], flush=True)
  finally:
    if worker is not None:
      worker.close()
  text = table(results)
  print("\n" + text)
  bench = f"inference.{harness.cpu_kind(machine['cpu'])}"
  name = _record.record_name(bench, args)
  if name:
    summary = {"results": results, "torch": None if worker is None else worker.info, "threads": args.threads}
    print("# recorded", _record.save(name, figures=figures(results), table=text, result=summary))


if __name__ == "__main__":
  main()
