"""A small ViT with 2-D RoPE on the offline shapes2d images (issue 26; RoPE-ViT, Heo et al. 2024).

Run:
  python train.py --config configs/vit_shapes.py --workdir workdirs/vit_shapes
  python eval.py --workdir workdirs/vit_shapes
  python train.py --config configs/vit_shapes.py:smoke --workdir /tmp/smoke_vit_shapes   # seconds, for tests

shapes2d is built on first use from seeded scene parameters (roformer_jax/training/data/
shapes.py, docs/data.md): each image holds two shapes, and the label is where one lies
relative to the other, so the model needs 2-D positions. The same scenes render at any
resolution: evaluate at a larger one with --config.data.image_size=48 (1.5x the token grid) or
64 (2x), as RoPE-ViT tests at 320-512 px after training at 224.

The position encoding is config.vit.position: rope_axial (the default), rope_mixed, rope_2d,
learned (a table resized at other grids) or none (docs/models.md).
"""

import ml_collections

from configs import common
from roformer_jax.training import optim

VARIANTS = (common.SMOKE,)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  """The shapes2d ViT run; `smoke` shrinks it to seconds."""
  variants = common.parse_variants(variant, VARIANTS, config_name="vit_shapes")
  config = common.base_config()  # every key; what follows is what this run changes
  config.task = "image"  # image classification with roformer_jax.vit
  config.total_steps = 2000  # optimiser steps
  config.batch_size = 64  # global batch of images
  config.checkpoint_every_steps = 500  # orbax saves (also at the end and on SIGTERM)
  config.eval_every_steps = 500  # validation loss and accuracy
  config.log_every_steps = 25  # metrics.jsonl / TensorBoard rows
  config.eval_batches = 16  # 1,024 validation scenes per evaluation

  config.data.dataset = "shapes2d"  # offline, procedural (docs/data.md)
  config.data.image_size = 32  # R: the training resolution, an 8 x 8 grid of 4-pixel patches
  config.data.image_channels = 3  # RGB

  config.vit.image_size = 32  # the model's grid (8 x 8): evaluating at another data.image_size keeps it
  config.vit.patch_size = 4  # P
  config.vit.cls_token = True  # classify the CLS token (position (0, 0): unrotated)
  config.vit.position = "rope_axial"  # Heo et al.'s RoPE-Axial (theta 100)

  config.model = common.model_config(dict(  # the encoder; the ViT sets pre-LN and the 2-D RoPE itself
      vocab_size=1,  # unused: images have no vocabulary
      d_model=64, num_layers=4, num_heads=4, d_ff=256,  # a ViT-Tiny/4 sized for a CPU (head dim 16)
      type_vocab_size=0, dropout=0.0, attention_dropout=0.0, layer_norm_eps=1e-6))

  config.optim = optim.default_optim_config("lm")  # every optimiser key
  config.optim.optimizer = "adamw"  # DeiT / RoPE-ViT train with AdamW
  config.optim.schedule = "cosine"  # linear warmup, then cosine decay to 0
  config.optim.learning_rate = 1e-3  # peak rate
  config.optim.warmup_steps = 100  # linear warmup steps
  config.optim.warmup_init_lr = 0.0  # rate at step 0
  config.optim.weight_decay = 0.05  # DeiT's; kernels only (no CLS, tables or RoPE-Mixed frequencies)
  config.optim.grad_clip_norm = 1.0  # global-norm clipping

  if common.SMOKE in variants:  # seconds, for tests
    config.total_steps = 2  # two optimiser steps
    config.checkpoint_every_steps = 1  # a save every step: resume tests
    config.eval_every_steps = 2  # one eval, at the end
    config.log_every_steps = 1  # a row per step
    config.eval_batches = 1  # one validation batch
    config.samples_per_eval = 0  # no samples in the seconds-long smoke runs
    config.batch_size = 8  # global batch
    config.data.image_size = config.vit.image_size = 16  # a 4 x 4 grid
    config.model.update(dict(d_model=32, num_layers=1, num_heads=2, d_ff=64))  # tiny
    config.optim.warmup_steps = 1  # the schedule fits 2 steps
  return config
