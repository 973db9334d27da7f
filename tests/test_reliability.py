"""Unattended runs survive what clusters do to them (docs/reliability.md).

Checkpoint integrity and fallback, the workdir lock, signals, write errors and the CLI's error
reporting, each on the smallest thing that shows it; then the reduced fault campaign
(scripts/fault_campaign.py --quick) runs train.py end to end under every fault.
"""

import errno
import fcntl
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roformer_jax import errors
from roformer_jax.training import checkpoints, launch, metrics, trainer, workdir_lock
from roformer_jax.evaluation import evaluate
from roformer_jax.training.checkpoints import Checkpointer

ROOT = pathlib.Path(__file__).parents[1]
SMOKE = f"{ROOT / 'configs/default.py'}:smoke"


def _state(seed):
  return {"w": jax.random.normal(jax.random.key(seed), (64, 32)), "count": jnp.array(seed, jnp.int32)}


def _saved(tmp_path, steps=(1, 2, 3), keep=10, async_save=False):
  ck = Checkpointer(tmp_path / "checkpoints", keep=keep, save_every=1, async_save=async_save)
  for step in steps:
    ck.save(step, _state(step), force=True)
  ck.close()
  return tmp_path / "checkpoints"


def _array_file(step_dir):
  """The largest array data file of a saved state (where the values live)."""
  files = sorted((step_dir / "state" / "ocdbt.process_0" / "d").iterdir(), key=lambda p: p.stat().st_size)
  return files[-1]


def _damage(step_dir, how):
  target = _array_file(step_dir)
  if how == "truncate":
    os.truncate(target, 100)
  elif how == "flip":
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x04
    target.write_bytes(bytes(data))
  else:
    target.unlink()


# --------------------------------------------------------------------------------------
# Integrity: digests, fallback, quarantine
# --------------------------------------------------------------------------------------


def test_orbax_reads_a_flipped_byte_back_silently_and_the_digest_catches_it(tmp_path):
  directory = _saved(tmp_path, steps=(1,))
  _damage(directory / "1", "flip")
  # Orbax alone restores the corrupted values without an error: this is why digests exist.
  ck = Checkpointer(directory, read_only=True)
  restored = ck.restore(1, _state(0))
  assert not np.array_equal(restored["w"], _state(1)["w"])
  assert "SHA-256 mismatch" in checkpoints.verify_digest(str(directory / "1"))
  ck.close()


@pytest.mark.parametrize("how", ["truncate", "flip", "delete"])
def test_restore_skips_a_damaged_newest_checkpoint_and_keeps_it(tmp_path, how, capsys):
  directory = _saved(tmp_path)
  _damage(directory / "3", how)
  ck = Checkpointer(directory, keep=2, save_every=1, async_save=False)
  step, state, _ = ck.restore_newest(_state(0))
  assert step == 2
  np.testing.assert_array_equal(state["w"], _state(2)["w"])
  assert "checkpoint step 3" in capsys.readouterr().err
  damaged = tmp_path / "checkpoints.damaged" / "3"
  assert "step 3" in (damaged / "WHY.txt").read_text()
  assert ck.all_steps() == [1, 2]
  # Training goes on: step 3 is saved afresh, keep-last-2 prunes, and the damaged copy stays.
  for s in (3, 4):
    ck.save(s, _state(s), force=True)
  ck.close()
  assert Checkpointer(directory, read_only=True).all_steps() == [3, 4]
  assert damaged.is_dir() and (damaged / "state").is_dir()
  assert checkpoints.verify_digest(str(directory / "4")) is None


def test_every_checkpoint_damaged_is_a_clear_error_that_deletes_nothing(tmp_path):
  directory = _saved(tmp_path, steps=(1, 2))
  for step in (1, 2):
    _damage(directory / str(step), "truncate")
  files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
  ck = Checkpointer(directory, read_only=True)  # eval's view: nothing is moved either
  with pytest.raises(checkpoints.NoUsableCheckpoint, match=r"step 2: file .* bytes.*step 1: file .* bytes"):
    ck.restore_newest(_state(0), quarantine=False)
  ck.close()
  assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == files


