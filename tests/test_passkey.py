"""Pass-key retrieval: the prompt format, the scoring, the greedy generate_fn, the training mix.

evaluate() with pass-key lengths is tested in test_evaluate.py, on its trained smoke workdir.
"""

import json
import re

import numpy as np
import pytest
from flax import nnx

from roformer_jax.training import data
from roformer_jax.evaluation import evaluate, passkey
from roformer_jax.training.data import corpus, passkey as passkey_rows
from roformer_jax.errors import UserError
from roformer_jax.models import CausalLM, ModelConfig

BYTES = data.ByteTokenizer()
KEY_RE = re.compile(r"The pass key is (\d+)\. Remember it\. (\d+) is the pass key\. ")


class WordTokenizer:
  """A tokenizer of whole words (several bytes a token), to check that lengths count tokens."""
  pad_id, bos_id, eos_id, mask_id, num_special = 0, 1, 2, 3, 4

  def __init__(self):
    self.vocab = {}

  def encode(self, text):
    return [self.vocab.setdefault(w, len(self.vocab) + self.num_special) for w in text.split()]

  def decode(self, ids):
    words = {v: k for k, v in self.vocab.items()}
    return " ".join(words[i] for i in ids if i >= self.num_special)


@pytest.mark.parametrize("tok", [BYTES, WordTokenizer()], ids=["bytes", "words"])
def test_prompts_have_the_exact_length_and_the_key_at_its_depth(tok):
  longest_sentence = max(len(tok.encode(s)) for s in passkey_rows.FILLER)
  shortest = passkey_rows.min_prompt_length(tok)
  for length in (shortest, shortest + 1, shortest + 37, 300, 1000):
    for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
      ids = passkey_rows.make_prompt(length, depth, "48213", tok)
      assert ids.dtype == np.int32 and ids.shape == (length,) and ids[0] == tok.bos_id
      assert tok.bos_id not in ids[1:] and tok.eos_id not in ids
      at = passkey_rows.key_position(length, depth, "48213", tok)
      filler = length - shortest
      assert abs((at - 1) - depth * filler) <= longest_sentence, (length, depth, at)
      text = tok.decode(ids)
      assert text.rstrip().endswith(passkey_rows.QUESTION.strip()) and text.count("48213") == 2
      if tok is BYTES:  # the key sentence starts at `at`, and no digit follows it
        assert BYTES.decode(ids[at:]).startswith("The pass key is 48213.")
        assert not re.search(r"\d", text[text.index("48213 is the pass key") + 5:])
  assert passkey_rows.make_prompt(200, 1.0, "48213", BYTES, add_bos=False)[0] != BYTES.bos_id
  with pytest.raises(ValueError, match=f"length={shortest - 1} is too short .* {shortest} tokens"):
    passkey_rows.make_prompt(shortest - 1, 0.5, "48213", tok)
  with pytest.raises(ValueError, match="depth=1.5"):
    passkey_rows.make_prompt(300, 1.5, "48213", tok)
  with pytest.raises(ValueError, match="key='4x'"):
    passkey_rows.make_prompt(300, 0.5, "4x", tok)


def test_training_rows_are_one_document_ending_with_the_answer():
  rng = np.random.default_rng(0)
  for length in (129, 257):
    row = passkey_rows.training_row(rng, length, BYTES)
    assert row.shape == (length,) and row[0] == BYTES.bos_id and row[-1] == BYTES.eos_id
    first, second = KEY_RE.search(BYTES.decode(row)).groups()
    assert first == second and BYTES.decode(row).endswith(passkey_rows.QUESTION + first)
  with pytest.raises(ValueError, match="at least 104 tokens"):
    passkey_rows.training_row(rng, 64, BYTES)


def copy_the_key(prompts):
  """A perfect model: reads the key sentence out of each prompt."""
  return np.stack([np.asarray(BYTES.encode(KEY_RE.search(BYTES.decode(p)).group(1)), np.int32) for p in prompts])


