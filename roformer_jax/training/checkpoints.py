"""Orbax checkpoints of the training state and the Grain data iterator, verified and fault-tolerant.

`<workdir>/checkpoints/<step>/` holds two items:
- `state`: the model and optimiser state (an `nnx.State` as a pure dict of arrays, RNG
  counters included), restorable onto any mesh: the restore target carries the shardings.
- `data`: the Grain iterator's position, so a resumed run reads exactly the batches an
  uninterrupted run would have read.

What can go wrong, and what happens:
- **Killed mid-save.** Orbax writes each step into a temporary directory and renames it when
  complete, so the previous checkpoint stays intact; the trainer's manager removes leftover
  temporary directories when it starts.
- **Damaged after the commit** (a truncated or deleted file, a flipped byte). Orbax reads a
  flipped byte in an array file back without complaint, so the trainer records a SHA-256 of
  every file in `<step>/digest.json`, and restore checks it first. The digest is part of the
  commit: it is written into orbax's temporary directory once every file is complete, just
  before the rename that commits the step, so a committed step always has one (a kill at any
  moment leaves either no step or a digested one). A checkpoint that fails the check, or that
  orbax cannot read, is moved to `<workdir>/checkpoints.damaged/<step>/` (never deleted;
  `WHY.txt` says what was wrong) and the next older one is tried. With none readable,
  `NoUsableCheckpoint` lists each and why. A checkpoint without a digest (written by a version
  that digested after the commit, and killed before it did) is restored on orbax's own checks
  with a warning naming the step; a trainer then digests it, so it is warned about once.
- **A failed write** (disk full, I/O error, permissions) stops the run with `CheckpointWriteError`
  naming the path and the cause; the previous checkpoint stays readable and the same command
  resumes from it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import numbers
import os
import re
import shutil
import sys
from typing import Any, cast

import grain
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from roformer_jax.errors import RunFault, UserError
from roformer_jax.positional import EXTRA_KEY, MODEL_CONFIG_KEYS, RotaryConfig, config_key

DIGEST_FILE = "digest.json"
# Files that orbax's commit itself writes, after the digest is taken: the step metadata gets its
# commit time, and the commit marker is created. They hold no array data.
_WRITTEN_AT_COMMIT = frozenset({"_CHECKPOINT_METADATA", ocp.path.atomicity.COMMIT_SUCCESS_FILE})
DAMAGED_DIR_SUFFIX = ".damaged"  # <workdir>/checkpoints.damaged/<step>/


class NoCheckpoint(UserError, FileNotFoundError):
  """The directory holds no checkpoint at all (train first)."""


class NoUsableCheckpoint(UserError):
  """Every checkpoint in the directory is damaged."""


class CheckpointMismatch(UserError, ValueError):
  """A readable checkpoint that does not fit this config (another model or optimiser)."""


class CheckpointWriteError(RunFault):
  """Saving a checkpoint failed (disk full, I/O error, permissions)."""


def abstract_tree(tree):
  """The shapes, dtypes and shardings of a tree of arrays: an orbax restore target."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def warn(message: str) -> None:
  """A warning a person must not miss (process 0 only): on stderr, framed."""
  if jax.process_index() == 0:
    print(f"\n{'!' * 78}\nWARNING: {message}\n{'!' * 78}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# Content digests: silent corruption (a flipped byte) is caught at restore.
# --------------------------------------------------------------------------------------


def _files(step_dir: str) -> list[str]:
  out = []
  for root, _, names in os.walk(step_dir):
    out += [os.path.relpath(os.path.join(root, n), step_dir) for n in names]
  return sorted(f for f in out if f != DIGEST_FILE and f != f".{DIGEST_FILE}.tmp" and f not in _WRITTEN_AT_COMMIT)


def _sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    while chunk := f.read(1 << 20):
      h.update(chunk)
  return h.hexdigest()


def write_digest(step_dir: str) -> None:
  """Records size and SHA-256 of every file of a complete checkpoint in `<step_dir>/digest.json`
  (written to a temporary name and renamed, so a digest is whole or absent)."""
  files = {f: [os.path.getsize(os.path.join(step_dir, f)), _sha256(os.path.join(step_dir, f))]
           for f in _files(step_dir)}
  tmp = os.path.join(step_dir, f".{DIGEST_FILE}.tmp")
  with open(tmp, "w") as f:
    json.dump({"algorithm": "sha256", "files": files}, f, indent=0)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, os.path.join(step_dir, DIGEST_FILE))


def verify_digest(step_dir: str) -> str | None:
  """None if every file matches the recorded digest (or there is no digest: `has_digest`
  tells); otherwise what is wrong, naming the first bad file."""
  path = os.path.join(step_dir, DIGEST_FILE)
  if not os.path.isfile(path):
    return None
  try:
    with open(path) as f:
      recorded = json.load(f)["files"]
  except (OSError, ValueError, KeyError) as e:
    return f"its digest file is unreadable ({e})"
  present = set(_files(step_dir))
  for name, (size, digest) in sorted(recorded.items()):
    full = os.path.join(step_dir, name)
    if name not in present:
      return f"file {name} is missing"
    actual = os.path.getsize(full)
    if actual != size:
      return f"file {name} has {actual} bytes, {size} were written"
    if _sha256(full) != digest:
      return f"file {name} has changed since it was written (SHA-256 mismatch)"
  return None


def has_digest(step_dir: str) -> bool:
  return os.path.isfile(os.path.join(step_dir, DIGEST_FILE))


