"""Evaluate a trained workdir: python eval.py --config configs/<name>.py --workdir DIR.

Placeholder until the evaluation issue (#5) lands.
"""

import sys

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/<name>.py file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "The training run's workdir.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  sys.exit("eval.py: evaluation is not implemented yet (it arrives with issue #5).")


if __name__ == "__main__":
  app.run(main)
