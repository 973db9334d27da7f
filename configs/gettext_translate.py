"""English -> German translation on the system's gettext catalogues: Sec. 4.1 at CPU scale (E5).

  python train.py --config configs/gettext_translate.py --workdir workdirs/gettext_rope
  python train.py --config configs/gettext_translate.py:sinusoidal --workdir workdirs/gettext_sinusoidal
  python eval.py  --config configs/gettext_translate.py --workdir workdirs/gettext_rope
  python train.py --config configs/gettext_translate.py --config.data.dataset=gettext_translate/fr ...

The corpus is built offline on first use from /usr/share/locale/<lang>/LC_MESSAGES/*.mo
(roformer_jax/training/data/gettext_catalogs.py): for German about 52k training pairs of software
messages, with ~1.1k validation and ~1.1k test pairs split by a hash of the English string.
A joint BPE vocabulary of 8000 pieces is trained on the train split on first use (about
10 s). Any language with catalogues works through data.dataset=gettext_translate/<lang>;
each language gets its own vocabulary file.

Variants (comma-separated):
  sinusoidal  the Vaswani et al. baseline: sinusoidal absolute positions instead of RoPE.
  smoke       2 steps of a tiny model with a 256-piece vocabulary (character coverage 0.9995;
              the catalogues' English and German need 115 pieces: configs/common.py).

Everything of Sec. 4.1 that does not depend on scale is kept from configs/wmt14_ende_base.py:
Adam(0.9, 0.98), the inverse-square-root schedule from 1e-7 to 5e-4, label smoothing 0.1,
post-LN, tied shared embeddings, beam 4 with length penalty 0.6, and the average of the last
5 checkpoints at evaluation. What is ours: the model size (3+3 layers of width 256), the
vocabulary (8000), the lengths (48), packed training rows (data.pack_pairs), the batch (16
rows, ~75 pairs), the warmup (400 steps) and the run length (1800 steps), chosen so that one
run takes about 13 minutes on 2 CPU cores.
"""

import ml_collections

from configs import common, wmt14_ende_base

VARIANTS = ("sinusoidal", common.SMOKE)


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  variants = common.parse_variants(arg, VARIANTS, config_name="gettext_translate")
  config = wmt14_ende_base.get_config(",".join(v for v in variants if v == "sinusoidal"))
  config.total_steps = 1800  # ours: ~2.5 epochs of the 52k German training pairs.
  config.batch_size = 16  # packed rows (global) of ~4.4 pairs each: ~70 pairs, ~700 target tokens.
  config.checkpoint_every_steps = 200  # the last 5 checkpoints span the last 800 steps.
  config.keep_checkpoints = 5  # Sec. 4.1 averages the last 5.
  config.eval_every_steps = 600  # three evaluations in the run
  config.log_every_steps = 50  # metrics rows
  config.eval_batches = 20  # 320 validation pairs per periodic evaluation (eval.py: all of them).

  config.data.dataset = "gettext_translate/de"  # English source, German target.
  config.data.locale_dir = ""  # "" = /usr/share/locale
  config.data.vocab_size = 8000  # ours: a joint BPE vocabulary sized for ~3.7 MB of text.
  config.data.tokenizer_path = ""  # "" = <data_dir>/tokenizers/gettext_translate_de_bpe8000.model
  config.data.train_tokenizer_if_missing = True  # offline and ~10 s: train on first use.
  config.data.max_length = 48  # source tokens incl. EOS; ~97% of the training pairs fit.
  config.data.max_target_length = 48  # target tokens (BOS + target, target + EOS).
  config.data.pack_pairs = True  # ~4.4 pairs per row: 4-5x the pairs per step for the same compute.

  config.model.vocab_size = 8000  # the joint BPE vocabulary's
  config.model.d_model = 256  # ours: a quarter of Transformer-base's width ...
  config.model.num_layers = 3  # ... and half its depth (3 encoder + 3 decoder layers).
  config.model.num_heads = 4  # head size 64, as Transformer-base.
  config.model.d_ff = 1024  # 4 x d_model, as Transformer-base.
  config.model.embed_init_std = 256 ** -0.5  # fairseq's N(0, d^-1/2).

  config.optim.warmup_steps = 400  # ours: fairseq's 4000 would exceed the run.

  config.eval.split = "test"  # BLEU on the held-out test split (validation guides nothing here).
  config.eval.average_last = 5  # Sec. 4.1.
  config.eval.beam_size = 4  # Sec. 4.1; --config.eval.beam_size=1 gives greedy decoding.
  config.eval.length_penalty = 0.6  # Sec. 4.1.
  config.eval.max_decode_length = 96  # targets of the test split may exceed the training length.

  if common.SMOKE in variants:
    common.apply_smoke(config)
    common.apply_smoke_sentencepiece(config)
    config.data.max_target_length = 32  # short targets for the tiny model
    config.model.embed_init_std = 32 ** -0.5  # d_model ** -0.5, as the full config's
    config.optim.warmup_steps = 1  # the schedule fits 2 steps
    config.eval.max_decode_length = 0  # = data.max_target_length
  return config
