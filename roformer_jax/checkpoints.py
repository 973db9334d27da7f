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

import json
import numbers
import os
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
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

  def due(self, step: int) -> bool:
    """Whether `save(step)` would write a checkpoint (without force)."""
    return self.manager.should_save(step)

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
    raise FileNotFoundError(f"no checkpoints in {directory}; train first (python train.py ...).")
  use = sorted(steps) if steps is not None else available[-int(last):]
  missing = sorted(set(use) - set(available))
  if missing:
    raise ValueError(f"checkpoint steps {missing} are not in {directory} (available: {available}).")
  select = select or (lambda s: s)
  abstract = _abstract(target_state)
  mean = None
  for k, step in enumerate(use, start=1):
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
    tree = select(restored["state"])
    if mean is None:
      mean = _map_by_kind(lambda avg, x: x.astype(jnp.float32) if avg else x, tree)
    else:
      # Running mean m += (x - m) / k: exact for identical checkpoints (x - m = 0). The rest:
      # each newer checkpoint's value replaces the older one's.
      mean = _map_by_kind(lambda avg, m, x: m + (x.astype(jnp.float32) - m) / k if avg else x, mean, tree)
  manager.close()
  mean = _map_by_kind(lambda avg, m, x: m.astype(x.dtype) if avg else m, mean, tree)
  return mean, use


__all__ = ["Checkpointer", "average_checkpoints"]


# --------------------------------------------------------------------------------------
# Initialising a new run from a pre-trained encoder (GLUE fine-tuning from MLM pre-training).
# --------------------------------------------------------------------------------------

ENCODER = "roformer"  # the shared encoder's attribute in RoFormerForMaskedLM / ...ForSequenceClassification
# ModelConfig fields that may differ between pre-training and fine-tuning.
_FREE_FIELDS = {"dropout", "attention_dropout", "dtype", "param_dtype", "max_position", "attention_implementation",
               "remat"}


class InitFromError(ValueError):
  """`config.init_from` names something that cannot initialise this model."""


def _step_dir(source: str) -> str:
  """A training workdir, its checkpoints/ directory or one step directory -> that step's dir."""
  for candidate in (os.path.join(source, "checkpoints"), source):
    steps = [int(d) for d in os.listdir(candidate) if d.isdigit()] if os.path.isdir(candidate) else []
    if steps:
      return os.path.join(candidate, str(max(steps)))
  if os.path.isdir(os.path.join(source, "state")):
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


def _pretrained_encoder(source: str, cfg) -> tuple[dict[tuple[str, ...], np.ndarray], str]:
  """The pre-trained encoder's parameters by path below `roformer`, and a description."""
  if _is_transformers_dir(source):
    from roformer_jax import hf
    from flax import nnx
    model = hf.from_pretrained(source, head="encoder", param_dtype=cfg.param_dtype)
    _check_same_architecture(model.config, cfg, source)
    encoder = model if not hasattr(model, ENCODER) else getattr(model, ENCODER)
    params = _flat(nnx.to_pure_dict(nnx.state(encoder, nnx.Param)), strip_value=False)
    return {k: np.asarray(v) for k, v in params.items()}, f"transformers checkpoint {source}"
  step_dir = os.path.abspath(_step_dir(source))  # <workdir>/checkpoints/<step>, however `source` is spelled
  state_dir = os.path.join(step_dir, "state")
  saved_config = os.path.join(os.path.dirname(os.path.dirname(step_dir)), "config.json")
  if os.path.isfile(saved_config):
    from roformer_jax import models
    with open(saved_config) as f:
      model_fields = json.load(f).get("model", {})
    _check_same_architecture(models.ModelConfig.from_dict(model_fields), cfg, source)
  metadata = ocp.StandardCheckpointer().metadata(state_dir).item_metadata.tree
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), metadata)
  with ocp.StandardCheckpointer() as ck:
    restored = ck.restore(state_dir, target)
  flat = _flat(restored, strip_value=True)
  # The state is (model, optimiser): model parameters live under "0"; the encoder under "roformer".
  # RNG streams (dropout keys and counters) are state, not parameters: never copied.
  encoder = {k[2:]: np.asarray(v) for k, v in flat.items() if k[:2] == ("0", ENCODER) and "rngs" not in k}
  if not encoder:
    raise InitFromError(f"the checkpoint {step_dir} has no '{ENCODER}' encoder (it is not a RoFormerModel-based "
                        "MLM or classification run, e.g. a causal LM); pre-train with task='mlm'.")
  return encoder, f"checkpoint {step_dir}"


