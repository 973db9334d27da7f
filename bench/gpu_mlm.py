"""B3: the RoFormer-base MLM pre-training step at seq 512 in bf16 on a GPU.

Run (from the repository root):
  .venv/bin/python bench/gpu_mlm.py                   # a GPU: roformer-base, B=64 x T=512 (about 3 min)
  .venv/bin/python bench/gpu_mlm.py --batch 128 --trace /tmp/b3_trace
  .venv/bin/python bench/gpu_mlm.py --smoke           # any machine: a tiny model, checks the plumbing
Without a GPU (and without --smoke) it prints why and exits 0, so `make bench` runs anywhere.

The step is the trainer's own (`trainer.create_state` + `trainer.train_step`, jitted with the
trainer's shardings over every local device, state donated): forward, the MLM loss at the
masked positions only (M = `pipeline.mlm_max_predictions` slots per row, 15% of the tokens
scored), backward and the Sec. 4.2 AdamW update. Parameters and optimiser moments are float32;
the model computes in bfloat16 (`model.dtype`), with float32 LayerNorm statistics, softmax and
logits. One fixed synthetic batch per variant (random ids, so the loss stays near log V).

Variants, each compiled and timed separately from the same initial weights:
- "auto": full 512-token rows (no padding, no packing: no dense mask) and dropout 0, so
  `attention_implementation="auto"` takes cuDNN's fused attention on a GPU;
- "xla": the same with `attention_implementation="xla"`: cuDNN vs XLA attention;
- "no-rope": "auto" with the rotation made the identity while tracing (the cos/sin
  tables then fold away). 1 - t(no-rope) / t(auto) is RoPE's share of the step (goal <= 2%);
- "packed": the pipeline's packed rows (4 documents of T/4 per row: segment ids, positions
  restarting per document), whose dense segment mask keeps cuDNN out: "auto" then takes XLA's
  dense attention, or the chunked kernel once one call's float32 logits pass
  `attention.GPU_DENSE_LOGITS_BYTES` (4 GiB; e.g. --batch 8 --seq 4096: 6 GiB);
- "packed-xla": "packed" with XLA's dense attention forced: beside "packed" at such a shape,
  the GPU's dense/chunked switch measured on the real model (time and "temp GiB");
- "bert-dropout": "auto" with BERT's dropout 0.1 (hidden and attention probabilities), which
  takes the explicit XLA attention path: what configs/bert_base_mlm.py ran before it set
  attention_dropout 0;
- "config": configs/bert_base_mlm.py's own dropouts (hidden 0.1, attention 0) on its unmasked
  rows (`data.document_mask=False`): the step that config trains with;
- "config-rbg", "config-unsafe-rbg": "config" with the dropout stream drawn by JAX's rbg /
  unsafe_rbg PRNG (`config.dropout_rng`) instead of threefry: the same distribution, other
  random bits, fewer instructions per bit;
- "full-logits": "auto" scoring the loss on [B, T, V] logits (the batch without
  `masked_positions`, its weights zero off the masked tokens): what the masked head (B x M
  rows through the vocabulary projection, the default) saves. The same loss and gradients;
- "fused-qkv": "auto" with `model.fused_qkv` (q, k and v as one matmul over the stacked
  kernels; the same parameters);
- "gelu-tanh": "auto" with the tanh GELU (`activation="gelu_new"`) instead of BERT's exact erf
  GELU: what the exact form costs (a different model function, not a drop-in for BERT);
- "gelu-saved": "auto" with the exact GELU differentiated by plain autodiff, which keeps its
  intermediates for the backward pass, where the models recompute it from its input
  (`models.ACTIVATIONS`): what the recomputation saves (the same values).
Timing: after compilation (lower + compile wall time, per variant) and --warmup steps, each
of --rounds rounds runs --steps steps of every variant in turn (the order rotates,
bench/harness.py), and a
round's time is read after the last step's loss is on the host. The table gives the median and
min..max over rounds of ms/step, tokens/s (B x T per step) and model TFLOP/s.

MFU: model FLOPs per token are `metrics.mlm_train_flops_per_token`: 6 x the parameters, with
the MLM head and the tied vocabulary projection counted at the M/T scored positions only,
plus softmax attention's 12 x L x T x D. The issue's plain "6N + attention" (every parameter
at every position) is reported beside it, and XLA's own FLOP count of the compiled step as a
check. The peak is read off the device (`metrics.peak_flops_info`: SMs x max SM clock x the
architecture's bf16 FLOP/clock/SM), and a bf16 [8192^3] matmul is timed in the same run as
the achievable rate. --smoke on a CPU reports the fraction of a float32 matmul instead.

--remat none|full|dots sets `model.remat` for every variant (more batch per GPU for some
recomputation); the "temp GiB" column is XLA's temporary buffer size of the compiled step
(`memory_analysis`), mostly the activations kept for the backward pass. --smoke
--base-on-cpu runs the full model on a CPU (slow), e.g. to read that column there.

--trace DIR writes a profiler trace of one round of the "auto" and "xla" variants, each in
DIR/<variant> (Perfetto JSON, XPlane and the compiled step's HLO), and prints where the device
time went (bench/trace_summary.py: the top kernels, and the time under the "rope", "attention"
and "optimizer" named scopes: RoPE's share read off the profile, beside the no-rope ablation).
The last line printed is one JSON object with every figure, the machine and the versions.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import gzip
import json
import os
import statistics
import sys
import time
from unittest import mock

ROOT = os.path.dirname(os.path.abspath(os.path.dirname(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from bench import _record as record, harness  # noqa: E402
from bench.harness import matmul_flops  # noqa: E402
from roformer_jax import mesh as mesh_lib, models, positional  # noqa: E402
from roformer_jax.training import metrics, trainer
from roformer_jax.training.data import pipeline  # noqa: E402

GOAL_MFU = 0.45
GOAL_ROPE_SHARE = 0.02
VARIANTS = ("auto", "xla", "no-rope", "packed", "packed-xla", "bert-dropout", "config", "config-rbg",
            "config-unsafe-rbg", "full-logits", "fused-qkv", "gelu-tanh", "gelu-saved")
# (lever, its baseline): the ratios the table's last lines give. full-logits and auto, and
# each config-* and config, score the same loss (rbg: another dropout stream, so not the same number).
PAIRS = (("gelu-saved", "auto"), ("fused-qkv", "auto"), ("full-logits", "auto"), ("config-rbg", "config"),
         ("config-unsafe-rbg", "config"), ("packed-xla", "packed"))
# "gelu-saved"'s activation: jax.nn's exact GELU without models.ACTIVATIONS' jax.checkpoint,
# registered only while that variant is built and traced (`Variant`), never for the process.
SAVED_GELU = {"gelu_saved": functools.partial(jax.nn.gelu, approximate=False)}


def variant_activations(name: str):
  """The context in which variant `name` is built and traced: "gelu-saved"'s activation registered."""
  return mock.patch.dict(models.ACTIVATIONS, SAVED_GELU if name == "gelu-saved" else {})