def test_a_model_that_copies_the_key_scores_1_and_a_guesser_scores_chance():
  lengths, depths = (100, 180), (0.0, 0.25, 0.5, 0.75, 1.0)
  perfect = passkey.evaluate_passkey(copy_the_key, BYTES, lengths=lengths, depths=depths, trials=3)
  assert perfect["accuracy"] == [[1.0] * 5] * 2 and perfect["digit_accuracy"] == [[1.0] * 5] * 2
  assert perfect["mean_accuracy"] == [1.0, 1.0] and perfect["lengths"] == [100, 180]
  assert len(perfect["examples"]) == 10 and perfect["examples"][0]["output"] == perfect["examples"][0]["key"]
  json.dumps(perfect)  # JSON-ready as it is

  rng = np.random.default_rng(1)
  guess = lambda prompts: rng.integers(0, 10, size=(len(prompts), 5)) + ord("0") + BYTES.num_special
  trials = 200
  chance = passkey.evaluate_passkey(guess, BYTES, lengths=lengths, depths=depths, trials=trials)
  # 2 lengths x 5 depths x 200 trials x 5 digits = 10,000 uniform digits: the digit accuracy is
  # Binomial(10000, 0.1) / 10000, standard deviation 0.003; 4 sigma is 0.012.
  assert np.mean(chance["digit_accuracy"]) == pytest.approx(0.1, abs=0.012)
  # A whole key by chance: probability 1e-5 per prompt, 0.02 hits expected in 2,000.
  assert np.mean(chance["accuracy"]) <= 1 / trials
  assert chance["chance"] == {"accuracy": 1e-5, "digit_accuracy": 0.1}


def test_answer_nll_is_0_for_a_certain_model_and_ln10_per_digit_for_a_uniform_one():
  lengths, depths, trials = (100, 140), (0.0, 0.5, 1.0), 4
  certain = lambda prompts, answers, mask: np.zeros(answers.shape)
  uniform = lambda prompts, answers, mask: np.full(answers.shape, np.log(10.0))
  for score_fn, expected in ((certain, 0.0), (uniform, np.log(10.0))):
    r = passkey.evaluate_passkey(copy_the_key, BYTES, lengths=lengths, depths=depths, trials=trials,
                                 score_fn=score_fn)
    np.testing.assert_allclose(r["answer_nll"], np.full((2, 3), expected), atol=1e-12)
    assert r["mean_answer_nll"] == pytest.approx([expected] * 2) and r["chance"]["answer_nll"] == pytest.approx(2.302585)
    assert "answer nats per digit" in passkey.format_table(r)
  # Keys that a tokenizer splits into different numbers of tokens (here a run of one digit is
  # one token: "12334" is 4): right-padded, and only the real tokens count. At 1 nat a token, a
  # 5-digit key of k tokens costs k/5 nats a digit.
  tok = WordTokenizer()
  runs = lambda text: " ".join(m.group(0) for m in re.finditer(r"(\d)\1*", text))
  tok.encode = lambda text, enc=tok.encode: enc(runs(text) if text.isdigit() else text)
  seen = []

  def one_nat_a_token(prompts, answers, mask):
    seen.append(mask.sum(1))
    assert answers.shape == (len(prompts), mask.sum(1).max()) and np.all(answers[~mask] == 0)
    return np.where(mask, 1.0, 99.0)

  no_answer = lambda prompts: np.zeros((len(prompts), 5), np.int32)
  r = passkey.evaluate_passkey(no_answer, tok, lengths=(60,), depths=(0.5,), trials=20, score_fn=one_nat_a_token)
  tokens = seen[0]
  assert tokens.min() < tokens.max() == 5  # some keys have a repeated digit
  assert r["answer_nll"] == [[pytest.approx(tokens.mean() / 5)]]
  with pytest.raises(ValueError, match=r"score_fn returned shape \(3,\)"):
    passkey.evaluate_passkey(no_answer, tok, lengths=(60,), depths=(0.5,), trials=3,
                             score_fn=lambda p, a, m: np.zeros(len(p)))


@pytest.fixture(scope="module")
def tiny_lm():
  cfg = ModelConfig(vocab_size=260, d_model=32, num_layers=1, num_heads=2, d_ff=64, norm="pre", dropout=0.0,
                    attention_dropout=0.0, type_vocab_size=0)
  return CausalLM(cfg, rngs=nnx.Rngs(0))