def _check_same_architecture(pretrained, cfg, source: str) -> None:
  differ = {f: (getattr(pretrained, f), getattr(cfg, f)) for f in pretrained.__dataclass_fields__
            if f not in _FREE_FIELDS and getattr(pretrained, f) != getattr(cfg, f)}
  if differ:
    shown = ", ".join(f"{k}: pre-trained {a!r} vs config {b!r}" for k, (a, b) in sorted(differ.items()))
    raise InitFromError(f"init_from={source!r} was trained with a different model: {shown}. Set config.model "
                        "to the pre-training model's values (dropout may differ).")


def init_from(model, source: str | os.PathLike) -> dict[str, Any]:
  """Overwrites `model.roformer`'s parameters with a pre-trained encoder's, in place.

  The task head (classifier, MLM head) keeps its fresh initialisation: BERT-style fine-tuning
  (Sec. 4.3 fine-tunes the pre-trained RoFormer on GLUE). Every encoder parameter must be
  present in the source with the same shape, and the architectures must agree (a saved
  config.json in the source workdir, or the transformers config, is compared field by field);
  anything else raises `InitFromError` naming the difference. The new values keep each
  parameter's sharding.

  Args:
    model: a model with a `roformer` encoder (RoFormerForSequenceClassification or
      RoFormerForMaskedLM).
    source: a training workdir (newest checkpoint), its checkpoints/ directory, one step
      directory, or a transformers RoFormer directory (config.json + safetensors).

  Returns:
    {"source": description, "loaded": number of tensors, "fresh": paths left as initialised}.
  """
  from flax import nnx
  # Normalised (absolute, no trailing slash or `.`): the workdir's config.json is looked up two
  # directories above the step directory, which `W/checkpoints/1/` would miss, skipping the
  # architecture check.
  source = os.path.abspath(os.fspath(source))
  if not hasattr(model, ENCODER):
    raise InitFromError(f"{type(model).__name__} has no '{ENCODER}' encoder to initialise; init_from serves "
                        "the RoFormerModel-based tasks (mlm, classification).")
  pretrained, description = _pretrained_encoder(source, model.config)
  encoder = getattr(model, ENCODER)
  params = nnx.state(encoder, nnx.Param)
  ours = _flat(nnx.to_pure_dict(params), strip_value=False)
  missing = sorted("/".join(k) for k in ours if k not in pretrained)
  unused = sorted("/".join(k) for k in pretrained if k not in ours)
  shapes = sorted(f"{'/'.join(k)}: {pretrained[k].shape} vs {ours[k].shape}" for k in ours
                  if k in pretrained and pretrained[k].shape != ours[k].shape)
  if missing or unused or shapes:
    raise InitFromError(f"the encoder in {description} does not fit this model: missing {missing[:5]}, "
                        f"unexpected {unused[:5]}, shape mismatches {shapes[:5]}.")
  values = {k: jax.device_put(pretrained[k].astype(ours[k].dtype), ours[k].sharding) for k in ours}
  nested: dict = {}
  for k, v in values.items():
    d = nested
    for part in k[:-1]:
      d = d.setdefault(part, {})
    d[k[-1]] = v
  nnx.replace_by_pure_dict(params, _rekey(nnx.to_pure_dict(params), nested))
  nnx.update(encoder, params)
  everything = _flat(nnx.to_pure_dict(nnx.state(model, nnx.Param)), strip_value=False)
  fresh = sorted("/".join(k) for k in everything if k[0] != ENCODER)
  return {"source": description, "loaded": len(values), "fresh": fresh}


def _rekey(like, nested):
  """`nested` (string keys) with the key types of `like` (nnx uses ints for list indices)."""
  if not isinstance(like, dict):
    return nested
  return {k: _rekey(v, nested[str(k)]) for k, v in like.items()}
