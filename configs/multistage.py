"""The staged pre-training schedule of Table 4 (Sec. 4.5): MLM with changing length and batch.

Run:
  python train.py --config configs/multistage.py --workdir workdirs/multistage          # Table 4
  python train.py --config configs/multistage.py:small --workdir workdirs/multistage_s  # a CPU run
  python train.py --config configs/multistage.py:smoke --workdir /tmp/ms                # tests

The paper pre-trains its Chinese RoFormer in six stages (Table 4):

  stage  max length  batch  steps
  1      512         256    200k
  2      1536        256    12.5k (we use 12.5k rounded to 12500)
  3      256         256    120k
  4      128         512    80k
  5      1536        256    10k
  6      512         512    30k

Its 34 GB Chinese corpus is not public, so the data here is the offline stdlib byte corpus
of configs/default.py (set config.data to another MLM dataset, e.g. `wikipedia`, on a GPU
mesh). The trainer moves through the stages, recompiling once per new shape, and a resumed
run restarts inside its stage with that stage's data iterator.
"""

import ml_collections

from configs import common, default
from roformer_jax.training import optim

# (max_length, global batch, steps), Table 4.
TABLE_4 = ((512, 256, 200_000), (1536, 256, 12_500), (256, 256, 120_000), (128, 512, 80_000),
           (1536, 256, 10_000), (512, 512, 30_000))


def _stages(rows):
  return [{"max_length": t, "batch_size": b, "steps": s} for t, b, s in rows]


VARIANTS = ("small", common.SMOKE)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  variants = common.parse_variants(variant, VARIANTS, config_name="multistage")
  config = default.get_config()
  config.task = "mlm"  # Sec. 4.5 pre-trains a masked LM
  config.stages = _stages(TABLE_4)  # replaces batch_size and data.max_length stage by stage
  config.total_steps = sum(s for _, _, s in TABLE_4)  # 452.5k, Sec. 4.5
  config.batch_size = TABLE_4[0][1]  # the first stage's; each stage sets its own
  config.checkpoint_every_steps = 5000  # and at each stage's end (the run resumes inside a stage)
  config.eval_every_steps = 5000  # eval at the current stage's length
  config.model.update(dict(  # RoFormer-base (Chinese): BERT-base shape, post-LN, BERT's dropout
      d_model=768, num_layers=12, num_heads=12, d_ff=3072, norm="post",
      type_vocab_size=2, layer_norm_eps=1e-12, dropout=0.1, attention_dropout=0.1))
  config.optim = optim.default_optim_config("mlm")  # AdamW, Sec. 4.2 (the paper gives no Sec. 4.5 rate)
  if "small" in variants:  # Table 4's shape of schedule at 1/1000 of the steps and 1/16 of the lengths
    config.stages = _stages([(max(t // 16, 8), 16, max(s // 1000, 10)) for t, b, s in TABLE_4])  # 6 stages
    config.total_steps = sum(st["steps"] for st in config.stages)  # 452 steps
    config.batch_size = 16  # the first stage's
    config.checkpoint_every_steps = config.eval_every_steps = 100  # a few saves and evals per run
    config.model.update(dict(  # configs/default.py's model
        d_model=128, num_layers=4, num_heads=4, d_ff=512, norm="pre", dropout=0.0, attention_dropout=0.0))
    config.optim.learning_rate = 1e-3  # a small model takes a larger rate than BERT-base's 1e-5
  if common.SMOKE in variants:  # seconds, for tests (after small: smoke shrinks what it set)
    config.stages = _stages([(16, 8, 2), (48, 8, 2), (8, 16, 2)])  # three stages of two steps
    config.total_steps = 6  # the stages' sum
    config.batch_size = 8  # the first stage's
    config.checkpoint_every_steps = 1  # a save every step: resume tests
    config.eval_every_steps = 6  # one eval, at the end
    config.log_every_steps = 1  # a row per step
    config.eval_batches = 1  # one validation batch
    config.samples_per_eval = 0  # no decode compile in the smoke run
    config.data.max_documents = 40  # a small corpus builds in a fraction of a second
    config.model.update(dict(d_model=32, num_layers=1, num_heads=2, d_ff=64, dropout=0.0, attention_dropout=0.0))  # tiny
  return config
