"""WMT14 English->German with a Transformer-base encoder-decoder and RoPE (paper Sec. 4.1).

  python train.py --config configs/wmt14_ende_base.py --workdir workdirs/wmt14_ende_base  # needs: network
  python train.py --config configs/wmt14_ende_base.py:sinusoidal --workdir workdirs/wmt14_ende_sinusoidal  # needs: network
  python train.py --config configs/wmt14_ende_base.py:smoke --workdir /tmp/smoke_wmt  # needs: network

Variants (comma-separated, e.g. `:sinusoidal,smoke`):
  sinusoidal  the Vaswani et al. baseline of Table 1: sinusoidal absolute positions added to the
              embeddings instead of RoPE in the self-attentions.
  smoke       2 steps of a tiny model with a 256-piece SentencePiece vocabulary (character
              coverage 0.9995: configs/common.py) trained on first use. From the command line it reads the prepared dataset; tests/test_configs.py
              runs it offline on `tfds.testing.mock_data`.

Before the first real run, prepare the data and the joint vocabulary once (needs network):
  python -m roformer_jax.training.data.prepare dataset wmt14_translate/de-en  # needs: network
  python -m roformer_jax.training.data.prepare tokenizer wmt14_translate/de-en --vocab_size 37000  # needs: network

What is the paper's and what is ours: Sec. 4.1 fixes the architecture (Transformer-base), Adam
(0.9, 0.98), the linear warmup from 1e-7 to 5e-4 followed by inverse-square-root decay, label
smoothing 0.1, the shared 37k BPE vocabulary and the averaging of the last 5 checkpoints. It
does not give the warmup length (4000 is fairseq's WMT recipe), the batch (fairseq batches by
tokens; we batch sentence pairs, see batch_size), the step count or the length cap; those are
ours.
"""

import ml_collections

from configs import common
from roformer_jax.training import optim

