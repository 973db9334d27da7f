"""Prints the markdown tables of docs/results.md from experiments/results/*.json.

  python experiments/summarize.py

A difference between two arms is called "within noise" when it is smaller than the larger
of the two arms' seed-to-seed ranges.
"""

import json
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name):
  path = os.path.join(ROOT, "experiments", "results", f"{name}.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def final_losses(out):
  return {arm: [e["eval"]["loss"] for e in entries] for arm, entries in out["arms"].items()}


def loss_at(entry, step):
  """Train loss at the logged step closest to `step` (convergence speed)."""
  steps, losses = zip(*entry["train_curve"])
  return losses[int(np.argmin(np.abs(np.array(steps) - step)))]


def arm_table(out, reference: str):
  finals = final_losses(out)
  total = max(s for s, _ in next(iter(out["arms"].values()))[0]["train_curve"])
  lines = [f"| arm | eval loss, mean (seeds) | train loss at step {total // 4} (mean) | vs {reference} | train wall (s/run) |",
           "|---|---|---|---|---|"]
  ref = np.mean(finals[reference])
  ref_spread = np.ptp(finals[reference])
  for arm, losses in finals.items():
    entries = out["arms"][arm]
    early = np.mean([loss_at(e, total // 4) for e in entries])
    diff = np.mean(losses) - ref
    noise = max(np.ptp(losses), ref_spread)
    verdict = "—" if arm == reference else (f"{diff:+.4f} ({'within noise' if abs(diff) <= noise else 'beyond seed range'})")
    wall = np.mean([e["train_wall_s"] for e in entries])
    lines.append(f"| {arm} | {np.mean(losses):.4f} ({', '.join(f'{x:.4f}' for x in losses)}) | {early:.3f} | {verdict} | {wall:.0f} |")
  return "\n".join(lines)


def length_table(out):
  rows = {}
  for arm, entries in out["arms"].items():
    lengths = [r["length"] for r in entries[0]["length_curve"]]
    rows[arm] = np.nanmean([[r["loss"] if r["loss"] is not None else np.nan for r in e["length_curve"]] for e in entries], 0)
    for label in entries[0].get("scaled", {}):
      rows[label] = np.nanmean([[r["loss"] for r in e["scaled"][label]] for e in entries], 0)
  head = "| method | " + " | ".join(f"L={n}" for n in lengths) + " |"
  lines = [head, "|---|" + "---|" * len(lengths)]
  for name, vals in rows.items():
    lines.append(f"| {name} | " + " | ".join("n/a" if np.isnan(v) else f"{v:.3f}" for v in vals) + " |")
  return "\n".join(lines)


def main():
  for name, ref in (("e2", "rope"), ("e3", "linear + RoPE")):
    out = load(name)
    if out:
      print(f"### {out['title']}\n\n`{out['command']}`, seeds {out['seeds']}, total {out['wall_s']:.0f} s\n")
      print(arm_table(out, ref), "\n")
  out = load("e4")
  if out:
    print(f"### {out['title']}\n\n`{out['command']}`, seeds {out['seeds']}, total {out['wall_s']:.0f} s\n")
    print(arm_table(out, "rope"), "\n")
    print(length_table(out), "\n")


if __name__ == "__main__":
  main()
