"""The offline default corpus: the Python standard library's own ``.py`` files, as bytes.

Every machine that runs this project has it, so the default training config needs no
network. ``build_stdlib_corpus`` turns it into a TFDS ArrayRecord dataset
``python_stdlib_bytes`` on first use (about a second for the ~1,700 files, ~32 MB, of
CPython 3.12) and returns its builder; ``tfds.data_source`` reads it afterwards without
TensorFlow.

- Documents: one per file, found under ``sysconfig.get_paths()["stdlib"]`` in sorted order,
  skipping ``site-packages``/``dist-packages`` (third-party code, not the stdlib). Features:
  ``text`` (the file's raw bytes) and ``path`` (relative to the stdlib root).
- Splits: ``validation`` holds the files whose path hashes (SHA-256) into 2 of 100 buckets,
  ``train`` the rest, so a file's split does not depend on the file list. A capped corpus
  with fewer than 4 such files (the smoke configs' 40 files have 1) tops validation up to 4
  with its lowest-hash other files, never to more than half the corpus: several processes
  each need a validation file of their own (``train.py --num_processes 2`` on ``:smoke``).
- Records come back from ``tfds.data_source`` in TFDS's shuffled on-disk order.
- The builder config name records the Python version and any cap
  (``py312``, ``py312_docs40``, ...), so different caps never share a cache entry.
- Two processes building at once are serialised by a file lock next to the dataset; TFDS
  itself writes into a temporary directory and renames it when complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import os
import sys
import sysconfig
from pathlib import Path

import tensorflow_datasets as tfds
from etils import epath

NAME = "python_stdlib_bytes"
VALIDATION_BUCKETS = 2  # out of 100: ~2% of the files.
MIN_VALIDATION_FILES = 4  # a multi-process run needs a validation file per process.
_SKIP_DIRS = ("site-packages", "dist-packages", "__pycache__")


def default_data_dir() -> Path:
  """``$ROFORMER_JAX_DATA_DIR`` or ``~/.cache/roformer_jax/tfds``."""
  env = os.environ.get("ROFORMER_JAX_DATA_DIR")
  return Path(env).expanduser() if env else Path.home() / ".cache" / "roformer_jax" / "tfds"


def _hash(relative_path: str) -> int:
  return int.from_bytes(hashlib.sha256(relative_path.encode()).digest()[:8], "big")


def split_files(files: list[tuple[str, Path]]) -> dict[str, list[tuple[str, Path]]]:
  """Train/validation by path hash: 2 of 100 buckets validate, and at least
  min(MIN_VALIDATION_FILES, half the files) do (the lowest-hash others top a small corpus up)."""
  validation = [f for f in files if _hash(f[0]) % 100 < VALIDATION_BUCKETS]
  want = min(MIN_VALIDATION_FILES, len(files) // 2)
  if len(validation) < want:  # a small capped corpus: enough files for a few processes.
    others = sorted((f for f in files if f not in validation), key=lambda f: _hash(f[0]))
    validation += others[:want - len(validation)]
  names = {rel for rel, _ in validation}
  return {"train": [f for f in files if f[0] not in names], "validation": validation}


def stdlib_files(max_documents: int = 0, max_bytes: int = 0) -> list[tuple[str, Path]]:
  """The stdlib's ``.py`` files as sorted (relative path, path) pairs, optionally capped.

  A cap keeps a hash-ordered (so spread over the whole library, yet deterministic) subset:
  at most ``max_documents`` files and at most ``max_bytes`` bytes in all (0 = no cap).
  """
  root = Path(sysconfig.get_paths()["stdlib"])
  files = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*.py")
                 if p.is_file() and not any(d in p.relative_to(root).parts for d in _SKIP_DIRS))
  if not files:
    raise FileNotFoundError(f"No .py files under the stdlib directory {root}; this Python "
                            "installation ships no sources, so the offline corpus is empty.")
  if max_documents or max_bytes:
    by_hash = sorted(files, key=lambda f: _hash(f[0]))
    kept: list[tuple[str, Path]] = []
    total = 0
    for rel, path in by_hash:
      size = path.stat().st_size
      if (max_documents and len(kept) >= max_documents) or (max_bytes and total + size > max_bytes):
        continue
      kept.append((rel, path))
      total += size
    files = sorted(kept)
  return files


class PythonStdlibBytesConfig(tfds.core.BuilderConfig):
  """Which stdlib files go in: all, or a capped subset."""

  def __init__(self, *, max_documents: int = 0, max_bytes: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.max_documents = max_documents
    self.max_bytes = max_bytes


def stdlib_config(max_documents: int = 0, max_bytes: int = 0) -> PythonStdlibBytesConfig:
  name = f"py{sys.version_info.major}{sys.version_info.minor}"
  name += f"_docs{max_documents}" if max_documents else ""
  name += f"_bytes{max_bytes}" if max_bytes else ""
  return PythonStdlibBytesConfig(name=name, max_documents=max_documents, max_bytes=max_bytes,
                                 description=f"CPython {sys.version.split()[0]} stdlib sources")


# mypy checks the class keyword against object.__init_subclass__ (the base is Any: tfds has no types).
class LocalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):  # type: ignore[call-arg]  # see above
  """A builder defined in this package (not in TFDS's catalogue)."""

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    # TFDS derives this from the top-level package through importlib.resources, which fails
    # for an editable install imported from outside the repository; name the file directly.
    return epath.Path(inspect.getfile(cls))

  # TFDS prints "Downloading and preparing dataset ..." and "Dataset X downloaded and prepared
  # to ..." on stdout around every build. These builders download nothing (they read files on
  # this machine or draw their data), so those lines would mislead, and on stdout they would mix
  # into a command's output (generate.py's text). One honest line on stderr instead.
  def _log_download_bytes(self) -> None:
    print(f"Building the offline dataset {self.name}/{self.builder_config.name} in {self.data_dir} "
          "(nothing is downloaded) ...", file=sys.stderr, flush=True)

  def _log_download_done(self) -> None:
    print(f"Built {self.name}/{self.builder_config.name}; later runs reuse it.", file=sys.stderr, flush=True)


class PythonStdlibBytes(LocalBuilder):
  """The Python standard library's ``.py`` source files, one document per file, as bytes."""

  VERSION = tfds.core.Version("1.1.0")
  RELEASE_NOTES = {"1.0.0": "One document per stdlib .py file; ~98/2 train/validation by path hash.",
                   "1.1.0": "A small capped corpus keeps at least 4 validation files (at most half)."}
  BUILDER_CONFIGS = [stdlib_config()]

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({"text": tfds.features.Text(), "path": tfds.features.Text()}),
        homepage="https://docs.python.org/3/library/",
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # everything is local.
    files = stdlib_files(self.builder_config.max_documents, self.builder_config.max_bytes)
    return {split: self._generate_examples(f) for split, f in split_files(files).items()}

  def _generate_examples(self, files):
    for rel, path in files:
      yield rel, {"text": path.read_bytes(), "path": rel}


@contextlib.contextmanager
def file_lock(path: Path):
  """An exclusive advisory lock (``flock``) on ``path``, created if missing."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def build_stdlib_corpus(data_dir: str | os.PathLike | None = None, *, max_documents: int = 0,
                        max_bytes: int = 0) -> PythonStdlibBytes:
  """Builds the corpus into ``data_dir`` unless it is there already; returns its builder.

  Args:
    data_dir: TFDS data directory (default ``default_data_dir()``).
    max_documents: keep at most this many files (0 = all).
    max_bytes: keep at most this many bytes of source (0 = all).

  Returns:
    The prepared builder; read it with ``tfds.data_source(f"{NAME}/{builder.builder_config.name}",
    split=..., data_dir=...)`` (or ``builder.as_data_source(split)``).
  """
  data_dir = Path(data_dir) if data_dir else default_data_dir()
  config = stdlib_config(max_documents, max_bytes)
  with file_lock(data_dir / f".{NAME}_{config.name}.lock"):
    registered = {c.name for c in PythonStdlibBytes.BUILDER_CONFIGS}  # TFDS wants those by name.
    builder = PythonStdlibBytes(data_dir=str(data_dir), file_format="array_record",
                                config=config.name if config.name in registered else config)
    if not builder.is_prepared():
      builder.download_and_prepare()
  return builder
