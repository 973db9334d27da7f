"""Use a trained workdir: continue text, translate, or fill in [MASK] slots.

  python generate.py --workdir DIR [--config.key=value ...] (--prompt TEXT ... | --input FILE|-)

The run's own config is used (DIR/config.json, as eval.py; --config configs/<name>.py[:variant]
uses that file instead, with the run's overrides again). What it does follows
config.task (roformer_jax/evaluation/generation.py):
  lm        continues each prompt, printing each token as it is made; greedy by default, or
            sampled with --temperature, --top_k, --top_p (--seed, --num_samples); stops at EOS
            or after --max_new_tokens.
  seq2seq   translates each sentence (one a line in, one a line out; a newline inside a
            translation is written as \\n), beam 4 with length penalty 0.6 (--beam_size,
            --length_penalty), or --greedy.
  mlm       prints the --top_k (5) most probable fillers of each [MASK] in the text, with
            their probabilities (with the byte tokenizer each [MASK] is one byte).
Without --prompt or --input, the lines piped to stdin are the inputs.

The newest checkpoint that verifies is used, read-only (a trainer may be running); --step N
picks one, --average_last N averages the last N as eval.py does (an error if the workdir holds
fewer than N). A prompt longer than the model's context is an error unless --truncate. Takes
train.py's process flags (one process).
"""

import os
import sys

from absl import flags, logging
from ml_collections import config_flags

from roformer_jax.training import launch

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/<name>.py file (default: the run's "
                                          "own, DIR/config.json, via configs/workdir.py:DIR).")
_WORKDIR = flags.DEFINE_string("workdir", None, "The training run's workdir.")
flags.mark_flags_as_required(["workdir"])
_PROMPT = flags.DEFINE_multi_string("prompt", None, "An input text (repeatable): a prompt (lm), a sentence "
                                    "(seq2seq) or a text with [MASK] slots (mlm).")
_INPUT = flags.DEFINE_string("input", None, "A file of inputs, one a line; - reads stdin.")
_STEP = flags.DEFINE_integer("step", None, "Use this checkpoint step (default: the newest that verifies).")
_AVERAGE_LAST = flags.DEFINE_integer("average_last", 0, "Average the last N checkpoints' parameters (as eval.py).")
_TRUNCATE = flags.DEFINE_bool("truncate", False, "Cut an input longer than the model's limit instead of "
                              "failing (lm keeps the end of a prompt; seq2seq and mlm the start).")
# lm
_MAX_NEW_TOKENS = flags.DEFINE_integer("max_new_tokens", None, "lm: the most tokens to generate (default 256). "
                                       "seq2seq: the most target tokens (default: eval.py's max decode length).")
_TEMPERATURE = flags.DEFINE_float("temperature", None, "lm: 0 = greedy; > 0 samples softmax(logits / T). "
                                  "Default: greedy, or 1.0 when --top_k or --top_p is given.")
_TOP_K = flags.DEFINE_integer("top_k", None, "lm: sample among the k most likely tokens. mlm: the fillers "
                              "shown per [MASK] (default 5).")
_TOP_P = flags.DEFINE_float("top_p", None, "lm: nucleus sampling, among the most likely tokens whose "
                            "probability reaches p (0 < p <= 1).")
