"""A training run's own config, read from its workdir (what eval.py and generate.py use by default).

  python eval.py --workdir DIR [--config.eval.average_last=5 ...]
  (the same as --config=configs/workdir.py:DIR)

DIR/config.json is the config train.py ran with, every --config override applied; further
--config.key=value overrides apply on top. See roformer_jax/training/run_config.py.
"""

from roformer_jax.training import run_config


def get_config(workdir: str = ""):
  return run_config.load(workdir)
