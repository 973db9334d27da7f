"""roformer_jax.training.samples for the labelled tasks: what a person sees of a classification or image
sample (issue 40: the input, the prediction and the truth, by class name where the dataset names them).
The models are stand-ins that return fixed logits, so each line's content is known; the trained runs'
samples (lm, mlm) are checked in tests/test_train.py."""

import numpy as np
import tensorflow_datasets as tfds

from roformer_jax.training import data, samples
from roformer_jax.training.data import shapes

TOK = data.ByteTokenizer()


def fixed(logits):
  return lambda *args, **kw: np.asarray(logits, np.float32)


def pair_row(a: str, b: str, length: int = 32):
  first = [TOK.bos_id, *TOK.encode(a), TOK.eos_id]
  second = [*TOK.encode(b), TOK.eos_id]
  ids = np.zeros(length, np.int32)
  ids[:len(first) + len(second)] = first + second
  types = np.zeros(length, np.int32)
  types[len(first):len(first) + len(second)] = 1
  return ids, types, (np.arange(length) < len(first) + len(second)).astype(np.int32)


def test_a_classification_sample_shows_the_text_and_both_labels_by_name():
  rows = [pair_row("The cat sat.", "A cat sat."), pair_row("Rain.", "Sun.")]
  batch = {k: np.stack([r[i] for r in rows]) for i, k in enumerate(("input_ids", "token_type_ids", "attention_mask"))}
  batch["label"] = np.array([1, 1], np.int32)
  names = ("not_equivalent", "equivalent")
  out = samples.classification_samples(fixed([[0.1, 2.0], [3.0, -1.0]]), batch, TOK, 2, labels=names)
  assert out == [{"prompt": "The cat sat. | A cat sat.", "output": "equivalent (1)", "reference": "equivalent (1)"},
                 {"prompt": "Rain. | Sun.", "output": "not_equivalent (0)", "reference": "equivalent (1)"}]
  assert samples.classification_samples(fixed([[0.1, 2.0]] * 2), batch, TOK, 1)[0]["output"] == "1"  # no names
  batch["label"] = np.array([3.25, 0.5], np.float32)  # a regression (STS-B): the scores
  out = samples.classification_samples(fixed([[4.0], [1.5]]), batch, TOK, 2, labels=None)
  assert [(s["output"], s["reference"]) for s in out] == [("4.00", "3.25"), ("1.50", "0.50")]
  shown = samples.screen(out[0], 10).splitlines()
  assert shown[1:] == ["  input:     'The cat sat. | A cat sat.'", "  model:     '4.00'", "  reference: '3.25'"]


def test_an_image_sample_names_the_predicted_and_the_true_class():
  batch = {"image": np.zeros((2, 8, 8, 3), np.float32), "label": np.array([2, 0], np.int32)}
  out = samples.image_samples(fixed([[0.0, 0.0, np.log(8.0), 0.0], [0.0, 5.0, 0.0, 0.0]]), batch, None, 2,
                              labels=shapes.LABELS)
  assert out[0] == {"prompt": "validation image 0", "output": "left_below (2), p=0.73", "reference": "left_below (2)"}
  assert out[1]["output"].startswith("right_above (1), p=0.98") and out[1]["reference"] == "left_above (0)"


def test_label_names_come_from_the_dataset(tmp_path):
  """(shapes2d's, from its ClassLabel: tests/test_shapes_data.py, which builds it.)"""
  cfg = data.default_data_config()
  cfg.update(dataset="glue/mrpc", data_dir=str(tmp_path / "glue"))
  with tfds.testing.mock_data(num_examples=4, policy=tfds.testing.MockPolicy.USE_CODE):
    assert data.label_names(cfg) == ("not_equivalent", "equivalent")
    cfg.dataset = "glue/stsb"  # a regression: no names
    assert data.label_names(cfg) is None
  cfg.update(dataset="python_stdlib_bytes", max_documents=4)  # no label at all
  assert data.label_names(cfg) is None
