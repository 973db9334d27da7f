"""B2: the RoFormer MLM train step on CPU, our JAX model vs HF transformers' PyTorch model.

Run (from the repository root):
  .venv/bin/python bench/train_step.py                    # shapes a, b, c (about 8.5 min on 2 cores)
  .venv/bin/python bench/train_step.py --smoke            # seconds: --quick with 1 round of 1 step; torch if at hand
  .venv/bin/python bench/train_step.py --record           # also save the figures for bench/report.py

Other flags, e.g. `--quick` (a tiny shape), `--shapes a,b --rounds 3 --steps-per-round 2`,
`--torch-python /tmp/hfvenv/bin/python`.
Settled figures (issue 24): moved here from bench/; bench/train_step.py, the command its recorded figures
carry, runs this file, and `make bench` no longer does.

One train step = forward, mean masked-token cross-entropy, backward and one AdamW update, in
float32, on one fixed batch (15% of the positions of every row masked). Three contenders:

- "jax full": the trainer's own step (`trainer.train_step`, task "mlm", jitted with the state
  donated) on a batch without `masked_positions`: `RoFormerForMaskedLM` scores every position
  (logits [B, T, V]) and the loss counts the masked ones.
- "jax masked": the same step on the pipeline's masked batch (`masked_positions`,
  `masked_targets`, `masked_weights`): only the masked rows are scored (logits [B, M, V]);
  same loss and gradients, a smaller vocabulary projection.
- "torch": transformers' `RoFormerForMaskedLM(input_ids, labels=labels)` (labels -100 where
  not masked, full logits), `loss.backward()`, `torch.optim.AdamW(fused=True)` (the HF
  Trainer's default optimiser) with the Trainer's no-decay groups, `zero_grad`.

Both sides: post-LN, exact gelu, dropout 0 (deterministic), vocabulary 30522 (BERT's), the
project's MLM optimiser settings (`optim.default_optim_config("mlm")`: AdamW lr 1e-5, betas
0.9/0.999, eps 1e-6, weight decay 0.01 except biases and LayerNorm, no clipping), no padding
and no attention mask. Each side reads the loss back every step (`float(loss)` /
`loss.item()`), as a training loop does.

Same weights: the torch worker initialises the HF model (seeded) and writes it with
`save_pretrained`; the JAX side loads it with `roformer_jax.hf.from_pretrained`. The first
losses of the three must then agree to 1e-4 (relative); the bench stops if they do not.

Timing (bench/harness.py's timer): torch runs in a worker process
(bench/_torch_train_step_worker.py) in a separate Python 3.11 venv with torch and transformers
(never a dependency of this project). After a warm-up (JAX: compile, timed separately, then the
warm-up steps), each round runs a block of steps of each contender in turn (the order rotates
every round): `--rewarm` untimed steps, then `--steps-per-round` timed ones (the first step
after the other contenders ran is not a training loop's steady state: up to 1.6x slower for
BERT-base on the 2-core VM, all of it kernel time faulting memory back in). The table gives the
median and min..max of the per-round ms/step, tokens/s (B * T per step) and the ratio torch
time / our time (> 1: we are faster). The torch worker uses `torch.set_num_threads(--threads)`.

Other jobs on the machine hurt torch far more than XLA (its OpenMP threads wait for each other
at every op), so the bench measures the CPU that other processes use during each round (from
/proc/stat) and runs a round again when it exceeds --max-other-load cores (up to --retries
times), after waiting up to --wait-quiet seconds for quiet; waits and discarded rounds share
one --quiet-budget. The JSON records the load of every kept round.

The last line printed is one JSON object with every figure, the machine and the versions.

The torch venv: --torch-python PATH uses an existing interpreter that has torch and
transformers; otherwise the bench creates one once at --torch-venv (default
~/.cache/roformer_jax/bench-torch-venv) with python3.11 and pip: torch from --torch-wheel (a
local wheel) or PyPI, transformers==5.23.0.

--smoke: --quick (the tiny shape, whatever --shapes says) with 1 warm-up step and 1 round of 1
step, no waiting for a quiet machine, records nothing (bench/_record.py). It never creates the
torch venv: it uses --torch-python or an existing venv when they import torch, and otherwise
runs the JAX side alone (the weights then come from our `hf.save_pretrained`, loaded back by
`hf.from_pretrained` as usual), saying so. With --breakdown it times the tiny shape's parts once.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from bench import _record, harness  # noqa: E402
from roformer_jax import hf, losses, models  # noqa: E402
from roformer_jax.training import metrics, optim, trainer

VOCAB = 30522  # BERT's WordPiece vocabulary, on both sides
MASK_ID, FIRST_ID = 4, 5  # ids below FIRST_ID (pad 0 among them) never appear in the batch
MASK_FRACTION = 0.15
LOSS_RTOL = 1e-4
SEED = 0

_SMALL = dict(vocab_size=VOCAB, d_model=256, num_layers=4, num_heads=4, d_ff=1024)
# name -> model sizes, batch, length, and default rounds / steps per round / warm-up steps.
SHAPES = {
    "a": dict(model=_SMALL, batch=8, seq=128, rounds=7, steps=3, warmup=2),
    "b": dict(model=_SMALL, batch=8, seq=512, rounds=5, steps=2, warmup=1),
    "c": dict(model=dict(vocab_size=VOCAB, **models.PRESETS["roformer-base"]), batch=8, seq=512,
              rounds=3, steps=1, warmup=1),
    # --quick: a few seconds; checks the plumbing, not the speed.
    "tiny": dict(model=dict(vocab_size=1000, d_model=64, num_layers=2, num_heads=4, d_ff=256), batch=2, seq=64,
                 rounds=3, steps=2, warmup=2),
}
DESCRIPTIONS = {
    "a": "hidden 256, 4 layers, 4 heads, ff 1024, B=8, T=128",
    "b": "hidden 256, 4 layers, 4 heads, ff 1024, B=8, T=512",
    "c": "BERT-base (roformer-base: hidden 768, 12 layers, 12 heads, ff 3072), B=8, T=512",
    "tiny": "hidden 64, 2 layers, 4 heads, ff 256, V=1000, B=2, T=64",
}
CONTENDERS = ("jax full", "jax masked", "torch")
BASELINE = "torch"


# --------------------------------------------------------------------------------------
# The batch and the JAX step (the test imports these).
# --------------------------------------------------------------------------------------


def make_batch(batch: int, seq: int, vocab: int, *, seed: int = SEED) -> dict[str, np.ndarray]:
  """One MLM batch: M = round(0.15 T) masked positions per row, their ids replaced by MASK_ID.

  Returns numpy arrays: inputs, targets (the original ids) int32[B, T]; weights float32[B, T]
  (1 at the masked positions); masked_positions int32[B, M] (sorted); labels int64[B, T], the
  HF form (original id at the masked positions, -100 elsewhere).
  """
  rng = np.random.default_rng(seed)
  ids = rng.integers(FIRST_ID, vocab, (batch, seq)).astype(np.int32)
  m = max(1, round(MASK_FRACTION * seq))
  pos = np.sort(np.stack([rng.choice(seq, m, replace=False) for _ in range(batch)]), axis=1).astype(np.int32)
  rows = np.arange(batch)[:, None]
  weights = np.zeros((batch, seq), np.float32)
  weights[rows, pos] = 1.0
  inputs = ids.copy()
  inputs[rows, pos] = MASK_ID
  labels = np.full((batch, seq), -100, np.int64)
  labels[rows, pos] = ids[rows, pos]
  return {"inputs": inputs, "targets": ids, "weights": weights, "masked_positions": pos, "labels": labels}


def jax_batch(batch: dict[str, np.ndarray], *, masked: bool) -> dict[str, jax.Array | None]:
  """The trainer's MLM batch (no segments, no positions: no attention mask); `masked` adds the
  pipeline's masked_positions / masked_targets / masked_weights, so that only those are scored."""
  out = {"inputs": batch["inputs"], "targets": batch["targets"], "weights": batch["weights"]}
  if masked:
    pos = batch["masked_positions"]
    take = lambda x: np.take_along_axis(x, pos, axis=1)  # noqa: E731
    out.update(masked_positions=pos, masked_targets=take(batch["targets"]), masked_weights=take(batch["weights"]))
  return {**{k: jnp.asarray(v) for k, v in out.items()}, "segment_ids": None, "positions": None}


