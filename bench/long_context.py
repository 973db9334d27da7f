"""B8: long sequences. Dense, chunked (exact, O(N) memory) and linear attention to 64K, and the default model's train step.

Run (from the repository root):
  .venv/bin/python bench/long_context.py                        # 18-24 min on 2 busy CPU cores (8 idle, before the window rows)
  .venv/bin/python bench/long_context.py --max-time-len 65536   # also time chunked at 32K, 64K (~13 min more)
  .venv/bin/python bench/long_context.py --record               # also save the figures for bench/report.py
  .venv/bin/python bench/long_context.py --smoke                # seconds: tiny shapes; writes nothing
  .venv/bin/python bench/long_context.py --b4 --record          # B4 (softmax vs linear, N = 256 .. 16384)

--b4 is B4, attention scaling (bench/attention.py runs it): part 1 for dense (softmax) and
linear attention only, N = 256 ... 16384, every N timed; recorded as `attention` with B4's
figures (crossover length, linear attention's memory against a fit a + bN) and drawn to
docs/figures/attention_scaling.png.

Part 1, attention alone, for x [B=1, N, heads=4, H=64] in float32,
N = 1K, 2K, ..., 64K, all with RoPE on q and k:
  dense:   `dot_product_attention(implementation="xla")` with a causal `make_attention_mask`
           (the [B, heads, N, N] logits and probabilities are materialised);
  chunked: `dot_product_attention(implementation="chunked")` with causal `mask_factors`
           (`chunked_attention`, default 256 x 256 tiles; tiles above the diagonal are skipped);
  linear:  `linear_attention(..., causal=True, feature_map="elu")` with RoPE on phi(q), phi(k) (eq. 19).
Each is compiled forward and forward+backward (the VJP w.r.t. q, k, v). Peak memory is XLA's
compiled memory analysis (argument + output + temp - alias bytes): deterministic, no run
needed, so it is reported at every N. A call is run and timed only where that peak is under
`--mem-limit-gb` and, for dense and chunked attention (quadratic time), N <= `--max-time-len`
(default 16K: chunked fwd+bwd takes about 20 s a call at 32K on 2 cores). Linear attention is
timed at every N. Also, at N in `--skip-lens` (8K): chunked attention without a mask, against
the causal call, which shows what skipping the tiles above the diagonal saves; and at N in
`--tile-lens` (2K, 8K): chunked attention called directly with each tile size of `--tiles`,
to see which block_q x block_k is fastest on this machine. And at N in `--window-lens` (8K,
32K, whatever `--max-time-len` says): sliding-window attention, chunked causal attention
with a window of `--window` (1024) keys (`mask_factors(..., causal=True, window=W)`; tiles
wholly outside the window are not visited), against the plain causal chunked call, both as
rows of their own (part "window") timed in the same group.
Timing (bench/harness.py): every runnable configuration of one (N, pass) takes part in
`--rounds` rounds (order rotated); in each, an untimed warm-up call and then 2 timed calls
(5 under 50 ms, 1 over `--slow-s`). The median over all timed calls is reported (with min and max), so ratios within
a group share the machine's drifts (the development machine is shared with other jobs).

Part 2, configs/default.py's model (a 4-layer, d=128 byte LM, 4 heads of 32) in one full
train step: `trainer.train_step` (forward, loss, value_and_grad, the config's AdamW update,
jitted with the state donated, as the trainer does), batch 1, one document per row, for
T = 2K ... 32K and attention_implementation "xla" (dense) vs "chunked". Peak memory from
the memory analysis for every T; then, analysis only, T keeps doubling (up to
`--fit-max-len`) until the peak passes 20 GiB, which gives the longest power-of-two T that
fits in 20 GiB per implementation. Time per step where the peak is under `--mem-limit-gb`
and T <= `--train-max-time-len` (default 8K): both implementations of one T take turns over
`--train-rounds` rounds as above, each step reading its loss back.

Part 3, per-device activation memory against the size of the context axis
(`context_parallel_memory`): configs/default.py's model, forward+backward at T = `--cp-len`
(16K), batch 1, chunked attention, on (data=1, context=C) meshes of C = 1, 2, 4, 8 fake CPU
devices (a subprocess with --xla_force_host_platform_device_count). XLA's per-device temp
bytes (activations and workspace; the replicated parameters are arguments) against 1 / C:
the goal is temp(C) x C / temp(1) <= 1.3.

Prints markdown tables, one JSON line per measured configuration and a summary JSON line;
writes the log-log figure to docs/figures/long_context.png (--smoke: to a temporary
directory, then deleted).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench import _record, harness  # noqa: E402
from bench.harness import default_mem_limit_gb, load_config, machine_info, memory_bytes, timing  # noqa: E402
from roformer_jax import attention as attn  # noqa: E402
from roformer_jax.attention.chunked import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q, chunked_attention  # noqa: E402
from roformer_jax.attention.masks import mask_factors  # noqa: E402
from roformer_jax.positional import RotaryConfig  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ("dense", "chunked", "linear")
# --methods may add these (a GPU's fused paths; B8's tables keep METHODS, the rest get a table of their own):
#   causal: `dot_product_attention(is_causal=True, implementation="xla")`, XLA with no mask array;
#   cudnn:  the same with implementation="cudnn" (cuDNN's fused flash attention; bf16/fp16 on a GPU).
EXTRA_METHODS = ("causal", "cudnn")
QUADRATIC = ("dense", "chunked")  # time grows as N^2 (chunked: half of it, the causal half)
TRAIN_IMPLS = ("xla", "chunked")
FIT_GIB = 20.0  # "the longest T that fits in 20 GiB"
PASSES = ("fwd", "fwd+bwd")
DEFAULT_TILES = "128x128,256x256,512x256,512x512,1024x1024"


NOT_TIMED = {"ms": None, "ms_min": None, "ms_max": None, "repeats": 0}


# --------------------------------------------------------------------------------------
# Part 1: attention alone.
# --------------------------------------------------------------------------------------


def attention_fn(method: str, n: int, *, chunk_size: int = 64, tile: tuple[int, int] | None = None,
                 causal: bool = True, window: int | None = None):
  """fwd(q, k, v, pos) for one method at length n (RoPE on q and k inside); `window`: chunked only."""
  if method == "dense":
    def fwd(q, k, v, pos):
      idx = jnp.arange(n, dtype=jnp.int32)
      mask = attn.make_attention_mask(causal=True, q_index=idx, kv_index=idx)
      return attn.dot_product_attention(q, k, v, mask=mask, q_positions=pos, k_positions=pos, implementation="xla")
  elif method in EXTRA_METHODS:
    impl = "xla" if method == "causal" else "cudnn"

    def fwd(q, k, v, pos):
      return attn.dot_product_attention(q, k, v, q_positions=pos, k_positions=pos, is_causal=True, implementation=impl)
  elif method == "chunked" and tile is None:
    def fwd(q, k, v, pos):
      mask = mask_factors(q.shape[0], n, n, causal=True, window=window) if causal else None
      return attn.dot_product_attention(q, k, v, mask=mask, q_positions=pos, k_positions=pos,
                                        implementation="chunked")
  elif method == "chunked":  # explicit tiles: dot_product_attention uses the defaults
    rotary = RotaryConfig()

    def fwd(q, k, v, pos):
      mask = mask_factors(q.shape[0], n, n, causal=True) if causal else None
      return chunked_attention(rotary.apply(q, pos), rotary.apply(k, pos), v, mask=mask, block_q=tile[0],
                               block_k=tile[1])
  else:
    def fwd(q, k, v, pos):
      return attn.linear_attention(q, k, v, q_positions=pos, k_positions=pos, causal=True, feature_map="elu",
                                   chunk_size=chunk_size)
  return fwd


def compiled_pass(fwd, pas: str, args):
  """(compiled, compile seconds) of the forward or forward+backward call on args (q, k, v, pos, ct)."""
  if pas == "fwd":
    fn = jax.jit(lambda q, k, v, pos, ct: fwd(q, k, v, pos))
  else:
    def fwd_bwd(q, k, v, pos, ct):
      out, vjp = jax.vjp(lambda q, k, v: fwd(q, k, v, pos), q, k, v)
      return out, vjp(ct)
    fn = jax.jit(fwd_bwd)
  t0 = time.perf_counter()
  compiled = fn.lower(*args).compile()
  return compiled, time.perf_counter() - t0


def lengths_from(lo: int, hi: int) -> list[int]:
  out, n = [], lo
  while n <= hi:
    out.append(n)
    n *= 2
  return out


def run_attention(args) -> list[dict]:
  """Every configuration at each N and pass: compiled and analysed; run where it fits and is
  not too slow, the runnable ones of one (N, pass) timed together (`harness.round_robin`)."""
  b, nh, h = args.batch, args.heads, args.head_dim
  rng = np.random.default_rng(0)
  limit = args.mem_limit_gb * 2**30
  rows, t_start = [], time.perf_counter()
  for n in lengths_from(args.min_len, args.max_len):
    qkv = tuple(jnp.asarray(rng.normal(size=(b, n, nh, h)), args.dtype) for _ in range(4))
    call_args = (*qkv[:3], jnp.arange(n, dtype=jnp.int32), qkv[3])
    configs = []  # (row fields, fwd, why it is not run or None)
    for method in args.methods:
      too_slow = method in QUADRATIC and n > args.max_time_len
      configs.append(({"part": "attention", "method": method}, attention_fn(method, n, chunk_size=args.chunk_size),
                      f"N > --max-time-len {args.max_time_len}" if too_slow else None))
    if n in args.skip_lens:  # what skipping the tiles above the diagonal saves: the same call without a mask
      configs.append(({"part": "no_mask", "method": "chunked"}, attention_fn("chunked", n, causal=False), None))
    if n in args.window_lens:  # sliding window vs plain causal, timed together (whatever --max-time-len says)
      for w in (args.window, None):
        configs.append(({"part": "window", "method": "chunked", "window": w},
                        attention_fn("chunked", n, window=w), None))
    if n in args.tile_lens:
      for tile in dict.fromkeys((min(q, n), min(k, n)) for q, k in args.tiles):
        configs.append(({"part": "tiles", "method": "chunked", "tile": list(tile)}, attention_fn("chunked", n, tile=tile),
                        None))
    for pas in PASSES:
      group, calls = [], {}
      for i, (fields, fwd, reason) in enumerate(configs):
        logits = b * nh * n * n * 4  # the float32 [B, heads, N, N] logits that XLA's dense paths hold
        if fields["method"] in ("dense", "causal") and logits > limit:
          # Not even compiled: XLA's GPU compiler allocates such buffers while compiling
          # (at 64K on an H100 it died asking for 64 GiB).
          group.append({**fields, "pass": pas, "N": n, "mem": {}, "peak_bytes": None, "compile_s": None, **NOT_TIMED,
                        "skipped": f"its logits alone are {logits / 2**30:.1f} GiB > --mem-limit-gb "
                                   f"{args.mem_limit_gb:.1f}: not compiled"})
          continue
        compiled, compile_s = compiled_pass(fwd, pas, call_args)
        mem = memory_bytes(compiled)
        row = {**fields, "pass": pas, "N": n, "mem": mem, "peak_bytes": mem.get("peak"), "compile_s": compile_s,
               **NOT_TIMED, "skipped": reason}
        if mem and mem["peak"] > limit:
          row["skipped"] = f"compiled peak {mem['peak'] / 2**30:.2f} GiB > --mem-limit-gb {args.mem_limit_gb:.1f}"
        elif reason is None:
          calls[i] = functools.partial(lambda c, a: jax.block_until_ready(c(*a)), compiled, call_args)
        group.append(row)
      for i, ts in harness.round_robin(calls, args.rounds, timed=harness.by_first(args.slow_s)).items():
        group[i].update(timing(ts))
      for row in group:  # as measured (a run cut short keeps these; the tables come at the end)
        print("# row " + json.dumps({k: v for k, v in row.items() if k != "mem"}), file=sys.stderr, flush=True)
      rows += group
      del calls
    del qkv, call_args
    print(f"# attention N={n} done ({time.perf_counter() - t_start:.0f}s elapsed)", file=sys.stderr, flush=True)
  return rows


# --------------------------------------------------------------------------------------
# Part 2: the default model's train step.
# --------------------------------------------------------------------------------------


class TrainStep:
  """One implementation's model, optimiser and jitted train step (`trainer.train_step`)."""

  def __init__(self, config_spec: str, impl: str, batch: int):
    from flax import nnx

    from roformer_jax.training import tasks, trainer

    self.config = load_config(config_spec)
    self.config.model.attention_implementation = impl
    self.config.batch_size = batch
    tx, _, _ = trainer.make_optimizer(self.config)
    model = tasks.build_model(self.config, nnx.Rngs(params=self.config.seed, dropout=self.config.seed + 1))
    self.graphdef, self.state = nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))
    self.step = jax.jit(functools.partial(trainer.train_step, self.graphdef, task=self.config.task,
                                          label_smoothing=0.0), donate_argnums=0)
    self.batch_size = batch

  def batch(self, t: int) -> dict:
    """An LM batch as the pipeline formats it: one document filling each row."""
    toks = np.random.default_rng(t).integers(4, self.config.model.vocab_size, size=(self.batch_size, t + 1))
    b = {"inputs": toks[:, :-1], "targets": toks[:, 1:], "segment_ids": np.ones((self.batch_size, t)),
         "positions": np.broadcast_to(np.arange(t), (self.batch_size, t)), "weights": np.ones((self.batch_size, t))}
    return {k: jnp.asarray(v, jnp.float32 if k == "weights" else jnp.int32) for k, v in b.items()}

  def compile(self, t: int):
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), (self.state, self.batch(t)))
    t0 = time.perf_counter()
    compiled = self.step.lower(*shapes).compile()
    return compiled, time.perf_counter() - t0

  def run(self, compiled, batch) -> float:
    """One step; the loss read back (the state is donated and replaced)."""
    self.state, out = compiled(self.state, batch)
    return float(out["loss"])


