"""An offline parallel corpus: English -> <language> from the system's gettext catalogues.

Every Linux machine with translated software carries compiled message catalogues,
``<locale_dir>/<lang>/LC_MESSAGES/*.mo``, each mapping English user-interface strings to one
language. ``build_gettext_corpus("de")`` reads every catalogue of a language with Python's
``gettext`` module and writes a TFDS ArrayRecord dataset ``gettext_translate/<lang>_<fingerprint>``
(English ``source``, translated ``target``), so translation experiments need no network. On
this project's development image, German gives about 46k distinct English strings from 85
catalogues (coreutils, apt, PostgreSQL, GTK, ...); most other languages work the same way
(``ls /usr/share/locale``).

- Any language code that is a directory under ``locale_dir`` works: ``de``, ``pt_BR``,
  ``sr@latin``. ``locale_dir`` defaults to ``/usr/share/locale``.
- Each catalogue is read with ``gettext.GNUTranslations``, which decodes it with the charset
  named in its header. A catalogue it cannot parse (some old ones claim UTF-8 but hold
  Latin-1) is skipped with a warning rather than decoded by guesswork.
- Entries: the header (empty msgid) and empty translations are dropped. A message context
  (``msgctxt``) is stripped from the English side. A plural entry contributes its singular
  (msgid -> msgstr[0]); the plural forms have no English counterpart in a ``.mo`` file.
- One record per distinct English string. Where catalogues translate it differently, the
  most frequent translation wins (ties: the first catalogue in file-name order), so the
  test set has one reference per source and the same source never carries two targets.
- Splits by SHA-256 of the English string: 2 of 100 buckets ``test``, 2 ``validation``, the
  rest ``train``. A source string therefore never appears in two splits, however many
  catalogues hold it.
- The config name carries a fingerprint of the catalogue files (names, sizes, mtimes), so a
  system update that changes the catalogues builds a new dataset instead of reusing a stale one.

The strings are software messages, short (median about 30 characters) and full of
placeholders (``%s``, ``{name}``, ``%1$d``): a small, domain-specific test of translation,
not WMT.
"""

from __future__ import annotations

import collections
import gettext
import hashlib
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from roformer_jax.training.data.corpus import LocalBuilder, default_data_dir, file_lock

NAME = "gettext_translate"
DEFAULT_LOCALE_DIR = "/usr/share/locale"
TEST_BUCKETS = 2  # out of 100
VALIDATION_BUCKETS = 2  # out of 100, after the test buckets
_CONTEXT_SEPARATOR = "\x04"  # msgctxt EOT msgid, how .mo files store a message context.

log = logging.getLogger(__name__)


def locale_dir_or_default(locale_dir: str | os.PathLike | None) -> Path:
  return Path(locale_dir or DEFAULT_LOCALE_DIR).expanduser()


def available_languages(locale_dir: str | os.PathLike | None = None) -> list[str]:
  """Language codes under ``locale_dir`` that hold at least one ``LC_MESSAGES/*.mo`` file."""
  root = locale_dir_or_default(locale_dir)
  if not root.is_dir():
    return []
  return sorted(p.name for p in root.iterdir() if any((p / "LC_MESSAGES").glob("*.mo")))


def catalog_files(lang: str, locale_dir: str | os.PathLike | None = None) -> list[Path]:
  """The ``.mo`` files of ``lang``, sorted by name; a clear error if there are none."""
  if not lang or "/" in lang or lang in (".", ".."):
    raise ValueError(f"language code {lang!r} is not a locale directory name (e.g. 'de', 'pt_BR').")
  root = locale_dir_or_default(locale_dir)
  files = sorted((root / lang / "LC_MESSAGES").glob("*.mo"))
  if not files:
    langs = available_languages(root)
    shown = ", ".join(langs[:40]) + (", ..." if len(langs) > 40 else "")
    raise FileNotFoundError(
        f"No gettext catalogues for language {lang!r}: {root / lang / 'LC_MESSAGES'} holds no .mo files. "
        + (f"Languages with catalogues under {root}: {shown}." if langs else
           f"{root} has no catalogues at all; pass data.locale_dir pointing at a locale directory "
           "(for example one with <lang>/LC_MESSAGES/*.mo from a system with translated packages)."))
  return files


def fingerprint(files: list[Path]) -> str:
  """Eight hex digits over the files' names, sizes and modification times."""
  h = hashlib.sha256()
  for f in files:
    st = f.stat()
    h.update(f"{f.name}\0{st.st_size}\0{int(st.st_mtime)}\n".encode())
  return h.hexdigest()[:8]


def read_catalog(path: Path) -> Iterator[tuple[str, str]]:
  """(English, translation) pairs of one ``.mo`` file, read with ``gettext``.

  Raises whatever ``gettext.GNUTranslations`` raises for a file it cannot parse or decode.
  """
  with open(path, "rb") as f:
    # The parsed msgid -> msgstr table; private, so typeshed does not declare it.
    catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]  # see above
  for key, target in catalog.items():
    if isinstance(key, tuple):  # plural entry: (msgid, form index)
      key, form = key
      if form != 0:
        continue
    source = key.split(_CONTEXT_SEPARATOR, 1)[-1]
    if source and target and source.strip() and target.strip():
      yield source, target


