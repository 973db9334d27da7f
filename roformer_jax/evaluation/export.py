"""A trained workdir as a HuggingFace transformers RoFormer checkpoint: what export.py runs.

- `problems(config)`: why a run's config has no HF RoFormer equivalent, one reason per config
  key (empty when it has one). HF RoFormer is a post-LN BERT encoder with interleaved RoPE at
  theta 10000 over the whole head, biases everywhere and token types, under an MLM head
  (`RoFormerForMaskedLM`, our task "mlm") or a classifier (`RoFormerForSequenceClassification`,
  task "classification"). Everything else is refused by name: exporting a model HF would run
  differently is the silent wrong answer this project never gives.
- `export(config, workdir, out)`: restores the run's checkpoint read-only (the newest that
  verifies, a given step, or the mean of the last N, as eval.py), writes `config.json` +
  `model.safetensors` with `roformer_jax.hf.save_pretrained`, and then loads the files back
  with `roformer_jax.hf.from_pretrained` and compares their logits with the restored model's
  on a fixed batch, so a broken export never reports success. The files appear at `out` only
  when complete: they are written beside it and renamed into place.

Besides the two HF files, `out` holds `roformer_jax_export.json` (where the weights came from:
the workdir, its step(s), the task, the tokenizer) and, for a SentencePiece run, the run's
`tokenizer.model`. HF's RoFormerTokenizer (WordPiece + jieba) is not the run's tokenizer, so
none is written for transformers; encode text with the run's own (its ids are what the model
learned), as `roformer_jax_export.json` describes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from roformer_jax import errors, hf
from roformer_jax.errors import UserError
from roformer_jax.evaluation import evaluate
from roformer_jax.training import data, tasks

# Our task -> the HF RoFormer architecture it exports as.
ARCHITECTURES = {"mlm": "RoFormerForMaskedLM", "classification": "RoFormerForSequenceClassification"}
PROVENANCE = "roformer_jax_export.json"
TOKENIZER_FILE = "tokenizer.model"
# The export's self-check: its logits against the restored model's on this many rows of random
# ids (seeded), at most this long. Same parameters, same function: float32 rounding apart they
# agree exactly; anything above TOLERANCE is a broken export.
CHECK_ROWS, CHECK_LENGTH, TOLERANCE = 2, 64, 1e-4


def problems(config: ml_collections.ConfigDict) -> list[str]:
  """Why `config` (a run's config) cannot be exported as HF RoFormer, each reason naming its
  config key (`config.task`, `config.model.<field>`); empty when it can."""
  found = []
  if config.task not in ARCHITECTURES:
    wanted = " or ".join(f"{t!r}" for t in ARCHITECTURES)
    found.append(f"config.task={config.task!r} (HF RoFormer is an encoder with an MLM or classification head: "
                 f"task {wanted})")
  if not tasks.get(config.task).reads_tokens:  # the ViT: config.model is not its model, nothing to add
    return found
  try:
    cfg = tasks.model_config(config)
  except (TypeError, ValueError) as e:
    raise UserError(f"invalid config: {errors.message_of(e)}") from e
  found += [f"config.model.{reason}" for reason in hf.representation_problems(cfg)]
  return found


def check(config: ml_collections.ConfigDict) -> None:
  """Raises `UserError` naming every key of `config` that HF RoFormer cannot represent."""
  found = problems(config)
  if found:
    raise UserError("this run cannot be exported as an HF RoFormer checkpoint: " + "; ".join(found)
                    + ". docs/getting_started.md lists the configs that export (e.g. configs/bert_base_mlm.py, "
                    "configs/glue.py).")


def _check_out(out: str, overwrite: bool) -> str:
  out = os.path.abspath(out)
  if os.path.exists(out) and not os.path.isdir(out):
    raise UserError(f"--out {out} is a file; name a directory for the checkpoint.")
  if os.path.isdir(out) and os.listdir(out) and not overwrite:
    raise UserError(f"--out {out} already holds files ({', '.join(sorted(os.listdir(out))[:4])}); choose an empty "
                    "or new directory, or pass --overwrite to replace it.")
  return out


def _tokenizer_info(config) -> tuple[dict[str, Any], str | None]:
  """(what roformer_jax_export.json says of the tokenizer, the SentencePiece file to copy or None)."""
  kind = config.data.tokenizer
  if kind == "bytes":
    tok = data.ByteTokenizer()
    return {"kind": "bytes", "ids": f"UTF-8 byte + {tok.num_special}", "pad_id": tok.pad_id, "bos_id": tok.bos_id,
            "eos_id": tok.eos_id, "mask_id": tok.mask_id}, None
  path = str(data.tokenizer_path(config.data))
  info = {"kind": kind, "model_type": config.data.get("tokenizer_model_type"), "trained_file": path}
  if os.path.isfile(path):
    info["file"] = TOKENIZER_FILE
    return info, path
  info["file"] = None
  return info, None


def _usual_permissions(directory: str) -> None:
  """mkdtemp makes a private (0700) directory; the export gets what a plain mkdir and open give."""
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(directory, 0o777 & ~umask)
  for name in os.listdir(directory):
    os.chmod(os.path.join(directory, name), 0o666 & ~umask)


def _label_names(config) -> tuple[str, ...] | None:
  """A classifier's class names from its dataset (`data.label_names`), for config.json's id2label;
  None (HF's LABEL_<i>) where the dataset has none or is not on this machine."""
  if config.task != "classification":
    return None
  try:
    names = data.label_names(config.data)
  except (OSError, ValueError):  # the dataset is not prepared here: the weights export all the same
    return None
  return names if names is not None and len(names) == int(config.num_labels) else None


def _check_batch(cfg, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  length = min(CHECK_LENGTH, cfg.max_position)
  rng = np.random.default_rng(seed)
  ids = rng.integers(1, cfg.vocab_size, (CHECK_ROWS, length), dtype=np.int32)
  types = rng.integers(0, cfg.type_vocab_size, (CHECK_ROWS, length), dtype=np.int32)
  return ids, types


@nnx.jit
def _logits(model, ids, types):
  # HF's positions (slot t rotates by t) and HF's output for the head: what transformers computes.
  positions = jnp.broadcast_to(jnp.arange(ids.shape[1], dtype=jnp.int32), ids.shape)
  return model(ids, token_type_ids=types, attention_mask=jnp.ones_like(ids), positions=positions)


def max_difference(a, b) -> float:
  """The largest |logit| difference of two HF-RoFormer-like models on the export's check batch."""
  ids, types = _check_batch(a.config)
  return float(jnp.abs(_logits(a, ids, types).astype(jnp.float32) - _logits(b, ids, types).astype(jnp.float32)).max())


def export(config: ml_collections.ConfigDict, workdir: str, out: str, *, step: int | None = None,
           average_last: int = 0, overwrite: bool = False) -> dict[str, Any]:
  """Writes the run in `workdir` as an HF RoFormer checkpoint directory `out`.

  Args:
    config: the run's config (its own config.json, with any overrides).
    workdir: the training run's directory.
    out: the directory to write (new, empty, or replaced with `overwrite`).
    step: export this checkpoint; None = the newest that verifies.
    average_last: N > 1 exports the mean of the last N checkpoints' parameters (as eval.py).
    overwrite: replace what `out` holds.

  Returns:
    what was written: {"out", "architecture", "steps", "files", "max_difference", "max_length",
    "tokenizer"}.

  Raises:
    UserError: a config HF RoFormer cannot represent (every key named), a non-empty `out`,
      no or damaged checkpoint, checkpoints of another config, or the restore in several processes.
  """
  check(config)
  out = _check_out(out, overwrite)
  workdir = os.path.abspath(workdir)
  model, _, used = evaluate.restore_model(config, workdir, step=step, average_last=average_last, tool="export")
  tokenizer, tokenizer_file = _tokenizer_info(config)
  label_names = _label_names(config)

  parent = os.path.dirname(out)
  os.makedirs(parent, exist_ok=True)
  staging = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.", dir=parent)
  try:
    hf.save_pretrained(model, staging, label_names=label_names)
    exported = hf.from_pretrained(staging)
    diff = max_difference(model, exported)
    if not diff <= TOLERANCE:  # also NaN
      raise errors.RunFault(f"the written checkpoint's logits differ from the run's by {diff:.3g} (> {TOLERANCE:g}); "
                            "nothing was exported. This is a bug: please report it with the run's config.json.")
    if tokenizer_file:
      shutil.copyfile(tokenizer_file, os.path.join(staging, TOKENIZER_FILE))
    record = {"workdir": workdir, "steps": used, "task": config.task, "architecture": ARCHITECTURES[config.task],
              "trained_max_length": int(config.data.max_length), "tokenizer": tokenizer, "labels": label_names,
              "check": {"max_abs_logit_difference": diff, "rows": CHECK_ROWS,
                        "length": min(CHECK_LENGTH, model.config.max_position)}}
    with open(os.path.join(staging, PROVENANCE), "w") as f:
      json.dump(record, f, indent=2, sort_keys=True)
      f.write("\n")
    _usual_permissions(staging)
    if os.path.isdir(out):  # --overwrite (checked above): the old export goes only once the new one is whole
      old = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.old.", dir=parent)
      os.rename(out, os.path.join(old, "x"))
      os.rename(staging, out)
      shutil.rmtree(old, ignore_errors=True)
    else:
      os.rename(staging, out)
  finally:
    if os.path.isdir(staging):
      shutil.rmtree(staging, ignore_errors=True)
  return {"out": out, "architecture": ARCHITECTURES[config.task], "steps": used, "files": sorted(os.listdir(out)),
          "max_difference": diff, "max_length": model.config.max_position, "tokenizer": tokenizer,
          "labels": label_names}


def summary(info: dict[str, Any]) -> str:
  """export.py's report: what was written, from which step, and how to load it."""
  which = evaluate.checkpoints_used(info["steps"])
  tok = info["tokenizer"]
  tok_line = ("byte ids (UTF-8 byte + 4; pad 0, bos 1, eos 2, mask 3)" if tok["kind"] == "bytes"
              else f"SentencePiece, {TOKENIZER_FILE}" if tok.get("file") else
              f"SentencePiece, NOT copied: {tok['trained_file']} is missing")
  return "\n".join([
      f"export.py: wrote {info['architecture']} ({which}) to {info['out']}",
      f"  files: {', '.join(info['files'])}",
      f"  checked: its logits equal the run's to {info['max_difference']:.1e} (tolerance {TOLERANCE:g})",
      f"  tokenizer: {tok_line}; HF reads at most max_position_embeddings={info['max_length']} tokens",
      *([f"  labels: {', '.join(info['labels'])} (config.json's id2label)"] if info.get("labels") else []),
      f"  load: transformers.{info['architecture']}.from_pretrained({info['out']!r})",
  ])


__all__ = ["ARCHITECTURES", "check", "export", "max_difference", "problems", "summary"]