def mlm_optimizer():
  """The project's MLM optimiser (Sec. 4.2 setup): AdamW lr 1e-5, (0.9, 0.999), eps 1e-6, wd 0.01."""
  cfg = optim.default_optim_config("mlm")
  tx, _ = optim.make_optimizer(cfg)
  hyper = {"lr": cfg.learning_rate, "b1": cfg.b1, "b2": cfg.b2, "eps": cfg.eps, "weight_decay": cfg.weight_decay}
  assert cfg.schedule == "constant" and not cfg.grad_clip_norm and cfg.grad_accum_steps == 1, cfg
  return tx, hyper


def new_state(model, tx):
  """(graphdef, state) of (model, AdamW optimiser over its nnx.Params), as `trainer.create_state` makes it."""
  return nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))


def train_step(graphdef):
  """The trainer's MLM step, jitted with the state donated: step(state, batch) -> (state, out)."""
  return jax.jit(functools.partial(trainer.train_step, graphdef, task="mlm"), donate_argnums=0)


def hf_config(model: dict) -> dict:
  """RoFormerConfig kwargs for the model sizes (dropout 0, exact gelu, post-LN by construction)."""
  return dict(vocab_size=model["vocab_size"], embedding_size=model["d_model"], hidden_size=model["d_model"],
              num_hidden_layers=model["num_layers"], num_attention_heads=model["num_heads"],
              intermediate_size=model["d_ff"], hidden_act="gelu", hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, max_position_embeddings=1536, type_vocab_size=2,
              initializer_range=0.02, layer_norm_eps=1e-12, pad_token_id=0, rotary_value=False,
              tie_word_embeddings=True)


