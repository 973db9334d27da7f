"""export.py (roformer_jax.evaluation.export): a trained run as a transformers RoFormer checkpoint.

The layout that `hf.save_pretrained` writes is proven against transformers' own files and
outputs in tests/test_hf.py (and by scripts/make_hf_roformer_fixture.py --check-export in a
torch venv); here, that the export of a trained workdir holds the run's model: its logits,
restored independently from the workdir's checkpoint, equal the exported checkpoint's as
`hf.from_pretrained` (the loader proven against transformers) reads it back.
"""

import importlib
import json
import os
import pathlib
import re
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer_jax import hf
from roformer_jax.errors import UserError
from roformer_jax.evaluation import evaluate, export
from tests.smoke import smoke, smoke_mlm

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


# ---- which shipped configs export: walked, and the same as docs/getting_started.md says --------------------------


def shipped_configs():
  """(config file, variant) for every config in configs/ and each variant it offers alone (not smoke)."""
  for path in sorted(CONFIGS.glob("*.py")):
    if path.stem in ("__init__", "common", "workdir"):
      continue
    module = importlib.import_module(f"configs.{path.stem}")
    variants = [v for v in getattr(module, "VARIANTS", ()) if v != "smoke"]
    needs_one = getattr(module, "TASKS", None)  # glue.py: exactly one task
    for variant in ([] if needs_one else [""]) + variants:
      yield path.stem, variant, module.get_config(variant)


def documented_exports() -> dict[str, str]:
  """The table in docs/getting_started.md's export section: `configs/<name>.py[:variant]` -> its cell."""
  text = (ROOT / "docs" / "getting_started.md").read_text()
  section = text.split("## Export a trained run to HuggingFace", 1)[1].split("\n## ", 1)[0]
  rows = re.findall(r"^\| `(configs/[\w.:/]+)` \| ([^|]+) \|", section, flags=re.M)
  return {name: cell.strip() for name, cell in rows}


def test_getting_started_lists_every_shipped_config_and_whether_it_exports():
  documented = documented_exports()
  walked = {}
  for stem, variant, config in shipped_configs():
    name = f"configs/{stem}.py" + (f":{variant}" if variant else "")
    found = export.problems(config)
    walked[name] = found
    assert name in documented, f"{name} is missing from docs/getting_started.md's export table"
    if found:
      # The cell names what stops it: every config key export.py names.
      keys = [re.match(r"config\.([\w.]+)=", p).group(1) for p in found]
      assert documented[name] != "yes" and all(f"`{k}`" in documented[name] for k in keys), (name, found)
    else:
      assert documented[name] == "yes", (name, documented[name])
  assert sorted(documented) == sorted(walked)
  assert any(not v for v in walked.values()) and any(walked.values())


def test_a_config_hf_cannot_hold_is_refused_naming_every_key():
  with pytest.raises(UserError) as e:
    export.check(smoke())
  message = str(e.value)
  for part in ("config.task='lm'", "config.model.norm='pre' (HF RoFormer is post-LN)",
               "config.model.type_vocab_size=0"):
    assert part in message
  assert export.problems(smoke_mlm()) == []
  # Every refusal of hf.representation_problems comes through, as a config key.
  for key, value in [("rope_layout", "half"), ("rope_theta", 5e5), ("attention", "linear"), ("use_bias", False),
                     ("position", "learned")]:
    config = smoke_mlm(**{f"model.{key}": value})
    assert [p.split("=")[0] for p in export.problems(config)] == [f"config.model.{key}"], key
  classifier = smoke_mlm()
  classifier.task = "classification"
  assert export.problems(classifier) == []


def test_a_glue_export_names_its_classes_from_the_dataset(tmp_path):
  import tensorflow_datasets as tfds
  from configs import glue
  config = glue.get_config("mrpc,smoke")
  config.data.data_dir = str(tmp_path)
  assert export._label_names(config) is None  # not prepared here: HF's LABEL_<i>, the weights export all the same
  with tfds.testing.mock_data(num_examples=4, policy=tfds.testing.MockPolicy.USE_CODE):
    assert export._label_names(config) == ("not_equivalent", "equivalent")
    assert export._label_names(glue.get_config("stsb,smoke")) is None  # a regression


