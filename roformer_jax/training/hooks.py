"""The training loop's periodic work, as hooks: log, eval, samples, checkpoint, feature redraw,
profiler trace, stop.

The loop (`trainer.train_and_evaluate`) runs one train step, then asks its hooks, in list
order:

    for each hook: on_step(loop)        bookkeeping only; no device sync (the stop poll is here)
    due = the hooks whose due(loop) is true
    if this is the first step, a stop was asked for, or a due hook reads the state:
        check the losses since the last check and the parameter norm (raise if not finite)
    for each due hook: run(loop)
    if loop.finished: leave the loop

so the reliability order holds whatever the hooks are: nothing reads or saves a state whose
losses were not checked, the checkpoint is written before the stop is reported, and every
process stops after the same step. The built-in list is `default_hooks`; `train_and_evaluate`
appends a caller's own hooks (for example a benchmark's probe) before the stop hook.

A hook is any object with the methods of `Hook`; subclass it and override what you need.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np
from flax import nnx

from roformer_jax.training import data, samples as samples_lib, stopping


@dataclasses.dataclass
class Loop:
  """What the loop shares with its hooks. Hooks read it; `state` they may replace (the feature
  redraw does), `finished` they may set (the stop hook does)."""
  config: ml_collections.ConfigDict
  workdir: str
  task: Any  # tasks.Task
  mesh: jax.sharding.Mesh
  graphdef: Any
  state: Any  # (model, optimiser) state, on the mesh
  start: int  # the step the run resumed from (0 = fresh)
  stage: Any  # trainer.Stage of this step
  iterator: Callable[..., Any]  # iterator(split, stage, **kw): the data of a split at a stage's shapes
  train_iter: Any  # the training data iterator, checkpointed with the state
  writer: Any  # metrics.MetricsWriter
  progress: Any  # metrics.Progress
  step: int = 0
  out: dict[str, jax.Array] = dataclasses.field(default_factory=dict)  # the step's outputs (device arrays)
  tokens: int = 0  # tokens the step trained on, over all processes
  stop: bool = False  # a stop was asked for (SIGTERM, Ctrl-C); every process agrees on the step
  finished: bool = False  # leave the loop after this step's hooks
  off_clock: float = 0.0  # seconds spent in hooks whose time is not training throughput

  @property
  def last_step(self) -> bool:
    return self.step == self.config.total_steps


class Hook:
  """One piece of periodic work. `reads_state`: when due, the loop checks the losses first.
  `off_clock`: its run time is left out of the logged throughput."""
  reads_state = True
  off_clock = False

  def before_step(self, loop: Loop) -> None:
    """Before the step's batch is fetched (a profiler trace starts here)."""

  def on_step(self, loop: Loop) -> None:
    """After every step: bookkeeping that needs no device sync."""

  def due(self, loop: Loop) -> bool:
    return False

  def run(self, loop: Loop) -> None:
    """The work itself, after the finite check."""

  def close(self, loop: Loop) -> None:
    """At the end of the loop, also after an error."""


def every(n: int, loop: Loop) -> bool:
  """Due every `n` steps (n > 0) and at the last step."""
  return (n > 0 and loop.step % n == 0) or loop.last_step


class FeatureRedraw(Hook):
  """FAVOR+ projections redrawn every `feature_redraw_every` steps (Performer's
  feature_redraw_interval), from a key that depends only on the seed and the step, so a resumed
  run redraws the same features."""
  reads_state = False

  def __init__(self, loop: Loop, every_steps: int):
    self.every_steps = int(every_steps)
    state_sharding = jax.tree.map(lambda x: x.sharding, loop.state)
    self._redraw = jax.jit(functools.partial(redraw_features, loop.graphdef), in_shardings=(state_sharding, None),
                           out_shardings=state_sharding, donate_argnums=(0,))

  def due(self, loop: Loop) -> bool:
    return loop.step % self.every_steps == 0

  def run(self, loop: Loop) -> None:
    loop.state = self._redraw(loop.state, jax.random.fold_in(jax.random.key(loop.config.seed), loop.step))


def redraw_features(graphdef, state, key):
  """`state` with every module's `redraw_features` called (FAVOR+ projections), pure."""
  model, optimizer = nnx.merge(graphdef, state)
  for _, module in nnx.iter_modules(model):
    if hasattr(module, "redraw_features"):
      key, sub = jax.random.split(key)
      module.redraw_features(sub)
  return nnx.state((model, optimizer))


