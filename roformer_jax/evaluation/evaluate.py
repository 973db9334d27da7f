"""`evaluate(config, workdir)`: task metrics of a trained workdir, written to eval_results[.<settings>].json.

- Restores the newest checkpoint, or the element-wise mean of the last N
  (`config.eval.average_last`, Sec. 4.1 averages the last 5).
- Makes one full pass over the evaluation split (the last batch's padding rows carry weight
  0, so every example counts once) and reports the task's metrics:
  - lm: loss (nats/token), perplexity, bits per token (= bits per byte for the byte tokenizer);
  - mlm: loss and accuracy at the masked positions;
  - classification: the GLUE metrics of the task (F1/accuracy, Pearson/Spearman, accuracy);
  - image: loss (nats per image), accuracy and the number of images;
  - seq2seq: loss, and sacreBLEU of beam-search translations (beam 4, length penalty 0.6;
    beam_size=1 is greedy) against the raw reference text; the translations go to
    `<workdir>/translations.tsv`.
- Length curve (lm, mlm): the loss at lengths L, 2L, 4L, 8L for a model trained at L,
  optionally with a RoPE scaling dict applied at evaluation time only
  (`config.eval.rope_scaling`), so extrapolation methods compare without retraining.
- Pass-key retrieval (lm, `config.eval.passkey_lengths` non-empty): greedy exact-match
  accuracy of a 5-digit key hidden at several depths of prompts of the given lengths, and the
  answer's negative log-likelihood in nats per digit (`roformer_jax.evaluation.passkey`), on the
  RoPE-scaled model when `eval.rope_scaling` is set; `results["passkey"]` and
  `<workdir>/passkey.png`.

Each setting keeps its own result: with the run's own config (run_config.py) the file is
`eval_results.json`; settings beyond it (`--config.eval.rope_scaling=...`, another resolution)
name it, `eval_results.<settings>.json` (`run_config.slug`), with `results["evaluated"]` the
keys and values, and the PNGs alike (`length_curve[.<settings>].png`, `passkey[...].png`).
Rows also go to `<workdir>/metrics.jsonl` with the checkpoint's step, each tagged
`"evaluated"`: "as trained" or the settings. `summary` is what eval.py prints.

Several processes (eval.py's --coordinator_address/--num_processes/--process_id) each read a
disjoint shard; they stay in step even when their shards differ in length, and the
translations of all shards are gathered before BLEU is computed.
"""

from __future__ import annotations

import functools
import json
import math
import os
from typing import Any, cast

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from roformer_jax import context_parallel, decoding, errors, mesh as mesh_lib
from roformer_jax.errors import UserError
from roformer_jax.evaluation import eval_metrics, passkey
from roformer_jax.training import data, metrics as metrics_lib, run_config, tasks, trainer
from roformer_jax.training.checkpoints import Checkpointer, CheckpointMismatch, NoCheckpoint, average_checkpoints
from roformer_jax.training.data import passkey as passkey_rows


def default_eval_config() -> ml_collections.ConfigDict:
  """The `config.eval` section, every key at its default: the one list of eval.py's settings.

  configs/common.base_config() puts it in every config; the command line overrides it, e.g.
  --config.eval.average_last=3.
  """
  c = ml_collections.ConfigDict()
  c.average_last = 0  # average the last N checkpoints (Sec. 4.1: 5; <= keep_checkpoints); 0/1 = newest only
  c.split = "validation"  # the split eval.py makes a full pass over
  c.max_batches = 0  # 0 = a full pass over the split
  c.length_factors = (1, 2, 4, 8)  # length curve: loss at L, 2L, 4L, 8L (lm, mlm)
  c.length_batches = 4  # batches per length-curve point
  c.rope_scaling = ml_collections.config_dict.placeholder(object)  # HF rope_parameters at eval only
  c.passkey_lengths = ()  # pass-key prompt lengths in tokens (lm); () = off, e.g. (128, 256, 512, 1024, 2048)
  c.passkey_depths = (0.0, 0.25, 0.5, 0.75, 1.0)  # key depth: fraction of the filler before the key
  c.passkey_trials = 10  # prompts (keys) per length and depth
  c.passkey_digits = 5  # digits of the key
  c.beam_size = 4  # seq2seq BLEU (Sec. 4.1)
  c.length_penalty = 0.6  # GNMT alpha (Sec. 4.1)
  c.max_decode_length = 0  # 0 = data.max_target_length or data.max_length
  return c