def test_an_intact_checkpoint_of_another_model_is_a_mismatch_not_damage(tmp_path):
  directory = _saved(tmp_path, steps=(1,))
  ck = Checkpointer(directory, save_every=1)
  with pytest.raises(checkpoints.CheckpointMismatch, match=r"do not match this config: step 1 .*w: saved \(64, 32\) vs \(64, 16\)"):
    ck.restore_newest({"w": jnp.zeros((64, 16)), "count": jnp.array(0, jnp.int32)})
  ck.close()
  assert not (tmp_path / "checkpoints.damaged").exists() and (directory / "1").is_dir()


def test_a_checkpoint_without_a_digest_warns_on_restore_and_is_digested_once_read(tmp_path, capsys):
  directory = _saved(tmp_path, steps=(1, 2))
  (directory / "2" / checkpoints.DIGEST_FILE).unlink()  # as an older version left it, killed before the digest
  ck = Checkpointer(directory, read_only=True)  # eval's view: warns, writes nothing
  step, state, _ = ck.restore_newest(_state(0))
  ck.close()
  err = capsys.readouterr().err
  assert step == 2 and int(state["count"]) == 2
  assert "checkpoint step 2" in err and "has no digest" in err, err
  assert not checkpoints.has_digest(str(directory / "2"))
  checkpoints.average_checkpoints(directory, _state(0), last=2)
  assert "checkpoint step 2" in capsys.readouterr().err
  # The trainer's restore warns once, then digests the step it read back.
  ck = Checkpointer(directory, save_every=1)
  assert ck.restore_newest(_state(0))[0] == 2
  assert "has no digest" in capsys.readouterr().err
  assert checkpoints.has_digest(str(directory / "2")) and checkpoints.verify_digest(str(directory / "2")) is None
  assert ck.restore_newest(_state(0))[0] == 2
  ck.close()
  assert "has no digest" not in capsys.readouterr().err


def test_a_digest_that_cannot_be_written_after_a_restore_is_a_write_error_not_damage(tmp_path, monkeypatch):
  directory = _saved(tmp_path, steps=(1,))
  (directory / "1" / checkpoints.DIGEST_FILE).unlink()

  def full(step_dir):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(step_dir, "digest.json"))

  monkeypatch.setattr(checkpoints, "write_digest", full)
  ck = Checkpointer(directory, save_every=1)
  with pytest.raises(checkpoints.CheckpointWriteError, match=r"digest of restored checkpoint step 1 .* No space left"):
    ck.restore_newest(_state(0))
  ck.close()
  assert (directory / "1").is_dir() and not (tmp_path / "checkpoints.damaged").exists()


@pytest.mark.slow
def test_the_newest_checkpoint_is_digested_when_it_commits_so_a_kill_then_a_flip_is_caught(tmp_path, capsys):
  # Async saves of steps 10 and 20, then the process dies once step 20 has committed: no next
  # save and no close() (the SIGKILL). Then one bit of step 20 flips on disk.
  code = ("import os, sys, jax, jax.numpy as jnp\n"
          "from roformer_jax.training.checkpoints import Checkpointer\n"
          "ck = Checkpointer(sys.argv[1], save_every=10, async_save=True)\n"
          "for step in (10, 20):\n"
          "  ck.save(step, {'w': jax.random.normal(jax.random.key(step), (64, 32)), 'count': jnp.array(step, jnp.int32)})\n"
          "ck.manager.wait_until_finished()\n"
          "os._exit(0)\n")
  out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "checkpoints")], capture_output=True, text=True,
                       env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}, timeout=300)
  assert out.returncode == 0, out.stderr
  _damage(tmp_path / "checkpoints" / "20", "flip")
  ck = Checkpointer(tmp_path / "checkpoints", save_every=10)
  step, state, _ = ck.restore_newest(_state(0))
  ck.close()
  assert step == 10, f"restored step {step} from a corrupted checkpoint: {capsys.readouterr().err}"
  np.testing.assert_array_equal(state["w"], _state(10)["w"])
  assert "checkpoint step 20" in capsys.readouterr().err


def test_async_saves_get_digests_once_committed(tmp_path):
  directory = _saved(tmp_path, steps=(1, 2, 3), async_save=True)
  for step in (1, 2, 3):
    assert checkpoints.has_digest(str(directory / str(step)))
    assert checkpoints.verify_digest(str(directory / str(step))) is None