def test_answer_nll_fn_equals_float64_log_softmax_of_the_full_forward(tiny_lm):
  """The reference: the model's logits for prompt + answer in one call, without the function's
  slicing, chunking or padding; log-softmax in float64 NumPy; logits[t] scores token t + 1."""
  prompts = np.stack([passkey_rows.make_prompt(110, d, k, BYTES) for d, k in ((0.0, "12345"), (0.4, "90210"),
                                                                        (0.8, "55555"), (1.0, "00017"))])
  answers = np.stack([np.asarray(BYTES.encode(k), np.int32) for k in ("12345", "90210", "55555", "00017")])
  mask = np.ones(answers.shape, bool)
  mask[1, 3:] = False  # a shorter answer, right-padded: its real tokens score the same
  got = passkey.answer_nll_fn(tiny_lm, max_rows=3)(prompts, answers, mask)  # rows 0-2, then row 3 padded
  seq = np.concatenate([prompts, answers], 1)
  logits = np.asarray(tiny_lm(seq), np.float64)
  logp = logits - logits.max(-1, keepdims=True)
  logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
  p = prompts.shape[1]
  want = -np.take_along_axis(logp[:, p - 1:-1], answers[..., None], -1)[..., 0]
  assert got.shape == (4, 5)
  np.testing.assert_allclose(got[mask], want[mask], rtol=1e-4, atol=1e-4)
  assert abs(float(np.mean(want)) - np.log(260)) < 1.0  # a random model: about ln(vocab) a token


def test_greedy_generate_fn_of_a_random_tiny_model_has_the_right_shapes(tiny_lm):
  model = tiny_lm
  prompts = np.stack([passkey_rows.make_prompt(120, d, "12345", BYTES) for d in (0.0, 0.3, 0.6, 1.0)])
  generate = passkey.greedy_generate_fn(model, 5, max_rows=3)  # every call is [3, 120]: one compile
  chunked = generate(prompts)  # rows 0-2, then row 3 padded to 3 rows
  assert chunked.shape == (4, 5) and np.array_equal(chunked[[3, 2, 1]], generate(prompts[[3, 2, 1]]))
  results = passkey.evaluate_passkey(generate, BYTES, lengths=(120,), depths=(0.0, 1.0), trials=2)
  assert np.shape(results["accuracy"]) == (1, 2) and np.max(results["accuracy"]) == 0.0  # chance is 1e-5
  assert np.max(results["digit_accuracy"]) <= 0.5


@pytest.mark.slow  # a full forward per digit under LongRoPE's exact phases: 12-36 s, make test's slow tier
def test_greedy_generate_fn_under_longrope_equals_a_full_forward_greedy_loop(tiny_lm):
  """Passkey retrieval with eval.rope_scaling = LongRoPE, whose original length (122) the
  answer's digits cross: the generate_fn's cached digits equal the argmax of a full forward
  re-run after every digit (a cache keeping the short factors' keys would not)."""
  scaling = {"rope_type": "longrope", "original_max_position_embeddings": 122, "max_position_embeddings": 488,
             "short_factor": [1.0] * 8, "long_factor": list(np.geomspace(1.0, 64.0, 8))}
  model = CausalLM(tiny_lm.config.replace(init_std=0.5, rope_scaling=scaling), rngs=nnx.Rngs(1))
  prompts = np.stack([passkey_rows.make_prompt(120, d, "12345", BYTES) for d in (0.0, 1.0)])
  got = passkey.greedy_generate_fn(model, 5)(prompts)
  seq = prompts
  for _ in range(5):
    seq = np.concatenate([seq, np.asarray(model(seq))[:, -1].argmax(-1)[:, None]], 1)
  np.testing.assert_array_equal(got, seq[:, 120:])
  assert len(np.unique(seq[:, 120:])) > 1  # a path that varies


