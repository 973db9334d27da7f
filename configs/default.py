"""Default config: a small RoFormer language model that trains offline on a CPU.

Run:
  python train.py --config configs/default.py --workdir workdirs/default

The trainer itself lands with the training issue (#4); until then train.py validates this
config and says so. The keys below are the ones every training config carries (DESIGN.md).
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.seed = 0  # PRNG seed for init, data order and dropout.
  config.total_steps = 2000  # optimiser steps.
  config.batch_size = 16  # global batch, split over the mesh's (data, fsdp) axes.
  config.checkpoint_every_steps = 500
  config.eval_every_steps = 250
  config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})  # -1 = fill with devices.

  config.rope = ml_collections.ConfigDict()
  config.rope.theta = 10000.0  # Sec. 3.2.2: theta_i = 10000^(-2(i-1)/d).
  config.rope.layout = "interleaved"  # eq. (34), as in HF RoFormer.
  config.rope.rotary_dim = ml_collections.config_dict.placeholder(int)  # None = whole head.
  return config
