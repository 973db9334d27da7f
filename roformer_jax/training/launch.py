"""What train.py and eval.py share: start-up flags, and how errors reach the person.

  --cpu_devices N                 N fake CPU devices per process (testing meshes on a CPU)
  --coordinator_address host:port --num_processes P --process_id i
                                  several processes (gloo collectives on CPU); process 0's
                                  coordinator listens on that host only (a local address)
  --coordinator_bind_address host:port
                                  where process 0 listens instead (e.g. [::]:port behind NAT)
  --heartbeat_timeout_seconds S   a process silent this long is declared dead (default 30)
  --mtls_cert_file, --mtls_key_file, --mtls_ca_file
                                  mutual TLS between the processes and the coordinator
  --distributed                   jax.distributed.initialize() with auto-detection (SLURM, TPU
                                  pods, Open MPI)
  --traceback                     show the Python traceback of every error (or
                                  ROFORMER_JAX_TRACEBACK=1)

`run(main)` replaces `absl.app.run(main)`: a mistake in the flags or the config, and a
`UserError` or `RunFault` from the run, print their message alone (errors.py); bugs keep
their traceback.
"""

from __future__ import annotations

import atexit
import errno
import inspect
import ipaddress
import os
import socket
import sys
import threading
from collections.abc import Sequence
from typing import cast

from absl import app, flags, logging

from roformer_jax import errors
from roformer_jax.training import peers

_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() with auto-detection "
                                 "(SLURM, TPU pods, Open MPI).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-process runs).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-process runs).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (multi-process runs).")
_BIND = flags.DEFINE_string(
    "coordinator_bind_address", None, "host:port where process 0's coordinator listens. By default the host of "
    "--coordinator_address, which must then be an address of this machine; [::]:port listens on every interface.")
_HEARTBEAT = flags.DEFINE_integer(
    "heartbeat_timeout_seconds", 30, "A process of a multi-process run that sends no heartbeat for this long is "
    "declared dead, and the others stop, naming it and the checkpoint to resume from.")
_MTLS = {name: flags.DEFINE_string(name, None, help) for name, help in (
    ("mtls_cert_file", "PEM certificate chain of this process (mutual TLS with the coordinator)."),
    ("mtls_key_file", "PEM private key of --mtls_cert_file."),
    ("mtls_ca_file", "PEM CA bundle that verifies the other side's certificate."))}
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", None, "Fake CPU devices per process (testing meshes on a CPU).")
flags.DEFINE_bool("traceback", False, f"Show the Python traceback of every error (or {errors.TRACEBACK_ENV}=1); "
                  "by default a mistake in the config, flags, data, workdir or checkpoints prints its message alone.")


# Log lines that read as failures but are not, dropped at the source unless --verbosity is given
# (--verbosity=0 brings every line back): (the emitting file, the message's start, why it is not one).
NOISE = (
    ("xla_bridge.py", "Unable to initialize backend",
     "JAX probes every platform it knows at start-up; a machine without a TPU (or an IFRT proxy) says so"),
    ("file_utils.py", "Variant folder",
     "TFDS looks for a prepared copy of a dataset before it is built (our offline corpus on first use): "
     "'has no dataset_info.json' means only that it is not built yet"),
    ("dataset_builder.py", "Using custom data configuration",
     "our TFDS builders are configured on purpose (the corpus, its split); TFDS warns for any such config"),
    ("checkpoint_manager.py", "CheckpointManagerOptions.read_only=True",
     "eval.py, generate.py and init_from open checkpoints read-only on purpose (a trainer may be running)"),
    ("checkpoint_manager.py", "Given directory is read only", "the same read-only opening"),
    ("checkpoint.py", "Metadata file does not exist",
     "orbax's optional per-item metadata file; a checkpoint is verified by Checkpointer.problem, and a damaged "
     "one is named by checkpoints.warn"),
)


# Lines that C++ libraries write straight to a file descriptor, where no logging filter reaches:
# (the descriptor, the line's start, why it is not news). They are dropped by `FdLineFilter`
# in multi-process CPU runs unless --verbosity is given.
FD_NOISE = (
    (1, b"[Gloo] Rank ", "gloo, the CPU collectives of a multi-process run, prints one line per communicator it "
     "connects, on stdout between the run's own lines; a connection that fails is an error the run reports"),
)


