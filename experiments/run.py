"""The paper's claims at a scale a 2-core CPU can run (issue #5): train, evaluate, plot.

  python experiments/run.py e2            # MLM: RoPE vs learned vs sinusoidal (C5)
  python experiments/run.py e3            # causal linear-attention LM with and without RoPE (C8)
  python experiments/run.py e4            # train at L=128, evaluate to 8L; RoPE + PI/NTK/YaRN (C7)
  python experiments/run.py e5            # En->De translation on gettext catalogues, RoPE vs sinusoidal (C4)
  python experiments/run.py e6            # context extension: L=128 -> 4L, 8L; PI/YaRN/ABF fine-tunes vs scratch
  python experiments/run.py e7 --seeds 0,1,2   # ViT on shapes2d at 32 px, evaluated at 32/48/64 px: 2-D RoPE vs learned vs none
                                               #   (+ rows fine-tuned at 48 px from the 32-px runs)
  python experiments/run.py e8            # train at L=128, evaluate to 16L: RoPE, xPos+window, p-RoPE, NoPE-hybrid, local/global, NoPE
  python experiments/run.py e2 --steps 200 --seeds 0   # a quick look
  python experiments/run.py e2 --smoke    # seconds: the first arm's code path, 2 steps, one seed

Every arm of e2-e4 and e8 is configs/default.py (a 4-layer, d=128 byte model on the offline stdlib
corpus), every arm of e5 is configs/gettext_translate.py (a 3+3-layer, d=256 Transformer) and
every arm of e7 is configs/vit_shapes.py (a 4-layer, d=64 ViT on the offline shapes2d images),
with the overrides below; only the position encoding (or attention kind) differs between
arms, and each arm runs with the same seeds.

E6 (experiments/context_extension.py) trains a base and fine-tunes it in several ways; its arms
and settings are described there.

E7 also trains low and fine-tunes high (RoPE-ViT's recipe): after its arms, each arm in
E7's "fine_tune" starts from its 32-px run of the same seed (config.init_from: the learned table
resized, RoPE-Mixed's frequencies carried over), trains 100 steps at 48 px (warmup 10, peak
2e-4, cosine; --steps leaves it alone) and is evaluated at 32/48/64 px like the arms: its own row
"<arm>, fine-tuned at 48 px", run directory <arm>-ft48_s<seed>. With --arms, an arm's fine-tune
runs with it.

Where things go:
- Runs go to experiments/runs/<exp>/<arm>_s<seed> (git-ignored; resumable: re-running skips
  finished runs), and the results and figure to experiments/runs/<exp>/<exp>.json and
  <exp>.png. Nothing committed is touched.
- --publish also writes experiments/results/<exp>.json and docs/figures/<exp>.png, the files
  docs/results.md quotes: only for a run meant to replace them.
- --smoke runs the first arm (and the first eval-time scaling of e4) on its config's smoke
  variant (a tiny model, 2 steps), one seed, with short evaluations, under
  experiments/runs/smoke/<exp>/; it never publishes. The other arms differ only in config
  overrides, which tests/test_configs.py and tests/test_models.py cover.
- --plot-only redraws the figure from the JSON (the run directory's, or with --publish the
  committed one).
- --arms runs only the named arms (comma-separated, each an arm's name or its first word, e.g.
  --arms rope-mixed,rope-2d): to train arms in turn; publish with all of them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import absl.logging  # noqa: E402
import numpy as np  # noqa: E402

from configs import common, default, gettext_translate, vit_shapes  # noqa: E402
from experiments import context_extension  # noqa: E402
from roformer_jax.training import trainer  # noqa: E402
from roformer_jax.evaluation import evaluate

COMMON = {"total_steps": 1000, "eval_every_steps": 250, "checkpoint_every_steps": 500, "log_every_steps": 25}

EXPERIMENTS = {
    "e2": {
        "title": "E2 (C5): MLM pre-training, RoPE vs absolute positions",
        "overrides": {"task": "mlm", "model.type_vocab_size": 0, "model.max_position": 1024},
        "arms": {"rope": {"model.position": "rope"}, "learned (BERT)": {"model.position": "learned"},
                 "sinusoidal": {"model.position": "sinusoidal"},
                 "sinusoidal-scaled (embeddings x sqrt(D))": {"model.position": "sinusoidal",
                                                              "model.scale_embeddings": True}},
        "length_factors": (1,),
    },
    "e3": {
        "title": "E3 (C8): causal linear-attention (elu+1) LM on bytes, with and without RoPE",
        "overrides": {"model.attention": "linear", "model.feature_map": "elu"},
        "arms": {"linear + RoPE": {"model.position": "rope"}, "linear, no position": {"model.position": "none"}},
        "length_factors": (1,),
    },
    "e4": {
        "title": "E4 (C7): train at L=128, evaluate up to 8L",
        "overrides": {"model.max_position": 1024},
        "arms": {"rope": {"model.position": "rope"}, "sinusoidal": {"model.position": "sinusoidal"},
                 "learned": {"model.position": "learned"},
                 # Vaswani et al. scale token embeddings by sqrt(D); without it the unit-amplitude
                 # table swamps embeddings drawn with std 0.02.
                 "sinusoidal-scaled (embeddings x sqrt(D))": {"model.position": "sinusoidal",
                                                              "model.scale_embeddings": True}},
        "length_factors": (1, 2, 4, 8),
        # Applied at evaluation time only to the RoPE arm (HF rope_parameters).
        "scalings": {
            "rope + PI (linear x4)": {"rope_type": "linear", "factor": 4.0},
            "rope + NTK (dynamic x4)": {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 128},
            "rope + YaRN (x4)": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128},
        },
    },
    "e8": {
        "title": "E8: length extrapolation of RoPE variants, train at L=128, evaluate up to 16L",
        # As E6: 10% of the training rows carry a pass key, so retrieval is something the model
        # learned at L; the evaluation asks for it at L..16L.
        "overrides": {"model.max_position": 2048, "data.passkey_fraction": context_extension.PASSKEY_FRACTION,
                      "eval.passkey_lengths": (128, 256, 512, 1024, 2048), "eval.passkey_depths": (0.0, 0.5, 1.0),
                      "eval.passkey_trials": 4},
        "arms": {
            "rope": {"model.position": "rope"},
            # LEX (Sun et al. 2022): xPos with blockwise causal attention; the block is a window of L
            "xpos + window L": {"model.rope": {"xpos_scale_base": 512.0}, "model.layer_types": ("w",),
                                "model.layer_settings": {"w": {"window": 128}}},
            "p-rope 0.75": {"model.rope_scaling": {"rope_type": "proportional", "partial_rotary_factor": 0.75},
                            "model.rope_layout": "half"},
            "nope-hybrid (1 layer in 4)": {"model.layer_types": ("r", "r", "r", "n"),
                                           "model.layer_settings": {"n": {"rope": "none"}}},
            # Gemma's local/global with the 4-layer model: 3:1 (a 5:1 pattern would leave no global layer)
            "local-global 3:1 (W=L/2, theta 1e4 / 1e6)": {
                "model.layer_types": ("l", "l", "l", "g"),
                "model.layer_settings": {"l": {"window": 64, "rope": {"theta": 1e4}}, "g": {"rope": {"theta": 1e6}}}},
            "nope": {"model.position": "none"},
        },
        "length_factors": (1, 2, 4, 8, 16),
    },
    "e7": {
        "title": "E7: a ViT trained at 32 px (8x8 patches), evaluated at 1x, 1.5x and 2x the grid",
        "config": vit_shapes.get_config,  # its own run length and schedule, not COMMON's
        "overrides": {},
        # RoPE-ViT (Heo et al. 2024): Mixed > Axial > learned absolute at resolutions above training
        "arms": {"rope-mixed": {"vit.position": "rope_mixed"}, "rope-axial": {"vit.position": "rope_axial"},
                 "rope-2d (Qwen-VL)": {"vit.position": "rope_2d"},
                 "learned (resized)": {"vit.position": "learned"}, "none": {"vit.position": "none"}},
        "length_factors": (),
        "resolutions": (32, 48, 64),  # data.image_size at evaluation: the same scenes, rendered larger
        # Train low, fine-tune high (RoPE-ViT, DeiT): these arms' 32-px runs, fine-tuned at 48 px (`fine_tune_config`).
        # The two whose 48-px comparison is E7's claim; the learned table stays at chance at 32 px (docs/results.md).
        "fine_tune": {"arms": ("rope-mixed", "rope-axial"), "label": "fine-tuned at 48 px",
                      "dir": "ft48", "overrides": {
                          "data.image_size": 48, "vit.image_size": 48,  # a 12 x 12 grid: the learned table resized
                          "total_steps": 100, "optim.warmup_steps": 10,  # short, whatever --steps says
                          "optim.learning_rate": 2e-4,  # a fifth of the 32-px peak, cosine to 0
                          "eval_every_steps": 100, "checkpoint_every_steps": 100, "log_every_steps": 10}},
    },
    "e5": {
        "title": "E5 (C4): En->De on the gettext catalogues, 3+3 layers d=256",
        "config": gettext_translate.get_config,  # its own run length and schedule, not COMMON's
        "overrides": {},
        "arms": {"rope": {"model.position": "rope"}, "sinusoidal": {"model.position": "sinusoidal"}},
        "length_factors": (),
    },
}


def _with(config, overrides: dict):
  return common.set_dotted(config.copy_and_resolve_references(), overrides)


# --smoke: evaluations short enough for seconds (the smoke variants' own run lengths apply).
SMOKE_EVAL = {"eval.max_batches": 2, "eval.length_batches": 1}


def run_dir(name: str, smoke: bool = False) -> str:
  """Where an experiment's runs, results and figure go (git-ignored)."""
  return os.path.join(ROOT, "experiments", "runs", *(["smoke"] if smoke else []), name)