def warn_undigested(step_dir: str, step: int | str, digest_now: bool) -> None:
  """The warning for a checkpoint restored without a digest (see the module docstring).

  Args:
    step_dir: the step's directory.
    step: its step number (or name), for the message.
    digest_now: whether the caller digests it next (a trainer) or writes nothing (a reader).
  """
  then = ("It is digested now, as read, so it is not warned about again." if digest_now else
          "This reader writes nothing; a training run that resumes from it digests it.")
  warn(f"checkpoint step {step} ({step_dir}) has no digest ({DIGEST_FILE}), most likely because an older version of "
       "this code, which wrote digests after the commit, was killed before writing it. It was restored on orbax's "
       f"own checks only, and those read a flipped byte back silently. {then} If its values may have been damaged "
       f"on disk, move {step_dir} out of the checkpoints directory and re-run to resume from the checkpoint before "
       "it.")


class _DigestedTemporaryPath(ocp.path.atomicity.AtomicRenameTemporaryPath):
  """Orbax's atomic-rename commit, with the digest written just before the rename.

  When `finalize` runs, every item is written and finalized in the temporary directory; the
  digest covers those files, and the rename then commits data and digest together. A failed
  digest (disk full) fails the save before the rename: the step is never committed. Orbax runs
  `finalize` on the primary process only, on its background thread for an async save.
  """

  async def finalize(self):
    await asyncio.to_thread(write_digest, os.fspath(self.get()))
    await super().finalize()


_OS_ERROR_TEXT = re.compile(r"\[Errno \d+\]|OS error|No space left|Disk quota|Input/output error|Read-only file "
                            r"system|Permission denied|File too large|RESOURCE_EXHAUSTED", re.I)


def _is_write_error(error: BaseException | None) -> bool:
  """An OSError somewhere in the chain, or tensorstore's text for one (it raises ValueError)."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) or _OS_ERROR_TEXT.search(str(error)):
      return True
    error = error.__cause__ or error.__context__
  return False


def _write_error_text(error: BaseException | None) -> str:
  """'No space left on device (writing <path>)' from an OSError or tensorstore's message."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.strerror:
      return f"{error.strerror} ({error.filename})" if error.filename else error.strerror
    code = re.search(r"os_error_code='?(\d+)", str(error))
    path = re.search(r'Failed writing: "([^"]+)"', str(error)) or re.search(r'local file "([^"]+)"', str(error))
    if code:
      return os.strerror(int(code.group(1))) + (f" (writing {path.group(1)})" if path else "")
    error = error.__cause__ or error.__context__
  return ""


def _short(error: BaseException, limit: int = 300) -> str:
  text = " ".join(str(error).split())
  return f"{type(error).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"


def _paths(tree) -> dict[str, tuple]:
  """'0/layers/0/attention/query/kernel' -> shape, for a state tree or orbax's metadata tree."""
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    keys = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]
    if keys and keys[-1] == "value":
      keys = keys[:-1]
    shape = tuple(getattr(leaf, "shape", ()))
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
      shape += tuple(jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct((), dtype)).shape)  # stored as key data
    out["/".join(keys)] = shape
  return out


