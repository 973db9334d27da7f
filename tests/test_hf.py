"""roformer_jax.hf against transformers' RoFormer (tests/fixtures/hf_roformer_tiny).

The fixtures and their reference outputs come from scripts/make_hf_roformer_fixture.py, run in
a separate venv with torch and transformers; neither is needed here. The same script's
--write-export / --check-export modes check our save_pretrained output with transformers.
"""

import functools
import importlib.util
import json
import pathlib
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

from roformer_jax import hf, positional
from roformer_jax.rope import RotaryConfig
from roformer_jax.models import (CausalLM, ModelConfig, RoFormerForMaskedLM, RoFormerForSequenceClassification,
                                 RoFormerModel)

ROOT = pathlib.Path(__file__).parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hf_roformer_tiny"
NAMES = ("factorized", "rotary_value")
TOL = 1e-4


@functools.lru_cache(maxsize=None)
def _model(name):
  return hf.from_pretrained(FIXTURES / name)


@functools.lru_cache(maxsize=None)
def _ref(name):
  with np.load(FIXTURES / name / "reference.npz") as r:
    return {k: r[k] for k in r.files}


def _inputs(r):
  return r["input_ids"], dict(attention_mask=r["attention_mask"], token_type_ids=r["token_type_ids"])


def _slots(ids):
  """HF's positions: slot t has position t, padding or not."""
  return jnp.broadcast_to(jnp.arange(ids.shape[1], dtype=jnp.int32), ids.shape)


def _counted(r):
  """Our default positions (counting real tokens), passed explicitly to share one compile."""
  return positional.default_positions(r["input_ids"].shape, attention_mask=r["attention_mask"])


def _at(r):
  return np.broadcast_to(r["logit_positions"], (len(r["input_ids"]), len(r["logit_positions"])))


@nnx.jit
def _forward(model, ids, kw, positions=None, at=None):
  """(hidden states, head output or None), compiled once per model structure and shape."""
  kw = dict(kw, positions=positions)
  hidden = model.encode(ids, **kw)
  if isinstance(model, RoFormerModel):
    return hidden, None
  if isinstance(model, RoFormerForMaskedLM):
    return hidden, model(ids, masked_positions=at, **kw)
  return hidden, model(ids, **kw)


