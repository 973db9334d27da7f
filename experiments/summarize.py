"""The tables of docs/results.md, generated from the recorded results in experiments/results/.

  python experiments/summarize.py            # print the tables
  python experiments/summarize.py --write    # rewrite the generated blocks of docs/results.md
  python experiments/summarize.py --check    # exit 1 if a block of docs/results.md is out of date
  python experiments/summarize.py --record-default-run workdirs/default   # after `make train`

docs/results.md holds one generated block per experiment (E2-E8), between the lines
`<!-- summarize:<exp>:begin -->` and `<!-- summarize:<exp>:end -->`. Each block is the
command that produced experiments/results/<exp>.json and the tables made from it; everything
outside the markers is written by hand and left byte for byte. The output depends only on the
result files, so a second --write changes nothing, and the tests run --check.

A difference between two arms is called "within noise" when it is smaller than the larger
of the two arms' seed-to-seed ranges.

Wall times. `experiments/run.py` resumes finished runs: a re-run of an experiment (to add an
arm, or to re-evaluate) restores each finished run and evaluates it again, so the
`train_wall_s` it records for that run is the few seconds of the restore, not the training.
An entry marked `"resumed": true` in the result file is such a run; its wall time is printed
as "—" with a note, never as a training time.

The default run. `--record-default-run WORKDIR` reads the eval losses of a finished run of
configs/default.py (what `make train` trains) from WORKDIR/metrics.jsonl and writes them to
experiments/results/default_run.json, with the date, the git commit, the CPU model, and the
Python version and standard-library corpus size of the interpreter running this script (run it
with the interpreter, on the machine, that trained: the corpus is that Python's own source
files, so another Python gives other losses, and XLA's code for another CPU gives other losses
too). README.md and docs/measured.md quote that file, and tests/test_doc_figures.py checks them.

--smoke (which the docs test appends to every experiments/ command) never writes a committed
file: --record-default-run writes into a temporary directory and --write acts as --check.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "experiments", "results")
DOC = os.path.join(ROOT, "docs", "results.md")
EXPERIMENTS = ("e2", "e3", "e4", "e5", "e6", "e7", "e8")
REFERENCE = {"e2": "rope", "e3": "linear + RoPE", "e4": "rope", "e8": "rope"}


def markers(name: str) -> tuple[str, str]:
  return f"<!-- summarize:{name}:begin -->", f"<!-- summarize:{name}:end -->"


def load(name: str, results_dir: str = RESULTS) -> dict | None:
  path = os.path.join(results_dir, f"{name}.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


# --------------------------------------------------------------------------------------
# Tables.
# --------------------------------------------------------------------------------------


def final_losses(out: dict) -> dict[str, list[float]]:
  return {arm: [e["eval"]["loss"] for e in entries] for arm, entries in out["arms"].items()}


def loss_at(entry: dict, step: int) -> float:
  """Train loss at the logged step closest to `step` (convergence speed)."""
  steps, losses = zip(*entry["train_curve"], strict=True)
  return losses[int(np.argmin(np.abs(np.array(steps) - step)))]


def _resumed(entries: list[dict]) -> bool:
  return any(e.get("resumed") for e in entries)


def _wall(entries: list[dict]) -> str:
  return "—" if _resumed(entries) else f"{np.mean([e['train_wall_s'] for e in entries]):.0f}"


def arm_table(out: dict, reference: str) -> str:
  finals = final_losses(out)
  total = max(s for s, _ in next(iter(out["arms"].values()))[0]["train_curve"])
  lines = [f"| arm | eval loss, mean (seeds) | train loss at step {total // 4} (mean) | vs {reference} | "
           "train wall (s/run) |",
           "|---|---|---|---|---|"]
  ref = np.mean(finals[reference])
  ref_spread = np.ptp(finals[reference])
  for arm, losses in finals.items():
    entries = out["arms"][arm]
    early = np.mean([loss_at(e, total // 4) for e in entries])
    diff = np.mean(losses) - ref
    noise = max(np.ptp(losses), ref_spread)
    verdict = "—" if arm == reference else (
        f"{diff:+.4f} ({'within noise' if abs(diff) <= noise else 'beyond seed range'})")
    lines.append(f"| {arm} | {np.mean(losses):.4f} ({', '.join(f'{x:.4f}' for x in losses)}) | {early:.3f} | "
                 f"{verdict} | {_wall(entries)} |")
  return "\n".join(lines)


def length_table(out: dict) -> str:
  rows = {}
  lengths = []
  for arm, entries in out["arms"].items():
    lengths = [r["length"] for r in entries[0]["length_curve"]]
    rows[arm] = np.nanmean([[np.nan if r["loss"] is None else r["loss"] for r in e["length_curve"]]
                            for e in entries], 0)
    for label in entries[0].get("scaled", {}):
      rows[label] = np.nanmean([[r["loss"] for r in e["scaled"][label]] for e in entries], 0)
  lines = ["| method | " + " | ".join(f"L={n}" for n in lengths) + " |", "|---|" + "---|" * len(lengths)]
  for name, vals in rows.items():
    lines.append(f"| {name} | " + " | ".join("n/a" if np.isnan(v) else f"{v:.3f}" for v in vals) + " |")
  return "\n".join(lines)


def _range(values: list[float], fmt: str) -> str:
  lo, hi = format(min(values), fmt), format(max(values), fmt)
  return lo if lo == hi else f"{lo}–{hi}"


def translation_table(out: dict) -> str:
  """E5: test loss, BLEU with beam 4 and greedy, the beam's brevity penalty, per arm."""
  lines = ["| arm | test loss (nats/token) | BLEU beam 4 | BLEU greedy | brevity penalty (beam) | "
           "beam-4 eval wall (s/run) |",
           "|---|---|---|---|---|---|"]

  def cell(values, fmt, bold=False):
    mean = format(np.mean(values), fmt)
    return f"{f'**{mean}**' if bold else mean} ({', '.join(format(v, fmt) for v in values)})"

  for arm, entries in out["arms"].items():
    loss = [e["eval"]["loss"] for e in entries]
    beam = [e["eval"]["bleu"] for e in entries]
    greedy = [e["eval_greedy"]["bleu"] for e in entries]
    bp = [e["eval"]["bleu_bp"] for e in entries]
    wall = np.mean([e["eval_wall_s"] for e in entries])
    lines.append(f"| {arm} | {cell(loss, '.3f')} | {cell(beam, '.2f', bold=True)} | {cell(greedy, '.2f')} | "
                 f"{_range(bp, '.2f')} | {wall:.0f} |")
  return "\n".join(lines)


