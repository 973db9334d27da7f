"""E1 (C2): the long-term decay bound of eq. (37) next to the mean |q.k| a trained model shows.

  make train                                                       # trains workdirs/default (RoPE, T = 128)
  python experiments/qk_decay.py --workdir workdirs/default         # into experiments/runs/e1/
  python experiments/qk_decay.py --workdir workdirs/default --smoke # seconds: the smoke model, 1 batch

For every layer of the trained byte LM it takes the RoPE-rotated queries and keys of
validation rows, computes |q_m . k_n| / sqrt(H) for every pair with n <= m, and averages by
relative distance m - n. The paper's bound (rope.long_term_decay, head dim H = 32 here) is
drawn on a second axis. Both are normalised to 1 at distance 0 so their shapes compare.

Writes experiments/runs/e1/e1.json and e1_qk_decay.png (git-ignored). --publish also writes
experiments/results/e1.json and docs/figures/e1_qk_decay.png, the files docs/results.md quotes.
--smoke reads the workdir as a run of configs/default.py:smoke (training one, 2 steps, under
experiments/runs/smoke/e1/ if the workdir has no checkpoint), uses 1 batch, writes under
experiments/runs/smoke/e1/ and never publishes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import absl.logging  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from configs import default  # noqa: E402
from roformer_jax import mesh as mesh_lib, rope  # noqa: E402
from roformer_jax.training import data, trainer
from roformer_jax.evaluation import evaluate


def mean_abs_qk_by_distance(model, batch) -> np.ndarray:
  """[layers, T] mean |q_m . k_{m-d}| / sqrt(H) over batch, heads and m, for d = 0..T-1."""
  x = model.embeddings(jnp.asarray(batch["inputs"]), positions=jnp.asarray(batch["positions"]))
  seg = jnp.asarray(batch["segment_ids"])
  idx = jnp.arange(x.shape[1])
  same = (seg[:, :, None] == seg[:, None, :]) & (idx[:, None] >= idx[None, :]) & (seg[:, :, None] != 0)
  dist = idx[:, None] - idx[None, :]
  out = []
  for layer in model.layers:
    attn = layer.attention
    h = layer.attention_norm(x) if model.config.norm == "pre" else x
    cs = attn.rotary.cos_sin(jnp.asarray(batch["positions"]), attn.head_dim)
    q, k = attn.rotary.rotate(attn.query(h), cs), attn.rotary.rotate(attn.key(h), cs)
    s = jnp.abs(jnp.einsum("btnh,bsnh->btsn", q, k)).mean(-1) / np.sqrt(attn.head_dim)  # [B, T, S]
    sums = jnp.zeros(x.shape[1]).at[dist.ravel()].add(jnp.where(same, s, 0).sum(0).ravel() * (dist.ravel() >= 0))
    counts = jnp.zeros(x.shape[1]).at[dist.ravel()].add(same.sum(0).ravel() * (dist.ravel() >= 0))
    out.append(np.asarray(sums / jnp.maximum(counts, 1)))
    x = layer(x, positions=jnp.asarray(batch["positions"]),
              mask=(same[:, None]), kv_valid=None, segment_ids=None)
  return np.stack(out)


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", default=os.path.join(ROOT, "workdirs", "default"))
  parser.add_argument("--batches", type=int, default=8)
  parser.add_argument("--publish", action="store_true",
                      help="also write experiments/results/e1.json and docs/figures/e1_qk_decay.png")
  parser.add_argument("--smoke", action="store_true",
                      help="the smoke model of configs/default.py, 1 batch, under experiments/runs/smoke/e1/")
  args = parser.parse_args()
  absl.logging.set_verbosity(absl.logging.WARNING)
  if args.smoke and args.publish:
    print("--smoke never publishes: the committed results and figure are left alone.", flush=True)
    args.publish = False
  out_dir = os.path.join(ROOT, "experiments", "runs", *(["smoke"] if args.smoke else []), "e1")
  workdir = os.path.abspath(args.workdir)
  config = default.get_config("smoke" if args.smoke else "")
  if args.smoke:
    args.batches = 1
    if not os.path.isdir(os.path.join(workdir, "checkpoints")):
      workdir = os.path.join(out_dir, "model")
      print(f"--smoke: {args.workdir} holds no checkpoint; training configs/default.py:smoke in {workdir}",
            flush=True)
      trainer.train_and_evaluate(config, workdir)
  mesh = mesh_lib.make_mesh(config.mesh)
  settings = evaluate.eval_settings(config)
  graphdef, state, step, _ = evaluate.restore(config, workdir, mesh,
                                              mesh_lib.rules_from_config(config.logical_axis_rules),
                                              average_last=settings["average_last"])
  model, _ = nnx.merge(graphdef, state)
  it = data.make_iterator(config.data, task="lm", split="validation", batch_size=16, seed=0,
                          repeat=False, shuffle=False)
  curves = [mean_abs_qk_by_distance(model, next(it)) for _ in range(args.batches)]
  qk = np.mean(curves, axis=0)  # [layers, T]
  head_dim = config.model.d_model // config.model.num_heads
  d = np.arange(qk.shape[1])
  bound = rope.long_term_decay(d, head_dim, config.model.rope_theta)

  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(6.5, 4))
  for i, c in enumerate(qk):
    ax.plot(d, c / c[0], lw=1.2, label=f"trained model, layer {i}: mean |q.k| / value at 0")
  ax.plot(d, bound / bound[0], "k--", lw=1.5, label=f"eq. (37) bound, H={head_dim} (normalised)")
  ax.set_xlabel("relative distance m - n (bytes)")
  ax.set_ylabel("normalised to distance 0")
  ax.set_title(f"E1 (C2): long-term decay, bound vs a trained RoPE byte LM (step {step})", fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  fig.tight_layout()
  picks = [p for p in (0, 1, 4, 16, 64, 127) if p < len(d)]
  result = {"workdir": os.path.relpath(workdir, ROOT), "step": step, "head_dim": head_dim,
            "distances": picks, "bound_normalised": [float(bound[p] / bound[0]) for p in picks],
            "mean_abs_qk": {f"layer{i}": [float(c[p]) for p in picks] for i, c in enumerate(qk)},
            "command": "python experiments/qk_decay.py " + " ".join(sys.argv[1:])}
  print(json.dumps(result, indent=1))
  places = [(out_dir, out_dir)]
  if args.publish:
    places.append((os.path.join(ROOT, "experiments", "results"), os.path.join(ROOT, "docs", "figures")))
  for results_dir, figures_dir in places:
    os.makedirs(results_dir, exist_ok=True)
    os.makedirs(figures_dir, exist_ok=True)
    with open(os.path.join(results_dir, "e1.json"), "w") as f:
      json.dump(result, f, indent=1)
    path = os.path.join(figures_dir, "e1_qk_decay.png")
    fig.savefig(path, dpi=120)
    print("results:", os.path.join(results_dir, "e1.json"))
    print("figure:", path)


if __name__ == "__main__":
  main()