def test_average_of_the_last_n_leaves_a_damaged_checkpoint_out(tmp_path, capsys):
  directory = _saved(tmp_path, steps=(1, 2, 3, 4))
  _damage(directory / "4", "flip")
  mean, used = checkpoints.average_checkpoints(directory, _state(0), last=2)
  assert used == [2, 3] and "left out of the average" in capsys.readouterr().err
  np.testing.assert_allclose(mean["w"], (np.asarray(_state(2)["w"]) + np.asarray(_state(3)["w"])) / 2, atol=1e-6)
  with pytest.raises(errors.UserError, match="step 4 is damaged"):
    checkpoints.average_checkpoints(directory, _state(0), steps=[3, 4])


@pytest.mark.parametrize("async_save", [False, True])
def test_a_failed_write_names_the_path_and_cause_and_keeps_the_last_checkpoint(tmp_path, monkeypatch, async_save):
  ck = Checkpointer(tmp_path / "checkpoints", save_every=1, async_save=async_save)
  ck.save(1, _state(1), force=True)
  ck.wait()

  def full(step_dir):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(step_dir, "digest.json"))

  monkeypatch.setattr(checkpoints, "write_digest", full)  # the injected fault, at the write call
  # The digest is part of the commit: a step whose digest cannot be written is never committed.
  # A synchronous save fails at once; an asynchronous one when the next save or close() waits.
  with pytest.raises(checkpoints.CheckpointWriteError,
                     match=r"step 2 .* failed: No space left on device \(.*/digest.json\).*step 1\) is intact"):
    ck.save(2, _state(2), force=True)
    ck.save(3, _state(3), force=True)
  ck.close()
  monkeypatch.undo()
  ck = Checkpointer(tmp_path / "checkpoints", read_only=True)
  assert ck.all_steps() == [1]
  step, state, _ = ck.restore_newest(_state(0))
  assert step == 1 and int(state["count"]) == 1


def test_tensorstore_write_errors_are_read_as_os_errors():
  # The message a full tmpfs gave (scripts/fault_campaign.py's disk-full trial).
  error = ValueError('RESOURCE_EXHAUSTED: Error writing "1.opt_state.mu/0" in OCDBT database at local file "/w/ck/'
                     '20.orbax-checkpoint-tmp/state/": Failed writing: "/w/ck/20.orbax-checkpoint-tmp/state/d/81cf": '
                     "Failed to write 10467 bytes to file 11: No space left on device [os_error_code='28']")
  assert checkpoints._is_write_error(error)
  assert checkpoints._write_error_text(error) == "No space left on device (writing /w/ck/20.orbax-checkpoint-tmp/state/d/81cf)"
  assert not checkpoints._is_write_error(ValueError("Requested shape (3,) does not match (4,)"))


