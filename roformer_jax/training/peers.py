"""A peer's death in a multi-process run: one line a person can act on, before the process ends.

When a process of a multi-process run dies (SIGKILL, OOM kill, a lost machine), JAX ends every
other process itself, from a C++ thread, with `abort()`:

- process 0 hosts JAX's coordination service; it declares a silent process dead after
  `heartbeat_timeout_seconds` without a heartbeat and tells the others;
- the other processes stop at once when the connection to process 0 breaks (or, if its
  machine went silent, after the same timeout).

Python code cannot catch that `abort()`, and what it prints is a C++ check-failure stack
trace. `Watch` adds two things:

- a beat thread: every process publishes its step in JAX's key-value store every few seconds
  and reads everyone else's, so each process knows who went silent, and at which step;
- a SIGABRT handler (multi-process runs only), which runs on the aborting thread. If the
  coordinator is unreachable, or a peer's beat has stopped, it prints

      train.py: stopped: process 1 stopped answering at step 122; re-run every process with the
      same command to resume from checkpoint 120 (in workdir/checkpoints).

  and exits with status 1. Any other abort keeps Python's fault handler output and its 134.

The trainer tells this module its step (`note_step`) and where checkpoints go
(`note_checkpoints`); eval.py and generate.py, which have neither, get the line without them.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, cast

_KEY = "roformer_jax/beat/"

_step: int | None = None
_checkpoints: str | None = None


def note_step(step: int) -> None:
  """Records the step this process has reached (published with its next beat)."""
  global _step
  _step = step


def note_checkpoints(directory: str) -> None:
  """Records where this run's checkpoints are, so the line can name the one to resume from."""
  global _checkpoints
  _checkpoints = directory


def newest_checkpoint(directory: str | None) -> int | None:
  """The newest committed step under `directory` (orbax renames a step's directory to its number
  only when the step is complete), or None."""
  try:
    steps = [int(name) for name in os.listdir(directory) if name.isdigit()] if directory else []
  except OSError:
    return None
  return max(steps, default=None)


def resume_hint(checkpoints: str | None) -> str:
  """What to do after a peer's death: the same command on every process, and where it resumes."""
  text = "re-run every process with the same command"
  if checkpoints is None:
    return text
  step = newest_checkpoint(checkpoints)
  if step is None:
    return f"{text} (no checkpoint was saved yet: the run starts again from step 0)"
  return f"{text} to resume from checkpoint {step} (in {checkpoints})"


def stopped_line(prog: str, process: int, step: int | None, checkpoints: str | None,
                 coordinator: str | None = None) -> str:
  """The one line printed when `process` stopped answering; `step` is where the run stopped."""
  who = f"process {process}" + (f" (the coordinator, {coordinator})" if coordinator else "")
  at = f" at step {step}" if step is not None else ""
  return f"{prog}: stopped: {who} stopped answering{at}; {resume_hint(checkpoints)}."


class Watch:
  """Beats through JAX's key-value store, and names the silent peer if JAX aborts the process.

  Args:
    client: `jax._src.distributed.global_state.client` after `jax.distributed.initialize`.
    process_id: this process's index.
    num_processes: how many processes the run has.
    coordinator_address: host:port of process 0, probed when JAX aborts this process.
    heartbeat_timeout_seconds: JAX's detection time; the beats come several times within it.
    prog: the program's name, the line's prefix (as errors.report prints it).
  """

  def __init__(self, client, process_id: int, num_processes: int, coordinator_address: str,
               heartbeat_timeout_seconds: int, prog: str):
    self.client = client
    self.process_id = process_id
    self.num_processes = num_processes
    self.coordinator_address = coordinator_address
    self.prog = prog
    # A few beats within JAX's timeout, so that at its abort the silent peer's beat is visibly
    # older than everyone else's; never faster than 2 per second (one set and one listing each).
    self.interval = min(5.0, max(0.5, heartbeat_timeout_seconds / 6))
    now = time.monotonic()
    self._seen: dict[int, tuple[str, float]] = {p: ("", now) for p in range(num_processes) if p != process_id}
    self._steps: dict[int, int | None] = {}
    self._stop = threading.Event()
    self._handler: Any = None  # the ctypes callback, kept alive while installed
    self._libc: ctypes.CDLL | None = None

  def start(self) -> "Watch":
    threading.Thread(target=self._beat, name="roformer_jax-peer-beats", daemon=True).start()
    self._install_abort_handler()
    return self

  def _beat(self) -> None:
    count = 0
    while not self._stop.is_set():
      count += 1
      step = "" if _step is None else str(_step)
      try:
        self.client.key_value_set(f"{_KEY}{self.process_id}", f"{count} {step}", allow_overwrite=True)
        entries = self.client.key_value_dir_get(_KEY)
      except Exception:  # noqa: BLE001 -- the coordinator is gone or busy: the abort handler judges
        entries = []
      now = time.monotonic()
      for key, value in entries:
        process = int(key.rsplit("/", 1)[-1])
        if process in self._seen and self._seen[process][0] != value:
          self._seen[process] = (value, now)
          beat_step = value.partition(" ")[2]
          self._steps[process] = int(beat_step) if beat_step else None
      self._stop.wait(self.interval)

  def silent_peer(self) -> tuple[int, bool] | None:
    """(process, is_coordinator) of the peer that stopped answering, or None if none did.

    Process 0 counts as silent if its port refuses or ignores a connection (it hosts the
    service); another process, if its beat is the oldest and older than two beat intervals."""
    if self.process_id != 0:
      host, _, port = self.coordinator_address.rpartition(":")
      try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=1.0).close()
      except OSError:
        return 0, True
    now = time.monotonic()
    ages = {p: now - t for p, (_, t) in self._seen.items()}
    if not ages:
      return None
    oldest = max(ages, key=ages.__getitem__)
    return (oldest, oldest == 0) if ages[oldest] > 2 * self.interval else None

  def _on_abort(self, signum: int) -> None:
    """Runs on the thread that called abort(): the line, then exit status 1; else JAX's abort."""
    del signum
    try:
      silent = self.silent_peer()
      if silent is not None:
        process, is_coordinator = silent
        # This process's own step: the run stopped there (every step is a collective, so the
        # dead peer got no further). A peer's published step can be a few beats old.
        step = _step if _step is not None else self._steps.get(process)
        line = stopped_line(self.prog, process, step, _checkpoints,
                            self.coordinator_address if is_coordinator else None)
        sys.stderr.write(f"\n{line}\n")
        sys.stderr.flush()
        os._exit(1)
    except Exception:  # noqa: BLE001 -- never turn an abort into a hang or a Python traceback
      pass
    faulthandler.dump_traceback(all_threads=True)  # what the replaced fault handler would print
    # SIG_DFL: abort() then re-raises, status 134 as before (self._libc: set when this handler was installed)
    cast(ctypes.CDLL, self._libc).signal(signal.SIGABRT, 0)

  def _install_abort_handler(self) -> None:
    # JAX's abort comes from a C++ thread, where a handler installed with the `signal` module
    # would only set a flag for the main thread, which never gets to run it. A ctypes callback
    # runs on the aborting thread itself (it takes the GIL, which the main thread releases while
    # it waits in a collective or on the device).
    self._handler = ctypes.CFUNCTYPE(None, ctypes.c_int)(self._on_abort)  # kept alive by self
    self._libc = libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.signal(signal.SIGABRT, ctypes.cast(self._handler, ctypes.c_void_p))


__all__ = ["Watch", "newest_checkpoint", "note_checkpoints", "note_step", "resume_hint", "stopped_line"]