class Checkpointer:
  """`ocp.CheckpointManager` for {state, data}: keep-last-N, async saves, exact resume,
  digests after each commit, and restore that falls back past damaged checkpoints.

  `read_only=True` (eval, generate) never writes, moves or cleans anything: a trainer may be
  saving into the same directory.
  """

  def __init__(self, directory: str | os.PathLike, *, keep: int = 3, save_every: int = 1000,
               async_save: bool = True, read_only: bool = False):
    self.directory = os.path.abspath(os.fspath(directory))
    self.read_only = read_only
    if read_only:
      options = ocp.CheckpointManagerOptions(read_only=True)
    else:
      # Saves every `save_every` steps (and when the caller forces one: the end, a stop). Not
      # orbax's default policy, which also saves the first step a fresh manager sees: a step-1
      # checkpoint is worth nothing to resume from, and it entered the "last N" averages of
      # short runs (a run of 20 steps saving every 200 averaged steps [1, 20]).
      policy = ocp.checkpoint_managers.AnySavePolicy([
          ocp.checkpoint_managers.FixedIntervalPolicy(save_every),
          ocp.checkpoint_managers.PreemptionCheckpointingPolicy()])
      options = ocp.CheckpointManagerOptions(max_to_keep=keep, save_decision_policy=policy,
                                             enable_async_checkpointing=async_save, create=True,
                                             cleanup_tmp_directories=True,
                                             temporary_path_class=_DigestedTemporaryPath)
    self.manager = ocp.CheckpointManager(self.directory, options=options)
    self._in_flight: int | None = None  # the step an async save is writing
    self._failed = False

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def step_dir(self, step: int) -> str:
    return os.path.join(self.directory, str(step))

  def due(self, step: int) -> bool:
    """Whether `save(step)` would write a checkpoint (without force)."""
    return self.manager.should_save(step)

  # ------------------------------------------------------------------ saving
  def _write_failed(self, error: BaseException, step: int | None) -> CheckpointWriteError:
    self._failed = True
    good = [s for s in self.all_steps() if s != step]
    last = f"step {good[-1]}" if good else "none yet"
    return CheckpointWriteError(
        f"saving checkpoint step {step} to {self.step_dir(cast(int, step))} failed: "  # None: unknown step
        f"{_write_error_text(error) or _short(error)}. "
        "The newest complete "
        f"checkpoint ({last}) is intact. Free disk space or fix the directory's permissions, then re-run the "
        "same command to resume from it.")

  def _finish_pending(self) -> None:
    """Waits for the in-flight save (its digest is written in its commit)."""
    try:
      self.manager.wait_until_finished()
    except Exception as e:  # noqa: BLE001 -- classified below; a bug keeps its traceback
      if _is_write_error(e):
        raise self._write_failed(e, self._in_flight) from e
      raise
    self._in_flight = None

  def save(self, step: int, state, iterator=None, *, force: bool = False) -> bool:
    """Saves if `step` is due (or `force`); returns whether a save started."""
    if not (force or self.due(step)):
      return False
    self._finish_pending()  # orbax waits for the previous save anyway; a failure of it is reported here
    items = {"state": ocp.args.StandardSave(state)}
    if iterator is not None:
      items["data"] = grain.checkpoint.CheckpointSave(iterator)
    self._in_flight = step
    try:
      started = self.manager.save(step, args=ocp.args.Composite(**items), force=force)
    except Exception as e:  # noqa: BLE001
      if _is_write_error(e):
        raise self._write_failed(e, step) from e
      raise
    return started

  def wait(self) -> None:
    self._finish_pending()

  def close(self) -> None:
    """Finishes the last save. After a failed save it only releases orbax."""
    try:
      if not self._failed and not self.read_only:
        self._finish_pending()
    finally:
      try:
        self.manager.close()
      except Exception:  # noqa: BLE001 -- the failed save was already reported
        if not self._failed:
          raise

  # ------------------------------------------------------------------ restoring
  def restore(self, step: int, target_state, iterator=None):
    """Restores step `step` into the shardings of `target_state` (arrays or ShapeDtypeStructs),
    and the iterator in place. Returns the state. No integrity checks: `restore_newest`."""
    items = {"state": ocp.args.StandardRestore(abstract_tree(target_state))}
    if iterator is not None:
      items["data"] = grain.checkpoint.CheckpointRestore(iterator)
    restored = self.manager.restore(step, args=ocp.args.Composite(**items))
    return restored["state"]

  def problem(self, step: int, target_state=None) -> str | None:
    """Why step `step` cannot be restored (damage), or None. Raises `CheckpointMismatch` if it
    is intact but holds another model's state (then every older one does too)."""
    step_dir = self.step_dir(step)
    damage = verify_digest(step_dir)
    if damage:
      return damage
    try:
      saved = _paths(ocp.StandardCheckpointer().metadata(os.path.join(step_dir, "state")).item_metadata.tree)
    except Exception as e:  # noqa: BLE001 -- unreadable metadata is damage, whatever orbax raises
      return f"its metadata cannot be read ({_short(e, 200)})"
    if target_state is not None:
      wanted = _paths(target_state)
      if saved != wanted:
        missing = sorted(set(wanted) - set(saved))[:3]
        extra = sorted(set(saved) - set(wanted))[:3]
        shapes = [f"{k}: saved {saved[k]} vs {wanted[k]}" for k in sorted(set(saved) & set(wanted))
                  if saved[k] != wanted[k]][:3]
        raise CheckpointMismatch(
            f"the checkpoints in {self.directory} do not match this config: step {step} holds another model or "
            f"optimiser than this config builds (missing "
            f"{missing}, unexpected {extra}, shapes {shapes}). Use the config the run was trained with, "
            "including the same --config overrides, or another --workdir.")
    return None

  def quarantine(self, step: int, why: str) -> str:
    """Moves a damaged step out of orbax's directory (never deletes it); returns where."""
    root = self.directory + DAMAGED_DIR_SUFFIX
    os.makedirs(root, exist_ok=True)
    dest, n = os.path.join(root, str(step)), 1
    while os.path.exists(dest):
      n += 1
      dest = os.path.join(root, f"{step}.{n}")
    shutil.move(self.step_dir(step), dest)
    with open(os.path.join(dest, "WHY.txt"), "w") as f:
      f.write(f"checkpoint step {step} was moved here from {self.step_dir(step)} because {why}.\n")
    return dest

  def _digest_restored(self, step: int) -> None:
    """Warns about a step restored without a digest, and (a trainer, process 0) digests it as
    read back, so that later restores and `average_checkpoints` see a digested step."""
    digest_now = not self.read_only
    warn_undigested(self.step_dir(step), step, digest_now)
    if digest_now and jax.process_index() == 0:
      try:
        write_digest(self.step_dir(step))
      except OSError as e:
        raise CheckpointWriteError(f"writing the digest of restored checkpoint step {step} to "
                                   f"{self.step_dir(step)} failed: {_write_error_text(e) or _short(e)}. Free disk "
                                   "space or fix the directory's permissions, then re-run the same command.") from e

  def restore_newest(self, target_state, make_iterator=None, *, quarantine: bool = True):
    """The newest checkpoint that verifies and restores: (step, state, iterator), or
    (None, None, None) if there is none.

    Args:
      target_state: the state to restore into (its shardings are kept).
      make_iterator: optional step -> a fresh data iterator for that step (its stage); the
        chosen step's data position is restored into it.
      quarantine: move damaged checkpoints to `checkpoints.damaged/` (process 0; never with
        `read_only`). Either way each is skipped with a warning naming the step and why.

    Raises:
      NoUsableCheckpoint: there are checkpoints, and none can be read (each is listed).
      CheckpointMismatch: a checkpoint is intact but holds another model's state.
    """
    steps = self.all_steps()
    move = quarantine and not self.read_only
    problems: list[tuple[int, str]] = []
    for step in reversed(steps):
      why = self.problem(step, target_state)
      if why is None:
        iterator = make_iterator(step) if make_iterator else None
        try:
          state = self.restore(step, target_state, iterator)
          if problems and move:
            self.manager.reload()  # the quarantined steps are gone from orbax's list
        except Exception as e:  # noqa: BLE001 -- a tree that matches but does not read is damage
          why = f"orbax could not read it ({_short(e)})"
        else:
          # Outside the try: failing to write a digest is a write error, not damage to the step.
          if not has_digest(self.step_dir(step)):
            self._digest_restored(step)
          return step, state, iterator
      problems.append((step, why))
      moved = ""
      if move and jax.process_index() == 0:
        moved = f" It was moved to {self.quarantine(step, why)} (kept, not deleted)."
      older = [s for s in steps if s < step]
      warn(f"checkpoint step {step} in {self.directory} is damaged: {why}.{moved} "
           + (f"Resuming from step {older[-1]} instead, if it reads." if older else "No older checkpoint is left."))
    if move:
      self.manager.reload()
    if problems:
      listing = "; ".join(f"step {s}: {why}" for s, why in problems)
      kept = f"; the damaged ones are in {self.directory + DAMAGED_DIR_SUFFIX}" if move else ""
      raise NoUsableCheckpoint(
          f"no checkpoint in {self.directory} can be read ({listing}). Nothing was deleted{kept}. Start afresh "
          "with another --workdir, or restore the checkpoints from a backup.")
    return None, None, None


