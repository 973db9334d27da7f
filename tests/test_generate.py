"""generate.py and roformer_jax.evaluation.generation on smoke workdirs trained here (lm, mlm, seq2seq).

The token loop is checked against a plain full forward pass (no cache) that takes the argmax
of the growing sequence, on the trained model and on random large-weight models whose greedy
paths vary, across the sliding window; top-p against a NumPy reference; sampling for
determinism under a seed; each bad input for its one-line error. The CLI runs once per task
(each run costs several seconds of start-up).
"""

import dataclasses
import inspect
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer_jax import decoding
from roformer_jax.evaluation import generation
from roformer_jax.errors import UserError
from tests.smoke import DATA_DIR, s2s_config, smoke, smoke_mlm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The shared smoke runs (tests/smoke.py), copied once for this file: nothing here writes to them.
@pytest.fixture(scope="module")
def lm_run(smoke_runs, tmp_path_factory):
  return smoke_runs.copy("lm", tmp_path_factory.mktemp("lm") / "work")  # checkpoints 1, 2, 3


@pytest.fixture(scope="module")
def lm(lm_run):
  return generation.load(smoke(), str(lm_run))


@pytest.fixture(scope="module")
def mlm_run(smoke_runs, tmp_path_factory):
  return smoke_runs.copy("mlm", tmp_path_factory.mktemp("mlm") / "work")


@pytest.fixture(scope="module")
def s2s_run(smoke_runs, tmp_path_factory):
  return smoke_runs.copy("seq2seq", tmp_path_factory.mktemp("s2s") / "root")  # locale/, data/, work/


def random_weights(loaded, **changes):
  """`loaded` with a fresh large-weight model of the same kind: its greedy paths vary (a
  smoke-trained model repeats one byte), and EOS's embedding row is zero so that its logit,
  0, never wins and the continuation runs on across the sliding window."""
  model = type(loaded.model)(loaded.model.config.replace(init_std=0.5, **changes), rngs=nnx.Rngs(0))
  table = model.embeddings.word.embedding
  table[...] = table[...].at[loaded.tokenizer.eos_id].set(0.0)
  graphdef, state = nnx.split(model)
  return dataclasses.replace(loaded, model=model, graphdef=graphdef, state=state)


def full_forward_greedy(loaded, prompt_ids, max_new_tokens):
  """The reference: argmax of the model's full forward pass (no cache) over the visible
  tokens, re-run after every token; the window slides as `generation.lm_tokens` documents
  (at most `context` tokens; then the last context // 2). Returns (tokens, smallest top-1
  minus top-2 logit margin along the path)."""
  context = loaded.context
  forward = jax.jit(lambda state, row, mask: nnx.merge(loaded.graphdef, state)(row, attention_mask=mask))
  seq, start, out, margin = list(prompt_ids), 0, [], np.inf
  for _ in range(max_new_tokens):
    visible = seq[start:]
    row = np.zeros((1, context), np.int32)  # right padding: a causal model's logits at
    row[0, :len(visible)] = visible  # len(visible) - 1 do not see it; one shape compiles
    logits = np.asarray(forward(loaded.state, row, np.arange(context)[None] < len(visible)))[0, len(visible) - 1]
    top2 = np.sort(logits)[-2:]
    margin = min(margin, top2[1] - top2[0])
    token = int(np.argmax(logits))
    if token == loaded.tokenizer.eos_id:
      break
    out.append(token)
    seq.append(token)
    if len(seq) - start > context:
      start = len(seq) - context // 2
  return out, margin


# ---- lm: the token loop ----------------------------------------------------------------


def test_greedy_equals_the_argmax_of_a_full_forward_loop_on_the_trained_model(lm):
  ids = generation.encode_lm_prompt(lm, "def f(x):")
  assert ids[0] == lm.tokenizer.bos_id and lm.context == 32  # BOS, as training started documents
  tokens = list(generation.lm_tokens(lm, ids, max_new_tokens=40))
  expected, _ = full_forward_greedy(lm, ids, 40)
  assert tokens == expected
  text = "".join(generation.stream_lm(lm, "def f(x):", max_new_tokens=40))
  assert text == lm.tokenizer.decode(tokens)