def test_passkey_settings_are_checked_with_the_config():
  from configs import default
  config = default.get_config("smoke")
  config.eval.passkey_lengths = (128, 256)
  settings = evaluate.eval_settings(config)
  assert settings["passkey_lengths"] == (128, 256) and settings["passkey_depths"] == (0.0, 0.25, 0.5, 0.75, 1.0)
  config.task = "mlm"
  with pytest.raises(ValueError, match=r"passkey_lengths=\[128, 256\] .*task 'mlm'"):
    evaluate.eval_settings(config)
  config.task = "lm"
  config.eval.passkey_depths = (0.5, 2.0)
  with pytest.raises(ValueError, match=r"passkey_depths=\[0.5, 2.0\]"):
    evaluate.eval_settings(config)


# --------------------------------------------------------------------------------------
# The training mix (data.passkey_fraction).
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_cfg(tmp_path_factory):
  path = tmp_path_factory.mktemp("tfds")
  corpus.build_stdlib_corpus(path, max_documents=20, max_bytes=100_000)
  cfg = data.default_data_config()
  cfg.data_dir, cfg.max_documents, cfg.max_bytes, cfg.max_length = str(path), 20, 100_000, 128
  cfg.shuffle_window = 64
  return cfg


def _rows(cfg, n, it=None):
  it = it or data.make_iterator(cfg, task="lm", split="train", batch_size=8, seed=3)
  return it, [next(it) for _ in range(n)]


def test_the_mix_replaces_about_the_fraction_of_rows_and_leaves_the_rest(data_cfg):
  plain_it, plain = _rows(data_cfg, 8)
  assert "passkey_rows" not in json.dumps(plain_it.get_state())  # fraction 0: the packer's state as before
  cfg = data_cfg.copy_and_resolve_references()
  cfg.passkey_fraction = 0.5
  it, mixed = _rows(cfg, 8)
  replaced = 0
  for a, b in zip(plain, mixed, strict=True):
    for i in range(8):
      if "The pass key is" in BYTES.decode(b["inputs"][i]):
        replaced += 1
        assert b["weights"][i].all() and np.array_equal(b["positions"][i], np.arange(128))
        assert b["inputs"][i][0] == BYTES.bos_id and b["targets"][i][-1] == BYTES.eos_id
      else:  # a row that is not replaced is the row the run would have had without the mix
        for k in a:
          np.testing.assert_array_equal(a[k][i], b[k][i], err_msg=k)
  # 64 rows, each replaced with probability 0.5: Binomial(64, 0.5), sd 4; 4 sigma is 16.
  assert 16 <= replaced <= 48
  # Resume: the state after 8 batches (through JSON, as orbax saves it) gives the same next rows.
  state = json.loads(json.dumps(it.get_state()))
  _, expected = _rows(cfg, 3, it)
  fresh = data.make_iterator(cfg, task="lm", split="train", batch_size=8, seed=3)
  fresh.set_state(state)
  _, resumed = _rows(cfg, 3, fresh)
  for a, b in zip(expected, resumed, strict=True):
    for k in a:
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  # Validation rows never change.
  val = lambda c: next(data.make_iterator(c, task="lm", split="validation", batch_size=8, seed=3))
  np.testing.assert_array_equal(val(data_cfg)["inputs"], val(cfg)["inputs"])


def test_bad_passkey_fractions_are_named(data_cfg):
  cfg = data_cfg.copy_and_resolve_references()
  for value in (1.0, -0.1):
    cfg.passkey_fraction = value
    with pytest.raises(UserError, match=re.escape(f"data.passkey_fraction={value!r}")):
      data.make_iterator(cfg, task="lm", split="train", batch_size=8, seed=0)
  cfg.passkey_fraction = 0.1
  with pytest.raises(UserError, match="task 'mlm' cannot use them"):
    data.make_iterator(cfg, task="mlm", split="train", batch_size=8, seed=0)
  with pytest.raises(UserError, match="task 'mlm'"):
    data.check_data(cfg, task="mlm")
  cfg.max_length = 32
  with pytest.raises(UserError, match=r"at least 104 tokens .*data.max_length=32"):
    data.make_iterator(cfg, task="lm", split="train", batch_size=8, seed=0)