def _is_float(x) -> bool:
  return jnp.issubdtype(x.dtype, jnp.floating)


def _map_by_kind(f, tree, *rest):
  """`jax.tree.map(f(averaged, leaf, *others), tree, *rest)`, where `averaged` says whether
  `average_checkpoints` averages the leaf: a floating-point array that is (the value of) an
  `nnx.Param`, or any floating-point array of a tree without `nnx.Variable`s (a plain dict)."""
  from flax import nnx

  def per_node(node, *others):
    trained = isinstance(node, nnx.Param) if isinstance(node, nnx.Variable) else True
    return jax.tree.map(lambda x, *o: f(trained and _is_float(x), x, *o), node, *others)

  return jax.tree.map(per_node, tree, *rest, is_leaf=lambda x: isinstance(x, nnx.Variable))


def average_checkpoints(directory: str | os.PathLike, target_state, *, last: int = 5,
                        steps: list[int] | None = None, select=None):
  """The element-wise mean of the last N checkpoints' trained parameters (Sec. 4.1 averages the last 5).

  Only trained parameters are averaged: the floating-point `nnx.Param` leaves (what the
  optimiser updates). Everything else is the newest checkpoint's, bitwise: FAVOR+ feature
  projections (`attention.FeatureProjection`, redrawn during training, never trained: a mean
  of independent draws shrinks each row by about 1/sqrt(N), a model that never existed), RNG
  keys and counters, step counters and the optimiser's moments and counts. The variable types
  come from `target_state` (an `nnx.State` from `nnx.split`, as `trainer.create_state` returns);
  a tree without `nnx.Variable`s (a plain dict, `nnx.to_pure_dict`) carries no types, so all its
  floating-point leaves are averaged and its integer leaves are the newest's.

  Args:
    directory: `<workdir>/checkpoints`.
    target_state: a state pytree (arrays or ShapeDtypeStructs with shardings) to restore into.
    last: how many of the newest checkpoints to average, at least 1 (ignored if `steps` is
      given).
    steps: explicit steps to average (at least one).
    select: optional function state -> sub-tree to average (e.g. only the parameters); the
      result then has that sub-tree's structure.

  Returns:
    (averaged state, the steps used). Parameters are averaged in float32 and cast back to
    their dtype.

  Raises:
    FileNotFoundError: `directory` holds no checkpoint.
    ValueError: `last` is not a positive integer, `steps` is empty, or names a step that is
      not in `directory`.
    UserError: fewer than `last` usable checkpoints (the message names both numbers and the
      fixes), or a damaged step named in `steps`.
  """
  if steps is None and (isinstance(last, bool) or not isinstance(last, numbers.Integral) or last < 1):
    raise ValueError(f"last={last!r} is not a number of checkpoints to average: pass a positive integer "
                     "(last=1 is the newest checkpoint alone), or the steps themselves with steps=[...].")
  if steps is not None and not list(steps):
    raise ValueError(f"steps={list(steps)!r} names no checkpoint to average: pass at least one step, or "
                     "steps=None to average the last N.")
  manager = ocp.CheckpointManager(os.path.abspath(os.fspath(directory)),
                                  options=ocp.CheckpointManagerOptions(read_only=True))
  available = sorted(manager.all_steps())
  if not available:
    raise NoCheckpoint(f"no checkpoints in {directory}; train first (python train.py ...).")
  missing = sorted(set(steps or ()) - set(available))
  if missing:
    raise ValueError(f"checkpoint steps {missing} are not in {directory} (available: {available}).")
  # The same integrity check as a training restore: a damaged checkpoint named explicitly is an
  # error; among "the last N" it is skipped with a warning, and an older one takes its place.
  damaged = {}
  for step in sorted(steps) if steps is not None else reversed(available):
    why = verify_digest(os.path.join(manager.directory, str(step)))
    if why:
      damaged[step] = why
      if steps is None:
        warn(f"checkpoint step {step} in {directory} is damaged ({why}); it is left out of the average.")
  if steps is not None and damaged:
    raise UserError(f"cannot average checkpoints {sorted(steps)}: " + "; ".join(
        f"step {s} is damaged ({why})" for s, why in sorted(damaged.items())) + ". Leave them out of steps=[...].")
  use = sorted(steps) if steps is not None else [s for s in available if s not in damaged][-int(last):]
  if not use:
    raise UserError(f"every checkpoint in {directory} is damaged: " + "; ".join(
        f"step {s}: {why}" for s, why in sorted(damaged.items())) + ".")
  if steps is None and len(use) < last:
    # Averaging fewer than asked would pass for the requested average (Sec. 4.1's "last 5"):
    # refuse, and say how to get what was asked.
    left_out = f", leaving out damaged {sorted(damaged)}" if damaged else ""
    raise UserError(
        f"cannot average the last {last} checkpoints: {directory} holds only {len(use)} usable ones "
        f"(steps {use}{left_out}). Ask for at most {len(use)} (eval.py: --config.eval.average_last={len(use)}; "
        f"generate.py: --average_last={len(use)}), or keep {last} before training: the trainer keeps only the "
        f"newest config.keep_checkpoints (--config.keep_checkpoints={last}), and a run must last {last} "
        "checkpoint intervals.")
  for step in use:
    step_dir = os.path.join(manager.directory, str(step))
    if not has_digest(step_dir):
      warn_undigested(step_dir, step, digest_now=False)
  select = select or (lambda s: s)
  abstract = abstract_tree(target_state)
  mean = None
  for k, step in enumerate(use, start=1):
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
    tree = select(restored["state"])
    if mean is None:
      mean = _map_by_kind(lambda avg, x: x.astype(jnp.float32) if avg else x, tree)
    else:
      # Running mean m += (x - m) / k: exact for identical checkpoints (x - m = 0). The rest:
      # each newer checkpoint's value replaces the older one's.
      mean = _map_by_kind(lambda avg, m, x, k=k: m + (x.astype(jnp.float32) - m) / k if avg else x, mean, tree)
  manager.close()
  mean = _map_by_kind(lambda avg, m, x: m.astype(x.dtype) if avg else m, mean, tree)
  return mean, use


