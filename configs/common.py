"""Pieces every paper config shares: the base block of keys, variant parsing, the smoke shrink.

`base_config()` is the one list of a config's keys and their defaults (the data, model,
optimiser and eval sections come from the library: `data.default_data_config`,
`models.ModelConfig`, `optim.default_optim_config`, `evaluate.default_eval_config`). Every
config, configs/default.py included, starts from it and overrides what its run (or its
section of the paper) fixes: a diff, not a copy. `parse_variants` reads the `:variant,variant` argument that
`train.py --config configs/<name>.py:<arg>` passes to `get_config(arg)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import ml_collections

from roformer_jax import mesh, models
from roformer_jax.training import data
from roformer_jax.evaluation import evaluate

SMOKE = "smoke"


def parse_variants(arg: str, allowed: tuple[str, ...], *, config_name: str) -> list[str]:
  """The comma-separated variants of `arg`, in order, each checked against `allowed`.

  Raises:
    ValueError: an unknown or repeated variant; the message names the allowed ones.
  """
  if not isinstance(arg, str):
    raise ValueError(f"configs/{config_name}.py: get_config takes a string of comma-separated "
                     f"variants from {allowed}, got {arg!r}.")
  variants = [v.strip() for v in arg.split(",") if v.strip()]
  unknown = [v for v in variants if v not in allowed]
  if unknown:
    raise ValueError(f"configs/{config_name}.py: unknown variant(s) {unknown}; allowed (comma-separated, "
                     f"e.g. configs/{config_name}.py:{allowed[0]},{SMOKE}): {list(allowed)}.")
  repeated = sorted({v for v in variants if variants.count(v) > 1})
  if repeated:
    raise ValueError(f"configs/{config_name}.py: variant(s) {repeated} given more than once in {arg!r}.")
  return variants


def set_dotted(config: ml_collections.ConfigDict, overrides: dict) -> ml_collections.ConfigDict:
  """Sets {"model.position": "rope", ...} in place, as --config.model.position=rope would; returns it."""
  for key, value in overrides.items():
    target = config
    *parents, leaf = key.split(".")
    for p in parents:
      target = target[p]
    target[leaf] = value
  return config


# ModelConfig fields whose default is None take a placeholder of this type, so that the command
# line can set them (`--config.model.head_dim=64`); rope_scaling is a dict, written on the
# command line as a Python/JSON dict literal: --config.model.rope_scaling="{'rope_type': 'linear', 'factor': 4.0}".
_PLACEHOLDER_TYPES = {"int | None": int, "float | None": float, "Any": object}


def model_config(values: Mapping | None = None, /, **overrides) -> ml_collections.ConfigDict:
  """`config.model` with every `ModelConfig` field: ModelConfig's default unless overridden.

  The list of keys comes from the dataclass itself, so every field is settable from the
  command line (`--config.model.<field>=...`) in every config. Fields whose default is None
  are typed placeholders; `rope_scaling` (an HF-style dict) takes a dict literal.

  Args:
    values: field -> value, what the config's section of the paper fixes.
    **overrides: more fields (applied after `values`).

  Raises:
    ValueError: a key that is not a ModelConfig field (naming the known ones).
  """
  given = {**(values or {}), **overrides}
  fields = {f.name: f for f in dataclasses.fields(models.ModelConfig)}
  unknown = sorted(set(given) - set(fields))
  if unknown:
    raise ValueError(f"unknown model keys {unknown}; ModelConfig's fields are {sorted(fields)}.")
  config = ml_collections.ConfigDict()
  for name, field in fields.items():
    if field.default is None:
      kind = _PLACEHOLDER_TYPES.get(str(field.type))
      if kind is None:
        raise TypeError(f"ModelConfig.{name}: {field.type} defaults to None; give it a placeholder type in "
                        "configs/common.py's _PLACEHOLDER_TYPES.")
      config[name] = ml_collections.config_dict.placeholder(kind)
    else:
      config[name] = field.default
  for name, value in given.items():
    config[name] = value
  return config


def base_config() -> ml_collections.ConfigDict:
  """Every key a config has, with run-length values for a multi-device machine.

  The trainer and eval.py read these keys with no fallbacks. Each config overrides task, the
  step counts, batch_size, data, model and optim as its run needs.
  """
  config = ml_collections.ConfigDict()
  config.task = "lm"  # lm | mlm | seq2seq | classification | image (roformer_jax.training.tasks)
  config.seed = 0  # PRNG seed for init, data order, MLM masks and dropout.
  config.dropout_rng = "threefry"  # dropout's PRNG: threefry | rbg | unsafe_rbg (cheaper on GPUs; docs/training.md).
  config.total_steps = 100_000  # loop steps = batches (optimiser updates unless grad_accum_steps > 1).
  config.batch_size = 64  # global batch, split over the mesh's (data, fsdp) axes.
  config.checkpoint_every_steps = 2000  # orbax save interval (also at the end and on SIGTERM; not at step 1).
  config.eval_every_steps = 2000  # validation interval.
  config.log_every_steps = 100  # metrics.jsonl / TensorBoard / progress-bar interval.
  config.eval_batches = 32  # validation batches per evaluation (the same first ones every time).
  config.samples_per_eval = 2  # validation rows decoded at each eval (samples.jsonl, TensorBoard); 0 = off.
  config.sample_max_new_tokens = 32  # tokens generated per sample (lm continuation, translation).
  config.keep_checkpoints = 3  # newest checkpoints kept on disk.
  config.async_checkpoints = True  # orbax writes in the background while training continues.
  config.num_devices = 0  # use the first N devices (0 = all).
  config.label_smoothing = 0.0  # Sec. 4.1 uses 0.1 for translation; 0 elsewhere.
  config.feature_redraw_every = 0  # FAVOR+ projection redraw interval in steps; 0 = never.
  config.profile_first_step = 0  # a profiler trace (<workdir>/profile, TensorBoard / Perfetto) from this step; 0 = off.
  config.profile_steps = 3  # steps in the trace.
  config.init_from = ""  # a trained run (workdir) or transformers dir to start from (checkpoints.init_from); "" = scratch.
  # Multi-stage pre-training (configs/multistage.py): a list of {steps, max_length, batch_size}
  # that replaces batch_size and data.max_length stage by stage; None = one stage.
  config.stages = ml_collections.config_dict.placeholder(list)
  config.mesh = ml_collections.ConfigDict(  # -1 = fill; context > 1 splits sequences (docs/training.md).
      {"data": -1, "fsdp": 1, "context": 1, "tensor": 1})
  config.logical_axis_rules = [list(rule) for rule in mesh.DEFAULT_RULES]  # logical -> mesh axes.
  config.data = data.default_data_config()  # every key documented in roformer_jax/training/data/config.py.
  config.model = model_config()  # every roformer_jax.models.ModelConfig field, at its default.
  config.optim = ml_collections.ConfigDict()  # roformer_jax.training.optim.default_optim_config keys.
  config.eval = evaluate.default_eval_config()  # eval.py's settings, each documented there.
  # The ViT of task "image" (roformer_jax.vit); its resolution and channels are data.image_size
  # and data.image_channels, its classes the dataset's.
  config.vit = ml_collections.ConfigDict()
  config.vit.patch_size = 4  # P: pixels per patch side.
  config.vit.cls_token = True  # classify a CLS token's state (False: the mean over patches).
  config.vit.position = "rope_axial"  # rope_axial | rope_mixed | rope_2d | learned | none (docs/models.md).
  config.vit.rope_theta = ml_collections.config_dict.placeholder(float)  # None: the variant's own (100, 10, 1e4).
  # The resolution the model is built for (the learned table's grid); None: data.image_size.
  # Set it in a config so that evaluating at another data.image_size keeps the trained model.
  config.vit.image_size = ml_collections.config_dict.placeholder(int)
  return config


def apply_smoke(config: ml_collections.ConfigDict, *, batch_size: int = 8, max_length: int = 32) -> None:
  """Shrinks a config in place to a seconds-long run: 2 steps, a tiny model, short rows.

  The global batch of 8 divides the 8 fake CPU devices of the tests. The model keeps its
  kind (position encoding, attention, norm placement); only the sizes shrink.
  """
  config.total_steps = 2
  config.batch_size = batch_size
  config.checkpoint_every_steps = 1
  config.eval_every_steps = 2
  config.log_every_steps = 1
  config.eval_batches = 1
  config.samples_per_eval = 0  # no decode compile in the seconds-long smoke runs.
  config.keep_checkpoints = 3
  config.eval.average_last = 0  # 2 steps: nothing worth averaging (the newest checkpoint alone).
  config.eval.length_factors = (1, 2)  # two points run the length curve's code (each length compiles anew).
  config.eval.length_batches = 1  # one batch per length-curve point.
  config.data.max_length = max_length
  config.data.num_threads = 1
  config.data.prefetch = 8
  config.data.shuffle_window = 16
  config.model.update(dict(d_model=32, num_layers=1, num_heads=2, d_ff=64, dropout=0.0,
                           attention_dropout=0.0))


# The smoke vocabulary must hold the characters of real text, not only of the tests' mock data:
# SentencePiece gives every character that character_coverage keeps a piece of its own, and
# fails when they outnumber vocab_size (a soft limit only for merges). English + German software
# messages (the real gettext catalogues, 2000 lines) need 136 pieces at coverage 1.0 and 115 at
# 0.9995; English text (GLUE, Wikipedia, WMT) needs fewer at 0.9995. Coverage 0.9995
# (SentencePiece's own default) maps the rare symbols and foreign scripts of Wikipedia or
# Common Crawl to <unk> instead of giving each a piece, and 256 pieces leave room for the
# alphabet of any Latin-script text; the tiny model pays 256 x 32 embedding weights for it.
SMOKE_VOCAB_SIZE = 256
SMOKE_CHARACTER_COVERAGE = 0.9995


def apply_smoke_sentencepiece(config: ml_collections.ConfigDict, *, vocab_size: int = SMOKE_VOCAB_SIZE) -> None:
  """A small SentencePiece vocabulary, trained on the train split (real or mock) on first use.

  The model's vocabulary is the requested size, an upper bound: SentencePiece is trained with
  a soft limit and returns fewer pieces when the text is too small for `vocab_size`.
  """
  config.data.tokenizer = "sentencepiece"
  config.data.tokenizer_path = ""  # <data_dir>/tokenizers/<dataset>_bpe256_cov0.9995.model
  config.data.vocab_size = vocab_size
  config.data.tokenizer_character_coverage = SMOKE_CHARACTER_COVERAGE  # see SMOKE_VOCAB_SIZE
  config.data.train_tokenizer_if_missing = True
  config.data.tokenizer_max_sentences = 2000
  config.model.vocab_size = vocab_size
