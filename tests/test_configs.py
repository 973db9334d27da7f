"""The paper configs (Sec. 4.1-4.4): they load, validate, hold the paper's numbers, and train.

Every config x variant loads and passes the trainer's own checks; the values the paper fixes
are asserted against the paper (and the schedules evaluated at key steps); each smoke variant
trains 2 steps end to end through `trainer.train_and_evaluate`, on `tfds.testing.mock_data`
(WMT14, Wikipedia, GLUE) or on a tiny synthetic enwik8 built from a zip, with the network
switched off.
"""

import contextlib
import dataclasses
import importlib
import json
import math
import os
import re
import shlex
import socket
from pathlib import Path

import numpy as np
import optax
import pytest
import tensorflow_datasets as tfds
from flax import nnx

from configs import common, default
from roformer_jax import errors, models
from roformer_jax.training import data, optim, tasks, trainer
from roformer_jax.evaluation import evaluate
from roformer_jax.training.data import ByteTokenizer

CONFIGS_DIR = Path(__file__).parents[1] / "configs"
GLUE_TASKS = ("mrpc", "sst2", "qnli", "stsb", "qqp", "mnli")
BASELINES = {  # config -> its baseline variants (besides the paper's RoPE model, "")
    "wmt14_ende_base": ("", "sinusoidal"),
    "bert_base_mlm": ("", "bert"),
    "glue": GLUE_TASKS,
    "enwik8_performer": ("", "norope"),
}
# Experiment configs (not the paper's own setups): they load and validate like the rest;
# tests/test_gettext.py trains the gettext smoke variant on a locale directory it writes.
EXPERIMENT_CONFIGS = [("gettext_translate", ""), ("gettext_translate", "sinusoidal")]
ALL = [(name, arg) for name, args in BASELINES.items() for arg in args] + EXPERIMENT_CONFIGS
SMOKE = [(name, ",".join(filter(None, (arg, "smoke")))) for name, arg in ALL if not (
    name == "glue" and arg not in ("mrpc", "stsb"))]
# Trained end to end (seconds each); the baseline variants' smoke models take one gradient
# step on a real batch instead, which keeps this file under a minute on 2 cores.
# (enwik8_performer's smoke variant is offline: tests/test_docs.py trains it from its docstring.)
SMOKE_RUNS = [("wmt14_ende_base", "smoke"), ("bert_base_mlm", "smoke"), ("glue", "mrpc,smoke"),
              ("glue", "stsb,smoke"), ("vit_shapes", "smoke")]
BASELINE_SMOKE = [("wmt14_ende_base", "sinusoidal,smoke", "sinusoidal"), ("bert_base_mlm", "bert,smoke", "learned"),
                  ("enwik8_performer", "norope,smoke", "none")]


def load(name: str, arg: str = ""):
  return importlib.import_module(f"configs.{name}").get_config(arg)


def schedule_at(config, *steps):
  schedule = optim.make_schedule(config.optim, config.total_steps)
  return [float(schedule(s)) for s in steps]


def assert_preset(config, preset: str, **except_):
  want = {**models.PRESETS[preset], **except_}
  got = {k: config.model[k] for k in want}
  assert got == want


# --------------------------------------------------------------------------------------
# Every config and variant loads and validates.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,arg", ALL + SMOKE)
def test_config_loads_with_every_key_and_validates(name, arg):
  config = load(name, arg)
  reference = default.get_config()
  assert set(reference) <= set(config), set(reference) - set(config)
  assert set(config.data) == set(data.default_data_config())
  assert set(config.optim) == set(optim.default_optim_config())
  trainer.check_config(config)  # task, step counts, every ModelConfig field, axis rules
  cfg = tasks.model_config(config)
  assert cfg.vocab_size == config.data.vocab_size or config.data.tokenizer == "bytes"
  optim.make_optimizer(config.optim, config.total_steps)
  assert config.batch_size % 8 == 0  # divides the tests' 8 fake devices (and 8-GPU hosts)
  assert config.init_from == ""  # scratch unless a run names its pre-trained encoder


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS_DIR.glob("*.py") if p.stem not in ("__init__", "common", "workdir")))  # workdir.py reads a run's config.json
def test_every_field_has_a_comment(name):
  """docs/training.md says every field of every config carries a comment (variant blocks too)."""
  source = (CONFIGS_DIR / f"{name}.py").read_text()
  fields = [line for line in source.splitlines()
            if re.match(r"\s+config\.[\w.]+ = ", line) or re.match(r"\s+config\.[\w.]+\.update\(", line)]
  assert fields and [line for line in fields if "#" not in line] == []


