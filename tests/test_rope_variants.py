"""Multi-axis RoPE, xPos, explicit / learned frequencies, proportional RoPE and the position
builders, against float64 NumPy transcriptions of the published formulas (independent of the
package's code paths) and the properties every variant must keep. The anchors' own outputs
(transformers, rotary-embedding-torch, timm, torchscale) are checked in test_rope_anchor_golden.py."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roformer_jax import rope
from roformer_jax.rope import RotaryConfig

RNG = np.random.default_rng(0)


# ---------------------------------------------------------------------------------------
# Float64 references: rotate pairs by angles phi [..., T, K] in a given layout.
# ---------------------------------------------------------------------------------------


def ref_rotate(x, phi, layout, rotary_dim=None, blocks=1, amp=None):
  """x float64 [..., T, N, H]; phi [..., T, K] (or [..., T, N, K]); returns the rotation."""
  x = np.asarray(x, np.float64)
  k = phi.shape[-1]
  r = 2 * k if rotary_dim is None else rotary_dim
  if phi.ndim == x.ndim - 1:
    phi = phi[..., None, :]
  c, s = np.cos(phi), np.sin(phi)
  if amp is not None:
    c, s = c * amp[..., None, :], s * amp[..., None, :]
  out = x.copy()
  if layout == "interleaved":
    i1, i2 = np.arange(0, r, 2), np.arange(1, r, 2)
  else:
    per = k // blocks
    i1 = np.concatenate([b * 2 * per + np.arange(per) for b in range(blocks)])
    i2 = i1 + per
  x1, x2 = x[..., i1], x[..., i2]
  out[..., i1] = x1 * c - x2 * s
  out[..., i2] = x2 * c + x1 * s
  return out


def close(got, want, rtol=1e-5, atol=1e-5):
  np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------
# Pair tables.
# ---------------------------------------------------------------------------------------


def test_qwen3_vl_interleaved_pattern_is_thw_then_t():
  axes = rope.pair_axes((24, 20, 20), 64, layout="interleaved")
  assert "".join("THW"[a] for a in axes) == "THW" * 20 + "TTTT"
  assert np.bincount(axes).tolist() == [24, 20, 20]
  qwen35 = rope.pair_axes((11, 11, 10), 32, layout="interleaved")  # partial 0.25 of a 256 head
  assert "".join("THW"[a] for a in qwen35) == "THW" * 10 + "TH"
  assert np.bincount(qwen35).tolist() == [11, 11, 10]


def test_chunked_and_videorope_tables():
  assert rope.pair_axes((2, 3, 3), 8).tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
  video = rope.pair_axes((16, 24, 24), 64, layout="videorope")
  assert video[:48].tolist() == [1, 2] * 24 and video[48:].tolist() == [0] * 16  # low frequencies to T


@pytest.mark.parametrize("sections,layout,match", [
    ((16, 24, 20), "chunked", r"give 60 rotated pairs, but the rotary dim has R / 2 = 64"),
    ((24, 20, 24), "interleaved", r"give 68 rotated pairs"),
    ((16, 24, 24.5), "chunked", "non-negative ints"),
    ((16, 20, 28), "videorope", "h == w"),
])
def test_sections_that_do_not_fit_are_refused(sections, layout, match):
  with pytest.raises(ValueError, match=match):
    rope.pair_axes(sections, 64, layout=layout)


def test_saturating_interleaved_sections_are_refused_with_the_counts():
  # 8 pairs, (2, 3, 3): H wants pairs 1, 4, 7 (< 9), W pairs 2, 5 (8 is past the end) -> counts (3, 3, 2)
  with pytest.raises(ValueError, match=r"gives each axis \(3, 3, 2\) pairs"):
    rope.pair_axes((2, 3, 3), 8, layout="interleaved")


def test_frequency_kinds():
  r, theta = 16, 100.0
  np.testing.assert_allclose(rope.pair_frequencies(r, theta), theta ** (-np.arange(0, r, 2) / r))
  per_axis = rope.pair_frequencies(r, theta, sections=(4, 4), kind="per_axis")  # theta^(-4j/r)
  np.testing.assert_allclose(per_axis, np.tile(theta ** (-4 * np.arange(4) / r), 2))
  split = rope.pair_frequencies(r, theta, sections=(4, 4), kind="split")  # Pixtral: H even, W odd
  full = theta ** (-np.arange(0, r, 2) / r)
  np.testing.assert_allclose(split, np.concatenate([full[0::2], full[1::2]]))
  with pytest.raises(ValueError, match="equal sections"):
    rope.pair_frequencies(r, theta, sections=(3, 5), kind="split")
  with pytest.raises(ValueError, match="custom frequencies must be 8 finite"):
    rope.pair_frequencies(r, theta, kind=(1.0, 2.0))


# ---------------------------------------------------------------------------------------
# Multi-axis rotation against float64.
# ---------------------------------------------------------------------------------------

CASES = [  # (sections, section_layout, frequencies, layout, head dim, rotary dim, theta)
    ((2, 3, 3), "chunked", "shared", "half", 16, None, 1e6),  # Qwen2-VL, tiny
    ((16, 24, 24), "chunked", "shared", "half", 128, None, 1e6),  # Qwen2-VL, real
    ((24, 20, 20), "interleaved", "shared", "half", 128, None, 5e6),  # Qwen3-VL
    ((11, 11, 10), "interleaved", "shared", "half", 256, 64, 1e7),  # Qwen3.5, partial 0.25
    ((16, 24, 24), "videorope", "shared", "half", 128, None, 1e6),  # VideoRoPE
    ((4, 4), "chunked", "per_axis", "half", 16, None, 1e4),  # Qwen-VL vision
    ((4, 4), "chunked", "per_axis", "interleaved", 16, None, 100.0),  # RoPE-Axial / Llama 4 vision
    ((4, 4), "chunked", "split", "half", 16, None, 1e4),  # Pixtral
    ((4, 4, 4), "chunked", "per_axis", "interleaved", 32, 24, 1e4),  # RET axial, 3 axes, partial
]


@pytest.mark.parametrize("sections,section_layout,freq,layout,h,rd,theta", CASES)
def test_multi_axis_matches_float64_up_to_2_20(sections, section_layout, freq, layout, h, rd, theta):
  a, r = len(sections), rd or h
  x = RNG.normal(size=(2, 5, 2, h)).astype(np.float32)  # odd T
  pos = RNG.integers(0, 2**20, size=(2, 5, a)).astype(np.int32)
  pos[0, 0] = 2**20
  got = rope.apply_rotary(x, pos, theta, layout=layout, rotary_dim=rd, sections=sections,
                          section_layout=section_layout, frequencies=freq)
  axes = rope.pair_axes(sections, r // 2, layout=section_layout)
  f = rope.pair_frequencies(r, theta, sections=sections, kind=freq)
  phi = np.take(pos.astype(np.float64), axes, axis=-1) * f  # [B, T, K]
  close(got, ref_rotate(x, phi, layout, rd), rtol=2e-5, atol=2e-5)
  spec = RotaryConfig(theta=theta, layout=layout, rotary_dim=rd, sections=sections, section_layout=section_layout,
                      frequencies=freq)
  np.testing.assert_array_equal(spec.apply(x, pos), got)
  assert spec.position_shape == (a,)


@pytest.mark.parametrize("section_layout,sections", [("chunked", (2, 3, 3)), ("interleaved", (4, 2, 2)),
                                                     ("videorope", (2, 3, 3))])
def test_equal_axes_reduce_to_1d(section_layout, sections):
  x = RNG.normal(size=(2, 7, 3, 16)).astype(np.float32)
  p = RNG.integers(0, 50000, size=(2, 7)).astype(np.int32)
  one = rope.apply_rotary(x, p, 1e6, layout="half")
  multi = rope.apply_rotary(x, np.stack([p] * 3, -1), 1e6, layout="half", sections=sections,
                            section_layout=section_layout)
  np.testing.assert_array_equal(multi, one)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_relative_along_each_axis_and_norm(case):
  sections, section_layout, freq, layout, h, rd, theta = CASES[case]
  a = len(sections)
  kw = dict(layout=layout, rotary_dim=rd, sections=sections, section_layout=section_layout, frequencies=freq)
  q = RNG.normal(size=(1, 4, 1, h)).astype(np.float32)
  k = RNG.normal(size=(1, 4, 1, h)).astype(np.float32)
  pq, pk = RNG.integers(0, 1000, (1, 4, a)), RNG.integers(0, 1000, (1, 4, a))
  base = np.einsum("btnh,bsnh->bts", rope.apply_rotary(q, pq, theta, **kw), rope.apply_rotary(k, pk, theta, **kw))
  for axis in range(a):
    shift = np.zeros(a, np.int64)
    shift[axis] = 12345
    moved = np.einsum("btnh,bsnh->bts", rope.apply_rotary(q, pq + shift, theta, **kw),
                      rope.apply_rotary(k, pk + shift, theta, **kw))
    np.testing.assert_allclose(moved, base, rtol=1e-4, atol=1e-4)
  rotated = rope.apply_rotary(q, pq, theta, **kw)
  np.testing.assert_allclose(np.linalg.norm(rotated, axis=-1), np.linalg.norm(q, axis=-1), rtol=1e-6)


def test_multi_axis_exact_phases_beat_the_float32_product_at_large_positions():
  x = np.ones((1, 1, 1, 16), np.float32)
  pos = np.array([[[2**20 + 3, 2**19 + 1, 7]]], np.int32)
  kw = dict(layout="half", sections=(2, 3, 3))
  exact = np.asarray(rope.apply_rotary(x, pos, 1e6, **kw))
  plain = np.asarray(rope.apply_rotary(x, pos, 1e6, exact=False, **kw))
  phi = np.take(pos.astype(np.float64), rope.pair_axes((2, 3, 3), 8), -1) * rope.pair_frequencies(16, 1e6)
  want = ref_rotate(x, phi, "half")
  assert np.abs(exact - want).max() < 1e-6 < np.abs(plain - want).max()


def test_positions_of_the_wrong_shape_are_refused():
  x = np.zeros((1, 4, 1, 16), np.float32)
  with pytest.raises(ValueError, match=r"positions must be \[..., T, 3\]"):
    rope.apply_rotary(x, np.zeros((1, 4), np.int32), sections=(2, 3, 3))
  with pytest.raises(ValueError, match=r"positions must be \[..., T, 3\]"):
    RotaryConfig(sections=(2, 3, 3)).cos_sin(np.zeros((1, 4, 2), np.int32), 16)


def test_multi_axis_length_dependent_scaling_reads_the_largest_position_on_any_axis():
  spec = RotaryConfig(theta=1e4, layout="half", sections=(2, 3, 3),
                      scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 8})
  pos = np.array([[[0, 0, 0], [1, 20, 3], [2, 2, 2]]], np.int32)
  assert np.asarray(spec.seq_len(pos)).tolist() == [21]
  x = RNG.normal(size=(1, 3, 1, 16)).astype(np.float32)
  # the dynamic base at length 21 (per row, traced: phase-exact like the static length), not at 3
  np.testing.assert_allclose(spec.apply(x, pos), spec.apply(x, pos, seq_len=21), rtol=1e-6, atol=1e-6)
  assert not np.allclose(spec.apply(x, pos), spec.apply(x, pos, seq_len=3), atol=1e-3)


def test_blocks_rotate_each_half_on_its_own():
  """Gemma 4 vision: the head split in two contiguous halves, half-layout RoPE inside each."""
  x = RNG.normal(size=(1, 6, 2, 16)).astype(np.float32)
  pos = RNG.integers(0, 9, size=(1, 6, 2))
  got = rope.apply_rotary(x, pos, 100.0, layout="half", sections=(4, 4), frequencies="per_axis", blocks=2)
  h_half = rope.apply_rotary(x[..., :8], pos[..., 0], 100.0, layout="half")
  w_half = rope.apply_rotary(x[..., 8:], pos[..., 1], 100.0, layout="half")
  np.testing.assert_allclose(got, np.concatenate([h_half, w_half], -1), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------
# Proportional vs partial.
# ---------------------------------------------------------------------------------------


def test_proportional_keeps_the_full_width_spectrum_and_pairs_across_the_head():
  x = RNG.normal(size=(1, 3, 1, 16)).astype(np.float32)
  pos = np.array([[0, 5, 1000]])
  prop = rope.apply_rotary(x, pos, 1e6, layout="half", scaling={"rope_type": "proportional",
                                                                "partial_rotary_factor": 0.25})
  f = 1e6 ** (-np.arange(0, 16, 2) / 16)
  f[2:] = 0.0  # int(0.25 * 16 // 2) = 2 pairs keep their frequency
  close(prop, ref_rotate(x, pos[..., None] * f, "half"), 1e-6, 1e-6)
  np.testing.assert_array_equal(np.asarray(prop)[..., [2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15]],
                                x[..., [2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15]])
  partial = rope.apply_rotary(x, pos, 1e6, layout="half", rotary_dim=4)  # the first 4 channels, theta^(-2p/4)
  close(partial, ref_rotate(x, pos[..., None] * 1e6 ** (-np.arange(0, 4, 2) / 4), "half", 4), 1e-6, 1e-6)
  assert not np.allclose(prop, partial)


# ---------------------------------------------------------------------------------------
# xPos.
# ---------------------------------------------------------------------------------------


def xpos_ref(n, r, gamma=512.0, c=0):
  zeta = (np.arange(0, r, 2) + 0.4 * r) / (1.4 * r)
  return zeta[None, :] ** ((np.asarray(n, np.float64)[:, None] - c) / gamma)


@pytest.mark.parametrize("length", [5, 8, 301])
def test_xpos_logits_decay_with_distance_and_match_float64(length):
  r = 32
  q = RNG.normal(size=(1, length, 2, 64)).astype(np.float32)
  k = RNG.normal(size=(1, length, 2, 64)).astype(np.float32)
  n = np.arange(length)
  spec = RotaryConfig(rotary_dim=r, xpos_scale_base=512.0, xpos_center=length // 2)
  qr, kr = spec.apply(q, n[None]), spec.apply(k, n[None], key=True)
  phi = n[None, :, None] * 1e4 ** (-np.arange(0, r, 2) / r)
  c = length // 2
  want_q = ref_rotate(q, phi, "interleaved", r, amp=xpos_ref(n, r, c=c)[None])
  want_k = ref_rotate(k, phi, "interleaved", r, amp=1 / xpos_ref(n, r, c=c)[None])
  close(qr, want_q, 1e-5, 1e-5)
  close(kr, want_k, 1e-5, 1e-5)
  logits = np.einsum("btnh,bsnh->bnts", qr, kr)
  other = RotaryConfig(rotary_dim=r, xpos_scale_base=512.0, xpos_center=0)  # any centre: same logits
  logits0 = np.einsum("btnh,bsnh->bnts", other.apply(q, n[None]), other.apply(k, n[None], key=True))
  np.testing.assert_allclose(logits, logits0, rtol=2e-4, atol=2e-4)


def test_xpos_cached_decoding_equals_the_full_call():
  """One centre for q and k: the last query against cached keys gives the full call's logits
  (rotary-embedding-torch's cached path centres q and k differently and does not)."""
  length, r = 9, 16
  q = RNG.normal(size=(1, length, 1, r)).astype(np.float32)
  k = RNG.normal(size=(1, length, 1, r)).astype(np.float32)
  spec = RotaryConfig(layout="half", xpos_scale_base=512.0, xpos_center=100)
  n = np.arange(length)[None]
  full = np.einsum("btnh,bsnh->bts", spec.apply(q, n), spec.apply(k, n, key=True))
  keys = np.concatenate([spec.apply(k[:, i:i + 1], n[:, i:i + 1], key=True) for i in range(length)], axis=1)
  last = np.einsum("btnh,bsnh->bts", spec.apply(q[:, -1:], n[:, -1:]), keys)
  np.testing.assert_allclose(last[0, 0], full[0, -1], rtol=1e-6, atol=1e-6)


def test_xpos_amplitudes_stay_finite_in_bf16_far_from_zero():
  spec = RotaryConfig(xpos_scale_base=512.0, xpos_center=2**20)
  x = jnp.ones((1, 2, 1, 16), jnp.bfloat16)
  pos = jnp.array([[2**20 - 4096, 2**20 + 4096]])
  out = spec.apply(x, pos)
  assert out.dtype == jnp.bfloat16 and bool(jnp.isfinite(out.astype(jnp.float32)).all())


# ---------------------------------------------------------------------------------------
# Explicit and learned frequencies.
# ---------------------------------------------------------------------------------------


def test_custom_static_frequencies_are_exact_and_equal_the_learned_path_at_small_positions():
  f = (0.5, 0.25, 1e-3, 3.0)
  x = RNG.normal(size=(1, 4, 1, 8)).astype(np.float32)
  pos = np.array([[0, 1, 17, 2**20]])
  static = rope.apply_rotary(x, pos, frequencies=f)
  close(static, ref_rotate(x, pos[..., None] * np.asarray(f), "interleaved"), 2e-6, 2e-6)
  learned = rope.apply_rotary(x[:, :3], pos[:, :3], frequencies=jnp.asarray(f, jnp.float32))
  np.testing.assert_allclose(learned, static[:, :3], rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="takes no scaling"):
    rope.apply_rotary(x, pos, frequencies=f, scaling={"rope_type": "linear", "factor": 2.0})


def test_learned_dense_frequencies_gradient_matches_the_analytic_one():
  """RoPE-Mixed: phi_p = x * F[0, p] + y * F[1, p] per head; d phi / d F[a, n, p] = pos_a."""
  n_heads, h = 2, 8
  x = RNG.normal(size=(1, 6, n_heads, h))
  pos = RNG.normal(size=(1, 6, 2)) * 3
  freqs = RNG.normal(size=(2, n_heads, h // 2))
  w = RNG.normal(size=x.shape)

  def loss(f):
    cos, sin = rope.rotary_cos_sin(jnp.asarray(pos, jnp.float32), h, frequencies=f)
    return jnp.sum(rope.rotate(jnp.asarray(x, jnp.float32), cos, sin) * w)

  grad = jax.grad(loss)(jnp.asarray(freqs, jnp.float32))
  phi = np.einsum("bta,ank->btnk", pos, freqs)
  out = ref_rotate(x, phi, "interleaved")
  # d out1 / d phi = -out2, d out2 / d phi = out1 (interleaved pairs (2p, 2p + 1))
  dphi = -out[..., 1::2] * w[..., 0::2] + out[..., 0::2] * w[..., 1::2]  # [B, T, N, K]
  want = np.einsum("btnk,bta->ank", dphi, pos)
  np.testing.assert_allclose(grad, want, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(loss(jnp.asarray(freqs, jnp.float32)), np.sum(out * w), rtol=1e-5)


def test_learned_frequencies_never_take_the_model_dtype():
  f = jnp.asarray([0.013, 0.0011], jnp.bfloat16)
  cos, _ = rope.rotary_cos_sin(jnp.array([300.0, 4097.0]), 4, frequencies=f)
  want = np.cos(np.array([300.0, 4097.0])[:, None] * np.asarray(f, np.float64))
  np.testing.assert_allclose(cos, want, rtol=1e-5, atol=1e-5)


def test_rotary_embedding_torch_helpers():
  np.testing.assert_allclose(rope.pixel_frequencies(4, 10.0), math.pi * np.linspace(1, 5, 4))
  assert rope.rescaled_theta(1e4, 2.0, 16) == pytest.approx(1e4 * 2.0 ** (16 / 14))
  x = RNG.normal(size=(1, 3, 1, 8)).astype(np.float32)
  pos = np.array([[3, 4, 5]])
  # interpolate_factor 2 (positions / 2) is linear scaling by 2
  np.testing.assert_allclose(rope.apply_rotary(x, pos, scaling={"rope_type": "linear", "factor": 2.0}),
                             ref_rotate(x, pos[..., None] / 2 * 1e4 ** (-np.arange(0, 8, 2) / 8), "interleaved"),
                             rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------
# Position builders.
# ---------------------------------------------------------------------------------------


def test_multimodal_positions_text_image_text():
  pos = rope.multimodal_positions([("text", 3), ("image", (1, 4, 4)), ("text", 2)])
  assert pos[:, 0].tolist() == [0, 1, 2, 3, 3, 3, 3, 5, 6]
  assert pos[:, 1].tolist() == [0, 1, 2, 3, 3, 4, 4, 5, 6]
  assert pos[:, 2].tolist() == [0, 1, 2, 3, 4, 3, 4, 5, 6]
  assert pos.dtype == np.int32


def test_text_after_a_video_continues_after_its_largest_id():
  pos = rope.multimodal_positions([("text", 2), ("video", (3, 4, 4), 1.0), ("text", 2)])
  assert pos[2:14, 0].tolist() == [2] * 4 + [3] * 4 + [4] * 4
  assert pos[14:, 0].tolist() == [5, 6]  # transformers 5.3-5.17: [4, 5] (#45381)
  delta = pos.max() + 1 - len(pos)
  assert delta == 7 - 16


@pytest.mark.parametrize("seconds,want", [(1.0, [0, 2, 4]), (0.5, [0, 1, 2]), (1.5, [0, 3, 6]), (0.3, [0, 0, 1])])
def test_qwen2_5_vl_temporal_ids_are_floored_in_floating_point(seconds, want):
  pos = rope.multimodal_positions([("video", (3, 2, 2), seconds)], tokens_per_second=2)
  assert pos[:, 0].tolist() == want
  image = rope.multimodal_positions([("image", (2, 2, 2))], tokens_per_second=2)
  assert image[:, 0].tolist() == [0, 0]  # an image has no seconds: tau = 0


def test_split_videos_start_each_frame_after_the_previous():
  pos = rope.multimodal_positions([("video", (2, 4, 2), 1.0), ("text", 1)], split_videos=True)
  assert pos[:, 0].tolist() == [0, 0, 2, 2, 4]
  assert pos[:, 1].tolist() == [0, 1, 2, 3, 4]


def test_pad_positions_left_and_right():
  rows = [rope.multimodal_positions([("text", 3)]), rope.multimodal_positions([("text", 1)])]
  pos, mask = rope.pad_positions(rows)
  assert pos.shape == (2, 3, 3) and mask.tolist() == [[True] * 3, [False, False, True]]
  assert pos[1, 2].tolist() == [0, 0, 0]
  _, right = rope.pad_positions(rows, left=False, length=4)
  assert right.tolist() == [[True] * 3 + [False], [True, False, False, False]]


def test_bad_runs_are_refused():
  with pytest.raises(ValueError, match="divisible by spatial_merge_size=2"):
    rope.multimodal_positions([("image", (1, 3, 4))])
  with pytest.raises(ValueError, match="expected"):
    rope.multimodal_positions([("audio", 3)])


def test_grid_positions_orders():
  merged = rope.grid_positions(2, 4, merge_size=2)
  assert merged.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1], [0, 2], [0, 3], [1, 2], [1, 3]]
  llama4 = rope.grid_positions(2, 3, axes="wh", start=1, cls="last")
  assert llama4[:3].tolist() == [[1, 1], [2, 1], [3, 1]] and llama4[-1].tolist() == [0, 0]
  dino = rope.grid_positions(2, 4, normalize="center")
  np.testing.assert_allclose(dino[:4, 1], [-0.75, -0.25, 0.25, 0.75])
  assert dino.dtype == np.float32
  assert rope.grid_positions(2, 2, frames=3).shape == (12, 2)
  # (frame, row, col): each frame's merge-ordered grid behind its frame index (transformers' get_vision_position_ids
  # with include_temporal, written out by hand)
  video = rope.grid_positions(2, 4, frames=2, merge_size=2, axes="thw")
  assert video.tolist() == [[f, *rc] for f in (0, 1) for rc in merged.tolist()]
  with pytest.raises(ValueError, match="axes='thw'"):
    rope.grid_positions(2, 4, axes="thw", cls="first")
  # Qwen2.5-VL's attention windows (get_window_index, written out by hand): a 2 x 6 grid is 1 x 3 merge blocks;
  # windows of 2 x 2 blocks from the top left: blocks 0, 1, then the partial window holding block 2; per frame
  windowed = rope.grid_positions(2, 6, merge_size=2, window=2, frames=2)
  blocks = rope.grid_positions(2, 6, merge_size=2).reshape(3, 4, 2)
  assert windowed.tolist() == 2 * blocks.reshape(-1, 2).tolist()  # one row of blocks: windows keep their order
  tall = rope.grid_positions(4, 4, merge_size=2, window=1)  # 1-block windows: the merge-block order itself
  assert tall.tolist() == rope.grid_positions(4, 4, merge_size=2).tolist()
  square = rope.grid_positions(6, 6, merge_size=2, window=2)  # 3 x 3 blocks: windows {0, 1, 3, 4}, {2, 5}, {6, 7}, {8}
  merged6 = rope.grid_positions(6, 6, merge_size=2).reshape(9, 4, 2)
  assert square.tolist() == merged6[[0, 1, 3, 4, 2, 5, 6, 7, 8]].reshape(-1, 2).tolist()
  with pytest.raises(ValueError, match="window"):
    rope.grid_positions(6, 6, merge_size=2, window=0)


def test_a_zero_position_cls_token_is_not_rotated():
  x = RNG.normal(size=(1, 7, 1, 16)).astype(np.float32)
  pos = rope.grid_positions(2, 3, axes="wh", start=1, cls="last")
  out = rope.apply_rotary(x, pos[None], 1e4, sections=(4, 4), frequencies="per_axis")
  np.testing.assert_array_equal(out[0, -1], x[0, -1])


@pytest.mark.parametrize("prompt", [
    [("text", 3), ("image", (1, 4, 4)), ("text", 2)],
    [("text", 2), ("video", (3, 4, 6), 0.5)],
])
def test_decode_continuation_equals_the_full_recompute(prompt):
  """Generated tokens continue at max(ids) + 1 + j on every axis (transformers' rope_deltas):
  the positions, and so the rotations, of prompt + generated text equal a full recompute."""
  pos = rope.multimodal_positions(prompt, tokens_per_second=2)
  new = 4
  cont = int(pos.max()) + 1 + np.arange(new)
  full = rope.multimodal_positions(prompt + [("text", new)], tokens_per_second=2)
  np.testing.assert_array_equal(full, np.concatenate([pos, np.stack([cont] * 3, -1)]))
  delta = int(pos.max()) + 1 - len(pos)
  np.testing.assert_array_equal(cont, len(pos) + np.arange(new) + delta)
  spec = RotaryConfig(theta=1e6, layout="half", sections=(2, 3, 3))
  k = RNG.normal(size=(1, len(full), 1, 16)).astype(np.float32)
  cached = np.concatenate([spec.apply(k[:, :len(pos)], pos[None]),
                           *[spec.apply(k[:, len(pos) + j:len(pos) + j + 1], full[None, len(pos) + j:len(pos) + j + 1])
                             for j in range(new)]], axis=1)
  np.testing.assert_array_equal(cached, spec.apply(k, full[None]))