@pytest.mark.parametrize("attention, scaling", [
    ("softmax", None), ("linear", None),
    # NTK-aware RoPE past its original 16 tokens: every step there changes the frequencies
    # (and every window re-prefills), so the cache is rebuilt from its tokens. A stale cache
    # changes this greedy path.
    ("softmax", {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 16})])
def test_greedy_equals_the_argmax_of_a_full_forward_loop_across_the_sliding_window(lm, attention, scaling):
  model = random_weights(lm, attention=attention, rope_scaling=scaling)
  ids = generation.encode_lm_prompt(model, "def f(x):")
  tokens = list(generation.lm_tokens(model, ids, max_new_tokens=70))  # 10 + 70 > 2 windows of 32
  expected, margin = full_forward_greedy(model, ids, 70)
  assert len(expected) == 70 and len(set(expected)) > 5  # a path that varies and slides twice
  assert margin > 1e-3  # far above float32 noise: the argmax is well defined
  assert tokens == expected


def test_tokens_stream_one_at_a_time_and_stop_at_eos(lm):
  model = random_weights(lm)
  stream = generation.stream_lm(model, "def ", max_new_tokens=12)
  assert inspect.isgenerator(stream)
  first = next(stream)  # text exists before the rest is made
  assert first and len([first, *stream]) > 1
  # A tokenizer whose EOS is the first greedy token: nothing is generated.
  first_token = next(generation.lm_tokens(model, generation.encode_lm_prompt(model, "def "), max_new_tokens=1))

  class EosTokenizer(type(model.tokenizer)):
    eos_id = first_token

  stopped = dataclasses.replace(model, tokenizer=EosTokenizer())
  assert list(generation.lm_tokens(stopped, generation.encode_lm_prompt(stopped, "def "), max_new_tokens=5)) == []


def test_sampling_is_deterministic_under_a_seed(lm):
  def sample(seed, index=0, **kw):
    return "".join(generation.stream_lm(lm, "def ", max_new_tokens=24, temperature=1.0, seed=seed,
                                        sample=index, **kw))

  assert sample(0) == sample(0)
  assert sample(0) != sample(1)
  assert sample(0) != sample(0, index=1)
  assert sample(3, top_k=5, top_p=0.9) == sample(3, top_k=5, top_p=0.9)


# ---- top-p ----------------------------------------------------------------------------


def nucleus_reference(logits, top_p):
  """float64 NumPy: the smallest set of most probable tokens (ties by lower index) whose
  probability reaches top_p, as a boolean mask."""
  p = np.exp(logits - logits.max())
  p /= p.sum()
  keep, total = np.zeros(len(logits), bool), 0.0
  for j in sorted(range(len(logits)), key=lambda j: (-logits[j], j)):
    if keep.any() and total >= top_p:
      break
    keep[j] = True
    total += p[j]
  return keep


def test_nucleus_logits_match_a_numpy_reference():
  rng = np.random.default_rng(0)
  logits = (rng.normal(size=(64, 50)) * rng.uniform(0.3, 4.0, size=(64, 1))).astype(np.float32)
  for top_p in (1e-6, 0.1, 0.5, 0.9, 0.99, 1.0):
    got = np.asarray(decoding.nucleus_logits(jnp.asarray(logits), top_p))
    for row, out in zip(logits.astype(np.float64), got, strict=True):
      keep = nucleus_reference(row, top_p)
      p = np.sort(np.exp(row - row.max()) / np.exp(row - row.max()).sum())[::-1]
      if top_p < 1 and np.min(np.abs(np.cumsum(p) - top_p)) < 1e-5:
        continue  # a float32 sum this close to top_p may land on either side
      np.testing.assert_array_equal(np.isfinite(out), keep, err_msg=f"top_p={top_p}")
      np.testing.assert_array_equal(out[keep], row[keep].astype(np.float32))
  assert np.isfinite(np.asarray(decoding.nucleus_logits(jnp.asarray(logits), 1e-6))).sum(axis=1).tolist() == [1] * 64


