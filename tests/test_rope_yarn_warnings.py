"""Issue 37 item 11: the YaRN configs transformers 5.24 warns about (or refuses) warn here too.

The cases and which conditions transformers flags for each are recorded from transformers itself
in tests/golden/hf_yarn_warnings.json (scripts/make_yarn_warnings_golden.py). Each case's dict is
given as this library takes it: rope_parameters plus the model config's max_position_embeddings.
"""

import json
import pathlib
import warnings

import pytest

from roformer_jax import rope
from roformer_jax.models import ModelConfig
from roformer_jax.rope import RopeConfigWarning, RotaryConfig
from roformer_jax.rope.frequencies import normalise_scaling

GOLDEN = json.loads((pathlib.Path(__file__).parent / "golden" / "hf_yarn_warnings.json").read_text())
CASES = {case["name"]: case for case in GOLDEN["cases"]}
MISMATCH = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 4096}


def _scaling(case):
  return {**case["rope_parameters"], "max_position_embeddings": case["max_position_embeddings"]}


def _caught(build):
  """The RopeConfigWarning messages build() emits (all of them) and what it raised, if anything."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
      build()
      raised = None
    except (TypeError, ValueError) as e:
      raised = e
  return [str(w.message) for w in caught if issubclass(w.category, RopeConfigWarning)], raised


def test_golden_comes_from_transformers_5_24():
  assert GOLDEN["versions"]["transformers"] == "5.24.0"
  assert {c for case in CASES.values() for c in case["conditions"]} == {
      "missing_keys", "unrecognized_keys", "factor", "attention_factor", "beta_fast_type", "beta_slow_type",
      "beta_order", "implicit_factor"}  # every condition transformers has for yarn is covered
  assert [name for name, case in CASES.items() if not case["conditions"]] == [
      "clean", "clean_all_keys", "clean_v4_type_key", "implicit_factor_one", "missing_original_length", "beta_equal"]


@pytest.mark.parametrize("name", CASES)
def test_same_conditions_as_transformers(name):
  case = CASES[name]
  params = normalise_scaling(_scaling(case), 10000.0)
  assert sorted(c for c, _ in rope.scaling_warnings(params)) == case["conditions"]


@pytest.mark.parametrize("name", CASES)
def test_a_spec_warns_once_per_condition(name):
  """RotaryConfig (and so ModelConfig and from_hf_config) warns at construction; a config
  transformers then fails on (a str beta_fast) fails here too, after the same warning."""
  case = CASES[name]
  messages, raised = _caught(lambda: RotaryConfig(scaling=_scaling(case)))
  assert len(messages) == len(case["conditions"]), messages
  assert (raised is not None) == (case["raises"] not in (None, "KeyError")), raised


def test_messages_name_the_key_the_value_and_the_fix():
  params = normalise_scaling({**MISMATCH, "max_position_embeddings": 16384}, 10000.0)
  [(_, message)] = rope.scaling_warnings(params)
  assert "'factor'=2.0" in message and "16384 / 4096 = 4" in message
  assert "Set original_max_position_embeddings to the pre-training length" in message and "factor to 4" in message
  params = normalise_scaling(_scaling(CASES["missing_factor"]), 10000.0)
  [(_, message)] = rope.scaling_warnings(params)
  assert "no 'factor'" in message and "= 16384 / 4096 = 4 is used" in message and "KeyError" in message
  params = normalise_scaling(_scaling(CASES["attention_factor_int"]), 10000.0)
  [(_, message)] = rope.scaling_warnings(params)
  assert "'attention_factor'=1 " in message and "write it as 1.0" in message


def test_model_config_and_hf_config_warn_and_clean_ones_do_not():
  with pytest.warns(RopeConfigWarning, match="does not match max_position_embeddings"):
    ModelConfig(rope_scaling={**MISMATCH, "max_position_embeddings": 16384})
  hf = {"model_type": "llama", "max_position_embeddings": 16384, "hidden_size": 64, "num_attention_heads": 4,
        "rope_parameters": {**MISMATCH, "rope_theta": 10000.0}}
  with pytest.warns(RopeConfigWarning, match=r"16384 / 4096 = 4"):
    rope.from_hf_config(hf)
  with warnings.catch_warnings():
    warnings.simplefilter("error", RopeConfigWarning)
    ModelConfig(rope_scaling={**MISMATCH, "factor": 4.0, "max_position_embeddings": 16384})
    rope.from_hf_config({**hf, "rope_parameters": {**MISMATCH, "factor": 4.0, "rope_theta": 10000.0}})
    RotaryConfig(scaling={"rope_type": "linear", "factor": 0.5})  # only yarn's conditions so far