def eval_settings(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """`config.eval` as a dict, checked against `default_eval_config`'s keys.

  Raises:
    ValueError: an unknown or a missing key (configs start from configs/common.base_config(),
      which holds them all), or a bad pass-key setting (lengths that are not positive
      integers, depths outside [0, 1], pass-key lengths for a task other than lm).
  """
  known = set(default_eval_config())
  settings = config.eval.to_dict()
  unknown, missing = sorted(set(settings) - known), sorted(known - set(settings))
  if unknown:
    raise ValueError(f"config.eval has unknown keys {unknown}; known: {sorted(known)}.")
  if missing:
    raise ValueError(f"config.eval lacks keys {missing}; build the config on configs/common.base_config() "
                     "(or set config.eval = evaluate.default_eval_config() and override what differs).")
  _check_passkey_settings(settings, tasks.get(config.task))
  return settings


def _check_passkey_settings(settings: dict[str, Any], task: tasks.Task) -> None:
  """Pass-key retrieval (`eval.passkey_*`): lm only; lengths in tokens, depths in [0, 1]."""
  lengths = settings["passkey_lengths"] or ()
  lengths = (lengths,) if isinstance(lengths, int) else tuple(lengths)
  if not lengths:
    return
  if tasks.PASSKEY not in task.eval_metrics:
    raise ValueError(f"config.eval.passkey_lengths={list(lengths)} asks for pass-key retrieval, a causal-LM test; "
                     f"task {task.name!r} has no continuation to score. Set --config.eval.passkey_lengths='()'.")
  if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in lengths):
    raise ValueError(f"config.eval.passkey_lengths={list(lengths)} must be prompt lengths in tokens (positive "
                     "integers), e.g. 128,256,512.")
  depths = settings["passkey_depths"]
  depths = (depths,) if isinstance(depths, (int, float)) else tuple(depths)
  if not depths or any(isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= 1 for d in depths):
    raise ValueError(f"config.eval.passkey_depths={list(depths)} must be key depths in [0, 1] (0 = the key first, "
                     "1 = just before the question), e.g. 0,0.25,0.5,0.75,1.")
  for key in ("passkey_trials", "passkey_digits"):
    value = settings[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"config.eval.{key}={value!r} must be an integer >= 1.")
  settings["passkey_lengths"], settings["passkey_depths"] = lengths, depths