def run_train(args) -> list[dict]:
  """Both implementations at each T: compiled, analysed, timed together where they fit; then,
  analysis only, T doubles for each while its step still fits in 20 GiB."""
  rows, t_start = [], time.perf_counter()
  limit, fit = args.mem_limit_gb * 2**30, FIT_GIB * 2**30
  steps = {impl: TrainStep(args.config, impl, args.train_batch) for impl in TRAIN_IMPLS}

  def analyse(impl, t, search):
    compiled, compile_s = steps[impl].compile(t)
    mem = memory_bytes(compiled)
    row = {"part": "train", "impl": impl, "T": t, "B": args.train_batch, "mem": mem, "peak_bytes": mem.get("peak"),
           "compile_s": compile_s, **NOT_TIMED, "skipped": None, "fit_search": search}
    if search:
      row["skipped"] = f"analysis only (search for the longest T that fits in {FIT_GIB:.0f} GiB)"
    elif mem and mem["peak"] > limit:
      row["skipped"] = f"compiled peak {mem['peak'] / 2**30:.2f} GiB > --mem-limit-gb {args.mem_limit_gb:.1f}"
    elif t > args.train_max_time_len:
      row["skipped"] = f"T > --train-max-time-len {args.train_max_time_len}"
    rows.append(row)
    print(f"# train {impl} T={t} analysed ({time.perf_counter() - t_start:.0f}s elapsed)", file=sys.stderr, flush=True)
    return row, compiled

  for t in lengths_from(args.train_min_len, args.train_max_len):
    group, calls = {}, {}
    for impl in TRAIN_IMPLS:
      row, compiled = analyse(impl, t, False)
      if row["skipped"] is None:
        group[impl], batch = row, steps[impl].batch(t)
        calls[impl] = functools.partial(steps[impl].run, compiled, batch)
    for impl, ts in harness.round_robin(calls, args.train_rounds, timed=harness.by_first(args.slow_s)).items():
      group[impl].update(timing(ts))
    del calls
  for impl in TRAIN_IMPLS:  # past the measured lengths: the longest power-of-two T that fits in 20 GiB
    last = max((r for r in rows if r["impl"] == impl), key=lambda r: r["T"])
    t, peak = last["T"], last["peak_bytes"]
    while peak is not None and peak <= fit and 2 * t <= args.fit_max_len:
      t *= 2
      peak = analyse(impl, t, True)[0]["peak_bytes"]
  return rows


