"""Train a RoFormer model: python train.py --config configs/<name>.py --workdir DIR.

Placeholder until the training issue (#4) lands: it parses the flags and the config, then
stops with a clear message instead of pretending to train.
"""

import sys

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/<name>.py file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints and metrics.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  print(_CONFIG.value)
  sys.exit("train.py: the training loop is not implemented yet (it arrives with issue #4). "
           "The RoPE library (roformer_jax.rope) is ready; see README.md.")


if __name__ == "__main__":
  app.run(main)