# --------------------------------------------------------------------------------------
# Other load on the machine.
# --------------------------------------------------------------------------------------


class OtherLoad:
  """CPU cores used by processes other than this one and the torch worker, over an interval.

  (busy time of all CPUs in /proc/stat - this process's CPU time - the worker's) / wall time.
  It matters most for torch: its OpenMP threads wait for each other at every parallel region,
  so a core taken by another job slows a torch step far more than an XLA step (we saw 300x on
  the tiny shape). Linux only; elsewhere it reads None.
  """

  def __init__(self, worker_pid: int | None):
    self.pid = worker_pid
    self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    self.start = self._sample()

  def _sample(self):
    try:
      with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
      worker = 0.0
      if self.pid is not None:
        with open(f"/proc/{self.pid}/stat") as f:
          w = f.read().rsplit(")", 1)[1].split()  # fields after the command name; utime, stime = 11, 12
        worker = (int(w[11]) + int(w[12])) / self.tick
    except (OSError, ValueError, IndexError):
      return None
    busy = (sum(v) - v[3] - v[4]) / self.tick
    own = sum(os.times()[:2])
    return time.perf_counter(), busy, own, worker

  def cores(self) -> float | None:
    """Cores used by others since the last call (or construction)."""
    now = self._sample()
    start, self.start = self.start, now
    if now is None or start is None or now[0] <= start[0]:
      return None
    other = (now[1] - start[1]) - (now[2] - start[2]) - (now[3] - start[3])
    return max(other, 0.0) / (now[0] - start[0])


class QuietBudget:
  """Seconds the whole run may spend waiting for quiet or on rounds discarded for load."""

  def __init__(self, seconds: float):
    self.left = seconds

  def spend(self, seconds: float) -> None:
    self.left = max(self.left - seconds, 0.0)


def wait_quiet(worker_pid: int, max_cores: float, max_wait: float, window: float = 3.0) -> float:
  """Sleeps in `window`-second steps while other jobs use more than `max_cores`, for at most
  `max_wait` seconds; returns the time waited."""
  start = time.perf_counter()
  while time.perf_counter() - start < max_wait:
    probe = OtherLoad(worker_pid)
    time.sleep(window)
    load = probe.cores()
    if load is None or load <= max_cores:
      break
  return time.perf_counter() - start


# --------------------------------------------------------------------------------------
# One shape.
# --------------------------------------------------------------------------------------


