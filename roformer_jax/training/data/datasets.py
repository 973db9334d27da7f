"""The dataset registry: what each supported dataset holds and how to open it.

=========================  ===============  ==========================================
name                       kind             source
=========================  ===============  ==========================================
python_stdlib_bytes        text             built here on first use (offline default)
enwik8                     text             built here from a user-supplied enwik8.zip
wikipedia                  text             TFDS ``wikipedia/20230601.en`` (Sec. 4.2)
wmt14_translate/de-en      translation      TFDS; English source, German target (4.1)
gettext_translate/<lang>   translation      built here on first use from the system's gettext
                                            catalogues (offline; any language code, e.g. de)
glue/{mrpc,sst2,qnli,      classification   TFDS (Sec. 4.3); stsb is a regression,
stsb,qqp,mnli}                              mnli validates on validation_matched
shapes2d                   image            built here on first use (offline): scene
                                            parameters, rendered at any resolution
                                            (``shapes.py``; issue 26)
cifar10                    image            TFDS; 32 x 32 pixels, 10 classes
imagenet2012               image            TFDS from the user-supplied ILSVRC2012 tars
=========================  ===============  ==========================================

BookCorpus, the other half of BERT's pre-training data (Sec. 4.2), is not in TFDS (its
redistribution was withdrawn), so only Wikipedia is offered for MLM.

Catalogue datasets are never downloaded at run time: ``open_source`` reads a copy prepared in
ArrayRecord format and otherwise raises ``DatasetNotPreparedError`` naming the command that
prepares it (``python -m roformer_jax.training.data.prepare dataset NAME``, which needs network, and for
``wikipedia`` Apache Beam). Splits: ``train``, ``validation``, ``test`` map to each dataset's
own names; any other TFDS split string (``validation_mismatched``, ``train[:1%]``) is passed
through.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import tensorflow_datasets as tfds

from roformer_jax.training.data import corpus, enwik8, gettext_catalogs, shapes

KINDS = ("text", "translation", "classification", "image")
NOT_IN_TFDS = {
    "bookcorpus": "BookCorpus is not in TFDS (its redistribution was withdrawn); pre-train MLM on "
                  "'wikipedia' alone, or add your own TFDS builder for a local copy.",
}


class DatasetNotPreparedError(FileNotFoundError):
  """A catalogue dataset is not in the data directory in ArrayRecord format."""


class NoNetworkError(ConnectionError):
  """Preparing a dataset needs a download, and this machine has no network to make it."""


# Without any network, TFDS retries each URL of a download with backoff: minutes of warnings
# before it fails. It tries its GCS mirror first (DownloadConfig.try_download_gcs), so a download
# needs at least that host; `prepare` checks it can be reached and otherwise fails at once.
NETWORK_PROBE = ("storage.googleapis.com", 443)
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")  # requests goes through these instead


def check_network(spec: DatasetSpec, data_dir: Path, timeout: float = 5.0) -> None:
  """Raises `NoNetworkError` (naming the cause and what to do) when the download `spec` needs
  cannot start: no route to TFDS's mirror host. Behind a proxy (HTTPS_PROXY ...) TFDS's requests
  use it, and nothing is checked here."""
  if any(os.environ.get(v) for v in PROXY_VARIABLES):
    return
  host, port = NETWORK_PROBE
  try:
    with socket.create_connection((host, port), timeout=timeout):
      pass
  except OSError as e:
    raise NoNetworkError(
        f"preparing {spec.tfds_name!r} downloads it, and this machine cannot reach {host}:{port}, where TFDS "
        f"looks first ({e}). Run the same command on a machine with network, then copy its "
        f"{spec.tfds_name.split('/')[0]}/ directory into {data_dir} here (docs/data.md).") from e


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """One dataset of the registry.

  Attributes:
    name: registry key (what ``data.dataset`` names).
    tfds_name: TFDS ``name/config``.
    kind: "text" (one document per record), "translation" (source/target pair),
      "classification" (one or two sentences and a label) or "image" (an image, or the
      parameters of a scene to render, and a label).
    fields: text fields: (text,) | (source, target) | (sentence,) or (sentence1, sentence2);
      image: (image,), the uint8 [H, W, C] pixels, or the scene fields that ``render`` reads.
    label: label field (classification and image).
    num_classes: number of labels; 1 means regression (float32 label).
    splits: our split names -> TFDS split names.
    builder_module: module to import so that TFDS knows the builder.
    add_bos_eos: wrap each document in BOS ... EOS when packing (False for a byte stream cut
      into chunks, such as enwik8, whose chunks are not documents).
    manual: needs manually downloaded files (enwik8.zip; the ImageNet tars), which
      ``manual_files`` names and ``manual_instructions`` says where to get.
    manual_files: what the ``--manual_dir`` of the prepare command must hold.
    manual_instructions: where to get them, for the not-prepared message.
    prepare_needs: what preparing needs besides network, for the not-prepared message.
    build: a dataset built here, offline, on first use: ``build(data_dir)`` builds it unless it
      is there already and returns its TFDS builder (read with ``as_data_source``).
    render: image only: ``render(record, resolution, channels)`` -> float32[R, R, channels] in
      [0, 1] draws a record that holds a scene (shapes2d); None: ``fields[0]`` holds pixels,
      which the pipeline resizes and crops (and, when training, augments).
    pixel_mean, pixel_std: image only: per-channel (RGB) statistics of the [0, 1] pixels; the
      pipeline feeds (x - mean) / std.
    min_image_size: image only: the smallest ``data.image_size`` it can give (shapes2d: 8).
    eval_crop: image only: evaluation resizes the shorter side to R / eval_crop and takes the
      central R x R (ImageNet's 0.875; 1.0 = the whole shorter side).
  """

  name: str
  tfds_name: str
  kind: str
  fields: tuple[str, ...]
  label: str | None = None
  num_classes: int = 0
  splits: Mapping[str, str] = dataclasses.field(
      default_factory=lambda: {"train": "train", "validation": "validation", "test": "test"})
  builder_module: str | None = None
  add_bos_eos: bool = True
  manual: bool = False
  manual_files: str = ""
  manual_instructions: str = ""
  prepare_needs: str = ""
  build: Callable[[Path], Any] | None = None
  render: Callable[..., Any] | None = None
  pixel_mean: tuple[float, ...] = ()
  pixel_std: tuple[float, ...] = ()
  min_image_size: int = 1
  eval_crop: float = 1.0

  def tfds_split(self, split: str) -> str:
    return self.splits.get(split, split)


def _glue(task: str, fields: tuple[str, ...], num_classes: int, **kwargs) -> DatasetSpec:
  return DatasetSpec(name=f"glue/{task}", tfds_name=f"glue/{task}", kind="classification",
                     fields=fields, label="label", num_classes=num_classes,
                     builder_module="tensorflow_datasets.text.glue", **kwargs)


def _image(name: str, tfds_name: str, num_classes: int, **kwargs) -> DatasetSpec:
  return DatasetSpec(name=name, tfds_name=tfds_name, kind="image", label="label", num_classes=num_classes,
                     **{"fields": ("image",), **kwargs})


_MNLI_SPLITS = {"train": "train", "validation": "validation_matched", "test": "test_matched"}
_IMAGENET_FILES = "ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar"
_IMAGENET_INSTRUCTIONS = (
    f"download {_IMAGENET_FILES} from https://image-net.org (an account is needed) and place them, "
    "unextracted, in the manual directory; preparing also needs `pip install tensorflow` (TFDS's "
    "imagenet2012 builder reads the tars with it; reading the prepared set does not)")
_WIKIPEDIA = "wikipedia/20230601.en"  # the newest English dump in TFDS 4.9.

REGISTRY: dict[str, DatasetSpec] = {s.name: s for s in [
    DatasetSpec(name=corpus.NAME, tfds_name=corpus.NAME, kind="text", fields=("text",),
                splits={"train": "train", "validation": "validation", "test": "validation"}),
    DatasetSpec(name=enwik8.NAME, tfds_name=f"{enwik8.NAME}/{enwik8.STANDARD.name}", kind="text",
                fields=("text",), builder_module="roformer_jax.training.data.enwik8", add_bos_eos=False,
                manual=True, manual_files=enwik8.ZIP_NAME, manual_instructions=enwik8.MANUAL_INSTRUCTIONS),
    DatasetSpec(name="wikipedia", tfds_name=_WIKIPEDIA, kind="text", fields=("text",),
                splits={"train": "train[:99%]", "validation": "train[99%:]", "test": "train[99%:]"},
                builder_module="tensorflow_datasets.text.wikipedia",
                prepare_needs="`pip install apache-beam mwparserfromhell mwxml` (a Beam build; hours)"),
    DatasetSpec(name="wmt14_translate/de-en", tfds_name="wmt14_translate/de-en", kind="translation",
                fields=("en", "de"), builder_module="tensorflow_datasets.translate.wmt14"),
    _glue("mrpc", ("sentence1", "sentence2"), 2),
    _glue("sst2", ("sentence",), 2),
    _glue("qnli", ("question", "sentence"), 2),
    _glue("stsb", ("sentence1", "sentence2"), 1),
    _glue("qqp", ("question1", "question2"), 2),
    _glue("mnli", ("premise", "hypothesis"), 3, splits=_MNLI_SPLITS),
    _image(shapes.NAME, f"{shapes.NAME}/{shapes.DEFAULT.name}", shapes.NUM_CLASSES, fields=shapes.SCENE_FIELDS,
           build=shapes.build_shapes2d, render=shapes.render, pixel_mean=shapes.PIXEL_MEAN,
           pixel_std=shapes.PIXEL_STD, min_image_size=shapes.MIN_RESOLUTION),
    # CIFAR-10 has no validation split: validation is the test set, as in ViT papers.
    _image("cifar10", "cifar10", 10, builder_module="tensorflow_datasets.image_classification.cifar",
           splits={"train": "train", "validation": "test", "test": "test"},
           prepare_needs="`pip install tensorflow` (TFDS's cifar10 builder reads and encodes with it; "
                         "reading the prepared set does not)",
           pixel_mean=(0.4914, 0.4822, 0.4465), pixel_std=(0.2470, 0.2435, 0.2616)),
    # ImageNet's test labels are withheld: test is the validation set (the 50,000 images that
    # RoPE-ViT and DeiT report on).
    _image("imagenet2012", "imagenet2012", 1000,
           builder_module="tensorflow_datasets.datasets.imagenet2012.imagenet2012_dataset_builder",
           splits={"train": "train", "validation": "validation", "test": "validation"},
           manual=True, manual_files=_IMAGENET_FILES, manual_instructions=_IMAGENET_INSTRUCTIONS,
           pixel_mean=(0.485, 0.456, 0.406), pixel_std=(0.229, 0.224, 0.225), eval_crop=0.875),
]}


def gettext_spec(name: str) -> DatasetSpec:
  """The spec of ``gettext_translate/<lang>``: English ``source``, translated ``target``."""
  lang = name.split("/", 1)[1] if "/" in name else ""
  if not lang:
    raise ValueError(f"Dataset {name!r} names no language; use {gettext_catalogs.NAME}/<lang>, e.g. "
                     f"{gettext_catalogs.NAME}/de (a directory under /usr/share/locale).")
  return DatasetSpec(name=name, tfds_name=name, kind="translation", fields=("source", "target"))


def get_spec(name: str) -> DatasetSpec:
  """The registry entry for ``name``; a clear ``ValueError`` for anything else."""
  if name in REGISTRY:
    return REGISTRY[name]
  if name.split("/")[0] == gettext_catalogs.NAME:
    return gettext_spec(name)
  if name.split("/")[0] in NOT_IN_TFDS:
    raise ValueError(NOT_IN_TFDS[name.split("/")[0]])
  raise ValueError(f"Unknown dataset {name!r}; expected one of {sorted(REGISTRY)} or "
                   f"{gettext_catalogs.NAME}/<lang>.")


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path:
  """``data_dir`` if given, else ``$ROFORMER_JAX_DATA_DIR`` or ``~/.cache/roformer_jax/tfds``."""
  return Path(data_dir).expanduser() if data_dir else corpus.default_data_dir()


def prepare_command(spec: DatasetSpec, data_dir: str | os.PathLike | None) -> str:
  cmd = f"python -m roformer_jax.training.data.prepare dataset {spec.name} --data_dir {resolve_data_dir(data_dir)}"
  if spec.manual:
    return cmd + f" --manual_dir <directory with {spec.manual_files}>  (offline; {spec.manual_instructions})"
  if spec.build:
    return cmd + "  (offline)"
  extra = f" plus {spec.prepare_needs}" if spec.prepare_needs else ""
  return cmd + f"  (on a machine with network{extra})"


def _import_builder(spec: DatasetSpec) -> None:
  if spec.builder_module:
    importlib.import_module(spec.builder_module)  # registers the builder with TFDS.


def open_source(spec: DatasetSpec, split: str, *, data_dir: str | os.PathLike | None = None,
                max_documents: int = 0, max_bytes: int = 0,
                locale_dir: str | os.PathLike | None = None) -> Sequence[Mapping[str, Any]]:
  """A random-access TFDS data source for one split (``len`` and ``[i]`` -> feature dict).

  The stdlib corpus is built first if needed (``max_documents`` / ``max_bytes`` cap it), and
  so is a gettext corpus (from the catalogues under ``locale_dir``) and any dataset with a
  ``build`` (shapes2d). Text features come back as ``bytes`` (``str`` under
  ``tfds.testing.mock_data``).

  Raises:
    DatasetNotPreparedError: the dataset is not prepared in ``data_dir`` as ArrayRecord.
  """
  data_dir = resolve_data_dir(data_dir)
  tfds_split = spec.tfds_split(split)
  if spec.name == corpus.NAME:
    builder = corpus.build_stdlib_corpus(data_dir, max_documents=max_documents, max_bytes=max_bytes)
    return tfds.data_source(f"{corpus.NAME}/{builder.builder_config.name}", split=tfds_split,
                            data_dir=str(data_dir), download=False)
  if spec.name.startswith(gettext_catalogs.NAME + "/"):
    lang = spec.name.split("/", 1)[1]
    return gettext_catalogs.build_gettext_corpus(lang, data_dir, locale_dir=locale_dir).as_data_source(tfds_split)
  if spec.build:
    return spec.build(data_dir).as_data_source(tfds_split)
  _import_builder(spec)
  try:
    return tfds.data_source(spec.tfds_name, split=tfds_split, data_dir=str(data_dir), download=False)
  except Exception as e:  # TFDS raises several types here; all mean "not usable as prepared".
    raise _not_prepared(spec, tfds_split, data_dir, e) from e


def _not_prepared(spec: DatasetSpec, tfds_split: str, data_dir: Path, cause: Exception) -> Exception:
  try:
    prepared = tfds.builder(spec.tfds_name, data_dir=str(data_dir)).is_prepared()
  except Exception:  # pylint: disable=broad-except
    prepared = False
  if not prepared:
    why = f"Dataset {spec.tfds_name!r} is not prepared in {data_dir}."
  elif isinstance(cause, NotImplementedError):
    why = (f"Dataset {spec.tfds_name!r} in {data_dir} was prepared as TFRecord, which Grain cannot "
           "read without TensorFlow; rebuild it as ArrayRecord.")
  else:
    why = f"Dataset {spec.tfds_name!r} in {data_dir} could not be opened (split {tfds_split!r}): {cause}"
  return DatasetNotPreparedError(f"{why} Prepare it with\n  {prepare_command(spec, data_dir)}")


def prepare(spec: DatasetSpec, *, data_dir: str | os.PathLike | None = None,
            manual_dir: str | os.PathLike | None = None,
            locale_dir: str | os.PathLike | None = None) -> Path:
  """Downloads (or reads from ``manual_dir``) and prepares a dataset as ArrayRecord; returns its dir."""
  data_dir = resolve_data_dir(data_dir)
  if spec.name == corpus.NAME:
    return Path(corpus.build_stdlib_corpus(data_dir).data_dir)
  if spec.name.startswith(gettext_catalogs.NAME + "/"):
    lang = spec.name.split("/", 1)[1]
    return Path(gettext_catalogs.build_gettext_corpus(lang, data_dir, locale_dir=locale_dir).data_dir)
  if spec.build:
    return Path(spec.build(data_dir).data_dir)
  _import_builder(spec)
  builder = tfds.builder(spec.tfds_name, data_dir=str(data_dir), file_format="array_record")
  if not builder.is_prepared() and not spec.manual:
    check_network(spec, data_dir)
  config = tfds.download.DownloadConfig(manual_dir=str(manual_dir) if manual_dir else None)
  builder.download_and_prepare(download_config=config)
  return Path(builder.data_dir)