__all__ = ["Checkpointer", "abstract_tree", "average_checkpoints"]


# --------------------------------------------------------------------------------------
# Initialising a new run from a pre-trained encoder (GLUE fine-tuning from MLM pre-training).
# --------------------------------------------------------------------------------------

ENCODER = "roformer"  # the shared encoder's attribute in RoFormerForMaskedLM / ...ForSequenceClassification
# ModelConfig fields that may differ between pre-training and fine-tuning. The RoPE base and
# scaling change no parameter: changing them is how a model is extended to a longer context
# (PI, YaRN, NTK, ABF), so a fine-tuning run may set its own.
# The RoPE spec is compared as one object (`_rope_changes`): its `RotaryConfig.RETUNABLE`
# fields may differ, every other field must match.
_ROPE_FIELDS = tuple(config_key(f) for f in RotaryConfig.RETUNABLE)
_FREE_FIELDS = {"dropout", "attention_dropout", "dtype", "param_dtype", "max_position", "attention_implementation",
               "remat", "fused_qkv", *MODEL_CONFIG_KEYS.values(), EXTRA_KEY,
               "layer_types", "layer_settings"}  # compared layer by layer (`_layer_changes`)


def _shown(spec, field: str):
  """A RoPE spec field as a report shows it (scaling: a dict, not frozen items)."""
  return spec.scaling_dict if field == "scaling" else getattr(spec, field)


def _rope_changes(pretrained, cfg, fields) -> dict[str, tuple[Any, Any]]:
  """{config key: (pre-trained, new)} for the RoPE spec fields among `fields` that differ."""
  a, b = pretrained.rotary, cfg.rotary
  return {config_key(f): (_shown(a, f), _shown(b, f)) for f in fields if getattr(a, f) != getattr(b, f)}


def _rope_report(pretrained, cfg) -> dict[str, tuple[Any, Any]]:
  """The retuned RoPE settings (`RotaryConfig.RETUNABLE`) {what: (pre-trained, new)}: the model's
  (`rope_theta`, `rope_scaling`) and each layer type's (`layer_settings['g'].rope.theta`) whose layers
  end up with values other than the model's change gives them (a type's own theta changed, set or unset)."""
  report = _rope_changes(pretrained, cfg, RotaryConfig.RETUNABLE)
  if pretrained.num_layers != cfg.num_layers:
    return report  # refused by the architecture check
  for i in range(cfg.num_layers):
    a, b = pretrained.layer_rotary(i), cfg.layer_rotary(i)
    if a is None or b is None:
      continue  # rope or none per layer is architecture: checked, never retuned
    kind = cfg.layer_type(i) or pretrained.layer_type(i)
    for f in RotaryConfig.RETUNABLE:
      pair, model_pair = (_shown(a, f), _shown(b, f)), (_shown(pretrained.rotary, f), _shown(cfg.rotary, f))
      if pair[0] != pair[1] and pair != model_pair:
        report.setdefault(f"layer_settings[{kind!r}].rope.{f}", pair)
  return report


class InitFromError(UserError, ValueError):
  """`config.init_from` names something that cannot initialise this model."""


