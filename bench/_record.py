"""Saves one benchmark run's headline figures for bench/report.py (`--record`).

A bench script calls `save(...)` at its end; the file `<out_dir>/<bench>.json` then holds
the figures, the table the script printed, its full JSON summary, and where the run came
from: the exact command (with the environment variables that change the timings), the
machine, the library versions and the git commit. bench/report.py turns every such file
into the generated block of docs/benchmarks.md.

out_dir defaults to $ROFORMER_BENCH_RESULTS if set (tests point it at a temporary
directory), else docs/bench_results/ in this repository.

Every bench also takes `--smoke` (`add_smoke_arg`): the tiniest run of the same code path, in
seconds, for tests and for the documented commands' check (tests/test_docs.py appends it).
Its figures measure nothing, so `record_name` keeps them out of docs/bench_results: a smoke
run records only where $ROFORMER_BENCH_RESULTS points, as `<bench>_smoke.json`, and
otherwise `--record` is a no-op with a note.
"""

from __future__ import annotations

import datetime
import json
import math
import numbers
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT_DIR = os.path.join(ROOT, "docs", "bench_results")
OUT_DIR_ENV = "ROFORMER_BENCH_RESULTS"
# Environment variables that change what a bench measures; the recorded command carries them.
ENV_IN_COMMAND = ("GLIBC_TUNABLES", "XLA_FLAGS")
VERSIONED = ("jax", "jaxlib", "flax", "optax")
FIGURE_KEYS = {"id", "name", "value", "unit", "goal", "met"}
REQUIRED_FIGURE_KEYS = ("id", "name", "value", "unit")
_BENCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def add_record_arg(parser) -> None:
  """Adds --record (store_true) to an argparse parser."""
  parser.add_argument("--record", action="store_true",
                      help="save this run's figures to docs/bench_results/<bench>.json for bench/report.py")


def add_smoke_arg(parser, what: str) -> None:
  """Adds --smoke (store_true); `what` says what it shrinks to, for --help."""
  parser.add_argument("--smoke", action="store_true",
                      help=f"the tiniest run of the same code path, in seconds, for tests: {what}. Its figures "
                      f"mean nothing: --record then writes only to ${OUT_DIR_ENV} (as <bench>_smoke.json), "
                      "never to docs/bench_results")


def record_name(bench: str, args) -> str | None:
  """The name to `save` this run under, or None when nothing is to be recorded.

  None without --record. A --smoke run is recorded as `<bench>_smoke` and only into an
  explicitly chosen directory ($ROFORMER_BENCH_RESULTS): its figures must never reach
  docs/bench_results and the report. Without that variable it prints why and returns None.
  """
  if not getattr(args, "record", False):
    return None
  if not getattr(args, "smoke", False):
    return bench
  if not os.environ.get(OUT_DIR_ENV):
    print(f"# --smoke: --record writes nothing (a smoke run's figures measure nothing); set {OUT_DIR_ENV} to a "
          f"directory to record them there as {bench}_smoke.json", file=sys.stderr)
    return None
  return f"{bench}_smoke"


def write_figure(draw, name: str, *, figure: str | None, smoke: bool) -> None:
  """Calls draw(path) for a bench's PNG: at `figure` if given, else docs/figures/<name>. Under
  --smoke the plot still runs, but into a temporary directory deleted afterwards, never over
  the docs' figure."""
  scratch = tempfile.mkdtemp(prefix=f"{os.path.splitext(name)[0]}_smoke_") if figure is None and smoke else None
  path = figure or os.path.join(scratch or os.path.join(ROOT, "docs", "figures"), name)
  try:
    draw(path)
    print(f"# wrote {os.path.relpath(path, ROOT)}" + (" (--smoke: deleted now)" if scratch else ""), file=sys.stderr)
  finally:
    if scratch:
      shutil.rmtree(scratch, ignore_errors=True)


