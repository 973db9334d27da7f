"""The gettext parallel corpus (roformer_jax/training/data/gettext_catalogs.py), packed translation pairs,
and evaluation with raw references, on a locale directory of .mo files written by the test
(tests/gettext_fixture.py) -- and, where the machine has them, the system's own catalogues."""

import gettext
import glob
import logging
import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer_jax import models
from roformer_jax.training import data, tasks
from roformer_jax.evaluation import evaluate
from roformer_jax.training.data import datasets, gettext_catalogs as gc
from tests import gettext_fixture
from tests.smoke import s2s_config


@pytest.fixture(scope="module")
def locale_dir(tmp_path_factory):
  return gettext_fixture.make_locale_dir(tmp_path_factory.mktemp("locale"))


def test_mo_writer_is_read_by_python_gettext(locale_dir):
  t = gettext.GNUTranslations(open(locale_dir / "de/LC_MESSAGES/alpha.mo", "rb"))
  assert t.gettext("Open file") == "Datei öffnen"
  assert t.pgettext("menu", "Quit") == "Beenden"
  assert t.ngettext("%d file", "%d files", 3) == "%d Dateien"


def test_pairs_take_the_majority_translation_strip_context_and_keep_singular_plurals(locale_dir, caplog):
  with caplog.at_level(logging.WARNING):
    records, skipped = gc.collect_pairs("de", locale_dir)
  by_source = {r["source"]: r for r in records}
  assert by_source["Open file"]["target"] == "Datei öffnen"  # 2 of 3 catalogues
  assert by_source["Open file"]["num_catalogs"] == 3 and by_source["Open file"]["domain"] == "alpha"
  assert by_source["Quit"]["target"] == "Beenden"  # msgctxt stripped from the English side
  assert by_source["%d file"]["target"] == "%d Datei"  # plural: the singular pair only
  assert "%d files" not in by_source and "Empty" not in by_source and "" not in by_source
  assert by_source["Save"]["target"] == "Speichern"
  assert skipped == ["broken.mo: UnicodeDecodeError"] and "broken.mo" in caplog.text
  assert len(records) == gettext_fixture.NUM_MESSAGES + 5


def test_split_is_a_function_of_the_english_string_and_roughly_96_2_2():
  sources = [f"string {i}" for i in range(20000)]
  splits = [gc.split_of(s) for s in sources]
  assert splits == [gc.split_of(s) for s in sources]
  share = {k: splits.count(k) / len(splits) for k in ("train", "validation", "test")}
  assert abs(share["test"] - 0.02) < 0.005 and abs(share["validation"] - 0.02) < 0.005


@pytest.mark.parametrize("lang", ["de", "pt_BR", "sr@latin"])
def test_any_language_code_builds_a_dataset_with_disjoint_splits(lang, locale_dir, tmp_path):
  builder = gc.build_gettext_corpus(lang, tmp_path, locale_dir=locale_dir)
  assert builder.builder_config.name.startswith(lang.replace("@", "_") + "_")
  sources = {}
  for split in ("train", "validation", "test"):
    src = builder.as_data_source(split)
    assert len(src) > 0
    sources[split] = {src[i]["source"] for i in range(len(src))}
    assert all(gc.split_of(s.decode()) == split for s in sources[split])
  assert sum(map(len, sources.values())) == len(set.union(*sources.values()))
  if lang != "de":
    rec = builder.as_data_source("train")[0]
    assert rec["target"].decode().startswith(lang)


def test_changed_catalogues_get_a_new_dataset_instead_of_a_stale_one(tmp_path):
  root = gettext_fixture.make_locale_dir(tmp_path / "locale")
  before = gc.gettext_config("pt_BR", root).name
  gettext_fixture.write_mo(root / "pt_BR/LC_MESSAGES/extra.mo", {"Yes": "Sim"})
  assert gc.gettext_config("pt_BR", root).name != before


def test_a_language_without_catalogues_names_the_ones_that_exist(locale_dir):
  with pytest.raises(FileNotFoundError, match=r"'xx'.*de, pt_BR, sr@latin"):
    gc.catalog_files("xx", locale_dir)
  with pytest.raises(ValueError, match="names no language"):
    datasets.get_spec("gettext_translate")
  with pytest.raises(ValueError, match="not a locale directory name"):
    gc.catalog_files("../de", locale_dir)
  assert datasets.get_spec("gettext_translate/pt_BR").kind == "translation"


def _data_cfg(locale_dir, data_dir, **kw):
  cfg = data.default_data_config()
  cfg.update(dict(dataset="gettext_translate/de", locale_dir=str(locale_dir), data_dir=str(data_dir),
                  tokenizer="bytes", max_length=48, max_target_length=48, num_threads=1, prefetch=8), **kw)
  return cfg