def _mean_range(values: list[float | None], fmt: str = ".3f") -> str:
  """'mean (a–b)' over seeds; a seed that never got a value makes the cell 'n/a'."""
  if not values or any(v is None for v in values):
    return "n/a"
  mean = format(float(np.mean(values)), fmt)
  return mean if len(values) == 1 else f"{mean} ({_range(values, fmt)})"


def _passkey_cells(entries: list[dict], metric: str, fmt: str) -> list[str]:
  """One cell per pass-key length: the metric's mean over depths, then 'mean (range)' over seeds."""
  per_seed = [[float(np.mean(row)) for row in e["passkey"][metric]] for e in entries]
  return [_mean_range([v[i] for v in per_seed], fmt) for i in range(len(per_seed[0]))]


def e6_tables(out: dict) -> str:
  """E6: loss by length, passkey accuracy by length, and the costs, one table each per target."""
  length = out["length"]
  targets = sorted({int(t) for arms in out["arms"].values() for t in arms})
  base_at_l = [e["length_curve"][0]["loss"] for e in out["base"]]
  parts = [f"The base at L={length}: eval loss {_mean_range(base_at_l)} (the target loss below)."]
  for factor in targets:
    arms = {arm: by[str(factor)] for arm, by in out["arms"].items() if str(factor) in by}
    lengths = [r["length"] for r in next(iter(arms.values()))[0]["length_curve"]]
    lines = [f"**Extension to {factor}L = {factor * length}.** Eval loss (nats/byte) by length, mean (seed range):", "",
             "| arm | " + " | ".join(f"{n}" for n in lengths) + " |", "|---|" + "---|" * len(lengths)]
    for arm, entries in arms.items():
      cells = [_mean_range([e["length_curve"][i]["loss"] for e in entries]) for i in range(len(lengths))]
      lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    parts.append("\n".join(lines))
    pk = {arm: entries for arm, entries in arms.items() if entries[0].get("passkey")}
    if pk:
      first = next(iter(pk.values()))[0]["passkey"]
      lines = [f"Passkey accuracy (exact, {len(first['depths'])} depths x {first['trials']} keys per length; "
               "mean over depths, seed range), and the costs:", "",
               "| arm | " + " | ".join(f"{n}" for n in first["lengths"]) +
               " | loss at L vs base | steps to the target at 4L |",
               "|---|" + "---|" * (len(first["lengths"]) + 2)]
      for arm, entries in pk.items():
        cells = _passkey_cells(entries, "accuracy", ".2f")
        given_up = [e["length_curve"][0]["loss"] - b for e, b in zip(entries, base_at_l, strict=True)]
        steps = "—" if "steps_to_target" not in entries[0] or factor != 4 else ", ".join(
            "not reached" if e["steps_to_target"] is None else str(e["steps_to_target"]) for e in entries)
        # (No wall-time column: a re-run restores finished runs, so its times are not training times.)
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {_mean_range(given_up, '+.3f')} | {steps} |")
      parts.append("\n".join(lines))
      nll = {arm: entries for arm, entries in pk.items() if entries[0]["passkey"].get("answer_nll")}
      if nll:
        lines = ["The answer's negative log-likelihood, nats per digit (teacher-forced; mean over depths, seed "
                 "range; ln 10 = 2.30 is a uniform guess among the digits, 0 a certain copy):", "",
                 "| arm | " + " | ".join(f"{n}" for n in first["lengths"]) + " |",
                 "|---|" + "---|" * len(first["lengths"])]
        for arm, entries in nll.items():
          lines.append(f"| {arm} | " + " | ".join(_passkey_cells(entries, "answer_nll", ".2f")) + " |")
        parts.append("\n".join(lines))
  return "\n\n".join(parts)


