"""roformer-jax: RoFormer / Rotary Position Embedding in JAX and Flax NNX.

Public modules:
  rope        pure RoPE functions (eq. 34 and the dense eq. 15), scalings, layouts
  attention   softmax attention with RoPE (dense or chunked), linear attention (eq. 19), MultiHeadAttention
              (a package: masks, softmax, chunked, linear, sharded, layer)
  positional  the position-encoding enum (rope | sinusoidal | learned | none)
  models      ModelConfig; RoFormer encoder and heads, Transformer-base seq2seq, causal LM
  decoding    greedy / sampling / beam search over the models' decode caches
  hf          HuggingFace RoFormer checkpoints in and out (safetensors, no torch)
  optim, losses       optax schedules/optimisers of the paper, and the losses (pure)
  data                Grain/TFDS input pipelines, tokenizers, the offline corpus
  trainer             train_and_evaluate(config, workdir): the sharded training loop
  mesh, checkpoints, metrics, tasks   the trainer's parts
  passkey             the synthetic pass-key retrieval test (prompts, training rows, scoring)
  context_parallel    sequences split over the mesh's context axis
"""

import importlib

__all__ = ["attention", "decoding", "hf", "models", "positional", "rope"]
__version__ = "0.1.0"

# Every submodule loads on first use (PEP 562), so `import roformer_jax.rope` costs jax and
# numpy only: an eager `from roformer_jax import models` here would pull in flax (and with it
# optax and absl) for every user of the pure RoPE functions. tests/test_packaging.py checks
# each module's import set.
_SUBMODULES = frozenset(__all__) | {
    "checkpoints", "context_parallel", "data", "errors", "eval_metrics", "evaluate", "launch", "losses", "mesh", "metrics",
    "optim", "partitioning", "passkey", "peers", "stopping", "tasks", "trainer", "workdir_lock"}


def __getattr__(name):
  if name in _SUBMODULES:
    return importlib.import_module(f"roformer_jax.{name}")
  raise AttributeError(f"module 'roformer_jax' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | _SUBMODULES)