def drop_lines(chunk: bytes, starts: Sequence[bytes], held: bytes = b"",
               passing: bool = False) -> tuple[bytes, bytes, bool]:
  """The next `chunk` of a stream, less the lines that start with one of `starts`: returns (what
  to write now, what to hold, passing), the last two to give back with the next chunk. `held` is
  the start of the current line while it may still become a dropped line; `passing`, that the
  current line is kept and is being passed through as it comes. Only such a possible start is
  held, so a kept line, or a progress bar's partial one, is never delayed."""
  out = []
  data = held + chunk
  held = b""
  while data:
    newline = data.find(b"\n")
    line = data if newline < 0 else data[:newline + 1]
    if not passing and newline < 0 and any(line.startswith(s) or s.startswith(line) for s in starts):
      held = data  # a dropped line's start, or what may still become one: wait for its end
      break
    if passing or not any(line.startswith(s) for s in starts):
      out.append(line)
      passing = newline < 0
    data = b"" if newline < 0 else data[newline + 1:]
  return b"".join(out), held, passing


class FdLineFilter:
  """File descriptor `fd`, less the lines that start with one of `starts` (see FD_NOISE).

  The descriptor becomes the write end of a pipe; a thread copies the pipe to where `fd` pointed,
  dropping those lines. Text written through Python (print, logging) and by C++ alike passes
  through it. At exit (`close`) the descriptor is restored and the rest copied.
  """

  def __init__(self, fd: int, starts: Sequence[bytes]):
    self.fd, self.starts = fd, tuple(starts)
    self.target = os.dup(fd)
    read, write = os.pipe()
    os.dup2(write, fd)
    os.close(write)
    self._read = read
    self._thread = threading.Thread(target=self._pump, name=f"fd{fd}-line-filter", daemon=True)
    self._thread.start()
    atexit.register(self.close)

  def _write(self, data: bytes) -> None:
    while data:
      data = data[os.write(self.target, data):]

  def _pump(self) -> None:
    held, passing = b"", False
    with os.fdopen(self._read, "rb", buffering=0) as pipe:
      while chunk := pipe.read(65536):
        out, held, passing = drop_lines(chunk, self.starts, held, passing)
        self._write(out)
    self._write(held)

  def close(self) -> None:
    if self.fd == 1:
      sys.stdout.flush()
    os.dup2(self.target, self.fd)  # the pipe's last write end closes: the thread copies the rest and ends
    self._thread.join(timeout=5)


def not_noise(record) -> bool:
  """A logging filter: False for the known noise (NOISE)."""
  path, message = os.path.basename(getattr(record, "pathname", "")), str(record.msg)
  return not any(path == file and message.startswith(start) for file, start, _ in NOISE)


def initialize() -> None:
  """Applies the flags before the JAX backend starts; quiets INFO logs unless --verbosity is given."""
  if not flags.FLAGS["verbosity"].present:
    # The known noise, at any level, from here on (the backend's platform probe runs below):
    # see NOISE. The INFO lines of a multi-process start-up ("Connecting to JAX distributed
    # service on ...") still show; the level drops to WARNING after it.
    logging.get_absl_handler().addFilter(not_noise)
  import jax

  if _CPU_DEVICES.value:
    jax.config.update("jax_num_cpu_devices", _CPU_DEVICES.value)
  if _COORDINATOR.value or _DISTRIBUTED.value:
    options = distributed_options(jax.distributed.initialize)
    if _COORDINATOR.value:
      # CPU processes need gloo for cross-process collectives; GPUs/TPUs ignore this setting.
      jax.config.update("jax_cpu_collectives_implementation", "gloo")
      if not flags.FLAGS["verbosity"].present:
        for fd in sorted({fd for fd, _, _ in FD_NOISE}):
          FdLineFilter(fd, [start for f, start, _ in FD_NOISE if f == fd])
      # Only process 0 listens; the others' machines do not have its address.
      bind = _BIND.value or (bind_address(_COORDINATOR.value) if _PROCESS_ID.value in (0, None) else None)
      check_coordinator_port(_COORDINATOR.value, _PROCESS_ID.value, bind)
      jax.distributed.initialize(coordinator_address=_COORDINATOR.value, num_processes=_NUM_PROCESSES.value,
                                 process_id=_PROCESS_ID.value, coordinator_bind_address=bind, **options)
    else:
      # Auto-detection finds the coordinator's address only inside initialize(): JAX then binds
      # every interface unless --coordinator_bind_address says where.
      jax.distributed.initialize(coordinator_bind_address=_BIND.value, **options)
    _watch_peers()
  if not errors.show_tracebacks():
    # Orbax logs a failed background save at ERROR with its traceback, before the trainer's
    # own one-line report: keep the log line, drop the traceback.
    logging.get_absl_handler().addFilter(_without_traceback)
  # Orbax and JAX log every save at INFO; the progress bars say what matters. --verbosity=0
  # brings the INFO lines back.
  if jax.process_index() != 0 or not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)