class JaxContender:
  """The trainer's jitted step, its (donated) state and its batch."""

  def __init__(self, model_dir: str, batch, tx):
    model = hf.from_pretrained(model_dir)
    cfg = model.config
    assert isinstance(model, models.RoFormerForMaskedLM) and cfg.dropout == 0 and cfg.attention_dropout == 0, cfg
    assert cfg.norm == "post" and cfg.activation == "gelu" and cfg.dtype == "float32", cfg
    graphdef, self.state = new_state(model, tx)
    self.batch = batch
    start = time.perf_counter()
    lowered = train_step(graphdef).lower(self.state, batch)
    self.lower_s = time.perf_counter() - start
    start = time.perf_counter()
    self.compiled = lowered.compile()
    self.compile_s = time.perf_counter() - start
    mem = self.compiled.memory_analysis()
    self.temp_mib = None if mem is None else mem.temp_size_in_bytes / 2**20

  def step(self) -> float:
    """One step, ended by reading its loss back (returned)."""
    self.state, out = self.compiled(self.state, self.batch)
    return float(out["loss"])


def save_jax_weights(model: dict, save_dir: str) -> int:
  """Without torch (--smoke): our own seeded init of the HF config, written as an HF checkpoint
  for the JAX contenders to load as usual; returns the parameter count."""
  cfg = hf.config_from_hf({"model_type": "roformer", **hf_config(model)})
  jax_model = models.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(SEED))
  hf.save_pretrained(jax_model, save_dir)
  return metrics.count_params(jax_model)


