"""`train_and_evaluate(config, workdir)`: the one training loop, for every task and mesh.

Read top to bottom: setup and checks, data, model and optimiser (created already sharded),
restore, the jitted step, the loop (metrics, eval, checkpoints, preemption), the end.

Re-running the same command resumes from the newest checkpoint in `<workdir>/checkpoints`,
data position included, so an interrupted run ends with the same parameters as one that
was never interrupted. What the loop survives, and how (docs/reliability.md):
- a second trainer on the workdir: refused at start (workdir_lock.py);
- SIGTERM or Ctrl-C: the step finishes, a checkpoint is saved, the run exits (stopping.py);
- SIGKILL, also mid-save: orbax commits by rename, so the newest committed checkpoint is whole;
- a damaged checkpoint: restore falls back to the newest one that verifies (checkpoints.py);
- a failed write (disk full, I/O error): the run stops naming the path; the last checkpoint stands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from roformer_jax import context_parallel, errors, mesh as mesh_lib
from roformer_jax.training import checkpoints as checkpoints_lib, data, hooks as hooks_lib, metrics as metrics_lib
from roformer_jax.training import optim, peers, stopping, tasks
from roformer_jax.training.checkpoints import Checkpointer
from roformer_jax.training.data import pipeline
from roformer_jax.training.workdir_lock import lock_workdir

REQUIRED_KEYS = ("seed", "total_steps", "batch_size", "checkpoint_every_steps", "eval_every_steps", "mesh")
# config.dropout_rng -> the PRNG of the dropout stream (jax.random.key's impl). Parameters are
# always initialised with threefry, so every choice starts from the same weights. "rbg" and
# "unsafe_rbg" draw the same Bernoulli distribution from different streams, cheaper on GPUs
# (MaxText sets unsafe_rbg for this reason); "unsafe_rbg" gives up split/fold_in's statistical
# guarantees. Every choice is deterministic for a seed and resumes exactly (the stream's key is
# checkpointed with its PRNG). docs/training.md, "The dropout PRNG".
DROPOUT_RNGS = {"threefry": "threefry2x32", "rbg": "rbg", "unsafe_rbg": "unsafe_rbg"}


def dropout_rng(config: ml_collections.ConfigDict) -> str:
  """config.dropout_rng, checked; a config written before the key existed drew threefry."""
  name = config.get("dropout_rng", "threefry")
  if name not in DROPOUT_RNGS:
    raise ValueError(f"config.dropout_rng={name!r} is not a PRNG this trainer knows; choose one of "
                     f"{sorted(DROPOUT_RNGS)} (threefry is JAX's default; rbg and unsafe_rbg are cheaper on GPUs).")
  return name


def check_config(config: ml_collections.ConfigDict) -> None:
  """Fails fast, before any data or compile work, naming the bad key."""
  missing = [k for k in REQUIRED_KEYS if k not in config]
  if missing:
    raise ValueError(f"config is missing {missing}; every training config has {REQUIRED_KEYS}.")
  for key in ("total_steps", "batch_size", "checkpoint_every_steps", "eval_every_steps", "log_every_steps"):
    value = config[key]
    if not isinstance(value, int) or value < 1:
      raise ValueError(f"config.{key}={value!r} must be a positive integer.")
  for key, low in (("profile_first_step", 0), ("profile_steps", 1), ("feature_redraw_every", 0)):
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
      raise ValueError(f"config.{key}={value!r} must be an integer >= {low}.")
  task = tasks.get(config.task)
  dropout_rng(config)
  tasks.model_config(config)  # validates every model field now
  if config.model.attention_implementation == "cudnn" and jax.default_backend() != "gpu":
    raise ValueError(f"config.model.attention_implementation='cudnn' needs a GPU, but JAX's backend is "
                     f"{jax.default_backend()!r}; use 'auto' (cuDNN wherever it applies) or 'xla'.")
  check_average_last(config)
  source = config.init_from
  if source and not os.path.exists(source):
    raise ValueError(f"config.init_from={source!r} does not exist; train that run first, or give another trained "
                     "workdir (--config.init_from=DIR), a checkpoint step directory or a transformers RoFormer "
                     "directory (or \"\" to start from scratch).")
  if source and not task.init_from:
    raise ValueError(f"config.init_from starts the encoder tasks (mlm, classification) from a pre-trained "
                     f"encoder, the causal LM (lm) from a trained LM and the ViT (image) from a trained image run; "
                     f"task={config.task!r} cannot use it.")
  pipeline.passkey_fraction(config.data, task.batches)  # a number in [0, 1), lm only
  pipeline.document_mask(config.data, task.batches)  # a bool, lm/mlm only
  mesh_lib.rules_from_config(config.logical_axis_rules)
  check_context_parallel(config)
  make_optimizer(config)  # schedule errors (warmup_steps > total_steps, ...) before any work


def check_context_parallel(config: ml_collections.ConfigDict, context: int | None = None) -> None:
  """Refuses, before any work, a run that context parallelism cannot split.

  `mesh.context` > 1 needs softmax attention, and every sequence the run feeds the model
  (`sequence_lengths`, at every stage's length) must pass `context_parallel.check_length`,
  so that a bad length fails here, naming its key, and not later at trace time.

  Args:
    config: the run's config.
    context: the context axis size; default `config.mesh.context`, whose -1 (fill) is only
      known once the mesh is made: `train_and_evaluate` checks again with the mesh's size.

  Raises:
    ValueError: linear attention, or a length the context axis does not split.
  """
  c = dict(config.mesh).get("context", 1) if context is None else context  # an axis left out has size 1
  if not isinstance(c, int) or c in (1, -1):
    return
  if config.model.attention != "softmax":
    raise ValueError(f"config.mesh.context={c} needs model.attention='softmax' (linear attention is not split "
                     f"over the context axis); set --config.mesh.context=1.")
  # data.max_length even with stages: eval.py's passes use it.
  lengths = [("config.data.max_length", config.data.max_length)]
  lengths += [(f"config.stages[{i}].max_length", dict(st).get("max_length"))
              for i, st in enumerate(config.stages or [])]
  for key, max_length in lengths:
    if isinstance(max_length, int):  # others are refused by stages_from_config and the data pipeline
      for name, length, causal, note in sequence_lengths(config, max_length, key):
        context_parallel.check_length(length, causal=causal, key=name, context=c, note=note)


def sequence_lengths(config: ml_collections.ConfigDict, max_length: int,
                     key: str = "config.data.max_length") -> list[tuple[str, int, bool, str]]:
  """The sequences a batch of `config.task` feeds the model when rows are `max_length` long.

  Args:
    config: the run's config (its task and `data.max_target_length`).
    max_length: the row length the pipeline builds (`data.max_length`, or a stage's).
    key: the config key that sets `max_length`, for error messages.

  Returns:
    (key, length, causal, note) per sequence: the lm row (causal; the pipeline packs T + 1 tokens
    and feeds T), the mlm or classification row (bidirectional), and for seq2seq the source
    (bidirectional) and the target (causal, `data.max_target_length`, which 0 makes the
    source's length; the note says so for `context_parallel.check_length`): the task's
    `Task.sequence_lengths`.
  """
  return tasks.get(config.task).sequence_lengths(config, max_length, key)


def check_average_last(config: ml_collections.ConfigDict) -> None:
  """eval.average_last <= keep_checkpoints: a run keeps only its newest keep_checkpoints, so an
  average of more could never be made (eval.py would refuse it after the whole run)."""
  average_last, keep = config.eval.average_last, config.keep_checkpoints
  if isinstance(average_last, int) and isinstance(keep, int) and average_last > keep:
    raise ValueError(f"config.eval.average_last={average_last} averages more checkpoints than "
                     f"config.keep_checkpoints={keep} keeps on disk. Keep enough before training "
                     f"(--config.keep_checkpoints={average_last}), or average fewer "
                     f"(--config.eval.average_last={keep}).")


@dataclasses.dataclass(frozen=True)
class Stage:
  """A span of steps with its own max length and global batch (Table 4's staged schedule)."""
  index: int  # 0-based position in config.stages (it offsets the stage's data seed)
  first: int  # first step (1-based, inclusive)
  last: int  # last step (inclusive)
  max_length: int
  batch_size: int
  count: int = 1  # how many stages the run has

  def __str__(self) -> str:
    """'stage 2/3': 1-based, as Table 4 numbers them; every log line names a stage this way."""
    return f"stage {self.index + 1}/{self.count}"


def stages_from_config(config: ml_collections.ConfigDict) -> list[Stage]:
  """`config.stages` (a list of {steps, max_length, batch_size}) or one stage for the run."""
  spec = config.stages or []
  if not spec:
    return [Stage(0, 1, config.total_steps, config.data.max_length, config.batch_size, 1)]
  out, first = [], 1
  for i, st in enumerate(spec):
    st = dict(st)
    unknown = sorted(set(st) - {"steps", "max_length", "batch_size"})
    if unknown or any(not isinstance(st.get(k), int) or st[k] < 1 for k in ("steps", "max_length", "batch_size")):
      raise ValueError(f"config.stages[{i}] (stage {i + 1}/{len(spec)})={st} must have positive integer steps, "
                       f"max_length and batch_size (and nothing else{'; unknown ' + str(unknown) if unknown else ''}).")
    out.append(Stage(i, first, first + st["steps"] - 1, st["max_length"], st["batch_size"], len(spec)))
    first += st["steps"]
  if out[-1].last != config.total_steps:
    raise ValueError(f"config.stages add up to {out[-1].last} steps but config.total_steps="
                     f"{config.total_steps}; make them equal.")
  return out


def stage_at(stages: list[Stage], step: int) -> Stage:
  """The stage that step `step` belongs to (step 0, before training, is in the first)."""
  return next(st for st in stages if max(step, 1) <= st.last)


def make_optimizer(config: ml_collections.ConfigDict):
  """(tx, schedule, k). Each loop step is one batch; with optim.grad_accum_steps = k the
  optimiser updates every k batches, so its schedule runs over total_steps // k updates."""
  accum = int(config.optim.grad_accum_steps)
  tx, schedule = optim.make_optimizer(config.optim, max(config.total_steps // accum, 1))
  return tx, schedule, accum


def use_gpu_threefry_kernel() -> bool:
  """On a GPU backend, draws JAX's threefry random bits with jaxlib's CUDA kernel (the
  `jax_threefry_gpu_kernel_lowering` flag) instead of XLA's unrolled integer arithmetic.

  The bits are the same (threefry2x32 is one function); only the lowering differs. Without it,
  XLA compiles one kernel per parameter's initialiser: on an H100 (jax 0.11.2) `create_state`
  of roformer-base (12 layers, ~1,000 fusions) had not compiled after 150 s; with it B3's
  three variants were created, compiled and timed in 75 s (docs/benchmarks.md, B3). Returns
  whether the flag is now on. Other backends are left alone.
  """
  if jax.default_backend() == "gpu" and not jax.config.jax_threefry_gpu_kernel_lowering:
    jax.config.update("jax_threefry_gpu_kernel_lowering", True)
  return bool(jax.config.jax_threefry_gpu_kernel_lowering)


def create_state(config: ml_collections.ConfigDict, mesh, rules, tx):
  """(graphdef, state) of (model, optimiser), created inside jit on the mesh: every parameter
  and moment is born on its shards, never whole on one device. On a GPU this turns on
  `use_gpu_threefry_kernel` first (minutes of compile time otherwise)."""
  use_gpu_threefry_kernel()

  @nnx.jit
  def create():
    dropout = jax.random.key(config.seed + 1, impl=DROPOUT_RNGS[dropout_rng(config)])
    model = tasks.build_model(config, nnx.Rngs(params=config.seed, dropout=dropout))
    return model, nnx.Optimizer(model, tx, wrt=nnx.Param)

  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    model, optimizer = create()
  return nnx.split((model, optimizer))


# ======================================================================================
# The step functions (pure; jitted with explicit shardings below).
# ======================================================================================


@contextlib.contextmanager
def step_context(mesh, rules):
  """Traces a step with the mesh and the logical rules in context: context parallelism
  (context_parallel.py) reads the context axis and the "length" rule from them."""
  if mesh is None:
    yield
    return
  with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nnx.logical_axis_rules(rules):
    yield


def train_step(graphdef, state, batch, *, task: str | tasks.Task, label_smoothing: float = 0.0, mesh=None,
               rules=None):
  """One optimiser step: the task's loss, its gradient, the optax update. Pure; jit it.

  Args:
    graphdef, state: `nnx.split((model, optimizer))` (`create_state`).
    batch: the task's global batch (`mesh.global_batch`).
    task: a `tasks.Task`, or its name (`config.task`); label_smoothing: as config.label_smoothing.
    mesh, rules: trace under this mesh and these logical rules (context parallelism reads
      them); None traces without.

  Returns:
    (new state, {"loss", "accuracy", "grad_norm", "param_norm", "scored"}), scalars on device.
  """
  with step_context(mesh, rules):
    model, optimizer = nnx.merge(graphdef, state)

    def loss_fn(model):
      sums = tasks.get(task).loss_sums(model, batch, label_smoothing=label_smoothing, deterministic=False)
      return sums["loss"] / jnp.maximum(sums["weight"], 1.0), sums

    (loss, sums), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    with jax.named_scope("optimizer"):  # profiles group the update's ops (bench/trace_summary.py)
      optimizer.update(model, grads)
    # The updated parameters' norm: a finite loss can still be followed by an update to inf,
    # and such a state must never be checkpointed.
    param_norm = optax.tree.norm(nnx.state(model, nnx.Param))
    out = {"loss": loss, "accuracy": sums["correct"] / jnp.maximum(sums["weight"], 1.0),
           "grad_norm": optax.tree.norm(grads), "param_norm": param_norm, "scored": sums["weight"]}
    return nnx.state((model, optimizer)), out


def eval_step(graphdef, state, batch, *, task: str | tasks.Task, mesh=None, rules=None) -> dict[str, jax.Array]:
  """Summed loss, weight and correct predictions of one batch, without dropout. Pure; jit it.

  graphdef, state: a model's `nnx.split`, or the trainer's (model, optimizer) one.
  """
  merged = nnx.merge(graphdef, state)
  model = merged[0] if isinstance(merged, tuple) else merged
  with step_context(mesh, rules):
    return tasks.get(task).loss_sums(model, batch, deterministic=True)


def eval_sums(step_fn, state, batches, mesh) -> dict[str, float]:
  """{"loss", "weight", "correct"} summed over `batches` (local batches) by `step_fn(state,
  global_batch)`, e.g. a jitted `eval_step`. The sums stay on the device and are read back
  once at the end, so the host never waits for a batch."""
  sums = None
  for local in batches:
    out = step_fn(state, mesh_lib.global_batch(local, mesh))
    out = {k: out[k] for k in ("loss", "weight", "correct")}
    sums = out if sums is None else jax.tree.map(jnp.add, sums, out)
  return {k: 0.0 for k in ("loss", "weight", "correct")} if sums is None else {
      k: float(v) for k, v in jax.device_get(sums).items()}


# ======================================================================================
# train_and_evaluate
# ======================================================================================


def _check_finite(losses: list, param_norm, step: int, ckpt: Checkpointer) -> None:
  """Raises if a loss since the last check, or the updated parameters' norm, is not finite."""
  values = np.asarray(jax.device_get(losses), np.float64)
  norm = float(param_norm)
  if not (np.all(np.isfinite(values)) and math.isfinite(norm)):
    bad = [float(v) for v in values if not math.isfinite(v)]
    raise errors.TrainingDiverged(
        f"loss {bad[0] if bad else float(values[-1])} and parameter norm {norm} by step {step}; stopping without "
        f"saving. The last good checkpoint is step {ckpt.latest_step()} in {ckpt.directory}. Lower "
        "optim.learning_rate or enable optim.grad_clip_norm, then re-run the same command to resume from it.")


# Write errors that a person can fix (space, quota, a read-only or unwritable directory).
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       hooks: Sequence[hooks_lib.Hook] = ()) -> dict[str, Any]:
  """Trains `config` in `workdir`, resuming if it holds checkpoints. Returns final metrics.

  `hooks`: your own `hooks.Hook`s, run after the built-in ones (log, eval, samples, checkpoint)
  and before the stop (roformer_jax/training/hooks.py says when each method is called).

  Raises `errors.UserError` for a wrong config, data, workdir or checkpoint (before any
  training work, and before the workdir is created), and `errors.RunFault` when the
  environment stops the run (a failed write, a non-finite loss).
  """
  # ------------------------------------------------------------------ setup and checks
  with errors.user_errors("invalid config"):
    check_config(config)
    num_devices = config.num_devices or jax.device_count()  # 0 = all devices
    mesh = mesh_lib.make_mesh(config.mesh, jax.devices()[:num_devices])
    check_context_parallel(config, context=mesh.shape["context"])  # mesh.context=-1 is known now
    stages = stages_from_config(config)
    for st in stages:
      mesh_lib.check_batch_size(st.batch_size, mesh)
    rules = mesh_lib.rules_from_config(config.logical_axis_rules)
  with errors.user_errors("data"):
    data.check_data(config.data, splits=("train", "validation"))  # missing dataset/tokenizer: fail now
    tokenizer = data.make_tokenizer(config.data)
  if tasks.get(config.task).reads_tokens and tokenizer.vocab_size > config.model.vocab_size:
    raise errors.UserError(f"the {config.data.tokenizer} tokenizer has {tokenizer.vocab_size} ids but "
                           f"config.model.vocab_size={config.model.vocab_size}; set it to {tokenizer.vocab_size}.")
  workdir = os.path.abspath(workdir)
  with errors.user_errors(f"workdir {workdir}"):
    os.makedirs(workdir, exist_ok=True)
  with lock_workdir(workdir), stopping.StopRequests(mesh) as stops:
    try:
      return _train(config, workdir, mesh, rules, stages, stops, tokenizer, list(hooks))
    except OSError as e:
      if e.errno not in _WRITE_ERRNOS:
        raise
      raise errors.RunFault(f"writing {e.filename or workdir} failed: {e.strerror or e}. Checkpoints already "
                            "committed are intact; free space or fix the permissions, then re-run the same command "
                            "to resume.") from e


def _train(config, workdir: str, mesh, rules, stages: list[Stage], stops: stopping.StopRequests,
           tokenizer, extra_hooks: list[hooks_lib.Hook]) -> dict[str, Any]:
  """The run itself, with the workdir locked: data, model, restore, the loop."""
  if jax.process_index() == 0:  # the run's config, for people and for init_from's architecture check
    with open(os.path.join(workdir, "config.json"), "w") as f:
      f.write(config.to_json_best_effort(indent=2))
  process, processes = jax.process_index(), jax.process_count()
  task = tasks.get(config.task)
  peers.note_checkpoints(os.path.join(workdir, "checkpoints"))  # named if a peer dies (peers.py)
  ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=config.keep_checkpoints,
                      save_every=config.checkpoint_every_steps, async_save=config.async_checkpoints)

  # ------------------------------------------------------------------ load dataset
  def iterator(split: str, stage: Stage, **kw):
    data_cfg = config.data.copy_and_resolve_references()
    data_cfg.max_length = stage.max_length
    return data.make_iterator(data_cfg, task=task.batches, split=split, batch_size=stage.batch_size // processes,
                              seed=config.seed + stage.index, process_index=process, process_count=processes, **kw)

  # ------------------------------------------------------------------ build model and optimiser
  tx, schedule, accum = make_optimizer(config)
  graphdef, state = create_state(config, mesh, rules, tx)
  model = nnx.merge(graphdef, state)[0]
  num_params = metrics_lib.count_params(model)
  flops_at_length = task.flops_per_token(config, model, num_params)  # MFU: FLOPs per token at a row length
  del model

  # ------------------------------------------------------------------ restore
  # The newest checkpoint that verifies, with the data iterator of its stage; damaged ones are
  # moved aside with a warning. A fresh run (start 0) may begin from a pre-trained encoder.
  try:
    start, restored, train_iter = ckpt.restore_newest(state, lambda step: iterator("train", stage_at(stages, step)))
  except BaseException:
    ckpt.close()
    raise
  stage = stage_at(stages, start or 0)
  for name in ("metrics.jsonl", "samples.jsonl"):  # rows past the checkpoint will be logged again
    metrics_lib.truncate_after(workdir, start or 0, name)
  if start:
    state = restored
  else:
    start, train_iter = 0, iterator("train", stage)
  if not start and config.init_from:  # a fresh run from a pre-trained encoder (its own checkpoints win later)
    model, optimizer = nnx.merge(graphdef, state)
    loaded = checkpoints_lib.init_from(model, config.init_from)
    graphdef, state = nnx.split((model, optimizer))
    if process == 0:
      rope = "".join(f"; {k}: {a!r} -> {b!r}" for k, (a, b) in loaded["rope"].items())
      resized = f"; resized: {', '.join(loaded['resized'])}" if loaded["resized"] else ""
      print(f"init_from: {loaded['loaded']} tensors from {loaded['source']}{resized}; fresh: "
            f"{', '.join(loaded['fresh']) or 'nothing'}{rope}", flush=True)
  state_sharding = jax.tree.map(lambda x: x.sharding, state)
  batch_sharding = mesh_lib.batch_sharding(mesh)

  jitted_train_step = jax.jit(
      functools.partial(train_step, graphdef, task=task, mesh=mesh, rules=rules,
                        label_smoothing=float(config.label_smoothing)),
      in_shardings=(state_sharding, batch_sharding), out_shardings=(state_sharding, None), donate_argnums=(0,))
  evaluate_batch = jax.jit(functools.partial(eval_step, graphdef, task=task, mesh=mesh, rules=rules),
                           in_shardings=(state_sharding, batch_sharding))

  # ------------------------------------------------------------------ main train loop
  progress = metrics_lib.Progress(config.total_steps, start)
  progress.write(f"{config.task}: {num_params / 1e6:.2f}M parameters, mesh {dict(mesh.shape)}, "
                 f"global batch {stage.batch_size}, {stage}, steps {start}..{config.total_steps}, workdir {workdir}")
  loop = hooks_lib.Loop(config=config, workdir=workdir, task=task, mesh=mesh, graphdef=graphdef, state=state,
                        start=start, stage=stage, iterator=iterator, train_iter=train_iter,
                        writer=metrics_lib.MetricsWriter(workdir), progress=progress, step=start)
  hooks = hooks_lib.default_hooks(
      loop, ckpt=ckpt, stops=stops, schedule=schedule, accum=accum,
      flops_per_token=lambda st: flops_at_length(st.max_length), peak_flops=metrics_lib.device_peak_flops(),
      eval_fn=lambda state, batches: eval_sums(evaluate_batch, state, batches, mesh), tokenizer=tokenizer,
      extra=extra_hooks)
  unchecked = []  # losses since the last finite check (device arrays)
  try:
    for step in range(start + 1, config.total_steps + 1):
      loop.step = step
      if step > loop.stage.last:  # next stage: new lengths and batch; the step recompiles once
        loop.stage = stage_at(stages, step)
        loop.train_iter = iterator("train", loop.stage)
        progress.write(f"{loop.stage}: steps {loop.stage.first}..{loop.stage.last}, max_length "
                       f"{loop.stage.max_length}, batch {loop.stage.batch_size}")
      for hook in hooks:
        hook.before_step(loop)
      peers.note_step(step)
      with jax.profiler.StepTraceAnnotation("train", step_num=step):
        local = next(loop.train_iter)
        loop.tokens = tasks.tokens_in(local, task) * processes
        loop.state, loop.out = jitted_train_step(loop.state, mesh_lib.global_batch(local, mesh))
      # The host does not wait for each step: the next batch is prepared while the device
      # computes, and the losses are read back in bulk. They are checked at the first step and
      # before any hook that reads the state (a log line, an evaluation, a checkpoint) or a
      # stop, so a non-finite state is never saved.
      unchecked.append(loop.out["loss"])
      for hook in hooks:
        hook.on_step(loop)  # the stop hook polls here: every process stops after the same step
      due = [hook for hook in hooks if hook.due(loop)]
      if step == start + 1 or loop.stop or any(hook.reads_state for hook in due):
        _check_finite(unchecked, loop.out["param_norm"], step, ckpt)
        unchecked = []
      for hook in due:
        began = time.perf_counter()
        hook.run(loop)
        if hook.off_clock:
          loop.off_clock += time.perf_counter() - began
      if loop.finished:
        break
  finally:
    try:
      for hook in hooks:
        hook.close(loop)
    finally:
      try:
        ckpt.close()
      finally:
        progress.close()
        loop.writer.close()
  metrics_lib.plot_loss(workdir)
  log = next(hook for hook in hooks if isinstance(hook, hooks_lib.Log))
  return {"step": loop.step, "started_at": start, "total_steps": config.total_steps, **log.last}


def summary(result: dict[str, Any], workdir: str) -> str:
  """train.py's last line, for a person: what ran, the final losses, and where the results are; a finished run
  says so and how to train further."""
  step, start, total = result["step"], result.get("started_at", 0), result.get("total_steps", result["step"])
  evals = []
  path = os.path.join(workdir, "metrics.jsonl")
  if os.path.isfile(path):
    evals = [r for r in metrics_lib.read_rows(path) if "eval_loss" in r and "evaluated" not in r
             and "eval_bits_per_token" not in r and r["step"] <= step]
  last_eval = f"eval loss {evals[-1]['eval_loss']:.4f} at step {evals[-1]['step']}" if evals else "no eval yet"
  where = [f"{name} {os.path.join(workdir, name)}" for name in ("loss.png", "samples.jsonl")
           if os.path.exists(os.path.join(workdir, name))]
  files = f"; {', '.join(where)}" if where else ""
  if start >= total:
    return (f"{workdir} is already finished: step {step} of total_steps={total}, {last_eval}{files}. To train "
            f"further, run the same command with a larger --config.total_steps (it resumes from step {step}).")
  done = "finished" if step >= total else f"stopped at step {step} of {total} (the same command resumes it)"
  loss = f"train loss {result['loss']:.4f}, " if isinstance(result.get("loss"), float) else ""
  return f"{done}: steps {start + 1}..{step}, {loss}{last_eval}; workdir {workdir}{files}"