def results_dir(out_dir: str | None = None) -> str:
  """out_dir, else $ROFORMER_BENCH_RESULTS, else <repo>/docs/bench_results."""
  return out_dir or os.environ.get(OUT_DIR_ENV) or DEFAULT_OUT_DIR


def figure(id: str, name: str, value, unit: str, *, goal: str | None = None, met: bool | None = None) -> dict:
  """One figure dict, as `save` expects it (a convenience; plain dicts work as well)."""
  return {"id": id, "name": name, "value": value, "unit": unit, "goal": goal, "met": met}


def save(bench: str, *, figures: list[dict], table: str, result: dict, out_dir: str | None = None,
         argv: list[str] | None = None) -> str:
  """Writes `<out_dir>/<bench>.json` atomically and returns its path.

  Args:
    bench: the result's name, also its file name: letters, digits, '_', '.', '-' (e.g. "rope").
    figures: the headline figures, each {"id": str, "name": str, "value": finite int or float,
      "unit": str, "goal": str or None (e.g. ">= 8x"), "met": bool or None}; "goal" and "met"
      may be left out (None). Ids are unique within the list, e.g. "B1.exact_fp32_vs_hf".
    table: the plain-text table the script printed.
    result: the script's full JSON summary; numpy scalars and arrays are converted, and
      non-finite floats are stored as null.
    out_dir: where to write; default $ROFORMER_BENCH_RESULTS, else <repo>/docs/bench_results.
    argv: the command line to record; default sys.argv.

  Returns:
    The path written.

  Raises:
    ValueError / TypeError: a malformed bench name, figure, table or result (before anything
      is written).
  """
  if not isinstance(bench, str) or not _BENCH_NAME.fullmatch(bench):
    raise ValueError(f"bench name {bench!r}: expected letters, digits, '_', '.' or '-' (it names the file "
                     "<bench>.json), e.g. 'rope'.")
  figures = check_figures(figures)
  if not isinstance(table, str):
    raise TypeError(f"table: expected the printed table as a str, got {type(table).__name__}.")
  if not isinstance(result, dict):
    raise TypeError(f"result: expected the script's JSON summary as a dict, got {type(result).__name__}.")
  record = {
      "bench": bench,
      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "command": command_line(sys.argv if argv is None else argv),
      "machine": machine(),
      "versions": versions(),
      "git_commit": git_commit(),
      "figures": figures,
      "table": table,
      "result": _jsonable(result, "result"),
  }
  text = json.dumps(record, indent=1, allow_nan=False) + "\n"
  out_dir = results_dir(out_dir)
  os.makedirs(out_dir, exist_ok=True)
  path = os.path.join(out_dir, f"{bench}.json")
  fd, tmp = tempfile.mkstemp(prefix=f".{bench}.", suffix=".tmp", dir=out_dir)
  try:
    with os.fdopen(fd, "w") as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a results file is for everyone to read
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
  return path