def bench_shape(name: str, spec: dict, worker: harness.TorchWorker | None, args, workdir: str,
                quiet_budget: QuietBudget) -> dict:
  """One shape's comparison; worker None (--smoke without torch): the JAX contenders alone."""
  b, t, model = spec["batch"], spec["seq"], spec["model"]
  contenders = CONTENDERS if worker is not None else tuple(c for c in CONTENDERS if c != BASELINE)
  worker_pid = None if worker is None else worker.proc.pid
  rounds = args.rounds or spec["rounds"]
  per_round = args.steps_per_round or spec["steps"]
  warmup = args.warmup or spec["warmup"]
  batch = make_batch(b, t, model["vocab_size"])
  tx, hyper = mlm_optimizer()
  model_dir = os.path.join(workdir, name)
  print(f"\n[{name}] {DESCRIPTIONS[name]}: {rounds} rounds x {per_round} steps, {warmup} warm-up", flush=True)

  if worker is not None:
    info = worker.call("init", config=hf_config(model), seed=SEED, save_dir=model_dir,
                       input_ids=batch["inputs"].tolist(), labels=batch["labels"].tolist(),
                       optim=hyper, threads=args.threads)
  else:
    info = {"params": save_jax_weights(model, model_dir)}
  jax_side = {"jax full": JaxContender(model_dir, jax_batch(batch, masked=False), tx),
              "jax masked": JaxContender(model_dir, jax_batch(batch, masked=True), tx)}
  for k, c in jax_side.items():
    print(f"  {k}: lower {c.lower_s:.2f} s, compile {c.compile_s:.2f} s, XLA temp {c.temp_mib:.0f} MiB", flush=True)
  # One step of each contender, for the harness: torch times itself in its process.
  calls = {who: (lambda: harness.Seconds(worker.call("steps", n=1)["seconds"][0])) if who == BASELINE
           else jax_side[who].step for who in contenders}

  # Warm-up; its losses are the first steps from the same weights on the same batch.
  warm = {who: worker.call("steps", n=warmup)["losses"] if who == BASELINE else
          [jax_side[who].step() for _ in range(warmup)] for who in contenders}
  # Without torch the full-logits loss is the reference: the two JAX steps must still agree.
  ref_name = BASELINE if worker is not None else "jax full"
  ref = warm[ref_name]
  check = {}
  for who in [w for w in ("jax full", "jax masked") if w != ref_name]:
    rel = [abs(a - r) / abs(r) for a, r in zip(warm[who], ref, strict=True)]
    check[who] = {"losses": warm[who], "rel_diff": rel}
    print(f"  loss check {who} vs {ref_name}: step 0 {warm[who][0]:.6f} vs {ref[0]:.6f} (rel {rel[0]:.1e})"
          + (f", later steps rel <= {max(rel[1:]):.1e}" if len(rel) > 1 else ""), flush=True)
  check[ref_name] = {"losses": ref}
  bad = [who for who in ("jax full", "jax masked") if who != ref_name and not check[who]["rel_diff"][0] <= LOSS_RTOL]
  if bad:
    raise SystemExit(f"LOSS MISMATCH at step 0 for {bad} on shape {name}: {ref_name} {ref[0]!r}, "
                     f"{ {w: warm[w][0] for w in bad} } (tolerance {LOSS_RTOL} relative). The two sides do "
                     "not compute the same thing; the timings would mean nothing.")

  # A round during which other jobs used more than --max-other-load cores is run again (up to
  # --retries times, within the run's quiet budget); the load of every kept round is recorded.
  times = {who: [] for who in contenders}
  first = {who: [] for who in contenders}  # the untimed first step of each block (--rewarm)
  other, discarded = [], 0
  for r in range(rounds):
    for attempt in range(args.retries + 1):
      waited = wait_quiet(worker_pid, args.max_other_load, min(args.wait_quiet, quiet_budget.left))
      quiet_budget.spend(max(waited - 3.0, 0.0))  # the first 3 s window is the check itself
      if waited > 5:
        print(f"  waited {waited:.0f} s for other jobs to quieten", flush=True)
      probe = OtherLoad(worker_pid)
      start = time.perf_counter()
      steps = harness.time_round(calls, r, rewarm=args.rewarm, timed=per_round)
      took = time.perf_counter() - start
      load = probe.cores()
      got = {who: statistics.fmean(ts[args.rewarm:]) for who, ts in steps.items()}
      msg = (f"  round {r + 1}/{rounds}: " + ", ".join(
          f"{w} {got[w] * 1e3:.1f} ms" + (f" (first {steps[w][0] * 1e3:.0f})" if args.rewarm else "")
          for w in contenders) + ("" if load is None else f"; other jobs {load:.2f} cores"))
      if load is None or load <= args.max_other_load or attempt == args.retries or quiet_budget.left < took:
        break
      discarded += 1
      quiet_budget.spend(took)
      print(msg + f" > {args.max_other_load}: discarded, run again", flush=True)
    for who in contenders:
      times[who].append(got[who])
      if args.rewarm:
        first[who].append(steps[who][0])
    other.append(load)
    print(msg, flush=True)

  tokens = b * t
  rows = {}
  base = times.get(BASELINE)  # None without torch: no ratios
  for who in contenders:
    ts = times[who]
    med = statistics.median(ts)
    per_round_ratio = [tb / tw for tb, tw in zip(base, ts, strict=True)] if base else []
    rows[who] = {"ms": med * 1e3, "ms_min": min(ts) * 1e3, "ms_max": max(ts) * 1e3,
                 "tokens_per_s": tokens / med, "torch_over_this": statistics.median(base) / med if base else None,
                 "ratio_per_round_min": min(per_round_ratio, default=None),
                 "ratio_per_round_max": max(per_round_ratio, default=None),
                 "ms_per_round": [x * 1e3 for x in ts],
                 "first_step_of_block_ms_per_round": [x * 1e3 for x in first[who]]}
  for who, c in jax_side.items():
    rows[who].update(lower_s=c.lower_s, compile_s=c.compile_s, xla_temp_mib=c.temp_mib)
  if worker is not None:
    torch_info = worker.call("free")
    rows["torch"]["worker_peak_rss_mib_so_far"] = torch_info["max_rss_mib"]  # over the worker's life
  jax_side.clear()  # frees both JAX states before the next shape
  return {"description": DESCRIPTIONS[name], "batch": b, "seq": t, "model": model, "params": info["params"],
          "masked_per_row": int(batch["masked_positions"].shape[1]), "rounds": rounds, "steps_per_round": per_round,
          "warmup_steps": warmup, "rewarm_steps": args.rewarm, "loss_check": check, "rows": rows,
          "other_load_cores_per_round": other, "rounds_discarded_for_load": discarded}


# --------------------------------------------------------------------------------------
# --breakdown: where the JAX step's time goes.
# --------------------------------------------------------------------------------------


