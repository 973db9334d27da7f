"""A fault campaign: inject the faults real clusters cause into `train.py`, and count what is lost.

  python scripts/fault_campaign.py                       # the full campaign (about 10 min on 2 cores)
  python scripts/fault_campaign.py --record              # ... and write its table into docs/reliability.md
  python scripts/fault_campaign.py --quick               # a few kills and one of each other fault (make test)
  python scripts/fault_campaign.py --smoke               # one kill of a 20-step run, nothing else; records nothing
  python scripts/fault_campaign.py --only flip,delete --record   # just these trials; their rows merged into the table

Every trial runs the same command, `train.py --config configs/default.py:smoke` with more steps
and frequent asynchronous checkpoints, and ends by comparing the final parameters and optimiser
state with those of one uninterrupted run of that command: bitwise, every leaf.

The faults:
- SIGKILL at a random moment (uniform over the length of an uninterrupted run, so it lands in
  start-up, restore, compilation, training and saves alike); a third of the kills wait for an
  asynchronous save to be in flight (its temporary directory exists) and kill inside it. After
  each kill the same command is started again.
- A damaged newest checkpoint: a data file truncated to 1,000 bytes, one byte flipped (silent
  corruption, which orbax itself reads back without complaint), a file deleted. Then every
  checkpoint damaged: the run must refuse with a clear error and delete nothing.
- A SIGKILL the moment a checkpoint commits (where its digest used to be missing), then one bit
  flipped in that checkpoint: the run must catch it, not resume silently from corrupted data.
- Disk full: the workdir on a small tmpfs (a private mount namespace, via `unshare`) that fills up
  mid-run; the run must stop with a message naming the cause; after space is freed the same
  command resumes. Skipped, and said so, where mount namespaces are not allowed.
- A second trainer on the same workdir: it must exit with status 2 naming the holder, and the
  first must finish exactly.
- SIGTERM, one Ctrl-C (SIGINT), and two Ctrl-Cs (the second aborts at once), each followed by
  the same command.
- A peer's death in a two-process run (one fake CPU device each): SIGKILL of process 1, and
  separately of process 0 (the coordinator), mid-run. The survivor must stop by itself within
  the heartbeat timeout, printing the line that names the dead process and the checkpoint to
  resume from; then both commands are started again, and the result is compared bitwise with
  an uninterrupted two-process run.

Each table row: the fault, how many times it was injected, how many runs ended bitwise equal to
the uninterrupted run, the steps trained twice, and anything lost (metrics rows missing or
doubled, checkpoints deleted, runs that did not finish).
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import pathlib
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from roformer_jax.training.metrics import read_rows  # noqa: E402  (torn lines skipped, as the trainer does)

DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- fault-campaign:begin -->", "<!-- fault-campaign:end -->"


# --------------------------------------------------------------------------------------
# Running train.py
# --------------------------------------------------------------------------------------


def train_flags(steps: int) -> list[str]:
  return [f"--config.total_steps={steps}", "--config.checkpoint_every_steps=10", "--config.eval_every_steps=100000",
          "--config.log_every_steps=1", "--config.async_checkpoints=True", "--config.keep_checkpoints=3"]


def command(workdir: str, steps: int) -> list[str]:
  return [sys.executable, str(ROOT / "train.py"), "--config", f"{ROOT / 'configs/default.py'}:smoke",
          "--workdir", workdir, *train_flags(steps)]


def env() -> dict[str, str]:
  return {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def start(workdir: str, steps: int, log) -> subprocess.Popen:
  return subprocess.Popen(command(workdir, steps), env=env(), stdout=log, stderr=subprocess.STDOUT, text=True,
                          cwd=ROOT)


def run(workdir: str, steps: int, timeout: float = 600) -> subprocess.CompletedProcess:
  return subprocess.run(command(workdir, steps), env=env(), capture_output=True, text=True, timeout=timeout, cwd=ROOT)


# The peer-death trials' detection time: short, so that a trial costs seconds, not the default 30.
PEER_HEARTBEAT_SECONDS = 10


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def start_pair(workdir: str, steps: int, log) -> list[subprocess.Popen]:
  """Both processes of a two-process run of the campaign's command (one fake CPU device each)."""
  flags = ["--coordinator_address", f"127.0.0.1:{free_port()}", "--num_processes", "2", "--cpu_devices", "1",
           "--heartbeat_timeout_seconds", str(PEER_HEARTBEAT_SECONDS)]
  return [subprocess.Popen([*command(workdir, steps), *flags, "--process_id", str(i)], env=env(), stdout=log,
                           stderr=subprocess.STDOUT, text=True, cwd=ROOT) for i in range(2)]