def make_config(exp: dict, arm: dict, seed: int, steps: int | None, smoke: bool = False):
  config = exp.get("config", default.get_config)("smoke" if smoke else "")
  common = {} if "config" in exp or smoke else COMMON
  config = _with(config, {**common, **exp["overrides"], **arm, "seed": seed})
  if smoke:  # two lengths are enough to run the length curve's code (each length compiles anew)
    config.eval.length_factors = exp["length_factors"][:2]
    if config.eval.passkey_lengths:  # a prompt needs ~100 bytes: longer than the smoke rows (as E6's smoke)
      config = _with(config, {"eval.passkey_lengths": (128,), "eval.passkey_depths": (0.0,), "eval.passkey_trials": 1,
                              "data.passkey_fraction": 0.0})
    types = config.model.get("layer_types")
    if types and len(types) > config.model.num_layers:  # one layer per type of the arm's pattern (e8's)
      config.model.num_layers = len(types)
    return _with(config, SMOKE_EVAL)
  if steps:
    config.total_steps = steps
    config.eval_every_steps = config.checkpoint_every_steps = max(steps // 4, 1)
    config.log_every_steps = max(steps // 40, 1)
    config.optim.warmup_steps = min(config.optim.warmup_steps, steps // 4)
  config.eval.length_factors = exp["length_factors"]
  config.eval.length_batches = 8
  return config


def fine_tune_config(exp: dict, config, source: str, smoke: bool = False):
  """`config` (an arm's) fine-tuned from the trained run `source` as exp["fine_tune"] says; the smoke
  variant keeps its own 2 steps and changes only the resolution."""
  overrides = dict(exp["fine_tune"]["overrides"])
  if smoke:
    overrides = {k: v for k, v in overrides.items() if k.startswith(("data.", "vit."))}
  return _with(config, {**overrides, "init_from": source})


def curve(workdir: str, key: str) -> list[tuple[int, float]]:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  return [(r["step"], r[key]) for r in rows if key in r and "eval_bits_per_token" not in r]


def run(name: str, seeds: list[int], steps: int | None, smoke: bool = False, only: list[str] | None = None) -> dict:
  exp = EXPERIMENTS[name]
  out = {"title": exp["title"], "seeds": seeds, "arms": {}}
  arms = list(exp["arms"].items())[:1] if smoke else exp["arms"].items()
  if only:
    unknown = set(only) - {n for a in exp["arms"] for n in (a, a.split()[0])}
    if unknown:
      raise SystemExit(f"--arms: no arm {sorted(unknown)} in {name} (arms: {list(exp['arms'])})")
    arms = [(a, o) for a, o in arms if a in only or a.split()[0] in only]
  scalings = list(exp.get("scalings", {}).items())[:1 if smoke else None]
  # Each arm (base None), then the fine-tunes of those arms that have one (base: the arm's run).
  tune = exp.get("fine_tune", {})
  jobs = [(a, o, None) for a, o in arms]
  jobs += [(f"{a}, {tune['label']}", o, a) for a, o in arms if a in tune.get("arms", ())]
  for arm_name, arm, base in jobs:
    for seed in seeds:
      workdir = os.path.join(run_dir(name, smoke), f"{(base or arm_name).split()[0]}_s{seed}")
      config = make_config(exp, arm, seed, steps, smoke)
      if base is not None:  # from the arm's run of this seed (trained above, or by an earlier invocation)
        config = fine_tune_config(exp, config, workdir, smoke)
        workdir = os.path.join(run_dir(name, smoke), f"{base.split()[0]}-{tune['dir']}_s{seed}")
      resumed = os.path.isdir(os.path.join(workdir, "checkpoints"))  # an earlier invocation trained it
      t0 = time.perf_counter()
      trainer.train_and_evaluate(config, workdir)
      train_s = time.perf_counter() - t0
      greedy = None
      if config.task == "seq2seq":  # Sec. 4.1 decodes with beam 4; greedy first, for comparison
        greedy = evaluate.evaluate(_with(config, {"eval.beam_size": 1}), workdir)["metrics"]
      t1 = time.perf_counter()
      results = evaluate.evaluate(config, workdir)  # last, so eval_results.json holds these
      entry = {"seed": seed, "train_wall_s": round(train_s, 1), "eval": results["metrics"],
               "train_curve": curve(workdir, "loss"), "eval_curve": curve(workdir, "eval_loss"),
               "length_curve": results.get("length_curve"), "passkey": results.get("passkey")}
      if resumed:  # restored and evaluated again: train_wall_s is the restore's, not a training time
        entry["resumed"] = True
      if "resolutions" in exp:  # the same validation scenes at each resolution (the first is the trained one)
        sizes = exp["resolutions"][:2] if smoke else exp["resolutions"]
        entry["resolutions"] = {str(r): evaluate.evaluate(_with(config, {"data.image_size": r}), workdir)["metrics"]
                                for r in sizes}
      if greedy is not None:
        entry["eval_greedy"] = greedy
        entry["eval_wall_s"] = round(time.perf_counter() - t1, 1)
      if "scalings" in exp and arm.get("model.position") == "rope":
        entry["scaled"] = {}
        for label, scaling in scalings:
          config.eval.rope_scaling = scaling
          entry["scaled"][label] = evaluate.evaluate(config, workdir)["length_curve_scaled"]
      out["arms"].setdefault(arm_name, []).append(entry)
      bleu = f", BLEU {results['metrics']['bleu']:.2f} (greedy {entry['eval_greedy']['bleu']:.2f})" \
          if "eval_greedy" in entry else ""
      print(f"[{name}] {arm_name} seed {seed}: eval loss {results['metrics']['loss']:.4f}{bleu} "
            f"({train_s:.0f} s)", flush=True)
  return out


def plot(name: str, out: dict, directory: str) -> str:
  """Draws the experiment's figure into `directory`/<name>.png; returns the path."""
  os.makedirs(directory, exist_ok=True)
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  if name == "e5":
    return _plot_translation(name, out, plt, colors, directory)
  if name == "e7":
    return _plot_resolution(name, out, plt, colors, directory)
  fig, ax = plt.subplots(figsize=(6.5, 4))
  if name in ("e4", "e8"):
    for i, (arm, entries) in enumerate(out["arms"].items()):
      lengths = [r["length"] for r in entries[0]["length_curve"]]
      losses = np.array([[r["loss"] for r in e["length_curve"]] for e in entries])
      ax.plot(lengths, np.nanmean(losses, 0), "o-", color=colors[i], label=arm)
      if "scaled" in entries[0]:
        for j, label in enumerate(entries[0]["scaled"]):
          s = np.array([[r["loss"] for r in e["scaled"][label]] for e in entries])
          ax.plot(lengths, np.nanmean(s, 0), "s--", color=colors[4 + j], label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluation length (trained at 128)")
    ax.set_ylabel("eval loss (nats/byte)")
    ax.axvline(128, color="grey", lw=0.8, ls=":")
  else:
    for i, (arm, entries) in enumerate(out["arms"].items()):
      for k, e in enumerate(entries):
        steps, losses = zip(*e["train_curve"], strict=True)
        ax.plot(steps, losses, color=colors[i], alpha=0.8, lw=1, label=arm if k == 0 else None,
                ls="-" if k == 0 else "--")
    ax.set_xlabel("step")
    ax.set_ylabel("train loss (nats/token)")
    ax.set_ylim(top=min(ax.get_ylim()[1], 4.0))
  return _save(fig, ax, plt, out, name, directory)


def _save(fig, ax, plt, out: dict, name: str, directory: str) -> str:
  """Title, grid and legend on the one axis; the figure written to `directory`/<name>.png."""
  ax.set_title(out["title"], fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  path = os.path.join(directory, f"{name}.png")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def _plot_resolution(name: str, out: dict, plt, colors, directory: str) -> str:
  """Accuracy against the evaluation resolution per arm: the mean over seeds, bars min..max."""
  fig, ax = plt.subplots(figsize=(8, 4.5))
  arms, label = list(out["arms"]), EXPERIMENTS["e7"]["fine_tune"]["label"]
  for i, (arm, entries) in enumerate(out["arms"].items()):
    sizes = sorted(int(r) for r in entries[0]["resolutions"])
    acc = np.array([[e["resolutions"][str(r)]["accuracy"] for r in sizes] for e in entries])
    mean = acc.mean(0)
    base = arm.removesuffix(f", {label}")  # a fine-tuned row: its arm's colour, dashed
    ax.errorbar(np.array(sizes) + (i - 2) * 0.4, mean, yerr=[mean - acc.min(0), acc.max(0) - mean],
                fmt="o-" if base == arm else "s--", color=colors[arms.index(base) if base in arms else i],
                capsize=3, label=arm)
  ax.axhline(0.25, color="grey", lw=0.8, ls=":", label="chance (4 classes)")
  ax.axvline(32, color="grey", lw=0.8, ls="--")
  ax.set_xticks(sizes, [f"{r} px\n({r // 4}x{r // 4} patches)" for r in sizes])
  ax.set_xlabel("evaluation resolution (trained at 32 px)")
  ax.set_ylabel("accuracy (mean over seeds, bars min..max)")
  return _save(fig, ax, plt, out, name, directory)


def _plot_translation(name: str, out: dict, plt, colors, directory: str) -> str:
  """Left: training loss per arm and seed; right: test BLEU, beam 4 vs greedy, per seed."""
  fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
  for i, (arm, entries) in enumerate(out["arms"].items()):
    for k, e in enumerate(entries):
      steps, losses = zip(*e["train_curve"], strict=True)
      ax.plot(steps, losses, color=colors[i], lw=1, ls="-" if k == 0 else "--",
              label=f"{arm} (seed {e['seed']})")
  ax.set_xlabel("step")
  ax.set_ylabel("train loss (label-smoothed, nats/token)")
  ax.set_ylim(top=min(ax.get_ylim()[1], 8.0))
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  arms = list(out["arms"])
  width = 0.8 / max(len(out["seeds"]), 1) / 2
  for i, arm in enumerate(arms):
    for k, e in enumerate(out["arms"][arm]):
      x = i + (k - (len(out["arms"][arm]) - 1) / 2) * 2 * width
      bx.bar(x - width / 2, e["eval"]["bleu"], width, color=colors[i], label="beam 4" if i == k == 0 else None)
      bx.bar(x + width / 2, e["eval_greedy"]["bleu"], width, color=colors[i], alpha=0.45, hatch="//",
             label="greedy" if i == k == 0 else None)
      bx.text(x - width / 2, e["eval"]["bleu"], f"{e['eval']['bleu']:.1f}", ha="center", va="bottom", fontsize=7)
  bx.set_xticks(range(len(arms)), arms)
  bx.set_ylabel("sacreBLEU, test split (one bar pair per seed)")
  bx.legend(fontsize=8)
  bx.grid(alpha=0.3, axis="y")
  fig.suptitle(out["title"], fontsize=9)
  path = os.path.join(directory, f"{name}.png")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def write_results(name: str, out: dict, directory: str) -> str:
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, f"{name}.json")
  with open(path, "w") as f:
    json.dump(out, f, indent=1, default=lambda x: None if isinstance(x, float) and math.isnan(x) else float(x))
  return path


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("experiment", choices=sorted([*EXPERIMENTS, "e6"]))
  parser.add_argument("--seeds", default="0,1", help="comma-separated seeds (a difference needs >= 2)")
  parser.add_argument("--steps", type=int, default=None, help=f"training steps (default {COMMON['total_steps']})")
  parser.add_argument("--publish", action="store_true",
                      help="also write experiments/results/<exp>.json and docs/figures/<exp>.png (what the docs quote)")
  parser.add_argument("--smoke", action="store_true",
                      help="each arm's smoke variant, 2 steps, one seed, under experiments/runs/smoke/ (never publishes)")
  parser.add_argument("--targets", default=None,
                      help="e6 only: comma-separated extension factors (default 4,8)")
  parser.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                      help="e6 only: merge the result files of several invocations (e.g. one per seed) into one "
                           "result, written and drawn like a run's")
  parser.add_argument("--plot-only", action="store_true",
                      help="redraw the figure from the run directory's JSON (with --publish: the committed one)")
  parser.add_argument("--arms", default=None,
                      help="comma-separated arms to run (a name or its first word; default all; not e6)")
  args = parser.parse_args()
  if args.smoke and args.publish:
    print("--smoke never publishes: the committed results and figures are left alone.", flush=True)
    args.publish = False
  results_dirs = [run_dir(args.experiment, args.smoke)]
  figure_dirs = list(results_dirs)
  if args.publish:
    results_dirs.append(os.path.join(ROOT, "experiments", "results"))
    figure_dirs.append(os.path.join(ROOT, "docs", "figures"))
  draw = (lambda name, out, d: context_extension.plot(out, d)) if args.experiment == "e6" else plot
  if args.plot_only:
    with open(os.path.join(results_dirs[-1], f"{args.experiment}.json")) as f:
      print("figure:", draw(args.experiment, json.load(f), figure_dirs[-1]))
    return
  absl.logging.set_verbosity(absl.logging.WARNING)
  seeds = [int(s) for s in args.seeds.split(",")]
  seeds = seeds[:1] if args.smoke else seeds
  t0 = time.perf_counter()
  if args.experiment == "e6" and args.merge:
    results = []
    for path in args.merge:
      with open(path) as f:
        results.append(json.load(f))
    out = context_extension.merge(results)
  elif args.experiment == "e6":
    targets = tuple(int(t) for t in args.targets.split(",")) if args.targets else None
    out = context_extension.run(seeds, args.steps, run_dir("e6", args.smoke), args.smoke, targets)
  else:
    out = run(args.experiment, seeds, args.steps, args.smoke, args.arms.split(",") if args.arms else None)
  if not args.merge:
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    out["command"] = "python experiments/run.py " + " ".join(sys.argv[1:])
  for directory in results_dirs:
    print("results:", write_results(args.experiment, out, directory))
  if args.experiment == "e6" and not args.merge:  # this invocation's own file, for --merge later
    name = f"e6_s{'-'.join(map(str, seeds))}_x{'-'.join(map(str, out['settings']['targets']))}"
    print("results:", write_results(name, out, results_dirs[0]))
  for directory in figure_dirs:
    print("figure:", draw(args.experiment, out, directory))
  if args.experiment == "e6":
    return
  for arm, entries in out["arms"].items():
    losses = [e["eval"]["loss"] for e in entries]
    print(f"{arm:>24}: eval loss {np.mean(losses):.4f} (seeds: {', '.join(f'{x:.4f}' for x in losses)})")
    for r in entries[0].get("resolutions", {}):
      acc = [e["resolutions"][r]["accuracy"] for e in entries]
      print(f"{'':>24}  {r} px: accuracy {np.mean(acc):.4f} ({', '.join(f'{x:.4f}' for x in acc)})")
    if "eval_greedy" in entries[0]:
      beam, greedy = [e["eval"]["bleu"] for e in entries], [e["eval_greedy"]["bleu"] for e in entries]
      print(f"{'':>24}  BLEU beam 4 {np.mean(beam):.2f} ({', '.join(f'{x:.2f}' for x in beam)}), "
            f"greedy {np.mean(greedy):.2f} ({', '.join(f'{x:.2f}' for x in greedy)})")


if __name__ == "__main__":
  main()
