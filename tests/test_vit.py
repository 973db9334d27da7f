"""The ViT with 2-D RoPE (issue 26 item 3, the model): each position encoding's spec, any
resolution, the learned table's interpolation, RoPE-Mixed's trained frequencies (outside weight
decay), and what position information each variant gives."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer_jax import rope, vit
from roformer_jax.models import ModelConfig
from roformer_jax.training import optim

MODEL = ModelConfig(vocab_size=1, d_model=32, num_layers=2, num_heads=2, d_ff=64, dropout=0.0, attention_dropout=0.0,
                    type_vocab_size=0, init_std=0.2)
IMAGES = jax.random.normal(jax.random.key(0), (2, 16, 16, 3))


def build(position, **kw):
  return vit.VisionTransformer(MODEL, vit.ViTConfig(image_size=16, patch_size=4, position=position, **kw),
                               rngs=nnx.Rngs(0))


@pytest.mark.parametrize("position,spec", [
    ("rope_axial", rope.RotaryConfig(theta=100.0, sections=(4, 4), frequencies="per_axis")),
    ("rope_2d", rope.RotaryConfig(theta=1e4, layout="half", sections=(4, 4), frequencies="per_axis")),
    ("rope_mixed", rope.RotaryConfig(theta=10.0, sections=(4, 4), frequencies="mixed")),
])
def test_each_rope_variant_is_its_papers_spec(position, spec):
  model = build(position)
  assert all(layer.attention.rotary == spec for layer in model.layers)
  pos = np.asarray(model.positions(2, 3))
  first = [0, 0] if position == "rope_2d" else [0, 0]
  assert pos[0].tolist() == first  # CLS at (0, 0): not rotated
  assert pos[1:].tolist() == rope.grid_positions(2, 3, axes="hw" if position == "rope_2d" else "wh").tolist()


@pytest.mark.parametrize("position", vit.POSITIONS_2D)
def test_every_variant_runs_at_the_training_and_higher_resolutions(position):
  model = build(position)
  for size in (16, 24, 32):
    logits = model(jax.random.normal(jax.random.key(size), (2, size, size, 3)))
    assert logits.shape == (2, 4) and bool(jnp.isfinite(logits).all())


GOLDEN = pathlib.Path(__file__).parent / "golden" / "pos_embed_resize"  # scripts/make_pos_embed_resize_golden.py


def golden_resize_cases():
  """timm's resample_abs_pos_embed cases: (case, {array name: array}) with the grids [h, w, D] / [H, W, D]."""
  arrays = np.load(GOLDEN.with_suffix(".npz"))
  for case in json.loads(GOLDEN.with_suffix(".json").read_text())["cases"]:
    p, d = case["num_prefix_tokens"], case["dim"]
    grids = {k: arrays[v][0, p:].reshape(*(case["old_size"] if k == "posemb" else case["new_size"]), d)
             for k, v in case["arrays"].items()}
    prefixes = {k: arrays[v][0, :p] for k, v in case["arrays"].items()}
    yield case, grids, prefixes


@pytest.mark.parametrize("antialias,anchor", [(False, "out_deit"), (True, "out_timm")])
def test_the_learned_table_resizes_as_timm_resample_abs_pos_embed(antialias, anchor):
  # DeiT's resize (antialias off: Keys a = -0.75, clamped borders) is the ViT's; timm's default (antialias on)
  # is jax.image.resize's. Up, down, non-square and same-size grids, against float64 and timm's float32 output.
  for case, grids, prefixes in golden_resize_cases():
    got = np.asarray(vit.resize_position_table(jnp.asarray(grids["posemb"]), tuple(case["new_size"]),
                                               antialias=antialias))
    np.testing.assert_allclose(got, grids[f"{anchor}_f64"], atol=3e-6, err_msg=case["name"])
    np.testing.assert_allclose(got, grids[anchor], atol=3e-6, err_msg=case["name"])
    np.testing.assert_array_equal(prefixes[anchor], prefixes["posemb"])  # timm keeps prefix rows: ours have none


