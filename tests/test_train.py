"""The training system end to end: smoke runs, resume exactness, sharding, errors.

These use the smoke variant of configs/default.py (a tiny model on a 40-file slice of the
offline stdlib corpus), so each run takes seconds. Kills, signals and other faults are in
tests/test_reliability.py and scripts/fault_campaign.py.
"""

import json
import os
import shutil
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import common, default
from roformer_jax.training import samples as samples_lib, trainer
from roformer_jax.evaluation import evaluate

pytestmark = pytest.mark.slow  # trains or runs processes: make test, not make test-fast

ROOT = pathlib.Path(__file__).parents[1]


def smoke(**overrides):
  config = default.get_config("smoke")
  config.data.data_dir = os.environ.get("ROFORMER_TEST_DATA_DIR", "")
  return common.set_dotted(config, overrides)


def rows(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def train_cli(workdir, *flags, wait=True, **kw):
  cmd = [sys.executable, str(ROOT / "train.py"), "--config", f"{ROOT / 'configs/default.py'}:smoke",
         "--workdir", str(workdir), *flags]
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
  if wait:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, **kw)
  return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def eval_cli(workdir, *flags):
  cmd = [sys.executable, str(ROOT / "eval.py"), "--config", f"{ROOT / 'configs/default.py'}:smoke",
         "--workdir", str(workdir), *flags]
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
  return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def final_params(workdir):
  """The newest checkpoint's state as numpy arrays, read with orbax directly."""
  ckdir = os.path.join(workdir, "checkpoints")
  with ocp.CheckpointManager(ckdir, options=ocp.CheckpointManagerOptions(read_only=True)) as mgr:
    step = mgr.latest_step()
    state = mgr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
  as_numpy = lambda x: np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
  return step, jax.tree.map(as_numpy, state)


def test_smoke_run_writes_metrics_checkpoints_plot_and_resumes(tmp_path):
  result = trainer.train_and_evaluate(smoke(), str(tmp_path))
  assert result["step"] == 2 and np.isfinite(result["loss"])
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1", "2"]
  assert (tmp_path / "loss.png").stat().st_size > 1000
  assert any(f.startswith("events") for f in os.listdir(tmp_path / "tensorboard"))
  train_rows = [r for r in rows(tmp_path) if "loss" in r]
  assert [r["step"] for r in train_rows] == [1, 2]
  assert all({"learning_rate", "grad_norm", "tokens_per_sec", "step_time"} <= set(r) for r in train_rows)
  assert any("eval_loss" in r for r in rows(tmp_path))
  # The same command with more steps continues from step 2.
  result = trainer.train_and_evaluate(smoke(total_steps=4, eval_every_steps=4), str(tmp_path))
  assert result["step"] == 4
  assert [r["step"] for r in rows(tmp_path) if "loss" in r] == [1, 2, 3, 4]


def test_loss_falls_on_the_offline_corpus(tmp_path):
  config = smoke(total_steps=40, log_every_steps=10, eval_every_steps=40, checkpoint_every_steps=40)
  trainer.train_and_evaluate(config, str(tmp_path))
  losses = [r["loss"] for r in rows(tmp_path) if "loss" in r]
  assert losses[-1] < losses[0] - 1.0, losses  # bytes: ~5.6 nats at init
  # Saves at the interval only: no step-1 checkpoint to enter "the last N" averages.
  assert [p for p in os.listdir(tmp_path / "checkpoints") if p.isdigit()] == ["40"]


