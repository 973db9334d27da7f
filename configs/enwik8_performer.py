"""Character-level (byte) language model on enwik8: a 12-layer Performer with RoPE (paper Sec. 4.4).

  python train.py --config configs/enwik8_performer.py --workdir workdirs/enwik8_performer  # needs: network
  python train.py --config configs/enwik8_performer.py:norope --workdir workdirs/enwik8_performer_norope  # needs: network
  python train.py --config configs/enwik8_performer.py:smoke --workdir /tmp/smoke_enwik8   # 2 steps, offline

Variants (comma-separated, e.g. `:norope,smoke`):
  norope  the baseline of Fig. 3 (right): the same Performer without any position encoding
          (position="none"), as in performer-pytorch without rotary embeddings.
  smoke   2 steps of a tiny model on a tiny synthetic enwik8 (16 KiB of wiki-like XML written as
          enwik8.zip and built with the enwik8 builder under $TMPDIR/roformer_jax_smoke on first
          use, no download); tests/test_configs.py builds its own copy in a pytest tmp dir.

enwik8 is not in the TFDS catalogue. Download http://mattmahoney.net/dc/enwik8.zip, put it in
a directory and build the standard 90M/5M/5M byte split once (offline):
  python -m roformer_jax.training.data.prepare dataset enwik8 --manual_dir <directory with enwik8.zip>

Sec. 4.4 fixes the model (12 layers, 768 wide, 12 heads, char-level Performer), lr 1e-4,
batch 128 and max length 1024, and uses lucidrains/performer-pytorch; the rest (step count,
FAVOR+ features and their redraw interval, no dropout, gradient clipping) follows that code's
defaults and is marked as ours below.
"""

import os
import tempfile
import zipfile
from pathlib import Path

import ml_collections
import tensorflow_datasets as tfds

from configs import common
from roformer_jax.training import optim
from roformer_jax.training.data import corpus, enwik8

VARIANTS = ("norope", common.SMOKE)
SMOKE_DATA_DIR = Path(tempfile.gettempdir()) / "roformer_jax_smoke" / "tfds"


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  variants = common.parse_variants(arg, VARIANTS, config_name="enwik8_performer")
  config = common.base_config()
  config.task = "lm"  # CausalLM, next-byte CE (roformer_jax.training.tasks).
  config.seed = 0  # PRNG seed for init, data order and FAVOR+ redraws.
  config.total_steps = 100_000  # ours (performer-pytorch's enwik8 example: 1e5 batches).
  config.batch_size = 128  # Sec. 4.4: batch size 128.
  config.checkpoint_every_steps = 2000  # ours.
  config.eval_every_steps = 2000  # ours.
  config.log_every_steps = 100  # metrics.jsonl / TensorBoard / progress-bar interval.
  config.eval_batches = 38  # about one pass over the 5M-byte validation split (38 x 128 x 1025).
  config.keep_checkpoints = 3  # newest checkpoints kept on disk.
  config.async_checkpoints = True  # orbax writes in the background while training continues.
  config.num_devices = 0  # use all devices.
  config.label_smoothing = 0.0  # plain next-byte cross-entropy.
  config.feature_redraw_every = 1000  # ours: Performer's default feature_redraw_interval.

  config.data.dataset = "enwik8"  # Sec. 4.4: enwik8, standard 90M/5M/5M split.
  config.data.tokenizer = "bytes"  # Sec. 4.4 is char-level; we model bytes (256 + 4 specials).
  config.data.max_length = 1024  # Sec. 4.4: fixed maximum sequence length 1024.

  config.model = common.model_config(dict(  # roformer_jax.models.ModelConfig fields.
      # models.PRESETS["performer-enwik8"], Sec. 4.4; vocab_size raised to the byte tokenizer's.
      vocab_size=260,  # 256 bytes + pad/bos/eos/mask (data.ByteTokenizer), as in the preset.
      d_model=768,  # Sec. 4.4: 768 dimensions.
      num_layers=12,  # Sec. 4.4: 12 layers.
      num_heads=12,  # Sec. 4.4: 12 heads.
      d_ff=3072,  # 4 x d_model (performer-pytorch ff_mult=4).
      attention="linear",  # Performer: linear attention, RoPE applied as in eq. (19).
      feature_map="favor",  # FAVOR+ positive random features.
      num_features=256,  # ours: near performer-pytorch's default d_head * ln(d_head) = 266.
      type_vocab_size=0,  # no segment embeddings.
      norm="pre",  # pre-LN, as performer-pytorch.
      layer_norm_eps=1e-5,  # PyTorch LayerNorm.
      position="rope",  # Sec. 4.4: RoPE in the Performer; :norope = baseline.
      rope_theta=10000.0,  # Sec. 3.2.2.
      rope_layout="interleaved",  # eq. (34).
      activation="gelu",  # performer-pytorch's FeedForward.
      dropout=0.0,  # ours: performer-pytorch's default ff_dropout = 0.
      attention_dropout=0.0,  # ours: performer-pytorch's default attn_dropout = 0.
      tie_embeddings=True,  # ours: output projection = byte embedding table (performer-pytorch unties).
  ))

  # Sec. 4.4: lr 1e-4. optim's "lm" setup: performer-pytorch's enwik8 example (torch Adam
  # defaults at a constant rate, gradients clipped at norm 0.5).
  config.optim = optim.default_optim_config("lm")  # Sec. 4.4 setup; spelled out below.
  config.optim.optimizer = "adam"  # performer-pytorch example: torch.optim.Adam.
  config.optim.learning_rate = 1e-4  # Sec. 4.4: learning rate 1e-4.
  config.optim.schedule = "constant"  # no schedule in Sec. 4.4 or the example.
  config.optim.b1 = 0.9  # torch Adam default.
  config.optim.b2 = 0.999  # torch Adam default.
  config.optim.eps = 1e-8  # torch Adam default.
  config.optim.weight_decay = 0.0  # none.
  config.optim.grad_clip_norm = 0.5  # performer-pytorch example: clip_grad_norm_(..., 0.5).
  config.optim.grad_accum_steps = 1  # one optimiser update per batch.

  if "norope" in variants:
    config.model.position = "none"  # Fig. 3 (right) baseline: Performer without position encoding.
  if common.SMOKE in variants:
    common.apply_smoke(config)
    config.feature_redraw_every = 1  # the redraw path runs in 2 steps
    config.model.num_features = 16  # FAVOR+ features of the tiny model
    config.optim.learning_rate = 1e-3  # a visible step in 2 updates
    config.data.data_dir = str(SMOKE_DATA_DIR)  # the synthetic enwik8, never the real one's dir
    prepare_synthetic_enwik8(SMOKE_DATA_DIR)
  return config