def jax_breakdown(name: str, spec: dict, rounds: int) -> dict[str, dict[str, float]]:
  """Times parts of the JAX step separately (jitted, bench/harness.py's timer, median ms and min..max).

  encoder: embeddings + layers, h = encode(ids); head + CE: MLM head, tied vocabulary
  projection and the masked mean cross-entropy from a given h; "fwd+bwd" is the gradient
  with respect to the parameters (and h, for the head); "step": `trainer.train_step`. Same
  random init as the bench, no torch needed.
  """
  cfg = models.ModelConfig(**spec["model"], dropout=0.0, attention_dropout=0.0)
  model = models.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(SEED))
  raw = make_batch(spec["batch"], spec["seq"], cfg.vocab_size)
  full, masked = jax_batch(raw, masked=False), jax_batch(raw, masked=True)
  tx, _ = mlm_optimizer()
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  part = lambda p: nnx.merge(graphdef, p, rest)  # noqa: E731

  def encode(p):
    return part(p).roformer.encode(full["inputs"])

  def head_ce(p, h, masked_only):
    m, b = part(p), masked if masked_only else full
    if masked_only:
      h = jnp.take_along_axis(h, b["masked_positions"][..., None], axis=1)
    targets, weights = (b["masked_targets"], b["masked_weights"]) if masked_only else (b["targets"], b["weights"])
    loss_sum, weight_sum = losses.mlm_loss(m.mlm(h, m.roformer.embeddings), targets, weights)
    return loss_sum / weight_sum

  h = jax.jit(encode)(params)
  opt_graphdef, opt_state = new_state(model, tx)
  grads = jax.tree.map(jnp.ones_like, params)

  def update(state, grads):
    m, opt = nnx.merge(opt_graphdef, state)
    opt.update(m, grads)
    return nnx.state((m, opt))

  step = jax.jit(functools.partial(trainer.train_step, opt_graphdef, task="mlm"))  # not donated: called again
  fns = {
      "encoder fwd": (jax.jit(encode), (params,)),
      "encoder fwd+bwd": (jax.jit(lambda p: jax.vjp(encode, p)[1](jnp.ones_like(h))), (params,)),
      "head+CE full fwd": (jax.jit(lambda p, h: head_ce(p, h, False)), (params, h)),
      "head+CE full fwd+bwd": (jax.jit(jax.grad(lambda p, h: head_ce(p, h, False), argnums=(0, 1))), (params, h)),
      "head+CE masked fwd": (jax.jit(lambda p, h: head_ce(p, h, True)), (params, h)),
      "head+CE masked fwd+bwd": (jax.jit(jax.grad(lambda p, h: head_ce(p, h, True), argnums=(0, 1))), (params, h)),
      "AdamW update": (jax.jit(update), (opt_state, grads)),
      "step full": (step, (opt_state, full)),
      "step masked": (step, (opt_state, masked)),
  }
  cpu = {k: [] for k in fns}  # user + system CPU seconds of this process per call

  def call(k):
    fn, a = fns[k]
    c0 = os.times()
    jax.block_until_ready(fn(*a))
    c1 = os.times()
    cpu[k].append((c1.user - c0.user, c1.system - c0.system))

  for k in fns:  # compile + warm up
    call(k)
  cpu = {k: [] for k in fns}
  probe = OtherLoad(None)
  times = harness.round_robin({k: functools.partial(call, k) for k in fns}, rounds, rewarm=0)
  other = probe.cores()
  out = {k: {**harness.timing(ts), "user_s": statistics.median(u for u, _ in cpu[k]),
             "system_s": statistics.median(s for _, s in cpu[k])} for k, ts in times.items()}
  print(f"\n[{name}] JAX step breakdown, {rounds} rounds (ms: median, min..max; CPU s of this process: "
        f"median user, system)" + ("" if other is None else f"; other jobs used {other:.2f} cores"))
  for k, row in out.items():
    print(f"  {k:<24}{row['ms']:>10.1f}{row['ms_min']:>10.1f}..{row['ms_max']:<10.1f}"
          f"{row['user_s']:>8.2f}{row['system_s']:>8.2f}", flush=True)
  return {"rows": out, "other_load_cores": other}


