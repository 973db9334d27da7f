"""A run's saved config (roformer_jax/training/run_config.py): eval.py and generate.py read it from the workdir
(issue 40). Fast: no training; the CLI and a real run are in tests/test_reliability.py."""

import ml_collections
import pytest

from configs import default
from roformer_jax.training import run_config


def _saved(tmp_path, variant="extend,smoke"):
  config = default.get_config(variant)
  (tmp_path / "config.json").write_text(config.to_json_best_effort(indent=2))
  return config


def test_the_saved_config_loads_as_the_config_it_was_made_from_and_takes_overrides(tmp_path):
  config = _saved(tmp_path)
  loaded = run_config.load(str(tmp_path))
  assert loaded.to_json_best_effort() == config.to_json_best_effort()
  assert isinstance(loaded.eval.length_factors, tuple) and isinstance(loaded.model.rope_scaling, ml_collections.ConfigDict)
  loaded.model.head_dim = 64  # a field saved as None takes a value, as a --config override sets it
  assert run_config.differences(loaded, str(tmp_path)) == ["model.head_dim: None in the run, 64 requested"]
  loaded.eval.average_last, loaded.data.data_dir = 3, "/elsewhere"  # evaluation settings: no mismatch
  loaded.task = "mlm"
  assert run_config.differences(loaded, str(tmp_path)) == [
      "model.head_dim: None in the run, 64 requested", "task: 'lm' in the run, 'mlm' requested"]


def test_the_workdir_config_is_added_only_without_config_and_a_missing_one_is_named(tmp_path):
  f = "configs/workdir.py"
  assert run_config.with_saved_config(["eval.py", "--workdir", "w", "--config.eval.x=1"], f)[1] == \
      f"--config={f}:{(tmp_path.cwd() / 'w')}"
  assert run_config.with_saved_config(["eval.py", "--workdir=/a/w"], f)[1] == f"--config={f}:/a/w"
  for argv in (["eval.py", "--config", "c.py", "--workdir", "w"], ["eval.py", "--config=c.py", "--workdir=w"],
               ["eval.py", "--helpshort"]):
    assert run_config.with_saved_config(argv, f) == argv
  with pytest.raises(ValueError, match="has no config.json"):
    run_config.load(str(tmp_path))
  (tmp_path / "config.json").write_text("{not json")
  with pytest.raises(ValueError, match="does not read as a run's config"):
    run_config.load(str(tmp_path))
  assert run_config.differences(default.get_config("smoke"), str(tmp_path / "none")) == []