@jax.jit
def _draws(logits, key, temperature, top_p):
  keys = jax.random.split(key, logits.shape[0])
  pick = lambda k, row, kk: decoding.choose_tokens(row[None], kk, temperature=temperature, top_k=k, top_p=top_p)[0]
  return (jax.vmap(lambda kk, row: pick(None, row, kk))(keys, logits),
          jax.vmap(lambda kk, row: pick(4, row, kk))(keys, logits))


def test_top_p_sampling_frequencies_match_the_numpy_nucleus():
  """20k draws: frequencies equal the renormalised reference nucleus of softmax(logits / T),
  after top_k=4 for the second (4-sigma tolerance, ~0.014); nothing outside it is drawn."""
  base = np.array([1.0, -0.5, 0.3, 2.0, 0.0, 1.4, -2.0], np.float32)
  for temperature, top_p in ((1.0, 0.8), (0.5, 0.95), (2.0, 0.6)):
    scaled = base.astype(np.float64) / temperature
    full, top4 = _draws(jnp.asarray(np.tile(base, (20000, 1))), jax.random.key(1), jnp.float32(temperature),
                        jnp.float32(top_p))
    in_top4 = np.isin(np.arange(len(base)), np.argsort(-base)[:4])
    for draws, allowed in ((full, np.ones(len(base), bool)), (top4, in_top4)):
      masked = np.where(allowed, scaled, -np.inf)
      keep = nucleus_reference(masked, top_p) & allowed
      p = np.where(keep, np.exp(scaled - scaled.max()), 0.0)
      freq = np.bincount(np.asarray(draws), minlength=len(base)) / len(draws)
      assert set(np.flatnonzero(freq)) <= set(np.flatnonzero(keep))
      np.testing.assert_allclose(freq, p / p.sum(), atol=0.014, err_msg=f"T={temperature} top_p={top_p}")


def test_decoding_generate_takes_top_p(lm):
  model = random_weights(lm).model
  prompt = jnp.asarray([generation.encode_lm_prompt(lm, "def ")])
  greedy = decoding.generate(model, prompt, max_new_tokens=6)
  tiny = decoding.generate(model, prompt, max_new_tokens=6, temperature=1.0, top_p=1e-6, rng=jax.random.key(0))
  np.testing.assert_array_equal(tiny, greedy)  # a nucleus of one token is the argmax
  for bad in (0.0, 1.5, True):
    with pytest.raises(ValueError, match="top_p"):
      decoding.generate(model, prompt, max_new_tokens=2, temperature=1.0, top_p=bad, rng=jax.random.key(0))


# ---- checkpoints and errors -----------------------------------------------------------


def test_step_and_average_last_choose_the_checkpoint(lm_run, lm):
  assert (lm.step, lm.steps) == (3, [3])
  first = generation.load(smoke(), str(lm_run), step=1)
  averaged = generation.load(smoke(), str(lm_run), average_last=3)
  assert first.steps == [1] and averaged.steps == [1, 2, 3]
  leaves = lambda loaded: jax.tree.leaves(loaded.state)
  assert any(not np.array_equal(a, b) for a, b in zip(leaves(first), leaves(lm), strict=True))
  assert any(not np.array_equal(a, b) for a, b in zip(leaves(averaged), leaves(lm), strict=True))
  with pytest.raises(UserError, match=r"no checkpoint step 7 .* has steps \[1, 2, 3\]"):
    generation.load(smoke(), str(lm_run), step=7)
  with pytest.raises(UserError, match="give one of them"):
    generation.load(smoke(), str(lm_run), step=1, average_last=2)
  with pytest.raises(UserError, match=r"last 4 checkpoints: .* only 3 usable .*--average_last=3"):
    generation.load(smoke(), str(lm_run), average_last=4)


def test_bad_workdirs_and_configs_are_one_line_user_errors(lm_run, tmp_path):
  with pytest.raises(UserError, match="no checkpoint in .*train first"):
    generation.load(smoke(), str(tmp_path))
  other = smoke()
  other.model.d_model = 48
  with pytest.raises(UserError, match="do not match this config"):
    generation.load(other, str(lm_run))
  with pytest.raises(UserError, match="'classification': a classifier has no text to generate.*eval.py"):
    generation.check_config(smoke("classification"))
  with pytest.raises(UserError, match="invalid config: config.task='poetry'; expected one of"):
    generation.check_config(smoke("poetry"))


