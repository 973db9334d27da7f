"""What train.py and eval.py share: start-up flags, and how errors reach the person.

  --cpu_devices N                 N fake CPU devices per process (testing meshes on a CPU)
  --coordinator_address host:port --num_processes P --process_id i
                                  several processes (gloo collectives on CPU)
  --distributed                   jax.distributed.initialize() with auto-detection (SLURM, TPU
                                  pods, Open MPI)
  --traceback                     show the Python traceback of every error (or
                                  ROFORMER_JAX_TRACEBACK=1)

`run(main)` replaces `absl.app.run(main)`: a mistake in the flags or the config, and a
`UserError` or `RunFault` from the run, print their message alone (errors.py); bugs keep
their traceback.
"""

from __future__ import annotations

import errno
import os
import socket
import sys

from absl import app, flags, logging

from roformer_jax import errors

_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() with auto-detection "
                                 "(SLURM, TPU pods, Open MPI).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-process runs).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-process runs).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (multi-process runs).")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", None, "Fake CPU devices per process (testing meshes on a CPU).")
flags.DEFINE_bool("traceback", False, f"Show the Python traceback of every error (or {errors.TRACEBACK_ENV}=1); "
                  "by default a mistake in the config, flags, data, workdir or checkpoints prints its message alone.")


def initialize() -> None:
  """Applies the flags before the JAX backend starts; quiets INFO logs unless --verbosity is given."""
  import jax

  if _CPU_DEVICES.value:
    jax.config.update("jax_num_cpu_devices", _CPU_DEVICES.value)
  if _COORDINATOR.value:
    # CPU processes need gloo for cross-process collectives; GPUs/TPUs ignore this setting.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    check_coordinator_port(_COORDINATOR.value, _PROCESS_ID.value)
    jax.distributed.initialize(coordinator_address=_COORDINATOR.value, num_processes=_NUM_PROCESSES.value,
                               process_id=_PROCESS_ID.value)
  elif _DISTRIBUTED.value:
    jax.distributed.initialize()
  if not errors.show_tracebacks():
    # Orbax logs a failed background save at ERROR with its traceback, before the trainer's
    # own one-line report: keep the log line, drop the traceback.
    logging.get_absl_handler().addFilter(_without_traceback)
  # Orbax and JAX log every save at INFO; the progress bars say what matters. --verbosity=0
  # brings the INFO lines back.
  if jax.process_index() != 0 or not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)


def check_coordinator_port(address: str, process_id: int | None) -> None:
  """Process 0 hosts the coordinator service on the address's port. If the port is taken,
  jax.distributed crashes with a segmentation fault instead of saying so: say it first."""
  if process_id not in (0, None):
    return
  _, _, port = address.rpartition(":")
  if not port.isdigit():
    raise errors.UserError(f"--coordinator_address={address!r}: expected host:port, e.g. 127.0.0.1:12345.")
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to use
    try:
      s.bind(("", int(port)))
    except OSError as e:
      if e.errno != errno.EADDRINUSE:
        return  # not ours to judge (e.g. a privileged port): JAX reports what it finds
      raise errors.UserError(
          f"--coordinator_address={address}: port {port} is already in use on this machine (another run's "
          f"coordinator?). Choose another port for every process of the run, or wait until the previous "
          f"run has exited (`ss -ltnp` shows who holds it).") from None


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
    return rest
  except Exception as e:  # noqa: BLE001 -- everything here comes from the command line or a config file
    if errors.show_tracebacks(argv):
      raise
    prog = os.path.basename(argv[0])
    sys.exit(errors.report(errors.UserError(f"{_flag_error_text(e)}\n(`{prog} --helpshort` lists the flags.)"),
                           prog))


def run(main) -> None:
  """`absl.app.run(main)` for train.py and eval.py: user mistakes exit 2 with their message alone."""
  prog = os.path.basename(sys.argv[0])

  def guarded(argv):
    try:
      return main(argv)
    except (errors.UserError, errors.RunFault) as e:
      if errors.show_tracebacks(argv):
        raise
      sys.exit(errors.report(e, prog))

  app.run(guarded, flags_parser=_parse_flags)