def test_a_torn_metrics_line_is_skipped_on_resume(tmp_path):
  (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo')
  metrics.truncate_after(str(tmp_path), 2)
  assert [r["step"] for r in metrics.read_rows(str(tmp_path / "metrics.jsonl"))] == [1, 2]


# --------------------------------------------------------------------------------------
# The workdir lock
# --------------------------------------------------------------------------------------


def test_a_second_lock_names_the_holder_and_a_released_lock_is_free(tmp_path):
  with workdir_lock.WorkdirLock(str(tmp_path)) as held:
    assert held.mode == "flock"
    with pytest.raises(workdir_lock.WorkdirLocked, match=rf"pid {os.getpid()} on host {socket.gethostname()}, "
                                                         r"started .*running: .*python"):
      workdir_lock.WorkdirLock(str(tmp_path)).acquire()
  workdir_lock.WorkdirLock(str(tmp_path)).acquire().release()


def test_a_lock_left_by_a_killed_process_does_not_block(tmp_path):
  code = ("import sys, time; from roformer_jax.training import workdir_lock; workdir_lock.WorkdirLock(sys.argv[1]).acquire(); "
          "print('held', flush=True); time.sleep(600)")
  proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert proc.stdout.readline().strip() == "held"
  with pytest.raises(workdir_lock.WorkdirLocked, match=f"pid {proc.pid}"):
    workdir_lock.WorkdirLock(str(tmp_path)).acquire()
  proc.kill()
  proc.wait()
  workdir_lock.WorkdirLock(str(tmp_path)).acquire().release()  # the kernel dropped the flock


def test_without_flock_a_lock_file_with_liveness_checks_is_used(tmp_path, monkeypatch):
  def no_flock(fd, op):
    raise OSError(errno.ENOLCK, "No locks available")

  monkeypatch.setattr(fcntl, "flock", no_flock)
  path = tmp_path / workdir_lock.LOCK_FILE
  with workdir_lock.WorkdirLock(str(tmp_path)) as held:
    assert held.mode == "file"
    with pytest.raises(workdir_lock.WorkdirLocked, match=f"pid {os.getpid()}"):
      workdir_lock.WorkdirLock(str(tmp_path)).acquire()
  assert not path.exists()
  # A record left by a dead process on this host is stale and taken over.
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
  path.write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout), "started": "", "command": ""}))
  workdir_lock.WorkdirLock(str(tmp_path)).acquire().release()
  # Another host's record: held while its heartbeat is fresh, stale once it stops.
  path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "started": "", "command": "train.py"}))
  with pytest.raises(workdir_lock.WorkdirLocked, match="host elsewhere"):
    workdir_lock.WorkdirLock(str(tmp_path)).acquire()
  old = time.time() - workdir_lock.STALE_S - 60
  os.utime(path, (old, old))
  workdir_lock.WorkdirLock(str(tmp_path)).acquire().release()


def test_two_takers_of_a_stale_lock_never_both_hold_it(tmp_path, monkeypatch):
  monkeypatch.setattr(fcntl, "flock", lambda fd, op: (_ for _ in ()).throw(OSError(errno.ENOLCK, "No locks available")))
  path = tmp_path / workdir_lock.LOCK_FILE
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
  path.write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout), "started": "", "command": ""}))
  # B judges the dead holder's lock stale, then is delayed; meanwhile A takes the lock over.
  judge, first = workdir_lock.WorkdirLock._stale, []

  def stale_then_delayed(self, *args):
    verdict = judge(self, *args)
    if verdict and not first:
      first.append(None)
      first[0] = workdir_lock.WorkdirLock(str(tmp_path)).acquire()
    return verdict

  monkeypatch.setattr(workdir_lock.WorkdirLock, "_stale", stale_then_delayed)
  with pytest.raises(workdir_lock.WorkdirLocked, match=f"in use by another trainer: pid {os.getpid()}"):
    workdir_lock.WorkdirLock(str(tmp_path)).acquire()  # B must not take A's live lock
  a = first[0]
  assert a.mode == "file" and json.loads(path.read_text())["pid"] == os.getpid()
  a.release()
  assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing left behind


# --------------------------------------------------------------------------------------
# The CLI: user mistakes read as errors; a held workdir; eval beside training
# --------------------------------------------------------------------------------------