# --------------------------------------------------------------------------------------
# The smoke variant's data: a tiny synthetic enwik8.
# --------------------------------------------------------------------------------------

# Split sizes of the synthetic enwik8: 12 KiB train, 2 KiB validation, 2 KiB test, 1 KiB chunks.
SYNTHETIC_SPLITS = dict(train_bytes=12_288, validation_bytes=2_048, test_bytes=2_048, chunk_bytes=1_024)


class _SyntheticEnwik8(enwik8.Enwik8, skip_registration=True):
  """The enwik8 builder with tiny splits, written where the real one would be (enwik8/bytes)."""

  name = enwik8.NAME
  BUILDER_CONFIGS = [enwik8.Enwik8Config(name=enwik8.STANDARD.name, description="SYNTHETIC tiny enwik8 "
                                         "for smoke runs (not the real data).", **SYNTHETIC_SPLITS)]


def synthetic_enwik8_bytes() -> bytes:
  """16 KiB of deterministic wiki-like XML, the shape of enwik8's content."""
  words = ("rotary position embedding encodes absolute position with a rotation matrix and the "
           "relative position in the attention inner product").split()
  pages, i = [], 0
  while sum(map(len, pages)) < sum(v for k, v in SYNTHETIC_SPLITS.items() if k != "chunk_bytes"):
    text = " ".join(words[(i + j) % len(words)] for j in range(5 + i % 17))
    pages.append(f"  <page>\n    <title>Page {i}</title>\n    <id>{i}</id>\n    <text>'''{text}''' "
                 f"[[{words[i % len(words)]}]]</text>\n  </page>\n")
    i += 1
  return "".join(pages).encode()


def prepare_synthetic_enwik8(data_dir: str | os.PathLike) -> Path:
  """Writes `<data_dir>/manual/enwik8.zip` and builds it as the enwik8 dataset in `data_dir`.

  Idempotent and safe to call from concurrent processes (file lock); about 0.1 s. Returns the
  dataset's directory. Never point this at the data_dir that holds the real enwik8.
  """
  data_dir = Path(data_dir)
  builder = _SyntheticEnwik8(data_dir=str(data_dir), file_format="array_record")
  with corpus.file_lock(data_dir / ".synthetic_enwik8.lock"):
    if not builder.is_prepared():
      manual = data_dir / "manual"
      manual.mkdir(parents=True, exist_ok=True)
      with zipfile.ZipFile(manual / enwik8.ZIP_NAME, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("enwik8", synthetic_enwik8_bytes())
      builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
  return Path(builder.data_dir)
