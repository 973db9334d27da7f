"""The training tasks as objects, and the one registry of their names (`get`).

A task ties a model class to the batch format of `roformer_jax.training.data` and a loss:

| task | model | batch keys | loss |
|---|---|---|---|
| lm | CausalLM | inputs, targets, segment_ids, positions, weights | next-token CE |
| mlm | RoFormerForMaskedLM | inputs, targets, weights, segment_ids, positions, token_type_ids | CE at masked positions |
| seq2seq | TransformerSeq2Seq | src, tgt_in, tgt_out, weights (+ segment ids, positions) | label-smoothed CE (Sec. 4.1) |
| classification | RoFormerForSequenceClassification | input_ids, token_type_ids, attention_mask, label, weights | CE, or MSE if num_labels == 1 |
| image | vit.VisionTransformer (config.vit) | image, label, weights | CE over the classes |

Each task is one frozen object (`LM`, `MLM`, `Seq2Seq`, `Classification`, all `Task`s) that
knows everything the tools ask about it: its model (`build_model`), its batches
(`batches`, a `data.pipeline.BatchFormat`), its losses (`loss_sums`), its real token count
(`tokens_in`), the sequences it feeds the model (`sequence_lengths`), its training FLOPs
(`flops_per_token`), what eval.py scores (`eval_metrics`), its training samples (`samples`)
and what generate.py can do with it (`generates`). The trainer, eval.py, generate.py and the
samples dispatch through these; `config.task` stays a string in the configs, and `get` is the
one place a task name is looked up.

A new task is one new `Task` subclass (here or in its own module) and one line in `REGISTRY`.

Every loss function returns (loss_sum, weight_sum, extra sums) over the global batch, so the
trainer's mean is exact however the batch is sharded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer_jax import losses, models, vit
from roformer_jax.training import metrics as metrics_lib, samples as samples_lib
from roformer_jax.training.data import pipeline

# What generate.py does with a task's model (`Task.generates`).
CONTINUE = "continue"  # continue a prompt (generation.stream_lm / lm_tokens)
TRANSLATE = "translate"  # translate sentences (generation.translate)
FILL_MASKS = "fill_masks"  # fill [MASK] slots (generation.fill_masks)

# What eval.py scores (`Task.eval_metrics`), each computed in roformer_jax/evaluation/evaluate.py.
TOKEN_METRICS = "tokens"  # loss, accuracy, perplexity, bits per token over a full pass
IMAGE_METRICS = "images"  # loss (nats per image), accuracy and the number of images over a full pass
GLUE_METRICS = "glue"  # the GLUE metric set of the data set's task, from predictions
BLEU = "bleu"  # beam-search translations scored by sacreBLEU (+ translations.tsv)
LENGTH_CURVE = "length_curve"  # loss at eval.length_factors times the trained length
PASSKEY = "passkey"  # pass-key retrieval (eval.passkey_lengths)


def model_config(config) -> models.ModelConfig:
  return models.ModelConfig.from_dict(config.model.to_dict())


@dataclasses.dataclass(frozen=True)
class Task:
  """One training task. Subclasses set the class attributes and `_model` / `_logits`.

  Attributes:
    name: the `config.task` that selects it.
    batches: the data pipeline's batch format (`data.make_iterator(..., task=task.batches)`).
    causal: the model reads its (target) rows causally (context-parallel lengths, FLOPs).
    init_from: `config.init_from` may start it from a trained model's parameters.
    generates: what generate.py does with it (CONTINUE, TRANSLATE, FILL_MASKS), or None.
    eval_metrics: what eval.py scores (TOKEN_METRICS, IMAGE_METRICS, GLUE_METRICS, BLEU, LENGTH_CURVE,
      PASSKEY).
    sample_fn: `samples.*_samples`, what the trainer's samples show.
  """
  name: ClassVar[str]
  batches: ClassVar[pipeline.BatchFormat]
  causal: ClassVar[bool] = False
  init_from: ClassVar[bool] = False
  generates: ClassVar[str | None] = None
  reads_tokens: ClassVar[bool] = True  # its inputs are token ids (the model's vocabulary must hold them)
  eval_metrics: ClassVar[tuple[str, ...]] = (TOKEN_METRICS,)
  sample_fn: ClassVar[Callable[..., list[dict[str, Any]]]]

  def build_model(self, config, rngs: nnx.Rngs) -> nnx.Module:
    """The task's model for `config` (its `model` section), initialised from `rngs`."""
    return self._model(config, model_config(config), rngs)

  def _model(self, config, cfg: models.ModelConfig, rngs: nnx.Rngs) -> nnx.Module:
    raise NotImplementedError

  def loss_sums(self, model, batch: dict[str, jax.Array], *, label_smoothing: float = 0.0,
                deterministic: bool = True) -> dict[str, jax.Array]:
    """Sums over the batch: {"loss", "weight", "correct"} (float32 scalars).

    loss / weight is the mean loss per scored token (or example); correct / weight the accuracy.
    """
    logits, targets, weights = self._logits(model, batch, deterministic)
    loss_sum, weight_sum = losses.cross_entropy(logits, targets, weights=weights, label_smoothing=label_smoothing)
    correct, _ = losses.weighted_accuracy(logits, targets, weights)
    return {"loss": loss_sum, "weight": weight_sum, "correct": correct}

  def _logits(self, model, batch, deterministic: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(logits, targets, weights) of a batch."""
    raise NotImplementedError

  def tokens_in(self, batch: dict[str, Any]) -> int:
    """Real input tokens in a (local numpy) batch, for throughput."""
    if "segment_ids" not in batch:  # data.document_mask=False training rows: always full
      return int(np.size(batch["inputs"]))
    return int((batch["segment_ids"] != 0).sum())

  def sequence_lengths(self, config, max_length: int, key: str) -> list[tuple[str, int, bool, str]]:
    """(key, length, causal, note) per sequence a batch of `max_length` rows feeds the model
    (`trainer.sequence_lengths`)."""
    return [(key, max_length, self.causal, "")]

  def flops_per_token(self, config, model, num_params: int) -> Callable[[int], float]:
    """Training FLOPs per token at a row length (for MFU), of `model` with `num_params`."""
    cfg = model_config(config)
    features = _linear_features(cfg)
    return lambda length: metrics_lib.train_flops_per_token(
        num_params, num_layers=cfg.num_layers, seq_len=length, d_model=cfg.d_model, causal=self.causal,
        linear_features=features)

  def samples(self, model, batch: dict[str, np.ndarray], *, tokenizer, num: int,
              max_new_tokens: int, labels: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Decodes the first `num` rows of a (host, numpy) validation batch with `model`, as text.

    Args:
      model: the task's model (`build_model`), in inference mode (dropout off).
      batch: one batch from the validation pipeline.
      tokenizer: the run's tokenizer (`data.make_tokenizer`).
      num: rows to decode (at most the batch's rows).
      max_new_tokens: tokens generated per lm prompt / translated sentence.
      labels: the dataset's class names (`data.label_names`), shown beside the class numbers.

    Returns:
      One dict per row: "prompt", "output", "reference" (text), plus "filled_right" for mlm.
    """
    num = samples_lib.num_rows(batch, num)
    if num < 1:
      return []
    return type(self).sample_fn(model, batch, tokenizer, num, max_new_tokens, labels=labels)


def _linear_features(cfg: models.ModelConfig) -> int | None:
  return None if cfg.attention == "softmax" else (cfg.num_features if cfg.feature_map == "favor" else cfg.head_size)


@dataclasses.dataclass(frozen=True)
class LM(Task):
  """Causal language modelling: next-token cross-entropy over packed documents."""
  name = "lm"
  batches = pipeline.LM
  causal = True
  init_from = True  # from a trained LM
  generates = CONTINUE
  eval_metrics = (TOKEN_METRICS, LENGTH_CURVE, PASSKEY)
  sample_fn = samples_lib.lm_samples

  def _model(self, config, cfg, rngs):
    return models.CausalLM(cfg, rngs=rngs)

  def _logits(self, model, batch, deterministic):
    logits = model(batch["inputs"], segment_ids=batch.get("segment_ids"), positions=batch["positions"],
                   deterministic=deterministic)
    return logits, batch["targets"], batch["weights"]


@dataclasses.dataclass(frozen=True)
class MLM(Task):
  """BERT masked language modelling: cross-entropy at the masked positions."""
  name = "mlm"
  batches = pipeline.MLM
  init_from = True  # from a pre-trained encoder
  generates = FILL_MASKS
  eval_metrics = (TOKEN_METRICS, LENGTH_CURVE)
  sample_fn = samples_lib.mlm_samples

  def _model(self, config, cfg, rngs):
    return models.RoFormerForMaskedLM(cfg, rngs=rngs)

  def _logits(self, model, batch, deterministic):
    # With the pipeline's masked_positions the head scores M positions per row, not T: the
    # same loss and gradients, without most of the vocabulary projection.
    masked = "masked_positions" in batch
    logits = model(batch["inputs"], segment_ids=batch.get("segment_ids"), positions=batch["positions"],
                   token_type_ids=batch.get("token_type_ids"), deterministic=deterministic,
                   masked_positions=batch["masked_positions"] if masked else None)
    targets, weights = ((batch["masked_targets"], batch["masked_weights"]) if masked
                        else (batch["targets"], batch["weights"]))
    return logits, targets, weights

  def flops_per_token(self, config, model, num_params):
    # The head scores M of T positions (the pipeline's masked_positions), so MFU counts it there only.
    cfg, head_params = model_config(config), metrics_lib.mlm_head_params(model)
    features = _linear_features(cfg)
    return lambda length: metrics_lib.mlm_train_flops_per_token(
        num_params, head_params, num_layers=cfg.num_layers, seq_len=length, d_model=cfg.d_model,
        scored_fraction=pipeline.mlm_max_predictions(config.data, length) / length, linear_features=features)


@dataclasses.dataclass(frozen=True)
class Seq2Seq(Task):
  """Translation (Sec. 4.1): label-smoothed cross-entropy of the target given the source."""
  name = "seq2seq"
  batches = pipeline.SEQ2SEQ
  generates = TRANSLATE
  eval_metrics = (TOKEN_METRICS, BLEU)
  sample_fn = samples_lib.seq2seq_samples

  def _model(self, config, cfg, rngs):
    return models.TransformerSeq2Seq(cfg, rngs=rngs)

  def _logits(self, model, batch, deterministic):
    if "src_segment_ids" in batch:  # the pipeline's batches, packed or not: segment masks.
      logits = model(batch["src"], batch["tgt_in"], src_segment_ids=batch["src_segment_ids"],
                     tgt_segment_ids=batch["tgt_segment_ids"], src_positions=batch.get("src_positions"),
                     tgt_positions=batch.get("tgt_positions"), deterministic=deterministic)
    else:
      logits = model(batch["src"], batch["tgt_in"], src_mask=batch["src"] != 0,
                     tgt_mask=batch["tgt_in"] != 0, deterministic=deterministic)
    return logits, batch["tgt_out"], batch["weights"]

  def tokens_in(self, batch):
    return int((batch["src"] != 0).sum() + (batch["tgt_in"] != 0).sum())

  def sequence_lengths(self, config, max_length, key):
    # The source (bidirectional) and the target (causal, data.max_target_length, which 0 makes
    # the source's length; the note says so for context_parallel.check_length).
    target = config.data.max_target_length
    if target:
      return [(key, max_length, False, ""), ("config.data.max_target_length", target, True, "")]
    return [(key, max_length, False, ""),
            (key, max_length, True, "the target length too, as config.data.max_target_length=0")]


@dataclasses.dataclass(frozen=True)
class Classification(Task):
  """Sequence classification (GLUE): cross-entropy, or a regression's MSE when num_labels == 1."""
  name = "classification"
  batches = pipeline.CLASSIFICATION
  init_from = True  # from a pre-trained encoder
  eval_metrics = (GLUE_METRICS,)
  sample_fn = samples_lib.classification_samples

  def _model(self, config, cfg, rngs):
    return models.RoFormerForSequenceClassification(cfg, int(config.num_labels), rngs=rngs)

  def _outputs(self, model, batch, deterministic: bool = True) -> jax.Array:
    return model(batch["input_ids"], attention_mask=batch["attention_mask"],
                 token_type_ids=batch.get("token_type_ids"), deterministic=deterministic)

  def loss_sums(self, model, batch, *, label_smoothing=0.0, deterministic=True):
    out = self._outputs(model, batch, deterministic)
    # weights [B]: 0 for the rows that pad the last batch of a finite evaluation pass.
    weights = batch.get("weights")
    if out.shape[-1] == 1:
      loss_sum, weight_sum = losses.regression_loss(out, batch["label"], weights=weights)
      return {"loss": loss_sum, "weight": weight_sum, "correct": jnp.float32(0.0)}
    loss_sum, weight_sum = losses.cross_entropy(out, batch["label"], weights=weights, label_smoothing=label_smoothing)
    correct, _ = losses.weighted_accuracy(out, batch["label"], weights)
    return {"loss": loss_sum, "weight": weight_sum, "correct": correct}

  def predict(self, model, batch) -> jax.Array:
    """The predicted class id [B] (the value [B] for a regression), for eval.py's GLUE metrics."""
    out = self._outputs(model, batch)
    return out[:, 0] if out.shape[-1] == 1 else out.argmax(-1)

  def tokens_in(self, batch):
    return int(batch["attention_mask"].sum())


def vit_config(config) -> vit.ViTConfig:
  """The ViT's image side: `config.vit` (patch size, CLS, position encoding, theta), the grid it
  is built for (`vit.image_size`, else the data's resolution), the data's channels and the
  dataset's number of classes. Images of another `data.image_size` then run on the same model
  (RoPE at their own grid, a learned table resized to it)."""
  from roformer_jax.training import data  # the dataset registry (data-only; no cycle: data imports no task)
  spec = data.get_spec(config.data.dataset)
  size = config.data.image_size if config.vit.image_size is None else config.vit.image_size
  return vit.ViTConfig(image_size=int(size), channels=int(config.data.image_channels),
                       num_classes=int(spec.num_classes), patch_size=int(config.vit.patch_size),
                       cls_token=bool(config.vit.cls_token), position=str(config.vit.position),
                       rope_theta=config.vit.rope_theta)


@dataclasses.dataclass(frozen=True)
class ImageClassification(Task):
  """Image classification with a ViT (`roformer_jax.vit`): cross-entropy over the classes; eval.py
  reports loss and accuracy over the split. Throughput counts images."""
  name = "image"
  batches = pipeline.IMAGE
  init_from = True  # from a trained image run: another resolution or number of classes (checkpoints.init_from)
  reads_tokens = False
  eval_metrics = (IMAGE_METRICS,)
  sample_fn = samples_lib.image_samples

  def _model(self, config, cfg, rngs):
    return vit.VisionTransformer(cfg, vit_config(config), rngs=rngs)

  def _logits(self, model, batch, deterministic):
    return model(batch["image"], deterministic=deterministic), batch["label"], batch["weights"]

  def tokens_in(self, batch):
    """Real images in the batch: the image task's throughput is images per second."""
    return int((np.asarray(batch["weights"]) > 0).sum())

  def sequence_lengths(self, config, max_length, key):
    v = vit_config(config)
    return [("data.image_size", v.grid ** 2 + int(v.cls_token), False, "patches (+ CLS) of the training resolution")]

  def flops_per_token(self, config, model, num_params):
    v = vit_config(config)
    cfg = model_config(config)
    tokens = v.grid ** 2 + int(v.cls_token)
    return lambda length: metrics_lib.train_flops_per_token(num_params, num_layers=cfg.num_layers, seq_len=tokens,
                                                            d_model=cfg.d_model, causal=False)


# The registry: config.task -> its task. A new task is one line here.
REGISTRY: dict[str, Task] = {task.name: task for task in (LM(), MLM(), Seq2Seq(), Classification(),
                                                          ImageClassification())}


def get(task: str | Task) -> Task:
  """The task named `task` (`config.task`); a `Task` is returned as it is.

  Raises:
    ValueError: an unknown name (the message lists the known ones).
  """
  if isinstance(task, Task):
    return task
  found = REGISTRY.get(task) if isinstance(task, str) else None
  if found is None:
    raise ValueError(f"config.task={task!r}; expected one of {tuple(REGISTRY)}.")
  return found


def names(**capabilities: Any) -> tuple[str, ...]:
  """The registered task names, or those whose attributes equal `capabilities`, e.g.
  `names(generates=CONTINUE)`."""
  return tuple(name for name, task in REGISTRY.items()
               if all(getattr(task, k) == v for k, v in capabilities.items()))


# Shorthands for code that holds config.task (a name) or a Task.


def build_model(config, rngs: nnx.Rngs) -> nnx.Module:
  """`get(config.task).build_model(config, rngs)`."""
  return get(config.task).build_model(config, rngs)


def loss_sums(model, batch: dict[str, jax.Array], *, task: str | Task, label_smoothing: float = 0.0,
              deterministic: bool = True) -> dict[str, jax.Array]:
  """`get(task).loss_sums(...)`: {"loss", "weight", "correct"} summed over the batch."""
  return get(task).loss_sums(model, batch, label_smoothing=label_smoothing, deterministic=deterministic)


def tokens_in(batch: dict[str, Any], task: str | Task) -> int:
  """`get(task).tokens_in(batch)`: real input tokens in a (local numpy) batch, for throughput."""
  return get(task).tokens_in(batch)


__all__ = ["BLEU", "CONTINUE", "FILL_MASKS", "GLUE_METRICS", "LENGTH_CURVE", "PASSKEY", "REGISTRY", "TOKEN_METRICS",
           "TRANSLATE", "Classification", "LM", "MLM", "Seq2Seq", "Task", "build_model", "get", "loss_sums",
           "model_config", "names", "tokens_in"]