def test_bad_prompts_are_one_line_user_errors(lm, tmp_path):
  with pytest.raises(UserError, match="--prompt number 2 is empty"):
    generation.read_prompts(["def ", ""], None)
  blank = tmp_path / "prompts.txt"
  blank.write_text("def \n\nclass ")
  with pytest.raises(UserError, match="line 2 of .*prompts.txt is empty"):
    generation.read_prompts(None, str(blank))
  with pytest.raises(UserError, match="not both"):
    generation.read_prompts(["x"], str(blank))
  with pytest.raises(UserError, match="cannot read --input"):
    generation.read_prompts(None, str(tmp_path / "missing.txt"))
  with pytest.raises(UserError, match="prompt is empty"):
    generation.encode_lm_prompt(lm, "")
  long = "x = 1\n" * 10  # 60 bytes + BOS > 32
  with pytest.raises(UserError, match=r"61 tokens long, more than the model's limit of 32 tokens.*--truncate"):
    list(generation.stream_lm(lm, long, max_new_tokens=2))
  cut = generation.encode_lm_prompt(lm, long, truncate=True)
  np.testing.assert_array_equal(cut, lm.tokenizer.encode(long)[-32:])
  assert len(list(generation.lm_tokens(lm, cut, max_new_tokens=3))) <= 3
  for settings, message in ((dict(top_p=0.0), "top_p=0.0 must be"), (dict(top_k=261), r"top_k=261 .*\[1, 260\]"),
                            (dict(temperature=-1.0), "temperature=-1.0"), (dict(max_new_tokens=0), "max_new")):
    with pytest.raises(UserError, match=message):
      generation.check_sampling(lm, **{**dict(max_new_tokens=4, temperature=1.0, top_k=None, top_p=None),
                                       **settings})


# ---- mlm and seq2seq ------------------------------------------------------------------


def test_fill_masks_gives_the_models_probabilities_at_each_mask(mlm_run):
  loaded = generation.load(smoke_mlm(), str(mlm_run))
  out = generation.fill_masks(loaded, "def f(x): re[MASK]urn x[MASK]", top_k=4)
  assert len(out) == 2 and all(len(fillers) == 4 for fillers in out)
  # The reference: the full logits of the row (BOS text EOS), unpadded, at the mask slots.
  tok = loaded.tokenizer
  ids = [tok.bos_id] + tok.encode("def f(x): re") + [tok.mask_id] + tok.encode("urn x") + [tok.mask_id, tok.eos_id]
  probs = np.asarray(jax.nn.softmax(loaded.model(jnp.asarray([ids]))[0], axis=-1))
  for fillers, slot in zip(out, [i for i, t in enumerate(ids) if t == tok.mask_id], strict=True):
    best = np.argsort(-probs[slot], kind="stable")[:4]
    assert [f for f, _ in fillers] == [generation.token_text(tok, int(t)) for t in best]
    np.testing.assert_allclose([p for _, p in fillers], probs[slot][best], rtol=1e-5, atol=1e-7)
  assert generation.token_text(tok, ord("a") + 4) == "a" and generation.token_text(tok, 0xE4 + 4) == "<0xE4>"
  with pytest.raises(UserError, match=r"input 2 'no mask here' has no \[MASK\]"):
    generation.check_inputs("mlm", ["a [MASK]", "no mask here"])
  with pytest.raises(UserError, match=r"has no \[MASK\]"):
    generation.fill_masks(loaded, "no mask here")
  with pytest.raises(UserError, match="limit of 32 tokens"):
    generation.fill_masks(loaded, "[MASK]" + "x" * 40)
  assert len(generation.fill_masks(loaded, "[MASK]" + "x" * 40, truncate=True)) == 1
  with pytest.raises(UserError, match=r"would cut 1 of the 2 \[MASK\]"):
    generation.fill_masks(loaded, "[MASK]" + "x" * 40 + "[MASK]", truncate=True)


