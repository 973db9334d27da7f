"""The RoPE variants against their anchors' own code: rotary-embedding-torch 0.9.1 (axial,
pixel, custom and learned frequencies, theta_rescale_factor, interpolate_factor, xPos),
torchscale 0.3.0 (xPos), timm 1.0.31 (RoPE-Axial, RoPE-Mixed with gradients, DINOv3),
transformers 5.23.0's vision encoders (Qwen2-VL, Llama 4, Pixtral, Gemma 4) and a float64
transcription of VideoRoPE's official code.

The goldens (tests/golden/rope_variants.{npz,json}) come from
scripts/make_rope_variant_golden.py in a throwaway Python 3.11 venv (its docstring has the pip
line); each case's `notes` in the JSON say how the anchor was called. Where the anchor can run
in float64 (`*_f64`), we compare with that; the anchors' own float32 rounding is not the target.
"""

import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roformer_jax import rope
from roformer_jax.rope import RotaryConfig

GOLDEN = pathlib.Path(__file__).parent / "golden"
META = json.loads((GOLDEN / "rope_variants.json").read_text())
CASES = {c["name"]: c for c in META["cases"]}
_ARRAYS = np.load(GOLDEN / "rope_variants.npz")


def arr(case, key):
  return np.asarray(_ARRAYS[f"{case}/{key}"])


