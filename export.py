"""Export a trained run as a HuggingFace transformers RoFormer checkpoint.

  python export.py --workdir DIR --out OUT [--step N | --average_last N] [--overwrite]

OUT receives config.json + model.safetensors, which
`transformers.RoFormerForMaskedLM.from_pretrained(OUT)` (task mlm) or
`RoFormerForSequenceClassification` (task classification) opens, plus roformer_jax_export.json
(the workdir, the step, the tokenizer) and, for a SentencePiece run, its tokenizer.model.
Before reporting success the export is loaded back and its logits compared with the run's.

The run's own config is used (DIR/config.json, as eval.py). A config HF RoFormer cannot represent
(pre-LN, the half RoPE layout, another theta, context scaling, no token types, a causal LM, ...)
is refused before anything is read, naming each key; docs/getting_started.md lists the shipped
configs that export. The newest checkpoint that verifies is used, read-only (a trainer may be
running); --step N picks one, --average_last N averages the last N as eval.py does.
"""

import os

from absl import flags, logging
from ml_collections import config_flags

from roformer_jax.training import launch

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/<name>.py file (default: the run's "
                                          "own, DIR/config.json, via configs/workdir.py:DIR).")
_WORKDIR = flags.DEFINE_string("workdir", None, "The training run's workdir.")
_OUT = flags.DEFINE_string("out", None, "The directory to write the HF checkpoint to (new or empty).")
_STEP = flags.DEFINE_integer("step", None, "Export this checkpoint step (default: the newest that verifies).")
_AVERAGE_LAST = flags.DEFINE_integer("average_last", 0, "Export the mean of the last N checkpoints' parameters.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace what --out holds (only once the new export is whole).")
flags.mark_flags_as_required(["workdir", "out"])


def main(argv):
  del argv
  launch.initialize()
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.ERROR)  # orbax's read-only restore notices, as generate.py
  from roformer_jax.evaluation import export

  export.check(_CONFIG.value)  # before any checkpoint is read
  info = export.export(_CONFIG.value, _WORKDIR.value, _OUT.value, step=_STEP.value,
                       average_last=_AVERAGE_LAST.value, overwrite=_OVERWRITE.value)
  print(export.summary(info))


if __name__ == "__main__":
  launch.run(main, saved_config=os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "workdir.py"))