def restore(config, workdir: str, mesh, rules, *, average_last: int = 0,
            step: int | None = None) -> tuple[Any, Any, int, list[int]]:
  """(graphdef, state, step, steps used) of a workdir's (model, optimiser), read-only.

  By default the newest checkpoint that verifies (damaged ones are skipped with a warning,
  never moved: a trainer may be running); `average_last` > 1 averages the last N; `step`
  restores that checkpoint alone (it must exist and verify). Takes no lock: eval.py and
  generate.py run beside training.

  Raises:
    UserError: no checkpoint, a missing or damaged `step`, or checkpoints of another config.
  """
  tx, _, _ = trainer.make_optimizer(config)
  graphdef, state = trainer.create_state(config, mesh, rules, tx)
  directory = os.path.join(workdir, "checkpoints")
  ckpt = Checkpointer(directory, read_only=True) if os.path.isdir(directory) else None
  if not (ckpt and ckpt.all_steps()):
    raise NoCheckpoint(f"no checkpoint in {directory}; train first: python train.py --config <the config> "
                    f"--workdir {workdir}")
  try:
    if step is not None:
      if step not in ckpt.all_steps():
        raise UserError(f"there is no checkpoint step {step} in {directory}; it has steps {ckpt.all_steps()}.")
      why = ckpt.problem(step, state)
      if why:
        raise UserError(f"checkpoint step {step} in {directory} is damaged: {why}. Choose another step "
                        f"(available: {ckpt.all_steps()}).")
      state, used = ckpt.restore(step, state), [step]
    elif average_last and average_last > 1:
      state, used = average_checkpoints(directory, state, last=average_last)
    else:
      newest, state, _ = ckpt.restore_newest(state, quarantine=False)
      used = [newest]
  except (ValueError, KeyError, TypeError) as e:
    differ = run_config.differences(config, workdir)  # the settings that differ say more than parameter paths
    if differ:
      more = f" (and {len(differ) - 8} more)" if len(differ) > 8 else ""
      raise CheckpointMismatch(
          f"the checkpoints in {directory} do not match this config: the run and this request differ in "
          f"{'; '.join(differ[:8])}{more}. Leave out --config to use the run's own config (its config.json), or "
          f"give the run's overrides. (The restore said: {errors.message_of(e)[:300]})") from e
    if isinstance(e, UserError):
      raise
    raise CheckpointMismatch(f"the checkpoints in {directory} do not match this config (model sizes, task or "
                             f"optimiser differ): {str(e)[:500]}. Use the config the run was trained "
                             "with, including the same --config overrides.") from e
  finally:
    ckpt.close()
  return graphdef, state, used[-1], used


def restore_model(config, workdir: str, *, step: int | None = None, average_last: int = 0,
                  tool: str) -> tuple[Any, int, list[int]]:
  """(model, step, steps used) of a workdir, restored read-only onto one device: what generate.py
  and export.py use (`restore`'s choice of checkpoint). `tool` names the program in its errors.

  Raises:
    UserError: `step` and `average_last` both given, a bad `average_last`, several processes,
      an invalid config, and what `restore` raises.
  """
  if step is not None and average_last and average_last > 1:
    raise UserError(f"step={step} and average_last={average_last} both choose the checkpoint; give one of them.")
  if isinstance(average_last, bool) or not isinstance(average_last, int) or average_last < 0:
    raise UserError(f"average_last={average_last!r} must be a number of checkpoints >= 0 (0 or 1 = one checkpoint).")
  if jax.process_count() > 1:
    raise UserError(f"{tool} runs in one process, not {jax.process_count()}; drop --coordinator_address, "
                    "--num_processes and --distributed.")
  # One device holds the model, and a mesh of ones fits whatever mesh the run trained on: the
  # restore target carries the new shardings.
  mesh = mesh_lib.make_mesh({"data": 1, "fsdp": 1, "tensor": 1}, jax.devices()[:1])
  with errors.user_errors("invalid config"):
    rules = mesh_lib.rules_from_config(config.logical_axis_rules)
  graphdef, state, newest, used = restore(config, os.path.abspath(workdir), mesh, rules, average_last=average_last,
                                          step=step)
  model, _ = nnx.merge(graphdef, state)
  return model, newest, used


def checkpoints_used(steps: list[int]) -> str:
  """"step N", or "the average of steps [...]": which checkpoint(s) a result comes from."""
  return f"the average of steps {steps}" if len(steps) > 1 else f"step {steps[-1]}"


def _with_rope_scaling(config, graphdef, state, scaling):
  """The same parameters in a model whose RoPE uses `scaling` (nothing else changes)."""
  cfg = config.copy_and_resolve_references()
  cfg.model.rope_scaling = scaling
  new_graphdef, _ = nnx.split(nnx.eval_shape(lambda: tasks.build_model(cfg, nnx.Rngs(0))))
  return new_graphdef, state  # RoPE settings are static: the state is unchanged


def _model_only(graphdef, state):
  model, _ = nnx.merge(graphdef, state)
  return nnx.split(model)