# --------------------------------------------------------------------------------------
# Part 3: context parallelism (to come).
# --------------------------------------------------------------------------------------


def context_parallel_memory(args) -> dict | None:
  """Per-device memory of the default model's forward+backward against the context-axis size.

  Runs in a subprocess with `--xla_force_host_platform_device_count` fake CPU devices (the
  device count must be set before JAX starts, and the other parts time one real device). For
  each C in `--cp-sizes`, a (data=1, context=C) mesh of C devices: the compiled memory
  analysis (per device, SPMD) of value_and_grad of the LM loss at T = `--cp-len`, batch 1,
  attention_implementation="chunked". Nothing is run. Returns {C: bytes} and the ratios
  temp(C) x C / temp(1) (1.0 = exactly proportional to 1 / C).
  """
  if not args.cp_sizes:
    return None
  env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} "
         f"--xla_force_host_platform_device_count={max(args.cp_sizes)}".strip(), "JAX_PLATFORMS": "cpu"}
  cmd = [sys.executable, os.path.abspath(__file__), "--cp-worker", "--config", args.config,
         "--cp-len", str(args.cp_len), "--cp-sizes", ",".join(map(str, args.cp_sizes))]
  done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
  if done.returncode:
    raise RuntimeError(f"context-parallel memory worker failed:\n{done.stderr[-3000:]}")
  per = {int(c): v for c, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
  base = per[min(per)]["temp"]
  return {"T": args.cp_len, "config": args.config, "implementation": "chunked",
          "per_device": {str(c): v for c, v in per.items()},
          "temp_times_c_over_c1": {str(c): v["temp"] * c / base for c, v in per.items()}}


def _cp_worker(args) -> None:
  """The subprocess of `context_parallel_memory`: prints {C: {"temp", "argument", "output"}}."""
  from flax import nnx
  from jax.sharding import NamedSharding, PartitionSpec as P

  from roformer_jax import mesh as mesh_lib
  from roformer_jax.training import tasks

  config = load_config(args.config)
  config.model.attention_implementation = "chunked"
  model = tasks.build_model(config, nnx.Rngs(0))
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def loss(params, ids):
    logits = nnx.merge(graphdef, params, rest)(ids)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits, -1), ids[..., None], -1))

  out = {}
  for c in args.cp_sizes:
    mesh = mesh_lib.make_mesh({"data": 1, "context": c}, jax.devices()[:c])
    with jax.set_mesh(mesh):
      ids = jax.ShapeDtypeStruct((1, args.cp_len), jnp.int32, sharding=NamedSharding(mesh, P()))
      ma = jax.jit(jax.value_and_grad(loss)).lower(params, ids).compile().memory_analysis()
    out[c] = {"temp": int(ma.temp_size_in_bytes), "argument": int(ma.argument_size_in_bytes),
              "output": int(ma.output_size_in_bytes)}
  print(json.dumps(out))


# --------------------------------------------------------------------------------------
# Summary, report, figure.
# --------------------------------------------------------------------------------------


def _find(rows, **kw):
  for r in rows:
    if all(r.get(k) == v for k, v in kw.items()):
      return r
  return None


def _fit(ns, mems) -> dict:
  """Least-squares fit mem = a + b N, its worst ratios either way, and the log-log slope (over
  the lengths that were compiled: a dense path too large to compile has no memory figure)."""
  pairs = [(n, m) for n, m in zip(ns, mems, strict=True) if m is not None]
  ns, mems = np.asarray([n for n, _ in pairs], np.float64), np.asarray([m for _, m in pairs], np.float64)
  if len(ns) < 2:
    return {"a_bytes": None, "b_bytes_per_token": None, "max_mem_over_fit": None, "max_fit_over_mem": None,
            "worst": None, "loglog_slope": None}
  a, b = np.linalg.lstsq(np.stack([np.ones_like(ns), ns], 1), mems, rcond=None)[0]
  ratio = mems / (a + b * ns)
  return {"a_bytes": float(a), "b_bytes_per_token": float(b), "max_mem_over_fit": float(ratio.max()),
          "max_fit_over_mem": float((1 / ratio).max()), "worst": float(max(ratio.max(), (1 / ratio).max())),
          "loglog_slope": float(np.polyfit(np.log(ns), np.log(mems), 1)[0]) if len(ns) > 1 else None}