def check_figures(figures) -> list[dict]:
  if not isinstance(figures, (list, tuple)):
    raise TypeError(f"figures: expected a list of dicts, got {type(figures).__name__}.")
  out, seen = [], set()
  for i, fig in enumerate(figures):
    where = f"figures[{i}]"
    if not isinstance(fig, dict):
      raise TypeError(f"{where}: expected a dict with keys {sorted(FIGURE_KEYS)}, got {type(fig).__name__}.")
    missing = [k for k in REQUIRED_FIGURE_KEYS if k not in fig]
    if missing:
      raise ValueError(f"{where} ({fig.get('id', 'no id')}): missing {missing}; every figure needs "
                       f"{list(REQUIRED_FIGURE_KEYS)} (and may have 'goal', 'met').")
    unknown = sorted(set(fig) - FIGURE_KEYS)
    if unknown:
      raise ValueError(f"{where} ({fig['id']}): unknown keys {unknown}; allowed: {sorted(FIGURE_KEYS)}.")
    fid = fig["id"]
    if not isinstance(fid, str) or not fid.strip():
      raise ValueError(f"{where}: id must be a non-empty str, got {fid!r}.")
    where = f"{where} ({fid})"
    if fid in seen:
      raise ValueError(f"{where}: duplicate id; ids must be unique within a bench.")
    seen.add(fid)
    for key in ("name", "unit"):
      if not isinstance(fig[key], str):
        raise TypeError(f"{where}: {key} must be a str, got {type(fig[key]).__name__}.")
    value = fig["value"]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
      raise TypeError(f"{where}: value must be a real number, got {type(value).__name__} {value!r}.")
    value = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not math.isfinite(value):
      raise ValueError(f"{where}: value must be finite, got {value}; leave the figure out when it was not measured.")
    goal, met = fig.get("goal"), fig.get("met")
    if goal is not None and not isinstance(goal, str):
      raise TypeError(f"{where}: goal must be a str such as '>= 8x' or None, got {goal!r}.")
    if getattr(met, "dtype", None) is not None and met.dtype.kind == "b" and met.ndim == 0:
      met = bool(met)  # a numpy bool, from a comparison of numpy values
    if met is not None and not isinstance(met, bool):
      raise TypeError(f"{where}: met must be True, False or None, got {met!r}.")
    if met is not None and goal is None:
      raise ValueError(f"{where}: met is {met} but there is no goal; give the goal it was checked against.")
    out.append({"id": fid, "name": fig["name"], "value": value, "unit": fig["unit"], "goal": goal, "met": met})
  return out


def _jsonable(x, where: str):
  """x with numpy values converted and non-finite floats as None; raises TypeError for other objects."""
  if x is None or isinstance(x, (str, bool)):
    return x
  if isinstance(x, numbers.Integral):
    return int(x)
  if isinstance(x, numbers.Real):
    x = float(x)
    return x if math.isfinite(x) else None
  if isinstance(x, dict):
    return {str(k): _jsonable(v, f"{where}[{k!r}]") for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(x)]
  if hasattr(x, "tolist"):  # numpy arrays and scalars
    return _jsonable(x.tolist(), where)
  raise TypeError(f"{where}: {type(x).__name__} is not JSON-serialisable; convert it before saving.")


def command_line(argv: list[str]) -> str:
  """`[VAR=value ...] python <script relative to the repo> <args>`, shell-quoted."""
  script = os.path.abspath(argv[0])
  rel = os.path.relpath(script, ROOT)
  if rel.startswith(os.pardir):
    rel = argv[0]
  env = [f"{k}={shlex.quote(os.environ[k])}" for k in ENV_IN_COMMAND if os.environ.get(k)]
  return " ".join(env + ["python", shlex.quote(rel)] + [shlex.quote(a) for a in argv[1:]])


def machine() -> dict:
  """The accelerator (or CPU) JAX runs on, and the host."""
  import jax

  from bench.harness import cpu_isa, cpu_name, huge_pages

  device = jax.devices()[0]
  return {"platform": device.platform, "device_kind": device.device_kind, "device_count": jax.device_count(),
          "cpu": cpu_name(), "cpu_count": os.cpu_count(), "os": platform.platform(),
          "isa": cpu_isa(), "huge_pages": huge_pages()}


def versions() -> dict:
  from importlib.metadata import PackageNotFoundError, version

  out = {"python": platform.python_version()}
  for pkg in VERSIONED:
    try:
      out[pkg] = version(pkg)
    except PackageNotFoundError:
      out[pkg] = None
  return out


def git_commit() -> str | None:
  """HEAD's short hash, with "-dirty" when tracked files (results and the report aside) have changes."""
  try:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          timeout=30)
    if head.returncode != 0:
      return None
    # Earlier benches of the same `make bench` rewrite the results: they do not make the code dirty.
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                             ":(exclude)docs/bench_results", ":(exclude)docs/benchmarks.md"],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
  except (OSError, subprocess.SubprocessError):
    return None
  dirty = status.returncode == 0 and status.stdout.strip() != ""
  return head.stdout.strip() + ("-dirty" if dirty else "")