def _batches(config, split: str, max_length: int, batch_size: int, max_batches: int):
  data_cfg = config.data.copy_and_resolve_references()
  data_cfg.max_length = max_length
  it = data.make_iterator(data_cfg, task=tasks.get(config.task).batches, split=split, batch_size=batch_size,
                          seed=config.seed,
                          process_index=jax.process_index(), process_count=jax.process_count(),
                          repeat=False, shuffle=False)
  local = (batch for i, batch in enumerate(it) if not max_batches or i < max_batches)
  yield from _in_step(local) if jax.process_count() > 1 else local


def _in_step(local):
  """Keeps the processes of a multi-process pass in step.

  Every jitted call on a global batch is a collective, so all processes must make the same
  number of calls; their shards can differ by a batch (a split of N records over P processes
  gives some processes one record more). Before each batch the processes share whether they
  still have one; one that has run out feeds a zero-weight copy of its first batch (which
  counts for nothing: losses, accuracy and translations skip weight-0 rows) until all are done.
  """
  from jax.experimental import multihost_utils

  template = None
  while True:
    batch = next(local, None)
    if batch is not None and template is None:
      template = {k: np.zeros_like(v) for k, v in batch.items()}
    more = multihost_utils.process_allgather(np.array([batch is not None], np.int32))
    if not np.any(more):
      return
    if batch is None:
      if template is None:
        raise RuntimeError(f"process {jax.process_index()} has no evaluation batch at all; the split is "
                           "too small for this many processes.")
      batch = template
    yield batch


def _fetch(x: jax.Array) -> np.ndarray:
  """The whole value of a global array on every process (np.asarray needs it all addressable)."""
  if x.is_fully_addressable:
    return np.asarray(x)
  from jax.experimental import multihost_utils
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def _allgather_strings(strings: list[str]) -> list[str]:
  """Every process's list, concatenated in process order (the identity with one process)."""
  if jax.process_count() == 1:
    return list(strings)
  from jax.experimental import multihost_utils
  payload = np.frombuffer(json.dumps(strings).encode("utf-8"), np.uint8)
  sizes = np.asarray(multihost_utils.process_allgather(np.array([payload.size], np.int64))).reshape(-1)
  padded = np.zeros(int(sizes.max()), np.uint8)
  padded[:payload.size] = payload
  gathered = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(sizes), -1)
  out = []
  for row, size in zip(gathered, sizes, strict=True):
    out.extend(json.loads(row[:size].tobytes().decode("utf-8")))
  return out


def _loss_pass(config, graphdef, state, mesh, batches, progress_desc: str, max_length: int) -> dict[str, float]:
  """Summed loss/weight/correct over `batches` of `max_length` rows (token-level tasks and
  classification loss)."""

  rules = mesh_lib.rules_from_config(config.logical_axis_rules)
  context = mesh.shape.get("context", 1)
  # Split over the context axis like training when every sequence of the batch splits (the
  # config check guarantees it at data.max_length; the length curve's other lengths may not
  # split, and run unsplit on the same mesh).
  split = context > 1 and all(length % context_parallel.required_multiple(context, causal=causal) == 0
                              for _, length, causal, _ in trainer.sequence_lengths(config, max_length))

  step = jax.jit(functools.partial(trainer.eval_step, graphdef, task=tasks.get(config.task),
                                   mesh=mesh if split else None, rules=rules))
  from tqdm import tqdm
  batches = tqdm(batches, desc=progress_desc, unit="batch", disable=jax.process_index() != 0, leave=False)
  return trainer.eval_sums(step, state, batches, mesh)


def _mean_metrics(sums: dict[str, float]) -> dict[str, float]:
  """Loss and accuracy per weighted example (token or image) of a pass's sums."""
  w = max(sums["weight"], 1.0)
  return {"loss": sums["loss"] / w, "accuracy": sums["correct"] / w}


def _token_metrics(sums: dict[str, float]) -> dict[str, float]:
  m = _mean_metrics(sums)
  return {**m, "perplexity": math.exp(min(m["loss"], 80.0)), "bits_per_token": m["loss"] / math.log(2.0),
          "tokens": sums["weight"]}