def resolution_table(out: dict) -> str:
  """E7: validation accuracy per arm at each evaluation resolution, mean (seed range)."""
  sizes = sorted({int(r) for entries in out["arms"].values() for r in entries[0]["resolutions"]})
  trained = sizes[0]
  lines = ["| arm | " + " | ".join(f"{r} px ({r // 4}x{r // 4} patches)" for r in sizes) +
           f" | change {trained} → {sizes[-1]} px |", "|---|" + "---|" * (len(sizes) + 1)]
  for arm, entries in out["arms"].items():
    acc = lambda e, r: e["resolutions"][str(r)]["accuracy"]
    cells = [_mean_range([acc(e, r) for e in entries]) for r in sizes]
    change = _mean_range([acc(e, sizes[-1]) - acc(e, trained) for e in entries], "+.3f")
    lines.append(f"| {arm} | " + " | ".join(cells) + f" | {change} |")
  return "\n".join(lines)


def length_range_table(out: dict) -> str:
  """Eval loss by evaluation length per arm, mean (seed range)."""
  first = next(iter(out["arms"].values()))[0]
  lengths = [r["length"] for r in first["length_curve"]]
  lines = ["| arm | " + " | ".join(f"L={n}" for n in lengths) + " |", "|---|" + "---|" * len(lengths)]
  for arm, entries in out["arms"].items():
    cells = [_mean_range([e["length_curve"][i]["loss"] for e in entries]) for i in range(len(lengths))]
    lines.append(f"| {arm} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def passkey_tables(out: dict) -> str:
  """Pass-key answer NLL and exact-match accuracy by prompt length, mean over depths, seed range."""
  pk = {arm: entries for arm, entries in out["arms"].items() if entries[0].get("passkey")}
  if not pk:
    return ""
  first = next(iter(pk.values()))[0]["passkey"]
  head = "| arm | " + " | ".join(f"{n}" for n in first["lengths"]) + " |"
  rule = "|---|" + "---|" * len(first["lengths"])
  parts = []
  for metric, fmt, text in (
      ("answer_nll", ".2f", "The pass key's answer, negative log-likelihood in nats per digit (teacher-forced; ln 10 = "
                            "2.30 is a uniform guess among the digits)"),
      ("accuracy", ".2f", "Pass-key exact match (greedy decoding of the 5 digits)")):
    lines = [f"{text}, by prompt length; {len(first['depths'])} depths x {first['trials']} keys, mean over depths "
             "(seed range):", "", head, rule]
    for arm, entries in pk.items():
      lines.append(f"| {arm} | " + " | ".join(_passkey_cells(entries, metric, fmt)) + " |")
    parts.append("\n".join(lines))
  return "\n\n".join(parts)


def header(out: dict, *, wall_column: bool = True) -> str:
  line = f"`{out['command']}`, seeds {out['seeds']}, total {out['wall_s']:.0f} s"
  if any(_resumed(entries) for entries in out["arms"].values()):
    line += (" (this invocation resumed runs that an earlier one had finished: it restored and "
             "re-evaluated them, so their training wall time is not recorded"
             + (", shown as —)" if wall_column else ")"))
  return line


def block(name: str, out: dict) -> str:
  """The text of one generated block (without the markers)."""
  if name == "e6":
    commands = out.get("commands", [out["command"]])
    how = " and ".join(f"`{c}`" for c in commands)
    if len(commands) > 1:
      how += " (one invocation each), merged by `python experiments/run.py e6 --merge <their result files> --publish`"
    text = f"{how}; seeds {out['seeds']}, total {out['wall_s']:.0f} s"
    again = out.get("reevaluation")
    if again:  # the same commands re-run on the finished runs: they restore and evaluate again
      text += (f". Re-evaluated on {again['date']} by the same commands ({again['wall_s']:.0f} s): "
               f"{again['why']}.")
    if out.get("timing_note"):
      text += " " + out["timing_note"]
    return text + "\n\n" + e6_tables(out)
  parts = [header(out, wall_column=name != "e5")]
  if name == "e5":
    parts.append(translation_table(out))
    parts.append("Per-seed values in parentheses, in the order of seeds "
                 f"{out['seeds']}; BLEU is sacreBLEU on the test split.")
  elif name == "e7":
    parts.append("Validation accuracy (the 2,000 validation scenes, 4 classes, chance 0.25), mean (seed range):")
    parts.append(resolution_table(out))
  elif name == "e8":
    parts.append(arm_table(out, REFERENCE[name]))
    parts.append("Eval loss (nats/byte) by evaluation length, mean (seed range):")
    parts.append(length_range_table(out))
    parts.append(passkey_tables(out))
  else:
    parts.append(arm_table(out, REFERENCE[name]))
    if name == "e4":
      parts.append(length_table(out))
  return "\n\n".join(parts)


def blocks(results_dir: str = RESULTS) -> dict[str, str]:
  """{experiment: block text} for every experiment that has a result file."""
  out = {}
  for name in EXPERIMENTS:
    result = load(name, results_dir)
    if result is not None:
      out[name] = block(name, result)
  return out


# --------------------------------------------------------------------------------------
# The default run (README.md, docs/measured.md).
# --------------------------------------------------------------------------------------


def _cpu_name() -> str:
  """The CPU model (/proc/cpuinfo), as the benches record it: XLA's CPU code, and so the losses,
  depend on it."""
  import platform
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def record_default_run(workdir: str, results_dir: str = RESULTS) -> str:
  """Writes <results_dir>/default_run.json from a finished configs/default.py run; returns its path."""
  import datetime
  import platform
  import subprocess
  sys.path.insert(0, ROOT)
  from roformer_jax.training.data import corpus  # the corpus this interpreter would build

  if not os.path.isfile(os.path.join(workdir, "metrics.jsonl")):
    raise ValueError(f"{workdir}: no metrics.jsonl; pass the workdir of a finished configs/default.py run "
                     "(make train writes workdirs/default).")
  with open(os.path.join(workdir, "config.json")) as f:
    config = json.load(f)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  evals = [[r["step"], r["eval_loss"]] for r in rows if "eval_loss" in r]
  if not evals or evals[-1][0] != config["total_steps"]:
    raise ValueError(f"{workdir}: no eval at the last step {config['total_steps']} in metrics.jsonl; "
                     "finish the run (re-run the same train.py command) first.")
  files = corpus.stdlib_files()
  split = corpus.split_files(files)
  try:
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    commit = None
  result = {
      "title": "make train: configs/default.py (4-layer d=128 byte LM), eval loss in nats/byte",
      "command": "make train",
      "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
      "git_commit": commit,
      "python": platform.python_version(),
      "cpu": _cpu_name(),
      "corpus": {"files": len(files), "bytes": sum(p.stat().st_size for _, p in files),
                 "validation_files": len(split["validation"])},
      "total_steps": config["total_steps"], "batch_size": config["batch_size"],
      "max_length": config["data"]["max_length"],
      "eval_loss": evals,
  }
  os.makedirs(results_dir, exist_ok=True)
  path = os.path.join(results_dir, "default_run.json")
  with open(path, "w") as f:
    json.dump(result, f, indent=1)
    f.write("\n")
  return path


# --------------------------------------------------------------------------------------
# The document.
# --------------------------------------------------------------------------------------


def splice(text: str, name: str, body: str, *, where: str = "the document") -> str:
  """text with the block between experiment `name`'s markers replaced by body."""
  begin, end = markers(name)
  nb, ne = text.count(begin), text.count(end)
  b, e = text.find(begin), text.find(end)
  if nb != 1 or ne != 1 or e < b:
    raise ValueError(f"{where}: expected one line {begin!r} followed later by one line {end!r}; found {nb} begin "
                     f"and {ne} end markers{' in the wrong order' if nb == ne == 1 else ''}. Put the pair where "
                     f"the {name} tables belong (the text between them is replaced).")
  return text[:b + len(begin)] + "\n\n" + body + "\n\n" + text[e:]


def render_doc(text: str, results_dir: str = RESULTS, *, where: str = "the document") -> str:
  for name, body in blocks(results_dir).items():
    text = splice(text, name, body, where=where)
  return text


def _write_atomic(path: str, text: str) -> None:
  fd, tmp = tempfile.mkstemp(prefix=".summarize.", suffix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
  try:
    with os.fdopen(fd, "w", newline="") as f:
      f.write(text)
    os.chmod(tmp, os.stat(path).st_mode & 0o777)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  mode = parser.add_mutually_exclusive_group()
  mode.add_argument("--write", action="store_true", help="rewrite the generated blocks of --doc")
  mode.add_argument("--check", action="store_true", help="write nothing; exit 1 if --doc would change")
  parser.add_argument("--doc", default=DOC, help="the markdown file (default docs/results.md)")
  parser.add_argument("--results", default=RESULTS, help="directory of <exp>.json (default experiments/results)")
  mode.add_argument("--record-default-run", metavar="WORKDIR",
                    help="write experiments/results/default_run.json from a finished configs/default.py run")
  parser.add_argument("--smoke", action="store_true",
                      help="write no committed file: --record-default-run into a temp dir, --write as --check")
  args = parser.parse_args(argv)
  if args.smoke and args.write:
    args.write, args.check = False, True
  if args.record_default_run:
    import tempfile
    try:
      results = tempfile.mkdtemp(prefix="default_run_") if args.smoke else args.results
      print("wrote", record_default_run(args.record_default_run, results))
    except (OSError, ValueError, KeyError) as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    return 0
  if not (args.write or args.check):
    for name, body in blocks(args.results).items():
      print(f"### {load(name, args.results)['title']}\n\n{body}\n")
    return 0
  try:
    with open(args.doc, newline="") as f:
      old = f.read()
    new = render_doc(old, args.results, where=args.doc)
  except (OSError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if new == old:
    print(f"{args.doc}: up to date")
    return 0
  if args.check:
    print(f"{args.doc}: out of date; run python experiments/summarize.py --write", file=sys.stderr)
    return 1
  _write_atomic(args.doc, new)
  print(f"{args.doc}: rewrote the summarize blocks")
  return 0


if __name__ == "__main__":
  sys.exit(main())