def test_translations_of_a_padded_batch_equal_each_sentence_decoded_alone(s2s_run):
  loaded = generation.load(s2s_config(s2s_run), str(s2s_run / "work"))
  sentences = ["Open file", "Save", "Message number 3: %s"]
  assert len(list(generation.translate(loaded, sentences, beam_size=2, max_len=6))) == 3
  # Random large weights translate into varied text; batches of 2 (the last one padded with a
  # dummy row) over sources of several lengths must give what each sentence gives alone.
  model = random_weights(loaded, embed_init_std=1.0)
  tok = model.tokenizer
  got = list(generation.translate(model, sentences, beam_size=3, max_len=6, batch_size=2))
  alone = []
  for s in sentences:
    out, _ = decoding.beam_search(model.model, jnp.asarray([tok.encode(s) + [tok.eos_id]]), beam_size=3, alpha=0.6,
                                  max_len=6, bos_id=tok.bos_id, eos_id=tok.eos_id, pad_id=tok.pad_id)
    row = [int(t) for t in np.asarray(out)[0, 0]]
    alone.append(tok.decode(row[:row.index(tok.eos_id)] if tok.eos_id in row else row))
  assert got == alone and len(set(got)) > 1, got
  assert len(list(generation.translate(model, sentences, greedy=True, max_len=6, batch_size=2))) == 3
  with pytest.raises(UserError, match="sentence 2 .* more than the model's limit of 32 tokens"):
    list(generation.translate(loaded, ["Save", "Open file " * 30]))
  assert len(list(generation.translate(loaded, ["Save", "Open file " * 30], truncate=True, max_len=4))) == 2


# ---- the command line ------------------------------------------------------------------


def run_cli(*args, stdin=None):
  return subprocess.run([sys.executable, os.path.join(ROOT, "generate.py"), *args], capture_output=True, text=True,
                        input=stdin, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=ROOT)


def test_cli_lm_streams_the_greedy_continuation(lm_run, lm):
  out = run_cli("--config", "configs/default.py:smoke", "--workdir", str(lm_run), "--prompt", "def f(x):",
                "--max_new_tokens", "20", f"--config.data.data_dir={DATA_DIR}")
  assert out.returncode == 0, out.stderr
  assert out.stdout == "def f(x):" + "".join(generation.stream_lm(lm, "def f(x):", max_new_tokens=20)) + "\n"
  assert "step 3" in out.stderr
  from roformer_jax.training import launch  # issue 40: none of the known noise (TPU probe, orbax read-only, TFDS)
  assert not [start for _, start, _ in launch.NOISE if start in out.stderr], out.stderr


def test_cli_seq2seq_translates_one_line_per_input_line(s2s_run):
  out = run_cli("--config", "configs/gettext_translate.py:smoke", "--workdir", str(s2s_run / "work"),
                f"--config.data.locale_dir={s2s_run / 'locale'}", f"--config.data.data_dir={s2s_run / 'data'}",
                "--input", "-", "--beam_size", "2", "--max_new_tokens", "6", stdin="Open file\nSave\nQuit\n")
  assert out.returncode == 0, out.stderr
  assert len(out.stdout.split("\n")) == 4 and out.stdout.endswith("\n")  # three lines, one per sentence


def test_cli_mlm_prints_the_top_fillers(mlm_run):
  out = run_cli("--workdir", str(mlm_run), "--prompt", "x = [MASK]", "--top_k", "3")  # the run's own config
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  assert lines[0] == "x = [MASK]" and lines[1].startswith("  [MASK] 1: ") and lines[1].count(" 0.") == 3


@pytest.mark.slow
def test_cli_errors_print_one_line_and_exit_2(tmp_path):
  out = run_cli("--config", "configs/default.py:smoke", "--workdir", str(tmp_path), "--prompt", "def ")
  assert out.returncode == 2
  assert out.stderr.splitlines()[0].startswith("generate.py: error: no checkpoint in ")
  assert "Traceback" not in out.stderr and out.stdout == ""