def summarise(args, rows, train_rows, cp, info, command, t_start, load_before) -> dict:
  lengths = lengths_from(args.min_len, args.max_len)
  summ = {"bench": "long_context_summary", "shape": {"B": args.batch, "heads": args.heads, "H": args.head_dim,
                                                     "dtype": args.dtype},
          "lengths": lengths, "chunk_size": args.chunk_size, "default_tile": [DEFAULT_BLOCK_Q, DEFAULT_BLOCK_K],
          "mem_limit_gb": args.mem_limit_gb, "max_time_len": args.max_time_len, "train_config": args.config,
          "machine": info, "command": command, "date": datetime.date.today().isoformat(),
          "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "total_s": time.perf_counter() - t_start}
  def get(method, pas, n, key, part="attention"):
    row = _find(rows, part=part, method=method, N=n, **{"pass": pas})
    return None if row is None else row[key]

  def ratio(x, y):
    return x / y if x and y else None

  ms = functools.partial(get, key="ms")
  n2k = 2048 if 2048 in lengths else lengths[0]
  for pas in PASSES:
    for method in args.methods:
      summ[f"mem_fit_{method}_{pas}"] = _fit(lengths, [get(method, pas, n, "peak_bytes") for n in lengths])
    summ[f"crossover_{pas}"] = next((n for n in lengths if ratio(ms("linear", pas, n), ms("dense", pas, n)) is not None
                                     and ms("linear", pas, n) < ms("dense", pas, n)), None)
    summ[f"chunked_over_dense_time_{pas}"] = {"N": n2k, "ratio": ratio(ms("chunked", pas, n2k), ms("dense", pas, n2k))}
    beyond = [(n, ratio(ms("chunked", pas, n), ms("dense", pas, n))) for n in lengths if n >= args.beyond_len]
    beyond = [(n, r) for n, r in beyond if r is not None]
    summ[f"chunked_vs_dense_from_{args.beyond_len}_{pas}"] = {
        "ratios": beyond, "worst": max((r for _, r in beyond), default=None),
        "chunked_faster_everywhere": all(r < 1 for _, r in beyond) if beyond else None}
    n_max = lengths[-1]
    summ[f"dense_over_chunked_mem_{pas}"] = {
        "N": n_max, "ratio": ratio(get("dense", pas, n_max, "peak_bytes"), get("chunked", pas, n_max, "peak_bytes"))}
    summ[f"causal_skip_{pas}"] = {
        str(n): {"no_mask_ms": ms("chunked", pas, n, part="no_mask"), "causal_ms": ms("chunked", pas, n),
                 "no_mask_over_causal": ratio(ms("chunked", pas, n, part="no_mask"), ms("chunked", pas, n))}
        for n in args.skip_lens if n in lengths}
    tiles = {}
    for n in args.tile_lens:
      timed = [r for r in rows if r["part"] == "tiles" and r["N"] == n and r["pass"] == pas and r["ms"]]
      if timed:
        best = min(timed, key=lambda r: r["ms"])
        default = next((r for r in timed if r["tile"] == [min(DEFAULT_BLOCK_Q, n), min(DEFAULT_BLOCK_K, n)]), None)
        tiles[str(n)] = {"best_tile": best["tile"], "best_ms": best["ms"], "default_ms": default and default["ms"],
                         "default_over_best": default["ms"] / best["ms"] if default else None,
                         "ms": {f"{r['tile'][0]}x{r['tile'][1]}": r["ms"] for r in timed}}
    summ[f"tiles_{pas}"] = tiles
    windows = {}
    for n in args.window_lens:
      w, c = (_find(rows, part="window", method="chunked", N=n, window=x, **{"pass": pas}) for x in (args.window, None))
      if w is None or c is None:
        continue
      windows[str(n)] = {"window": args.window, "window_ms": w["ms"], "causal_ms": c["ms"],
                         "causal_over_window_time": ratio(c["ms"], w["ms"]), "window_peak_bytes": w["peak_bytes"],
                         "causal_peak_bytes": c["peak_bytes"],
                         "causal_over_window_mem": ratio(c["peak_bytes"], w["peak_bytes"])}
    summ[f"window_{pas}"] = windows
  longest = {}
  for impl in TRAIN_IMPLS:
    analysed = [r for r in train_rows if r["impl"] == impl and r["peak_bytes"] is not None]
    fits = [r for r in analysed if r["peak_bytes"] <= FIT_GIB * 2**30]
    best = max(fits, key=lambda r: r["T"], default=None)
    longest[impl] = {"T": best and best["T"], "peak_gib": best and best["peak_bytes"] / 2**30,
                     # every T analysed fits and the search stopped at --fit-max-len: the true limit is longer
                     "at_search_cap": bool(best and len(fits) == len(analysed) and 2 * best["T"] > args.fit_max_len)}
  summ["train_longest_T_in_20GiB"] = longest
  summ["train_chunked_over_xla_time"] = {
      str(r["T"]): r["ms"] / x["ms"] for r in train_rows
      if r["impl"] == "chunked" and r["ms"] and (x := _find(train_rows, impl="xla", T=r["T"])) and x["ms"]}
  summ["context_parallel"] = cp
  return summ


def _num(x, spec=".2f"):
  return "-" if x is None else format(x, spec)


def fmt_mib(x):
  return "-" if x is None else f"{x / 2**20:.1f}"


def cell(r):
  if r is None:
    return "-"
  if r["ms"] is not None:
    return f"{r['ms']:.1f} ({r['ms_min']:.1f})"
  return "not run" if r["peak_bytes"] is None or "GiB" not in (r["skipped"] or "") else \
      f"not run ({r['peak_bytes'] / 2**30:.1f} GiB)"


def print_report(args, rows, train_rows, summ) -> str:
  """Prints the tables and the JSON lines; returns the tables."""
  out = []
  m = summ["machine"]
  out.append(f"\n{'Attention scaling (B4)' if args.b4 else 'Long sequences (B8)'}: B={args.batch}, heads={args.heads}, "
             f"H={args.head_dim}, {args.dtype}, causal, RoPE; " + ("" if args.b4 else f"chunked tiles {DEFAULT_BLOCK_Q}x"
             f"{DEFAULT_BLOCK_K}; ") + f"linear = elu, chunk {args.chunk_size}")
  out.append(f"device {m['platform']} ({m['device_kind']}), {m['cpu_count']} CPUs ({m['cpu']}), jax {m['jax']}; "
             f"load average before/after {summ['loadavg_before'][0]:.2f}/{summ['loadavg_after'][0]:.2f}; "
             f"runs only under {args.mem_limit_gb:.1f} GiB (compiled peak), dense/chunked timed to N={args.max_time_len}")
  out.append(f"command: {summ['command']}\n")
  if args.b4:
    return _report_b4(args, rows, summ, out)
  for pas in PASSES:
    out.append(f"| N | dense {pas} ms, median (min) | chunked ms | linear ms | chunked / dense time | dense peak MiB | "
               "chunked peak MiB | linear peak MiB | dense / chunked memory |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in summ["lengths"]:
      r = {meth: _find(rows, part="attention", method=meth, N=n, **{"pass": pas}) for meth in METHODS}
      ratio = f"{r['chunked']['ms'] / r['dense']['ms']:.2f}" if r["dense"]["ms"] and r["chunked"]["ms"] else "-"
      mr = r["dense"]["peak_bytes"] / r["chunked"]["peak_bytes"] if r["dense"]["peak_bytes"] else float("nan")
      out.append(f"| {n} | {cell(r['dense'])} | {cell(r['chunked'])} | {cell(r['linear'])} | {ratio} | "
                 f"{fmt_mib(r['dense']['peak_bytes'])} | {fmt_mib(r['chunked']['peak_bytes'])} | "
                 f"{fmt_mib(r['linear']['peak_bytes'])} | {mr:.1f} |")
    extra = [m for m in args.methods if m in EXTRA_METHODS]
    if extra:  # the fused paths, beside chunked attention (the O(N)-memory softmax that runs everywhere)
      out.append(f"\n| N | {pas}: " + " | ".join(f"{m} ms (min) | {m} peak MiB | {m} / chunked time" for m in extra)
                 + " |")
      out.append("|---:|" + "---:|---:|---:|" * len(extra))
      for n in summ["lengths"]:
        c = _find(rows, part="attention", method="chunked", N=n, **{"pass": pas})
        cells = []
        for m in extra:
          r = _find(rows, part="attention", method=m, N=n, **{"pass": pas})
          rel = f"{r['ms'] / c['ms']:.2f}" if r and c and r["ms"] and c["ms"] else "-"
          cells.append(f"{cell(r)} | {fmt_mib(r and r['peak_bytes'])} | {rel}")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    fc, fl = summ[f"mem_fit_chunked_{pas}"], summ[f"mem_fit_linear_{pas}"]
    if fc["a_bytes"] is None or fl["a_bytes"] is None:  # one length (e.g. --min-len = --max-len): nothing to fit
      out.append(f"\n{pas}: no memory fit (it needs two lengths or more)")
    else:
      out.append(f"\n{pas}: chunked memory vs least-squares fit a + bN (a={fc['a_bytes'] / 2**20:.2f} MiB, "
                 f"b={fc['b_bytes_per_token']:.0f} B/token): worst ratio {fc['worst']:.3f}, log-log slope "
                 f"{fc['loglog_slope']:.2f} (linear attention: {fl['worst']:.3f}, {fl['loglog_slope']:.2f}; dense: "
                 f"{_num(summ[f'mem_fit_dense_{pas}']['loglog_slope'])})")
    c2 = summ[f"chunked_over_dense_time_{pas}"]
    bd = summ[f"chunked_vs_dense_from_{args.beyond_len}_{pas}"]
    c2_text = "-" if c2["ratio"] is None else f"{c2['ratio']:.2f}"
    out.append(f"{pas}: chunked / dense time at N={c2['N']}: {c2_text}; "
               f"from N={args.beyond_len} where dense ran: "
               f"{', '.join(f'N={n}: {r:.2f}' for n, r in bd['ratios']) or 'dense not run'}")
    for n, s in summ[f"causal_skip_{pas}"].items():
      if s["no_mask_over_causal"]:
        out.append(f"{pas}: tile skipping at N={n}: chunked without a mask {s['no_mask_ms']:.1f} ms, causal "
                   f"{s['causal_ms']:.1f} ms: {s['no_mask_over_causal']:.2f}x")
    for n, s in summ[f"window_{pas}"].items():
      t_ratio = "-" if s["causal_over_window_time"] is None else f"{s['causal_over_window_time']:.2f}x"
      t_cells = "not run" if s["window_ms"] is None else f"{s['window_ms']:.1f} ms, causal {s['causal_ms']:.1f} ms"
      out.append(f"{pas}: sliding window of {s['window']} keys at N={n} (chunked, causal): {t_cells}: causal / "
                 f"window time {t_ratio}; peak {fmt_mib(s['window_peak_bytes'])} MiB vs causal "
                 f"{fmt_mib(s['causal_peak_bytes'])} MiB ("
                 + ("-" if s["causal_over_window_mem"] is None else f"{s['causal_over_window_mem']:.2f}x") + ")")
    for n, s in summ[f"tiles_{pas}"].items():
      listing = ", ".join(f"{k} {v:.1f}" for k, v in s["ms"].items())
      out.append(f"{pas}: tiles at N={n} (block_q x block_k: ms): {listing}; best {s['best_tile'][0]}x"
                 f"{s['best_tile'][1]}" + (f", default / best {s['default_over_best']:.2f}" if s["default_over_best"]
                                           else ""))
    out.append("")
  out.append(f"Train step of {args.config}'s model, batch {args.train_batch}, one document per row "
             f"(forward, loss, backward, AdamW; float32):\n")
  out.append("| T | xla peak GiB | xla ms/step, median (min) | chunked peak GiB | chunked ms/step, median (min) | "
             "chunked / xla time |")
  out.append("|---:|---:|---:|---:|---:|---:|")
  for t in sorted({r["T"] for r in train_rows}):
    x, c = _find(train_rows, impl="xla", T=t), _find(train_rows, impl="chunked", T=t)
    gib = lambda r: "-" if r is None else f"{r['peak_bytes'] / 2**30:.3f}"
    tcell = lambda r: "-" if r is None else (f"{r['ms']:.0f} ({r['ms_min']:.0f})" if r["ms"] is not None else
                                             ("analysis only" if r["fit_search"] else "not run"))
    ratio = f"{c['ms'] / x['ms']:.2f}" if x and c and x["ms"] and c["ms"] else "-"
    out.append(f"| {t} | {gib(x)} | {tcell(x)} | {gib(c)} | {tcell(c)} | {ratio} |")
  for impl, s in summ["train_longest_T_in_20GiB"].items():
    cap = " (the search stopped at --fit-max-len)" if s["at_search_cap"] else ""
    out.append(f"\n{impl}: longest T (power of two) whose train step fits in {FIT_GIB:.0f} GiB: {s['T']}"
               + (f" ({s['peak_gib']:.3g} GiB){cap}" if s["T"] else ""))
  cp = summ.get("context_parallel")
  if cp:
    out.append(f"\n### Per-device memory vs context-axis size ({cp['config']}, forward+backward, T={cp['T']}, "
               "chunked; XLA memory analysis)\n")
    out.append("| context C | per-device temp MiB | temp x C / temp(C=1) |")
    out.append("|---:|---:|---:|")
    for c, v in cp["per_device"].items():
      out.append(f"| {c} | {fmt_mib(v['temp'])} | {cp['temp_times_c_over_c1'][c]:.2f} |")
  table = "\n".join(out)
  print(table)
  base = {"machine": summ["machine"], "command": summ["command"], "date": summ["date"]}
  for r in rows + train_rows:
    keep = {k: v for k, v in r.items() if k not in ("mem",)}
    keep["compile_s"] = round(keep["compile_s"], 3)
    print(json.dumps({"bench": "long_context", **keep, "memory": r["mem"], **base}))
  print(json.dumps(summ))
  return table


def _report_b4(args, rows, summ, out) -> str:
  """B4's tables (dense = softmax attention vs linear attention): printed and returned."""
  for pas in PASSES:
    out.append(f"| N | softmax {pas} ms, median (min) | linear ms | linear / softmax time | softmax peak MiB | "
               "linear peak MiB | softmax / linear memory |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|")
    for n in summ["lengths"]:
      d, l = (_find(rows, part="attention", method=m, N=n, **{"pass": pas}) for m in ("dense", "linear"))
      ratio = f"{l['ms'] / d['ms']:.2f}" if d["ms"] and l["ms"] else "-"
      out.append(f"| {n} | {cell(d)} | {cell(l)} | {ratio} | {fmt_mib(d['peak_bytes'])} | "
                 f"{fmt_mib(l['peak_bytes'])} | {d['peak_bytes'] / l['peak_bytes']:.1f} |")
    fl, fd = summ[f"mem_fit_linear_{pas}"], summ[f"mem_fit_dense_{pas}"]
    out.append(f"\n{pas}: crossover (first N where linear is faster): {summ[f'crossover_{pas}']}; linear memory vs "
               f"least-squares fit a + bN: worst ratio {fl['worst']:.3f}, log-log slope {fl['loglog_slope']:.2f} "
               f"(softmax: {_num(fd['loglog_slope'])})\n")
  table = "\n".join(out)
  print(table)
  print(json.dumps(summ))
  return table


def figures_b4(summ, rows) -> list[dict]:
  """B4's headline figures per pass (--b4): crossover length, linear attention's memory against a linear fit."""
  out, n_max = [], summ["lengths"][-1]
  for pas in PASSES:
    key = pas.replace("+", "_")
    if summ[f"crossover_{pas}"] is not None:
      out.append(_record.figure(f"B4.crossover_{key}", f"first N at which causal linear attention is faster ({pas})",
                                summ[f"crossover_{pas}"], "tokens"))
    lin = summ[f"mem_fit_linear_{pas}"]
    out.append(_record.figure(f"B4.linear_mem_vs_linear_fit_{key}", f"linear attention peak memory vs a least-squares "
                              f"fit a + bN, worst ratio ({pas}, N <= {n_max})", lin["worst"], "x", goal="<= 1.2x",
                              met=lin["worst"] <= 1.2))
    out.append(_record.figure(f"B4.linear_mem_loglog_slope_{key}",
                              f"log-log slope of linear attention's peak memory vs N ({pas})", lin["loglog_slope"], ""))
    peak = {m: _find(rows, part="attention", method=m, N=n_max, **{"pass": pas})["peak_bytes"]
            for m in ("dense", "linear")}
    if peak["dense"] and peak["linear"]:
      out.append(_record.figure(f"B4.softmax_over_linear_mem_{key}", f"softmax / linear attention peak memory at "
                                f"N={n_max} ({pas})", peak["dense"] / peak["linear"], "x"))
  return out


def plot(args, rows, train_rows, summ, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1 if args.b4 else 2, 2, figsize=(12, 4.2 if args.b4 else 8.4), squeeze=False)
  (ax_t, ax_m), (ax_tm, ax_tt) = axes if not args.b4 else (axes[0], (None, None))
  colors = {"dense": "tab:red", "chunked": "tab:green", "linear": "tab:blue", "xla": "tab:red", "causal": "tab:orange",
            "cudnn": "tab:purple"}
  styles = {"fwd": "-", "fwd+bwd": "--"}
  for method in args.methods:
    for pas in PASSES:
      rs = [r for r in rows if r["part"] == "attention" and r["method"] == method and r["pass"] == pas]
      timed = [r for r in rs if r["ms"] is not None]
      if timed:
        err = np.array([[r["ms"] - r["ms_min"] for r in timed], [r["ms_max"] - r["ms"] for r in timed]])
        ax_t.errorbar([r["N"] for r in timed], [r["ms"] for r in timed], yerr=err, fmt=styles[pas], marker="o", ms=3,
                      capsize=2, color=colors[method], label=f"{method} {pas}")
      rs = [r for r in rs if r["peak_bytes"] is not None]
      ax_m.plot([r["N"] for r in rs], [r["peak_bytes"] / 2**20 for r in rs], styles[pas], marker="o", ms=3,
                color=colors[method], label=f"{method} {pas}")
  nm = [r for r in rows if r["part"] == "no_mask" and r["ms"] is not None]
  if nm:
    ax_t.plot([r["N"] for r in nm], [r["ms"] for r in nm], "x", color="k", ms=7, label="chunked, no mask (no skipping)")
  for pas in PASSES:
    wr = [r for r in rows if r["part"] == "window" and r["window"] and r["pass"] == pas and r["ms"] is not None]
    if wr:
      ax_t.plot([r["N"] for r in wr], [r["ms"] for r in wr], "D" if pas == "fwd" else "d", color="tab:purple", ms=6,
                label=f"chunked, window {args.window} ({pas})")
  ns = np.array(summ["lengths"], np.float64)
  fit = "linear" if args.b4 else "chunked"
  fc = summ[f"mem_fit_{fit}_fwd+bwd"]
  ax_m.plot(ns, (fc["a_bytes"] + fc["b_bytes_per_token"] * ns) / 2**20, ":", color="gray",
            label=f"fit a + bN ({fit} fwd+bwd)")
  ax_m.axhline(args.mem_limit_gb * 1024, color="k", lw=0.7, ls="-.", label=f"run limit {args.mem_limit_gb:.0f} GiB")
  ax_t.set_title("attention: time per call (dense/chunked timed to "
                 f"N={args.max_time_len}, under {args.mem_limit_gb:.0f} GiB)", fontsize=9)
  ax_m.set_title("attention: peak memory (XLA memory analysis, every N)", fontsize=9)
  train_panels = not args.b4 and bool(train_rows)  # --no-train: the lower panels stay empty
  for impl in TRAIN_IMPLS if train_panels else ():
    rs = [r for r in train_rows if r["impl"] == impl]
    ax_tm.plot([r["T"] for r in rs], [r["peak_bytes"] / 2**30 for r in rs], "-", marker="o", ms=3,
               color=colors[impl], label=f"attention_implementation={impl}")
    timed = [r for r in rs if r["ms"] is not None]
    if timed:
      ax_tt.plot([r["T"] for r in timed], [r["ms"] for r in timed], "-", marker="o", ms=3, color=colors[impl],
                 label=f"attention_implementation={impl}")
  if train_panels:
    ax_tm.axhline(FIT_GIB, color="k", lw=0.7, ls="--", label=f"{FIT_GIB:.0f} GiB")
    ax_tm.axhline(args.mem_limit_gb, color="k", lw=0.7, ls="-.", label=f"run limit {args.mem_limit_gb:.0f} GiB")
    ax_tm.set_title(f"train step ({args.config}, B={args.train_batch}): peak memory", fontsize=9)
    ax_tt.set_title("train step: time per step", fontsize=9)
  for ax, xl, yl in ((ax_t, "sequence length N", "ms (median, bars min..max)"),
                     (ax_m, "sequence length N", "peak MiB"), (ax_tm, "sequence length T", "peak GiB"),
                     (ax_tt, "sequence length T", "ms per step (median)"))[:4 if train_panels else 2]:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
  m = summ["machine"]
  fig.suptitle(f"{'B4' if args.b4 else 'Long sequences'}: causal attention with RoPE, B={args.batch}, {args.heads} heads, "
               f"H={args.head_dim}, {args.dtype}{'; default-model train step' if train_panels else ''} — {m['platform']} ({m['cpu_count']} CPUs), jax {m['jax']}", fontsize=10)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=110)
  plt.close(fig)


def figures(args, summ) -> list[dict]:
  """B8's headline figures, with the issue's goals where it sets one."""
  out = []
  n_max = summ["lengths"][-1]
  for pas in PASSES:
    key = pas.replace("+", "_")
    fc = summ[f"mem_fit_chunked_{pas}"]
    if fc["worst"] is not None:  # None at a single length
      out.append(_record.figure(f"B8.chunked_mem_vs_linear_fit_{key}", f"chunked attention peak memory vs a least-squares "
                                f"fit a + bN, worst ratio ({pas}, N = {summ['lengths'][0]} ... {n_max})", fc["worst"],
                                "x", goal="<= 1.2x", met=fc["worst"] <= 1.2))
    c2 = summ[f"chunked_over_dense_time_{pas}"]
    if c2["ratio"] is not None:
      goal = dict(goal="<= 1.3x", met=c2["ratio"] <= 1.3) if pas == "fwd+bwd" else {}
      out.append(_record.figure(f"B8.chunked_over_dense_time_{c2['N']}_{key}",
                                f"chunked / dense attention time at N={c2['N']} ({pas})", c2["ratio"], "x", **goal))
    bd = summ[f"chunked_vs_dense_from_{args.beyond_len}_{pas}"]
    if bd["worst"] is not None:
      ns = ", ".join(str(n) for n, _ in bd["ratios"])
      out.append(_record.figure(f"B8.chunked_over_dense_time_from_{args.beyond_len}_{key}",
                                f"chunked / dense attention time, worst over N >= {args.beyond_len} where dense ran "
                                f"(N = {ns}; {pas})", bd["worst"], "x", goal="< 1x (chunked faster)",
                                met=bd["worst"] < 1))
    dm = summ[f"dense_over_chunked_mem_{pas}"]
    out.append(_record.figure(f"B8.dense_over_chunked_mem_{key}", f"dense / chunked attention peak memory at "
                              f"N={dm['N']} ({pas}; dense from the memory analysis)", dm["ratio"], "x"))
    for n, s in summ[f"causal_skip_{pas}"].items():
      if s["no_mask_over_causal"] is not None:
        out.append(_record.figure(f"B8.causal_skip_speedup_{n}_{key}", f"chunked attention: time without a mask / "
                                  f"causal (tiles above the diagonal skipped), N={n} ({pas})",
                                  s["no_mask_over_causal"], "x"))
    for n, s in summ[f"window_{pas}"].items():
      if s["causal_over_window_time"] is not None:
        out.append(_record.figure(f"B8.window_{s['window']}_speedup_{n}_{key}", f"chunked attention: causal time / "
                                  f"causal with a sliding window of {s['window']} keys (tiles outside it skipped), "
                                  f"N={n} ({pas})", s["causal_over_window_time"], "x"))
      if s["causal_over_window_mem"] is not None:
        out.append(_record.figure(f"B8.window_{s['window']}_mem_{n}_{key}", f"chunked attention: causal peak memory / "
                                  f"causal with a sliding window of {s['window']} keys, N={n} ({pas}; memory analysis)",
                                  s["causal_over_window_mem"], "x"))
    for n, s in summ[f"tiles_{pas}"].items():
      if s["default_over_best"] is not None:
        best = f"{s['best_tile'][0]}x{s['best_tile'][1]}"
        out.append(_record.figure(f"B8.default_tile_over_best_{n}_{key}", f"chunked attention time, default "
                                  f"{DEFAULT_BLOCK_Q}x{DEFAULT_BLOCK_K} tiles / the fastest tried ({best}), N={n} "
                                  f"({pas})", s["default_over_best"], "x"))
  for impl, s in summ["train_longest_T_in_20GiB"].items():
    if s["T"] is not None:
      cap = ", search cap" if s["at_search_cap"] else ""
      out.append(_record.figure(f"B8.train_longest_T_20GiB_{impl}", f"{args.config} train step (B={args.train_batch}), "
                                f"attention_implementation={impl}: longest power-of-two T with a compiled peak "
                                f"<= {FIT_GIB:.0f} GiB{cap}", s["T"], "tokens"))
  cp = summ.get("context_parallel")
  if cp:
    for c, r in cp["temp_times_c_over_c1"].items():
      if c != "1":
        out.append(_record.figure(f"B8.cp_temp_times_c_over_c1_{c}", f"{cp['config']} forward+backward at T={cp['T']}, "
                                  f"context={c}: per-device temp memory x {c} / one device's (1 = proportional "
                                  f"to 1/context)", r, "x", goal="<= 1.3x", met=r <= 1.3))
  for t, r in summ["train_chunked_over_xla_time"].items():
    out.append(_record.figure(f"B8.train_chunked_over_xla_time_{t}", f"{args.config} train step (B={args.train_batch}): "
                              f"chunked / xla time per step, T={t}", r, "x"))
  return out


def _ints(text: str) -> list[int]:
  return [int(x) for x in text.split(",") if x.strip()]


def _tiles(text: str) -> list[tuple[int, int]]:
  out = []
  for part in text.split(","):
    q, _, k = part.strip().partition("x")
    out.append((int(q), int(k or q)))
  return out


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--min-len", type=int, default=1024)
  p.add_argument("--max-len", type=int, default=65536)
  p.add_argument("--max-time-len", type=int, default=16384,
                 help="time dense and chunked attention only up to this N (their time is quadratic); linear "
                      "attention is timed at every N, and every N gets its memory analysis")
  p.add_argument("--batch", type=int, default=1)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--head-dim", type=int, default=64)
  p.add_argument("--chunk-size", type=int, default=64, help="linear attention's chunk")
  p.add_argument("--rounds", type=int, default=3, help="timing rounds (bench/harness.py)")
  p.add_argument("--slow-s", type=float, default=1.0, help="1 timed call per block (not 2) when a call takes longer")
  p.add_argument("--beyond-len", type=int, default=8192,
                 help="the goal 'chunked faster than dense' is checked at every N >= this where dense ran")
  p.add_argument("--skip-lens", type=_ints, default=[8192],
                 help="N at which chunked attention also runs without a mask (what causal tile skipping saves)")
  p.add_argument("--tile-lens", type=_ints, default=[2048, 8192], help="N at which the tile sizes are compared")
  p.add_argument("--tiles", type=_tiles, default=_tiles(DEFAULT_TILES), help=f"block_q x block_k (default {DEFAULT_TILES})")
  p.add_argument("--window", type=int, default=1024, help="the sliding window (keys) of the window rows")
  p.add_argument("--window-lens", type=_ints, default=[8192, 32768],
                 help="N at which chunked causal attention runs with and without the sliding window (timed at "
                      "every such N, whatever --max-time-len says; empty: none)")
  p.add_argument("--config", default="configs/default.py", help="the train step's config file[:variant]")
  p.add_argument("--train-min-len", type=int, default=2048)
  p.add_argument("--train-max-len", type=int, default=32768)
  p.add_argument("--train-max-time-len", type=int, default=8192, help="time the train step only up to this T")
  p.add_argument("--train-batch", type=int, default=1)
  p.add_argument("--train-rounds", type=int, default=3)
  p.add_argument("--fit-max-len", type=int, default=2**20,
                 help="how far T doubles (analysis only) looking for the longest T that fits in 20 GiB")
  p.add_argument("--mem-limit-gb", type=float, default=None,
                 help="do not run a configuration whose compiled peak memory exceeds this (its memory is still "
                      "reported); default: 80%% of the accelerator's memory, or min(8, 40%% of RAM) on CPU")
  p.add_argument("--figure", default=None,
                 help="where the figure goes (default docs/figures/long_context.png; --smoke: a temporary directory, "
                      "deleted afterwards)")
  p.add_argument("--no-figure", action="store_true")
  p.add_argument("--cp-len", type=int, default=16384, help="T of the context-parallel memory analysis (part 3)")
  p.add_argument("--cp-sizes", type=_ints, default=[1, 2, 4, 8], help="context-axis sizes of part 3 (empty: skip)")
  p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="dtype of q, k, v (part 1)")
  p.add_argument("--methods", type=lambda s: tuple(s.split(",")), default=METHODS,
                 help=f"part 1's methods, comma-separated: {', '.join(METHODS)} (all three needed) and any of "
                      f"{', '.join(EXTRA_METHODS)} (causal = XLA with is_causal; cudnn needs a GPU and bf16)")
  p.add_argument("--no-train", action="store_true", help="skip part 2 (the default model's train step)")
  p.add_argument("--cp-worker", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--b4", action="store_true",
                 help="B4 (was bench/attention.py): softmax (dense) vs causal linear attention at N = 256 ... 16384, "
                      "every N timed, no chunked attention, tile sweep, train step or mesh; records as 'attention' "
                      "with B4's figures and draws docs/figures/attention_scaling.png")
  _record.add_record_arg(p)
  _record.add_smoke_arg(p, "N = 64, 128 with 2 heads of 16 (no tile sweep), configs/default.py:smoke's train "
                        "step at T = 64, 1 repeat (overrides the size flags)")
  if "--b4" in (sys.argv[1:] if argv is None else argv):  # B4's defaults: N = 256 ... 16384, every N timed
    p.set_defaults(min_len=256, max_len=16384, max_time_len=2**30, slow_s=2.0, skip_lens=[], tile_lens=[], cp_sizes=[],
                   window_lens=[])
  args = p.parse_args(argv)
  if args.cp_worker:
    _cp_worker(args)
    return
  if args.b4:
    args.methods = ("dense", "linear")
  unknown = [m for m in args.methods if m not in METHODS + EXTRA_METHODS]
  if unknown or not set(METHODS) <= set(args.methods) and not args.b4:
    p.error(f"--methods {','.join(args.methods)}: expected {', '.join(METHODS)} and optionally "
            f"{', '.join(EXTRA_METHODS)}")
  if args.smoke:
    args.min_len, args.max_len, args.max_time_len, args.heads, args.head_dim = 64, 128, 128, 2, 16
    args.chunk_size, args.rounds, args.beyond_len, args.skip_lens, args.tile_lens = 16, 1, 128, [] if args.b4 else [128], []
    args.tiles = [(32, 32)]
    args.window, args.window_lens = 32, [] if args.b4 else [128]
    args.config, args.train_min_len, args.train_max_len, args.train_max_time_len = "configs/default.py:smoke", 64, 64, 64
    args.train_rounds, args.fit_max_len = 1, 64
    args.cp_len, args.cp_sizes = 64, [] if args.b4 else [1, 2]
  if args.mem_limit_gb is None:
    args.mem_limit_gb = default_mem_limit_gb()
  info = machine_info()
  command = " ".join([".venv/bin/python", "bench/long_context.py"] + [shlex.quote(a) for a in sys.argv[1:]])
  load_before, t_start = os.getloadavg(), time.perf_counter()
  rows = run_attention(args)
  train_rows = [] if args.b4 or args.no_train else run_train(args)
  cp = context_parallel_memory(args)
  summ = summarise(args, rows, train_rows, cp, info, command, t_start, load_before)
  table = print_report(args, rows, train_rows, summ)
  if not args.no_figure:
    _record.write_figure(lambda path: plot(args, rows, train_rows, summ, path),
                         "attention_scaling.png" if args.b4 else "long_context.png", figure=args.figure, smoke=args.smoke)
  bench = _record.record_name("attention" if args.b4 else "long_context", args)
  if bench:
    path = _record.save(bench, figures=figures_b4(summ, rows) if args.b4 else figures(args, summ), table=table,
                        result={"summary": summ, "results": rows, "train": train_rows})
    print(f"# recorded {path}", file=sys.stderr)


if __name__ == "__main__":
  main()