def test_packed_pairs_hold_whole_pairs_with_matching_segments(locale_dir, tmp_path):
  cfg = _data_cfg(locale_dir, tmp_path, pack_pairs=True)
  batch = next(data.make_iterator(cfg, task="seq2seq", split="train", batch_size=4, seed=0))
  tok = data.ByteTokenizer()
  pairs = {r["source"]: r["target"] for r in gc.collect_pairs("de", locale_dir)[0]}
  seen = 0
  for row in range(4):
    for seg in range(1, batch["src_segment_ids"][row].max() + 1):
      src = batch["src"][row][batch["src_segment_ids"][row] == seg]
      tgt_in = batch["tgt_in"][row][batch["tgt_segment_ids"][row] == seg]
      tgt_out = batch["tgt_out"][row][batch["tgt_segment_ids"][row] == seg]
      assert src[-1] == tok.eos_id and tgt_in[0] == tok.bos_id and tgt_out[-1] == tok.eos_id
      np.testing.assert_array_equal(tgt_in[1:], tgt_out[:-1])
      assert pairs[tok.decode(src[:-1])] == tok.decode(tgt_out[:-1])  # a real pair, both sides whole
      np.testing.assert_array_equal(batch["src_positions"][row][batch["src_segment_ids"][row] == seg],
                                    np.arange(len(src)))
      seen += 1
  assert seen > 4  # several pairs per row
  np.testing.assert_array_equal(batch["weights"], (batch["tgt_segment_ids"] != 0).astype(np.float32))


def test_packed_rows_give_the_loss_of_their_pairs_one_per_row(locale_dir, tmp_path):
  """Packing changes the layout, not the sums: segment masks keep pairs apart exactly."""
  cfg = _data_cfg(locale_dir, tmp_path, pack_pairs=True)
  batch = next(data.make_iterator(cfg, task="seq2seq", split="train", batch_size=2, seed=1))
  model = models.TransformerSeq2Seq(models.ModelConfig(vocab_size=260, d_model=32, num_layers=2, num_heads=2,
                                                       d_ff=64, type_vocab_size=0, dropout=0.0), rngs=nnx.Rngs(0))
  packed = tasks.loss_sums(model, {k: jnp.asarray(v) for k, v in batch.items()}, task="seq2seq")
  loss = weight = 0.0
  for row in range(2):
    for seg in range(1, batch["src_segment_ids"][row].max() + 1):
      take = lambda key, ids, row=row, seg=seg: batch[key][row][batch[ids][row] == seg]
      src, tgt_in, tgt_out = take("src", "src_segment_ids"), take("tgt_in", "tgt_segment_ids"), take("tgt_out", "tgt_segment_ids")
      pad = lambda a: jnp.asarray(np.pad(a, (0, 48 - len(a)))[None])
      one = tasks.loss_sums(model, {"src": pad(src), "tgt_in": pad(tgt_in), "tgt_out": pad(tgt_out),
                                    "weights": pad(np.ones(len(tgt_out), np.float32))}, task="seq2seq")
      loss, weight = loss + float(one["loss"]), weight + float(one["weight"])
  assert float(packed["weight"]) == weight
  np.testing.assert_allclose(float(packed["loss"]), loss, rtol=2e-5)


def test_raw_targets_follow_the_evaluation_order_per_process(locale_dir, tmp_path):
  cfg = _data_cfg(locale_dir, tmp_path)
  tok = data.ByteTokenizer()
  for index, count in ((0, 1), (0, 2), (1, 2)):
    refs = data.raw_targets(cfg, "validation", process_index=index, process_count=count)
    rows = [r for b in data.make_iterator(cfg, task="seq2seq", split="validation", batch_size=3, seed=0,
                                          process_index=index, process_count=count)
            for r, w in zip(b["tgt_out"], b["weights"], strict=True) if w.any()]
    assert [tok.decode(r[r > 0][:-1]) for r in rows] == refs


@pytest.mark.slow
def test_smoke_config_trains_and_scores_bleu_against_raw_references(smoke_runs, tmp_path):
  # The shared seq2seq smoke run (tests/smoke.py): configs/gettext_translate.py's smoke variant
  # on tests.gettext_fixture's catalogues, trained once; this test evaluates a copy.
  root = smoke_runs.copy("seq2seq", tmp_path / "s2s")
  config = s2s_config(root)
  assert config.data.pack_pairs and config.data.dataset == "gettext_translate/de"
  config.eval.beam_size, config.eval.max_decode_length = 2, 8
  results = evaluate.evaluate(config, str(root / "work"))
  assert math.isfinite(results["metrics"]["bleu"]) and results["split"] == "test"
  lines = (root / "work" / "translations.tsv").read_text().splitlines()
  refs = data.raw_targets(config.data, "test")
  assert results["metrics"]["sentences"] == len(refs) == len(lines) - 1
  escaped = [r.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n") for r in refs]
  assert [line.split("\t")[1] for line in lines[1:]] == escaped  # one line per sentence
  assert "Zeile eins\n\tZeile zwei" in refs


@pytest.mark.skipif(not glob.glob("/usr/share/locale/de/LC_MESSAGES/*.mo"), reason="no system German catalogues")
def test_system_catalogues_give_thousands_of_pairs():
  records, _ = gc.collect_pairs("de")
  assert len(records) > 1000
  assert all(r["source"] and r["target"] for r in records)