@pytest.mark.parametrize("name", BASELINES)
def test_docstring_starts_with_the_run_command_and_every_field_has_a_comment(name):
  source = (CONFIGS_DIR / f"{name}.py").read_text()
  doc = importlib.import_module(f"configs.{name}").__doc__.strip().splitlines()
  first = "glue.py:mrpc" if name == "glue" else f"{name}.py"
  assert doc[2].strip().startswith(f"python train.py --config configs/{first} --workdir "), doc[:3]
  fields = [line for line in source.splitlines()
            if re.match(r"\s+config\.[\w.]+ = ", line) or re.match(r"\s{6}\w+=.*,", line)]
  assert len(fields) > 40
  assert [line for line in fields if "#" not in line] == []


@pytest.mark.parametrize("name", BASELINES)
def test_unknown_variants_are_rejected_naming_the_allowed_ones(name):
  module = importlib.import_module(f"configs.{name}")
  with pytest.raises(ValueError, match=r"unknown variant.*'tiny'.*allowed.*'smoke'"):
    module.get_config("mrpc,tiny" if name == "glue" else "tiny")
  with pytest.raises(ValueError, match="more than once"):
    module.get_config("mrpc,smoke,smoke" if name == "glue" else "smoke,smoke")


def test_glue_needs_exactly_one_task():
  for arg in ("", "smoke", "mrpc,stsb"):
    with pytest.raises(ValueError, match=r"exactly one GLUE task.*'mrpc', 'sst2', 'qnli', 'stsb', 'qqp', 'mnli'"):
      load("glue", arg)


def test_parse_variants_keeps_order_and_ignores_blanks():
  assert common.parse_variants(" a, ,b ", ("a", "b", "smoke"), config_name="x") == ["a", "b"]
  assert common.parse_variants("", ("a",), config_name="x") == []


# --------------------------------------------------------------------------------------
# The paper's numbers.
# --------------------------------------------------------------------------------------


def test_wmt14_is_transformer_base_with_the_sec_4_1_optimiser():
  config = load("wmt14_ende_base")
  assert config.task == "seq2seq"
  assert_preset(config, "transformer-base")
  assert (config.model.d_model, config.model.num_layers, config.model.num_heads, config.model.d_ff) == (512, 6, 8, 2048)
  assert config.model.position == "rope" and config.model.tie_embeddings
  assert config.data.dataset == "wmt14_translate/de-en"
  assert (config.data.tokenizer, config.data.tokenizer_model_type, config.data.vocab_size) == ("sentencepiece", "bpe", 37000)
  assert config.model.vocab_size == 37000
  assert config.label_smoothing == 0.1
  assert (config.optim.optimizer, config.optim.b1, config.optim.b2) == ("adam", 0.9, 0.98)
  assert config.optim.schedule == "inverse_sqrt" and config.optim.warmup_steps == 4000
  lr0, lr_mid, lr_peak, lr_16k = schedule_at(config, 0, 2000, 4000, 16000)
  np.testing.assert_allclose([lr0, lr_mid, lr_peak, lr_16k], [1e-7, (1e-7 + 5e-4) / 2, 5e-4, 2.5e-4], rtol=1e-6)
  assert config.keep_checkpoints >= config.eval.average_last == 5  # Sec. 4.1 averages the last 5
  assert load("wmt14_ende_base", "sinusoidal").model.position == "sinusoidal"


