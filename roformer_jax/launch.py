"""Process start-up flags shared by train.py and eval.py: fake CPU devices and multi-process runs.

  --cpu_devices N                 N fake CPU devices per process (testing meshes on a CPU)
  --coordinator_address host:port --num_processes P --process_id i
                                  several processes (gloo collectives on CPU)
  --distributed                   jax.distributed.initialize() with auto-detection (SLURM, TPU
                                  pods, Open MPI)
"""

from __future__ import annotations

from absl import flags, logging

_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() with auto-detection "
                                 "(SLURM, TPU pods, Open MPI).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-process runs).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-process runs).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (multi-process runs).")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", None, "Fake CPU devices per process (testing meshes on a CPU).")


def initialize() -> None:
  """Applies the flags before the JAX backend starts; quiets INFO logs unless --verbosity is given."""
  import jax

  if _CPU_DEVICES.value:
    jax.config.update("jax_num_cpu_devices", _CPU_DEVICES.value)
  if _COORDINATOR.value:
    # CPU processes need gloo for cross-process collectives; GPUs/TPUs ignore this setting.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=_COORDINATOR.value, num_processes=_NUM_PROCESSES.value,
                               process_id=_PROCESS_ID.value)
  elif _DISTRIBUTED.value:
    jax.distributed.initialize()
  # Orbax and JAX log every save at INFO; the progress bars say what matters. --verbosity=0
  # brings the INFO lines back.
  if jax.process_index() != 0 or not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