def _step_dir(source: str) -> str:
  """A training workdir, its checkpoints/ directory or one step directory -> that step's dir:
  the newest that passes its digest check (damaged ones are skipped with a warning); an
  explicitly named step directory that fails it is an error."""
  for candidate in (os.path.join(source, "checkpoints"), source):
    steps = [int(d) for d in os.listdir(candidate) if d.isdigit()] if os.path.isdir(candidate) else []
    problems = []
    for step in sorted(steps, reverse=True):
      why = verify_digest(os.path.join(candidate, str(step)))
      if not why:
        if not has_digest(os.path.join(candidate, str(step))):
          warn_undigested(os.path.join(candidate, str(step)), step, digest_now=False)
        return os.path.join(candidate, str(step))
      problems.append(f"step {step}: {why}")
      warn(f"init_from: checkpoint step {step} in {candidate} is damaged ({why}); trying an older one.")
    if problems:
      raise InitFromError(f"init_from={source!r}: every checkpoint is damaged ({'; '.join(problems)}).")
  if os.path.isdir(os.path.join(source, "state")):
    why = verify_digest(source)
    if why:
      raise InitFromError(f"init_from={source!r} is a damaged checkpoint: {why}. Name an older step directory, "
                          "or the workdir to take its newest good checkpoint.")
    if not has_digest(source):
      name = os.path.basename(os.path.normpath(source))
      warn_undigested(source, int(name) if name.isdigit() else name, digest_now=False)
    return source
  raise InitFromError(f"init_from={source!r} holds no checkpoint: expected a training workdir, its "
                      "checkpoints/ directory, one <step>/ directory, or a transformers RoFormer directory "
                      "(config.json + model.safetensors).")


def _flat(tree, strip_value: bool) -> dict[tuple[str, ...], Any]:
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    keys = tuple(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)
    if strip_value and keys and keys[-1] == "value":
      keys = keys[:-1]
    out[keys] = leaf
  return out


def _is_transformers_dir(source: str) -> bool:
  """A transformers checkpoint: config.json with a model_type (our workdirs' config.json has none)."""
  path = os.path.join(source, "config.json")
  if not os.path.isfile(path):
    return False
  with open(path) as f:
    return "model_type" in json.load(f)


def _saved_config(step_dir: str) -> dict[str, Any] | None:
  """The config.json a training workdir saved beside checkpoints/<step> (None if absent)."""
  path = os.path.join(os.path.dirname(os.path.dirname(step_dir)), "config.json")
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def _pretrained(source: str, cfg, prefix: tuple[str, ...], task: str | None = None, vit_config=None
                ) -> tuple[dict[tuple[str, ...], np.ndarray], str, Any]:
  """The source's parameters below `prefix` of the saved model, a description, and its ModelConfig.

  prefix ("roformer",) takes the encoder of an MLM/classification run (or of a transformers
  RoFormer directory); () takes the whole model (a causal LM or image run: `task` names the task
  it must have been trained for). `vit_config`: the new ViT's `vit.ViTConfig` (image runs).
  """
  from roformer_jax import models
  if _is_transformers_dir(source):
    if prefix != (ENCODER,):
      raise InitFromError(f"init_from={source!r} is a transformers directory; those start the encoder tasks "
                          f"(mlm, classification), not task={task!r}. Give a training workdir of a {task!r} run.")
    from roformer_jax import hf
    from flax import nnx
    model = hf.from_pretrained(source, head="encoder", param_dtype=cfg.param_dtype)
    _check_same_architecture(model.config, cfg, source)
    encoder = model if not hasattr(model, ENCODER) else getattr(model, ENCODER)
    params = _flat(nnx.to_pure_dict(nnx.state(encoder, nnx.Param)), strip_value=False)
    return {k: np.asarray(v) for k, v in params.items()}, f"transformers checkpoint {source}", model.config
  step_dir = os.path.abspath(_step_dir(source))  # <workdir>/checkpoints/<step>, however `source` is spelled
  state_dir = os.path.join(step_dir, "state")
  saved = _saved_config(step_dir)
  pretrained_cfg = None
  if saved is not None:
    if task is not None and saved.get("task", task) != task:
      raise InitFromError(f"init_from={source!r} is a task={saved.get('task')!r} run; a {task!r} run starts "
                          f"from a {task!r} run (same model family). Name a workdir trained with task={task!r}.")
    pretrained_cfg = models.ModelConfig.from_dict(saved.get("model", {}))
    if vit_config is not None:  # a ViT: its image side first, then the encoder it was built with
      pretrained_vit = _saved_vit(saved)
      _check_same_vit(pretrained_vit, vit_config, source)
      from roformer_jax import vit
      pretrained_cfg = vit.encoder_config(pretrained_cfg, pretrained_vit)
    _check_same_architecture(pretrained_cfg, cfg, source)
  metadata = ocp.StandardCheckpointer().metadata(state_dir).item_metadata.tree
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), metadata)
  with ocp.StandardCheckpointer() as ck:
    restored = ck.restore(state_dir, target)
  flat = _flat(restored, strip_value=True)
  # The state is (model, optimiser): model parameters live under "0" (an encoder under "roformer").
  # RNG streams (dropout keys and counters) are state, not parameters: never copied.
  head = ("0", *prefix)
  params = {k[len(head):]: np.asarray(v) for k, v in flat.items() if k[:len(head)] == head and "rngs" not in k}
  if not params and prefix:
    raise InitFromError(f"the checkpoint {step_dir} has no '{ENCODER}' encoder (it is not a RoFormerModel-based "
                        "MLM or classification run, e.g. a causal LM); pre-train with task='mlm'.")
  return params, f"checkpoint {step_dir}", pretrained_cfg


