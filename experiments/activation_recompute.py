"""The feed-forward activation recomputed in the backward pass vs plain autodiff (issue 27).

  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python experiments/activation_recompute.py   # d=256, T=128, fp32
  python experiments/activation_recompute.py --smoke                                # seconds

(`--dtype bfloat16`, `--seq`, `--d-model`, `--layers`, `--batch` set the step's shape.)

`models.ACTIVATIONS["gelu"]` is jax.nn's exact GELU under `jax.checkpoint`, so its backward pass
keeps only its input. This compiles the MLM train step (`trainer.train_step` via
bench/gpu_mlm.py's `Variant`, the masked-positions head, vocabulary 30522) twice: with that
activation ("recomputed", B3's "auto") and with plain `jax.nn.gelu` ("plain", what autodiff keeps
by itself: B3's "gelu-saved" variant),
then prints XLA's temporary bytes of each compiled step, the first two losses (the two must be
bitwise equal) and the median ms per step over alternating rounds of 3 steps.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
from flax import nnx  # noqa: E402

from bench import gpu_mlm  # noqa: E402
from roformer_jax import mesh as mesh_lib  # noqa: E402


def build(variant: str, args):
  """B3's `variant` ("auto" or "gelu-saved") of the exact-GELU MLM step at the arguments' shape."""
  config = gpu_mlm.load_config(True, args.batch, args.seq)
  heads = max(1, args.d_model // 64)
  config.model.update(dict(vocab_size=args.vocab, d_model=args.d_model, num_layers=args.layers, num_heads=heads,
                           d_ff=4 * args.d_model, dtype=args.dtype, activation="gelu"))
  config.data.vocab_size = args.vocab
  mesh = mesh_lib.make_mesh(config.mesh, jax.devices()[:1])
  rules = mesh_lib.rules_from_config(config.logical_axis_rules)
  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    return gpu_mlm.Variant(variant, config, mesh, rules)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--d-model", type=int, default=256)
  p.add_argument("--layers", type=int, default=4)
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--seq", type=int, default=128)
  p.add_argument("--vocab", type=int, default=30522)
  p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  p.add_argument("--rounds", type=int, default=7)
  p.add_argument("--smoke", action="store_true", help="a tiny model, 1 round")
  args = p.parse_args()
  if args.smoke:
    args.d_model, args.layers, args.batch, args.seq, args.vocab, args.rounds = 64, 1, 2, 32, 512, 1
  variants = {"plain": build("gelu-saved", args), "recomputed": build("auto", args)}
  for v in variants.values():
    v.run(2)  # warm-up; also the first two losses
  times = {name: [] for name in variants}
  for r in range(args.rounds):  # alternate the order every round
    for name in (list(variants) if r % 2 == 0 else list(reversed(variants))):
      times[name].append(1000 * float(variants[name].run(3)))
  for name, v in variants.items():
    print(f"{name:>10}: XLA temp {v.temp_gib * 1024:8.1f} MiB, compile {v.compile_s:.2f} s, "
          f"median {statistics.median(times[name]):.1f} ms/step {[round(t, 1) for t in times[name]]}, "
          f"first losses {v.losses[:2]}")
  same = variants["plain"].losses[:2] == variants["recomputed"].losses[:2]
  print(f"losses bitwise equal: {same}")
  if not same:
    raise SystemExit("the recomputed activation changed the losses")


if __name__ == "__main__":
  main()
