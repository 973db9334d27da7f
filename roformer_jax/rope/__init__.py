"""Rotary Position Embedding (RoPE) as pure JAX functions: every variant, one formula.

RoFormer (Su et al., 2021) encodes the absolute position m of a query or key by
rotating each feature pair i by the angle m * theta_i, with
theta_i = theta ** (-2i / d) (eq. 15). The inner product of a rotated query and key
then depends on the positions only through m - n (eq. 16), which is what makes RoPE a
*relative* position encoding.

Shape letters used throughout:
  B... any number of leading batch dims, T length, N heads, H head dim,
  R rotary dim (R <= H, even), K = R // 2 rotated feature pairs.

Layouts (which features form a rotated pair):
  "interleaved": pairs (2i, 2i + 1), the paper's eq. (34) and HF RoFormer.
  "half":        pairs (i, i + R/2), GPT-NeoX / LLaMA.
`layout_permutation` / `convert_qk_layout` move q/k projection weights between them.

Exact phases. The usual recipe computes ``positions * inv_freq`` in float32. The product
then carries a relative error of ~6e-8, i.e. ~1e-3 rad of phase error at position 2^14
and ~1 rad at 2^24. Here the phase is reduced modulo one turn *exactly* with integer
arithmetic: each frequency's turns-per-position f_i = theta_i / 2pi is stored as a 64-bit
binary fraction (two uint32 words computed in float64 at trace time), and
``frac(m * f_i)`` is formed with wrapping uint32 multiplies, which compute the product
modulo 2^32 for free. Only the reduced phase (|phase| <= pi) is converted to float, so
the angle error is ~2e-7 rad at every int32 position. This costs five integer
multiply-adds per (position, frequency), shared by all N heads, so it is nearly free next
to reading and writing x (see bench/rope.py and docs/rope.md).

Every variant (rope-variants table in docs/rope.md): pair p turns by phi_p = sum_a pos_a * F[a, p]
over A position axes (positions [..., T] or [..., T, A]); the variants differ in F (which
frequency, which axis: `sections`, `section_layout`, `frequencies`), how positions are formed
(`multimodal_positions`, `grid_positions`), the layout (interleaved, half, half in blocks) and
optional amplitudes (xPos, YaRN's attention factor). `RotaryConfig` is the spec that holds one
choice; `from_hf_config` builds it from a HuggingFace config.json.

Modules: `frequencies` (validation, scalings, pair tables), `rotation` (exact phases, cos/sin,
`rotate`, `apply_rotary`, xPos), `float2` (float-float arithmetic for dynamic NTK's run-time
frequencies), `positions` (1-D, multimodal and grid positions), `spec`
(`RotaryConfig`), `hf_config` (`from_hf_config`), `layouts` (q/k weight permutations) and
`analysis` (the dense eq. 15 and the decay bound of eq. 37). `import roformer_jax.rope` loads
jax and numpy only.
"""

from roformer_jax.rope.analysis import long_term_decay, rotation_matrix
from roformer_jax.rope.frequencies import (FREQUENCY_KINDS, LAYOUTS, LENGTH_DEPENDENT_TYPES, ROPE_TYPES,
                                           SECTION_LAYOUTS, RopeConfigWarning, check_scaling, frequencies_change,
                                           is_length_dependent, mixed_frequencies, pair_axes, pair_frequencies,
                                           pixel_frequencies,
                                           rescaled_theta, rope_frequencies, row_lengths, scaling_warnings)
from roformer_jax.rope.hf_config import from_hf_config, hf_families, hf_frequencies
from roformer_jax.rope.layouts import convert_qk_layout, layout_permutation
from roformer_jax.rope.positions import (bria_fibo2_positions, caption_positions, flux_positions, grid_positions,
                                         keypoint_positions,
                                         ltx2_audio_positions, ltx2_video_positions, ltx_pair_layout, ltx_positions,
                                         lumina_positions, mochi_positions,
                                         multimodal_positions, omni_audio_tokens, omni_positions, pad_positions, positions_from_mask,
                                         positions_from_segments, sam2_memory_positions, sam3_positions,
                                         xdrope_positions,
                                         qwen_image21_positions, video_grid_positions, videorope_positions)
from roformer_jax.rope.rotation import apply_rotary, rotary_cos_sin, rotate, xpos_amplitude
from roformer_jax.rope.spec import RotaryConfig, freeze_scaling

__all__ = [
    "LAYOUTS", "ROPE_TYPES", "LENGTH_DEPENDENT_TYPES", "SECTION_LAYOUTS", "FREQUENCY_KINDS",
    "apply_rotary", "rotate", "rotary_cos_sin", "xpos_amplitude", "rope_frequencies", "check_scaling",
    "scaling_warnings", "RopeConfigWarning",
    "is_length_dependent", "frequencies_change", "row_lengths", "pair_axes", "pair_frequencies",
    "pixel_frequencies", "rescaled_theta", "mixed_frequencies", "videorope_positions", "rotation_matrix", "long_term_decay", "positions_from_segments",
    "positions_from_mask", "multimodal_positions", "omni_positions", "omni_audio_tokens", "xdrope_positions", "pad_positions", "grid_positions", "keypoint_positions", "sam2_memory_positions", "sam3_positions", "flux_positions", "video_grid_positions", "lumina_positions", "caption_positions", "qwen_image21_positions", "bria_fibo2_positions", "mochi_positions", "ltx_positions", "ltx_pair_layout", "ltx2_video_positions", "ltx2_audio_positions", "layout_permutation", "convert_qk_layout",
    "RotaryConfig", "freeze_scaling", "from_hf_config", "hf_families", "hf_frequencies",
]
