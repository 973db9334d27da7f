"""The smoke config the tests train, and the trained smoke runs they share (conftest.py's
`smoke_runs` fixture)."""

import os
import pathlib
import shutil

from configs import common, default

DATA_DIR = os.environ.get("ROFORMER_TEST_DATA_DIR", "")


def smoke(task: str | None = None, **overrides):
  """configs/default.py's smoke variant on the tests' data dir; `task` and dotted `overrides`
  ({"model.d_model": 48, "total_steps": 3}) set as --config.<key>= would."""
  config = default.get_config("smoke")
  config.data.data_dir = DATA_DIR
  if task is not None:
    config.task = task
  return common.set_dotted(config, overrides)


# The MLM smoke runs are BERT-like encoders (post-LN, two token types) as configs/bert_base_mlm.py
# is: a model HF RoFormer can hold, so the one shared run serves generate.py, init_from's
# fine-tuning and export.py alike.
MLM = {"model.norm": "post", "model.type_vocab_size": 2}


def smoke_mlm(**overrides):
  """smoke("mlm") as a BERT-like encoder (MLM), plus dotted `overrides`."""
  return smoke("mlm", **MLM, **overrides)


def vit_config(position: str, data_dir: str | os.PathLike = ""):
  """configs/vit_shapes.py's smoke variant (16 px, a 4 x 4 grid) with position encoding `position`."""
  from configs import vit_shapes
  config = vit_shapes.get_config("smoke")
  config.samples_per_eval = 1  # one image sample (a forward pass): its class names are checked
  config.vit.position = position
  config.data.data_dir = str(data_dir)
  return config


def s2s_config(root: pathlib.Path):
  """configs/gettext_translate.py's smoke variant on the catalogues in root/locale and the data
  dir root/data (tests.gettext_fixture.make_locale_dir writes the catalogues)."""
  from configs import gettext_translate
  config = gettext_translate.get_config("smoke")
  config.data.locale_dir, config.data.data_dir = str(root / "locale"), str(root / "data")
  return config


# What each shared run trains. A test that needs another config trains its own.
LM_STEPS = 3  # checkpoints 1, 2, 3: enough to average the last 3 and to pick an older step


class SmokeRuns:
  """Smoke runs trained once per test process and handed out as copies.

  `copy(kind, dest)` trains the run the first time it is asked for, then copies it
  (shutil.copytree) to dest and returns the copy, so a test that writes into its workdir
  (eval.py's results, a resumed run) never changes what the next test reads. The kinds:
  - "lm": smoke(total_steps=3, keep_checkpoints=5); returns the workdir.
  - "mlm": smoke_mlm(), two steps; returns the workdir.
  - "seq2seq": s2s_config(root) on tests.gettext_fixture's catalogues; returns root, which
    holds locale/, data/ and the workdir work/.
  - "vit_<position>" (vit_learned, vit_rope_mixed, ...): vit_config(position, root / "data"), the
    ViT at 16 px; returns root, which holds the shapes2d data/ and the workdir work/.
  """

  def __init__(self, root: pathlib.Path):
    self.root = root
    self._trained: dict[str, pathlib.Path] = {}

  def copy(self, kind: str, dest: pathlib.Path) -> pathlib.Path:
    shutil.copytree(self._train(kind), dest)
    return dest

  def _train(self, kind: str) -> pathlib.Path:
    if kind not in self._trained:
      from roformer_jax.training import trainer
      path = self.root / kind
      if kind == "lm":
        trainer.train_and_evaluate(smoke(total_steps=LM_STEPS, keep_checkpoints=5), str(path))
      elif kind == "mlm":
        trainer.train_and_evaluate(smoke_mlm(), str(path))
      elif kind == "seq2seq":
        from tests import gettext_fixture
        gettext_fixture.make_locale_dir(path / "locale")
        trainer.train_and_evaluate(s2s_config(path), str(path / "work"))
      elif kind.startswith("vit_"):
        trainer.train_and_evaluate(vit_config(kind[len("vit_"):], path / "data"), str(path / "work"))
      else:
        raise ValueError(f"no smoke run {kind!r}; expected lm, mlm, seq2seq or vit_<position>")
      self._trained[kind] = path
    return self._trained[kind]
