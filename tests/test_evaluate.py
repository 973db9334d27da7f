"""eval.py end to end on smoke workdirs: metrics, averaging, length curve, scaling, errors."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from roformer_jax.training import run_config, trainer
from roformer_jax.evaluation import evaluate
from roformer_jax.errors import UserError
from tests import smoke as smoke_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def smoke(**kw):
  return smoke_lib.smoke(**{"eval.length_factors": (1, 2), "eval.length_batches": 1, "eval.max_batches": 3, **kw})


@pytest.fixture
def trained(smoke_runs, tmp_path):
  """The shared lm smoke run (3 steps, keep_checkpoints=5), a fresh copy per test: eval writes
  its results, metrics and plots into the workdir."""
  return smoke_runs.copy("lm", tmp_path / "run")


def test_eval_writes_results_and_metric_rows(trained):
  results = evaluate.evaluate(smoke(), str(trained))
  assert results["step"] == 3 and results["checkpoints"] == [3]
  m = results["metrics"]
  assert np.isfinite(m["loss"]) and m["tokens"] > 0
  np.testing.assert_allclose(m["bits_per_token"], m["loss"] / np.log(2))
  np.testing.assert_allclose(m["perplexity"], np.exp(m["loss"]), rtol=1e-6)
  saved = json.loads((trained / results["results_file"]).read_text())
  assert saved["metrics"]["loss"] == pytest.approx(m["loss"])
  assert [row["length"] for row in saved["length_curve"]] == [32, 64]
  rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
  assert any(r.get("step") == 3 and "eval_loss" in r and "eval_bits_per_token" in r for r in rows)


def test_average_of_the_last_checkpoints_is_used_and_differs_from_the_newest(trained):
  newest = evaluate.evaluate(smoke(), str(trained))["metrics"]["loss"]
  config = smoke()
  config.eval.average_last = 3
  averaged = evaluate.evaluate(config, str(trained))
  assert averaged["checkpoints"] == [1, 2, 3]
  assert averaged["metrics"]["loss"] != pytest.approx(newest, abs=1e-7)
  # More than the run has is an error naming both numbers, not a quiet average of fewer.
  config = smoke(keep_checkpoints=5)
  config.eval.average_last = 5
  with pytest.raises(UserError, match=r"last 5 checkpoints: .* only 3 usable .*average_last=3"):
    evaluate.evaluate(config, str(trained))
  # More than the config keeps fails before any work.
  config = smoke()
  config.eval.average_last = 5
  with pytest.raises(UserError, match=r"average_last=5 .*keep_checkpoints=3"):
    evaluate.evaluate(config, str(trained))


def longrope(head_dim, original, long_max):
  """A LongRoPE dict for heads of head_dim features: one factor per rotated pair."""
  return {"rope_type": "longrope", "original_max_position_embeddings": original, "max_position_embeddings": 4 * original,
          "short_factor": list(np.linspace(1.0, 1.5, head_dim // 2)),
          "long_factor": list(np.linspace(1.0, long_max, head_dim // 2))}


@pytest.mark.slow
def test_longrope_trains_and_evaluates_with_one_factor_per_pair_of_the_head_dim(tmp_path):
  """LongRoPE in the model config (head dim 16: 8 factors each, not 4) trains, then evaluates
  with another LongRoPE at eval time, past the original length, pass-key decoding included."""
  config = smoke(total_steps=2, eval_every_steps=2)
  assert config.model.d_model // config.model.num_heads == 16
  config.model.rope_scaling = longrope(16, 16, 4.0)
  trainer.train_and_evaluate(config, str(tmp_path))
  config.eval.rope_scaling = longrope(16, 16, 8.0)
  config.eval.passkey_lengths, config.eval.passkey_depths, config.eval.passkey_trials = (100,), (0.5,), 1
  results = evaluate.evaluate(config, str(tmp_path))
  curve, scaled = results["length_curve"], results["length_curve_scaled"]
  assert all(np.isfinite(r["loss"]) for r in curve + scaled) and [r["length"] for r in scaled] == [32, 64]
  assert scaled[0]["loss"] != pytest.approx(curve[0]["loss"], abs=1e-6)  # past 16: the other long factors
  saved = json.loads((tmp_path / results["results_file"]).read_text())["passkey"]
  assert saved["rope_scaling"]["rope_type"] == "longrope" and np.isfinite(saved["mean_answer_nll"][0])
  # The factor lists are checked against the head dim when the config loads, by name.
  config.model.rope_scaling = longrope(8, 16, 4.0)
  with pytest.raises(UserError, match=r"8 entries.*head dim 16"):
    trainer.train_and_evaluate(config, str(tmp_path / "bad"))


def test_rope_scaling_at_eval_time_changes_only_the_long_lengths(trained):
  config = smoke()
  config.eval.rope_scaling = {"rope_type": "linear", "factor": 2.0}
  # Pass-key retrieval rides along (one evaluate call): 100 tokens, 3x the trained 32, on the
  # scaled model.
  config.eval.passkey_lengths, config.eval.passkey_depths, config.eval.passkey_trials = (100,), (0.0, 1.0), 2
  results = evaluate.evaluate(config, str(trained))
  plain, scaled = results["length_curve"], results["length_curve_scaled"]
  assert [r["length"] for r in scaled] == [32, 64]
  assert scaled[0]["loss"] != pytest.approx(plain[0]["loss"], abs=1e-6)  # positions are halved everywhere
  assert results["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}
  saved = json.loads((trained / results["results_file"]).read_text())["passkey"]
  assert saved["lengths"] == [100] and saved["depths"] == [0.0, 1.0] and saved["trials"] == 2
  assert np.shape(saved["accuracy"]) == (1, 2) and saved["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}
  # Issue 40: each setting its own file, its rows tagged, its curve drawn; another setting's result stays.
  assert results["evaluated"]["eval.rope_scaling"] == {"rope_type": "linear", "factor": 2.0}
  assert results["results_file"].startswith("eval_results.") and os.path.isfile(results["length_curve_png"])
  plain = evaluate.evaluate(smoke(), str(trained))
  assert plain["results_file"] != results["results_file"] and (trained / results["results_file"]).is_file()
  tags = {r.get("evaluated") for r in map(json.loads, (trained / "metrics.jsonl").read_text().splitlines())
          if "eval_bits_per_token" in r}
  assert tags == {run_config.slug(results["evaluated"]), run_config.slug(plain["evaluated"]) or "as trained"}, tags
  # a smoke model after 2 steps: the answer costs about ln(vocab) nats a digit, far above 0
  assert np.shape(saved["answer_nll"]) == (1, 2) and 1.0 < saved["mean_answer_nll"][0] < 10.0
  png = pathlib.Path(results["passkey"]["png"])  # passkey.<settings>.png: named from what was asked, as the results
  assert png.parent == trained and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert not list(trained.glob("passkey*.png.tmp*"))  # written to a temporary name, then renamed
  rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
  assert any("eval_passkey_accuracy_at_100" in r and "eval_passkey_answer_nll_at_100" in r for r in rows)


def test_no_checkpoint_says_to_train_first(tmp_path):
  with pytest.raises(FileNotFoundError, match="train first"):
    evaluate.evaluate(smoke(), str(tmp_path))


def test_a_config_that_does_not_match_the_checkpoint_is_named(trained):
  config = smoke()
  config.model.d_model = 48
  with pytest.raises(ValueError, match="do not match this config"):
    evaluate.evaluate(config, str(trained))


def test_unknown_eval_keys_are_rejected():
  config = smoke()
  config.eval.beams = 3
  with pytest.raises(ValueError, match="beams"):
    evaluate.eval_settings(config)


def test_eval_cli_end_to_end(trained):
  out = subprocess.run(
      [sys.executable, os.path.join(ROOT, "eval.py"), "--workdir", str(trained), "--config.eval.max_batches=2",
       "--config.eval.length_batches=1", f"--config.data.data_dir={os.environ.get('ROFORMER_TEST_DATA_DIR', '')}"],
      capture_output=True, text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert out.returncode == 0, out.stdout + out.stderr
  # The run's own config (no --config), what was asked beyond it, the metrics with their context, the curve.
  lines = out.stdout.splitlines()
  assert lines[0].startswith(f"eval.py: lm model of {trained}, step 3") and \
      lines[1] == "evaluated: eval.length_batches=1, eval.max_batches=2", lines
  assert "(over the split's first 2 batches of" in out.stdout and "length  as trained" in out.stdout, out.stdout
  assert (trained / "eval_results.length_batches-1_max_batches-2.json").is_file()
  assert (trained / "length_curve.length_batches-1_max_batches-2.png").is_file()
  from roformer_jax.training import launch  # issue 40: none of the known noise (the TPU probe, orbax read-only, TFDS)
  assert not [start for _, start, _ in launch.NOISE if start in out.stderr], out.stderr
