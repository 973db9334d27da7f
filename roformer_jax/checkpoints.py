"""Orbax checkpoints of the training state and the Grain data iterator.

`<workdir>/checkpoints/<step>/` holds two items:
- `state`: the model and optimiser state (an `nnx.State` as a pure dict of arrays, RNG
  counters included), restorable onto any mesh: the restore target carries the shardings.
- `data`: the Grain iterator's position, so a resumed run reads exactly the batches an
  uninterrupted run would have read.

Orbax writes each step into a temporary directory and renames it when complete, so a run
killed mid-save leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
import grain
import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp


def _abstract(tree):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


class Checkpointer:
  """`ocp.CheckpointManager` for {state, data}: keep-last-N, async saves, exact resume."""

  def __init__(self, directory: str | os.PathLike, *, keep: int = 3, save_every: int = 1000,
               async_save: bool = True):
    self.directory = os.path.abspath(os.fspath(directory))
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, save_interval_steps=save_every,
                                           enable_async_checkpointing=async_save, create=True)
    self.manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def save(self, step: int, state, iterator=None, *, force: bool = False) -> bool:
    """Saves if `step` is due (or `force`); returns whether a save started."""
    items = {"state": ocp.args.StandardSave(state)}
    if iterator is not None:
      items["data"] = grain.checkpoint.CheckpointSave(iterator)
    return self.manager.save(step, args=ocp.args.Composite(**items), force=force)

  def restore(self, step: int, target_state, iterator=None):
    """Restores into the shardings of `target_state` (arrays or ShapeDtypeStructs), and the
    iterator in place. Returns the state."""
    items = {"state": ocp.args.StandardRestore(_abstract(target_state))}
    if iterator is not None:
      items["data"] = grain.checkpoint.CheckpointRestore(iterator)
    restored = self.manager.restore(step, args=ocp.args.Composite(**items))
    return restored["state"]

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()


def average_checkpoints(directory: str | os.PathLike, target_state, *, last: int = 5,
                        steps: list[int] | None = None, select=None):
  """The element-wise mean of the last N checkpoints' states (Sec. 4.1 averages the last 5).

  Args:
    directory: `<workdir>/checkpoints`.
    target_state: a state pytree (arrays or ShapeDtypeStructs with shardings) to restore into.
    last: how many of the newest checkpoints to average (ignored if `steps` is given).
    steps: explicit steps to average.
    select: optional function state -> sub-tree to average (e.g. only the parameters); the
      result then has that sub-tree's structure.

  Returns:
    (averaged state, the steps used). Float leaves are averaged in float32; integer leaves
    (step counters, RNG state) are taken from the newest checkpoint.
  """
  manager = ocp.CheckpointManager(os.path.abspath(os.fspath(directory)),
                                  options=ocp.CheckpointManagerOptions(read_only=True))
  available = sorted(manager.all_steps())
  if not available:
    raise FileNotFoundError(f"no checkpoints in {directory}; train first (python train.py ...).")
  use = sorted(steps) if steps is not None else available[-last:]
  missing = sorted(set(use) - set(available))
  if missing:
    raise ValueError(f"checkpoint steps {missing} are not in {directory} (available: {available}).")
  select = select or (lambda s: s)
  abstract = _abstract(target_state)
  is_float = lambda x: jnp.issubdtype(x.dtype, jnp.floating)
  mean = None
  for k, step in enumerate(use, start=1):
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
    tree = select(restored["state"])
    if mean is None:
      mean = jax.tree.map(lambda x: x.astype(jnp.float32) if is_float(x) else x, tree)
    else:
      # Running mean m += (x - m) / k: exact for identical checkpoints (x - m = 0).
      mean = jax.tree.map(lambda m, x: m + (x.astype(jnp.float32) - m) / k if is_float(x) else x, mean, tree)
  manager.close()
  mean = jax.tree.map(lambda m, x: m.astype(x.dtype) if is_float(x) else m, mean, tree)
  return mean, use


__all__ = ["Checkpointer", "average_checkpoints"]
