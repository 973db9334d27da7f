"""B2's (experiments/train_step.py, run by bench/train_step.py) JAX side is the trainer's MLM step, with and without masked_positions.

No torch and no timing: the torch side of the bench runs only in its own venv.
"""

import importlib.util
import os

import jax
import numpy as np
import pytest
from flax import nnx

from roformer_jax import models
from roformer_jax.training import tasks

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "train_step.py")


@pytest.fixture(scope="module")
def bench():
  spec = importlib.util.spec_from_file_location("bench_train_step", _PATH)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _tiny_model():
  cfg = models.ModelConfig(vocab_size=97, d_model=32, num_layers=2, num_heads=4, d_ff=64, dropout=0.0,
                           attention_dropout=0.0)
  return models.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0))


def test_make_batch(bench):
  batch = bench.make_batch(3, 40, 97, seed=1)
  m = round(0.15 * 40)
  assert batch["masked_positions"].shape == (3, m)
  assert (np.diff(batch["masked_positions"], axis=1) > 0).all()  # sorted, distinct
  rows = np.arange(3)[:, None]
  pos = batch["masked_positions"]
  assert (batch["inputs"][rows, pos] == bench.MASK_ID).all()
  assert batch["weights"].sum() == 3 * m and (batch["weights"][rows, pos] == 1).all()
  scored = batch["labels"] != -100
  np.testing.assert_array_equal(scored, batch["weights"] > 0)
  np.testing.assert_array_equal(batch["labels"][scored], batch["targets"][scored])
  unmasked = batch["weights"] == 0
  np.testing.assert_array_equal(batch["inputs"][unmasked], batch["targets"][unmasked])
  assert batch["targets"].min() >= bench.FIRST_ID and batch["targets"].max() < 97


def test_masked_batch_gives_the_full_loss(bench):
  """The trainer's MLM loss is the same whether it scores every position or only the masked ones."""
  model = _tiny_model()
  raw = bench.make_batch(2, 24, 97, seed=2)
  sums = {m: tasks.loss_sums(model, bench.jax_batch(raw, masked=m), task="mlm") for m in (False, True)}
  for s in sums.values():
    assert float(s["weight"]) == 2 * round(0.15 * 24)
  np.testing.assert_allclose(float(sums[True]["loss"]), float(sums[False]["loss"]), rtol=1e-6)


@pytest.mark.slow  # two compiled AdamW train steps of the bench model
def test_train_step_full_and_masked_agree(bench):
  tx, hyper = bench.mlm_optimizer()
  assert hyper == {"lr": 1e-5, "b1": 0.9, "b2": 0.999, "eps": 1e-6, "weight_decay": 0.01}
  raw = bench.make_batch(2, 24, 97, seed=3)
  want = None
  out = {}
  for masked in (False, True):
    graphdef, state = bench.new_state(_tiny_model(), tx)
    batch = bench.jax_batch(raw, masked=masked)
    if want is None:
      sums = tasks.loss_sums(nnx.merge(graphdef, state)[0], batch, task="mlm")
      want = float(sums["loss"] / sums["weight"])
    step = bench.train_step(graphdef)  # trainer.train_step, jitted, state donated
    state, out0 = step(state, batch)
    state, out1 = step(state, batch)
    np.testing.assert_allclose(float(out0["loss"]), want, rtol=1e-6)  # the loss before the update
    assert float(out1["loss"]) < float(out0["loss"])
    out[masked] = nnx.state(nnx.merge(graphdef, state)[0], nnx.Param)
  # Same gradients, so the same parameters after two AdamW steps.
  for a, b in zip(jax.tree.leaves(out[False]), jax.tree.leaves(out[True]), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_remat_bench_runs_and_records(tmp_path):
  """bench/remat.py on the tiny shape: three policies, identical first losses, a record."""
  import json
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = {**os.environ, "ROFORMER_BENCH_RESULTS": str(tmp_path)}
  done = subprocess.run([sys.executable, os.path.join(root, "bench", "remat.py"), "--shapes", "tiny", "--rounds", "1",
                         "--steps", "1", "--record"], capture_output=True, text=True, env=env, cwd=root, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  summary = json.loads(done.stdout.strip().splitlines()[-1])
  rows = summary["results"]["tiny"]["rows"]
  assert rows["full"]["temp_gib"] < rows["none"]["temp_gib"] and rows["dots"]["temp_gib"] < rows["none"]["temp_gib"]
  assert rows["full"]["losses"][0] == pytest.approx(rows["none"]["losses"][0], rel=1e-5)
  recorded = json.loads((tmp_path / "remat.json").read_text())
  assert {f["id"] for f in recorded["figures"]} >= {"remat.tiny.full.memory_vs_none", "remat.tiny.dots.time_vs_none"}