SMOKE_MODEL = dict(vocab_size=512, d_model=64, num_layers=2, num_heads=4, d_ff=256)


def load_config(smoke: bool, batch: int, seq: int, remat: str = "none"):
  """configs/bert_base_mlm.py in bf16 compute (its model, optimiser and masking settings)."""
  from configs import bert_base_mlm
  config = bert_base_mlm.get_config()
  config.batch_size = batch
  config.data.max_length = seq
  config.model.dtype = "bfloat16"
  config.model.param_dtype = "float32"
  config.model.max_position = max(config.model.max_position, seq)
  config.model.remat = remat
  if smoke:
    config.model.update(SMOKE_MODEL)
    config.data.vocab_size = SMOKE_MODEL["vocab_size"]
  return config


def variant_config(config, name: str):
  c = config.copy_and_resolve_references()
  if not name.startswith("config"):  # "config*" keep configs/bert_base_mlm.py's own dropouts
    dropout = 0.1 if name == "bert-dropout" else 0.0
    c.model.dropout = c.model.attention_dropout = dropout
  c.dropout_rng = {"config-rbg": "rbg", "config-unsafe-rbg": "unsafe_rbg"}.get(name, "threefry")
  c.model.attention_implementation = "xla" if name in ("xla", "packed-xla") else "auto"
  c.model.fused_qkv = name == "fused-qkv"
  if name in ("gelu-tanh", "gelu-saved"):
    c.model.activation = {"gelu-tanh": "gelu_new", "gelu-saved": "gelu_saved"}[name]
  return c


