"""A training run's own config: eval.py and generate.py read it from the workdir.

train.py writes `<workdir>/config.json` (the config with every --config override applied). With
`--workdir W` and no `--config`, eval.py and generate.py load that file through
`configs/workdir.py` (`--config=configs/workdir.py:W`), so `--config.key=value` overrides still
apply on top of it, for evaluation settings. A restore that does not fit names the config keys
that differ between the run and the request (`differences`), before any parameter path.

The JSON loses two things a config file has, and `load` puts them back:
- tuples: JSON writes them as lists; every list becomes a tuple again (the configs write
  sequences as tuples, and the code reads any sequence);
- the type of a field left None: it becomes a placeholder that takes any literal
  (`--config.model.head_dim=64`), as `configs/common.py` declares such fields.
"""

from __future__ import annotations

import json
import os
from typing import Any

import ml_collections

CONFIG_FILE = "config.json"
# Keys a request changes without a mismatch to report: evaluation settings, and where the data
# lives on this machine.
_EVAL_ONLY = ("eval.", "data.data_dir", "data.locale_dir")


def saved_path(workdir: str) -> str:
  return os.path.join(workdir, CONFIG_FILE)


def _typed(value: Any) -> Any:
  if isinstance(value, dict):
    return ml_collections.ConfigDict({k: _typed(v) for k, v in value.items()})
  if isinstance(value, list):
    return tuple(_untyped_item(v) for v in value)
  if value is None:
    return ml_collections.config_dict.placeholder(object)
  return value


def _untyped_item(value: Any) -> Any:  # inside a sequence: plain values (a dict stays a dict)
  if isinstance(value, list):
    return tuple(_untyped_item(v) for v in value)
  return value


def read(workdir: str) -> dict[str, Any] | None:
  """The run's saved config as JSON (None if the workdir has none)."""
  path = saved_path(workdir)
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def load(workdir: str) -> ml_collections.ConfigDict:
  """The run's config, from `<workdir>/config.json`, as a ConfigDict that takes overrides.

  Raises:
    ValueError: the workdir has no config.json (not a training workdir, or one from before
      train.py saved it), or it does not parse.
  """
  if not workdir:
    raise ValueError("--workdir is empty; name a training run's workdir, or pass --config.")
  try:
    saved = read(workdir)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"{saved_path(workdir)} does not read as a run's config ({e}); pass --config "
                     "configs/<name>.py with the run's overrides instead.") from e
  if saved is None:
    raise ValueError(f"{workdir} has no {CONFIG_FILE} (train.py writes it when a run starts): is it a training "
                     "run's workdir? Otherwise pass --config configs/<name>.py with the run's overrides.")
  return _typed(saved)


def with_saved_config(argv: list[str], config_file: str) -> list[str]:
  """argv with `--config=<config_file>:<workdir>` added where it names a --workdir but no --config.

  `config_file` is configs/workdir.py, whose get_config(workdir) is `load(workdir)`; absl then
  applies the `--config.key=value` overrides on top, as for any config file.
  """
  if any(a == "--config" or a.startswith("--config=") for a in argv[1:]):
    return argv
  workdir = None
  for i, a in enumerate(argv[1:], start=1):
    if a.startswith("--workdir="):
      workdir = a.split("=", 1)[1]
    elif a == "--workdir" and i + 1 < len(argv):
      workdir = argv[i + 1]
  if workdir is None:
    return argv
  return [argv[0], f"--config={config_file}:{os.path.abspath(workdir)}", *argv[1:]]


def _at(tree: Any, key: str) -> Any:
  for part in key.split("."):
    tree = tree.get(part) if isinstance(tree, dict) else None
  return tree


def _changed(asked: Any, run: Any, prefix: str = "") -> dict[str, Any]:
  """key -> requested value where `asked` differs from `run`, descending only where both are dicts: a setting
  that was None in the run and is a dict now (eval.rope_scaling) is one key, its whole dict the value."""
  if isinstance(asked, dict) and isinstance(run, dict):
    out: dict[str, Any] = {}
    for k in sorted(set(asked) | set(run)):
      out.update(_changed(asked.get(k), run.get(k), f"{prefix}{k}."))
    return out
  return {} if asked == run else {prefix[:-1]: asked}


def requested(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """What this request sets differently from the run's saved config (evaluation settings included, the data's
  location left out), key -> requested value: what an evaluation evaluated beyond the run as trained. Empty when
  the workdir saved no config."""
  saved = read(workdir)
  if saved is None:
    return {}
  changed = _changed(json.loads(config.to_json_best_effort()), saved)
  return {k: v for k, v in changed.items() if k not in ("data.data_dir", "data.locale_dir")}


def _text(value: Any) -> str:
  if isinstance(value, dict):
    return "-".join(_text(v) for v in value.values() if v is not None)
  if isinstance(value, (list, tuple)):
    return "-".join(_text(v) for v in value)
  return str(value)


def slug(asked: dict[str, Any]) -> str:
  """A file-name part naming what was asked: "" for nothing; else key-value pairs, each key's last part
  (`rope_scaling-yarn-4.0-128`), cut to 80 characters with a short hash of the whole when longer."""
  if not asked:
    return ""
  import hashlib
  import re

  text = "_".join(f"{k.split('.')[-1]}-{_text(v)}" for k, v in asked.items())
  text = re.sub(r"[^A-Za-z0-9._-]+", "", text.replace(" ", "")).strip("._-") or "settings"
  if len(text) > 80:
    text = f"{text[:71]}-{hashlib.sha1(json.dumps(asked, sort_keys=True, default=str).encode()).hexdigest()[:8]}"
  return text


def differences(config: ml_collections.ConfigDict, workdir: str) -> list[str]:
  """The keys whose value in `config` differs from the run's saved config, as `key: 'run' in the
  run, 'requested' requested`; evaluation-only keys are left out. Empty when the workdir saved no
  config."""
  saved = read(workdir)
  if saved is None:
    return []
  changed = _changed(json.loads(config.to_json_best_effort()), saved)  # the one comparison requested() makes too
  keys = [k for k in changed if not any(k == p or k.startswith(p) for p in _EVAL_ONLY)]
  return [f"{k}: {_at(saved, k)!r} in the run, {changed[k]!r} requested" for k in keys]


__all__ = ["CONFIG_FILE", "differences", "load", "read", "requested", "saved_path", "slug", "with_saved_config"]