# A ViT's image side that its parameters depend on: the source's must be the new run's. The
# resolution (vit.image_size: a learned table is resized), the number of classes (a fresh head)
# and vit.rope_theta (RETUNABLE, as every RoPE base) may change.
_VIT_FIXED = {"patch_size": "vit.patch_size", "channels": "data.image_channels", "cls_token": "vit.cls_token",
              "position": "vit.position"}


def _saved_vit(saved: dict[str, Any]):
  """The `vit.ViTConfig` an image run's saved config.json built its model with (`tasks.vit_config`)."""
  import ml_collections
  from roformer_jax.training import tasks
  return tasks.vit_config(ml_collections.ConfigDict(saved))


def _differences(differ: dict[str, tuple[Any, Any]]) -> str:
  """{what: (pre-trained, config)} as one line for an InitFromError."""
  return ", ".join(f"{k}: pre-trained {a!r} vs config {b!r}" for k, (a, b) in sorted(differ.items()))


def _check_same_vit(pretrained, new, source: str) -> None:
  differ = {key: (getattr(pretrained, f), getattr(new, f)) for f, key in _VIT_FIXED.items()
            if getattr(pretrained, f) != getattr(new, f)}
  if differ:
    shown = _differences(differ)
    raise InitFromError(f"init_from={source!r} is a ViT with another image side: {shown}. Set them to the trained "
                        "run's values (--config.vit.position=..., ...); only the resolution (vit.image_size / "
                        "data.image_size: a learned table is resized), the number of classes (a fresh head) and "
                        "vit.rope_theta may differ.")


def _fit_vit(pretrained: dict, ours: dict, source: str) -> tuple[dict, list[str], list[tuple[str, ...]]]:
  """A trained ViT's tensors fitted to a new one: (tensors, resized, fresh keys).

  The learned position table of another grid is resized to the new one as DeiT fine-tunes at a
  higher resolution (`vit.resize_position_table`); a head for another number of classes is left
  out (the new run's stays fresh, as DeiT drops it). RoPE-Mixed's learned frequencies do not
  depend on the grid and load unchanged.
  """
  from roformer_jax import vit
  out, resized, fresh = dict(pretrained), [], []
  key = ("position_table",)
  if key in out and key in ours and out[key].shape != ours[key].shape:
    (h, w, d), (gh, gw, d_new) = out[key].shape, ours[key].shape
    if d != d_new:
      raise InitFromError(f"init_from={source!r}: its position table is [{h}, {w}, {d}], this model's "
                          f"[{gh}, {gw}, {d_new}]; set config.model.d_model={d} (only the grid may differ).")
    out[key] = np.asarray(vit.resize_position_table(out[key], (gh, gw)))
    resized.append(f"position_table {h}x{w} -> {gh}x{gw}")
  head = [k for k in ours if k[0] == "head"]
  if any(k in out and out[k].shape != ours[k].shape for k in head):  # kernel [D, classes], bias [classes]
    for k in head:
      out.pop(k, None)
    fresh = head
  return out, resized, fresh


def _layer_changes(pretrained, cfg, fixed) -> dict[str, tuple[Any, Any]]:
  """{"layer i <what>": (pre-trained, new)} for what a layer computes differently: its window,
  its q temperature, RoPE or none, and its RoPE spec's `fixed` fields (per-layer theta and
  scaling are RETUNABLE like the model's)."""
  differ: dict[str, tuple[Any, Any]] = {}
  if pretrained.num_layers != cfg.num_layers:
    return differ  # reported as num_layers
  for i in range(cfg.num_layers):
    for what, get in (("window", "layer_window"), ("attn_temperature", "layer_temperature")):
      a, b = getattr(pretrained, get)(i), getattr(cfg, get)(i)
      if a != b:
        differ[f"layer {i} {what}"] = (a, b)
    a, b = pretrained.layer_rotary(i), cfg.layer_rotary(i)
    if (a is None) != (b is None):
      differ[f"layer {i} rope"] = ("none" if a is None else "rope", "none" if b is None else "rope")
    elif a is not None:
      differ.update({f"layer {i} rope.{f}": (getattr(a, f), getattr(b, f)) for f in fixed
                     if getattr(a, f) != getattr(b, f)})
  return differ


def _check_same_architecture(pretrained, cfg, source: str) -> None:
  differ = {f: (getattr(pretrained, f), getattr(cfg, f)) for f in pretrained.__dataclass_fields__
            if f not in _FREE_FIELDS and getattr(pretrained, f) != getattr(cfg, f)}
  fixed = [f.name for f in dataclasses.fields(cfg.rotary) if f.name not in RotaryConfig.RETUNABLE]
  differ.update(_rope_changes(pretrained, cfg, fixed))
  differ.update(_layer_changes(pretrained, cfg, fixed))
  if differ:
    shown = _differences(differ)
    raise InitFromError(f"init_from={source!r} was trained with a different model: {shown}. Set config.model "
                        "to the pre-training model's values (only dropout, dtypes, max_position, the attention "
                        "implementation, remat, fused_qkv, and rope_theta / rope_scaling, the model's or a layer type's, may "
                        "differ).")