_SEED = flags.DEFINE_integer("seed", 0, "lm: the random seed of sampling (the same seed, the same text).")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 1, "lm: samples per prompt (needs sampling).")
_ECHO = flags.DEFINE_bool("echo", True, "lm: print the prompt before its continuation.")
# seq2seq
_BEAM_SIZE = flags.DEFINE_integer("beam_size", 4, "seq2seq: beams (Sec. 4.1: 4).")
_LENGTH_PENALTY = flags.DEFINE_float("length_penalty", 0.6, "seq2seq: the GNMT length-penalty alpha (Sec. 4.1: 0.6).")
_GREEDY = flags.DEFINE_bool("greedy", False, "seq2seq: greedy decoding instead of beam search.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 32, "seq2seq: sentences decoded together.")

DEFAULT_MAX_NEW_TOKENS = 256


def flag_uses() -> dict[str, tuple[str, ...]]:
  """The flags that only some kinds of generation read (`tasks.Task.generates`): giving one to
  a task that does another is a mistake worth a word."""
  from roformer_jax.training.tasks import CONTINUE, FILL_MASKS, TRANSLATE

  return {
      "max_new_tokens": (CONTINUE, TRANSLATE), "top_k": (CONTINUE, FILL_MASKS),
      "temperature": (CONTINUE,), "top_p": (CONTINUE,), "seed": (CONTINUE,), "num_samples": (CONTINUE,),
      "echo": (CONTINUE,),
      "beam_size": (TRANSLATE,), "length_penalty": (TRANSLATE,), "greedy": (TRANSLATE,), "batch_size": (TRANSLATE,),
  }


def _check_task_flags(task) -> None:
  from roformer_jax.training import tasks
  from roformer_jax.errors import UserError

  for name, used_by in flag_uses().items():
    if task.generates not in used_by and flags.FLAGS[name].present:
      for_tasks = [t for t in tasks.names() if tasks.get(t).generates in used_by]
      raise UserError(f"--{name} is for {' and '.join(for_tasks)} configs; this config's task is {task.name!r}.")


def _lm(loaded, prompts: list[str], out) -> None:
  from roformer_jax.evaluation import generation
  from roformer_jax.errors import UserError

  sampling_flags = _TOP_K.value is not None or _TOP_P.value is not None
  temperature = _TEMPERATURE.value
  if temperature is None:
    temperature = 1.0 if sampling_flags else 0.0
  elif temperature == 0 and sampling_flags:
    raise UserError("--temperature=0 is greedy decoding, where --top_k and --top_p do nothing; give a temperature "
                    "> 0 (e.g. 1.0) to sample, or drop them.")
  if _NUM_SAMPLES.value < 1:
    raise UserError(f"--num_samples={_NUM_SAMPLES.value} must be >= 1.")
  if _NUM_SAMPLES.value > 1 and temperature == 0:
    raise UserError(f"--num_samples={_NUM_SAMPLES.value} with greedy decoding would print the same text "
                    f"{_NUM_SAMPLES.value} times; sample with --temperature (e.g. 1.0), --top_k or --top_p.")
  settings = dict(max_new_tokens=_MAX_NEW_TOKENS.value or DEFAULT_MAX_NEW_TOKENS, temperature=temperature,
                  top_k=_TOP_K.value, top_p=_TOP_P.value)
  generation.check_sampling(loaded, **settings)
  for prompt in prompts:  # every prompt is checked before the first one streams
    generation.encode_lm_prompt(loaded, prompt, truncate=_TRUNCATE.value)
  several = len(prompts) * _NUM_SAMPLES.value > 1
  for p, prompt in enumerate(prompts):
    for s in range(_NUM_SAMPLES.value):
      if several:
        out.write(f"{'' if p == s == 0 else chr(10)}==> prompt {p + 1}, sample {s + 1} <==\n")
      if _ECHO.value:
        out.write(prompt)
      out.flush()
      # Numbered across prompts, so that two prompts do not share their random draws.
      sample = p * _NUM_SAMPLES.value + s
      for piece in generation.stream_lm(loaded, prompt, seed=_SEED.value, sample=sample, truncate=_TRUNCATE.value,
                                        **settings):
        out.write(piece)
        out.flush()
      out.write("\n")
      out.flush()


def _seq2seq(loaded, sentences: list[str], out) -> None:
  from roformer_jax.evaluation import generation

  for translation in generation.translate(loaded, sentences, beam_size=_BEAM_SIZE.value,
                                          alpha=_LENGTH_PENALTY.value, greedy=_GREEDY.value,
                                          max_len=_MAX_NEW_TOKENS.value, batch_size=_BATCH_SIZE.value,
                                          truncate=_TRUNCATE.value):
    out.write(translation.replace("\n", "\\n") + "\n")  # one line per sentence
    out.flush()


def _mlm(loaded, texts: list[str], out) -> None:
  from roformer_jax.evaluation import generation

  top_k = 5 if _TOP_K.value is None else _TOP_K.value
  for i, text in enumerate(texts):
    fillers = generation.fill_masks(loaded, text, top_k=top_k, truncate=_TRUNCATE.value)
    out.write(("\n" if i else "") + text + "\n")
    for m, options in enumerate(fillers):
      shown = "  ".join(f"{filler!r} {p:.3f}" for filler, p in options)
      out.write(f"  [MASK] {m + 1}: {shown}\n")
    out.flush()


def main(argv):
  del argv
  launch.initialize()
  if not flags.FLAGS["verbosity"].present:
    # Orbax warns at every read-only restore that it ignores its save options; the warnings
    # that matter here (a damaged checkpoint) are printed by checkpoints.warn, not logged.
    logging.set_verbosity(logging.ERROR)
  from roformer_jax.training import tasks
  from roformer_jax.evaluation import evaluate, generation

  config = _CONFIG.value
  generation.check_config(config)
  task = tasks.get(config.task)
  _check_task_flags(task)
  texts = generation.read_prompts(_PROMPT.value, _INPUT.value)
  generation.check_inputs(task, texts)  # before the model loads: mistakes show at once
  loaded = generation.load(config, _WORKDIR.value, step=_STEP.value, average_last=_AVERAGE_LAST.value)
  used = evaluate.checkpoints_used(loaded.steps)
  print(f"generate.py: {config.task} model of {_WORKDIR.value}, {used}", file=sys.stderr)
  try:
    {tasks.CONTINUE: _lm, tasks.TRANSLATE: _seq2seq, tasks.FILL_MASKS: _mlm}[task.generates](loaded, texts, sys.stdout)
    sys.stdout.flush()
  except BrokenPipeError:  # `generate.py ... | head`: the reader has all it wanted
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit


if __name__ == "__main__":
  launch.run(main, saved_config=os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "workdir.py"))