class Log(Hook):
  """Every `log_every_steps`: the mean loss of the window, accuracy, learning rate, gradient
  norm, tokens/s (time spent in off-clock hooks left out), step time and MFU to metrics.jsonl
  and TensorBoard, and the progress bar. `last` holds the newest row."""

  def __init__(self, every_steps: int, schedule, accum: int, flops_per_token: Callable[[Any], float],
               peak_flops: float | None):
    self.every_steps, self.schedule, self.accum = int(every_steps), schedule, int(accum)
    self.flops_per_token, self.peak = flops_per_token, peak_flops
    self.last: dict[str, float] = {}
    self._reset(0.0)

  def _reset(self, off_clock: float) -> None:
    self._losses: list[Any]  # the steps' loss arrays since the last row
    self._tokens, self._losses, self._start, self._off = 0, [], time.perf_counter(), off_clock

  def before_step(self, loop: Loop) -> None:
    if loop.step == loop.start + 1:
      self._reset(loop.off_clock)  # the first window opens before the first step: it holds the compilation

  def on_step(self, loop: Loop) -> None:
    self._tokens += loop.tokens
    self._losses.append(loop.out["loss"])

  def due(self, loop: Loop) -> bool:
    return every(self.every_steps, loop)

  def run(self, loop: Loop) -> None:
    out = loop.out
    elapsed = max(time.perf_counter() - self._start - (loop.off_clock - self._off), 1e-9)
    tps = self._tokens / elapsed
    row = {"loss": float(np.mean(jax.device_get(self._losses))), "accuracy": float(out["accuracy"]),
           "learning_rate": float(self.schedule((loop.step - 1) // self.accum)), "grad_norm": float(out["grad_norm"]),
           "tokens_per_sec": tps, "step_time": elapsed / len(self._losses)}
    if self.peak:
      row["mfu"] = tps * self.flops_per_token(loop.stage) / (self.peak * jax.device_count())
    loop.writer.write(loop.step, row)
    rate = {"tok_s" if loop.task.reads_tokens else "img_s": f"{tps:,.0f}"}  # the image task counts images
    loop.progress.update(loop.step, loss=row["loss"], **rate, lr=row["learning_rate"])
    self.last = row
    self._reset(loop.off_clock)


class Evaluate(Hook):
  """Every `eval_every_steps`: loss and accuracy on the first `eval_batches` validation batches
  (the same batches every time, repeating a small split, so every process runs the same number
  of collective steps; eval.py does full passes), summed on the device and read once."""
  off_clock = True

  def __init__(self, every_steps: int, num_batches: int, eval_fn: Callable[..., dict[str, float]]):
    self.every_steps, self.num_batches, self.eval_fn = int(every_steps), int(num_batches), eval_fn

  def due(self, loop: Loop) -> bool:
    return every(self.every_steps, loop)

  def run(self, loop: Loop) -> None:
    it = loop.iterator("validation", loop.stage, repeat=True, shuffle=False)
    sums = self.eval_fn(loop.state, [next(it) for _ in range(self.num_batches)])
    w = max(sums["weight"], 1.0)
    result = {"eval_loss": sums["loss"] / w, "eval_accuracy": sums["correct"] / w}
    loop.writer.write(loop.step, result)
    loop.progress.write(f"step {loop.step}: eval loss {result['eval_loss']:.4f}, "
                        f"accuracy {result['eval_accuracy']:.4f}")


class Samples(Hook):
  """With each evaluation: the task's samples (`Task.samples`: a continuation, a translation,
  filled masks, a predicted label) of the first validation batch's first rows, to
  samples.jsonl and TensorBoard. They decode on one process's copy of the model, so a
  multi-process run skips them."""
  off_clock = True

  def __init__(self, every_steps: int, num: int, max_new_tokens: int, tokenizer,
               labels: Sequence[str] | None = None):
    self.every_steps, self.num, self.max_new_tokens, self.tokenizer = int(every_steps), int(num), max_new_tokens, tokenizer
    self.labels = labels  # the dataset's class names (data.label_names), or None
    self._batch: tuple[Any, Any] | None = None  # (stage, its first validation batch)

  def due(self, loop: Loop) -> bool:
    return self.num > 0 and jax.process_count() == 1 and every(self.every_steps, loop)

  def run(self, loop: Loop) -> None:
    if self._batch is None or self._batch[0] != loop.stage:
      self._batch = (loop.stage, next(loop.iterator("validation", loop.stage, repeat=True, shuffle=False)))
    model = nnx.merge(loop.graphdef, loop.state)[0]
    samples = loop.task.samples(model, self._batch[1], tokenizer=self.tokenizer, num=self.num,
                                max_new_tokens=self.max_new_tokens, labels=self.labels)
    loop.writer.write_samples(loop.step, samples)
    if samples:
      loop.progress.write(samples_lib.screen(samples[0], loop.step))


class Checkpoint(Hook):
  """Saves the state and the data iterator's position when the checkpointer says a step is due,
  at the last step, and when a stop was asked for (`checkpoints.Checkpointer`: atomic, verified
  on restore)."""

  def __init__(self, ckpt):
    self.ckpt = ckpt

  def due(self, loop: Loop) -> bool:
    return loop.stop or loop.last_step or self.ckpt.due(loop.step)

  def run(self, loop: Loop) -> None:
    self.ckpt.save(loop.step, loop.state, loop.train_iter, force=loop.stop or loop.last_step)


class Profile(Hook):
  """A profiler trace (TensorBoard's profile plugin, Perfetto) of steps `first_step` ..
  `first_step + num_steps - 1`, in `<workdir>/profile`. Every step carries a
  `StepTraceAnnotation` (the loop's), so the trace shows step boundaries."""
  reads_state = False

  def __init__(self, first_step: int, num_steps: int, directory: str):
    self.first, self.last, self.directory = int(first_step), int(first_step) + int(num_steps) - 1, directory
    self._tracing = False

  def before_step(self, loop: Loop) -> None:
    if loop.step == self.first and jax.process_index() == 0:
      jax.profiler.start_trace(self.directory)
      self._tracing = True

  def due(self, loop: Loop) -> bool:
    return self._tracing and (loop.step >= self.last or loop.finished or loop.stop or loop.last_step)

  def run(self, loop: Loop) -> None:
    self.close(loop)
    loop.progress.write(f"profile of steps {self.first}..{loop.step}: {self.directory}")

  def close(self, loop: Loop) -> None:
    if self._tracing:
      jax.block_until_ready(loop.out)
      jax.profiler.stop_trace()
      self._tracing = False


class Stop(Hook):
  """Polls SIGTERM / Ctrl-C after every step (`stopping.StopRequests`: all processes agree on
  the step); when asked, waits for the checkpoint the `Checkpoint` hook started and ends the
  loop. It runs last, so the save is committed (and its digest written) before it says so."""

  def __init__(self, stops: stopping.StopRequests, ckpt):
    self.stops, self.ckpt = stops, ckpt

  def on_step(self, loop: Loop) -> None:
    loop.stop = self.stops.poll()

  def due(self, loop: Loop) -> bool:
    return loop.stop

  def run(self, loop: Loop) -> None:
    self.ckpt.wait()
    loop.progress.write(f"{self.stops.signal_name}: saved step {loop.step}; re-run the same command to resume.")
    loop.finished = True


def default_hooks(loop: Loop, *, ckpt, stops: stopping.StopRequests, schedule, accum: int,
                  flops_per_token: Callable[[Any], float], peak_flops: float | None,
                  eval_fn: Callable[..., dict[str, float]], tokenizer,
                  extra: Sequence[Hook] = ()) -> list[Hook]:
  """The trainer's hooks in their order, the caller's `extra` hooks before the stop."""
  config = loop.config
  hooks: list[Hook] = []
  if config.feature_redraw_every:
    hooks.append(FeatureRedraw(loop, config.feature_redraw_every))
  hooks += [Log(config.log_every_steps, schedule, accum, flops_per_token, peak_flops),
            Evaluate(config.eval_every_steps, config.eval_batches, eval_fn),
            Samples(config.eval_every_steps, config.samples_per_eval, config.sample_max_new_tokens, tokenizer,
                    data.label_names(config.data) if config.samples_per_eval > 0 else None),
            Checkpoint(ckpt)]
  if config.profile_first_step:
    hooks.append(Profile(config.profile_first_step, config.profile_steps, os.path.join(loop.workdir, "profile")))
  return hooks + list(extra) + [Stop(stops, ckpt)]


__all__ = ["Checkpoint", "Evaluate", "FeatureRedraw", "Hook", "Log", "Loop", "Profile", "Samples", "Stop",
           "default_hooks", "every", "redraw_features"]
