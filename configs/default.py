"""Default config: a small RoFormer byte-level language model, trained offline on a CPU.

Run (the README's `make train` does this):
  python train.py --config configs/default.py --workdir workdirs/default
  python train.py --config configs/default.py:smoke --workdir /tmp/smoke_default   # seconds, for tests

The `extend` variant fine-tunes that run at 4x its length with YaRN (context extension;
docs/training.md shows the commands).

The corpus is the Python standard library's own source files, read as bytes: it exists on
every machine with Python, so nothing is downloaded. It is turned into an ArrayRecord TFDS
dataset on first use (under ~/.cache/roformer_jax/tfds, about 0.5 s).
"""

import ml_collections

from configs import common
from roformer_jax.training import optim


VARIANTS = ("extend", common.SMOKE)
EXTEND_FACTOR = 4  # the extend variant's new length, in multiples of the trained one


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  """The default run; `extend` fine-tunes it at 4x the length; `smoke` shrinks either (`extend,smoke`)."""
  variants = common.parse_variants(variant, VARIANTS, config_name="default")
  config = common.base_config()  # every key; what follows is what this run changes
  config.task = "lm"  # next-byte prediction (roformer_jax.training.tasks)
  config.total_steps = 1500  # optimiser steps (batches); about 3 minutes on 2 CPU cores.
  config.batch_size = 16  # global batch, split over the mesh's (data, fsdp) axes.
  config.checkpoint_every_steps = 500  # also at the end, and on SIGTERM / Ctrl-C
  config.eval_every_steps = 500  # eval_loss over eval_batches, and samples
  config.log_every_steps = 20  # metrics.jsonl / TensorBoard rows
  config.eval_batches = 8  # validation batches per evaluation.
  config.sample_max_new_tokens = 48  # tokens generated per sample

  config.data.dataset = "python_stdlib_bytes"  # offline: the stdlib's own source files
  config.data.tokenizer = "bytes"  # 256 bytes + pad/bos/eos/mask = 260 ids
  config.data.max_length = 128  # T: packed row length in bytes

  config.model = common.model_config(dict(  # every ModelConfig field; these differ from its defaults
      vocab_size=260,  # the byte tokenizer's
      d_model=128,  # width
      num_layers=4,  # blocks
      num_heads=4,  # head dim 32
      d_ff=512,  # MLP width (4 x d_model)
      norm="pre",  # pre-LN trains stably at this learning rate without warmup tricks
      position="rope",  # rope | sinusoidal | learned | none: the paper's comparison switch
      rope_theta=10000.0,  # Sec. 3.2.2
      rope_layout="interleaved",  # eq. (34)
      type_vocab_size=0,  # no token types in an LM
      dropout=0.0,  # a small model on a big corpus does not overfit in 1500 steps
      attention_dropout=0.0,  # (as dropout)
      layer_norm_eps=1e-5,  # LayerNorm epsilon
      attention="softmax",  # softmax | linear (eq. 19)
  ))

  config.optim = optim.default_optim_config("lm")  # every optimiser key, with its lm default
  config.optim.optimizer = "adamw"  # adam | adamw
  config.optim.schedule = "cosine"  # linear warmup, then cosine decay to 0
  config.optim.learning_rate = 3e-3  # peak rate
  config.optim.warmup_steps = 50  # linear warmup steps
  config.optim.warmup_init_lr = 0.0  # rate at step 0
  config.optim.weight_decay = 0.01  # AdamW's decoupled decay
  config.optim.grad_clip_norm = 1.0  # global-norm clipping

  if common.SMOKE in variants:  # seconds, for tests: a tiny model on 40 documents
    config.total_steps = 2  # two optimiser steps
    config.checkpoint_every_steps = 1  # a save every step: resume tests
    config.eval_every_steps = 2  # one eval, at the end
    config.log_every_steps = 1  # a row per step
    config.eval_batches = 1  # one validation batch
    config.samples_per_eval = 0  # no decode compile in the seconds-long smoke runs
    config.batch_size = 8  # global batch
    config.data.max_documents = 40  # a small corpus builds in a fraction of a second
    config.data.max_length = 32  # T
    config.model.update(dict(d_model=32, num_layers=1, num_heads=2, d_ff=64))  # tiny
    config.optim.warmup_steps = 1  # the schedule fits 2 steps
  if "extend" in variants:
    extend(config)
  return config


def extend(config: ml_collections.ConfigDict, factor: int = EXTEND_FACTOR) -> ml_collections.ConfigDict:
  """Context extension: the trained default run, fine-tuned at `factor` x its length with YaRN.

  YaRN (Peng et al. 2023) interpolates the slow RoPE frequencies by `factor`, keeps the fast
  ones, and scales the logits by its attention factor (0.1 ln(factor) + 1), in training, eval
  and decoding alike. The fine-tune keeps the tokens per step of the original run (the batch
  shrinks by `factor`), a fresh optimiser with a short warmup and a lower peak rate. Its data
  mixes in passkey-retrieval rows so that eval.py's passkey probe has a format the byte model
  has seen (docs/training.md, "Context extension"). experiments/run.py e6 compares this with
  PI, NTK, ABF and training from scratch.
  """
  trained = config.data.max_length
  config.init_from = "workdirs/default"  # the README's default run (make train); another: --config.init_from=DIR
  config.data.max_length = trained * factor  # the new length
  config.batch_size = max(config.batch_size // factor, 1)  # the same tokens per step as the trained run
  config.model.rope_scaling = {  # YaRN from the trained length
      "rope_type": "yarn", "factor": float(factor), "original_max_position_embeddings": trained}
  if config.total_steps > 2:  # the smoke variant keeps its two steps
    config.total_steps = 250  # about 1 min on 2 CPU cores; YaRN's claim is a few hundred steps
    config.checkpoint_every_steps = 125  # twice
    config.eval_every_steps = 50  # eval loss at the new length every 50 steps
    config.log_every_steps = 10  # metrics rows
    config.optim.warmup_steps = 20  # a short warmup for the fresh optimiser
  config.optim.learning_rate = 1e-3  # a third of the pre-training peak: a fine-tune, not a restart
  config.data.passkey_fraction = 0.1  # passkey rows in the mix: the format eval.py's probe asks for
  config.eval.length_factors = tuple(f / factor for f in (1, 2, 4, 8, 16))  # L ... 16L of the trained length
  return config
