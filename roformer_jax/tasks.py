"""What each training task builds and how it scores a batch.

A task ties a model class to the batch format of `roformer_jax.data` and a loss:

| task | model | batch keys | loss |
|---|---|---|---|
| lm | CausalLM | inputs, targets, segment_ids, positions, weights | next-token CE |
| mlm | RoFormerForMaskedLM | inputs, targets, weights, segment_ids, positions, token_type_ids | CE at masked positions |
| seq2seq | TransformerSeq2Seq | src, tgt_in, tgt_out, weights (+ segment ids, positions) | label-smoothed CE (Sec. 4.1) |
| classification | RoFormerForSequenceClassification | input_ids, token_type_ids, attention_mask, label, weights | CE, or MSE if num_labels == 1 |

Every loss function returns (loss_sum, weight_sum, extra sums) over the global batch, so the
trainer's mean is exact however the batch is sharded.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from roformer_jax import losses, models

TASKS = ("lm", "mlm", "seq2seq", "classification")


def check_task(task: Any) -> str:
  if task not in TASKS:
    raise ValueError(f"config.task={task!r}; expected one of {TASKS}.")
  return task


def model_config(config) -> models.ModelConfig:
  return models.ModelConfig.from_dict(config.model.to_dict())


def build_model(config, rngs: nnx.Rngs) -> nnx.Module:
  task = check_task(config.task)
  cfg = model_config(config)
  if task == "lm":
    return models.CausalLM(cfg, rngs=rngs)
  if task == "mlm":
    return models.RoFormerForMaskedLM(cfg, rngs=rngs)
  if task == "seq2seq":
    return models.TransformerSeq2Seq(cfg, rngs=rngs)
  return models.RoFormerForSequenceClassification(cfg, int(config.num_labels), rngs=rngs)


def loss_sums(model, batch: dict[str, jax.Array], *, task: str, label_smoothing: float = 0.0,
              deterministic: bool = True) -> dict[str, jax.Array]:
  """Sums over the batch: {"loss", "weight", "correct"} (float32 scalars).

  loss / weight is the mean loss per scored token (or example); correct / weight the accuracy.
  """
  if task == "lm":
    logits = model(batch["inputs"], segment_ids=batch["segment_ids"], positions=batch["positions"],
                   deterministic=deterministic)
    targets, weights = batch["targets"], batch["weights"]
  elif task == "mlm":
    # With the pipeline's masked_positions the head scores M positions per row, not T: the
    # same loss and gradients, without most of the vocabulary projection.
    masked = "masked_positions" in batch
    logits = model(batch["inputs"], segment_ids=batch["segment_ids"], positions=batch["positions"],
                   token_type_ids=batch.get("token_type_ids"), deterministic=deterministic,
                   masked_positions=batch["masked_positions"] if masked else None)
    targets, weights = ((batch["masked_targets"], batch["masked_weights"]) if masked
                        else (batch["targets"], batch["weights"]))
  elif task == "seq2seq":
    if "src_segment_ids" in batch:  # the pipeline's batches, packed or not: segment masks.
      logits = model(batch["src"], batch["tgt_in"], src_segment_ids=batch["src_segment_ids"],
                     tgt_segment_ids=batch["tgt_segment_ids"], src_positions=batch.get("src_positions"),
                     tgt_positions=batch.get("tgt_positions"), deterministic=deterministic)
    else:
      logits = model(batch["src"], batch["tgt_in"], src_mask=batch["src"] != 0,
                     tgt_mask=batch["tgt_in"] != 0, deterministic=deterministic)
    targets, weights = batch["tgt_out"], batch["weights"]
  else:
    out = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                token_type_ids=batch.get("token_type_ids"), deterministic=deterministic)
    # weights [B]: 0 for the rows that pad the last batch of a finite evaluation pass.
    weights = batch.get("weights")
    if out.shape[-1] == 1:
      loss_sum, weight_sum = losses.regression_loss(out, batch["label"], weights=weights)
      return {"loss": loss_sum, "weight": weight_sum, "correct": jnp.float32(0.0)}
    logits, targets = out, batch["label"]
  loss_sum, weight_sum = losses.cross_entropy(logits, targets, weights=weights, label_smoothing=label_smoothing)
  correct, _ = losses.weighted_accuracy(logits, targets, weights)
  return {"loss": loss_sum, "weight": weight_sum, "correct": correct}


def tokens_in(batch: dict[str, Any], task: str) -> int:
  """Real input tokens in a (local numpy) batch, for throughput."""
  if task in ("lm", "mlm"):
    return int((batch["segment_ids"] != 0).sum())
  if task == "seq2seq":
    return int((batch["src"] != 0).sum() + (batch["tgt_in"] != 0).sum())
  return int(batch["attention_mask"].sum())