# ---- a trained run ------------------------------------------------------------------------------------------------


def restored(config, workdir, step=None):
  """The workdir's model at `step`, restored from its checkpoint (not read from the export)."""
  return evaluate.restore_model(config, str(workdir), step=step, tool="test")[0]


@nnx.jit
def logits(model, ids, types, mask):
  positions = jnp.broadcast_to(jnp.arange(ids.shape[1], dtype=jnp.int32), ids.shape)  # HF's: slot t at t
  return model(ids, token_type_ids=types, attention_mask=mask, positions=positions)


@pytest.fixture(scope="module")
def mlm_run(smoke_runs, tmp_path_factory):
  return smoke_runs.copy("mlm", tmp_path_factory.mktemp("export") / "work")


def test_a_trained_run_exports_to_a_checkpoint_with_its_logits(mlm_run, tmp_path):
  config = smoke_mlm()
  out = tmp_path / "hf"
  info = export.export(config, str(mlm_run), str(out))
  assert sorted(os.listdir(out)) == ["config.json", "model.safetensors", export.PROVENANCE]
  assert info["architecture"] == "RoFormerForMaskedLM" and info["steps"] == [2] and info["max_difference"] <= 1e-4
  hf_config = json.loads((out / "config.json").read_text())
  assert hf_config["architectures"] == ["RoFormerForMaskedLM"] and hf_config["model_type"] == "roformer"
  record = json.loads((out / export.PROVENANCE).read_text())
  assert record["steps"] == [2] and record["workdir"] == str(mlm_run) and record["tokenizer"]["kind"] == "bytes"

  # The run's model, restored independently, against the export as HF's loader reads it, on
  # right-padded rows with token types.
  model, loaded = restored(config, mlm_run), hf.from_pretrained(out)
  assert type(loaded) is type(model)
  rng = np.random.default_rng(3)
  ids = rng.integers(4, model.config.vocab_size, (3, 24), dtype=np.int32)
  types = rng.integers(0, 2, ids.shape, dtype=np.int32)
  mask = np.arange(24)[None, :] < np.array([[24], [17], [9]])
  ids = np.where(mask, ids, 0)
  want, got = logits(model, ids, types, mask), logits(loaded, ids, types, mask)
  assert float(jnp.abs(want - got).max()) <= 1e-4
  assert float(jnp.abs(want).max()) > 0.1  # not a trivially equal pair of zeros

  # A filled --out is refused before anything is read; --overwrite replaces it, here with step 1.
  with pytest.raises(UserError, match="already holds files .*--overwrite"):
    export.export(config, str(mlm_run), str(out))
  export.export(config, str(mlm_run), str(out), step=1, overwrite=True)
  assert json.loads((out / export.PROVENANCE).read_text())["steps"] == [1]
  first = restored(config, mlm_run, step=1)
  assert float(jnp.abs(logits(first, ids, types, mask) - logits(hf.from_pretrained(out), ids, types, mask)).max()) \
      <= 1e-4
  assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no staging directory left behind


@pytest.mark.slow
def test_cli_refuses_a_config_it_cannot_export_in_one_line(tmp_path):
  out = subprocess.run([sys.executable, str(ROOT / "export.py"), "--config", "configs/default.py:smoke",
                        "--workdir", str(tmp_path / "run"), "--out", str(tmp_path / "hf")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert out.returncode == 2, out.stderr
  first = out.stderr.splitlines()[0]
  assert first.startswith("export.py: error: this run cannot be exported as an HF RoFormer checkpoint: ")
  assert "config.task='lm'" in first and "config.model.norm='pre'" in first and "Traceback" not in out.stderr
  assert not (tmp_path / "hf").exists() and out.stdout == ""