def run_pair(workdir: str, steps: int, what: str, log_path: str) -> None:
  """Runs a two-process run to its end; raises if either process fails."""
  with open(log_path, "a") as log:
    procs = start_pair(workdir, steps, log)
    codes = [p.wait(timeout=600) for p in procs]
  if codes != [0, 0]:
    raise RuntimeError(f"{what}: exit statuses {codes}; see {log_path}")


def committed_steps(workdir: str) -> list[int]:
  d = os.path.join(workdir, "checkpoints")
  return sorted(int(p) for p in os.listdir(d) if p.isdigit()) if os.path.isdir(d) else []


def saving(workdir: str) -> set[tuple[str, int]]:
  """The temporary directories of saves in flight (name, inode); a set, so that one a previous
  kill left behind can be told from a new one."""
  out = set()
  for path in glob.glob(os.path.join(workdir, "checkpoints", "*.orbax-checkpoint-tmp*")):
    try:
      out.add((path, os.stat(path).st_ino))
    except FileNotFoundError:
      pass
  return out


def last_logged_step(workdir: str) -> int:
  path = os.path.join(workdir, "metrics.jsonl")
  steps = [row["step"] for row in read_rows(path) if "loss" in row] if os.path.exists(path) else []
  return max(steps, default=0)


def metric_rows_lost(workdir: str, steps: int) -> int:
  """Training rows missing or doubled in metrics.jsonl (each step 1..steps should appear once)."""
  logged = [row["step"] for row in read_rows(os.path.join(workdir, "metrics.jsonl")) if "loss" in row]
  return len(set(range(1, steps + 1)) ^ set(logged)) + (len(logged) - len(set(logged)))


def final_state(workdir: str):
  """The newest checkpoint's state as numpy arrays, read with orbax directly."""
  import jax
  import numpy as np
  import orbax.checkpoint as ocp
  ckdir = os.path.join(workdir, "checkpoints")
  with ocp.CheckpointManager(ckdir, options=ocp.CheckpointManagerOptions(read_only=True)) as mgr:
    step = mgr.latest_step()
    state = mgr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
  as_numpy = lambda x: np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
  return step, jax.tree.map(as_numpy, state)


def final_state_on_one_device(workdir: str):
  """`final_state` of a checkpoint saved by several processes: its arrays were sharded over
  devices this process does not have, so each is restored whole onto this process's first device
  (the shapes and dtypes from the checkpoint's metadata)."""
  import jax
  import numpy as np
  import orbax.checkpoint as ocp
  ckdir = os.path.join(workdir, "checkpoints")
  one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  with ocp.CheckpointManager(ckdir, item_handlers={"state": ocp.StandardCheckpointHandler()},
                             options=ocp.CheckpointManagerOptions(read_only=True)) as mgr:
    step = mgr.latest_step()
    target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one),
                          mgr.item_metadata(step)["state"])
    state = mgr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))["state"]
  as_numpy = lambda x: np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
  return step, jax.tree.map(as_numpy, state)


def bitwise_equal(a, b) -> bool:
  import jax
  import numpy as np
  (sa, ta), (sb, tb) = a, b
  if sa != sb or jax.tree.structure(ta) != jax.tree.structure(tb):
    return False
  return all(x.dtype == y.dtype and np.array_equal(x, y)
             for x, y in zip(jax.tree.leaves(ta), jax.tree.leaves(tb), strict=True))