def close(got, want, tol=1e-5):
  """float32 tolerance, relative to the size of the values (1e-5 of max |want|, at least 1e-5)."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  assert got.shape == want.shape, (got.shape, want.shape)
  scale = max(1.0, float(np.abs(want).max()))
  np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def test_every_case_is_checked_here():
  names = set(CASES)
  checked = {n for n in names if any(n.startswith(p) for p in _CHECKED_PREFIXES)}
  assert checked == names, f"cases without a test: {sorted(names - checked)}"
  assert META["meta"]["versions"]["rotary-embedding-torch"] == "0.9.1"


# ---------------------------------------------------------------------------------------
# rotary-embedding-torch
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ret_axial_pixel_8x6x4", "ret_axial_pixel_8x6x4_offsets",
                                  "ret_axial_lang_8x6x4", "ret_axial_lang_8x6x4_offsets"])
def test_ret_axial(name):
  """Three axes, each owning an interleaved block of 16 channels; 16 of 64 channels pass."""
  x, pos = arr(name, "x"), arr(name, "positions_f64")
  if "pixel" in name:
    freqs = np.tile(rope.pixel_frequencies(8, CASES[name]["params"]["constructor"]["max_freq"]), 3)
    kind = tuple(freqs)
    if "offsets" not in name:
      grid = rope.grid_positions(6, 4, normalize="linspace")  # the (6, 4) part of the (8, 6, 4) grid
      np.testing.assert_allclose(grid, pos[:24, 1:], atol=1e-6)
  else:
    kind = "per_axis"
  spec = RotaryConfig(rotary_dim=48, sections=(8, 8, 8), frequencies=kind)
  got = np.asarray(spec.apply(x, pos.astype(np.float32)), np.float64)
  want = arr(name, "out_f64")
  if "pixel" in name:
    # Pixel frequencies reach 128 pi rad per unit of position, so rounding a position in
    # [-1, 1] to float32 (6e-8) moves the phase by up to 2.4e-5 rad: float32 positions, ours
    # and RET's own float32 run alike, cannot hold 1e-5. Ours is no worse than RET's.
    ret_err = np.abs(arr(name, "out") - want).max()
    assert np.abs(got - want).max() <= max(ret_err, 1e-5)
    close(got, want, 1e-4)
  else:
    close(got, want)
  if name == "ret_axial_lang_8x6x4_offsets":  # RET's cached path gives every axis axis 0's offset
    assert not np.allclose(arr(name, "out_default_cache"), arr(name, "out_f64"), atol=1e-3)


@pytest.mark.parametrize("name", ["ret_custom_freqs_learned", "ret_lang_learned"])
def test_ret_learned_frequencies_and_their_gradient(name):
  x, w = arr(name, "x").astype(np.float64), arr(name, "w").astype(np.float64)
  f = arr(name, "inv_freq_f64")
  pos = jnp.arange(x.shape[1], dtype=jnp.float32)

  def loss(freqs):
    cos, sin = rope.rotary_cos_sin(pos, 16, frequencies=freqs)
    return jnp.sum(rope.rotate(jnp.asarray(x, jnp.float32), cos, sin) * w)

  cos, sin = rope.rotary_cos_sin(pos, 16, frequencies=jnp.asarray(f, jnp.float32))
  close(rope.rotate(jnp.asarray(x, jnp.float32), cos, sin), arr(name, "out_f64"))
  close(jax.grad(loss)(jnp.asarray(f, jnp.float32)), arr(name, "grad_inv_freq_f64"), 1e-4)
  close(loss(jnp.asarray(f, jnp.float32)), arr(name, "loss_f64")[0], 1e-5)


@pytest.mark.parametrize("factor", [1, 2, 8])
def test_ret_theta_rescale_factor(factor):
  name = f"ret_theta_rescale_{factor}"
  theta = rope.rescaled_theta(1e4, factor, 16)
  assert theta == pytest.approx(CASES[name]["params"]["theta_effective"], rel=1e-12)
  x = arr(name, "x")
  close(rope.apply_rotary(x, jnp.arange(9), theta, rotary_dim=16), arr(name, "out_f64"))
  np.testing.assert_allclose(rope.rope_frequencies(16, theta)[0], arr(name, "inv_freq"), rtol=1e-6)


def test_ret_interpolate_factor_is_linear_scaling():
  name = "ret_interpolate2_offset3"
  x = arr(name, "x")
  got = rope.apply_rotary(x, jnp.arange(9) + 3, rotary_dim=16, scaling={"rope_type": "linear", "factor": 2.0})
  close(got, arr(name, "out_f64"))


def test_ret_large_positions_and_bf16_positions():
  name = "ret_lang_large_positions"
  x, pos = arr(name, "x"), arr(name, "positions")[:, 0].astype(np.int64)
  # out_f64 multiplies RET's float32 inverse frequencies by float64 positions: the same
  # frequencies, given explicitly, on our exact integer path
  got = rope.apply_rotary(x, pos.astype(np.int32), rotary_dim=16, frequencies=tuple(arr(name, "inv_freq_f64")))
  close(got, arr(name, "out_f64"))
  # RET's float32 product is off by up to ~0.06 rad at 2^20; ours is not
  assert np.abs(arr(name, "out") - arr(name, "out_f64")).max() > 1e-3
  # bf16 queries: RET builds the positions in bf16 (all of 2^20 - 12 .. 2^20 round to 2^20);
  # we rotate bf16 x at the exact int32 positions
  offset = arr(name, "offset_positions")[:, 0].astype(np.int32)
  assert set(arr(name, "offset_positions_bf16")[:, 0]) == {2.0**20}
  ours = rope.apply_rotary(jnp.asarray(arr(name, "offset_x_bf16"), jnp.bfloat16), offset, rotary_dim=16,
                           frequencies=tuple(arr(name, "inv_freq_f64")))
  exact_f32 = rope.apply_rotary(arr(name, "offset_x_bf16"), offset, rotary_dim=16,
                                frequencies=tuple(arr(name, "inv_freq_f64")))
  ours_err = np.abs(np.asarray(ours, np.float32) - exact_f32).max()
  ret_err = np.abs(arr(name, "offset_out_bf16") - exact_f32).max()
  assert ours_err < 0.02 < ret_err


# ---------------------------------------------------------------------------------------
# xPos: rotary-embedding-torch and torchscale
# ---------------------------------------------------------------------------------------


def _xpos(q, k, rd, center, positions):
  spec = RotaryConfig(rotary_dim=rd, xpos_scale_base=512.0, xpos_center=center)
  qo, ko = spec.apply(q, positions), spec.apply(k, positions, key=True)
  return np.asarray(qo), np.asarray(ko), np.einsum("btnh,bsnh->bnts", qo, ko)


@pytest.mark.parametrize("length", [5, 8, 300])
def test_xpos_against_rotary_embedding_torch(length):
  name = f"ret_xpos_L{length}"
  q, k = arr(name, "q"), arr(name, "k")
  rows = np.arange(length) if length != 300 else arr(name, "logit_rows")
  qo, ko, logits = _xpos(q, k, 32, length // 2, np.arange(length))  # RET's centre: floor(L / 2)
  close(qo[:, rows], arr(name, "q_out_f64"))
  close(ko[:, rows], arr(name, "k_out_f64"))
  close(logits[:, :, rows], arr(name, "logits_f64"), 2e-5)
  _, _, other = _xpos(q, k, 32, 0, np.arange(length))  # any centre: the same logits
  close(other[:, :, rows], arr(name, "logits_f64"), 2e-5)


@pytest.mark.parametrize("length", [5, 8, 300])
def test_xpos_against_torchscale(length):
  name = f"torchscale_xpos_L{length}"
  q, k = arr(name, "q"), arr(name, "k")
  rows = np.arange(length) if length != 300 else arr(name, "logit_rows")
  center = math.ceil(length / 2)  # torchscale's centre
  qo, ko, logits = _xpos(q, k, 64, center, np.arange(length))
  close(qo[:, rows], arr(name, "q_out_f64"))
  close(ko[:, rows], arr(name, "k_out_f64"))
  close(logits[:, :, rows], arr(name, "logits_f64"), 2e-5)
  # decoding: the last query alone, same centre
  spec = RotaryConfig(xpos_scale_base=512.0, xpos_center=center)
  q_dec = spec.apply(q[:, -1:], np.array([length - 1]))
  close(q_dec, arr(name, "q_dec_out_f64"))
  close(np.einsum("btnh,bsnh->bnts", q_dec, ko), arr(name, "logits_dec_f64"), 2e-5)


def test_xpos_cached_keys_one_centre_equals_the_full_call_unlike_ret():
  name = "ret_xpos_cached_keys_L8"
  q, k = arr(name, "q"), arr(name, "k")
  spec = RotaryConfig(rotary_dim=32, xpos_scale_base=512.0, xpos_center=4)
  logits = np.einsum("btnh,bsnh->bnts", spec.apply(q, np.array([7])), spec.apply(k, np.arange(8), key=True))
  close(logits, arr(name, "logits_full_last_row_f64"), 2e-5)
  assert not np.allclose(arr(name, "logits_f64"), arr(name, "logits_full_last_row_f64"), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------
# timm: RoPE-Axial, RoPE-Mixed, DINOv3
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,h,w", [("timm_rope_axial_14x14", 14, 14), ("timm_rope_axial_12x20", 12, 20)])
def test_timm_rope_axial(name, h, w):
  pos = rope.grid_positions(h, w, axes="wh", cls="first")  # (x = col, y = row); CLS first, unrotated
  np.testing.assert_array_equal(pos[1:], arr(name, "positions"))
  spec = RotaryConfig(theta=100.0, sections=(8, 8), frequencies="per_axis")
  close(spec.apply(arr(name, "x"), pos[None]), arr(name, "out_f64"))


def test_timm_rope_mixed_forward_gradient_and_init():
  name = "timm_rope_mixed_12x20"
  x, w, f = arr(name, "x"), arr(name, "w"), arr(name, "F")  # F [2, depth, heads, 16]
  pos = rope.grid_positions(12, 20, axes="wh", cls="first").astype(np.float32)
  np.testing.assert_array_equal(pos[1:], arr(name, "positions"))

  def outs(freqs):
    return [rope.rotate(jnp.asarray(x), *rope.rotary_cos_sin(jnp.asarray(pos[None]), 32, frequencies=freqs[:, b]))
            for b in range(freqs.shape[1])]

  got = outs(jnp.asarray(f))
  for b in range(2):
    close(got[b], arr(name, "out")[b])
  grad = jax.grad(lambda freqs: sum(jnp.sum(o * w[b]) for b, o in enumerate(outs(freqs))))(jnp.asarray(f))
  close(grad, arr(name, "grad_F"), 1e-4)
  # RotaryEmbeddingMixed(dim=64, num_heads=2): head dim 32
  init = rope.mixed_frequencies(arr(name, "F_timm_init_angles")[..., 0], 32, theta=10.0)
  close(init, arr(name, "F_timm_init"), 1e-6)


def test_timm_dinov3():
  name = "timm_dinov3_12x20"
  pos = rope.grid_positions(12, 20, normalize="center")
  np.testing.assert_allclose(pos, arr(name, "positions"), atol=1e-7)
  freqs = 2 * np.pi * rope.pair_frequencies(32, 100.0, sections=(8, 8), kind="per_axis")
  np.testing.assert_allclose(2 * np.pi / freqs[:8], arr(name, "periods_f64"), rtol=1e-6)
  x = arr(name, "x")
  pos = np.concatenate([np.zeros((5, 2), np.float32), pos])  # 5 prefix tokens (CLS, registers) unrotated
  spec = RotaryConfig(layout="half", sections=(8, 8), frequencies=tuple(freqs))
  close(spec.apply(x, pos[None]), arr(name, "out_f64"))


# ---------------------------------------------------------------------------------------
# transformers' vision encoders (float32 anchors: compared at float32 tolerance)
# ---------------------------------------------------------------------------------------


def test_hf_qwen2_vl_vision():
  name = "hf_qwen2vl_vision"
  pos = np.concatenate([rope.grid_positions(4, 6, merge_size=2), rope.grid_positions(6, 4, frames=2, merge_size=2)])
  np.testing.assert_array_equal(pos, arr(name, "positions"))
  spec = RotaryConfig(layout="half", sections=(4, 4), frequencies="per_axis")
  close(spec.apply(arr(name, "q"), pos[None]), arr(name, "q_out"))
  close(spec.apply(arr(name, "k"), pos[None]), arr(name, "k_out"))


@pytest.mark.parametrize("name,grid,d", [("hf_llama4_vision_4x4_d16", 4, 16), ("hf_llama4_vision_6x6_d88", 6, 88)])
def test_hf_llama4_vision(name, grid, d):
  pos = rope.grid_positions(grid, grid, axes="wh", start=1, cls="last")
  np.testing.assert_array_equal(pos, arr(name, "positions"))
  spec = RotaryConfig(sections=(d // 4, d // 4), frequencies="per_axis")
  close(spec.apply(arr(name, "q"), pos[None]), arr(name, "q_out"))
  close(spec.apply(arr(name, "k"), pos[None]), arr(name, "k_out"))


def test_hf_pixtral_vision():
  name = "hf_pixtral_vision"
  pos = np.concatenate([rope.grid_positions(3, 5), rope.grid_positions(2, 4)])
  np.testing.assert_array_equal(pos, arr(name, "positions"))
  spec = RotaryConfig(layout="half", sections=(4, 4), frequencies="split")
  np.testing.assert_allclose(rope.pair_frequencies(16, 1e4, sections=(4, 4), kind="split"), arr(name, "inv_freq"),
                             rtol=1e-6)
  close(spec.apply(arr(name, "q"), pos[None]), arr(name, "q_out"))
  close(spec.apply(arr(name, "k"), pos[None]), arr(name, "k_out"))


def test_hf_gemma4_vision():
  name = "hf_gemma4_vision"
  pos = np.stack([rope.grid_positions(3, 5, axes="wh"), rope.grid_positions(5, 3, axes="wh")])  # (x, y)
  np.testing.assert_array_equal(pos, arr(name, "positions"))
  spec = RotaryConfig(theta=100.0, layout="half", sections=(4, 4), frequencies="per_axis", blocks=2)
  close(spec.apply(arr(name, "x"), pos), arr(name, "out"))


# ---------------------------------------------------------------------------------------
# VideoRoPE (official code, transcribed in float64)
# ---------------------------------------------------------------------------------------


def test_videorope():
  name = "videorope_text3_video2x2x3_text2"
  pos = rope.videorope_positions([("text", 3), ("video", (2, 4, 6), 1.0), ("text", 2)])
  np.testing.assert_array_equal(pos, arr(name, "positions"))
  axes = rope.pair_axes((16, 24, 24), 64, layout="videorope")
  np.testing.assert_array_equal(axes, arr(name, "pair_axis"))
  spec = RotaryConfig(theta=1e6, layout="half", sections=(16, 24, 24), section_layout="videorope")
  close(spec.apply(arr(name, "x").astype(np.float32), pos.astype(np.int32)[None]), arr(name, "out_f64"))


_CHECKED_PREFIXES = ("ret_axial_", "ret_custom_freqs_learned", "ret_lang_learned", "ret_theta_rescale_",
                     "ret_interpolate2_offset3", "ret_lang_large_positions", "ret_xpos_", "torchscale_xpos_",
                     "timm_rope_axial_", "timm_rope_mixed_", "timm_dinov3_", "hf_qwen2vl_vision", "hf_llama4_vision_",
                     "hf_pixtral_vision", "hf_gemma4_vision", "videorope_")