def _cli(script, *flags, env=None):
  return subprocess.run([sys.executable, str(ROOT / script), *flags], capture_output=True, text=True, timeout=300,
                        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  from configs import default
  workdir = tmp_path_factory.mktemp("trained")
  config = default.get_config("smoke")
  config.data.data_dir = os.environ.get("ROFORMER_TEST_DATA_DIR", "")
  trainer.train_and_evaluate(config, str(workdir))
  return workdir


@pytest.mark.slow
def test_a_second_trainer_exits_2_naming_the_holder_and_eval_runs_beside_it(trained):
  from configs import default
  with workdir_lock.WorkdirLock(str(trained)):
    out = _cli("train.py", "--config", SMOKE, "--workdir", str(trained))
    assert out.returncode == 2, out.stderr
    assert f"in use by another trainer: pid {os.getpid()}" in out.stderr and "Traceback" not in out.stderr
    # eval reads committed checkpoints only and takes no lock.
    config = default.get_config("smoke")
    config.data.data_dir = os.environ.get("ROFORMER_TEST_DATA_DIR", "")
    config.eval.length_factors, config.eval.length_batches, config.eval.max_batches = (1,), 1, 1
    assert evaluate.evaluate(config, str(trained))["step"] == 2


@pytest.mark.slow
def test_eval_reads_the_runs_own_config_and_a_mismatch_names_the_keys(trained):
  """Issue 40: eval.py --workdir alone uses the config the run saved (the same metrics as the run's config file
  gives), overrides on top; --config with another task exits 2 naming the key that differs before any parameter
  path."""
  from configs import default
  from roformer_jax.training import run_config
  config = default.get_config("smoke")
  config.data.data_dir = os.environ.get("ROFORMER_TEST_DATA_DIR", "")
  saved = run_config.load(str(trained))
  for c in (config, saved):
    c.eval.length_factors, c.eval.length_batches, c.eval.max_batches = (1,), 1, 1
  assert evaluate.evaluate(saved, str(trained))["metrics"] == evaluate.evaluate(config, str(trained))["metrics"]
  out = _cli("eval.py", "--config", SMOKE, "--workdir", str(trained), "--config.task=mlm",
             "--config.eval.max_batches=1")
  assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
  assert "differ in task: 'lm' in the run, 'mlm' requested" in out.stderr, out.stderr
  out = _cli("eval.py", "--workdir", str(trained / "nothing"))
  assert out.returncode == 2 and "has no config.json" in out.stderr and "flag --config" not in out.stderr, out.stderr
  # A finished run says so and how to train further, in a line a person reads, with none of the known noise.
  out = _cli("train.py", "--config", SMOKE, "--workdir", str(trained),
             f"--config.data.data_dir={os.environ.get('ROFORMER_TEST_DATA_DIR', '')}")
  last = out.stdout.strip().splitlines()[-1]
  assert out.returncode == 0 and "is already finished: step 2 of total_steps=2" in last and \
      "larger --config.total_steps" in last, out.stdout + out.stderr
  assert not [start for _, start, _ in launch.NOISE if start in out.stderr], out.stderr


@pytest.mark.parametrize("flags, message", [
    (["--config.totl_steps=3"], "no such config key 'totl_steps'"),
    (["--config.mesh.data=3"], "needs 3 devices but 1 are available"),
    (["--config.data.dataset=imagenet"], "imagenet"),
    (["--config=configs/nothere.py"], "nothere.py"),
    (["--config=configs/default.py:nonsense"], "unknown variant(s) ['nonsense']; allowed"),  # the file's own check
    (["--config.total_steps=abc"], "flag --config.total_steps=abc: invalid literal for int()"),  # a value's type
    (["--config.optim.warmup_steps=5000"], "invalid config: warmup_steps=5000 exceeds total_steps=2"),  # validation
    (["--config.model.rope_scaling={'rope_type': 'yarn', 'factor': 4.0"],  # a dict literal missing its }
     "--config.model.rope_scaling: the text \"{'rope_type': 'yarn', 'factor': 4.0\" is not a Python literal"),
])
@pytest.mark.slow
def test_user_mistakes_exit_2_with_the_message_alone(tmp_path, flags, message):
  out = _cli("train.py", "--config", SMOKE, "--workdir", str(tmp_path / "w"), *flags)
  assert out.returncode == 2, out.stderr
  assert message in out.stderr and "Traceback" not in out.stderr, out.stderr
  assert not (tmp_path / "w").exists()  # a failed config check creates nothing


@pytest.mark.slow
def test_a_workdir_that_is_a_file_and_tracebacks_on_request(tmp_path):
  (tmp_path / "w").write_text("")
  out = _cli("train.py", "--config", SMOKE, "--workdir", str(tmp_path / "w"))
  assert out.returncode == 2 and "workdir" in out.stderr and "Traceback" not in out.stderr, out.stderr
  out = _cli("eval.py", "--config", SMOKE, "--workdir", str(tmp_path / "none"))
  assert out.returncode == 2 and "train first" in out.stderr and "Traceback" not in out.stderr, out.stderr
  out = _cli("train.py", "--config", SMOKE, "--workdir", str(tmp_path / "w"), env={errors.TRACEBACK_ENV: "1"})
  assert out.returncode == 1 and "Traceback" in out.stderr and "UserError" in out.stderr, out.stderr


@pytest.mark.slow
def test_bugs_keep_their_traceback():
  code = ("import sys; from roformer_jax.training import launch\n"
          "def main(argv):\n  raise RuntimeError('a bug')\n"
          "launch.run(main)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert out.returncode == 1 and "Traceback" in out.stderr and "RuntimeError: a bug" in out.stderr


# --------------------------------------------------------------------------------------
# Signals in a multi-process run, and the reduced fault campaign
# --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_stop_at_the_same_step_when_only_one_is_signalled(tmp_path):
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  flags = ["--config", SMOKE, "--workdir", str(tmp_path), "--coordinator_address", f"127.0.0.1:{port}",
           "--num_processes", "2", "--cpu_devices", "2", "--config.total_steps=100000",
           "--config.checkpoint_every_steps=100000", "--config.mesh.fsdp=2", "--config.data.max_documents=300"]
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
  procs = [subprocess.Popen([sys.executable, str(ROOT / "train.py"), *flags, "--process_id", str(i)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
  deadline = time.time() + 240
  while not ((tmp_path / "metrics.jsonl").exists() and (tmp_path / "metrics.jsonl").read_text().count("loss") >= 3):
    assert all(p.poll() is None for p in procs) and time.time() < deadline, [p.communicate()[0][-3000:] for p in procs]
    time.sleep(0.05)
  procs[1].send_signal(signal.SIGTERM)  # process 0 is never signalled
  outs = [p.communicate(timeout=240)[0] for p in procs]
  assert [p.returncode for p in procs] == [0, 0], "\n----\n".join(outs)
  saved = [int(p) for p in os.listdir(tmp_path / "checkpoints") if p.isdigit()]
  # Only the stop saved (no first-step checkpoint), on both processes at once.
  assert len(saved) == 1 and f"SIGTERM: saved step {max(saved)};" in outs[0]


# The fault campaign itself (scripts/fault_campaign.py: SIGKILLs compared bitwise with an
# uninterrupted run) runs in tests/test_docs.py as docs/reliability.md's command with --smoke;
# `--quick` (3 kills and one of each other fault, about 2.5 min) is run by hand. Each other fault
# has its own test in this file.


def test_a_coordinator_port_in_use_is_a_clear_error_not_a_crash():
  """jax.distributed segfaults (exit 139) when process 0's port is taken; launch says so first."""
  from roformer_jax.training import launch
  with socket.socket() as busy:
    busy.bind(("", 0))
    busy.listen()
    port = busy.getsockname()[1]
    with pytest.raises(errors.UserError, match=rf"port {port} is already in use"):
      launch.check_coordinator_port(f"127.0.0.1:{port}", 0)
    launch.check_coordinator_port(f"127.0.0.1:{port}", 1)  # only process 0 binds it
  launch.check_coordinator_port(f"127.0.0.1:{port}", 0)  # free again
  with pytest.raises(errors.UserError, match="expected host:port"):
    launch.check_coordinator_port("localhost", 0)


def test_the_campaign_merges_the_rows_of_some_trials_into_the_recorded_table():
  sys.path.insert(0, str(ROOT / "scripts"))
  import fault_campaign
  recorded = ("| fault | injected | runs bitwise exact | steps redone | lost | what happened |\n|---|---|---|---|---|---|\n"
              "| kept | 1 | 1/1 | 0 | 0 | old |\n| replaced | 1 | 1/1 | 0 | 0 | old |\n\nCommand: `full` (1 min).\n")
  row = dict(injected=2, runs=2, exact=2, redone=3, lost="0", note="new", ok=True)
  rows = [dict(row, fault="replaced"), dict(row, fault="added")]
  merged = fault_campaign.merge(recorded, rows, "Rows of `--only a`:", "Rows of `--only a`: first.")
  merged = fault_campaign.merge(merged, rows, "Rows of `--only a`:", "Rows of `--only a`: second.")
  assert merged.splitlines()[2:5] == ["| kept | 1 | 1/1 | 0 | 0 | old |", "| replaced | 2 | 2/2 | 3 | 0 | new |",
                                      "| added | 2 | 2/2 | 3 | 0 | new |"]
  assert merged.endswith("Command: `full` (1 min).\n\nRows of `--only a`: second.")
  with pytest.raises(SystemExit, match=r"unknown trial name\(s\) \['nope'\]; the trials are kills, "):
    fault_campaign.selected("flip,nope", smoke=False)