def test_one_device_and_eight_devices_give_the_same_loss(tmp_path):
  """One device against 8 on every axis at once, (fsdp=2, context=2, tensor=2); then step 3
  again after a restore onto (data=2, context=4): the same losses, whatever the context size."""
  one = smoke(num_devices=1, mesh={"data": 1, "fsdp": 1, "tensor": 1}, total_steps=3)
  trainer.train_and_evaluate(one, str(tmp_path / "one"))
  a = [r["loss"] for r in rows(tmp_path / "one") if "loss" in r]
  run = dict(total_steps=3, checkpoint_every_steps=2, async_checkpoints=False)
  eight = smoke(mesh={"data": 1, "fsdp": 2, "context": 2, "tensor": 2}, **run)
  trainer.train_and_evaluate(eight, str(tmp_path / "eight"))
  b = [r["loss"] for r in rows(tmp_path / "eight") if "loss" in r]
  assert len(a) == len(b) == 3
  np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
  shutil.rmtree(tmp_path / "eight" / "checkpoints" / "3")
  trainer.train_and_evaluate(smoke(mesh={"data": 2, "fsdp": 1, "context": 4, "tensor": 1}, **run),
                             str(tmp_path / "eight"))
  c = {r["step"]: r["loss"] for r in rows(tmp_path / "eight") if "loss" in r}  # step 3: the resumed run's
  np.testing.assert_allclose([c[1], c[2], c[3]], a, rtol=1e-5, atol=1e-5)


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
  config = smoke(total_steps=6, checkpoint_every_steps=1, async_checkpoints=False)
  config.optim.learning_rate = 1e30  # the first update sends the parameters to inf
  config.optim.grad_clip_norm = 0.0
  with pytest.raises(FloatingPointError, match="last good checkpoint is step 1"):
    trainer.train_and_evaluate(config, str(tmp_path))
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1"]


@pytest.mark.parametrize("overrides, match", [
    (dict(mesh={"data": 3, "fsdp": 1, "tensor": 1}), "needs 3 devices"),
    (dict(batch_size=6), "batch_size=6 must be divisible"),
    (dict(**{"data.dataset": "imagenet"}), "imagenet"),
    (dict(**{"data.tokenizer": "sentencepiece", "data.tokenizer_path": "/nonexistent/sp.model"}), "sp.model"),
    (dict(task="qa"), "config.task='qa'"),
    (dict(total_steps=0), "total_steps=0"),
    (dict(**{"model.position": "alibi"}), "alibi"),
    (dict(**{"eval.average_last": 5}), r"average_last=5 .*keep_checkpoints=3 .*--config.keep_checkpoints=5"),
    (dict(**{"model.attention_implementation": "cudnn"}), r"'cudnn' needs a GPU, but JAX's backend is 'cpu'"),
    (dict(**{"mesh.context": 4, "mesh.data": 2, "data.max_length": 60}),
     r"data.max_length=60 is not a multiple of 8: mesh.context=4 .*zig-zag.* e.g. 64"),
    (dict(**{"mesh.context": 2, "mesh.data": 4, "model.attention": "linear"}), r"mesh.context=2 needs model.attention"),
])
def test_bad_configs_fail_before_training(tmp_path, overrides, match):
  with pytest.raises(Exception, match=match):
    trainer.train_and_evaluate(smoke(**overrides), str(tmp_path / "work"))
  assert not (tmp_path / "work").exists()  # a run that fails its checks creates no workdir


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def assert_quiet(outs):
  """Issue 40: none of the known noise (launch.NOISE, and gloo's per-communicator lines on stdout) in any process's
  output."""
  from roformer_jax.training import launch
  noise = [start for _, start, _ in launch.NOISE] + [start.decode() for _, start, _ in launch.FD_NOISE]
  found = [(i, start) for i, out in enumerate(outs) for start in noise if start in out]
  assert not found, "\n----\n".join(outs)


