"""Evaluate a trained workdir.

  python eval.py --workdir DIR [--config.eval.average_last=5]
                 [--config.eval.rope_scaling='{"rope_type": "yarn", "factor": 4.0, ...}']
                 [--config.eval.passkey_lengths=128,256,512]   (lm: pass-key retrieval)

The run's own config is used: DIR/config.json, which train.py saved with every --config
override applied (configs/workdir.py); --config.key=value overrides apply on top of it.
--config configs/<name>.py[:variant] uses that file instead (with the run's overrides again:
a restore that does not fit names the keys that differ from the run's). Writes DIR/eval_results.json
and eval rows in DIR/metrics.jsonl; see roformer_jax/evaluation/evaluate.py for the metrics per task.
Multi-process evaluation takes the same flags as train.py (--coordinator_address,
--num_processes, --process_id or --distributed; --cpu_devices).
"""

import os

from absl import flags
from ml_collections import config_flags

from roformer_jax.training import launch

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/<name>.py file (default: the run's "
                                          "own, DIR/config.json, via configs/workdir.py:DIR).")
_WORKDIR = flags.DEFINE_string("workdir", None, "The training run's workdir.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  del argv
  launch.initialize()
  import jax

  from roformer_jax.evaluation import evaluate

  results = evaluate.evaluate(_CONFIG.value, _WORKDIR.value)
  if jax.process_index() == 0:
    print(evaluate.summary(results, os.path.abspath(_WORKDIR.value), _CONFIG.value))


if __name__ == "__main__":
  launch.run(main, saved_config=os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "workdir.py"))
