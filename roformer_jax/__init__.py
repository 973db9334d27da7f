"""roformer-jax: RoFormer / Rotary Position Embedding in JAX and Flax NNX.

Public modules:
  rope        pure RoPE functions (eq. 34 and the dense eq. 15), scalings, layouts
  attention   softmax attention with RoPE, linear attention (eq. 19), MultiHeadAttention
  positional  the position-encoding enum (rope | sinusoidal | learned | none)
  models      ModelConfig; RoFormer encoder and heads, Transformer-base seq2seq, causal LM
  decoding    greedy / sampling / beam search over the models' decode caches
  hf          HuggingFace RoFormer checkpoints in and out (safetensors, no torch)
  optim, losses       optax schedules/optimisers of the paper, and the losses (pure)
  data                Grain/TFDS input pipelines, tokenizers, the offline corpus
  trainer             train_and_evaluate(config, workdir): the sharded training loop
  mesh, checkpoints, metrics, tasks   the trainer's parts
"""

import importlib

from roformer_jax import attention, models, positional, rope

__all__ = ["attention", "decoding", "hf", "models", "positional", "rope"]
__version__ = "0.1.0"


def __getattr__(name):  # decoding and hf load on first use
  if name in ("decoding", "hf"):
    return importlib.import_module(f"roformer_jax.{name}")
  raise AttributeError(f"module 'roformer_jax' has no attribute {name!r}")
