"""Rewrites the generated block of docs/benchmarks.md from the recorded runs in docs/bench_results/.

Run (from the repository root; `make bench` runs it after the benches):
  .venv/bin/python bench/report.py            # rewrite the block
  .venv/bin/python bench/report.py --check    # exit 1 if the block is out of date
  .venv/bin/python bench/report.py --smoke    # rewrite a temporary copy instead; the doc is never touched

Each bench script run with `--record` leaves `docs/bench_results/<bench>.json` (bench/_record.py).
This script reads all of them and replaces what lies between the lines
`<!-- bench-report:begin -->` and `<!-- bench-report:end -->` of docs/benchmarks.md with: a
summary table (one row per figure), then per bench its command, machine, versions, commit and
date, the table it printed, and its figures as JSON lines (one object per figure, each with
the machine, device, versions and command). Everything outside the markers is left byte for
byte. The output depends only on the result files, so a second run changes nothing.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import _record  # noqa: E402

BEGIN = "<!-- bench-report:begin -->"
END = "<!-- bench-report:end -->"
DEFAULT_DOC = os.path.join(ROOT, "docs", "benchmarks.md")
RECORD_KEYS = ("bench", "date", "command", "machine", "versions", "git_commit", "figures", "table")


# --------------------------------------------------------------------------------------
# Reading the result files.
# --------------------------------------------------------------------------------------


def load_results(results_dir: str) -> list[dict]:
  """Every `<results_dir>/*.json`, checked, ordered by bench name (then file name)."""
  records = []
  for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
    with open(path) as f:
      try:
        rec = json.load(f)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e}); rerun its bench with --record or delete it.") from e
    _check_record(rec, path)
    records.append((rec["bench"], os.path.basename(path), rec))
  return [rec for _, _, rec in sorted(records, key=lambda r: (r[0], r[1]))]


def _check_record(rec, path: str) -> None:
  if not isinstance(rec, dict):
    raise ValueError(f"{path}: expected a JSON object written by bench/_record.py save().")
  missing = [k for k in RECORD_KEYS if k not in rec]
  if missing:
    raise ValueError(f"{path}: missing {missing}; files here are written by bench/_record.py save() "
                     "(run the bench with --record).")
  try:  # the same checks save() made when it wrote the file
    _record.check_figures(rec["figures"])
  except (TypeError, ValueError) as e:
    raise ValueError(f"{path}: {e}") from e


# --------------------------------------------------------------------------------------
# Rendering.
# --------------------------------------------------------------------------------------


def fmt_value(value: float, unit: str) -> str:
  """3 significant digits (thousands separated from 100 up; scientific below 0.01), then the unit."""
  v = float(value)
  a = abs(v)
  if v == int(v) and a < 1e6:
    text = f"{int(v):,}"
  elif a >= 100:
    text = f"{v:,.0f}"
  elif a >= 0.01:
    text = f"{v:#.3g}".rstrip(".")
  else:
    text = f"{v:.2e}"
  if unit in ("%", "x", "×"):
    return text + unit
  return f"{text} {unit}" if unit else text


def status(fig: dict) -> str:
  met = fig.get("met")
  return "—" if met is None else ("met" if met else "missed")


def device(machine: dict) -> str:
  """A short name for where the bench ran: the accelerator, or the CPU and its cores."""
  if machine.get("platform") == "cpu":
    text = f"CPU: {machine.get('cpu')}, {machine.get('cpu_count')} cores"
    # Records since issue 28 carry the instruction sets and whether huge pages were on.
    if "isa" in machine:
      wide = [isa for isa in ("amx_tile", "avx512f") if isa in machine["isa"]]
      text += f", {'+'.join(wide) if wide else 'no AVX-512'}"
    if "huge_pages" in machine:
      text += ", huge pages" if machine["huge_pages"] else ", no huge pages"
    return text
  return f"{machine.get('device_count')} x {machine.get('device_kind')}"


def _cell(text) -> str:
  return str(text).replace("|", "\\|").replace("\n", " ")


def _fence(text: str, lang: str = "") -> list[str]:
  fence = "```"
  while fence in text:
    fence += "`"
  return [fence + lang, text.strip("\n"), fence]


def figure_lines(rec: dict) -> list[str]:
  """One JSON object per figure, each carrying where it came from."""
  out = []
  for fig in rec["figures"]:
    out.append(json.dumps({
        "bench": rec["bench"], **{k: fig.get(k) for k in ("id", "name", "value", "unit", "goal", "met")},
        "date": rec["date"], "device": device(rec["machine"]), "machine": rec["machine"],
        "versions": rec["versions"], "git_commit": rec["git_commit"], "command": rec["command"]}))
  return out


def render(records: list[dict], results_link: str = "bench_results/") -> str:
  """The text between the markers (starting and ending with a blank line)."""
  lines = ["", "", "## Latest recorded runs", "",
           f"Generated by `make bench` (`bench/report.py`) from the result files in "
           f"[`{results_link}`]({results_link}); do not edit this block by hand. Rerun a bench with "
           "`--record`, then `bench/report.py`.", ""]
  if not records:
    lines += ["No recorded results yet: run `make bench`, or a bench script with `--record` and then "
              "`.venv/bin/python bench/report.py`.", ""]
    return "\n".join(lines) + "\n"
  lines += ["| bench | id | figure | value | goal | status | date | device |",
            "|---|---|---|---:|---|---|---|---|"]
  for rec in records:
    for fig in rec["figures"]:
      lines.append("| " + " | ".join(_cell(c) for c in (
          rec["bench"], f"`{fig['id']}`", fig["name"], fmt_value(fig["value"], fig["unit"]), fig.get("goal") or "—",
          status(fig), rec["date"][:10], device(rec["machine"]))) + " |")
  lines.append("")
  for rec in records:
    m, v = rec["machine"], rec["versions"]
    lines += [
        f"### {rec['bench']}", "",
        f"- Command: `{rec['command']}`",
        f"- Machine: JAX on {m.get('device_count')} x {m.get('platform')} ({m.get('device_kind')}); "
        f"host CPU {m.get('cpu')}, {m.get('cpu_count')} cores; {m.get('os')}",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- Commit: `{rec['git_commit']}`; date (UTC): {rec['date']}", ""]
    if rec["table"].strip():
      lines += _fence(rec["table"]) + [""]
    if rec["figures"]:
      lines += _fence("\n".join(figure_lines(rec)), "json") + [""]
  return "\n".join(lines) + "\n"


def splice(text: str, body: str, *, where: str = "the document") -> str:
  """text with everything between the BEGIN and END markers replaced by body."""
  nb, ne = text.count(BEGIN), text.count(END)
  b, e = text.find(BEGIN), text.find(END)
  if nb != 1 or ne != 1 or e < b:
    raise ValueError(f"{where}: expected one line {BEGIN!r} followed later by one line {END!r}; found {nb} begin "
                     f"and {ne} end markers{' in the wrong order' if nb == ne == 1 else ''}. Put the pair where "
                     "the generated block belongs (the text between them is replaced).")
  return text[:b + len(BEGIN)] + body + text[e:]


def _write_atomic(path: str, text: str) -> None:
  fd, tmp = tempfile.mkstemp(prefix=".report.", suffix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
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
  parser.add_argument("--results", default=None,
                      help="directory of <bench>.json files (default $ROFORMER_BENCH_RESULTS, else docs/bench_results)")
  parser.add_argument("--doc", default=DEFAULT_DOC, help="the markdown file to update (default docs/benchmarks.md)")
  parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file would change")
  parser.add_argument("--smoke", action="store_true",
                      help="for tests: do everything, but write the new block into a temporary copy of --doc "
                      "(deleted afterwards), never into --doc itself; with --check, the same as --check")
  args = parser.parse_args(argv)
  results = _record.results_dir(args.results)
  link = os.path.relpath(results, os.path.dirname(os.path.abspath(args.doc))).replace(os.sep, "/") + "/"
  try:
    with open(args.doc, newline="") as f:
      old = f.read()
    new = splice(old, render(load_results(results), link), where=args.doc)
  except (OSError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if new == old:
    print(f"{args.doc}: up to date")
    return 0
  if args.check:
    print(f"{args.doc}: out of date; run .venv/bin/python bench/report.py", file=sys.stderr)
    return 1
  if args.smoke:
    scratch = tempfile.mkdtemp(prefix="bench_report_smoke_")
    try:
      copy = os.path.join(scratch, os.path.basename(args.doc))
      shutil.copy(args.doc, copy)
      _write_atomic(copy, new)
    finally:
      shutil.rmtree(scratch, ignore_errors=True)
    print(f"{args.doc}: out of date (--smoke: rewrote a temporary copy, not the file; run "
          ".venv/bin/python bench/report.py)")
    return 0
  _write_atomic(args.doc, new)
  print(f"{args.doc}: rewrote the block between the bench-report markers")
  return 0


if __name__ == "__main__":
  sys.exit(main())
