"""config.init_from: a fine-tuning run starts from a pre-trained encoder (Sec. 4.3 fine-tunes the
MLM-pre-trained RoFormer), from one of our runs or from a transformers RoFormer directory."""

import json
import os
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
import tensorflow_datasets as tfds
from flax import nnx

from configs import default
from roformer_jax import hf, models
from roformer_jax.training import checkpoints, tasks, trainer
from tests import smoke

FIXTURE = Path(__file__).parent / "fixtures" / "hf_roformer_tiny" / "factorized"


def mlm_config():
  """The shared MLM smoke run's config (tests/smoke.py: a BERT-like encoder, two token types)."""
  return smoke.smoke_mlm()


def classifier_config(init_from: str, **model):
  from configs import glue
  c = glue.get_config("mrpc,smoke")
  c.data.tokenizer = "bytes"  # the pre-training run's vocabulary
  c.model.update(dict(mlm_config().model.to_dict(), **model))
  c.model.type_vocab_size = 2
  c.init_from = init_from
  c.async_checkpoints = False
  return c


@pytest.fixture(scope="module")
def mlm_run(smoke_runs, tmp_path_factory):
  """The shared MLM smoke run (trained once per test process), copied for this file."""
  return smoke_runs.copy("mlm", tmp_path_factory.mktemp("mlm") / "work")


def flat(tree) -> dict[str, np.ndarray]:
  """'layers/0/attention/query/kernel' -> array, without orbax's trailing 'value' and RNG state."""
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    keys = [str(getattr(k, "key", k)) for k in path]
    if "rngs" not in keys:
      out["/".join(k for k in keys if k != "value")] = np.asarray(leaf)
  return out