def collect_pairs(lang: str, locale_dir: str | os.PathLike | None = None
                  ) -> tuple[list[dict[str, str]], list[str]]:
  """One record per distinct English string, with its most frequent translation.

  Returns:
    (records, skipped): records are dicts with ``source``, ``target``, ``domain`` (the first
    catalogue, by file name, that gives this translation) and ``num_catalogs``; skipped names
    the catalogues that could not be read.
  """
  counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
  first_domain: dict[tuple[str, str], str] = {}
  order: dict[tuple[str, str], int] = {}
  skipped = []
  for path in catalog_files(lang, locale_dir):
    try:
      pairs = list(read_catalog(path))
    except (OSError, UnicodeDecodeError, LookupError, ValueError) as e:
      log.warning("skipping gettext catalogue %s: %s", path, e)
      skipped.append(f"{path.name}: {type(e).__name__}")
      continue
    for source, target in pairs:
      counts[source][target] += 1
      first_domain.setdefault((source, target), path.stem)
      order.setdefault((source, target), len(order))
  records = []
  for source in sorted(counts):
    # Most frequent; ties go to the translation seen first (catalogues in file-name order).
    target = min(counts[source], key=lambda t: (-counts[source][t], order[(source, t)]))
    records.append({"source": source, "target": target, "domain": first_domain[(source, target)],
                    "num_catalogs": sum(counts[source].values())})
  return records, skipped


def split_of(source: str) -> str:
  """``test`` / ``validation`` / ``train`` by SHA-256 of the English string."""
  bucket = int.from_bytes(hashlib.sha256(source.encode("utf-8")).digest()[:8], "big") % 100
  if bucket < TEST_BUCKETS:
    return "test"
  return "validation" if bucket < TEST_BUCKETS + VALIDATION_BUCKETS else "train"


def config_name(lang: str, files: list[Path]) -> str:
  """TFDS config name: the language code made identifier-safe, plus the files' fingerprint."""
  return f"{re.sub(r'[^0-9A-Za-z]', '_', lang)}_{fingerprint(files)}"


class GettextConfig(tfds.core.BuilderConfig):
  """One language of one locale directory."""

  def __init__(self, *, lang: str, locale_dir: str, **kwargs):
    super().__init__(**kwargs)
    self.lang = lang
    self.locale_dir = locale_dir


class GettextTranslate(LocalBuilder):
  """English -> one language, from the system's gettext message catalogues."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "One record per distinct English msgid; 96/2/2 split by source hash."}
  BUILDER_CONFIGS: list = []  # configs are made per language and machine, see gettext_config().

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({
            "source": tfds.features.Text(), "target": tfds.features.Text(),
            "domain": tfds.features.Text(), "num_catalogs": np.int32}),
        homepage="https://www.gnu.org/software/gettext/manual/html_node/MO-Files.html",
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # everything is local.
    cfg = self.builder_config
    records, skipped = collect_pairs(cfg.lang, cfg.locale_dir)
    if skipped:
      log.warning("%d %s catalogue(s) skipped: %s", len(skipped), cfg.lang, "; ".join(skipped))
    by_split: dict[str, list[dict]] = {"train": [], "validation": [], "test": []}
    for r in records:
      by_split[split_of(r["source"])].append(r)
    empty = [s for s, rs in by_split.items() if not rs]
    if empty:
      raise ValueError(f"the {cfg.lang!r} catalogues under {cfg.locale_dir} give {len(records)} distinct "
                       f"strings, too few to fill the {empty} split(s); choose a language with more "
                       "translated catalogues.")
    return {split: self._generate_examples(rs) for split, rs in by_split.items()}

  def _generate_examples(self, records):
    for r in records:
      yield hashlib.sha256(r["source"].encode("utf-8")).hexdigest(), r


def gettext_config(lang: str, locale_dir: str | os.PathLike | None = None) -> GettextConfig:
  root = locale_dir_or_default(locale_dir)
  files = catalog_files(lang, root)
  return GettextConfig(name=config_name(lang, files), lang=lang, locale_dir=str(root),
                       description=f"English -> {lang} from {len(files)} catalogues in {root}")


def build_gettext_corpus(lang: str, data_dir: str | os.PathLike | None = None, *,
                         locale_dir: str | os.PathLike | None = None) -> GettextTranslate:
  """Builds ``gettext_translate/<lang>_<fingerprint>`` unless present; returns its builder.

  Read it with ``builder.as_data_source(split)`` or ``tfds.data_source(f"{NAME}/{builder.builder_config.name}", ...)``.
  """
  data_dir = Path(data_dir) if data_dir else default_data_dir()
  config = gettext_config(lang, locale_dir)
  with file_lock(data_dir / f".{NAME}_{config.name}.lock"):
    builder = GettextTranslate(data_dir=str(data_dir), file_format="array_record", config=config)
    if not builder.is_prepared():
      builder.download_and_prepare()
  return builder
