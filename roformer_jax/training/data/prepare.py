"""Prepare a dataset (ArrayRecord, readable without TensorFlow) or train a SentencePiece model.

  python -m roformer_jax.training.data.prepare dataset glue/mrpc [--data_dir DIR]
  python -m roformer_jax.training.data.prepare dataset enwik8 --manual_dir DIR_WITH_ENWIK8_ZIP
  python -m roformer_jax.training.data.prepare dataset shapes2d [--data_dir DIR]
  python -m roformer_jax.training.data.prepare dataset imagenet2012 --manual_dir DIR_WITH_THE_ILSVRC2012_TARS
  python -m roformer_jax.training.data.prepare dataset gettext_translate/de [--locale_dir /usr/share/locale]
  python -m roformer_jax.training.data.prepare tokenizer wmt14_translate/de-en --vocab_size 37000 \
      [--model_type bpe] [--character_coverage 1.0] [--output PATH] [--data_dir DIR]

``dataset`` downloads and prepares a TFDS catalogue dataset (network needed; ``wikipedia`` also
needs ``pip install apache-beam mwparserfromhell mwxml``, ``cifar10`` and ``imagenet2012``
``pip install tensorflow``), or builds enwik8 from the zip, ImageNet from its tars, or the
offline sets (the stdlib corpus, shapes2d). ``tokenizer`` trains on the train split of a
prepared dataset (for a translation dataset on both languages: the joint vocabulary of Sec.
4.1) and writes the ``.model`` to ``--output`` or to the path a config with the same
dataset/vocab_size/model_type/coverage looks for.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from roformer_jax.training.data import datasets, pipeline
from roformer_jax.training.data.config import default_data_config
from roformer_jax.training.data.tokenizers import SentencePieceTokenizer, train_sentencepiece


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m roformer_jax.training.data.prepare", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = parser.add_subparsers(dest="command", required=True)
  ds = sub.add_parser("dataset", help="prepare a dataset as ArrayRecord")
  ds.add_argument("name", help=f"one of {sorted(datasets.REGISTRY)} or gettext_translate/<lang>")
  ds.add_argument("--data_dir", default="", help="TFDS data dir (default: the project cache)")
  ds.add_argument("--manual_dir", default="", help="directory holding manual downloads (enwik8.zip; ImageNet's tars)")
  ds.add_argument("--locale_dir", default="", help="gettext_translate: the locale directory (default /usr/share/locale)")
  tok = sub.add_parser("tokenizer", help="train a SentencePiece model on a prepared dataset")
  tok.add_argument("name", help="dataset whose train split supplies the text")
  tok.add_argument("--data_dir", default="")
  tok.add_argument("--vocab_size", type=int, default=37000)
  tok.add_argument("--model_type", default="bpe", choices=("bpe", "unigram"))
  tok.add_argument("--max_sentences", type=int, default=2_000_000)
  tok.add_argument("--character_coverage", type=float, default=1.0,
                   help="fraction of the characters that get a piece of their own (the rest: <unk>)")
  tok.add_argument("--output", default="", help="the .model path (default: where configs look)")
  args = parser.parse_args(argv)
  from roformer_jax.training import launch  # the known noise (TFDS's "Variant folder ... has no dataset_info.json")

  logging.getLogger("absl").addFilter(launch.not_noise)

  spec = datasets.get_spec(args.name)
  if args.command == "dataset":
    try:
      path = datasets.prepare(spec, data_dir=args.data_dir, manual_dir=args.manual_dir or None,
                              locale_dir=args.locale_dir or None)
    except datasets.NoNetworkError as e:
      print(f"{parser.prog}: error: {e}", file=sys.stderr)
      return 2
    print(f"prepared {spec.tfds_name} in {path}")
    return 0
  cfg = default_data_config()
  cfg.dataset, cfg.data_dir, cfg.tokenizer = args.name, args.data_dir, "sentencepiece"
  cfg.vocab_size, cfg.tokenizer_model_type, cfg.tokenizer_path = args.vocab_size, args.model_type, args.output
  cfg.tokenizer_max_sentences, cfg.tokenizer_character_coverage = args.max_sentences, args.character_coverage
  path = train_sentencepiece(pipeline.training_sentences(cfg), pipeline.tokenizer_path(cfg),
                             vocab_size=args.vocab_size, model_type=args.model_type,
                             character_coverage=args.character_coverage, max_sentences=args.max_sentences)
  print(f"wrote {SentencePieceTokenizer(path)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
