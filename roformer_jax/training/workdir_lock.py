"""One trainer per workdir: an exclusive lock held for the training process's whole life.

Two trainers on one workdir would interleave their checkpoints and metrics rows, so a second
`train.py` must stop at once and say who holds the workdir. The lock is `flock(2)` on
`<workdir>/train.lock`: the kernel drops it when its process dies, however it dies, so a
killed run never blocks the next one. The file also holds the holder's host, pid, start time
and command, for the error message.

Some filesystems (certain NFS and FUSE mounts) refuse `flock`. There the lock is the file
itself, created with O_EXCL, and a background thread touches it every `HEARTBEAT_S` seconds.
A lock file whose process is gone (same host) or whose heartbeat stopped more than `STALE_S`
seconds ago (another host) is stale and taken over. The takeover removes only the file that was
judged stale: it renames whatever is at the path to a name of its own and compares it with that
file (inode, mtime, size and record); another taker's fresh lock that arrived in between is put
back, and this taker reports it as the holder.

`eval.py` and `generate.py` never take the lock: they read committed checkpoints only.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import threading
import time

from roformer_jax.errors import UserError

LOCK_FILE = "train.lock"
HEARTBEAT_S = 30.0
STALE_S = 300.0
# flock's errors on filesystems without lock support (NFS without lockd, some FUSE mounts).
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL}


class WorkdirLocked(UserError):
  """Another live process holds the workdir's lock."""


def _holder_record() -> dict:
  return {"host": socket.gethostname(), "pid": os.getpid(),
          "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
          "command": shlex.join([sys.executable, *sys.argv])}


def _describe(record: dict | None) -> str:
  if not record:
    return "a process that is still starting (no holder details yet)"
  return (f"pid {record.get('pid')} on host {record.get('host')}, started {record.get('started')}, "
          f"running: {record.get('command')}")


def _parse_record(data: bytes | str) -> dict | None:
  try:
    return json.loads(data) if data.strip() else None
  except ValueError:
    return None


def _read_record(path: str) -> dict | None:
  try:
    with open(path, "rb") as f:
      return _parse_record(f.read())
  except OSError:
    return None


def _process_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # exists, owned by someone else
    return True
  return True