def test_the_learned_vit_at_another_grid_uses_deits_resized_table():
  """At 24 px (6 x 6 patches) a ViT trained at 16 px (4 x 4) adds DeiT's resize of its table: the logits are
  those of a 24-px ViT holding timm's resized table (`jax.image.resize`'s a = -0.5 cubic differed by 7e-2)."""
  case, grids, _ = next(c for c in golden_resize_cases() if c[0]["name"] == "up_4x4_to_6x6")
  cfg = MODEL.replace(d_model=case["dim"], d_ff=16)
  small = vit.VisionTransformer(cfg, vit.ViTConfig(image_size=16, patch_size=4, position="learned"), rngs=nnx.Rngs(0))
  large = vit.VisionTransformer(cfg, vit.ViTConfig(image_size=24, patch_size=4, position="learned"), rngs=nnx.Rngs(0))
  small.position_table[...] = jnp.asarray(grids["posemb"])
  large.position_table[...] = jnp.asarray(grids["out_deit_f64"], jnp.float32)
  images = jax.random.normal(jax.random.key(1), (2, 24, 24, 3))
  np.testing.assert_allclose(small(images), large(images), atol=1e-5)
  np.testing.assert_array_equal(vit.resize_position_table(small.position_table[...], (4, 4)),
                                small.position_table[...])  # the training grid: the table itself


def test_patch_order_matters_with_positions_and_not_without():
  """Permuting the patches leaves a position-free ViT's CLS output unchanged; every encoding
  with positions notices."""
  gh = 4
  perm = np.random.default_rng(0).permutation(gh * gh)
  patches = IMAGES.reshape(2, gh, 4, gh, 4, 3).transpose(0, 1, 3, 2, 4, 5).reshape(2, gh * gh, 4, 4, 3)
  shuffled = patches[:, perm].reshape(2, gh, gh, 4, 4, 3).transpose(0, 1, 3, 2, 4, 5).reshape(IMAGES.shape)
  for position in vit.POSITIONS_2D:
    model = build(position)
    same = np.allclose(model(IMAGES), model(shuffled), atol=1e-5)
    assert same == (position == "none"), position


def test_rope_mixed_frequencies_train_and_stay_out_of_weight_decay():
  model = build("rope_mixed")
  f0 = model.layers[0].attention.rope_frequencies[...]
  assert f0.shape == (2, 2, 8)  # [x/y, heads, pairs of the 16-wide head]
  grads = nnx.grad(lambda m: jnp.sum(m(IMAGES) ** 2))(model)
  assert float(jnp.abs(grads.layers[0].attention.rope_frequencies[...]).sum()) > 0
  mask = optim.decay_mask(nnx.state(model, nnx.Param))
  decayed = {jax.tree_util.keystr(path) for path, on in jax.tree_util.tree_leaves_with_path(mask) if on}
  assert not any(name in k for k in decayed for name in ("rope_frequencies", "cls_token", "position_table"))
  assert any("kernel" in k for k in decayed) and len(decayed) > 4


@pytest.mark.parametrize("position", ["rope_mixed", "rope_axial", "learned"])
def test_a_model_created_inside_jit_equals_the_eager_one(position):
  """The trainer creates the model inside jit (trainer.create_state); RoPE-Mixed's initial
  frequencies once went through NumPy there and failed. Same weights either way, up to
  float32 rounding of RoPE-Mixed's float64 formula."""
  eager = nnx.state(build(position), nnx.Param)
  jitted = nnx.state(nnx.jit(lambda: build(position))(), nnx.Param)
  for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), strict=True):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6, atol=1e-7)


def test_bad_images_and_configs_are_refused():
  with pytest.raises(ValueError, match="multiples of patch_size=4"):
    build("rope_axial")(jnp.zeros((1, 18, 16, 3)))
  with pytest.raises(ValueError, match="vit position='rope'"):
    vit.ViTConfig(position="rope")
  with pytest.raises(ValueError, match="multiple of patch_size"):
    vit.ViTConfig(image_size=30, patch_size=4)
