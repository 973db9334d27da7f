"""Issue 28, item 1: does the attention's layout in the JAX source change XLA:CPU's copies?

  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python experiments/attention_layout.py       # T=128 and 512
  python experiments/attention_layout.py --smoke                                    # seconds

A bare 4-layer encoder of B9's size (hidden 256, 4 heads, ff 1024, B=8; post-LN without scale
and bias, no embeddings, no RoPE) written three ways, each jitted whole:
- "btnh": projections to [B, T, N, H] and `jax.nn.dot_product_attention` (what the models do);
- "bnth": projections straight to head-major [B, N, T, H] and the attention's einsums in it;
- "fused": one [D, 3N, H] QKV projection, then as "btnh".
It prints the largest output difference to "btnh", the number of transpose/copy fusions in each
compiled program, and the median ms per forward over 7 rotating rounds of 5 calls. Then RoPE's
share of the real encoder (`models.RoFormerModel`, same size, through `models.jitted`):
position="rope" vs position="none", 9 rotating rounds of 5 calls.
"""

from __future__ import annotations

import argparse
import re
import time

import jax
import jax.numpy as jnp
import numpy as np

B, D, N, L, F = 8, 256, 4, 4, 1024
H = D // N


def init(key, layers: int = L):
  k = jax.random.split(key, 6)
  return [dict(wq=jax.random.normal(k[0], (D, N, H)) * .05, wk=jax.random.normal(k[1], (D, N, H)) * .05,
               wv=jax.random.normal(k[2], (D, N, H)) * .05, wo=jax.random.normal(k[3], (N, H, D)) * .05,
               bq=jnp.zeros((N, H)), bk=jnp.zeros((N, H)), bv=jnp.zeros((N, H)),
               w1=jax.random.normal(k[4], (D, F)) * .05, w2=jax.random.normal(k[5], (F, D)) * .05)
          for _ in range(layers)]


def _norm(x):
  m = x.mean(-1, keepdims=True)
  return (x - m) * jax.lax.rsqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-12)


def btnh(x, p):
  q = jnp.einsum("btd,dnh->btnh", x, p["wq"]) + p["bq"]
  k = jnp.einsum("btd,dnh->btnh", x, p["wk"]) + p["bk"]
  v = jnp.einsum("btd,dnh->btnh", x, p["wv"]) + p["bv"]
  return jnp.einsum("btnh,nhd->btd", jax.nn.dot_product_attention(q, k, v), p["wo"])


def bnth(x, p):
  q = jnp.einsum("btd,dnh->bnth", x, p["wq"]) + p["bq"][:, None]
  k = jnp.einsum("btd,dnh->bnth", x, p["wk"]) + p["bk"][:, None]
  v = jnp.einsum("btd,dnh->bnth", x, p["wv"]) + p["bv"][:, None]
  s = jnp.einsum("bnth,bnsh->bnts", q, k) / np.sqrt(H)
  return jnp.einsum("bnth,nhd->btd", jnp.einsum("bnts,bnsh->bnth", jax.nn.softmax(s, -1), v), p["wo"])


def fused(x, p):
  w = jnp.concatenate([p["wq"], p["wk"], p["wv"]], 1)
  q, k, v = jnp.split(jnp.einsum("btd,dnh->btnh", x, w) + jnp.concatenate([p["bq"], p["bk"], p["bv"]]), 3, axis=2)
  return jnp.einsum("btnh,nhd->btd", jax.nn.dot_product_attention(q, k, v), p["wo"])


def encoder(attention):
  def forward(params, x):
    for p in params:
      x = _norm(x + attention(x, p))
      x = _norm(x + jax.nn.gelu(x @ p["w1"], approximate=False) @ p["w2"])
    return x
  return jax.jit(forward)


def _median_ms(fs: dict, args_of, rounds: int, calls: int) -> dict:
  times = {name: [] for name in fs}
  for r in range(rounds):
    for name in list(fs)[r % len(fs):] + list(fs)[:r % len(fs)]:
      fs[name](*args_of(name)).block_until_ready()
      start = time.perf_counter()
      for _ in range(calls):
        fs[name](*args_of(name)).block_until_ready()
      times[name].append((time.perf_counter() - start) / calls * 1e3)
  return {name: float(np.median(ts)) for name, ts in times.items()}


def rope_share(t: int, rounds: int, calls: int, layers: int = L) -> dict:
  """ms per forward of the real encoder with RoPE and without any position encoding."""
  from flax import nnx

  from roformer_jax import models
  fs = {}
  for position in ("rope", "none"):
    cfg = models.ModelConfig(vocab_size=30522, d_model=D, num_layers=layers, num_heads=N, d_ff=F, max_position=1024,
                             dropout=0.0, attention_dropout=0.0, position=position)
    fs[position] = models.jitted(models.RoFormerModel(cfg, rngs=nnx.Rngs(0)), "encode")
  ids = jnp.asarray(np.random.default_rng(0).integers(1, 30522, (B, t)), jnp.int32)
  return _median_ms(fs, lambda name: (ids,), rounds, calls)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--lengths", default="128,512")
  parser.add_argument("--smoke", action="store_true", help="one layer, T=16, 1 round of 1 call")
  args = parser.parse_args()
  rounds, calls = (1, 1) if args.smoke else (7, 5)
  layers = 1 if args.smoke else L
  params = init(jax.random.key(0), layers)
  for t in [16] if args.smoke else [int(s) for s in args.lengths.split(",")]:
    x = jax.random.normal(jax.random.key(1), (B, t, D))
    fs = {name: encoder(a) for name, a in (("btnh", btnh), ("bnth", bnth), ("fused", fused))}
    ref = fs["btnh"](params, x)
    times = _median_ms(fs, lambda name, x=x: (params, x), rounds, calls)
    for name, f in fs.items():
      text = f.lower(params, x).compile().as_text()
      copies = len(re.findall(r"(?:transpose|copy)[\w.]*fusion[\w.]* = ", text))
      diff = float(jnp.abs(f(params, x) - ref).max())
      print(f"T={t:4} {name:6} {times[name]:8.2f} ms  transpose/copy fusions {copies:3}  "
            f"max |diff| vs btnh {diff:.1e}", flush=True)
    ms = rope_share(t, 1 if args.smoke else 9, calls, layers)
    print(f"T={t:4} RoFormerModel: rope {ms['rope']:.2f} ms, none {ms['none']:.2f} ms "
          f"(RoPE {100 * (ms['rope'] - ms['none']) / ms['rope']:.1f}%)", flush=True)


if __name__ == "__main__":
  main()
