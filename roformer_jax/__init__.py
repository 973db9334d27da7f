"""roformer-jax: RoFormer / Rotary Position Embedding in JAX and Flax NNX.

Public modules: `roformer_jax.rope` (pure RoPE functions). Later modules (attention,
models, training) build on it.
"""

from roformer_jax import rope

__all__ = ["rope"]
__version__ = "0.1.0"