def distributed_options(initialize) -> dict:
  """The heartbeat timeout and mTLS flags as `jax.distributed.initialize` keywords, checked.

  Args:
    initialize: `jax.distributed.initialize`, whose signature says which options this jax has.

  Raises:
    errors.UserError: a bad timeout, an incomplete or unreadable mTLS triple, or an mTLS flag
      this jax does not support.
  """
  if _HEARTBEAT.value < 1:
    raise errors.UserError(f"--heartbeat_timeout_seconds={_HEARTBEAT.value}: expected a whole number of seconds "
                           f">= 1 (default 30; raise it on a network with long stalls).")
  options = {"heartbeat_timeout_seconds": _HEARTBEAT.value}
  given = {name: flag.value for name, flag in _MTLS.items() if flag.value}
  if not given:
    return options
  missing = [f"--{name}" for name in _MTLS if name not in given]
  if missing:
    raise errors.UserError(f"mutual TLS needs all of --mtls_cert_file, --mtls_key_file and --mtls_ca_file; "
                           f"missing {', '.join(missing)}.")
  unsupported = [name for name in given if name not in inspect.signature(initialize).parameters]
  if unsupported:
    import jax
    raise errors.UserError(f"--{unsupported[0]}: jax {jax.__version__} has no mutual TLS for its coordination "
                           f"service (jax.distributed.initialize takes no {unsupported[0]}); upgrade jax, or drop "
                           f"the --mtls_* flags and keep the coordinator on a trusted network.")
  for name, path in given.items():
    if not os.path.isfile(path):
      raise errors.UserError(f"--{name}={path}: no such file.")
  return {**options, **given}


def bind_address(coordinator_address: str) -> str:
  """Where process 0's coordinator listens: the host of `coordinator_address`, as an IP address.

  JAX's own default is `[::]:port`, every interface: an unauthenticated service on the
  network. The host must be an address of this machine (loopback, or one of its interfaces).

  Raises:
    errors.UserError: the address is not host:port, or its host is not an address of this
      machine (then --coordinator_bind_address must say where to listen).
  """
  host, _, port = coordinator_address.rpartition(":")
  if not port.isdigit() or not host:
    raise errors.UserError(f"--coordinator_address={coordinator_address!r}: expected host:port, "
                           f"e.g. 127.0.0.1:12345.")
  host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
  try:
    infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
  except OSError as e:
    raise errors.UserError(f"--coordinator_address={coordinator_address}: cannot resolve {host!r} ({e}).") from None
  for family, _, _, _, sockaddr in infos:
    with socket.socket(family, socket.SOCK_STREAM) as s:
      try:
        s.bind((sockaddr[0], 0))  # binds only to an address this machine has
      except OSError:
        continue
    ip = ipaddress.ip_address(cast(str, sockaddr[0]).split("%")[0])  # AF_INET/AF_INET6: a host string
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
  raise errors.UserError(
      f"--coordinator_address={coordinator_address}: {host} is not an address of this machine, so process 0's "
      f"coordinator would not know where to listen. Pass --coordinator_bind_address with this machine's address on "
      f"the network the other processes use (e.g. 10.0.0.1:{port}), or [::]:{port} for every interface (then use "
      f"the --mtls_* flags or a firewall: the service has no authentication of its own).")


def check_coordinator_port(address: str, process_id: int | None, bind: str | None = None) -> None:
  """Process 0 hosts the coordinator service on the address's port. If the port is taken,
  jax.distributed crashes with a segmentation fault instead of saying so: say it first.

  Args:
    address: --coordinator_address.
    process_id: this process's index; only process 0 listens.
    bind: where the service will listen (host:port); every interface if None.
  """
  if process_id not in (0, None):
    return
  _, _, port = address.rpartition(":")
  if not port.isdigit():
    raise errors.UserError(f"--coordinator_address={address!r}: expected host:port, e.g. 127.0.0.1:12345.")
  host = (bind or "").rpartition(":")[0].strip("[]")
  family = socket.AF_INET6 if ":" in host else socket.AF_INET
  if host == "0.0.0.0" or family == socket.AF_INET6 and ipaddress.ip_address(host).is_unspecified:
    host = ""  # every interface: the same check as before
  with socket.socket(family, socket.SOCK_STREAM) as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to use
    try:
      s.bind((host, int(port)))
    except OSError as e:
      if e.errno != errno.EADDRINUSE:
        return  # not ours to judge (e.g. a privileged port): JAX reports what it finds
      raise errors.UserError(
          f"--coordinator_address={address}: port {port} is already in use on this machine (another run's "
          f"coordinator?). Choose another port for every process of the run, or wait until the previous "
          f"run has exited (`ss -ltnp` shows who holds it).") from None