def _params(model):
  return {p: np.asarray(v.get_value()) for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def _with_config(model, **changes):
  """The same parameters in a model built from a changed config (a deliberately wrong variant)."""
  twin = nnx.eval_shape(lambda: type(model)(model.config.replace(**changes), rngs=nnx.Rngs(0)))
  graphdef = nnx.split(twin, nnx.Param, ...)[0]
  _, params, rest = nnx.split(model, nnx.Param, ...)
  return nnx.merge(graphdef, params, rest)


def _copy(tmp_path, name="factorized", *, edit_tensors=None, edit_config=None):
  """A copy of a fixture checkpoint with its tensors and/or config.json edited."""
  d = tmp_path / "ckpt"
  d.mkdir()
  tensors = load_file(FIXTURES / name / "model.safetensors")
  if edit_tensors:
    edit_tensors(tensors)
  save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
  config = json.loads((FIXTURES / name / "config.json").read_text())
  if edit_config:
    edit_config(config)
  (d / "config.json").write_text(json.dumps(config))
  return d


# ------------------------------------------------------------------------------ parity with transformers


@pytest.mark.parametrize("name", NAMES)
def test_fixture_config(name):
  model = _model(name)
  assert isinstance(model, RoFormerForMaskedLM)
  cfg = model.config
  assert (cfg.vocab_size, cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.d_ff) == (128, 32, 2, 4, 37)
  assert (cfg.position, cfg.norm, cfg.rope_layout, cfg.rope_theta) == ("rope", "post", "interleaved", 10000.0)
  if name == "factorized":
    assert (cfg.embed_size, cfg.rotary_value, cfg.tie_embeddings, cfg.activation) == (24, False, True, "gelu")
  else:
    assert (cfg.embed_size, cfg.rotary_value, cfg.tie_embeddings, cfg.activation) == (32, True, False, "gelu_new")
    assert cfg.type_vocab_size == 3


@pytest.mark.parametrize("name", NAMES)
def test_hidden_states_match_hf_with_slot_positions(name):
  r = _ref(name)
  ids, kw = _inputs(r)
  assert ids.shape[1] >= 512 and (r["attention_mask"] == 0).any() and (r["token_type_ids"] > 0).any()
  h = np.asarray(_forward(_model(name), ids, kw, _slots(ids), _at(r))[0])
  assert h.shape == r["last_hidden_state"].shape
  np.testing.assert_allclose(h, r["last_hidden_state"], rtol=0, atol=TOL)  # padding slots too


@pytest.mark.parametrize("name", NAMES)
def test_hidden_states_match_hf_on_real_tokens_default_positions(name):
  """Default positions count real tokens: the same as HF's for right padding, and for RoPE on
  q/k only (relative) the same attention for left padding too."""
  r = _ref(name)
  ids, kw = _inputs(r)
  h = np.asarray(_forward(_model(name), ids, kw, _counted(r), _at(r))[0])
  real = r["attention_mask"].astype(bool)
  left_padded = ~real[:, 0]
  rows = ~left_padded if _model(name).config.rotary_value else np.ones(len(ids), bool)
  assert rows.any() and left_padded.any()
  err = np.abs(h - r["last_hidden_state"])[rows][real[rows]]
  assert err.max() <= TOL


def test_rotary_value_is_absolute_so_left_padding_needs_slot_positions():
  """rotary_value rotates v by the key position and never rotates back, so the output depends
  on absolute positions: a left-padded row matches HF only with HF's slot positions."""
  r = _ref("rotary_value")
  ids, kw = _inputs(r)
  real = r["attention_mask"].astype(bool)
  row = int(np.flatnonzero(~real[:, 0])[0])
  h = np.asarray(_forward(_model("rotary_value"), ids, kw, _counted(r), _at(r))[0])
  assert np.abs(h - r["last_hidden_state"])[row][real[row]].max() > 0.1


@pytest.mark.parametrize("name", NAMES)
def test_mlm_logits_match_hf(name):
  r = _ref(name)
  ids, kw = _inputs(r)
  logits = np.asarray(_forward(_model(name), ids, kw, _slots(ids), _at(r))[1])
  assert logits.shape == r["logits"].shape and logits.dtype == np.float32
  np.testing.assert_allclose(logits, r["logits"], rtol=0, atol=TOL)


@pytest.mark.parametrize("name, changes", [
    ("rotary_value", dict(rotary_value=False)),  # rotary_value ignored
    ("factorized", dict(rope_layout="half")),  # wrong RoPE pairing
    ("factorized", dict(position="none")),  # RoPE dropped
])
def test_wrong_variants_are_far_from_hf(name, changes):
  """The fixtures are sensitive: each plausible mapping mistake moves the output far above TOL."""
  r = _ref(name)
  ids, kw = _inputs(r)
  wrong = _with_config(_model(name), **changes)
  h = np.asarray(_forward(wrong, ids, kw, _slots(ids), _at(r))[0])
  assert np.abs(h - r["last_hidden_state"]).max() > 100 * TOL


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("name", NAMES)
def test_save_reproduces_hf_files(tmp_path, name):
  """from_pretrained -> save_pretrained writes HF's own tensors bit for bit (embed_positions
  included) and an equivalent config.json."""
  hf.save_pretrained(_model(name), tmp_path)
  ours, theirs = load_file(tmp_path / "model.safetensors"), load_file(FIXTURES / name / "model.safetensors")
  assert sorted(ours) == sorted(theirs)
  for key in theirs:
    if key == "cls.predictions.bias" and not _model(name).config.tie_embeddings:
      continue  # unused by HF's untied head (its decoder has the live bias); we write the live one
    assert ours[key].dtype == np.float32 and ours[key].flags.c_contiguous, key
    np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
  cfg_ours = json.loads((tmp_path / "config.json").read_text())
  cfg_theirs = json.loads((FIXTURES / name / "config.json").read_text())
  cfg_theirs.pop("transformers_version")
  assert cfg_ours == cfg_theirs


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_identical(tmp_path, name):
  model = _model(name)
  hf.save_pretrained(model, tmp_path)
  again = hf.from_pretrained(tmp_path)
  assert type(again) is type(model) and again.config == model.config
  a, b = _params(model), _params(again)
  assert a.keys() == b.keys()
  for p in a:
    np.testing.assert_array_equal(a[p], b[p], err_msg=str(p))
  r = _ref(name)
  ids, kw = _inputs(r)
  for x, y in zip(_forward(model, ids, kw, _slots(ids), _at(r)), _forward(again, ids, kw, _slots(ids), _at(r)),
                  strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


TINY = dict(vocab_size=40, d_model=16, num_layers=1, num_heads=2, d_ff=24, max_position=64)


@pytest.mark.parametrize("cls, overrides, num_labels", [
    (RoFormerModel, dict(embedding_size=12, activation="relu"), None),
    (RoFormerForMaskedLM, dict(tie_embeddings=False, rotary_value=True, type_vocab_size=3), None),
    (RoFormerForSequenceClassification, dict(activation="silu"), 3),
    (RoFormerForSequenceClassification, dict(), 1),
])
def test_round_trip_jax_models(tmp_path, cls, overrides, num_labels):
  """Random parameters -> save -> load gives them back exactly; a second trip changes nothing."""
  cfg = ModelConfig(**TINY, **overrides)
  # Parameters only (nnx.eval_shape: no slow random init); save_pretrained reads nothing else.
  model = nnx.eval_shape(lambda: cls(cfg, *([num_labels] if num_labels else []), rngs=nnx.Rngs(0)))
  rng = np.random.default_rng(1)
  for _, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
    var.set_value(rng.standard_normal(var.get_value().shape).astype(np.float32) * 0.3)
  hf.save_pretrained(model, tmp_path / "a")
  config = json.loads((tmp_path / "a" / "config.json").read_text())
  assert config["architectures"] == [hf.ARCHITECTURES[cls]] and config["model_type"] == "roformer"
  if num_labels:
    assert len(config["id2label"]) == num_labels
  loaded = hf.from_pretrained(tmp_path / "a")
  assert type(loaded) is cls and loaded.config == cfg
  if num_labels:
    assert loaded.num_labels == num_labels
  a, b = _params(model), _params(loaded)
  assert a.keys() == b.keys() and all(np.array_equal(a[p], b[p]) for p in a)
  hf.save_pretrained(loaded, tmp_path / "b")
  assert (tmp_path / "a" / "config.json").read_text() == (tmp_path / "b" / "config.json").read_text()
  first, second = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
  assert first.keys() == second.keys() and all(np.array_equal(first[k], second[k]) for k in first)
  # Same config and bit-identical parameters give identical outputs; test_round_trip_identical
  # runs both models on the fixtures' inputs to show it.


def test_head_encoder_loads_only_the_encoder():
  r = _ref("factorized")
  ids, kw = _inputs(r)
  encoder = hf.from_pretrained(FIXTURES / "factorized", head="encoder")
  assert type(encoder) is RoFormerModel
  a, b = _params(encoder), _params(_model("factorized").roformer)
  assert a.keys() == b.keys() and all(np.array_equal(a[p], b[p]) for p in a)
  with pytest.raises(hf.CheckpointError, match="head='classifier'.*mlm head"):
    hf.from_pretrained(FIXTURES / "factorized", head="classifier")


def test_bfloat16_checkpoint_and_dtypes(tmp_path):
  import ml_dtypes

  d = _copy(tmp_path, edit_tensors=lambda t: t.update({k: v.astype(ml_dtypes.bfloat16) for k, v in t.items()}))
  model = hf.from_pretrained(d, dtype="bfloat16")
  assert model.config.dtype == "bfloat16" and model.config.param_dtype == "float32"
  word = model.roformer.embeddings.word.embedding.get_value()
  assert word.dtype == jnp.float32
  ref = _model("factorized").roformer.embeddings.word.embedding.get_value()
  np.testing.assert_allclose(word, ref, rtol=1e-2)
  stored = hf.from_pretrained(FIXTURES / "factorized", param_dtype="bfloat16")
  assert stored.roformer.embeddings.word.embedding.get_value().dtype == jnp.bfloat16


def test_sinusoidal_table_is_hfs():
  table = load_file(FIXTURES / "factorized" / "model.safetensors")["roformer.encoder.embed_positions.weight"]
  np.testing.assert_array_equal(hf.sinusoidal_table(*table.shape), table)


# ------------------------------------------------------------------------------ errors


def test_missing_tensor(tmp_path):
  def drop(t):
    del t["roformer.embeddings_project.weight"]
    del t["roformer.encoder.layer.1.attention.self.key.bias"]

  with pytest.raises(hf.CheckpointError, match=r"missing tensors: roformer\.embeddings_project\.weight, "
                                               r"roformer\.encoder\.layer\.1\.attention\.self\.key\.bias"):
    hf.from_pretrained(_copy(tmp_path, edit_tensors=drop))


def test_unexpected_tensor(tmp_path):
  def add(t):
    t["roformer.encoder.layer.2.output.dense.weight"] = np.zeros((32, 37), np.float32)
    t["qa_outputs.weight"] = np.zeros((2, 32), np.float32)

  with pytest.raises(hf.CheckpointError, match=r"unexpected tensors.*head='encoder'.*"
                                               r"qa_outputs\.weight, roformer\.encoder\.layer\.2\.output"):
    hf.from_pretrained(_copy(tmp_path, edit_tensors=add))


def test_embedding_size_mismatch_is_a_shape_error(tmp_path):
  d = _copy(tmp_path, edit_config=lambda c: c.update(embedding_size=32))  # would skip embeddings_project
  with pytest.raises(hf.CheckpointError, match=r"wrong shape.*word_embeddings\.weight: shape \(128, 24\), "
                                               r"expected \(128, 32\)"):
    hf.from_pretrained(d)


def test_wrong_shape(tmp_path):
  def transpose(t):
    key = "roformer.encoder.layer.0.intermediate.dense.weight"
    t[key] = np.ascontiguousarray(t[key].T)

  with pytest.raises(hf.CheckpointError, match=r"layer\.0\.intermediate\.dense\.weight: shape \(32, 37\), "
                                               r"expected \(37, 32\)"):
    hf.from_pretrained(_copy(tmp_path, edit_tensors=transpose))


def test_wrong_dtype(tmp_path):
  def to_int(t):
    t["cls.predictions.bias"] = t["cls.predictions.bias"].astype(np.int32)

  with pytest.raises(hf.CheckpointError, match=r"cls\.predictions\.bias.*dtype int32"):
    hf.from_pretrained(_copy(tmp_path, edit_tensors=to_int))


def test_untied_decoder_under_a_tied_config(tmp_path):
  def add_decoder(t):
    t["cls.predictions.decoder.weight"] = t["roformer.embeddings.word_embeddings.weight"] + 1.0

  with pytest.raises(hf.CheckpointError, match=r"decoder\.weight.*differs.*tie_word_embeddings"):
    hf.from_pretrained(_copy(tmp_path, edit_tensors=add_decoder))


def test_tied_copies_are_accepted(tmp_path):
  """Older checkpoints also store the tied decoder weight and bias; equal copies are fine."""
  def add_copies(t):
    t["cls.predictions.decoder.weight"] = t["roformer.embeddings.word_embeddings.weight"].copy()
    t["cls.predictions.decoder.bias"] = t["cls.predictions.bias"].copy()

  model = hf.from_pretrained(_copy(tmp_path, edit_tensors=add_copies))
  np.testing.assert_array_equal(model.mlm.bias.get_value(), _model("factorized").mlm.bias.get_value())


def test_foreign_position_table(tmp_path):
  def scale(t):
    t["roformer.encoder.embed_positions.weight"] = t["roformer.encoder.embed_positions.weight"] * 0.5

  with pytest.raises(hf.CheckpointError, match="not HF RoFormer's sinusoidal table"):
    hf.from_pretrained(_copy(tmp_path, edit_tensors=scale))


def test_bin_only_directory(tmp_path):
  shutil.copy(FIXTURES / "factorized" / "config.json", tmp_path / "config.json")
  (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x02not really a pickle")
  with pytest.raises(hf.CheckpointError, match=r"(?s)pytorch_model\.bin.*without torch.*safe_serialization=True"):
    hf.from_pretrained(tmp_path)


def test_no_config(tmp_path):
  with pytest.raises(hf.CheckpointError, match="no config.json"):
    hf.from_pretrained(tmp_path)


@pytest.mark.parametrize("changes, message", [
    (dict(hidden_act="tanh"), "hidden_act='tanh' is not supported"),
    (dict(is_decoder=True), "is_decoder"),
    (dict(model_type="bert"), "model_type='bert'"),
    (dict(num_attention_heads=5), "multiple of num_attention_heads=5"),
])
def test_unsupported_hf_config(tmp_path, changes, message):
  with pytest.raises(hf.CheckpointError, match=message):
    hf.from_pretrained(_copy(tmp_path, edit_config=lambda c: c.update(changes)))


@pytest.mark.parametrize("changes, message", [
    (dict(position="learned"), "position='learned'"),
    (dict(position="sinusoidal"), "position='sinusoidal'"),
    (dict(norm="pre"), "norm='pre'"),
    (dict(rope_layout="half"), "rope_layout='half'"),
    (dict(rope_theta=500000.0), "rope_theta=500000.0"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling="),
    (dict(rotary_dim=4), "rotary_dim=4"),
    (dict(attention="linear"), "attention='linear'"),
    (dict(head_dim=4), "head_dim=4"),
    (dict(type_vocab_size=0), "type_vocab_size=0"),
    (dict(use_bias=False), "use_bias=False"),
    (dict(scale_embeddings=True), "scale_embeddings=True"),
])
def test_save_rejects_configs_hf_cannot_express(tmp_path, changes, message):
  cfg = ModelConfig(**TINY, **changes)
  model = nnx.eval_shape(lambda: RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0)))
  with pytest.raises(hf.CheckpointError, match=message):
    hf.save_pretrained(model, tmp_path / "out")
  assert not (tmp_path / "out").exists()


def test_save_rejects_other_models(tmp_path):
  model = nnx.eval_shape(lambda: CausalLM(ModelConfig(**TINY), rngs=nnx.Rngs(0)))
  with pytest.raises(hf.CheckpointError, match="cannot save a CausalLM"):
    hf.save_pretrained(model, tmp_path)


# ------------------------------------------------------------------------------ the export-check script


def test_write_export_script(tmp_path):
  """scripts/make_hf_roformer_fixture.py --write-export (the JAX side of the transformers check)
  still runs and writes a checkpoint plus outputs (one model of the set, to stay quick)."""
  spec = importlib.util.spec_from_file_location("make_fixture", ROOT / "scripts" / "make_hf_roformer_fixture.py")
  script = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(script)
  name = "mlm_untied_rotary_value"
  script.write_export(str(tmp_path), names=[name])
  assert sorted(p.name for p in tmp_path.iterdir()) == [name]
  model = hf.from_pretrained(tmp_path / name)
  assert type(model) is RoFormerForMaskedLM and model.config.rotary_value
  with np.load(tmp_path / name / "jax_outputs.npz") as out:
    b, t = out["input_ids"].shape
    assert out["last_hidden_state"].shape == (b, t, model.config.d_model)
    assert out["logits"].shape == (b, t, model.config.vocab_size)
    assert np.isfinite(out["logits"]).all()


@pytest.mark.parametrize("extra", [{"sections": (2, 2)}, {"section_layout": "interleaved"},
                                   {"frequencies": (0.5, 0.25, 0.1, 0.01)}, {"blocks": 2},
                                   {"xpos_scale_base": 512.0}])
def test_save_refuses_a_rope_spec_field_outside_the_allow_list(tmp_path, extra):
  """hf.HF_ROTARY is an allow-list: every RoPE spec field it does not name (the variants' fields
  here) is refused by name when off its default, so nothing is exported silently wrong."""
  (field, value), = extra.items()
  assert hf.rotary_problems(RotaryConfig(), 8) == []
  assert hf.rotary_problems(RotaryConfig(**extra), 8) == [
      f"rope.{field}={value!r} (HF RoFormer has no such RoPE setting)"]
  cfg = ModelConfig(**{**TINY, "rope": extra})
  model = nnx.eval_shape(lambda: RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0)))
  with pytest.raises(hf.CheckpointError, match=rf"rope\.{field}="):
    hf.save_pretrained(model, tmp_path / "out")
  assert not (tmp_path / "out").exists()


def test_a_classifiers_label_names_go_to_id2label_and_a_wrong_list_is_refused(tmp_path):
  cfg = ModelConfig(**TINY)
  model = nnx.eval_shape(lambda: RoFormerForSequenceClassification(cfg, 2, rngs=nnx.Rngs(0)))
  for _, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
    var.set_value(np.zeros(var.get_value().shape, np.float32))
  hf.save_pretrained(model, tmp_path / "a", label_names=("not_equivalent", "equivalent"))
  config = json.loads((tmp_path / "a" / "config.json").read_text())
  assert config["id2label"] == {"0": "not_equivalent", "1": "equivalent"}
  assert config["label2id"] == {"not_equivalent": 0, "equivalent": 1}
  assert hf.from_pretrained(tmp_path / "a").num_labels == 2
  for wrong in (("one",), ("same", "same")):
    with pytest.raises(hf.CheckpointError, match="must be 2 distinct names"):
      hf.save_pretrained(model, tmp_path / "b", label_names=wrong)
  with pytest.raises(hf.CheckpointError, match="label_names are for a classifier"):
    hf.save_pretrained(nnx.eval_shape(lambda: RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0))), tmp_path / "c",
                       label_names=("a", "b"))
  assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