class Campaign:
  def __init__(self, args):
    self.args = args
    self.rng = random.Random(args.seed)
    self.root = tempfile.mkdtemp(prefix="fault_campaign_", dir=args.tmp)
    self.rows: list[dict] = []
    self.steps = args.steps
    self.reference = None
    self.reference_seconds = 0.0
    self.trial = ""  # the TRIALS name running now, recorded in each row

  def log(self, message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

  def workdir(self, name: str) -> str:
    path = os.path.join(self.root, name)
    shutil.rmtree(path, ignore_errors=True)
    return path

  def ensure_reference(self) -> None:
    """Runs the uninterrupted reference once, for the first trial that compares with it."""
    if self.reference is None:
      self.uninterrupted()

  def check(self, workdir: str) -> tuple[bool, int]:
    """(bitwise equal to the reference, metrics rows lost)."""
    self.ensure_reference()
    return bitwise_equal(final_state(workdir), self.reference), metric_rows_lost(workdir, self.steps)

  def row(self, fault: str, injected: int, runs: int, exact: int, redone: int, lost: str, note: str = "",
          ok: bool | None = None) -> None:
    """One table row; `ok` (default: every run exact) is whether the fault was survived as it must be."""
    ok = exact == runs if ok is None else ok
    self.rows.append(dict(trial=self.trial, fault=fault, injected=injected, runs=runs, exact=exact, redone=redone, lost=lost, note=note,
                          ok=bool(ok)))
    self.log(f"{fault}: injected {injected}, runs exact {exact}/{runs}, steps redone {redone}, lost: {lost}"
             + (f" ({note})" if note else "") + ("" if ok else "  <-- FAILED"))

  def finish(self, workdir: str, what: str) -> subprocess.CompletedProcess:
    out = run(workdir, self.steps)
    if out.returncode != 0:
      raise RuntimeError(f"{what}: the re-run failed ({out.returncode}):\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out

  # ------------------------------------------------------------------ the faults
  def uninterrupted(self) -> None:
    workdir = self.workdir("reference")
    t0 = time.perf_counter()
    self.finish(workdir, "the uninterrupted run")
    self.reference_seconds = time.perf_counter() - t0
    self.reference = final_state(workdir)
    self.reference_dir = workdir
    self.log(f"uninterrupted run: {self.steps} steps in {self.reference_seconds:.1f} s; checkpoints "
             f"{committed_steps(workdir)}")

  def kills(self, total: int, per_run: int) -> None:
    self.ensure_reference()
    killed = in_save = runs = exact = redone = lost_rows = 0
    while killed < total:
      runs += 1
      workdir = self.workdir(f"kill{runs}")
      this_run = 0
      with open(os.path.join(self.root, f"kill{runs}.log"), "w") as log:
        while this_run < per_run and killed < total:
          leftover = saving(workdir)
          proc = start(workdir, self.steps, log)
          target_save = (killed % 3) == 2
          deadline = time.perf_counter() + (self.reference_seconds * 3 if target_save else
                                            self.rng.uniform(0.0, self.reference_seconds))
          while proc.poll() is None and time.perf_counter() < deadline:
            if target_save and saving(workdir) - leftover:
              break
            time.sleep(0.002 if target_save else 0.01)
          if proc.poll() is not None:  # finished before the kill: this run is complete
            break
          was_saving = bool(saving(workdir) - leftover)
          proc.send_signal(signal.SIGKILL)
          proc.wait()
          reached, saved = last_logged_step(workdir), committed_steps(workdir)
          redone += max(reached - (saved[-1] if saved else 0), 0)
          killed, this_run, in_save = killed + 1, this_run + 1, in_save + was_saving
      self.finish(workdir, f"kill run {runs}")
      same, lost = self.check(workdir)
      exact += same
      lost_rows += lost
    self.row("SIGKILL at a random moment, then the same command", killed, runs, exact, redone,
             f"{lost_rows} metrics rows", f"{in_save} of the kills landed inside an asynchronous save",
             ok=exact == runs and not lost_rows)

  def damage(self, kind: str) -> None:
    self.ensure_reference()
    workdir = self.workdir(f"damage_{kind}")
    shutil.copytree(self.reference_dir, workdir)
    *_, previous, newest = committed_steps(workdir)
    step_dir = os.path.join(workdir, "checkpoints", str(newest))
    data_files = sorted(glob.glob(os.path.join(step_dir, "state", "ocdbt.process_0", "d", "*")), key=os.path.getsize)
    target = data_files[-1]  # the largest array file: the parameters and moments live there
    if kind == "truncate":
      os.truncate(target, 1000)
    elif kind == "flip":
      self.flip_bit(step_dir)
    else:
      os.remove(self.rng.choice(data_files))
    out = self.finish(workdir, f"damaged checkpoint ({kind})")
    warned = f"checkpoint step {newest}" in out.stderr and "is damaged" in out.stderr
    kept = os.path.isdir(os.path.join(workdir, "checkpoints.damaged", str(newest)))
    same, lost = self.check(workdir)
    name = {"truncate": "newest checkpoint: a data file truncated to 1,000 bytes",
            "flip": "newest checkpoint: one bit flipped in a data file",
            "delete": "newest checkpoint: a data file deleted"}[kind]
    self.row(name, 1, 1, int(same), newest - previous, f"{lost} metrics rows",
             (f"warned, resumed from step {previous}, " if warned else "NO WARNING, ")
             + ("the damaged one kept in checkpoints.damaged/" if kept else "NOT KEPT"),
             ok=same and warned and kept and not lost)

  def flip_bit(self, step_dir: str) -> None:
    """Flips one random bit of the checkpoint's largest array file (the parameters and moments)."""
    target = max(glob.glob(os.path.join(step_dir, "state", "ocdbt.process_0", "d", "*")), key=os.path.getsize)
    with open(target, "r+b") as f:
      f.seek(self.rng.randrange(os.path.getsize(target)))
      byte = f.read(1)
      f.seek(-1, os.SEEK_CUR)
      f.write(bytes([byte[0] ^ (1 << self.rng.randrange(8))]))

  def digest_window(self, trials: int) -> None:
    """SIGKILL the moment a checkpoint commits, then flip one bit of it, then the same command.

    Until the digest became part of the commit it was written at the next save, so a kill here
    left the newest checkpoint without one, and the flipped bit was restored silently. Each
    trial polls every millisecond for the commit (the step directory appearing) and kills then;
    the row counts the killed checkpoints that had no digest.
    """
    self.ensure_reference()
    runs = injected = exact = redone = lost_rows = undigested = caught = 0
    for i in range(trials):
      workdir = self.workdir(f"window{i}")
      goal = 10 * self.rng.randrange(1, self.steps // 10 - 1)  # a checkpoint before the last one
      with open(os.path.join(self.root, f"window{i}.log"), "w") as log:
        proc = start(workdir, self.steps, log)
        while proc.poll() is None and goal not in committed_steps(workdir):
          time.sleep(0.001)
        if proc.poll() is not None:
          raise RuntimeError(f"digest window trial {i}: the run ended (exit {proc.returncode}) before checkpoint "
                             f"{goal} committed; see {log.name}")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
      runs, injected = runs + 1, injected + 1
      *older, newest = committed_steps(workdir)
      step_dir = os.path.join(workdir, "checkpoints", str(newest))
      undigested += not os.path.isfile(os.path.join(step_dir, "digest.json"))
      reached = last_logged_step(workdir)
      self.flip_bit(step_dir)
      out = self.finish(workdir, f"digest window trial {i}")
      caught += (f"checkpoint step {newest}" in out.stderr and "is damaged" in out.stderr
                 and os.path.isdir(os.path.join(workdir, "checkpoints.damaged", str(newest))))
      redone += max(reached - (older[-1] if older else 0), 0)
      same, lost = self.check(workdir)
      exact += same
      lost_rows += lost
    self.row("SIGKILL as a checkpoint commits (the old digest window), then one bit flipped in it", injected, runs,
             exact, redone, f"{lost_rows} metrics rows",
             f"{undigested} of {injected} killed checkpoints had no digest; {caught} of {injected} flips caught "
             "(warned, resumed from the checkpoint before, the damaged one kept in checkpoints.damaged/)",
             ok=exact == runs and caught == injected and not lost_rows)

  def damage_all(self) -> None:
    self.ensure_reference()
    workdir = self.workdir("damage_all")
    shutil.copytree(self.reference_dir, workdir)
    for step in committed_steps(workdir):
      for f in glob.glob(os.path.join(workdir, "checkpoints", str(step), "state", "ocdbt.process_0", "d", "*")):
        os.truncate(f, 10)
    files_before = sum(len(files) for _, _, files in os.walk(workdir))
    out = run(workdir, self.steps)
    files_after = sum(len(files) for _, _, files in os.walk(workdir))
    listed = all(f"step {s}" in out.stderr for s in committed_steps(self.reference_dir))
    clear = out.returncode == 2 and "Traceback" not in out.stderr and listed
    kept = files_after >= files_before
    self.row("every checkpoint damaged", 1, 0, 0, 0,
             "nothing deleted" if kept else f"{files_before - files_after} files deleted",
             ("refused: exit 2, each checkpoint listed with its reason, no traceback" if clear else
              f"NOT CLEAR: exit {out.returncode}"), ok=clear and kept)

  def disk_full(self) -> None:
    if not shutil.which("unshare"):
      self.row("disk full (ENOSPC) mid-run", 0, 0, 0, 0, "-", "skipped: no unshare here", ok=True)
      return
    workdir = self.workdir("disk_full")
    os.makedirs(workdir)
    result = os.path.join(self.root, "disk_full.json")
    flags = [] if os.geteuid() == 0 else ["-r"]
    out = subprocess.run(["unshare", *flags, "-m", sys.executable, __file__, "--_disk_full_trial", workdir, result,
                          "--steps", str(self.steps)], env=env(), capture_output=True, text=True, timeout=900)
    if not os.path.exists(result):
      self.row("disk full (ENOSPC) mid-run", 0, 0, 0, 0, "-",
               f"skipped: no private tmpfs here ({(out.stderr.strip().splitlines() or ['?'])[-1][:120]})", ok=True)
      return
    with open(result) as f:
      trial = json.load(f)
    same, lost = self.check(trial["copy"])
    clear = trial["exit"] == 1 and "No space left on device" in trial["message"] and "Traceback" not in trial["message"]
    self.row("disk full (ENOSPC) mid-run, then space freed", 1, 1, int(same), trial["redone"],
             f"{lost} metrics rows", (f"stopped at step {trial['reached']} (exit 1): {trial['message'][:200]}" if clear
                                      else f"NOT CLEAR: exit {trial['exit']}: {trial['message'][:200]}"),
             ok=same and clear and not lost)

  def second_trainer(self) -> None:
    workdir = self.workdir("second")
    with open(os.path.join(self.root, "second.log"), "w") as log:
      first = start(workdir, self.steps, log)
      while last_logged_step(workdir) < 1 and first.poll() is None:
        time.sleep(0.05)
      first.send_signal(signal.SIGSTOP)  # alive and holding the lock, however short the run
      try:
        t0 = time.perf_counter()
        second = run(workdir, self.steps)
        refused_in = time.perf_counter() - t0
      finally:
        first.send_signal(signal.SIGCONT)
      first.wait(timeout=600)
    refused = second.returncode == 2 and f"pid {first.pid}" in second.stderr and "Traceback" not in second.stderr
    same, lost = self.check(workdir)
    self.row("a second trainer on the same workdir", 1, 1, int(same), 0, f"{lost} metrics rows",
             (f"refused in {refused_in:.1f} s: exit 2, naming the holder's pid; the first finished"
              if refused else f"NOT REFUSED: exit {second.returncode}"),
             ok=same and refused and first.returncode == 0 and not lost)

  def signals(self, name: str, count: int, twice: bool = False) -> None:
    runs = exact = redone = lost_rows = 0
    notes, handled = set(), True
    for i in range(count):
      workdir = self.workdir(f"{name}{i}")
      runs += 1
      with open(os.path.join(self.root, f"{name}{i}.log"), "w") as log:
        proc = start(workdir, self.steps, log)
        goal = self.rng.randrange(2, self.steps - 5)
        while last_logged_step(workdir) < goal and proc.poll() is None:
          time.sleep(0.005)
        sig = signal.SIGINT if name.startswith("sigint") else signal.SIGTERM
        proc.send_signal(sig)
        if twice:
          time.sleep(0.05)
          proc.send_signal(sig)
        proc.wait(timeout=300)
      with open(os.path.join(self.root, f"{name}{i}.log")) as f:
        text = f.read()
      reached, saved = last_logged_step(workdir), committed_steps(workdir)
      if twice:
        handled &= proc.returncode == -signal.SIGINT
        notes.add("aborted at once (killed by the second SIGINT)" if proc.returncode == -signal.SIGINT else
                  f"exit {proc.returncode}, NOT ABORTED")
      else:
        ok = proc.returncode == 0 and re.search(rf"{sig.name}: saved step {reached}\b", text)
        handled &= bool(ok)
        notes.add("exit 0 after saving the step it finished" if ok else f"exit {proc.returncode}, NO SAVE MESSAGE")
      redone += max(reached - (saved[-1] if saved else 0), 0)
      self.finish(workdir, name)
      same, lost = self.check(workdir)
      exact += same
      lost_rows += lost
    label = {"sigterm": "SIGTERM, then the same command", "sigint": "Ctrl-C (SIGINT), then the same command",
             "sigint2": "Ctrl-C twice (abort), then the same command"}[name]
    self.row(label, count, runs, exact, redone, f"{lost_rows} metrics rows", "; ".join(sorted(notes)),
             ok=exact == runs and handled and not lost_rows)


  def peer_death(self, killed: int) -> None:
    """SIGKILL process `killed` of a two-process run mid-run; the survivor must stop by itself.

    Compared with an uninterrupted two-process run (made once, the first time), bitwise."""
    if getattr(self, "pair_reference", None) is None:
      workdir = self.workdir("pair_reference")
      t0 = time.perf_counter()
      run_pair(workdir, self.steps, "the uninterrupted two-process run", os.path.join(self.root, "pair_reference.log"))
      self.pair_reference, self.pair_seconds = final_state_on_one_device(workdir), time.perf_counter() - t0
      self.log(f"uninterrupted two-process run: {self.steps} steps in {self.pair_seconds:.1f} s")
    workdir = self.workdir(f"peer{killed}")
    log_path = os.path.join(self.root, f"peer{killed}.log")
    goal = self.rng.randrange(self.steps // 4, self.steps // 2)  # past a checkpoint, well before the end
    with open(log_path, "w") as log:
      procs = start_pair(workdir, self.steps, log)
      while last_logged_step(workdir) < goal and all(p.poll() is None for p in procs):
        time.sleep(0.005)
      if any(p.poll() is not None for p in procs):
        raise RuntimeError(f"peer death trial: a process ended before step {goal}; see {log_path}")
      procs[killed].send_signal(signal.SIGKILL)
      t0 = time.perf_counter()
      survivor = procs[1 - killed]
      try:
        code = survivor.wait(timeout=300)
      except subprocess.TimeoutExpired:
        survivor.kill()
        code = survivor.wait()
      took = time.perf_counter() - t0
      procs[killed].wait()
    reached, saved = last_logged_step(workdir), committed_steps(workdir)
    with open(log_path) as f:
      lines = [line for line in f.read().splitlines() if "stopped answering" in line]
    said = lines[-1].strip() if lines else ""
    shown = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", said.split(" (in ")[0])  # no temporary port or path
    named = f"process {killed}" in said and (f"resume from checkpoint {saved[-1]}" in said if saved else bool(said))
    run_pair(workdir, self.steps, f"peer death trial (process {killed})", log_path)
    same = bitwise_equal(final_state_on_one_device(workdir), self.pair_reference)
    lost = metric_rows_lost(workdir, self.steps)
    who = "process 1 of 2" if killed else "process 0 of 2 (the coordinator)"
    self.row(f"SIGKILL of {who} mid-run, then the same two commands", 1, 1, int(same),
             max(reached - (saved[-1] if saved else 0), 0), f"{lost} metrics rows",
             (f"the survivor exited {code} {took:.1f} s later (--heartbeat_timeout_seconds "
              f"{PEER_HEARTBEAT_SECONDS}), its last line: \"{shown}\"" if named else
              f"NOT NAMED: the survivor exited {code} {took:.1f} s later, printing {said!r}"),
             ok=same and named and code == 1 and not lost)


def disk_full_trial(workdir: str, result: str, steps: int) -> None:
  """Inside a private mount namespace: the workdir on a tmpfs that fills, then space freed."""
  subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", workdir], check=True)
  filler = os.path.join(workdir, "filler")
  with open(filler, "wb") as f:
    f.write(b"\0" * (4 * 1024 * 1024 - 900 * 1024))  # leaves about 900 KiB: a few checkpoints' worth
  run_dir = os.path.join(workdir, "run")
  first = run(run_dir, steps)
  reached, saved = last_logged_step(run_dir), committed_steps(run_dir)
  os.remove(filler)
  subprocess.run(["mount", "-o", "remount,size=64m", workdir], check=True)
  second = run(run_dir, steps)
  copy = os.path.join(os.path.dirname(result), "disk_full_copy")
  shutil.copytree(run_dir, copy)
  message = [line for line in first.stderr.splitlines() if line.startswith("train.py: ")]
  with open(result, "w") as f:
    json.dump({"exit": first.returncode, "message": " ".join(message) or first.stderr[-400:], "reached": reached,
               "redone": max(reached - (saved[-1] if saved else 0), 0), "second_exit": second.returncode,
               "copy": copy}, f)


def table(rows: list[dict]) -> str:
  lines = ["| fault | injected | runs bitwise exact | steps redone | lost | what happened |",
           "|---|---|---|---|---|---|"]
  for r in rows:
    exact = f"{r['exact']}/{r['runs']}" if r["runs"] else "-"
    lines.append(f"| {r['fault']} | {r['injected']} | {exact} | {r['redone']} | {r['lost']} | "
                 f"{r['note']} |")
  return "\n".join(lines)


def record(text: str) -> None:
  """Replaces the whole recorded block of docs/reliability.md with `text` (a full campaign)."""
  doc = DOC.read_text()
  if BEGIN not in doc or END not in doc:
    raise SystemExit(f"{DOC} has no {BEGIN} ... {END} block to replace.")
  head, rest = doc.split(BEGIN, 1)
  DOC.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def merge(recorded: str, rows: list[dict], note_key: str, note: str) -> str:
  """The recorded block with `rows` merged in, for a run of some trials (`--only`).

  A row whose fault (first column) is already in the table replaces that row in place; a new
  fault is appended. Every other row is kept as it was, and so is every paragraph below the
  table, except an earlier paragraph of the same `--only` selection, which `note` replaces
  (the paragraph says which command recorded which rows).

  Args:
    recorded: the text between the begin and end markers (a table, then paragraphs).
    rows: the rows this run measured.
    note_key: how this run's paragraph starts (the `--only` selection).
    note: that paragraph.

  Returns:
    The new text between the markers.
  """
  lines = recorded.strip().splitlines()
  n_table = next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))
  table_lines, paragraphs = lines[:n_table], "\n".join(lines[n_table:]).strip().split("\n\n")
  if len(table_lines) < 2:
    table_lines = table([]).splitlines()
  new = {r["fault"]: line for r, line in zip(rows, table(rows).splitlines()[2:], strict=True)}
  body = []
  for line in table_lines[2:]:
    fault = line.split("|")[1].strip()
    body.append(new.pop(fault, line))
  body += list(new.values())
  paragraphs = [p for p in paragraphs if p.strip() and not p.startswith(note_key)] + [note]
  return "\n".join(table_lines[:2] + body) + "\n\n" + "\n\n".join(paragraphs)


def record_rows(rows: list[dict], note_key: str, note: str) -> None:
  """Merges `rows` into docs/reliability.md's recorded table (see `merge`)."""
  doc = DOC.read_text()
  if BEGIN not in doc or END not in doc:
    raise SystemExit(f"{DOC} has no {BEGIN} ... {END} block to merge into.")
  head, rest = doc.split(BEGIN, 1)
  recorded, tail = rest.split(END, 1)
  DOC.write_text(f"{head}{BEGIN}\n{merge(recorded, rows, note_key, note)}\n{END}{tail}")


# The trials, by the name `--only` takes, in the order the full campaign runs them. Each is
# called with the campaign and the parsed arguments, and adds its rows with `Campaign.row`.
TRIALS = {
    "kills": lambda c, args: c.kills(args.kills, args.kills_per_run),
    "truncate": lambda c, args: c.damage("truncate"),
    "flip": lambda c, args: c.damage("flip"),
    "delete": lambda c, args: c.damage("delete"),
    "digest_window": lambda c, args: c.digest_window(args.window_trials),
    "damage_all": lambda c, args: c.damage_all(),
    "disk_full": lambda c, args: c.disk_full(),
    "second_trainer": lambda c, args: c.second_trainer(),
    "sigterm": lambda c, args: c.signals("sigterm", args.signal_trials),
    "sigint": lambda c, args: c.signals("sigint", args.signal_trials),
    "sigint2": lambda c, args: c.signals("sigint2", args.signal_trials, twice=True),
    "peer_death": lambda c, args: (c.peer_death(1), c.peer_death(0)),
}


def selected(only: str | None, smoke: bool) -> list[str]:
  """The trial names to run: `--only`'s (checked), the smoke run's, or all of them."""
  if smoke:
    return ["kills"]
  if not only:
    return list(TRIALS)
  names = [n.strip() for n in only.split(",") if n.strip()]
  unknown = [n for n in names if n not in TRIALS]
  if unknown or not names:
    raise SystemExit(f"--only {only!r}: unknown trial name(s) {unknown or ['(none given)']}; the trials are "
                     f"{', '.join(TRIALS)} (comma-separated, e.g. --only flip,delete).")
  return list(dict.fromkeys(names))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--kills", type=int, default=50, help="SIGKILLs in all")
  parser.add_argument("--kills-per-run", type=int, default=5, help="SIGKILLs before a run is let finish")
  parser.add_argument("--steps", type=int, default=300, help="total_steps of the trained command")
  parser.add_argument("--signal-trials", type=int, default=3, help="trials of each of SIGTERM, SIGINT, 2x SIGINT")
  parser.add_argument("--window-trials", type=int, default=5,
                      help="trials of a SIGKILL as a checkpoint commits, then a flipped bit in it")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--quick", action="store_true", help="3 kills, 60 steps, one trial of each other fault")
  parser.add_argument("--smoke", action="store_true",
                      help="for tests, the least that runs the campaign end to end: the uninterrupted run and one "
                      "SIGKILL of 20-step runs, no other fault (3 runs of train.py); --record then writes nothing")
  parser.add_argument("--record", action="store_true", help=f"write the table into {DOC.relative_to(ROOT)} (with "
                      "--only: merge this run's rows into the recorded table, keeping the other faults' rows)")
  parser.add_argument("--only", metavar="NAME[,NAME...]",
                      help=f"run only these trials (the uninterrupted reference too, if they compare with it): "
                      f"{', '.join(TRIALS)}")
  parser.add_argument("--json", help="also write the rows to this JSON file")
  parser.add_argument("--tmp", default=None, help="where the workdirs go (default: the system's temp dir)")
  parser.add_argument("--keep", action="store_true", help="keep the workdirs")
  parser.add_argument("--_disk_full_trial", nargs=2, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args._disk_full_trial:
    disk_full_trial(*args._disk_full_trial, args.steps)
    return
  if args.quick:
    args.kills, args.kills_per_run, args.steps, args.signal_trials, args.window_trials = 3, 3, 60, 1, 1
  if args.smoke:
    args.kills, args.kills_per_run, args.steps, args.signal_trials = 1, 1, 20, 0
    if args.record:
      print(f"--smoke: --record writes nothing (one kill is not the campaign; {DOC.relative_to(ROOT)} is left "
            "as it is)")
      args.record = False

  names = selected(args.only, args.smoke)
  c = Campaign(args)
  t0 = time.perf_counter()
  try:
    for name in names:
      c.trial = name
      TRIALS[name](c, args)
  finally:
    if not args.keep:
      shutil.rmtree(c.root, ignore_errors=True)
  minutes = (time.perf_counter() - t0) / 60
  shown = " ".join(["python", "scripts/fault_campaign.py", *sys.argv[1:]])
  where = (f"Recorded {datetime.date.today().isoformat()} on {platform.node() or 'this machine'} ({os.cpu_count()} "
           f"cores, Python {platform.python_version()}).")
  text = (f"{table(c.rows)}\n\nCommand: `{shown}` ({minutes:.1f} min; {args.steps}-step runs of "
          f"`configs/default.py:smoke`, a checkpoint every 10 steps, asynchronous). {where}")
  print(text)
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"rows": c.rows, "minutes": minutes, "args": vars(args)}, f, indent=1)
  if args.record and args.only:
    key = f"Rows of `--only {','.join(names)}`:"
    faults = ", ".join(f"\"{r['fault']}\"" for r in c.rows)
    record_rows(c.rows, key, f"{key} {faults}. Command: `{shown}` ({minutes:.1f} min; {args.steps}-step runs). "
                f"{where}")
  elif args.record:
    record(text)
  failed = [r for r in c.rows if not r["ok"]]
  if failed:
    raise SystemExit(f"{len(failed)} fault rows were not survived exactly: {[r['fault'] for r in failed]}")


if __name__ == "__main__":
  main()