def make_batch(config, name: str, *, seed: int = 0) -> dict[str, np.ndarray | None]:
  """One global batch in the pipeline's MLM format (unpacked rows unless `name` is "packed")."""
  b, t = config.batch_size, config.data.max_length
  v = config.model.vocab_size
  m = pipeline.mlm_max_predictions(config.data, t)
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, v, (b, t)).astype(np.int32)
  scored = max(1, round(config.data.mlm_probability * t))
  pos = np.sort(np.stack([rng.choice(t, scored, replace=False) for _ in range(b)]), axis=1)
  masked_positions = np.zeros((b, m), np.int32)
  masked_positions[:, :scored] = pos
  masked_weights = np.zeros((b, m), np.float32)
  masked_weights[:, :scored] = 1.0
  rows = np.arange(b)[:, None]
  masked_targets = np.zeros((b, m), np.int32)
  masked_targets[:, :scored] = ids[rows, pos]
  inputs = ids.copy()
  inputs[rows, pos] = 4  # the mask id
  weights = np.zeros((b, t), np.float32)
  weights[rows, pos] = 1.0
  batch = {"inputs": inputs, "targets": ids, "weights": weights, "masked_positions": masked_positions,
           "masked_targets": masked_targets, "masked_weights": masked_weights,
           "segment_ids": None, "positions": None}
  if name == "full-logits":  # the [B, T, V] loss: targets and weights over every position
    batch = {k: v for k, v in batch.items() if not k.startswith("masked_")}
  if name in ("packed", "packed-xla"):
    docs = 4
    batch["segment_ids"] = np.repeat(np.arange(1, docs + 1, dtype=np.int32), t // docs)[None].repeat(b, 0)
    batch["positions"] = np.tile(np.arange(t // docs, dtype=np.int32), docs)[None].repeat(b, 0)
  return batch


@contextlib.contextmanager
def rope_disabled():
  """The rotation made the identity while tracing: the ablation behind RoPE's share."""
  with mock.patch.object(positional.RotaryConfig, "apply", lambda self, x, positions, **kw: x), \
       mock.patch.object(positional.RotaryConfig, "rotate", lambda self, x, cos_sin: x):
    yield


class Variant:
  """One compiled train step, its state and its batch."""

  def __init__(self, name: str, config, mesh, rules):
    self.name, self.config = name, variant_config(config, name)
    tx, _, _ = trainer.make_optimizer(self.config)
    with variant_activations(name):
      self.graphdef, self.state = trainer.create_state(self.config, mesh, rules, tx)
    local = make_batch(self.config, name)
    self.tokens = local["inputs"].size
    sharding = mesh_lib.batch_sharding(mesh)
    self.batch = {k: None if v is None else jax.device_put(v, sharding) for k, v in local.items()}
    state_sharding = jax.tree.map(lambda x: x.sharding, self.state)
    step = functools.partial(trainer.train_step, self.graphdef, task="mlm", label_smoothing=0.0)
    jitted = jax.jit(step, in_shardings=(state_sharding, sharding), out_shardings=(state_sharding, None),
                     donate_argnums=(0,))
    t0 = time.perf_counter()
    with rope_disabled() if name == "no-rope" else contextlib.nullcontext(), \
         variant_activations(name):
      lowered = jitted.lower(self.state, self.batch)
    t1 = time.perf_counter()
    self.compiled = lowered.compile()
    t2 = time.perf_counter()
    self.lower_s, self.compile_s = t1 - t0, t2 - t1
    cost = self.compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    # XLA counts the FLOPs of one device's shard of the SPMD program; the batch is split evenly.
    self.xla_flops = float(cost.get("flops", 0.0)) * mesh.size if cost else 0.0
    self.attention_kernel = attention_kernel(lowered.as_text())
    memory = self.compiled.memory_analysis()  # XLA's temporary buffers: activations kept for backward
    self.temp_gib = memory.temp_size_in_bytes / 2 ** 30 if memory is not None else None
    self.losses: list[float] = []
    self.round_ms: list[float] = []

  def run(self, steps: int) -> harness.Seconds:
    """Runs `steps` steps; returns seconds per step, timed until the last loss is on the host."""
    t0 = time.perf_counter()
    for _ in range(steps):
      self.state, out = self.compiled(self.state, self.batch)
    loss = float(out["loss"])
    seconds = (time.perf_counter() - t0) / steps
    self.losses.append(loss)
    if not np.isfinite(loss):
      raise FloatingPointError(f"variant {self.name!r}: loss {loss} after {len(self.losses)} blocks")
    return harness.Seconds(seconds)


def profile(variant: Variant, trace_dir: str, steps: int) -> dict:
  """Traces `steps` steps of a variant, saves its compiled HLO beside, prints where the time went."""
  from bench import trace_summary
  with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
    variant.run(steps)
  hlo = variant.compiled.as_text()
  with gzip.open(os.path.join(trace_dir, "step.hlo.txt.gz"), "wt") as f:
    f.write(hlo)
  summary = trace_summary.summarise(trace_dir, [hlo])
  print(f"--- profile of {steps} steps of {variant.name!r} ({trace_dir}) ---")
  print(trace_summary.format_summary(summary))
  return summary


def attention_kernel(stablehlo: str) -> str:
  """"cudnn" if the lowered step calls cuDNN's fused attention, else "xla"."""
  return "cudnn" if "__cudnn$fmha" in stablehlo else "xla"


def flop_counts(variant: Variant) -> dict[str, float]:
  """Model FLOPs per token: masked-head count, the plain 6N + attention, and XLA's count."""
  cfg = variant.config
  model, _ = nnx.merge(variant.graphdef, variant.state)
  n = metrics.count_params(model)
  head = metrics.mlm_head_params(model)
  t = cfg.data.max_length
  m = pipeline.mlm_max_predictions(cfg.data, t)
  common = dict(num_layers=cfg.model.num_layers, seq_len=t, d_model=cfg.model.d_model)
  return {"params": n, "head_params": head, "scored_slots_per_row": m,
          "model": metrics.mlm_train_flops_per_token(n, head, scored_fraction=m / t, **common),
          "six_n_plus_attention": metrics.train_flops_per_token(n, causal=False, **common),
          "xla": variant.xla_flops / variant.tokens}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--batch", type=int, default=0, help="global batch (default 64; --smoke 2 per device)")
  parser.add_argument("--seq", type=int, default=0, help="tokens per row (default 512; --smoke 128)")
  parser.add_argument("--rounds", type=int, default=0, help="timed rounds (default 7; --smoke 1)")
  parser.add_argument("--steps", type=int, default=0, help="steps per variant per round (default 5; --smoke 1)")
  parser.add_argument("--warmup", type=int, default=None,
                      help="untimed steps per variant after compiling (default 2; --smoke 1)")
  parser.add_argument("--variants", default=None,
                      help="comma-separated subset of: " + ", ".join(VARIANTS) + " (default: all; --smoke: auto,no-rope)")
  parser.add_argument("--smoke", action="store_true",
                      help="a tiny model on any backend, 1 round: checks the plumbing only (--batch, --seq, --rounds, "
                      "--steps, --warmup still apply). --record then writes only to $ROFORMER_BENCH_RESULTS, as "
                      "gpu_mlm_smoke.json")
  parser.add_argument("--base-on-cpu", action="store_true",
                      help="with --smoke: the full roformer-base model instead of the tiny one (slow)")
  parser.add_argument("--remat", default="none", choices=("none", "full", "dots"), help="model.remat for every variant")
  parser.add_argument("--trace", default="", help="write a profiler trace of one round of 'auto' and 'xla' here")
  parser.add_argument("--json-out", default="", help="also write the JSON summary to this file")
  record.add_record_arg(parser)
  args = parser.parse_args(argv)
  if args.variants is None:  # --smoke: the two variants RoPE's share of the step needs
    args.variants = "auto,no-rope" if args.smoke else ",".join(VARIANTS)
  names = [v.strip() for v in args.variants.split(",") if v.strip()]
  unknown = [v for v in names if v not in VARIANTS]
  if unknown or not names:
    parser.error(f"--variants {args.variants!r}: unknown {unknown}; choose from {', '.join(VARIANTS)}")
  backend = jax.default_backend()
  if backend != "gpu" and not args.smoke:
    print(f"B3 needs a GPU (the default JAX backend is {backend!r}); skipped. "
          "`python bench/gpu_mlm.py --smoke` checks the plumbing on any machine.")
    return 0
  batch = args.batch or (2 * jax.device_count() if args.smoke else 64)
  seq = args.seq or (128 if args.smoke else 512)
  rounds = args.rounds or (1 if args.smoke else 7)
  if args.warmup is None:
    args.warmup = 1 if args.smoke else 2
  steps = args.steps or (1 if args.smoke else 5)
  if seq % 4:
    parser.error(f"--seq {seq} must be a multiple of 4 (the packed variant packs 4 documents per row)")

  config = load_config(args.smoke and not args.base_on_cpu, batch, seq, args.remat)
  devices = jax.devices()
  mesh = mesh_lib.make_mesh(config.mesh, devices)
  mesh_lib.check_batch_size(batch, mesh)
  rules = mesh_lib.rules_from_config(config.logical_axis_rules)
  gpu = backend == "gpu"
  matmul_dtype, matmul_n = (jnp.bfloat16, 8192) if gpu else (jnp.float32, 256)  # a CPU: only --smoke runs
  matmul_before = matmul_flops(matmul_dtype, matmul_n) / 1e12
  peak = metrics.peak_flops_info(devices[0])
  # The datasheet figure too: MaxText's and llm-foundry's published MFUs use it.
  datasheet = metrics.peak_flops_info(devices[0], max_sm_clock_mhz=lambda d: None)

  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    variants = [Variant(name, config, mesh, rules) for name in names]
  for v in variants:
    for _ in range(args.warmup):
      v.run(1)
  profiles = {}
  if args.trace:
    for v in [v for v in variants if v.name in ("auto", "xla")] or variants[:1]:
      profiles[v.name] = profile(v, os.path.join(args.trace, v.name), steps)
  times = harness.round_robin({v.name: functools.partial(v.run, steps) for v in variants}, rounds, rewarm=0)
  for v in variants:
    v.round_ms = [1000 * t for t in times[v.name]]
  matmul_after = matmul_flops(matmul_dtype, matmul_n) / 1e12
  matmul_rate = statistics.mean([matmul_before, matmul_after])

  # XLA's FLOP count of a step without custom calls: cuDNN's attention kernel counts as none.
  counted = next((v for v in variants if v.name == "xla"), variants[0])
  flops = flop_counts(counted)
  num_devices = len(devices)
  rows = {}
  for v in variants:
    ms = statistics.median(v.round_ms)
    tokens_per_s = v.tokens / (ms / 1000)
    model_tflops = tokens_per_s * flops["model"] / 1e12
    row = {"ms": ms, "ms_min": min(v.round_ms), "ms_max": max(v.round_ms), "ms_per_round": v.round_ms,
           "tokens_per_s": tokens_per_s, "model_tflops": model_tflops,
           "attention_kernel": v.attention_kernel, "lower_s": v.lower_s, "compile_s": v.compile_s,
           "xla_flops_per_token": v.xla_flops / v.tokens, "first_loss": v.losses[0], "temp_gib": v.temp_gib}
    row["fraction_of_matmul"] = model_tflops / (matmul_rate * num_devices)
    if peak:
      row["mfu"] = model_tflops * 1e12 / (peak["flops"] * num_devices)
      row["mfu_6n_plus_attention"] = tokens_per_s * flops["six_n_plus_attention"] / (peak["flops"] * num_devices)
    if datasheet:
      row["mfu_datasheet_peak"] = model_tflops * 1e12 / (datasheet["flops"] * num_devices)
    rows[v.name] = row
  rope_share = None
  if "auto" in rows and "no-rope" in rows:
    rope_share = 1.0 - rows["no-rope"]["ms"] / rows["auto"]["ms"]
  # The same weights and batch: "auto" and "xla" differ only in the attention kernel.
  loss_check = None
  if "auto" in rows and "xla" in rows:
    a, x = rows["auto"]["first_loss"], rows["xla"]["first_loss"]
    loss_check = {"auto": a, "xla": x, "rel_diff": abs(a - x) / abs(x)}

  device = devices[0]
  kind = device.device_kind
  lines = [f"B3: RoFormer MLM train step, bf16 compute / fp32 master weights, remat {args.remat}, B={batch} x T={seq}, "
           f"{flops['params'] / 1e6:.1f}M params, {num_devices} x {kind}, jax {jax.__version__}"
           + ("  [--smoke: plumbing only, not the B3 figure]" if args.smoke else "")]
  lines.append(f"model FLOPs/token {flops['model'] / 1e9:.4g} G (MLM head at {flops['scored_slots_per_row']}/{seq} "
               f"positions); plain 6N+attention {flops['six_n_plus_attention'] / 1e9:.4g} G; XLA's count of the "
               f"'{counted.name}' step {flops['xla'] / 1e9:.4g} G")
  unit = "bf16" if gpu else "fp32"
  peak_text = f"{peak['detail']} = {peak['flops'] / 1e12:.0f} TFLOP/s" if peak else "unknown for this device"
  lines.append(f"peak: {peak_text}; measured {unit} [{matmul_n}^3] matmul {matmul_rate:.1f} TFLOP/s per device")
  lines.append(f"{'variant':<19}{'attention':>10}{'ms/step':>10}{'min..max':>18}{'tokens/s':>12}{'TFLOP/s':>9}"
               f"{'MFU':>7}{'of matmul':>10}{'compile s':>10}{'temp GiB':>10}")
  for name, r in rows.items():
    mfu = f"{r['mfu']:.1%}" if "mfu" in r else "-"
    lines.append(f"{name:<19}{r['attention_kernel']:>10}{r['ms']:>10.2f}{r['ms_min']:>9.2f}..{r['ms_max']:<7.2f}"
                 f"{r['tokens_per_s']:>12,.0f}{r['model_tflops']:>9.2f}{mfu:>7}{r['fraction_of_matmul']:>10.1%}"
                 f"{r['lower_s'] + r['compile_s']:>10.2f}"
                 + (f"{r['temp_gib']:>10.2f}" if r["temp_gib"] is not None else f"{'-':>10}"))
  if rope_share is not None:
    lines.append(f"RoPE share of the step (1 - t(no-rope)/t(auto)): {rope_share:.2%} (goal <= {GOAL_ROPE_SHARE:.0%})")
  if loss_check:
    lines.append(f"xla / auto time: {rows['xla']['ms'] / rows['auto']['ms']:.3f} ({rows['auto']['attention_kernel']} "
                 f"attention in 'auto'); first losses {loss_check['auto']:.5f} vs {loss_check['xla']:.5f}")
  pairs = {}  # each lever against its same-run baseline: time ratio and first losses
  for lever, base in PAIRS:
    if lever in rows and base in rows:
      r, b = rows[lever], rows[base]
      pairs[f"{lever}/{base}"] = {"time_ratio": r["ms"] / b["ms"], "first_loss": [r["first_loss"], b["first_loss"]],
                                  "temp_gib": [r["temp_gib"], b["temp_gib"]]}
      lines.append(f"{lever} / {base} time: {r['ms'] / b['ms']:.3f}; first losses {r['first_loss']:.5f} vs "
                   f"{b['first_loss']:.5f}" + (f"; temp {r['temp_gib']:.2f} vs {b['temp_gib']:.2f} GiB"
                                                if r["temp_gib"] is not None and b["temp_gib"] is not None else ""))
  if "auto" in rows and "mfu" in rows["auto"]:
    auto = rows["auto"]
    lines.append(f"MFU of 'auto': {auto['mfu']:.1%} against the device's peak (goal >= {GOAL_MFU:.0%} on an "
                 f"H100/H200); {auto['mfu_6n_plus_attention']:.1%} counting 6N + attention"
                 + (f"; {auto['mfu_datasheet_peak']:.1%} against the datasheet's {datasheet['flops'] / 1e12:.0f} "
                    "TFLOP/s" if "mfu_datasheet_peak" in auto else ""))
  table = "\n".join(lines)
  print(table)

  summary = {
      "bench": "gpu_mlm", "smoke": args.smoke, "remat": args.remat, "batch": batch, "seq": seq, "rounds": rounds, "steps_per_round": steps,
      "warmup": args.warmup, "flops_per_token": flops, "peak": peak, "datasheet_peak": datasheet, "matmul_tflops": matmul_rate,
      "matmul_tflops_before_after": [matmul_before, matmul_after], "matmul": {"dtype": unit, "n": matmul_n},
      "rows": rows, "rope_share": rope_share, "loss_check": loss_check, "pairs": pairs,
      "profiles": {name: {k: p[k] for k in ("top", "scopes", "lines") if k in p} for name, p in profiles.items()},
      "compile_s_all_variants": sum(r["lower_s"] + r["compile_s"] for r in rows.values()),
      "goal_mfu_ge_45pct": (rows["auto"]["mfu"] >= GOAL_MFU) if "auto" in rows and "mfu" in rows["auto"] else None,
      "goal_rope_share_le_2pct": None if rope_share is None else rope_share <= GOAL_ROPE_SHARE,
      "machine": record.machine(), "versions": record.versions(),
      "argv": list(sys.argv[1:] if argv is None else argv),
      "command": record.command_line([__file__, *(sys.argv[1:] if argv is None else argv)]),
      "date": datetime.date.today().isoformat(),
  }
  if args.json_out:
    with open(args.json_out, "w") as f:
      json.dump(summary, f, indent=1)
      f.write("\n")
  bench = record.record_name("gpu_mlm", args)  # a smoke run: gpu_mlm_smoke, and only into $ROFORMER_BENCH_RESULTS
  if bench:
    _save_record(bench, summary, rows, rope_share, table)
  print(json.dumps(summary))
  return 0


def _save_record(bench: str, summary: dict, rows: dict, rope_share: float | None, table: str) -> None:
  figures = []
  for name, r in rows.items():
    figures.append(record.figure(f"B3.{name}.tokens_per_s", f"B3 {name}: tokens/s ({r['attention_kernel']} attention)",
                                 r["tokens_per_s"], "tokens/s"))
    if "mfu" in r:
      goal = dict(goal=f">= {GOAL_MFU:.0%}", met=r["mfu"] >= GOAL_MFU) if name == "auto" else {}
      figures.append(record.figure(f"B3.{name}.mfu", f"B3 {name}: MFU", 100 * r["mfu"], "%", **goal))
    figures.append(record.figure(f"B3.{name}.compile_s", f"B3 {name}: compile time", r["lower_s"] + r["compile_s"], "s"))
  if rope_share is not None:
    figures.append(record.figure("B3.rope_share", "B3 RoPE share of the step", 100 * rope_share, "%",
                                 goal=f"<= {GOAL_ROPE_SHARE:.0%}", met=rope_share <= GOAL_ROPE_SHARE))
  argv = [__file__, *summary["argv"]]
  record.save(bench, figures=figures, table=table, result=summary, argv=argv)


if __name__ == "__main__":
  sys.exit(main())