def init_from(model, source: str | os.PathLike) -> dict[str, Any]:
  """Overwrites a new model's parameters with a trained run's, in place.

  Two uses:
  - Encoder tasks (a model with a `roformer` encoder: RoFormerForSequenceClassification or
    RoFormerForMaskedLM). Only the encoder is copied; the task head (classifier, MLM head)
    keeps its fresh initialisation: BERT-style fine-tuning (Sec. 4.3 fine-tunes the
    pre-trained RoFormer on GLUE). The source may also be a transformers RoFormer directory.
  - The causal LM (`CausalLM`): the whole model is copied from an LM run. This is how a model
    is extended to a longer context: the new run sets its own data.max_length and RoPE
    (rope_theta, rope_scaling) and fine-tunes from the trained weights.
  - The ViT (`vit.VisionTransformer`): the whole model is copied from an image run, to
    fine-tune at another resolution (RoPE-ViT and DeiT train low and fine-tune high) or for
    another number of classes. A learned position table is resized to the new grid
    (`vit.resize_position_table`, DeiT's bicubic); RoPE-Mixed's frequencies load unchanged; a
    head of another number of classes stays fresh. The patch size, channels, CLS token and
    position encoding must be the source's.

  Every parameter must be present in the source with the same shape, and the architectures
  must agree in everything but dropout, dtypes, max_position, the attention implementation,
  remat, fused_qkv, rope_theta and rope_scaling (a saved config.json in the source workdir, or the
  transformers config, is compared field by field); anything else raises `InitFromError`
  naming the difference. The new values keep each parameter's sharding. The optimiser state,
  step and data position are the new run's own (a fresh start).

  Args:
    model: the freshly built model of the new run.
    source: a training workdir (newest checkpoint), its checkpoints/ directory, one step
      directory, or (encoder tasks) a transformers RoFormer directory (config.json + safetensors).

  Returns:
    {"source": description, "loaded": number of tensors copied (resized ones included),
     "resized": what was resized ("position_table 8x8 -> 12x12"), "fresh": paths left as initialised,
     "rope": {what: (source's, new)} for the RoPE settings that changed: the model's rope_theta /
     rope_scaling and a layer type's (`layer_settings['g'].rope.theta`)}.
  """
  from flax import nnx
  from roformer_jax import models, vit
  # Normalised (absolute, no trailing slash or `.`): the workdir's config.json is looked up two
  # directories above the step directory, which `W/checkpoints/1/` would miss, skipping the
  # architecture check.
  source = os.path.abspath(os.fspath(source))
  prefix: tuple[str, ...]
  state_filter: Any  # an nnx filter
  if hasattr(model, ENCODER):
    prefix, task, target = (ENCODER,), None, getattr(model, ENCODER)
    # Parameters only: a FAVOR+ projection of the encoder is redrawn, as the heads are.
    state_filter = nnx.Param
  elif isinstance(model, models.CausalLM):
    # The whole model, FAVOR+ projections (state, not parameters) included: the fine-tune
    # continues the same function. RNG streams are never copied.
    prefix, task, target = (), "lm", model
    state_filter = nnx.Not(nnx.RngState)
  elif isinstance(model, vit.VisionTransformer):
    # The whole ViT (patch embedding, CLS, table, blocks, RoPE-Mixed frequencies, head), fitted
    # to a new resolution and number of classes (`_fit_vit`).
    prefix, task, target = (), "image", model
    state_filter = nnx.Param
  else:
    raise InitFromError(f"{type(model).__name__} cannot be initialised from another run; init_from serves the "
                        "RoFormerModel-based tasks (mlm, classification), the causal LM (lm) and the ViT (image).")
  is_vit = task == "image"
  pretrained, description, pretrained_cfg = _pretrained(source, model.config, prefix, task,
                                                        vit_config=model.vit if is_vit else None)
  params = nnx.state(target, state_filter)
  ours = _flat(nnx.to_pure_dict(params), strip_value=False)
  resized: list[str] = []
  fresh_keys: list[Any] = []
  if is_vit:
    pretrained, resized, fresh_keys = _fit_vit(pretrained, ours, source)
    ours_to_load = {k: v for k, v in ours.items() if k not in fresh_keys}
  else:
    ours_to_load = ours
  missing = sorted("/".join(k) for k in ours_to_load if k not in pretrained)
  unused = sorted("/".join(k) for k in pretrained if k not in ours)
  shapes = sorted(f"{'/'.join(k)}: {pretrained[k].shape} vs {ours[k].shape}" for k in ours_to_load
                  if k in pretrained and pretrained[k].shape != ours[k].shape)
  if missing or unused or shapes:
    what = "encoder" if prefix else "model"
    raise InitFromError(f"the {what} in {description} does not fit this model: missing {missing[:5]}, "
                        f"unexpected {unused[:5]}, shape mismatches {shapes[:5]}.")
  values = {k: jax.device_put(pretrained[k].astype(ours[k].dtype), ours[k].sharding) for k in ours_to_load}
  nested: dict = {}
  for k, v in {**values, **{k: ours[k] for k in fresh_keys}}.items():
    d = nested
    for part in k[:-1]:
      d = d.setdefault(part, {})
    d[k[-1]] = v
  nnx.replace_by_pure_dict(params, _rekey(nnx.to_pure_dict(params), nested))
  nnx.update(target, params)
  everything = _flat(nnx.to_pure_dict(nnx.state(model, nnx.Param)), strip_value=False)
  fresh = sorted("/".join(k) for k in everything if (prefix and k[0] != ENCODER) or k in fresh_keys)
  rope = {} if pretrained_cfg is None else _rope_report(pretrained_cfg, model.config)
  return {"source": description, "loaded": len(values), "resized": resized, "fresh": fresh, "rope": rope}


def _rekey(like, nested):
  """`nested` (string keys) with the key types of `like` (nnx uses ints for list indices)."""
  if not isinstance(like, dict):
    return nested
  return {k: _rekey(v, nested[str(k)]) for k, v in like.items()}
