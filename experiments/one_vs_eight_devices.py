"""Loss on 1 device vs a 2x2x2 (data, fsdp, tensor) mesh of 8 fake CPU devices, same global batch.

  python experiments/one_vs_eight_devices.py --steps 20

Trains the smoke variant of configs/default.py twice, in a temporary directory, and prints the
largest per-step loss difference (the test
tests/test_train.py::test_one_device_and_eight_devices_give_the_same_loss checks 3 steps to
1e-5). Writes no file of the repository. --smoke trains 2 steps: the same code in seconds.
"""

import argparse
import json
import os
import sys
import tempfile

import jax

jax.config.update("jax_num_cpu_devices", 8)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import absl.logging  # noqa: E402

from configs import default  # noqa: E402
from roformer_jax.training import trainer  # noqa: E402


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--smoke", action="store_true", help="2 steps (overrides --steps)")
  args = parser.parse_args()
  if args.smoke:
    args.steps = 2
  absl.logging.set_verbosity(absl.logging.WARNING)
  root = tempfile.mkdtemp()
  losses = {}
  for name, mesh, n in [("one", {"data": 1, "fsdp": 1, "tensor": 1}, 1), ("eight", {"data": 2, "fsdp": 2, "tensor": 2}, 8)]:
    c = default.get_config("smoke")
    c.total_steps, c.log_every_steps, c.eval_every_steps, c.checkpoint_every_steps = args.steps, 1, args.steps, args.steps
    c.mesh, c.num_devices = mesh, n
    trainer.train_and_evaluate(c, os.path.join(root, name))
    with open(os.path.join(root, name, "metrics.jsonl")) as f:
      losses[name] = [json.loads(line)["loss"] for line in f if '"loss"' in line]
  diff = max(abs(a - b) for a, b in zip(losses["one"], losses["eight"], strict=True))
  print(f"steps {len(losses['one'])}: max |loss(1 device) - loss(8 devices)| = {diff:.2e}")


if __name__ == "__main__":
  main()