def test_two_processes_train_together_with_jax_distributed(tmp_path):
  """Two CPU processes on localhost (gloo collectives), 2 fake devices each: one 4-device mesh.

  On the smoke corpus as docs/training.md runs it: its validation split has a file for each
  process (it once had 1, and the second process had nothing to read)."""
  port = _free_port()
  common = ["--coordinator_address", f"127.0.0.1:{port}", "--num_processes", "2", "--cpu_devices", "2",
            "--config.total_steps=3", "--config.mesh.fsdp=2", "--config.mesh.context=2"]
  procs = [train_cli(tmp_path, *common, "--process_id", str(i), wait=False) for i in range(2)]
  outs = [p.communicate(timeout=300)[0] for p in procs]
  assert [p.returncode for p in procs] == [0, 0], "\n----\n".join(outs)
  assert_quiet(outs)
  assert "mesh {'data': 1, 'fsdp': 2, 'context': 2, 'tensor': 1}" in outs[0]  # context within a process
  assert [r["step"] for r in rows(tmp_path) if "loss" in r] == [1, 2, 3]  # process 0 writes once
  assert "3" in os.listdir(tmp_path / "checkpoints")

  # eval.py with the same two processes: each reads half of the validation split (their
  # shards pack into different numbers of batches, so they must keep in step), and the sums
  # match one process reading the whole split -- up to the few targets lost where a document
  # is cut at a row boundary, which fall differently when the documents are dealt to two
  # packers (a lost or doubled shard would be off by half).
  port = _free_port()
  dist = ["--coordinator_address", f"127.0.0.1:{port}", "--num_processes", "2", "--cpu_devices", "2"]
  # Rows of 64 (32 per process): the split is 817 batches of the training's 8 rows, and every
  # two-process batch pays the cross-process collectives (20 s of the test's 24).
  overrides = ["--config.mesh.fsdp=2", "--config.batch_size=64", "--config.eval.length_factors=(1,)",
               "--config.eval.length_batches=1"]
  procs = [eval_cli(tmp_path, *dist, *overrides, "--process_id", str(i)) for i in range(2)]
  outs = [p.communicate(timeout=300)[0] for p in procs]
  assert [p.returncode for p in procs] == [0, 0], "\n----\n".join(outs)
  assert_quiet(outs)
  two = json.loads(next(tmp_path.glob("eval_results.*.json")).read_text())["metrics"]  # named from the overrides
  config = smoke(**{"mesh.fsdp": 2, "batch_size": 64})
  config.eval.length_factors, config.eval.length_batches = (1,), 1
  one = evaluate.evaluate(config, str(tmp_path))["metrics"]
  assert one["tokens"] > 0 and abs(two["tokens"] - one["tokens"]) <= 1e-4 * one["tokens"]
  np.testing.assert_allclose(two["loss"], one["loss"], rtol=1e-3)


def test_multistage_moves_through_stages_and_resumes_mid_stage_exactly(tmp_path, monkeypatch, capsys):
  from configs import multistage
  from roformer_jax.training import tasks

  def config():
    c = multistage.get_config("smoke")
    c.data.data_dir = os.environ.get("ROFORMER_TEST_DATA_DIR", "")
    c.async_checkpoints = False
    return c

  trainer.train_and_evaluate(config(), str(tmp_path / "ref"))
  # Stages are numbered 1-based everywhere, as Table 4 numbers them (the second was "stage 1").
  captured = capsys.readouterr()
  log = captured.out + captured.err
  assert "stage 1/3, steps 0..6" in log and "stage 2/3: steps 3..4, max_length 48" in log, log
  assert "stage 3/3: steps 5..6, max_length 8, batch 16" in log
  lengths = []
  real_tokens_in = tasks.tokens_in

  def crash_on_fourth_batch(batch, task):
    lengths.append(batch["inputs"].shape)
    if len(lengths) == 4:  # step 4 is the second step of stage 2; step 3 is checkpointed
      raise KeyboardInterrupt("simulated crash")
    return real_tokens_in(batch, task)

  monkeypatch.setattr(tasks, "tokens_in", crash_on_fourth_batch)
  with pytest.raises(KeyboardInterrupt):
    trainer.train_and_evaluate(config(), str(tmp_path / "run"))
  assert lengths[:3] == [(8, 16), (8, 16), (8, 48)]  # stage 1 then stage 2 shapes
  monkeypatch.setattr(tasks, "tokens_in", real_tokens_in)
  assert max(int(p) for p in os.listdir(tmp_path / "run/checkpoints")) == 3
  trainer.train_and_evaluate(config(), str(tmp_path / "run"))
  (s1, p1), (s2, p2) = final_params(tmp_path / "ref"), final_params(tmp_path / "run")
  assert s1 == s2 == 6
  jax.tree.map(np.testing.assert_array_equal, p1, p2)


def test_dropout_rng_unsafe_rbg_draws_its_own_stream_and_resumes_exactly(tmp_path):
  """config.dropout_rng (issue 41's GPU lever): with dropout on, an unsafe_rbg run stopped after
  step 1 and resumed ends bitwise where an uninterrupted one does, and the checkpointed dropout
  key is unsafe_rbg's (4 words of key data; threefry's has 2)."""
  def config(steps):
    c = smoke(dropout_rng="unsafe_rbg", total_steps=steps, checkpoint_every_steps=1, eval_every_steps=2,
              async_checkpoints=False)
    c.model.update(dict(dropout=0.1, attention_dropout=0.1))
    return c

  trainer.train_and_evaluate(config(2), str(tmp_path / "ref"))
  trainer.train_and_evaluate(config(1), str(tmp_path / "run"))
  trainer.train_and_evaluate(config(2), str(tmp_path / "run"))
  (s1, p1), (s2, p2) = final_params(tmp_path / "ref"), final_params(tmp_path / "run")
  assert s1 == s2 == 2
  jax.tree.map(np.testing.assert_array_equal, p1, p2)
  keys = [x.shape for path, x in jax.tree_util.tree_flatten_with_path(p1)[0]
          if "dropout" in jax.tree_util.keystr(path) and "key" in jax.tree_util.keystr(path)]
  assert keys and all(shape == (4,) for shape in keys), keys
  with pytest.raises(ValueError, match="config.dropout_rng='philox'.*unsafe_rbg"):
    trainer.check_config(smoke(dropout_rng="philox"))


