"""Which YaRN rope_parameters transformers warns about (or refuses): tests/golden/hf_yarn_warnings.json.

Run with a Python that has transformers (not a dependency of this project), from the repository
root:
  /work/refvenv/bin/python scripts/make_yarn_warnings_golden.py   # writes tests/golden/hf_yarn_warnings.json

For each case the script builds `LlamaConfig(max_position_embeddings=..., rope_parameters=...)`,
which standardises the dict (original_max_position_embeddings falls back to
max_position_embeddings) and runs `validate_rope`, i.e. `_validate_yarn_rope_parameters`. It
records every message transformers logs (its `warning_once` cache is cleared per case, so no
message is lost to an earlier case) and what it raises: a KeyError for a missing required key (a
condition), or another error once it has warned (a str beta_fast: TypeError comparing it with
beta_slow). It classifies each message into a condition
id ("missing_keys", "unrecognized_keys", "factor", "attention_factor", "beta_fast_type",
"beta_slow_type", "beta_order", "implicit_factor"). An unclassified message stops the script:
transformers then warns about something the test does not know yet.

tests/test_rope_yarn_warnings.py checks `rope.scaling_warnings` (and the RopeConfigWarning a
RotaryConfig emits) against these conditions, each case's dict given as this library takes it:
rope_parameters plus the model config's max_position_embeddings.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import platform
import re
import sys

import transformers
from transformers import LlamaConfig

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "golden",
                   "hf_yarn_warnings.json")

BASE = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
# name -> (max_position_embeddings, rope_parameters)
CASES = {
    "clean": (16384, BASE),
    "clean_all_keys": (16384, {**BASE, "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707,
                               "attention_factor": 1.2, "truncate": False, "rope_theta": 10000.0}),
    "clean_v4_type_key": (16384, {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}),
    "implicit_factor_mismatch": (16384, {**BASE, "factor": 2.0}),
    "implicit_factor_one": (4096, BASE),  # max == original: transformers skips the comparison
    "missing_original_length": (16384, {"rope_type": "yarn", "factor": 4.0}),  # falls back to max: implicit 1
    "missing_factor": (16384, {"rope_type": "yarn", "original_max_position_embeddings": 4096}),
    "factor_none": (16384, {**BASE, "factor": None}),
    "factor_below_one": (2048, {**BASE, "factor": 0.5}),
    "factor_below_one_mismatch": (16384, {**BASE, "factor": 0.5}),
    "attention_factor_int": (16384, {**BASE, "attention_factor": 1}),
    "attention_factor_negative": (16384, {**BASE, "attention_factor": -0.5}),
    "beta_fast_str": (16384, {**BASE, "beta_fast": "32"}),
    "beta_slow_list": (16384, {**BASE, "beta_slow": [1]}),
    "beta_order": (16384, {**BASE, "beta_fast": 1, "beta_slow": 32}),
    "beta_order_default_fast": (16384, {**BASE, "beta_slow": 64}),
    "beta_equal": (16384, {**BASE, "beta_fast": 8, "beta_slow": 8}),
    "unknown_key": (16384, {**BASE, "beta_fst": 3}),
    "two_conditions": (16384, {**BASE, "factor": 2.0, "attention_factor": 1, "mscale_all": 1.0}),
}

CONDITIONS = [  # (condition id, pattern of transformers' message)
    ("missing_keys", r"^Missing required keys in `rope_parameters`"),
    ("unrecognized_keys", r"^Unrecognized keys in `rope_parameters`"),
    ("factor", r"factor field must be a float or int >= 1"),
    ("attention_factor", r"attention_factor field must be a float greater than 0"),
    ("beta_fast_type", r"beta_fast field must be a float or int"),
    ("beta_slow_type", r"beta_slow field must be a float or int"),
    ("beta_order", r"beta_fast field must be greater than beta_slow"),
    ("implicit_factor", r"^The explicitly set RoPE scaling factor"),
]


class _Collect(logging.Handler):
  def __init__(self):
    super().__init__()
    self.messages = []

  def emit(self, record):
    self.messages.append(record.getMessage())


def _condition(message: str) -> str:
  found = [cid for cid, pattern in CONDITIONS if re.search(pattern, message)]
  if len(found) != 1:
    raise SystemExit(f"unclassified transformers message (conditions {found}): {message!r}")
  return found[0]


def main() -> None:
  handler = _Collect()
  logging.getLogger("transformers").addHandler(handler)
  cases = []
  for name, (mpe, params) in CASES.items():
    handler.messages.clear()
    logging.Logger.warning_once.cache_clear()  # transformers' warning_once is an lru_cache over messages
    raised = missing = None
    try:
      LlamaConfig(max_position_embeddings=mpe, rope_parameters=copy.deepcopy(params))
    except KeyError as e:
      raised, missing = "KeyError", str(e.args[0])
    except Exception as e:  # noqa: BLE001 - e.g. a TypeError comparing a str beta_fast, after its warning
      cause = e.__cause__ or e
      raised = f"{type(cause).__name__}: {cause}"
    messages = handler.messages + ([missing] if missing else [])
    conditions = [_condition(m) for m in messages]
    assert len(set(conditions)) == len(conditions), (name, conditions)
    cases.append({"name": name, "max_position_embeddings": mpe, "rope_parameters": params,
                  "conditions": sorted(conditions), "raises": raised, "messages": messages})
    print(f"{name}: {sorted(conditions)}{f' (raises {raised})' if raised else ''}")
  golden = {
      "made_by": "scripts/make_yarn_warnings_golden.py",
      "versions": {"transformers": transformers.__version__, "python": platform.python_version()},
      "entry": "LlamaConfig(max_position_embeddings=..., rope_parameters=...) -> validate_rope -> "
               "_validate_yarn_rope_parameters",
      "cases": cases,
  }
  with open(OUT, "w") as f:
    json.dump(golden, f, indent=1)
    f.write("\n")
  print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
  main()