def test_bert_mlm_is_roformer_base_with_adamw_1e_5():
  config = load("bert_base_mlm")
  assert config.task == "mlm"
  assert_preset(config, "roformer-base")
  assert (config.batch_size, config.data.max_length, config.total_steps) == (64, 512, 100_000)
  assert config.data.dataset == "wikipedia" and config.data.tokenizer == "sentencepiece"
  assert (config.data.mlm_probability, config.data.mlm_mask_ratio, config.data.mlm_random_ratio) == (0.15, 0.8, 0.1)
  assert config.optim.optimizer == "adamw" and config.optim.learning_rate == 1e-5
  assert schedule_at(config, 0, 50_000, 100_000) == pytest.approx([1e-5] * 3)
  assert config.model.position == "rope"
  assert config.data.document_mask is False  # rows span documents: no mask (RoBERTa's FULL-SENTENCES)
  bert = load("bert_base_mlm", "bert")
  assert bert.model.position == "learned" and bert.model.max_position == bert.data.max_length == 512
  with pytest.raises(ValueError, match="BookCorpus is not in TFDS"):
    data.get_spec("bookcorpus")


def test_bert_mlm_training_step_asks_cudnn_on_a_gpu(monkeypatch, attention_calls):
  # B3 on an H100: this config's packed rows (a segment mask), attention dropout and float32
  # compute each kept it off cuDNN's fused attention (60 ms per step with it, 98-146 without).
  import jax
  import jax.numpy as jnp
  config = load("bert_base_mlm", "smoke")
  assert config.data.document_mask is False and config.model.attention_dropout == 0.0
  assert config.model.dtype == "bfloat16" and config.model.param_dtype == "float32"
  trainer.check_config(config)
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")  # what attention/softmax.py asks
  task = tasks.get(config.task)
  model = task.build_model(config, nnx.Rngs(0))
  b, t, m = 2, config.data.max_length, 8
  ids = np.random.default_rng(0).integers(5, config.model.vocab_size, (b, t)).astype(np.int32)
  batch = {"inputs": ids, "targets": ids, "weights": np.zeros((b, t), np.float32),  # the pipeline's
           "positions": np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)),  # training rows:
           "token_type_ids": np.zeros((b, t), np.int32),  # no segment_ids (tests/test_data.py)
           "masked_positions": np.zeros((b, m), np.int32), "masked_targets": ids[:, :m],
           "masked_weights": np.ones((b, m), np.float32)}
  task.loss_sums(model, {k: jnp.asarray(v) for k, v in batch.items()}, deterministic=False)
  asked = [(c["implementation"], c["masked"], c["dtype"]) for c in attention_calls]
  assert asked == [("cudnn", False, jnp.dtype(jnp.bfloat16))] * config.model.num_layers


