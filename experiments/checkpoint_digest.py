"""What the checkpoint digest costs: SHA-256 of a saved checkpoint, against orbax's own save and restore.

Run from the repository root:
  .venv/bin/python bench/checkpoint_digest.py              # RoFormer-base size (110M parameters)
  .venv/bin/python bench/checkpoint_digest.py --record     # also save the figures for bench/report.py
  .venv/bin/python bench/checkpoint_digest.py --smoke      # seconds: 0.1M parameters, 1 round

Settled figures (issue 24): moved here from bench/; bench/checkpoint_digest.py, the command its recorded figures
carry, runs this file, and `make bench` no longer does.

The state is what the trainer checkpoints for a model of --params million float32 parameters
trained with Adam: the parameters and the two moments (3 x 4 bytes a parameter; 1.32 GB at
110M, BERT-base's size). Each round, in one directory on the same disk: orbax saves it
(synchronously, to the commit), `write_digest` hashes every file, `verify_digest` checks it,
and orbax restores it. Reported: each step's time and the digest's share (write / save,
verify / restore). The last line is JSON.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from bench import _record  # noqa: E402
from roformer_jax.training import checkpoints  # noqa: E402


def state(params_m: float, tensors: int = 12):
  """Parameters and Adam's mu and nu: 3 x `params_m` million float32 values in `tensors` arrays each."""
  per = int(params_m * 1e6) // tensors
  rng = np.random.default_rng(0)
  return {group: {f"t{i}": jax.numpy.asarray(rng.standard_normal(per, dtype=np.float32)) for i in range(tensors)}
          for group in ("params", "mu", "nu")}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--params", type=float, default=110.0, help="millions of parameters (default: BERT-base)")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--dir", default=None, help="where to write (default: the system's temp dir)")
  _record.add_record_arg(parser)
  _record.add_smoke_arg(parser, "0.1M parameters (1.2 MB), 1 round (overrides --params, --rounds)")
  args = parser.parse_args()
  if args.smoke:
    args.params, args.rounds = 0.1, 1

  tree = state(args.params)
  nbytes = sum(x.nbytes for x in jax.tree.leaves(tree))
  times = {"save": [], "digest": [], "verify": [], "restore": []}
  root = tempfile.mkdtemp(prefix="digest_bench_", dir=args.dir)
  try:
    for r in range(args.rounds):
      directory = os.path.join(root, f"round{r}")
      # orbax's own manager: the trainer's Checkpointer writes the digest inside the commit, and
      # the baseline here is the save without it.
      ocp = checkpoints.ocp
      manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(
          enable_async_checkpointing=False, create=True))
      step_dir = os.path.join(directory, "1")
      t0 = time.perf_counter()
      manager.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave(tree)))
      manager.wait_until_finished()
      t1 = time.perf_counter()
      checkpoints.write_digest(step_dir)
      t2 = time.perf_counter()
      assert checkpoints.verify_digest(step_dir) is None
      t3 = time.perf_counter()
      restored = manager.restore(1, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(checkpoints.abstract_tree(tree))))["state"]
      jax.block_until_ready(restored)
      t4 = time.perf_counter()
      manager.close()
      for k, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
        times[k].append(dt)
      shutil.rmtree(directory)
  finally:
    shutil.rmtree(root, ignore_errors=True)

  med = {k: float(np.median(v)) for k, v in times.items()}
  gb = nbytes / 1e9
  table = [f"state: {args.params:g}M parameters x 3 (params, mu, nu) float32 = {gb:.2f} GB; median of {args.rounds}",
           f"{'step':<28}{'seconds':>9}{'GB/s':>8}"]
  for name, key in (("orbax save (to the commit)", "save"), ("write_digest (SHA-256)", "digest"),
                    ("verify_digest", "verify"), ("orbax restore", "restore")):
    table.append(f"{name:<28}{med[key]:>9.2f}{gb / med[key]:>8.2f}")
  table.append(f"digest / save {med['digest'] / med['save']:.2f}x, verify / restore {med['verify'] / med['restore']:.2f}x")
  print("\n".join(table))
  summary = {"params_m": args.params, "bytes": nbytes, "rounds": args.rounds, "seconds": times, "median": med}
  print(json.dumps(summary))
  bench = _record.record_name("checkpoint_digest", args)
  if bench:
    figures = [
        _record.figure("R.digest_write_s", f"checkpoint digest: write, {gb:.2f} GB state", med["digest"], "s"),
        _record.figure("R.digest_verify_s", f"checkpoint digest: verify, {gb:.2f} GB state", med["verify"], "s"),
        _record.figure("R.digest_vs_save", "digest write time / orbax save time", med["digest"] / med["save"], "x"),
        _record.figure("R.verify_vs_restore", "digest verify time / orbax restore time",
                       med["verify"] / med["restore"], "x"),
    ]
    path = _record.save(bench, figures=figures, table="\n".join(table), result=summary)
    print(f"# recorded {path}", file=sys.stderr)


if __name__ == "__main__":
  main()
