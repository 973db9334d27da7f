"""GLUE fine-tuning of a BERT-base sized RoFormer encoder (paper Sec. 4.3); the task is the argument.

  python train.py --config configs/glue.py:mrpc --workdir workdirs/glue_mrpc  # needs: network
  python train.py --config configs/glue.py:stsb --workdir workdirs/glue_stsb  # needs: network
  python train.py --config configs/glue.py:mrpc,smoke --workdir /tmp/smoke_glue  # needs: network

Tasks (exactly one): mrpc, sst2, qnli, stsb (num_labels=1, a regression on the similarity
score, MSE loss), qqp, mnli (3 labels; validation = validation_matched).
Variant `smoke`: 2 steps of a tiny model with a 256-piece SentencePiece vocabulary (character
coverage 0.9995: configs/common.py) trained on first use. From the command line it reads the prepared dataset; tests/test_configs.py runs it
offline on `tfds.testing.mock_data`.

Sec. 4.3 fine-tunes with Hugging Face Transformers for 3 epochs, max length 512, batch 32, and
reports the best result over learning rates {2,3,4,5}e-5; this config uses 2e-5 (sweep the
others with --config.optim.learning_rate=3e-5 etc.) and HF's linear decay to 0 without warmup.
total_steps is 3 epochs of the task's training split at batch 32.

Fine-tuning the encoder pre-trained by configs/bert_base_mlm.py, as the paper does:
  python train.py --config configs/glue.py:mrpc --workdir workdirs/glue_mrpc \
      --config.init_from=workdirs/bert_base_mlm \
      --config.data.tokenizer_path=<data_dir>/tokenizers/wikipedia_bpe30522.model
init_from copies the newest checkpoint's encoder (embeddings and layers; the classification
head starts fresh) and checks that the architectures agree; a transformers RoFormer directory
works too. With init_from="" the encoder starts from a random initialisation: the Sec. 4.3
recipe runs end to end but will not reproduce Table 2.
Without a pre-trained encoder, prepare the data and a vocabulary of the task's own text once (network):
  python -m roformer_jax.training.data.prepare dataset glue/mrpc  # needs: network
  python -m roformer_jax.training.data.prepare tokenizer glue/mrpc --vocab_size 30522  # needs: network
"""

import math

import ml_collections

from configs import common
from roformer_jax.training import data, optim

