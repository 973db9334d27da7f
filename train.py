"""Train a RoFormer model.

  python train.py --config configs/<name>.py[:variant] --workdir DIR [--config.key=value ...]

Re-running the same command resumes from the newest checkpoint in DIR. For several processes
(multi-host GPU/TPU, or several CPU processes), pass --coordinator_address, --num_processes and
--process_id to each, or run under SLURM / on a TPU pod where `jax.distributed.initialize()`
finds them itself (--distributed). --cpu_devices N fakes N CPU devices per process.
"""

import os

from absl import flags
from ml_collections import config_flags

from roformer_jax.training import launch

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/<name>.py file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and plots.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  launch.initialize()
  import jax

  from roformer_jax.training import trainer

  result = trainer.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  if jax.process_index() == 0:
    print(trainer.summary(result, os.path.abspath(_WORKDIR.value)))


if __name__ == "__main__":
  launch.run(main)
