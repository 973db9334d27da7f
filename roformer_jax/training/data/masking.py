"""BERT's masked-language-model corruption (Sec. 4.2 follows Devlin et al.): 15%, 80/10/10."""

from __future__ import annotations

import numpy as np


def mask_tokens(tokens: np.ndarray, rng: np.random.Generator, *, vocab_size: int, num_special: int,
                mask_id: int, probability: float = 0.15, mask_ratio: float = 0.8,
                random_ratio: float = 0.1) -> dict[str, np.ndarray]:
  """Selects tokens for prediction and corrupts them.

  Each token that is not special (id >= ``num_special``: padding, BOS/EOS and the mask itself
  are never selected) is selected with probability ``probability``. A selected token becomes
  ``mask_id`` with probability ``mask_ratio``, a uniformly random non-special token with
  probability ``random_ratio``, and stays itself otherwise.

  Args:
    tokens: int[n] token ids.
    rng: the generator to draw from (seed it per example for reproducible, resumable masks).
    vocab_size: random replacements are drawn from ``[num_special, vocab_size)``.
    num_special: special tokens occupy ids ``0 .. num_special - 1``.
    mask_id: the [MASK] id.
    probability: selection rate (BERT: 0.15).
    mask_ratio: share of selected tokens replaced by [MASK] (BERT: 0.8).
    random_ratio: share replaced by a random token (BERT: 0.1).

  Returns:
    ``inputs`` int32[n] (corrupted), ``targets`` int32[n] (the original ids) and ``weights``
    float32[n] (1.0 exactly at the selected tokens).
  """
  if not (0.0 <= probability <= 1.0 and mask_ratio >= 0 and random_ratio >= 0
          and mask_ratio + random_ratio <= 1.0):
    raise ValueError(f"Bad MLM rates: probability={probability}, mask_ratio={mask_ratio}, "
                     f"random_ratio={random_ratio}; need probabilities with mask + random <= 1.")
  tokens = np.asarray(tokens, np.int32)
  selected = (tokens >= num_special) & (rng.random(tokens.shape) < probability)
  action = rng.random(tokens.shape)
  inputs = tokens.copy()
  inputs[selected & (action < mask_ratio)] = mask_id
  random = selected & (action >= mask_ratio) & (action < mask_ratio + random_ratio)
  inputs[random] = rng.integers(num_special, vocab_size, size=int(random.sum()), dtype=np.int32)
  return {"inputs": inputs, "targets": tokens, "weights": selected.astype(np.float32)}
