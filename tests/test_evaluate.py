"""eval.py end to end on smoke workdirs: metrics, averaging, length curve, scaling, errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from roformer_jax.training import trainer
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
  saved = json.loads((trained / "eval_results.json").read_text())
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
  saved = json.loads((tmp_path / "eval_results.json").read_text())["passkey"]
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
  saved = json.loads((trained / "eval_results.json").read_text())["passkey"]
  assert saved["lengths"] == [100] and saved["depths"] == [0.0, 1.0] and saved["trials"] == 2
  assert np.shape(saved["accuracy"]) == (1, 2) and saved["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}
  # a smoke model after 2 steps: the answer costs about ln(vocab) nats a digit, far above 0
  assert np.shape(saved["answer_nll"]) == (1, 2) and 1.0 < saved["mean_answer_nll"][0] < 10.0
  assert (trained / "passkey.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert not list(trained.glob("passkey.png.tmp*"))  # written to a temporary name, then renamed
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
      [sys.executable, os.path.join(ROOT, "eval.py"), "--config", os.path.join(ROOT, "configs/default.py") + ":smoke",
       "--workdir", str(trained), "--config.eval.max_batches=2", "--config.eval.length_batches=1",
       f"--config.data.data_dir={os.environ.get('ROFORMER_TEST_DATA_DIR', '')}"],
      capture_output=True, text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert out.returncode == 0, out.stdout + out.stderr
  assert '"step": 3' in out.stdout and "length     32: loss" in out.stdout
