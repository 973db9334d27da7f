"""Attention with RoPE: softmax attention, linear attention (eq. 19), and their NNX module.

Shapes: B batch, T query length, S key length, N heads, H head dim, Hv value head dim,
F feature-map dim (linear attention), D model dim.

One file per part; every public name is also here (`attention.dot_product_attention`):

  masks.py    `make_attention_mask` (dense), `MaskFactors` / `mask_factors` (factored); the
              sliding window's test and check (`window_allows`, `check_window`)
  softmax.py  `dot_product_attention` (RoPE on q and k, eq. 16) and its dispatch to XLA,
              cuDNN or the chunked kernel
  chunked.py  `chunked_attention`: exact softmax attention in O(T + S) memory
  linear.py   `linear_attention`, `linear_attention_step` (eq. 19), the feature maps
  sharded.py  `context_parallel_attention`: a kernel, given as an argument, on q, k, v sharded
              over the mesh's context axis (roformer_jax.context_parallel)
  layer.py    `MultiHeadAttention`, a thin NNX shell that holds the projections and calls them;
              `cross_kv`, `cross_attend`

The pure functions import jax and numpy only; the module's names (`MultiHeadAttention`,
`AttentionTemperature`, `FeatureProjection`, `cross_kv`, `cross_attend`, `ATTENTION_KINDS`) load layer.py, and with it
flax, on first use (PEP 562), as the top-level package does for its submodules.
"""

import importlib

from roformer_jax.attention.chunked import chunked_attention
from roformer_jax.attention.linear import (FEATURE_MAPS, LinearAttentionState, elu_feature_map, favor_feature_map,
                                           favor_projection, init_linear_state, linear_attention,
                                           linear_attention_step)
from roformer_jax.attention.masks import MaskFactors, check_window, make_attention_mask, mask_factors, window_allows
from roformer_jax.attention.softmax import (ATTENTION_IMPLEMENTATIONS, CHUNKED_MIN_LENGTH, GPU_DENSE_LOGITS_BYTES,
                                            attention_implementation, dot_product_attention)

_LAYER = frozenset({"ATTENTION_KINDS", "AttentionTemperature", "FeatureProjection", "MultiHeadAttention", "cross_attend",
                    "cross_kv"})

__all__ = [
    "ATTENTION_KINDS", "AttentionTemperature", "FEATURE_MAPS", "FeatureProjection", "LinearAttentionState",
    "ATTENTION_IMPLEMENTATIONS", "CHUNKED_MIN_LENGTH", "GPU_DENSE_LOGITS_BYTES", "MaskFactors", "MultiHeadAttention",
    "chunked_attention",
    "mask_factors", "attention_implementation", "cross_attend", "cross_kv", "dot_product_attention",
    "elu_feature_map", "favor_feature_map", "favor_projection", "init_linear_state",
    "linear_attention", "linear_attention_step", "make_attention_mask", "check_window", "window_allows",
]


def __getattr__(name):
  if name in _LAYER:
    return getattr(importlib.import_module("roformer_jax.attention.layer"), name)
  raise AttributeError(f"module 'roformer_jax.attention' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | _LAYER)