VARIANTS = ("sinusoidal", common.SMOKE)


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  variants = common.parse_variants(arg, VARIANTS, config_name="wmt14_ende_base")
  config = common.base_config()
  config.task = "seq2seq"  # TransformerSeq2Seq, label-smoothed CE on tgt_out (roformer_jax.training.tasks).
  config.seed = 0  # PRNG seed for init, data order and dropout.
  config.total_steps = 100_000  # ours: Vaswani et al.'s base run length (Sec. 4.1 gives none).
  # Ours: 512 sentence pairs per batch, roughly 15k target tokens at WMT14's roughly 30
  # subword tokens per sentence. Sec. 4.1 gives no batch size; it trains with fairseq, which
  # batches by tokens (Vaswani et al.: ~25k source + 25k target tokens per batch). For a batch
  # of that size use batch_size=1024, or optim.grad_accum_steps=2 with total_steps doubled (the
  # loop counts batches, the schedule counts updates).
  config.batch_size = 512  # sentence pairs (global); see the note above.
  config.checkpoint_every_steps = 2000  # ours.
  config.keep_checkpoints = 5  # Sec. 4.1 evaluates the average of the last 5 checkpoints.
  config.eval_every_steps = 2000  # ours.
  config.log_every_steps = 100  # metrics.jsonl / TensorBoard / progress-bar interval.
  config.eval_batches = 6  # newstest2013 (validation) has 3000 pairs: 6 batches of 512.
  config.async_checkpoints = True  # orbax writes in the background while training continues.
  config.num_devices = 0  # use all devices.
  config.label_smoothing = 0.1  # Sec. 4.1: label smoothing 0.1.
  config.feature_redraw_every = 0  # softmax attention: no FAVOR+ features to redraw.

  config.data.dataset = "wmt14_translate/de-en"  # Sec. 4.1: WMT 2014 En-De, English source, German target.
  config.data.tokenizer = "sentencepiece"  # Sec. 4.1: BPE, shared by source and target.
  config.data.tokenizer_model_type = "bpe"  # Sec. 4.1: BPE.
  config.data.vocab_size = 37000  # Sec. 4.1: a joint 37k vocabulary, trained on both sides.
  config.data.tokenizer_path = ""  # "" = <data_dir>/tokenizers/wmt14_translate_de-en_bpe37000.model
  config.data.max_length = 128  # ours: source tokens (incl. EOS); longer training pairs are dropped.
  config.data.max_target_length = 128  # ours: target tokens (BOS + target, target + EOS).
  config.data.drop_long_pairs = True  # training skips over-long pairs; evaluation truncates.

  config.model = common.model_config(dict(  # roformer_jax.models.ModelConfig fields.
      # models.PRESETS["transformer-base"], Sec. 4.1 (Vaswani et al.'s base model):
      vocab_size=37000,  # the shared 37k vocabulary (Sec. 4.1).
      d_model=512,  # Sec. 4.1: Transformer-base width.
      num_layers=6,  # Sec. 4.1: 6 encoder + 6 decoder layers.
      num_heads=8,  # Sec. 4.1: 8 heads.
      d_ff=2048,  # Sec. 4.1: feed-forward width 2048.
      activation="relu",  # Vaswani et al.
      type_vocab_size=0,  # no segment (token type) embeddings in translation.
      scale_embeddings=True,  # embeddings times sqrt(d_model) (Vaswani et al.).
      embed_init_std=512 ** -0.5,  # fairseq's N(0, d^-1/2) embedding init.
      layer_norm_eps=1e-5,  # fairseq / PyTorch LayerNorm.
      tie_embeddings=True,  # one table for source, target and output projection (shared vocab).
      norm="post",  # post-LN, as Vaswani et al. and fairseq's transformer_wmt_en_de.
      position="rope",  # RoPE in encoder and decoder self-attention (Sec. 4.1); :sinusoidal = baseline.
      rope_theta=10000.0,  # Sec. 3.2.2: theta_i = 10000^(-2i/d).
      rope_layout="interleaved",  # eq. (34).
      dropout=0.1,  # Vaswani et al. base: P_drop = 0.1.
      attention_dropout=0.0,  # fairseq transformer_wmt_en_de default.
      attention="softmax",  # the encoder-decoder uses softmax attention.
  ))

  config.optim = optim.default_optim_config("mt")  # Sec. 4.1 defaults; spelled out below.
  config.optim.optimizer = "adam"  # Sec. 4.1: Adam.
  config.optim.b1 = 0.9  # Sec. 4.1: beta1 = 0.9.
  config.optim.b2 = 0.98  # Sec. 4.1: beta2 = 0.98.
  config.optim.eps = 1e-8  # fairseq's --adam-eps default (the paper does not say).
  config.optim.schedule = "inverse_sqrt"  # Sec. 4.1: linear warmup, then lr ~ 1/sqrt(step).
  config.optim.warmup_init_lr = 1e-7  # Sec. 4.1: warmup starts at 1e-7.
  config.optim.learning_rate = 5e-4  # Sec. 4.1: peak 5e-4, reached at the end of warmup.
  config.optim.warmup_steps = 4000  # ours (fairseq's WMT recipe): Sec. 4.1 does not give it.
  config.optim.weight_decay = 0.0  # none in Sec. 4.1 (plain Adam).
  config.optim.grad_clip_norm = 0.0  # none in Sec. 4.1.
  config.optim.grad_accum_steps = 1  # one optimiser update per batch.

  config.eval.average_last = 5  # Sec. 4.1: the average of the last 5 checkpoints (keep_checkpoints above).

  if "sinusoidal" in variants:
    config.model.position = "sinusoidal"  # Table 1 baseline: Vaswani et al.'s additive encoding.
  if common.SMOKE in variants:
    common.apply_smoke(config)
    common.apply_smoke_sentencepiece(config)
    config.data.max_target_length = 32  # as the source
    config.model.embed_init_std = 32 ** -0.5  # d_model ** -0.5 of the tiny model
    config.optim.warmup_steps = 1  # both schedule branches run in 2 steps
  return config
