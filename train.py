"""Train a RoFormer model.

  python train.py --config configs/<name>.py[:variant] --workdir DIR [--config.key=value ...]

Re-running the same command resumes from the newest checkpoint in DIR. For several processes
(multi-host GPU/TPU, or several CPU processes), pass --coordinator_address, --num_processes and
--process_id to each, or run under SLURM / on a TPU pod where `jax.distributed.initialize()`
finds them itself (--distributed).
"""

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/<name>.py file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and plots.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() with auto-detection "
                                 "(SLURM, TPU pods, Open MPI).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-process runs).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-process runs).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (multi-process runs).")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", None, "Fake CPU devices per process (testing meshes on a CPU).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
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
  # Orbax and JAX log every save at INFO; the progress bar says what matters. --verbosity=0
  # brings the INFO lines back.
  if jax.process_index() != 0 or not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)

  from roformer_jax import trainer

  result = trainer.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  if jax.process_index() == 0:
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()})


if __name__ == "__main__":
  app.run(main)