def test_stages_must_add_up_to_total_steps():
  from configs import multistage
  c = multistage.get_config("smoke")
  c.total_steps = 7
  with pytest.raises(ValueError, match="add up to 6 steps"):
    trainer.stages_from_config(c)


def test_bf16_compute_with_gradient_accumulation_trains(tmp_path):
  config = smoke(total_steps=4, eval_every_steps=4)
  config.model.dtype = "bfloat16"  # fp32 master weights, bf16 matmuls
  config.optim.grad_accum_steps = 2
  result = trainer.train_and_evaluate(config, str(tmp_path))
  assert np.isfinite(result["loss"])
  _, params = final_params(tmp_path)
  kernels = [x for x in jax.tree.leaves(params) if x.ndim >= 2]
  assert kernels and all(x.dtype == np.float32 for x in kernels)


def test_favor_features_are_redrawn_on_schedule(tmp_path):
  config = smoke(total_steps=2, feature_redraw_every=2, checkpoint_every_steps=1, async_checkpoints=False,
                 keep_checkpoints=5)
  config.model.update(dict(attention="linear", feature_map="favor", num_features=16))
  trainer.train_and_evaluate(config, str(tmp_path))

  def projection(step):
    with ocp.CheckpointManager(str(tmp_path / "checkpoints"),
                               options=ocp.CheckpointManagerOptions(read_only=True)) as mgr:
      state = mgr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
    found = []
    jax.tree_util.tree_map_with_path(
        lambda path, x: found.append(np.asarray(x)) if "projection" in jax.tree_util.keystr(path) else None, state)
    assert found, "no FAVOR+ projection in the checkpoint"
    return found[0]

  assert not np.array_equal(projection(1), projection(2))  # redrawn after step 2, not step 1


@pytest.mark.parametrize("task", ["lm", "mlm"])
def test_samples_are_decoded_at_each_eval(tmp_path, task):
  config = smoke(total_steps=4, eval_every_steps=2, samples_per_eval=2, sample_max_new_tokens=8, task=task)
  trainer.train_and_evaluate(config, str(tmp_path))
  samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
  assert [(s["step"], s["index"]) for s in samples] == [(2, 0), (2, 1), (4, 0), (4, 1)]
  for s in samples:
    assert s["prompt"] and s["output"] and s["reference"]
  if task == "lm":  # the prompt is the start of a validation document; 8 new bytes at most, greedy and sampled
    assert all(len(s["output"].encode()) <= 8 and len(s["sampled"]) <= 8 for s in samples)  # (a sampled byte may not
    # be UTF-8 alone: shown as one replacement character)
    assert all(s["sampling"] == samples_lib.SAMPLING == "temperature 0.8, top-k 40, seed 0" for s in samples)
  else:  # the masked text (its masks shown), the model's fills, the original; fills counted
    assert all(samples_lib.MASK_SHOWN in s["prompt"] and len(s["output"]) == len(s["reference"]) for s in samples)
    assert all(int(s["filled_right"].split("/")[1]) > 0 for s in samples)
  shown = samples_lib.screen(samples[0], 2).splitlines()  # what a person sees under the progress bar
  assert shown[0] == "sample at step 2:" and shown[1].startswith("  input:") and shown[-1].startswith("  reference:")
  # A resumed run drops the rows past its checkpoint before logging them again.
  trainer.train_and_evaluate(smoke(total_steps=6, eval_every_steps=2, samples_per_eval=1, sample_max_new_tokens=8,
                                   task=task), str(tmp_path))
  steps = [json.loads(line)["step"] for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
  assert steps == [2, 2, 4, 4, 6]