def summary(results: dict[str, Any], workdir: str, config: ml_collections.ConfigDict) -> str:
  """What eval.py prints: what was evaluated, every metric computed (with the loss set beside the eval loss the run
  logged at that step, and why they differ), the length curves side by side, pass-key retrieval, and the files."""
  settings = config.eval
  asked = results.get("evaluated") or {}
  used = results["checkpoints"]
  ckpt = checkpoints_used(used)
  lines = [f"eval.py: {results['task']} model of {workdir}, {ckpt}, split {results['split']!r}",
           "evaluated: " + (", ".join(f"{k}={v!r}" for k, v in asked.items()) if asked else
                            "as trained (the run's own config)")]
  m = results["metrics"]
  lines.append("  " + "  ".join(f"{k} {v:.4f}" if isinstance(v, float) and not float(v).is_integer() else f"{k} {v:g}"
                                for k, v in m.items() if isinstance(v, (int, float))))
  what = (f"the split's first {settings.max_batches} batches of {config.batch_size}" if settings.max_batches else
          "the whole split")
  logged = _logged_eval_loss(workdir, results["step"])
  if "loss" in m and logged is not None:
    same = settings.max_batches == config.eval_batches and len(used) == 1
    lines.append(f"  (over {what}; the run's own eval logged loss {logged:.4f} at step {results['step']} over its "
                 f"first eval_batches={config.eval_batches}" + (": the same batches and model)" if same else
                 ", a different sample" + ("" if len(used) == 1 else " of another model (one checkpoint)") + ")"))
  elif "loss" in m:
    lines.append(f"  (over {what})")
  curve, scaled = results.get("length_curve") or [], results.get("length_curve_scaled") or []
  if curve:
    scaling = results.get("rope_scaling") or {}
    head = f"{scaling.get('rope_type', 'scaled')} x{scaling.get('factor', '?')}" if scaled else ""
    lines.append(f"length curve (loss, nats/token; {settings.length_batches} batches a point; trained at "
                 f"{config.data.max_length}):")
    lines.append(f"  {'length':>8}  {'as trained':>10}" + (f"  {head:>12}" if scaled else ""))
    for i, row in enumerate(curve):
      text = f"  {row['length']:>8}  {row.get('loss', float('nan')):>10.4f}"
      if scaled:
        text += f"  {scaled[i].get('loss', float('nan')):>12.4f}"
      lines.append(text + (f"  ({row['note']})" if row.get("note") else ""))
  pk = results.get("passkey")
  if pk and pk.get("lengths"):
    from roformer_jax.evaluation import passkey as passkey_lib
    lines.append(passkey_lib.format_table(pk))
  files = [results["results_file"]] + [os.path.basename(p) for p in (results.get("length_curve_png"),
                                                                      (pk or {}).get("png")) if p]
  lines.append(f"wrote {', '.join(files)} in {workdir}, and eval rows in metrics.jsonl")
  return "\n".join(lines)