class WorkdirLock:
  """`with WorkdirLock(workdir):` holds `<workdir>/train.lock` exclusively, or raises
  `WorkdirLocked` naming the holder. Re-entrant use is not supported."""

  def __init__(self, workdir: str):
    self.path = os.path.join(os.path.abspath(workdir), LOCK_FILE)
    self.mode: str | None = None  # "flock" or "file" once held
    self._fd: int | None = None
    self._stop = threading.Event()
    self._heartbeat: threading.Thread | None = None

  # ------------------------------------------------------------------ flock (the normal case)
  def acquire(self) -> "WorkdirLock":
    existed = os.path.exists(self.path)
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      raise self._locked(_read_record(self.path)) from None
    except OSError as e:
      os.close(fd)
      if e.errno not in _NO_FLOCK:
        raise
      if not existed:
        os.unlink(self.path)  # the O_EXCL protocol below needs the file absent
      return self._acquire_file()
    self._fd, self.mode = fd, "flock"
    record = json.dumps(_holder_record()).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, record, 0)
    os.fsync(fd)
    return self

  def _locked(self, record: dict | None) -> WorkdirLocked:
    return WorkdirLocked(
        f"the workdir {os.path.dirname(self.path)} is in use by another trainer: {_describe(record)}. "
        "Two trainers on one workdir would overwrite each other's checkpoints and metrics. Wait for it to "
        "finish, stop it (Ctrl-C or SIGTERM saves and exits), or give this run another --workdir.")

  # ------------------------------------------------------------------ O_EXCL file (no flock)
  def _stale(self, record: dict | None, mtime: float) -> bool:
    """Whether the lock file holding `record`, last touched at `mtime`, was left by a dead run."""
    if record and record.get("host") == socket.gethostname():
      return not _process_alive(int(record.get("pid", -1)))
    # A holder writes its record right after creating the file: an empty one that is not brand
    # new was left by a flock-mode run (which keeps the file) or a process killed in between.
    return time.time() - mtime > (STALE_S if record else 10.0)

  @staticmethod
  def _identity(path: str) -> tuple | None:
    """(device, inode, mtime, size, content) of the file at `path`, read from one open file, or
    None if there is none. It tells one lock file from a later one, even one that reuses the
    inode number."""
    try:
      with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, f.read()
    except OSError:
      return None

  def _take_over(self, judged: tuple) -> bool:
    """Removes the lock file judged stale (`judged`: its `_identity`), and only that file;
    returns whether it did.

    The check and the removal cannot be one atomic step, and between them another taker may
    have replaced the stale file with its own live lock. So the file is first renamed to a name
    of our own (atomic: whatever file is at the path now), then compared with the one judged
    stale. If it is another file, it is a live lock taken over meanwhile: it is linked back
    (`link` fails rather than overwrite a lock created since) and this taker gives up.
    """
    aside = f"{self.path}.stale-{socket.gethostname()}-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
    try:
      os.rename(self.path, aside)
    except FileNotFoundError:
      return True  # another taker removed it; the O_EXCL create decides who holds the lock
    if self._identity(aside) == judged:
      os.unlink(aside)
      return True
    try:
      os.link(aside, self.path)
    except OSError:
      # A filesystem without hard links, or a third process that created a lock file in the
      # instant the live one was away: that last case is not covered (two holders are then
      # possible; it needs a new trainer to start within microseconds of this rename). The
      # live lock goes back either way: its holder heartbeats and releases it by this path.
      os.replace(aside, self.path)
    else:
      os.unlink(aside)
    return False

  def _acquire_file(self) -> "WorkdirLock":
    record = _holder_record()
    for _ in range(3):
      try:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
      except FileExistsError:
        judged = self._identity(self.path)
        if judged is None:
          continue  # released (or taken over) since the create: try again
        holder = _parse_record(judged[4])
        if not self._stale(holder, judged[2] / 1e9):
          raise self._locked(holder) from None
        if not self._take_over(judged):
          raise self._locked(_read_record(self.path)) from None
        continue
      with os.fdopen(fd, "w") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
      self.mode = "file"
      self._heartbeat = threading.Thread(target=self._beat, name="workdir-lock-heartbeat", daemon=True)
      self._heartbeat.start()
      return self
    raise self._locked(_read_record(self.path))

  def _beat(self) -> None:
    while not self._stop.wait(HEARTBEAT_S):
      try:
        os.utime(self.path)
      except OSError:
        pass

  # ------------------------------------------------------------------ release
  def release(self) -> None:
    if self.mode == "flock" and self._fd is not None:
      os.ftruncate(self._fd, 0)  # no holder; the file stays (unlinking a flock'd file races)
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
    elif self.mode == "file":
      self._stop.set()
      try:
        os.unlink(self.path)
      except FileNotFoundError:
        pass
    self._fd, self.mode = None, None

  def __enter__(self) -> "WorkdirLock":
    return self.acquire()

  def __exit__(self, *exc) -> None:
    self.release()




@contextlib.contextmanager
def lock_workdir(workdir: str):
  """Holds the workdir's lock for the block: process 0 takes it, every process learns whether
  it did, and all raise `WorkdirLocked` together if not (no process is left waiting on a
  collective that the others never reach)."""
  import jax
  import numpy as np

  lock, failure = None, None
  if jax.process_index() == 0:
    try:
      lock = WorkdirLock(workdir).acquire()
    except WorkdirLocked as e:
      failure = e
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    held = bool(multihost_utils.broadcast_one_to_all(np.int32(failure is None)))
    if not held and failure is None:
      failure = WorkdirLocked(f"process 0 could not lock the workdir {workdir}; its error says who holds it.")
  if failure is not None:
    raise failure
  try:
    yield lock
  finally:
    if lock is not None:
      lock.release()


__all__ = ["LOCK_FILE", "WorkdirLock", "WorkdirLocked", "lock_workdir"]