def _watch_peers() -> None:
  """Names a dead peer, and the checkpoint to resume from, when JAX aborts this process."""
  from jax._src import distributed  # the client is not public; orbax reaches it the same way

  state = distributed.global_state
  if state.client is None or state.num_processes < 2:
    return
  peers.Watch(state.client, state.process_id, state.num_processes, cast(str, state.coordinator_address),
              _HEARTBEAT.value, os.path.basename(sys.argv[0])).start()


def _without_traceback(record) -> bool:
  record.exc_info, record.exc_text, record.stack_info = None, None, None
  return True


def _flag_error_text(error: BaseException) -> str:
  """One readable message for an error raised while the flags (and the config file) load."""
  cause = error
  text = errors.message_of(cause)
  if isinstance(cause, (KeyError, AttributeError)):
    text = f"no such config key {text}"  # a typo'd --config.<key>: ml_collections suggests the right one
  elif not isinstance(cause, (flags.Error, ValueError, OSError)):
    text = f"{type(cause).__name__}: {text}"
  if "Traceback (most recent call last):" in text:  # config_flags pastes the config file's traceback
    head, _, tail = text.partition("Traceback (most recent call last):")
    last = [line for line in tail.strip().splitlines() if line and not line.startswith(" ")][-1:]
    text = head.strip() + " " + " ".join(last)
  return text


def _check_literals(config, argv: list[str]) -> None:
  """Refuses a `--config.<key>=<text>` whose text is bracketed but is no literal, for a key that is not a string.

  ml_collections reads such a key's text with `ast.literal_eval` and, where that fails, keeps the
  text as a string: a dict literal missing its `}` (`--config.model.rope_scaling="{'rope_type': 'yarn'"`)
  would reach the model as a str and fail there with a traceback. Here it is named instead, with
  the parser's reason.
  """
  import ast

  for arg in argv[1:]:
    key, eq, text = arg.partition("=")
    if not (eq and key.startswith("--config.") and text.strip()[:1] in "{[("):
      continue
    path = key[len("--config."):].split(".")
    node = config
    try:
      for part in path[:-1]:
        node = node[part]
      value, kind = node[path[-1]], node.get_ref(path[-1]).get_type()
    except (KeyError, AttributeError, TypeError):
      continue  # not a ConfigDict field: absl and ml_collections report it themselves
    if not isinstance(value, str) or kind is str:
      continue
    try:
      ast.literal_eval(text)
      continue
    except (ValueError, SyntaxError) as e:
      reason = e.msg if isinstance(e, SyntaxError) else str(e)
    raise ValueError(f"{key}: the text {text!r} is not a Python literal ({reason}); write a dict like "
                     f"{key}=\"{{'rope_type': 'linear', 'factor': 4.0}}\" (quoted for the shell)")


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with a mistake in a flag or the config reported in one message.

  Config files load while the flags are parsed, so an error there (a bad variant, a typo'd
  `--config.<key>`, a value of the wrong type, a missing file) surfaces here, whatever its type.
  """
  try:
    rest = flags.FLAGS(argv)
    config = flags.FLAGS["config"].value if "config" in flags.FLAGS else None
    if config is not None:
      config.get("seed")  # a config file that failed to load raises on first access: now, not mid-run
      _check_literals(config, argv)
    return rest
  except Exception as e:  # noqa: BLE001 -- everything here comes from the command line or a config file
    if errors.show_tracebacks(argv):
      raise
    prog = os.path.basename(argv[0])
    sys.exit(errors.report(errors.UserError(f"{_flag_error_text(e)}\n(`{prog} --helpshort` lists the flags.)"),
                           prog))


def run(main, saved_config: str | None = None) -> None:
  """`absl.app.run(main)` for train.py and eval.py: user mistakes exit 2 with their message alone.

  saved_config: configs/workdir.py, for eval.py and generate.py: without --config, the config the
  run in --workdir saved is used (`run_config.with_saved_config`), overrides on top.
  """
  prog = os.path.basename(sys.argv[0])
  if saved_config:
    from roformer_jax.training import run_config
    argv = run_config.with_saved_config(sys.argv, saved_config)
    if argv is not sys.argv:  # no --config: the workdir's own, which must exist (said here, not as a flag error)
      workdir = argv[1].split(":", 1)[1]
      try:
        run_config.load(workdir)
      except ValueError as e:
        sys.exit(errors.report(errors.UserError(str(e)), prog))
    sys.argv[:] = argv

  def guarded(argv):
    try:
      return main(argv)
    except (errors.UserError, errors.RunFault) as e:
      if errors.show_tracebacks(argv):
        raise
      sys.exit(errors.report(e, prog))

  app.run(guarded, flags_parser=_parse_flags)