def _logged_eval_loss(workdir: str, step: int) -> float | None:
  """The eval loss the training run itself logged at `step` (not eval.py's rows), if any."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.isfile(path):
    return None
  rows = [r for r in metrics_lib.read_rows(path)
          if r["step"] == step and "eval_loss" in r and "evaluated" not in r and "eval_bits_per_token" not in r]
  return float(rows[-1]["eval_loss"]) if rows else None


def _plot_length_curve(results: dict[str, Any], out: str, title: str) -> str:
  """The loss at each evaluated length (and with eval.rope_scaling, the scaled model's beside it) as a PNG."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 4))
  curves = [("as trained", results["length_curve"])]
  if results.get("length_curve_scaled"):
    scaling = results.get("rope_scaling") or {}
    curves.append((f"{scaling.get('rope_type', 'scaled')} x{scaling.get('factor', '?')}", results["length_curve_scaled"]))
  for label, rows in curves:
    ax.plot([r["length"] for r in rows], [r.get("loss", float("nan")) for r in rows], "o-", label=label, ms=4)
  ax.set_xscale("log", base=2)
  ax.set_xlabel("evaluation length (tokens)")
  ax.set_ylabel("loss (nats/token)")
  ax.grid(alpha=0.3)
  ax.legend()
  ax.set_title(title)
  fig.tight_layout()
  fig.savefig(out, dpi=120)
  plt.close(fig)
  return out


def _glue(config, task: tasks.Classification, graphdef, state, mesh, batches) -> dict[str, float]:
  """The GLUE metric set of the data set's task, from `task.predict` over the batches."""

  @jax.jit
  def predict(state, batch):
    pred = task.predict(nnx.merge(graphdef, state), batch)
    weights = batch["weights"] if "weights" in batch else jnp.ones(pred.shape, jnp.float32)
    return pred, batch["label"], weights  # all three sharded alike: rows stay aligned

  parts: tuple[list[Any], list[Any], list[Any]] = ([], [], [])  # preds, labels, weights
  for local in batches:
    for acc, x in zip(parts, predict(state, mesh_lib.global_batch(local, mesh)), strict=True):
      acc.append(_fetch(x))
  preds, labels, weights = map(np.concatenate, parts)
  return eval_metrics.glue_metrics(config.data.dataset.split("/")[-1], preds, labels, weights)


def _length_curve(config, graphdef, state, mesh, settings, local_batch) -> list[dict[str, Any]]:
  """Loss at max_length * factor for each factor (lm, mlm)."""
  base = config.data.max_length
  cfg = tasks.model_config(config)
  curve = []
  for factor in settings["length_factors"]:
    length = int(base * factor)
    row: dict[str, Any] = {"factor": float(factor), "length": length}  # floats, and a "note" string
    if cfg.position == "learned" and length > cfg.max_position:
      row["loss"] = float("nan")  # no table rows for these positions: say so rather than extrapolate
      row["note"] = f"learned positions stop at max_position={cfg.max_position}"
    else:
      batches = _batches(config, settings["split"], length, local_batch, settings["length_batches"])
      row.update(_token_metrics(_loss_pass(config, graphdef, state, mesh, batches, f"length {length}", length)))
    curve.append(row)
  return curve


def _passkey(config, graphdef, state, settings, tokenizer) -> dict[str, Any]:
  """Pass-key retrieval accuracy of the restored model (`roformer_jax.evaluation.passkey`), greedy, and
  the answer's nats per digit (teacher-forced), which grades models that all score 0.

  Runs on the model `graphdef` describes (the RoPE-scaled one when `eval.rope_scaling` is
  set). Every process decodes the same prompts with a full copy of the parameters (the test
  is small); only process 0 writes. Learned absolute positions have no rows past
  `max_position`: those lengths are left out and named in `skipped`.
  """
  from roformer_jax.training.data import datasets

  if jax.process_count() > 1:
    state = jax.tree.map(_fetch, state)
  model = nnx.merge(graphdef, state)
  cfg, digits = model.config, settings["passkey_digits"]
  lengths, skipped = [], []
  for n in settings["passkey_lengths"]:
    if cfg.position == "learned" and n + digits - 1 > cfg.max_position:
      skipped.append({"length": n, "note": f"learned positions stop at max_position={cfg.max_position}"})
    else:
      lengths.append(n)
  results: dict[str, Any] = {"lengths": [], "depths": list(settings["passkey_depths"]), "accuracy": []}
  if lengths:
    results = passkey.evaluate_passkey(
        passkey.greedy_generate_fn(model, digits), tokenizer, lengths=lengths, depths=settings["passkey_depths"],
        trials=settings["passkey_trials"], digits=digits, seed=0, score_fn=passkey.answer_nll_fn(model),
        add_bos=datasets.get_spec(config.data.dataset).add_bos_eos)
  if skipped:
    results["skipped"] = skipped
  return results


def evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """Evaluates the run in `workdir`; writes eval_results.json and metrics rows; returns them."""
  with errors.user_errors("invalid config"):
    trainer.check_config(config)
    settings = eval_settings(config)
    num_devices = config.num_devices or jax.device_count()
    mesh = mesh_lib.make_mesh(config.mesh, jax.devices()[:num_devices])
    trainer.check_context_parallel(config, context=mesh.shape["context"])  # mesh.context=-1 is known now
    rules = mesh_lib.rules_from_config(config.logical_axis_rules)
  task = tasks.get(config.task)
  with errors.user_errors("data"):
    data.check_data(config.data, splits=(settings["split"],), task=task.batches)
  if settings["passkey_lengths"]:
    from roformer_jax.training.data import datasets
    tokenizer = data.make_tokenizer(config.data)
    shortest = passkey_rows.min_prompt_length(tokenizer, settings["passkey_digits"],
                                         add_bos=datasets.get_spec(config.data.dataset).add_bos_eos)
    if min(settings["passkey_lengths"]) < shortest:
      raise UserError(f"config.eval.passkey_lengths={list(settings['passkey_lengths'])}: a pass-key prompt needs at "
                      f"least {shortest} tokens with this tokenizer (BOS, the key sentence and the question); "
                      f"give lengths >= {shortest}.")
  workdir = os.path.abspath(workdir)
  graphdef, state, step, used = restore(config, workdir, mesh, rules, average_last=settings["average_last"])
  graphdef, state = _model_only(graphdef, state)
  local_batch = config.batch_size // jax.process_count()
  batches = lambda: _batches(config, settings["split"], config.data.max_length, local_batch, settings["max_batches"])

  asked = run_config.requested(config, workdir)  # what this evaluation sets beyond the run as trained
  name = run_config.slug(asked)
  results: dict[str, Any] = {"step": step, "checkpoints": used, "split": settings["split"], "task": config.task,
                             "dataset": config.data.dataset, "evaluated": asked,
                             "results_file": f"eval_results{'.' + name if name else ''}.json"}
  # What the task scores (`Task.eval_metrics`): token metrics or GLUE's, BLEU, the length curve.
  results["metrics"] = {}
  if tasks.TOKEN_METRICS in task.eval_metrics:
    results["metrics"].update(_token_metrics(_loss_pass(config, graphdef, state, mesh, batches(), "eval",
                                                        config.data.max_length)))
  if tasks.IMAGE_METRICS in task.eval_metrics:  # the same pass, named for images (no perplexity of a label)
    sums = _loss_pass(config, graphdef, state, mesh, batches(), "eval", config.data.max_length)
    results["metrics"].update({**_mean_metrics(sums), "images": sums["weight"]})
  if tasks.GLUE_METRICS in task.eval_metrics:
    glue_task = cast(tasks.Classification, task)  # the task that names GLUE_METRICS
    results["metrics"].update(_glue(config, glue_task, graphdef, state, mesh, batches()))
  if tasks.BLEU in task.eval_metrics:
    # Each process decodes its own shard on its own devices, with a full copy of the
    # parameters: decoding makes no cross-process calls, so shards may take different times.
    model = nnx.merge(graphdef, jax.tree.map(_fetch, state) if jax.process_count() > 1 else state)
    tokenizer = data.make_tokenizer(config.data)
    from tqdm import tqdm
    with tqdm(desc=f"translate (beam {settings['beam_size']})", unit="sentence",
              disable=jax.process_index() != 0, leave=False) as bar:
      hyps, _ = decoding.translate(
          model, batches(), tokenizer, beam_size=settings["beam_size"], alpha=settings["length_penalty"],
          max_len=settings["max_decode_length"] or config.data.max_target_length or config.data.max_length,
          progress=bar.update)
    # References are the raw target text of the same records, not the decoded tgt_out rows
    # (those are truncated to max_target_length and round-tripped through the tokenizer).
    refs = data.raw_targets(config.data, settings["split"], process_index=jax.process_index(),
                            process_count=jax.process_count(),
                            limit=settings["max_batches"] * local_batch if settings["max_batches"] else 0)
    if len(refs) != len(hyps):
      raise RuntimeError(f"{len(hyps)} translations but {len(refs)} references in split {settings['split']!r}; "
                         "the evaluation pass and the data source disagree.")
    hyps, refs = _allgather_strings(hyps), _allgather_strings(refs)
    results["metrics"].update({f"bleu_{k}" if k != "score" else "bleu": v
                               for k, v in eval_metrics.bleu(hyps, refs).items()})
    results["metrics"]["sentences"] = len(hyps)
    results["beam_size"], results["length_penalty"] = settings["beam_size"], settings["length_penalty"]
    if jax.process_index() == 0:
      escape = lambda s: s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
      with open(os.path.join(workdir, "translations.tsv"), "w") as f:  # one line per sentence
        f.write("hypothesis\treference\n")
        f.writelines(f"{escape(h)}\t{escape(r)}\n" for h, r in zip(hyps, refs, strict=True))
  if tasks.LENGTH_CURVE in task.eval_metrics and settings["length_factors"]:
    results["length_curve"] = _length_curve(config, graphdef, state, mesh, settings, local_batch)
    if settings["rope_scaling"]:
      g2, s2 = _with_rope_scaling(config, graphdef, state, settings["rope_scaling"])
      results["rope_scaling"] = dict(settings["rope_scaling"])
      results["length_curve_scaled"] = _length_curve(config, g2, s2, mesh, settings, local_batch)
  if settings["passkey_lengths"]:
    # With eval.rope_scaling the scaled model answers, as for length_curve_scaled: the point
    # is whether the scaling lets the model use the far context.
    scaling = settings["rope_scaling"]
    g, s = _with_rope_scaling(config, graphdef, state, scaling) if scaling else (graphdef, state)
    results["passkey"] = _passkey(config, g, s, settings, tokenizer)
    results["passkey"]["rope_scaling"] = dict(scaling) if scaling else None

  if jax.process_index() == 0:
    # Each setting its own file (eval_results.json for the run's own settings), and each metrics row tagged
    # with it: an evaluation never overwrites another setting's result.
    tags = {"evaluated": name or metrics_lib.AS_TRAINED}
    if results.get("length_curve"):
      results["length_curve_png"] = _plot_length_curve(results, os.path.join(
          workdir, f"length_curve{'.' + name if name else ''}.png"), f"{os.path.basename(workdir)}: step {step}")
    with open(os.path.join(workdir, results["results_file"]), "w") as f:
      json.dump(results, f, indent=2, default=float)
    writer = metrics_lib.MetricsWriter(workdir)
    numeric = {k: v for k, v in results["metrics"].items() if isinstance(v, (int, float))}
    writer.write(step, numeric, prefix="eval_", tags=tags)
    for row in results.get("length_curve", []):
      if math.isfinite(row.get("loss", float("nan"))):
        writer.write(step, {f"loss_at_{row['length']}": row["loss"]}, prefix="eval_", tags=tags)
    for row in results.get("length_curve_scaled", []):
      if math.isfinite(row.get("loss", float("nan"))):
        writer.write(step, {f"scaled_loss_at_{row['length']}": row["loss"]}, prefix="eval_", tags=tags)
    pk = results.get("passkey")
    if pk and pk["lengths"]:
      for i, (length, mean) in enumerate(zip(pk["lengths"], pk["mean_accuracy"], strict=True)):
        row = {f"passkey_accuracy_at_{length}": mean}
        if pk.get("mean_answer_nll"):
          row[f"passkey_answer_nll_at_{length}"] = pk["mean_answer_nll"][i]
        writer.write(step, row, prefix="eval_", tags=tags)
      title = f"{os.path.basename(workdir)}: pass key, step {step}"
      if pk["rope_scaling"]:
        title += f", {pk['rope_scaling'].get('rope_type', 'scaled')} x{pk['rope_scaling'].get('factor', '?')}"
      pk["png"] = os.path.join(workdir, f"passkey{'.' + name if name else ''}.png")
      passkey.plot_heatmap(pk, pk["png"], title)
    writer.close()
  return results


__all__ = ["default_eval_config", "eval_settings", "evaluate", "restore"]
