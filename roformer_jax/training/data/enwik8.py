"""enwik8 as a TFDS ArrayRecord dataset, built from a user-supplied ``enwik8.zip``.

enwik8 (the first 10^8 bytes of an English Wikipedia XML dump, from the Hutter Prize) is not in
the TFDS catalogue. Download ``http://mattmahoney.net/dc/enwik8.zip`` yourself, put it in a
directory and run

  python -m roformer_jax.training.data.prepare dataset enwik8 --manual_dir <that directory>

which needs no network. The standard split is used: the first 90M bytes train, the next 5M
validate, the last 5M test. Each split is stored as consecutive fixed-size chunks of raw bytes
(``text``), with the chunk's number within its split (``index``) so that an evaluation can put
them back in order (records come back from ``tfds.data_source`` shuffled).
"""

from __future__ import annotations

import zipfile

import numpy as np
import tensorflow_datasets as tfds

from roformer_jax.training.data.corpus import LocalBuilder

NAME = "enwik8"
ZIP_NAME = "enwik8.zip"
MANUAL_INSTRUCTIONS = (
    f"Download http://mattmahoney.net/dc/enwik8.zip and place {ZIP_NAME} (unextracted) in the "
    "manual directory, e.g. `python -m roformer_jax.training.data.prepare dataset enwik8 --manual_dir DIR`.")


class Enwik8Config(tfds.core.BuilderConfig):
  """Split sizes in bytes and the chunk size of one example."""

  def __init__(self, *, train_bytes: int, validation_bytes: int, test_bytes: int,
               chunk_bytes: int, **kwargs):
    super().__init__(**kwargs)
    self.train_bytes, self.validation_bytes, self.test_bytes = train_bytes, validation_bytes, test_bytes
    self.chunk_bytes = chunk_bytes


STANDARD = Enwik8Config(name="bytes", train_bytes=90_000_000, validation_bytes=5_000_000,
                        test_bytes=5_000_000, chunk_bytes=65_536,
                        description="Standard 90M/5M/5M split of the first 100M bytes.")


class Enwik8(LocalBuilder):
  """enwik8: 90M/5M/5M bytes of Wikipedia XML, as chunks of raw bytes."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Standard split, 64 KiB chunks."}
  BUILDER_CONFIGS = [STANDARD]
  MANUAL_DOWNLOAD_INSTRUCTIONS = MANUAL_INSTRUCTIONS

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({"text": tfds.features.Text(), "index": np.int64}),
        homepage="http://mattmahoney.net/dc/textdata.html",
    )

  def _split_generators(self, dl_manager):
    path = dl_manager.manual_dir / ZIP_NAME
    if not path.exists():
      raise FileNotFoundError(f"{path} does not exist. {MANUAL_INSTRUCTIONS}")
    cfg = self.builder_config
    with zipfile.ZipFile(path) as z:
      member = "enwik8" if "enwik8" in z.namelist() else z.namelist()[0]
      data = z.read(member)
    total = cfg.train_bytes + cfg.validation_bytes + cfg.test_bytes
    if len(data) < total:
      raise ValueError(f"{path} holds {len(data)} bytes; the {cfg.name!r} split needs {total} "
                       "(the real enwik8 has 100,000,000).")
    bounds = np.cumsum([0, cfg.train_bytes, cfg.validation_bytes, cfg.test_bytes])
    return {split: self._generate_examples(data[bounds[i]:bounds[i + 1]])
            for i, split in enumerate(("train", "validation", "test"))}

  def _generate_examples(self, data: bytes):
    step = self.builder_config.chunk_bytes
    for i, start in enumerate(range(0, len(data), step)):
      yield i, {"text": data[start:start + step], "index": i}