# --------------------------------------------------------------------------------------
# Main.
# --------------------------------------------------------------------------------------


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shapes", default="a,b,c", help=f"comma-separated subset of {','.join(SHAPES)}")
  parser.add_argument("--rounds", type=int, default=0, help="timed rounds per shape (0 = the shape's default)")
  parser.add_argument("--steps-per-round", type=int, default=0, help="steps per contender per round (0 = default)")
  parser.add_argument("--rewarm", type=int, default=1,
                      help="untimed steps at the start of each contender's block in every round (see the docstring)")
  parser.add_argument("--warmup", type=int, default=0, help="warm-up steps per contender (0 = the shape's default)")
  parser.add_argument("--quick", action="store_true", help="only the tiny shape: a smoke check of the plumbing")
  parser.add_argument("--max-other-load", type=float, default=0.25,
                      help="redo a round if other processes used more CPU cores than this during it")
  parser.add_argument("--retries", type=int, default=2, help="redos per round for --max-other-load")
  parser.add_argument("--wait-quiet", type=float, default=30.0,
                      help="before each round, wait up to this many seconds for other jobs to use <= --max-other-load")
  parser.add_argument("--quiet-budget", type=float, default=300.0,
                      help="at most this many seconds in all on waiting and on rounds discarded for load")
  parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                      help="torch.set_num_threads (default: all cores)")
  parser.add_argument("--torch-python", default="", help="a python that has torch and transformers (skips the venv)")
  parser.add_argument("--torch-venv", default=harness.DEFAULT_TORCH_VENV, help="where the torch venv is (created if missing)")
  parser.add_argument("--torch-wheel", default=harness.DEFAULT_TORCH_WHEEL, help="local torch wheel for a new venv (else PyPI)")
  parser.add_argument("--venv-python", default="", help="python to create the torch venv with (default python3.11)")
  parser.add_argument("--breakdown", type=int, default=0, metavar="ROUNDS",
                      help="instead of the comparison, time parts of the JAX step (encoder, head + CE, AdamW) "
                      "over this many rounds; needs no torch")
  parser.add_argument("--json-out", default="", help="also write the summary JSON here")
  _record.add_record_arg(parser)
  _record.add_smoke_arg(parser, "--quick with 1 warm-up step and 1 round of 1 step (--breakdown: 1 round), no waiting "
                        "for quiet; the torch side only if --torch-python or the venv already imports torch, never "
                        "creating the venv")
  args = parser.parse_args()
  if args.record and args.breakdown:
    parser.error("--record saves the torch comparison's figures; it does not apply to --breakdown.")
  if args.smoke:
    args.quick = True
    args.rounds = args.steps_per_round = args.warmup = 1
    args.retries, args.wait_quiet, args.quiet_budget = 0, 0.0, 0.0
    args.breakdown = min(args.breakdown, 1)
  names = ["tiny"] if args.quick else [s.strip() for s in args.shapes.split(",") if s.strip()]
  unknown = [s for s in names if s not in SHAPES]
  if unknown:
    raise SystemExit(f"unknown shapes {unknown}; expected some of {list(SHAPES)}.")

  command = ".venv/bin/python bench/train_step.py " + " ".join(sys.argv[1:])
  if args.breakdown:
    out = {"bench": "train_step_breakdown", "shapes": names, "command": command,
           "date": datetime.date.today().isoformat(), "loadavg_before": os.getloadavg(),
           "results": {name: jax_breakdown(name, SHAPES[name], args.breakdown) for name in names}}
    out["loadavg_after"] = os.getloadavg()
    out["machine"], out["versions"] = (_record.machine(), _record.versions())
    print(json.dumps(out))
    return

  # --smoke never creates the venv (minutes, and the network): without torch it times the JAX side alone.
  python = harness.find_torch_python(args.torch_python, args.torch_venv, create=not args.smoke, lenient=args.smoke,
                                     wheel=args.torch_wheel, base=args.venv_python)
  load_before = os.getloadavg()
  start = time.perf_counter()
  worker = harness.TorchWorker(python, "_torch_train_step_worker.py") if python else None  # None: --smoke without torch, the JAX side alone
  quiet_budget = QuietBudget(args.quiet_budget)
  results = {}
  try:
    with tempfile.TemporaryDirectory(prefix="b2_train_step_") as workdir:
      for name in names:
        results[name] = bench_shape(name, SHAPES[name], worker, args, workdir, quiet_budget)
  finally:
    if worker is not None:
      worker.close()
  load_after = os.getloadavg()

  machine, versions = (_record.machine(), _record.versions())
  if worker is not None:
    versions.update(torch_python=worker.info["python"], torch=worker.info["torch"],
                    transformers=worker.info["transformers"])
    machine.update(torch_threads=args.threads, torch_threads_default=worker.info["torch_threads"])
  else:
    versions.update(torch_python=None, torch=None, transformers=None)

  table = []
  out = table.append
  against = (f"vs torch {versions['torch']} + transformers {versions['transformers']}" if worker is not None else
             "alone (--smoke without torch: no torch row, no ratios)")
  out(f"\nB2 MLM train step (forward, loss, backward, AdamW; fp32) on {machine['cpu']} "
      f"({machine['cpu_count']} cores), jax {jax.__version__} {against}")
  out(f"load average before/after {load_before[0]:.2f}/{load_after[0]:.2f}; "
      "ratio = torch time / this time (> 1: faster than torch)")
  header = (f"{'shape':<6}{'step':<12}{'ms/step':>10}{'min..max':>22}{'tokens/s':>10}{'ratio':>8}"
            f"{'per-round ratio':>18}{'compile s':>11}")
  out(header)
  for name, res in results.items():
    for who, row in res["rows"].items():
      compile_s = f"{row['lower_s'] + row['compile_s']:.1f}" if "compile_s" in row else "-"
      spread = f"{row['ms_min']:.1f}..{row['ms_max']:.1f}"
      measured = row["torch_over_this"] is not None
      rr = f"{row['ratio_per_round_min']:.2f}..{row['ratio_per_round_max']:.2f}" if measured else "-"
      ratio = f"{row['torch_over_this']:.2f}" if measured else "-"
      out(f"{name:<6}{who:<12}{row['ms']:>10.1f}{spread:>22}{row['tokens_per_s']:>10.0f}"
          f"{ratio:>8}{rr:>18}{compile_s:>11}")
  for name, res in results.items():
    loads = [x for x in res["other_load_cores_per_round"] if x is not None]
    if loads:
      out(f"{name}: other jobs used {statistics.median(loads):.2f} cores (median; max {max(loads):.2f}) during the "
          f"kept rounds; {res['rounds_discarded_for_load']} rounds redone for load")
  if worker is not None:
    goal = {who: all(res["rows"][who]["torch_over_this"] >= 1.2 for res in results.values())
            for who in ("jax full", "jax masked")}
    out(f"goal (>= 1.2x faster than torch at every shape run): full logits {'met' if goal['jax full'] else 'NOT met'}, "
        f"masked positions {'met' if goal['jax masked'] else 'NOT met'}")
  else:
    goal = {"jax full": None, "jax masked": None}
  print("\n".join(table))
  summary = {"bench": "train_step", "shapes": names, "results": results, "machine": machine, "versions": versions,
             "optimizer": mlm_optimizer()[1], "vocab": VOCAB, "mask_fraction": MASK_FRACTION,
             "command": command, "date": datetime.date.today().isoformat(), "loadavg_before": load_before,
             "loadavg_after": load_after, "total_s": time.perf_counter() - start,
             "goal_1.2x_at_every_shape_run": goal}
  if args.json_out:
    with open(args.json_out, "w") as f:
      json.dump(summary, f, indent=1)
      f.write("\n")
  print(json.dumps(summary))
  bench = _record.record_name(f"train_step.{harness.cpu_kind(machine['cpu'])}", args)  # one record per CPU kind
  if bench:
    path = _record.save(bench, figures=_figures(results), table="\n".join(table), result=summary)
    print(f"# recorded {path}", file=sys.stderr)


def _figures(results: dict) -> list[dict]:
  """B2's headline figures per shape: torch time / ours (goal >= 1.2x) and ms per step of each contender."""
  out = []
  for name, res in results.items():
    for who, row in res["rows"].items():
      key = f"B2.{name}.{who.replace(' ', '_')}"
      if who != BASELINE and row["torch_over_this"] is not None:
        ratio = row["torch_over_this"]
        goal = name != "tiny"  # --quick checks the plumbing, not the speed
        out.append(_record.figure(f"{key}.torch_over_ours", f"torch time / {who} time, shape {name} "
                                  f"({DESCRIPTIONS[name]})", ratio, "x", goal=">= 1.2x" if goal else None,
                                  met=ratio >= 1.2 if goal else None))
      out.append(_record.figure(f"{key}.ms_per_step", f"{who}: ms per train step, shape {name}", row["ms"], "ms"))
  return out


if __name__ == "__main__":
  main()