def encoder_of_checkpoint(workdir):
  ckdir = os.path.join(workdir, "checkpoints")
  with ocp.CheckpointManager(ckdir, options=ocp.CheckpointManagerOptions(read_only=True)) as mgr:
    state = mgr.restore(mgr.latest_step(), args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
  return flat(state["0"]["roformer"])


def assert_same(a: dict, b: dict):
  assert sorted(a) == sorted(b)
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.slow
def test_init_from_copies_the_encoder_and_leaves_the_head_fresh(mlm_run):
  config = classifier_config(str(mlm_run))
  model = tasks.build_model(config, nnx.Rngs(0))
  head_before = flat(nnx.to_pure_dict(nnx.state(model.out_proj)))
  scratch = flat(nnx.to_pure_dict(nnx.state(model.roformer, nnx.Param)))
  info = checkpoints.init_from(model, str(mlm_run))
  got = flat(nnx.to_pure_dict(nnx.state(model.roformer, nnx.Param)))
  assert info["loaded"] == len(got) > 10
  assert_same(got, encoder_of_checkpoint(mlm_run))
  assert not np.array_equal(got["layers/0/attention/query/kernel"], scratch["layers/0/attention/query/kernel"])
  assert_same(head_before, flat(nnx.to_pure_dict(nnx.state(model.out_proj))))
  assert "out_proj/kernel" in info["fresh"] and not any(f.startswith("roformer") for f in info["fresh"])


@pytest.mark.slow
def test_fine_tuning_run_starts_from_the_pre_trained_encoder(mlm_run, tmp_path):
  config = classifier_config(str(mlm_run))
  config.optim.learning_rate = 0.0  # no update: the run's encoder must stay the pre-trained one
  config.data.data_dir = str(tmp_path / "data")
  with tfds.testing.mock_data(num_examples=16, policy=tfds.testing.MockPolicy.USE_CODE):
    trainer.train_and_evaluate(config, str(tmp_path / "ft"))
  assert_same(encoder_of_checkpoint(mlm_run), encoder_of_checkpoint(tmp_path / "ft"))
  saved = json.loads((tmp_path / "ft" / "config.json").read_text())
  assert saved["init_from"] == str(mlm_run) and saved["task"] == "classification"


@pytest.mark.slow
def test_a_different_architecture_is_named(mlm_run):
  model = tasks.build_model(classifier_config(str(mlm_run), d_ff=96), nnx.Rngs(0))
  with pytest.raises(checkpoints.InitFromError, match=r"d_ff: pre-trained 64 vs config 96"):
    checkpoints.init_from(model, str(mlm_run))


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("lm")
  lm = default.get_config("smoke")
  lm.data.data_dir = os.environ.get("ROFORMER_TEST_DATA_DIR", "")
  lm.async_checkpoints = False
  trainer.train_and_evaluate(lm, str(workdir))
  return workdir


def extend_config(source, **model):
  c = default.get_config("extend,smoke")
  c.init_from = str(source)
  c.model.update(model)
  return c


@pytest.mark.slow
def test_a_causal_lm_starts_from_a_trained_lm_at_a_new_length_and_rope(lm_run, mlm_run):
  # Context extension: the whole LM is copied; the RoPE scaling and base may change, and the
  # longer rows change no parameter.
  config = extend_config(lm_run, rope_theta=40000.0)
  assert config.data.max_length == 4 * default.get_config("smoke").data.max_length
  model = tasks.build_model(config, nnx.Rngs(1))
  info = checkpoints.init_from(model, str(lm_run))
  ckdir = os.path.join(lm_run, "checkpoints")
  with ocp.CheckpointManager(ckdir, options=ocp.CheckpointManagerOptions(read_only=True)) as mgr:
    state = mgr.restore(mgr.latest_step(), args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
  got = flat(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
  assert_same(got, flat(state["0"]))
  assert info["loaded"] == len(got) and info["fresh"] == []
  assert info["rope"] == {"rope_theta": (10000.0, 40000.0),
                          "rope_scaling": (None, dict(config.model.rope_scaling))}
  # Anything else that differs is named; an MLM run is not an LM to extend.
  with pytest.raises(checkpoints.InitFromError, match=r"d_ff: pre-trained 64 vs config 96"):
    checkpoints.init_from(tasks.build_model(extend_config(lm_run, d_ff=96), nnx.Rngs(0)), str(lm_run))
  with pytest.raises(checkpoints.InitFromError, match=r"is a task='mlm' run; a 'lm' run starts from a 'lm' run"):
    checkpoints.init_from(tasks.build_model(extend_config(mlm_run), nnx.Rngs(0)), str(mlm_run))
  with pytest.raises(checkpoints.InitFromError, match=r"transformers directory"):
    checkpoints.init_from(model, FIXTURE)
  trainer.check_config(config)  # task lm may name an init_from


@pytest.mark.slow
def test_a_layer_types_rope_retune_is_reported(lm_run):
  # Issue 37 item 5: a fine-tune that changes only a layer type's theta reported `{}` (the smoke LM has one layer,
  # of type g).
  config = extend_config(lm_run, layer_types=("g",), layer_settings={"g": {"rope": {"theta": 5e6}}},
                         rope_scaling=None)
  info = checkpoints.init_from(tasks.build_model(config, nnx.Rngs(0)), str(lm_run))
  assert info["rope"] == {"layer_settings['g'].rope.theta": (10000.0, 5e6)}


def test_the_rope_report_lists_each_layer_types_retune():
  base = models.ModelConfig(vocab_size=32, d_model=16, num_layers=4, num_heads=2, d_ff=32, layer_types=("l", "g"),
                            layer_settings={"l": {"window": 8}, "g": {"rope": {"theta": 1e6}}})
  settings = lambda g: {"l": {"window": 8}, "g": {"rope": g}}
  yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
  report = lambda **kw: checkpoints._rope_report(base, base.replace(**kw))
  assert report() == {}
  assert report(layer_settings=settings({"theta": 5e6})) == {"layer_settings['g'].rope.theta": (1e6, 5e6)}
  assert report(layer_settings=settings({"theta": 1e6, "scaling": yarn})) == {
      "layer_settings['g'].rope.scaling": (None, yarn)}
  # The model's theta: its own line, and type g (which keeps 1e6) is not listed; a type's override dropped is.
  assert report(rope_theta=2e4) == {"rope_theta": (1e4, 2e4)}
  assert report(layer_settings=settings(None)) == {"layer_settings['g'].rope.theta": (1e6, 1e4)}


@pytest.mark.slow
def test_a_causal_lm_run_or_an_empty_directory_is_refused(lm_run, tmp_path):
  import shutil
  shutil.copytree(lm_run, tmp_path / "lm")
  os.remove(tmp_path / "lm" / "config.json")  # skip the architecture check: reach the encoder lookup
  model = tasks.build_model(classifier_config(""), nnx.Rngs(0))
  with pytest.raises(checkpoints.InitFromError, match="no 'roformer' encoder"):
    checkpoints.init_from(model, str(tmp_path / "lm"))
  (tmp_path / "empty").mkdir()
  with pytest.raises(checkpoints.InitFromError, match="holds no checkpoint"):
    checkpoints.init_from(model, str(tmp_path / "empty"))
  with pytest.raises(ValueError, match="does not exist"):
    trainer.check_config(classifier_config(str(tmp_path / "missing")))


def test_init_from_a_transformers_directory():
  reference = hf.from_pretrained(FIXTURE, head="encoder")
  cfg = reference.config
  model = models.RoFormerForSequenceClassification(cfg, 3, rngs=nnx.Rngs(0))
  checkpoints.init_from(model, FIXTURE)
  encoder = reference if not hasattr(reference, "roformer") else reference.roformer
  assert_same(flat(nnx.to_pure_dict(nnx.state(encoder, nnx.Param))),
              flat(nnx.to_pure_dict(nnx.state(model.roformer, nnx.Param))))


def test_attention_implementation_is_not_architecture():
  from roformer_jax import models
  from roformer_jax.training import checkpoints
  cfg = models.ModelConfig(vocab_size=32, d_model=16, num_layers=1, num_heads=2, d_ff=32)
  checkpoints._check_same_architecture(cfg, cfg.replace(attention_implementation="xla", remat="full"), "src")
  with pytest.raises(checkpoints.InitFromError, match="d_ff"):
    checkpoints._check_same_architecture(cfg, cfg.replace(d_ff=64), "src")


@pytest.mark.slow
@pytest.mark.parametrize("form", ["{w}", "{w}/", "{w}/checkpoints", "{w}/checkpoints/", "{w}/checkpoints/{step}",
                                  "{w}/checkpoints/{step}/", "{w}/checkpoints/./{step}"])
def test_every_spelling_of_the_source_gets_the_architecture_check(mlm_run, form):
  # A trailing slash on a step directory used to miss <workdir>/config.json and skip the check:
  # the RoPE layout changes no shape, so the mismatched encoder then loaded without an error.
  step = max(int(d) for d in os.listdir(mlm_run / "checkpoints") if d.isdigit())
  model = tasks.build_model(classifier_config(str(mlm_run), rope_layout="half"), nnx.Rngs(0))
  with pytest.raises(checkpoints.InitFromError, match=r"rope_layout: pre-trained 'interleaved' vs config 'half'"):
    checkpoints.init_from(model, form.format(w=mlm_run, step=step))


@pytest.mark.slow
def test_a_damaged_checkpoint_is_skipped_from_a_workdir_and_refused_by_name(mlm_run, tmp_path, capsys):
  import shutil
  copy = tmp_path / "mlm"
  shutil.copytree(mlm_run, copy)
  newest = max(int(p) for p in os.listdir(copy / "checkpoints") if p.isdigit())
  data_file = max((copy / "checkpoints" / str(newest) / "state" / "ocdbt.process_0" / "d").iterdir(),
                  key=lambda p: p.stat().st_size)
  data = bytearray(data_file.read_bytes())
  data[len(data) // 2] ^= 1  # silent corruption: only the digest sees it
  data_file.write_bytes(bytes(data))
  model = tasks.build_model(classifier_config(str(copy)), nnx.Rngs(0))
  info = checkpoints.init_from(model, str(copy))
  assert info["source"].endswith(f"checkpoints/{newest - 1}")
  assert f"step {newest}" in capsys.readouterr().err
  with pytest.raises(checkpoints.InitFromError, match="damaged checkpoint: file .*SHA-256"):
    checkpoints.init_from(model, str(copy / "checkpoints" / str(newest)))


# ---- the ViT (issue 37 item 8): train low, fine-tune high -------------------------------------------------------


def vit_config(position: str, size: int = 16, init_from: str = "", **vit):
  """vit_shapes:smoke (the smoke_runs' "vit_<position>" runs are its 16-px, 4 x 4 grid) at `size` px."""
  c = smoke.vit_config(position)
  c.data.image_size = c.vit.image_size = size
  c.vit.update(vit)
  c.init_from = init_from
  c.async_checkpoints = False
  return c


@pytest.fixture(scope="module")
def vit_runs(smoke_runs, tmp_path_factory):
  """position -> the workdir of a trained vit_shapes:smoke run (its data/ beside it), copied on first use."""
  root, runs = tmp_path_factory.mktemp("vit"), {}

  def get(position: str) -> Path:
    if position not in runs:
      runs[position] = smoke_runs.copy(f"vit_{position}", root / position) / "work"
    return runs[position]
  return get


def model_of_checkpoint(workdir) -> dict[str, np.ndarray]:
  ckdir = os.path.join(workdir, "checkpoints")
  with ocp.CheckpointManager(ckdir, options=ocp.CheckpointManagerOptions(read_only=True)) as mgr:
    state = mgr.restore(mgr.latest_step(), args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
  return flat(state["0"])


@pytest.mark.slow
@pytest.mark.parametrize("position", ["learned", "rope_mixed"])
def test_a_vit_starts_at_a_higher_resolution_from_a_trained_vit(vit_runs, position):
  # The learned 4 x 4 table is resized to 6 x 6 as DeiT does; RoPE-Mixed's frequencies carry over unchanged.
  from roformer_jax import vit
  source = vit_runs(position)
  model = tasks.build_model(vit_config(position, size=24, init_from=str(source)), nnx.Rngs(1))
  info = checkpoints.init_from(model, str(source))
  got, trained = flat(nnx.to_pure_dict(nnx.state(model, nnx.Param))), model_of_checkpoint(source)
  assert info["loaded"] == len(got) and info["fresh"] == [] and info["rope"] == {}
  if position == "learned":
    assert info["resized"] == ["position_table 4x4 -> 6x6"]
    np.testing.assert_allclose(got.pop("position_table"),
                               vit.resize_position_table(trained.pop("position_table"), (6, 6)), atol=1e-6)
  else:
    assert info["resized"] == [] and "layers/0/attention/rope_frequencies" in got
  assert_same(got, trained)


@pytest.mark.slow
def test_a_vit_for_another_number_of_classes_keeps_a_fresh_head(vit_runs):
  import dataclasses

  from roformer_jax import vit
  c = vit_config("rope_mixed", size=24)
  model = vit.VisionTransformer(tasks.model_config(c), dataclasses.replace(tasks.vit_config(c), num_classes=3),
                                rngs=nnx.Rngs(1))
  head = flat(nnx.to_pure_dict(nnx.state(model.head)))
  info = checkpoints.init_from(model, str(vit_runs("rope_mixed")))
  assert info["fresh"] == ["head/bias", "head/kernel"] and info["resized"] == []
  assert_same(head, flat(nnx.to_pure_dict(nnx.state(model.head))))
  trained = {k: v for k, v in model_of_checkpoint(vit_runs("rope_mixed")).items() if not k.startswith("head/")}
  assert_same({k: v for k, v in flat(nnx.to_pure_dict(nnx.state(model, nnx.Param))).items()
               if not k.startswith("head/")}, trained)
  assert info["loaded"] == len(trained)


@pytest.mark.slow
def test_what_a_vit_cannot_carry_over_is_named(vit_runs, lm_run):
  learned = str(vit_runs("learned"))
  for position, patch, match in [("rope_axial", 4, r"vit.position: pre-trained 'learned' vs config 'rope_axial'"),
                                 ("learned", 8, r"vit.patch_size: pre-trained 4 vs config 8")]:
    model = tasks.build_model(vit_config(position, size=32, patch_size=patch), nnx.Rngs(0))
    with pytest.raises(checkpoints.InitFromError, match=match):
      checkpoints.init_from(model, learned)
  with pytest.raises(checkpoints.InitFromError, match=r"d_model: pre-trained 32 vs config 48"):
    c = vit_config("learned", size=24)
    c.model.d_model = 48
    checkpoints.init_from(tasks.build_model(c, nnx.Rngs(0)), learned)
  with pytest.raises(checkpoints.InitFromError, match=r"is a task='lm' run; a 'image' run starts from a 'image'"):
    checkpoints.init_from(tasks.build_model(vit_config("learned"), nnx.Rngs(0)), str(lm_run))


@pytest.mark.slow
def test_a_vit_fine_tuning_run_logs_what_it_resized(vit_runs, tmp_path, capsys):
  source = vit_runs("learned")
  config = vit_config("learned", size=24, init_from=str(source))
  config.optim.learning_rate = 0.0  # no update: the run's table stays the resized one
  config.data.data_dir = str(source.parent / "data")
  trainer.check_config(config)  # task image may name an init_from
  trainer.train_and_evaluate(config, str(tmp_path / "ft"))
  assert "resized: position_table 4x4 -> 6x6; fresh: nothing" in capsys.readouterr().out
  from roformer_jax import vit
  np.testing.assert_allclose(model_of_checkpoint(tmp_path / "ft")["position_table"],
                             vit.resize_position_table(model_of_checkpoint(source)["position_table"], (6, 6)),
                             atol=1e-6)
