"""E6: how far a RoPE model trained at L stretches, and what each extension method costs.

  python experiments/run.py e6                 # 2 seeds, L=128 -> 4L and 8L (4L alone: 36 min on 2 cores)
  python experiments/run.py e6 --smoke         # seconds: the base, one fine-tune, short evaluations

Every run is configs/default.py (a 4-layer, d=128 byte LM on the offline stdlib corpus).
Per seed:

1. **Base**: trained at L = 128 for `base_steps` (600, as E2-E4; --steps) steps, batch 16.
2. For each target length s·L (s = 4, 8), the arms:
   - (a) **none**: the base model as it is;
   - (b) eval-time only, no training: **NTK** (RoPE base raised to θ·s^(d/(d-2)), the
     "NTK-aware" base; d = head dim) and **YaRN ×s** (with its attention factor);
   - fine-tunes from the base, `ft_steps` (200) steps at s·L, all with the same budget and
     data (configs/default.py:extend's recipe: the same tokens per step as the base, i.e.
     batch 16/s, peak rate 1e-3, 20 warmup steps, cosine; the passkey mix below):
     (c) **PI** (linear ×s), (d) **YaRN ×s**, (e) **ABF** (RoPE base raised to the NTK base of
     (b), then trained), and **plain** (no scaling: the "direct fine-tuning" baseline of the
     PI paper);
   - (f) **scratch**: a model trained from scratch at s·L for base_steps + ft_steps steps (the
     same total steps and tokens), with the same passkey mix.
3. Every model is evaluated the same way: loss at L, 2L, 4L, 8L, 16L on the same validation
   rows (batch 16, `length_batches` batches per length); passkey retrieval at L..16L x 5
   depths (`roformer_jax.evaluation.passkey`, greedy decoding, exact match of 5 digits; and the
   answer's nats per digit, teacher-forced).
4. Steps to a target loss at 4L: the 4L fine-tunes (and the 4L scratch run) evaluate at 4L
   every `ft_steps / 8` steps; the target is the base model's own loss at L (the same
   seed): the step at which the extended model is as good at 4L as the base was at L.

Passkey rows are mixed into the fine-tuning (and scratch) data at `PASSKEY_FRACTION` of
the rows (config.data.passkey_fraction): a byte model trained on Python source has never
seen the format, and the literature fine-tunes with such a mix. The base never saw one, so
arms (a) and (b) show what the format costs without it.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from configs import common, default
from roformer_jax.training import trainer
from roformer_jax.evaluation import evaluate

TITLE = "E6: context extension of a RoPE byte LM trained at L={length}"
PASSKEY_FRACTION = 0.1  # of the fine-tuning rows
TARGETS = (4, 8)  # extension factors s: 4L = 512, 8L = 1024
EVAL_FACTORS = (1, 2, 4, 8, 16)  # evaluation lengths, multiples of L
FT_ARMS = ("plain", "PI", "YaRN", "ABF")
EVAL_ARMS = ("none", "NTK (eval)", "YaRN (eval)")
ARMS = EVAL_ARMS + FT_ARMS + ("scratch",)


def ntk_theta(theta: float, factor: float, head_dim: int) -> float:
  """The NTK-aware RoPE base for `factor`: theta * factor ** (d / (d - 2)) (bloc97, 2023).

  It stretches the lowest frequency by `factor` and leaves the highest nearly unchanged;
  ABF (Xiong et al. 2023) raises the base and fine-tunes, which arm (e) does with this base.
  """
  return float(theta * factor ** (head_dim / (head_dim - 2)))


def scaling_overrides(arm: str, factor: int, base_cfg) -> dict:
  """The config.model overrides of an arm at extension `factor` (none for the unscaled arms)."""
  length = base_cfg.data.max_length
  head_dim = base_cfg.model.d_model // base_cfg.model.num_heads
  if arm in ("PI",):
    return {"model.rope_scaling": {"rope_type": "linear", "factor": float(factor)}}
  if arm in ("YaRN", "YaRN (eval)"):
    return {"model.rope_scaling": {"rope_type": "yarn", "factor": float(factor),
                                   "original_max_position_embeddings": length}}
  if arm in ("ABF", "NTK (eval)"):
    return {"model.rope_theta": ntk_theta(base_cfg.model.rope_theta, factor, head_dim)}
  return {}


def settings(smoke: bool, base_steps: int | None, targets: tuple[int, ...] | None = None) -> dict:
  if smoke:
    return dict(base_steps=2, ft_steps=2, targets=(4,), eval_factors=(1, 4), length_batches=1,
                passkey_lengths=(128,),  # a prompt needs ~100 bytes: longer than the smoke rows
                passkey_depths=(0.0, 1.0), passkey_trials=2, ft_arms=("YaRN",), eval_arms=("none",),
                scratch=False)
  return dict(base_steps=base_steps or 600, ft_steps=200, targets=tuple(targets or TARGETS), eval_factors=EVAL_FACTORS,
              length_batches=2, passkey_lengths=None, passkey_depths=(0.0, 0.25, 0.5, 0.75, 1.0), passkey_trials=6,
              ft_arms=FT_ARMS, eval_arms=EVAL_ARMS, scratch=True)


def base_config(seed: int, s: dict, smoke: bool):
  config = default.get_config("smoke" if smoke else "")
  config.seed = seed
  if not smoke:
    steps = s["base_steps"]
    config.total_steps = steps
    config.checkpoint_every_steps = config.eval_every_steps = max(steps // 4, 1)
    config.log_every_steps = max(steps // 40, 1)
  config.samples_per_eval = 0
  return config


def eval_config(config, base, s: dict, overrides: dict):
  """The evaluation every arm gets: base-length rows and batch, L..16L, passkey at L..16L."""
  c = common.set_dotted(config.copy_and_resolve_references(), overrides)
  c.data.max_length = base.data.max_length
  c.batch_size = base.batch_size
  c.eval.max_batches = 2  # the summary pass at L (the length curve repeats it)
  c.eval.length_factors = tuple(s["eval_factors"])
  c.eval.length_batches = s["length_batches"]
  c.eval.passkey_lengths = tuple(s["passkey_lengths"] or (base.data.max_length * f for f in s["eval_factors"]))
  c.eval.passkey_depths = tuple(s["passkey_depths"])
  c.eval.passkey_trials = s["passkey_trials"]
  c.eval.average_last = 0
  c.eval.rope_scaling = None
  return c


def ft_config(base, base_workdir: str, arm: str, factor: int, s: dict, smoke: bool):
  config = default.extend(base.copy_and_resolve_references(), factor)
  config.init_from = base_workdir
  config.model.rope_scaling = None  # extend() sets YaRN; each arm sets its own below
  config = common.set_dotted(config, scaling_overrides(arm, factor, base))
  config.data.passkey_fraction = PASSKEY_FRACTION
  if not smoke:
    config.total_steps = s["ft_steps"]
    config.eval_every_steps = max(s["ft_steps"] // 8, 1)
    config.checkpoint_every_steps = s["ft_steps"]
    config.log_every_steps = 5
  return config


def scratch_config(base, factor: int, s: dict):
  config = base.copy_and_resolve_references()
  config.data.max_length = base.data.max_length * factor
  config.batch_size = max(base.batch_size // factor, 1)  # the same tokens per step
  config.total_steps = s["base_steps"] + s["ft_steps"]
  config.eval_every_steps = max(s["ft_steps"] // 8, 1) * 4
  config.checkpoint_every_steps = config.total_steps // 2
  config.log_every_steps = max(config.total_steps // 40, 1)
  config.data.passkey_fraction = PASSKEY_FRACTION
  return config


def _eval_curve(workdir: str) -> list[tuple[int, float]]:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r and "eval_bits_per_token" not in r]


def _evaluate(config, workdir: str) -> dict:
  results = evaluate.evaluate(config, workdir)
  return {"length_curve": results["length_curve"], "passkey": results.get("passkey")}


def run(seeds: list[int], steps: int | None, directory: str, smoke: bool = False,
        targets: tuple[int, ...] | None = None) -> dict:
  """Trains and evaluates every arm for every seed; returns the result dict (written by run.py)."""
  s = settings(smoke, steps, targets)
  out = {"title": TITLE.format(length=base_config(0, s, smoke).data.max_length), "seeds": seeds, "settings": {k: list(v) if isinstance(v, tuple) else v
                                                      for k, v in s.items()},
         "passkey_fraction": PASSKEY_FRACTION, "base": [], "arms": {}}
  for seed in seeds:
    base = base_config(seed, s, smoke)
    out["length"] = base.data.max_length
    base_dir = os.path.join(directory, f"base_s{seed}")
    t0 = time.perf_counter()
    trainer.train_and_evaluate(base, base_dir)
    base_entry = {"seed": seed, "train_wall_s": round(time.perf_counter() - t0, 1)}
    base_entry.update(_evaluate(eval_config(base, base, s, {}), base_dir))
    out["base"].append(base_entry)
    target_loss = base_entry["length_curve"][0]["loss"]  # the base at L
    print(f"[e6] seed {seed}: base loss at L={base.data.max_length}: {target_loss:.4f}", flush=True)
    for factor in s["targets"]:
      for arm in s["eval_arms"]:
        entry = {"seed": seed, "train_wall_s": 0.0}
        if arm == "none":
          entry.update(base_entry)
        else:
          entry.update(_evaluate(eval_config(base, base, s, scaling_overrides(arm, factor, base)), base_dir))
        out["arms"].setdefault(arm, {}).setdefault(str(factor), []).append(entry)
      runs = [(arm, ft_config(base, base_dir, arm, factor, s, smoke)) for arm in s["ft_arms"]]
      if s["scratch"]:
        runs.append(("scratch", scratch_config(base, factor, s)))
      for arm, config in runs:
        workdir = os.path.join(directory, f"{arm.lower()}_x{factor}_s{seed}")
        t0 = time.perf_counter()
        trainer.train_and_evaluate(config, workdir)
        entry = {"seed": seed, "train_wall_s": round(time.perf_counter() - t0, 1),
                 "eval_curve": _eval_curve(workdir), "target_loss": target_loss}
        # The first evaluation at s·L as good as the base at L (scratch: counted from random init).
        reached = [step for step, loss in entry["eval_curve"] if loss <= target_loss]
        entry["steps_to_target"] = reached[0] if reached else None
        entry.update(_evaluate(eval_config(config, base, s, {}), workdir))
        out["arms"].setdefault(arm, {}).setdefault(str(factor), []).append(entry)
        at = {r["length"]: r["loss"] for r in entry["length_curve"]}
        print(f"[e6] seed {seed} x{factor} {arm}: loss " +
              ", ".join(f"{n}: {v:.3f}" for n, v in at.items()) + f" ({entry['train_wall_s']:.0f} s)", flush=True)
  return out


# --------------------------------------------------------------------------------------
# Figures.
# --------------------------------------------------------------------------------------


def _mean_curve(entries: list[dict]) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
  lengths = [r["length"] for r in entries[0]["length_curve"]]
  losses = np.array([[r["loss"] for r in e["length_curve"]] for e in entries], dtype=float)
  return lengths, losses.mean(0), losses.min(0), losses.max(0)


def _passkey_by_length(entries: list[dict], metric: str = "accuracy") -> tuple[list[int], np.ndarray] | None:
  """(lengths, the metric's mean over depths and seeds); None where it was not measured."""
  if not entries or not entries[0].get("passkey") or not entries[0]["passkey"].get(metric):
    return None
  lengths = entries[0]["passkey"]["lengths"]
  values = np.array([np.asarray(e["passkey"][metric], dtype=float).mean(1) for e in entries])
  return lengths, values.mean(0)


def plot(out: dict, directory: str) -> list[str]:
  """e6.png (loss by length per target, and the 4L fine-tuning curves) and e6_passkey.png."""
  os.makedirs(directory, exist_ok=True)
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  colors = dict(zip(ARMS, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))  # 8 arms, 10 colours
  styles = {arm: ("o--" if arm in EVAL_ARMS else "s-") for arm in ARMS}
  targets = sorted({int(t) for arms in out["arms"].values() for t in arms})
  length = out["length"]
  fig, axes = plt.subplots(1, len(targets) + 1, figsize=(5 * (len(targets) + 1), 4), squeeze=False)
  for ax, factor in zip(axes[0], targets, strict=False):  # one axis more: the last holds the fine-tuning curves
    for arm, by_target in out["arms"].items():
      entries = by_target.get(str(factor))
      if not entries:
        continue
      lengths, mean, lo, hi = _mean_curve(entries)
      ax.errorbar(lengths, mean, yerr=[mean - lo, hi - mean], fmt=styles.get(arm, "o-"), color=colors.get(arm),
                  label=arm, capsize=2, ms=4, lw=1.2)
    ax.axvline(length, color="grey", lw=0.8, ls=":")
    ax.axvline(length * factor, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    bottom, top = ax.get_ylim()
    if bottom < 3.5 < top:  # the unextended curves climb far above the rest
      ax.set_ylim(top=min(top, 3.5))
    ax.set_xlabel(f"evaluation length (trained at {length}, extended to {length * factor})")
    ax.set_ylabel("eval loss (nats/byte)")
    ax.set_title(f"extension to {factor}L", fontsize=9)
    ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=7)
  ax = axes[0][-1]
  factor = 4 if 4 in targets else targets[0]
  for arm, by_target in out["arms"].items():
    for k, e in enumerate(by_target.get(str(factor), [])):
      if e.get("eval_curve"):
        steps, losses = zip(*e["eval_curve"], strict=True)
        if arm == "scratch":
          continue  # its curve starts from random weights, off the scale of the fine-tunes
        ax.plot(steps, losses, styles.get(arm, "s-"), color=colors.get(arm), ms=3, lw=1,
                label=arm if k == 0 else None, alpha=0.9 if k == 0 else 0.5)
  for e in out["base"]:
    ax.axhline(e["length_curve"][0]["loss"], color="black", lw=0.8, ls=":")
  ax.set_xlabel(f"fine-tuning step (eval at {factor}L = {factor * length}; dotted: the base's loss at L)")
  ax.set_ylabel("eval loss (nats/byte)")
  ax.set_title("fine-tuning curves (one line per seed)", fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  fig.suptitle(out["title"], fontsize=10)
  fig.tight_layout()
  paths = [os.path.join(directory, "e6.png")]
  fig.savefig(paths[0], dpi=110)
  plt.close(fig)

  # Exact match, and (where measured) the answer's nats per digit, which grades models that
  # all score 0 on exact match.
  metrics = [("accuracy", "passkey accuracy (mean over depths, seeds)")]
  if any(_passkey_by_length(by.get(str(t), []), "answer_nll") for by in out["arms"].values() for t in targets):
    metrics.append(("answer_nll", "answer nats per digit (mean)"))
  fig, axes = plt.subplots(len(metrics), len(targets), figsize=(5 * len(targets), 3.4 * len(metrics)), squeeze=False)
  for row, (metric, ylabel) in enumerate(metrics):
    for ax, factor in zip(axes[row], targets, strict=True):
      for arm, by_target in out["arms"].items():
        got = _passkey_by_length(by_target.get(str(factor), []), metric)
        if got:
          ax.plot(got[0], got[1], styles.get(arm, "o-"), color=colors.get(arm), label=arm, ms=4)
      ax.axvline(length * factor, color="grey", lw=0.8, ls="--")
      ax.set_xscale("log", base=2)
      if metric == "accuracy":
        ax.set_ylim(-0.03, 1.03)
      else:
        ax.axhline(np.log(10), color="black", lw=0.8, ls=":")
        ax.text(0.02, np.log(10), "ln 10: a uniform digit", transform=ax.get_yaxis_transform(), fontsize=7,
                va="top")
        ax.set_ylim(bottom=0)
      ax.set_xlabel("prompt length (bytes)")
      ax.set_ylabel(ylabel)
      ax.set_title(f"extension to {factor}L", fontsize=9)
      ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=7)  # the accuracy panel has room; the arms' colours are the same below
  fig.suptitle("E6: passkey, 5 digits" + (": greedy exact match; answer nats/digit" if len(metrics) > 1
                                          else " (exact match, greedy)"), fontsize=10)
  fig.tight_layout()
  paths.append(os.path.join(directory, "e6_passkey.png"))
  fig.savefig(paths[1], dpi=110)
  plt.close(fig)
  return paths


def merge(results: list[dict]) -> dict:
  """One result from several invocations (e.g. one per seed, or one per target): the entries
  side by side.

  The invocations must share the settings (other than the targets). A seed may come from
  several invocations only for different targets: they trained and evaluated the same base
  run (its base entry is kept once, and must agree). Each one's command is kept in `commands`.
  """
  first = results[0]
  out = {**first, "seeds": [], "base": [], "arms": {}, "commands": [], "wall_s": 0.0}
  targets_of: dict[int, set[str]] = {}
  for r in results:
    same = {k: v for k, v in r["settings"].items() if k != "targets"}
    if same != {k: v for k, v in first["settings"].items() if k != "targets"}:
      raise ValueError(f"cannot merge E6 results with different settings: {r['settings']} vs {first['settings']}")
    targets = {t for by in r["arms"].values() for t in by}
    for seed in r["seeds"]:
      if targets_of.get(seed, set()) & targets:
        raise ValueError(f"seed {seed} at targets {sorted(targets_of[seed] & targets)} appears in two results")
    for entry in r["base"]:
      kept = next((b for b in out["base"] if b["seed"] == entry["seed"]), None)
      if kept is None:
        out["base"].append(entry)
        out["seeds"].append(entry["seed"])
      elif kept["length_curve"][0]["loss"] != entry["length_curve"][0]["loss"]:
        raise ValueError(f"seed {entry['seed']}: two results evaluated different base runs "
                         f"(loss at L {kept['length_curve'][0]['loss']} vs {entry['length_curve'][0]['loss']})")
    for seed in r["seeds"]:
      targets_of.setdefault(seed, set()).update(targets)
    out["commands"] += r.get("commands", [r["command"]])
    out["wall_s"] += r["wall_s"]
    for arm, by_target in r["arms"].items():
      for target, entries in by_target.items():
        out["arms"].setdefault(arm, {}).setdefault(target, []).extend(entries)
  out["command"] = " ; ".join(out["commands"])
  out["settings"]["targets"] = sorted({int(t) for by in out["arms"].values() for t in by})
  return out