# Training / validation examples per task (TFDS glue 2.0.0; mnli validation = validation_matched).
SPLIT_SIZES = {
    "mrpc": (3_668, 408),
    "sst2": (67_349, 872),
    "qnli": (104_743, 5_463),
    "stsb": (5_749, 1_500),
    "qqp": (363_846, 40_430),
    "mnli": (392_702, 9_815),
}
TASKS = tuple(SPLIT_SIZES)
VARIANTS = (*TASKS, common.SMOKE)
EPOCHS = 3  # Sec. 4.3: 3 epochs.
BATCH_SIZE = 32  # Sec. 4.3: batch size 32.


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  variants = common.parse_variants(arg, VARIANTS, config_name="glue")
  tasks = [v for v in variants if v in TASKS]
  if len(tasks) != 1:
    raise ValueError(f"configs/glue.py needs exactly one GLUE task as its argument, e.g. "
                     f"configs/glue.py:mrpc (or :mrpc,smoke); tasks: {list(TASKS)}; got {arg!r}.")
  task = tasks[0]
  train_size, validation_size = SPLIT_SIZES[task]
  steps_per_epoch = math.ceil(train_size / BATCH_SIZE)

  config = common.base_config()
  config.task = "classification"  # RoFormerForSequenceClassification (roformer_jax.training.tasks).
  config.num_labels = data.get_spec(f"glue/{task}").num_classes  # 2; 3 for mnli; 1 = regression (stsb).
  config.seed = 0  # PRNG seed for init, data order and dropout.
  config.total_steps = EPOCHS * steps_per_epoch  # Sec. 4.3: 3 epochs at batch 32.
  config.batch_size = BATCH_SIZE  # Sec. 4.3: 32 examples.
  config.checkpoint_every_steps = steps_per_epoch  # ours: once per epoch (and at the end).
  config.eval_every_steps = steps_per_epoch  # ours: once per epoch (and at the end).
  config.log_every_steps = 50  # metrics.jsonl / TensorBoard / progress-bar interval.
  config.eval_batches = math.ceil(validation_size / BATCH_SIZE)  # about one validation pass.
  config.keep_checkpoints = EPOCHS  # one per epoch.
  config.async_checkpoints = True  # orbax writes in the background while training continues.
  config.num_devices = 0  # use all devices.
  config.label_smoothing = 0.0  # none: HF's CrossEntropyLoss / MSELoss.
  config.feature_redraw_every = 0  # softmax attention: no FAVOR+ features to redraw.
  # Sec. 4.3 fine-tunes the pre-trained encoder: the bert_base_mlm.py workdir (or a transformers
  # RoFormer directory). "" trains from a random initialisation, which will not reproduce Table 2.
  config.init_from = ""  # "" = random init; see the comment above.

  config.data.dataset = f"glue/{task}"  # Sec. 4.3: GLUE.
  config.data.max_length = 512  # Sec. 4.3: max sequence length 512 ([CLS] a [SEP] b [SEP]).
  config.data.tokenizer = "sentencepiece"  # the pre-training vocabulary's kind (bert_base_mlm.py).
  config.data.tokenizer_model_type = "bpe"  # as the MLM config's.
  config.data.vocab_size = 30522  # the MLM config's (bert-base-uncased size).
  config.data.tokenizer_path = ""  # "" = <data_dir>/tokenizers/glue_<task>_bpe30522.model

  config.model = common.model_config(dict(  # roformer_jax.models.ModelConfig fields.
      # models.PRESETS["roformer-base"]: the encoder of bert_base_mlm.py (Sec. 4.2/4.3).
      vocab_size=30522,  # = data.vocab_size.
      d_model=768,  # BERT-base width.
      num_layers=12,  # 12 layers.
      num_heads=12,  # 12 heads.
      d_ff=3072,  # BERT-base feed-forward width.
      activation="gelu",  # BERT / HF RoFormer.
      type_vocab_size=2,  # segment A/B: 0 up to the first [SEP], 1 after.
      max_position=512,  # rows of a learned table (position="learned" only).
      position="rope",  # RoFormer (Sec. 4.3 fine-tunes the RoPE encoder).
      rope_theta=10000.0,  # Sec. 3.2.2.
      rope_layout="interleaved",  # eq. (34), as HF RoFormer.
      norm="post",  # post-LN, as BERT and HF RoFormer.
      layer_norm_eps=1e-12,  # BERT's.
      dropout=0.1,  # HF RoFormer's hidden dropout (also in the classification head).
      attention_dropout=0.1,  # HF RoFormer's attention dropout.
      attention="softmax",  # full softmax attention, as BERT.
  ))

  config.optim = optim.default_optim_config("glue")  # Sec. 4.3 setup; spelled out below.
  config.optim.optimizer = "adamw"  # HF Trainer's AdamW.
  config.optim.schedule = "linear"  # HF get_linear_schedule_with_warmup, decaying to 0 at total_steps.
  config.optim.learning_rate = 2e-5  # Sec. 4.3 sweeps {2,3,4,5}e-5; 2e-5 here.
  config.optim.warmup_steps = 0  # HF Trainer default (the paper gives none).
  config.optim.end_learning_rate = 0.0  # linear decay to 0.
  config.optim.b1 = 0.9  # HF Trainer default.
  config.optim.b2 = 0.999  # HF Trainer default.
  config.optim.eps = 1e-8  # HF Trainer default.
  config.optim.weight_decay = 0.0  # HF Trainer default.
  config.optim.grad_clip_norm = 1.0  # HF Trainer default (max_grad_norm).
  config.optim.grad_accum_steps = 1  # one optimiser update per batch.

  if common.SMOKE in variants:
    common.apply_smoke(config)
    common.apply_smoke_sentencepiece(config)
    config.optim.learning_rate = 1e-3  # a visible step in 2 updates
  return config