@pytest.mark.parametrize("task", GLUE_TASKS)
def test_glue_task_labels_epochs_and_linear_schedule(task):
  config = load("glue", task)
  assert config.task == "classification" and config.data.dataset == f"glue/{task}"
  assert config.num_labels == {"stsb": 1, "mnli": 3}.get(task, 2) == data.get_spec(f"glue/{task}").num_classes
  assert (config.batch_size, config.data.max_length) == (32, 512)
  train_size = importlib.import_module("configs.glue").SPLIT_SIZES[task][0]
  assert config.total_steps == math.ceil(train_size / 32) * 3  # 3 epochs
  assert (config.model.d_model, config.model.num_layers, config.model.num_heads) == (768, 12, 12)
  assert config.optim.optimizer == "adamw" and config.optim.schedule == "linear"
  total = config.total_steps
  np.testing.assert_allclose(schedule_at(config, 0, total // 2, total), [2e-5, 2e-5 * (1 - (total // 2) / total), 0.0],
                             rtol=1e-5, atol=1e-12)


def test_enwik8_is_the_sec_4_4_performer():
  config = load("enwik8_performer")
  assert config.task == "lm" and config.data.dataset == "enwik8" and config.data.tokenizer == "bytes"
  assert_preset(config, "performer-enwik8", vocab_size=ByteTokenizer.vocab_size)
  assert (config.model.num_layers, config.model.d_model, config.model.num_heads) == (12, 768, 12)
  assert (config.model.attention, config.model.feature_map, config.model.position) == ("linear", "favor", "rope")
  assert (config.batch_size, config.data.max_length) == (128, 1024)
  assert config.optim.learning_rate == 1e-4 and schedule_at(config, 0, 99_999) == pytest.approx([1e-4] * 2)
  assert config.feature_redraw_every == 1000
  assert load("enwik8_performer", "norope").model.position == "none"


# --------------------------------------------------------------------------------------
# Tasks: the classification path honours the padding rows' zero weights.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["mrpc", "stsb"])
def test_classification_loss_skips_zero_weight_rows(task):
  config = load("glue", f"{task},smoke")
  model = tasks.build_model(config, nnx.Rngs(0))
  rng = np.random.default_rng(0)
  ids = rng.integers(5, config.model.vocab_size, (4, 8)).astype(np.int32)
  label = np.array([1, 0, 1, 1], np.int32) if config.num_labels > 1 else np.array([0.2, 0.9, 3.0, 4.0], np.float32)
  batch = {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": np.ones_like(ids),
           "label": label, "weights": np.array([1, 1, 0, 0], np.float32)}
  real = {k: v[:2] for k, v in batch.items()}
  padded, unpadded = (tasks.loss_sums(model, b, task="classification") for b in (batch, real))
  assert float(padded["weight"]) == 2.0
  np.testing.assert_allclose(float(padded["loss"]), float(unpadded["loss"]), rtol=1e-6)


# --------------------------------------------------------------------------------------
# Two training steps of every smoke variant, end to end, offline.
# --------------------------------------------------------------------------------------


@pytest.fixture
def no_network(monkeypatch):
  def refuse(*args, **kwargs):
    raise OSError(f"test_configs: network access attempted: {args}")

  monkeypatch.setattr(socket.socket, "connect", refuse)
  monkeypatch.setattr(socket, "create_connection", refuse)


def rows(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


@contextlib.contextmanager
def offline_data(name, data_dir):
  """The smoke data: the tiny synthetic enwik8 built in data_dir, or TFDS mock data."""
  if name == "enwik8_performer":
    importlib.import_module("configs.enwik8_performer").prepare_synthetic_enwik8(data_dir)
    yield
  elif name == "vit_shapes":  # shapes2d is offline: rendered from seeded scenes on first use
    yield
  else:
    with tfds.testing.mock_data(num_examples=16, policy=tfds.testing.MockPolicy.USE_CODE):
      yield


@pytest.mark.slow
@pytest.mark.parametrize("name,arg", SMOKE_RUNS)
def test_smoke_variant_trains_two_steps(name, arg, tmp_path, no_network, monkeypatch):
  config = load(name, arg)
  config.data.data_dir = str(tmp_path / "data")
  # A stand-in accelerator peak of 1 TFLOP/s, so the MFU path (GPU/TPU only) runs here too.
  monkeypatch.setattr(trainer.metrics_lib, "device_peak_flops", lambda *a, **k: 1e12)
  with offline_data(name, tmp_path / "data"):
    result = trainer.train_and_evaluate(config, str(tmp_path / "work"))
  assert result["step"] == 2 and math.isfinite(result["loss"])
  assert "2" in os.listdir(tmp_path / "work" / "checkpoints")
  train = [r for r in rows(tmp_path / "work") if "loss" in r]
  evals = [r for r in rows(tmp_path / "work") if "eval_loss" in r]
  assert [r["step"] for r in train] == [1, 2] and all(math.isfinite(r["grad_norm"]) for r in train)
  assert all(0 < r["mfu"] < 1 for r in train), train
  if config.task == "mlm":  # MFU = tokens/s x FLOPs per token / (peak x devices), head at the scored slots
    import jax
    from roformer_jax.training import metrics
    from roformer_jax.training.data import pipeline
    model = tasks.build_model(config, nnx.Rngs(0))
    t = config.data.max_length
    per_token = metrics.mlm_train_flops_per_token(
        metrics.count_params(model), metrics.mlm_head_params(model), num_layers=config.model.num_layers,
        seq_len=t, d_model=config.model.d_model, scored_fraction=pipeline.mlm_max_predictions(config.data, t) / t)
    for r in train:
      assert r["mfu"] == pytest.approx(r["tokens_per_sec"] * per_token / (1e12 * jax.device_count()), rel=1e-6)
  assert [r["step"] for r in evals] == [2] and math.isfinite(evals[0]["eval_loss"])
  if config.task != "classification":  # a freshly initialised model is near uniform over the vocabulary
    assert evals[0]["eval_loss"] < math.log(config.model.vocab_size) + 2.0, evals
  # eval.py's path on the same workdir: the task's metrics from a (short) full pass.
  config.eval.max_batches = 2
  config.eval.length_factors = (1,)
  config.eval.length_batches = 1
  config.eval.beam_size = 2
  config.eval.max_decode_length = 8
  with offline_data(name, tmp_path / "data"):
    metrics = evaluate.evaluate(config, str(tmp_path / "work"))["metrics"]
  expected = {"classification": {"f1", "accuracy"} if "stsb" not in arg else {"pearson", "spearman"},
              "seq2seq": {"loss", "bleu"}, "image": {"loss", "accuracy", "images"}}.get(config.task,
                                                                                   {"loss", "bits_per_token"})
  assert expected <= set(metrics), metrics
  if config.task == "image":  # a label has no perplexity and an image is not a token
    assert not {"perplexity", "bits_per_token", "tokens"} & set(metrics), metrics
  assert list((tmp_path / "work").glob("eval_results*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("name,arg,position", BASELINE_SMOKE)
def test_baseline_variant_takes_a_finite_gradient_step_on_its_data(name, arg, position, tmp_path, no_network):
  config = load(name, arg)
  assert config.model.position == position
  config.data.data_dir = str(tmp_path / "data")
  with offline_data(name, tmp_path / "data"):
    batch = next(data.make_iterator(config.data, task=config.task, split="train", batch_size=config.batch_size,
                                    seed=config.seed))
  model = tasks.build_model(config, nnx.Rngs(params=0, dropout=1))

  def mean_loss(model):
    sums = tasks.loss_sums(model, batch, task=config.task, label_smoothing=config.label_smoothing,
                           deterministic=False)
    return sums["loss"] / sums["weight"]

  loss, grads = nnx.jit(lambda m: nnx.value_and_grad(mean_loss)(m))(model)
  grad_norm = float(optax.tree.norm(grads))
  assert math.isfinite(float(loss)) and math.isfinite(grad_norm) and grad_norm > 0


# --------------------------------------------------------------------------------------
# Every ModelConfig field is settable, in every config and from the command line.
# --------------------------------------------------------------------------------------

MODEL_FIELDS = sorted(f.name for f in dataclasses.fields(models.ModelConfig))


@pytest.mark.parametrize("name,arg", ALL + SMOKE + [("default", ""), ("default", "smoke"), ("multistage", ""),
                                                   ("multistage", "smoke")])
def test_every_model_field_is_a_key_of_every_config(name, arg):
  assert sorted(load(name, arg).model) == MODEL_FIELDS


def _parse_config_flags(*overrides):
  """The config after the command line `--config=configs/default.py <overrides>`, as train.py parses it."""
  from absl import flags
  from ml_collections import config_flags
  argv = ["train.py", f"--config={CONFIGS_DIR / 'default.py'}", *overrides]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
  values(argv)
  return values.config


def _documented_model_flags():
  root = CONFIGS_DIR.parent
  texts = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
  found = []
  for path in texts:
    for line in path.read_text().splitlines():
      for match in re.finditer(r"--config\.model\.(\w+)=(\"[^\"]*\"|'[^']*'|[^\s`)]+)", line):
        found.append((path.name, match.group(1), shlex.split(match.group(2))[0]))
  return found


def test_documented_model_flags_exist():
  assert len(_documented_model_flags()) >= 5  # docs/training.md's examples at least


@pytest.mark.parametrize("doc,field,value", _documented_model_flags())
def test_each_documented_model_flag_parses_and_validates(doc, field, value):
  config = _parse_config_flags(f"--config.model.{field}={value}")
  cfg = tasks.model_config(config)  # ModelConfig validates the value
  assert getattr(cfg, field) is not None or value == "None"


def test_dict_and_none_fields_take_values_from_the_command_line():
  config = _parse_config_flags("--config.model.rope_scaling={'rope_type': 'yarn', 'factor': 4.0, "
                               "'original_max_position_embeddings': 128}", "--config.model.head_dim=16",
                               '--config.eval.rope_scaling={"rope_type": "linear", "factor": 2.0}')
  cfg = tasks.model_config(config)
  assert dict(cfg.rope_scaling) == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}
  assert cfg.head_dim == 16 and cfg.head_size == 16
  assert evaluate.eval_settings(config)["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}
  config.model.rope_scaling = {"rope_type": "linear", "factor": 4.0}  # and from Python, as a plain dict
  assert tasks.model_config(config).rope_scaling is not None


def test_unknown_model_keys_are_named():
  with pytest.raises(ValueError, match=r"unknown model keys \['d_modle'\]"):
    common.model_config(d_modle=64)


# --------------------------------------------------------------------------------------
# Context parallelism: every sequence length the run feeds the model is checked at start.
# --------------------------------------------------------------------------------------


def _context4(name, arg, overrides):
  config = load(name, arg)
  config.mesh.update(dict(data=2, context=4))
  return common.set_dotted(config, overrides)


# (config, variant, overrides, the error, or None where the run is accepted). A bidirectional
# row (the seq2seq source, mlm, classification) needs a multiple of C = 4; a causal one (the
# lm row, the seq2seq target) of 2C = 8, for the zig-zag load balance.
CP_LENGTHS = [
    ("wmt14_ende_base", "smoke", {"data.max_length": 36, "data.max_target_length": 40}, None),
    ("wmt14_ende_base", "smoke", {"data.max_length": 32, "data.max_target_length": 36},
     r"^config.data.max_target_length=36 is not a multiple of 8: mesh.context=4 .*zig-zag.*e.g. 40"),
    ("wmt14_ende_base", "smoke", {"data.max_length": 30, "data.max_target_length": 40},
     r"^config.data.max_length=30 is not a multiple of 4: mesh.context=4 .*e.g. 32"),
    # max_target_length=0: the target takes max_length, so that length is causal too.
    ("wmt14_ende_base", "smoke", {"data.max_length": 36, "data.max_target_length": 0},
     r"^config.data.max_length=36 \(the target length too, as config.data.max_target_length=0\) is not a multiple of 8"),
    ("wmt14_ende_base", "smoke", {"data.max_target_length": 40, "stages": [
        {"steps": 1, "max_length": 20, "batch_size": 8}, {"steps": 1, "max_length": 36, "batch_size": 8}]}, None),
    ("bert_base_mlm", "smoke", {"data.max_length": 36}, None),
    ("glue", "mrpc,smoke", {"data.max_length": 36}, None),
    ("default", "smoke", {"data.max_length": 36}, r"^config.data.max_length=36 is not a multiple of 8"),
    ("default", "smoke", {"stages": [{"steps": 1, "max_length": 32, "batch_size": 8},
                                     {"steps": 1, "max_length": 36, "batch_size": 8}]},
     r"^config.stages\[1\].max_length=36 is not a multiple of 8"),
]


def test_every_length_the_run_uses_is_checked_at_config_load():
  for name, arg, overrides, error in CP_LENGTHS:
    config = _context4(name, arg, overrides)
    if error is None:
      trainer.check_config(config)
    else:
      with pytest.raises(ValueError, match=error):
        trainer.check_config(config)


@pytest.mark.slow
def test_a_seq2seq_target_the_context_axis_cannot_split_is_refused_before_training(tmp_path, no_network):
  """mesh.context=-1 (4 with data=2 on 8 devices): the size is known once the mesh is made,
  and the target length is refused then, naming its key, before the workdir exists."""
  config = _context4("wmt14_ende_base", "smoke", {"data.max_length": 32, "data.max_target_length": 36})
  config.mesh.context = -1
  config.data.data_dir = str(tmp_path / "data")
  match = r"^invalid config: config.data.max_target_length=36 is not a multiple of 8: mesh.context=4 "
  with offline_data("wmt14_ende_base", tmp_path / "data"), pytest.raises(errors.UserError, match=match):
    trainer.train_and_evaluate(config, str(tmp_path / "work"))
  assert not (tmp_path / "work").exists()


@pytest.mark.slow
def test_a_seq2seq_source_of_a_multiple_of_c_trains_under_context_parallelism(tmp_path, no_network, monkeypatch):
  """Source 36 on context=4 (9 tokens per device; the source is bidirectional, so C divides
  it enough), target 40 (2C = 8 chunks): one step, whose loss is one device's."""
  from roformer_jax import context_parallel
  traced, check = [], context_parallel.check_length  # (key, length, context size) the models traced
  monkeypatch.setattr(context_parallel, "check_length", lambda length, *, key, **kw: (
      traced.append((key, length, context_parallel.size())), check(length, key=key, **kw))[1])
  losses = {}
  for mesh in ({"data": 2, "context": 4}, {"data": 8, "context": 1}):
    config = _context4("wmt14_ende_base", "smoke", {"data.max_length": 36, "data.max_target_length": 40,
                                                    "total_steps": 1, "mesh": mesh})
    config.data.data_dir = str(tmp_path / "data")
    work = tmp_path / f"work{mesh['context']}"
    with offline_data("wmt14_ende_base", tmp_path / "data"):
      result = trainer.train_and_evaluate(config, str(work))
    assert result["step"] == 1
    losses[mesh["context"]] = [r["loss"] for r in rows(work) if "loss" in r]
  assert {("src_ids.shape[1]", 36, 4), ("tgt_ids.shape[1]", 40, 4)} <= set(traced), traced  # really split
  assert np.isfinite(losses[4]).all()
  np.testing.assert_allclose(losses[4], losses[1], rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("position", ["learned", "rope_mixed"])
def test_a_vit_evaluates_at_another_resolution_on_its_trained_model(position, tmp_path, no_network, smoke_runs):
  """E7's evaluation: a ViT trained at 16 px is evaluated at 32 px by overriding data.image_size
  only; the model keeps its grid (vit.image_size: a learned table of the trained 4 x 4 grid,
  resized at 8 x 8), so its checkpoint restores. Before vit.image_size, the learned arm's
  checkpoint did not match the model built for the new resolution."""
  root = smoke_runs.copy(f"vit_{position}", tmp_path / "vit")  # vit_shapes:smoke with this position, trained
  config = load("vit_shapes", "smoke")
  config.vit.position = position
  config.data.data_dir = str(root / "data")
  config.data.image_size = 32
  config.eval.max_batches = 1
  metrics = evaluate.evaluate(config, str(root / "work"))["metrics"]
  assert math.isfinite(metrics["loss"]) and 0.0 <= metrics["accuracy"] <= 1.0 and metrics["images"] > 0
  # The training's image sample names both classes (issue 40), from shapes2d's own ClassLabel.
  sample = json.loads((root / "work" / "samples.jsonl").read_text().splitlines()[-1])
  from roformer_jax.training.data import shapes
  assert sample["prompt"] == "validation image 0" and sample["reference"].split(" (")[0] in shapes.LABELS
  assert sample["output"].split(" (")[0] in shapes.LABELS and ", p=" in sample["output"]
