"""Masked-LM pre-training of a BERT-base sized RoFormer (paper Sec. 4.2).

  python train.py --config configs/bert_base_mlm.py --workdir workdirs/bert_base_mlm  # needs: network
  python train.py --config configs/bert_base_mlm.py:bert --workdir workdirs/bert_base_mlm_bert  # needs: network
  python train.py --config configs/bert_base_mlm.py:smoke --workdir /tmp/smoke_mlm  # needs: network

Variants (comma-separated, e.g. `:bert,smoke`):
  bert   the BERT baseline of Fig. 3 (left): learned absolute position embeddings (512 rows)
         instead of RoPE.
  smoke  2 steps of a tiny model with a 256-piece SentencePiece vocabulary (character coverage
         0.9995, so real Wikipedia text fits: configs/common.py) trained on first use.
         From the command line it reads the prepared dataset; tests/test_configs.py runs it
         offline on `tfds.testing.mock_data`.

Data: the paper pre-trains on BookCorpus + English Wikipedia. BookCorpus is not in TFDS (its
redistribution was withdrawn), so this config uses `wikipedia` (TFDS wikipedia/20230601.en)
alone, with 1% held out for validation (the paper holds out 20%). BERT's 30,522-entry WordPiece
vocabulary is stood in for by a SentencePiece BPE vocabulary of the same size trained on the
pre-training text. Prepare both once, up front (network; Wikipedia needs Apache Beam):
  python -m roformer_jax.training.data.prepare dataset wikipedia  # needs: network
  python -m roformer_jax.training.data.prepare tokenizer wikipedia --vocab_size 30522  # needs: network
"""

import ml_collections

from configs import common
from roformer_jax.training import optim

VARIANTS = ("bert", common.SMOKE)


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  variants = common.parse_variants(arg, VARIANTS, config_name="bert_base_mlm")
  config = common.base_config()
  config.task = "mlm"  # RoFormerForMaskedLM: CE at the masked positions (roformer_jax.training.tasks).
  config.seed = 0  # PRNG seed for init, data order, masks and dropout.
  config.dropout_rng = "rbg"  # ours: dropout's PRNG; 5.5% faster steps than threefry on an H200 (docs/training.md).
  config.total_steps = 100_000  # Sec. 4.2: 100k steps.
  config.batch_size = 64  # Sec. 4.2: batch size 64 (sequences of max_length tokens, packed).
  config.checkpoint_every_steps = 2000  # ours.
  config.eval_every_steps = 2000  # ours.
  config.log_every_steps = 100  # metrics.jsonl / TensorBoard / progress-bar interval.
  config.eval_batches = 32  # ours: 2048 validation rows of 512 tokens per evaluation.
  config.keep_checkpoints = 3  # newest checkpoints kept on disk.
  config.async_checkpoints = True  # orbax writes in the background while training continues.
  config.num_devices = 0  # use all devices.
  config.label_smoothing = 0.0  # none in MLM pre-training.
  config.feature_redraw_every = 0  # softmax attention: no FAVOR+ features to redraw.

  config.data.dataset = "wikipedia"  # Sec. 4.2 uses BookCorpus + Wikipedia; BookCorpus is not in TFDS.
  config.data.max_length = 512  # Sec. 4.2: maximum sequence length 512 (documents packed into rows).
  # A packed row is one sequence: its documents (each wrapped in BOS ... EOS) see each other,
  # as in RoBERTa's FULL-SENTENCES rows; BERT's rows likewise put no mask between their
  # segments. Training batches then need no mask, which cuDNN's fused attention requires:
  # B3 on an H100, 60 ms per step vs 98 ms with a per-document segment mask (docs/benchmarks.md).
  config.data.document_mask = False  # rows span documents, unmasked (True: one document per mask).
  config.data.tokenizer = "sentencepiece"  # stands in for BERT's WordPiece.
  config.data.tokenizer_model_type = "bpe"  # a subword vocabulary like WordPiece.
  config.data.vocab_size = 30522  # bert-base-uncased's vocabulary size.
  config.data.tokenizer_path = ""  # "" = <data_dir>/tokenizers/wikipedia_bpe30522.model
  config.data.mlm_probability = 0.15  # BERT (Devlin et al.): 15% of tokens are predicted,
  config.data.mlm_mask_ratio = 0.8  # of which 80% become <mask>,
  config.data.mlm_random_ratio = 0.1  # 10% a random token and 10% stay unchanged.

  config.model = common.model_config(dict(  # roformer_jax.models.ModelConfig fields.
      # models.PRESETS["roformer-base"]: bert-base-uncased sizes (Sec. 4.2).
      vocab_size=30522,  # = data.vocab_size.
      d_model=768,  # Sec. 4.2: BERT-base width.
      num_layers=12,  # Sec. 4.2: 12 layers.
      num_heads=12,  # Sec. 4.2: 12 heads.
      d_ff=3072,  # BERT-base feed-forward width.
      activation="gelu",  # BERT / HF RoFormer (exact erf GELU).
      dtype="bfloat16",  # mixed precision for a GPU/TPU: bf16 compute, float32 parameters and
      # Adam moments (cuDNN's fused attention needs bf16); --config.model.dtype=float32 for all-fp32.
      type_vocab_size=2,  # segment A/B embeddings, as BERT (all zeros in packed MLM rows).
      max_position=512,  # rows of the learned table, used by :bert only (BERT's 512).
      position="rope",  # Sec. 4.2: RoPE replaces the absolute position encoding; :bert = baseline.
      rope_theta=10000.0,  # Sec. 3.2.2.
      rope_layout="interleaved",  # eq. (34), as HF RoFormer.
      norm="post",  # post-LN, as BERT and HF RoFormer.
      layer_norm_eps=1e-12,  # BERT's.
      dropout=0.1,  # BERT's hidden dropout.
      # Attention-probability dropout has no fused kernel here (jax.nn's cuDNN attention takes
      # none): with it B3's step took 146 ms instead of 60 on an H100 (docs/benchmarks.md; that
      # figure also has the hidden dropout).
      attention_dropout=0.0,  # departs from BERT's 0.1 (set 0.1 to restore it, on the XLA path).
      attention="softmax",  # full softmax attention, as BERT.
      tie_embeddings=True,  # the MLM head's output projection is the word embedding table (BERT).
  ))

  # Sec. 4.2: AdamW, lr 1e-5. The paper names nothing else; optim's "mlm" setup fills in
  # BERT's beta2 0.999, eps 1e-6 and weight decay 0.01, at a constant rate.
  config.optim = optim.default_optim_config("mlm")  # Sec. 4.2 setup; spelled out below.
  config.optim.optimizer = "adamw"  # Sec. 4.2: AdamW.
  config.optim.learning_rate = 1e-5  # Sec. 4.2: lr 1e-5.
  config.optim.schedule = "constant"  # the paper gives no schedule.
  config.optim.b1 = 0.9  # BERT's.
  config.optim.b2 = 0.999  # BERT's.
  config.optim.eps = 1e-6  # BERT's.
  config.optim.weight_decay = 0.01  # BERT's; never on biases or LayerNorm (optim.decay_mask).
  config.optim.grad_clip_norm = 0.0  # none given.
  config.optim.grad_accum_steps = 1  # one optimiser update per batch.

  if "bert" in variants:
    config.model.position = "learned"  # BERT's trainable absolute positions, 512 rows.
  if common.SMOKE in variants:
    common.apply_smoke(config)
    common.apply_smoke_sentencepiece(config)
    config.optim.learning_rate = 1e-3  # a visible step in 2 updates
  return config
