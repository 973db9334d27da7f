"""Stopping a run without losing work: SIGTERM and Ctrl-C finish the step, save, and exit.

- SIGTERM (a scheduler's preemption notice) and the first Ctrl-C (SIGINT) ask the loop to stop:
  the current step finishes, a checkpoint is saved, and the run exits with "re-run the same
  command to resume".
- A second Ctrl-C aborts at once: SIGINT is back to the operating system's default action, so
  it ends the process even inside a long compile. Work since the last checkpoint is lost;
  checkpoints already committed are intact (orbax commits by rename).
- In a multi-process run a signal may reach the processes at different steps, or only one of
  them; all must save the same step, because a save is a collective. Each step every process
  contributes its flag to a global OR, dispatched asynchronously and read one step later, so
  the processes agree on stopping after the same step without making the host wait for the
  device (the read finds the previous step finished: it is queued behind it anyway).
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import jax
import numpy as np


class StopRequests:
  """`with StopRequests(mesh) as stops:` ... `if stops.poll(): save and break`."""

  def __init__(self, mesh=None):
    self.mesh = mesh
    self.signal_name: str | None = None  # "SIGTERM" or "SIGINT" once requested
    self._previous: dict[int, Any] = {}  # signal.signal's handlers
    self._pending = None  # the previous step's global OR (multi-process)
    self._any = None

  def _handle(self, signum, frame) -> None:
    del frame
    name = signal.Signals(signum).name
    if signum == signal.SIGINT:
      # The next Ctrl-C takes the default action: the process ends at once.
      signal.signal(signal.SIGINT, signal.SIG_DFL)
      print("\nCtrl-C: finishing this step, saving a checkpoint and exiting. Press Ctrl-C again to abort at "
            "once (work since the last checkpoint is then lost).", file=sys.stderr, flush=True)
    self.signal_name = self.signal_name or name

  def __enter__(self) -> "StopRequests":
    if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def __exit__(self, *exc) -> None:
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous.clear()

  def poll(self) -> bool:
    """Whether to stop after the step just dispatched; every process gets the same answer."""
    if jax.process_count() == 1 or self.mesh is None:
      return self.signal_name is not None
    agreed = bool(np.asarray(self._pending)) if self._pending is not None else False
    if agreed:
      self.signal_name = self.signal_name or "SIGTERM"  # another process's signal
      return True
    self._pending = self._global_any(self.signal_name is not None)
    return False

  def _global_any(self, flag: bool):
    if self._any is None:
      sharding = jax.sharding.NamedSharding(self.mesh, jax.P(self.mesh.axis_names))
      self._sharding = sharding
      self._any = jax.jit(lambda x: x.max(), out_shardings=jax.sharding.NamedSharding(self.mesh, jax.P()))
    local = np.full((len(self.mesh.local_devices),), int(flag), np.int32)
    return self._any(jax.make_array_from_process_local_data(self._sharding, local))


__all__ = ["StopRequests"]
