"""roformer-jax: RoFormer / Rotary Position Embedding in JAX and Flax NNX.

The model library (needs jax, numpy, flax; `hf` adds safetensors):
  rope        pure RoPE functions (eq. 34 and the dense eq. 15), scalings, layouts
  positional  the position-encoding enum (rope | sinusoidal | learned | none) and the RoPE spec
  attention   softmax attention with RoPE (dense or chunked), linear attention (eq. 19), MultiHeadAttention
              (a package: masks, softmax, chunked, linear, sharded, layer)
  models      ModelConfig (per-layer RoPE / NoPE / windows); RoFormer encoder and heads, Transformer-base
              seq2seq, causal LM
  vit         a Vision Transformer with 2-D RoPE (RoPE-Axial, RoPE-Mixed, Qwen-VL 2-D)
  decoding    greedy / sampling / beam search over the models' decode caches
  hf          HuggingFace RoFormer checkpoints in and out (safetensors, no torch)
  losses, mesh, partitioning, context_parallel, errors   the losses, the device mesh and its
              logical axis rules, sequences split over the mesh's context axis, error types

Sub-packages that match the extras:
  training    (`[train]`) train(config, workdir), train_step / eval_step, tasks, data, optim,
              checkpoints, metrics, and the reliability parts (stopping, workdir_lock, launch, peers)
  evaluation  (`[train]` + `[eval]`) evaluate, eval_metrics, generation, passkey
"""

import importlib

__all__ = ["attention", "decoding", "hf", "models", "positional", "rope", "vit"]
__version__ = "0.1.0"

# Every submodule loads on first use (PEP 562), so `import roformer_jax.rope` costs jax and
# numpy only: an eager `from roformer_jax import models` here would pull in flax (and with it
# optax and absl) for every user of the pure RoPE functions. tests/test_packaging.py checks
# each module's import set.
_SUBMODULES = frozenset(__all__) | {
    "context_parallel", "errors", "evaluation", "losses", "mesh", "partitioning", "training"}


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f"roformer_jax.{name}")
  raise AttributeError(f"module 'roformer_jax' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | _SUBMODULES)
