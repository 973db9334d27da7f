"""The image data: shapes2d's scenes, renderer and builder, the "image" batch format, and the
pixel datasets (cifar10, imagenet2012) through ``tfds.testing.mock_data``.

Everything runs offline: shapes2d is built into a temporary directory (a few seconds, once
per test worker), the catalogue datasets come from ``mock_data``.
"""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from roformer_jax.training import data
from roformer_jax.training.data import datasets, images, pipeline, shapes
from tests.test_data import assert_batches_equal, take  # the data tests' batch helpers


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  """The full shapes2d (20,000 / 2,000 / 2,000 scenes), built once per test worker."""
  path = tmp_path_factory.mktemp("tfds")
  shapes.build_shapes2d(path)
  return path


def shapes_cfg(data_dir, **overrides):
  cfg = data.default_data_config()
  cfg.update({"dataset": "shapes2d", "data_dir": str(data_dir), **overrides})
  return cfg


def row(scenes, i):
  return {k: v[i] for k, v in scenes.items()}


def centre_of_mass(weights):
  """(x, y) in pixels, pixel (i, j) at (j + 0.5, i + 0.5)."""
  w = np.asarray(weights, np.float64)
  ys, xs = np.indices(w.shape) + 0.5
  return np.array([(w * xs).sum(), (w * ys).sum()]) / w.sum()


# --------------------------------------------------------------------------------------
# Scenes.
# --------------------------------------------------------------------------------------


def test_scenes_are_deterministic_and_a_split_is_a_prefix():
  a, b = shapes.scenes("train", 2500), shapes.scenes("train", 2500)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  short = shapes.scenes("train", 1200)
  for k in a:
    np.testing.assert_array_equal(short[k], a[k][:1200], err_msg=k)
  one = shapes.scene("train", 2345)
  for k in a:
    np.testing.assert_array_equal(one[k], a[k][2345], err_msg=k)
  other = shapes.scenes("validation", 100)
  assert not np.array_equal(other["centers"], a["centers"][:100])  # each split its own scenes
  assert not np.array_equal(shapes.scenes("train", 100, seed=1)["centers"], a["centers"][:100])


def test_label_is_where_the_circle_is_relative_to_the_square():
  s = shapes.scenes("train", 3000)
  assert (s["kinds"] == [shapes.CIRCLE, shapes.SQUARE, shapes.CROSS]).all()
  (ax, ay), (bx, by) = s["centers"][:, 0].T, s["centers"][:, 1].T
  right, below = ax > bx, ay > by  # "below" = larger y (rows count down).
  want = np.select([~right & ~below, right & ~below, ~right & below, right & below], [0, 1, 2, 3])
  np.testing.assert_array_equal(s["label"], want)
  assert shapes.LABELS[0] == "left_above" and shapes.LABELS[3] == "right_below"
  assert [shapes.relation_label(c) for c in s["centers"][:50]] == list(want[:50])
  # The margin, on both axes, so that no resolution makes a label ambiguous.
  assert (np.abs(ax - bx) >= shapes.MARGIN).all() and (np.abs(ay - by) >= shapes.MARGIN).all()


def test_scenes_keep_their_shapes_inside_apart_and_in_their_intensity_bands():
  s = shapes.scenes("validation", 2000)
  half, radius = shapes.extents(s["sizes"])
  assert ((s["centers"] - half[..., None] >= shapes.BORDER - 1e-6).all()
          and (s["centers"] + half[..., None] <= 1 - shapes.BORDER + 1e-6).all())
  for i, j in ((0, 1), (0, 2), (1, 2)):
    dist = np.linalg.norm(s["centers"][:, i] - s["centers"][:, j], axis=-1)
    assert (dist >= radius[:, i] + radius[:, j] + shapes.GAP - 1e-6).all()
  for k, (lo, hi) in enumerate(shapes.SIZE_RANGES):
    assert (s["sizes"][:, k] >= lo).all() and (s["sizes"][:, k] <= hi).all()
  grey = s["colors"].mean(-1)
  for k, (lo, hi) in enumerate(shapes.INTENSITY_RANGES):
    assert (grey[:, k] >= lo - 1e-6).all() and (grey[:, k] <= hi + 1e-6).all()
  assert (np.abs(s["colors"] - grey[..., None]) <= 2 * shapes.TINT + 1e-6).all()
  assert (s["background"] >= 0).all() and (s["background"] <= 0.2).all()


def test_labels_are_balanced():
  for split, n in shapes.SPLIT_SIZES.items():
    share = np.bincount(shapes.scenes(split, n)["label"], minlength=4) / n
    assert ((share > 0.2) & (share < 0.3)).all(), (split, share)


# --------------------------------------------------------------------------------------
# Rendering.
# --------------------------------------------------------------------------------------


def test_centres_of_mass_do_not_move_with_the_resolution():
  """Each shape, drawn alone through ``render``: its centre at 64 px, halved, is within half a
  pixel of its centre at 32 px (in fact within 0.05), and both are where the scene puts it."""
  s = shapes.scenes("test", 30)
  for i in range(30):
    for k in range(shapes.NUM_OBJECTS):
      alone = row(s, i)
      alone["sizes"] = np.where(np.arange(3) == k, alone["sizes"], 0)  # the others vanish,
      alone["background"] = np.float32(0)                              # and the background.
      com = {r: centre_of_mass(shapes.render(alone, r, channels=1)[..., 0]) for r in (32, 64)}
      assert np.abs(com[64] / 2 - com[32]).max() < 0.5
      assert np.abs(com[64] / 2 - com[32]).max() < 0.05
      for r in (32, 64):
        assert np.abs(com[r] - s["centers"][i, k] * r).max() < 0.05 * r / 32


@pytest.mark.parametrize("resolution", [8, 9, 17, 32, 48, 100])
def test_any_resolution_from_8_renders_with_exact_areas(resolution):
  s = shapes.scene("train", 7)
  image = shapes.render(s, resolution)
  assert image.shape == (resolution, resolution, 3) and image.dtype == np.float32
  assert 0 <= image.min() and image.max() <= 1
  np.testing.assert_allclose(shapes.render(s, resolution, channels=1)[..., 0], image.mean(-1), atol=1e-6)
  arm = shapes.CROSS_ARM
  for kind, size in zip(s["kinds"], s["sizes"], strict=True):
    area = {shapes.CIRCLE: np.pi * size ** 2, shapes.SQUARE: 4 * size ** 2,
            shapes.CROSS: 4 * size ** 2 * (2 * arm - arm ** 2)}[int(kind)]
    cov = shapes.coverage(int(kind), s["centers"][int(kind)], size, resolution)
    assert cov.min() >= 0 and cov.max() <= 1
    np.testing.assert_allclose(cov.sum(), area * resolution ** 2, rtol=0.02 if kind == shapes.CIRCLE else 1e-4)


def test_render_composites_the_background_and_the_colours():
  s = shapes.scene("train", 3)
  image = shapes.render(s, 64)
  np.testing.assert_allclose(image[0, 0], s["background"], atol=1e-6)  # a corner: no shape there.
  for k in range(3):
    x, y = (s["centers"][k] * 64).astype(int)
    np.testing.assert_allclose(image[y, x], s["colors"][k], atol=1e-6)  # a shape's centre pixel.


def test_render_rejects_what_it_cannot_draw():
  s = shapes.scene("train", 0)
  with pytest.raises(ValueError, match="8 px or more"):
    shapes.render(s, 7)
  with pytest.raises(ValueError, match="channels=2"):
    shapes.render(s, 32, channels=2)


# --------------------------------------------------------------------------------------
# The builder.
# --------------------------------------------------------------------------------------


def test_builder_stores_the_scenes_of_each_split(tmp_path, capfd):
  config = shapes.Shapes2dConfig(name="tiny", num_examples={"train": 300, "validation": 40, "test": 40})
  builder = shapes.build_shapes2d(tmp_path, config=config)
  assert shapes.build_shapes2d(tmp_path, config=config).is_prepared()
  # Issue 40: an offline build says what it did on stderr, not TFDS's "downloaded and prepared" on stdout.
  out, err = capfd.readouterr()
  assert "download" not in out.lower() and "Built shapes2d/tiny; later runs reuse it." in err
  for split, n in config.num_examples.items():
    source = builder.as_data_source(split)
    records = sorted((source[i] for i in range(len(source))), key=lambda r: int(r["index"]))
    assert [int(r["index"]) for r in records] == list(range(n))
    want = shapes.scenes(split, n)
    for k in shapes.SCENE_FIELDS + ("label",):
      np.testing.assert_array_equal(np.stack([r[k] for r in records]), want[k], err_msg=f"{split} {k}")


def test_the_registry_builds_shapes2d_on_first_use(data_dir):
  assert data.label_names(shapes_cfg(data_dir)) == shapes.LABELS  # what samples show beside the class numbers
  spec = data.get_spec("shapes2d")
  assert spec.kind == "image" and spec.num_classes == 4 and spec.render is shapes.render
  for split, n in shapes.SPLIT_SIZES.items():
    source = datasets.open_source(spec, split, data_dir=data_dir)
    assert len(source) == n
  labels = np.array([source[i]["label"] for i in range(len(source))])
  share = np.bincount(labels, minlength=4) / len(labels)
  assert ((share > 0.2) & (share < 0.3)).all()
  assert "(offline)" in datasets.prepare_command(spec, data_dir)


# --------------------------------------------------------------------------------------
# The "image" batch format.
# --------------------------------------------------------------------------------------


def test_image_batches_are_normalised_renders(data_dir):
  cfg = shapes_cfg(data_dir)
  batches = take(data.make_iterator(cfg, task="image", split="train", batch_size=64, seed=0), 4)
  for b in batches:
    assert {k: (v.shape, v.dtype) for k, v in b.items()} == {
        "image": ((64, 32, 32, 3), np.float32), "label": ((64,), np.int32), "weights": ((64,), np.float32)}
    assert (b["weights"] == 1).all() and set(b["label"]) <= {0, 1, 2, 3}
  pixels = np.concatenate([b["image"] for b in batches])
  assert abs(pixels.mean()) < 0.1 and 0.9 < pixels.std() < 1.1  # the set's mean and std.
  # An evaluation pass reads the split in its stored order: row i is record i, rendered.
  source = datasets.open_source(data.get_spec("shapes2d"), "validation", data_dir=data_dir)
  first = next(data.make_iterator(cfg, task=data.FORMATS["image"], split="validation", batch_size=4, seed=0))
  for i in range(4):
    want = (shapes.render(source[i], 32) - np.float32(shapes.PIXEL_MEAN)) / np.float32(shapes.PIXEL_STD)
    np.testing.assert_allclose(first["image"][i], want, atol=1e-5)
    assert first["label"][i] == shapes.relation_label(source[i]["centers"]) == source[i]["label"]


def test_data_image_size_renders_the_same_scenes_at_another_resolution(data_dir):
  at = {size: next(data.make_iterator(shapes_cfg(data_dir, image_size=size, image_channels=channels),
                                      task="image", split="validation", batch_size=8, seed=0))
        for size, channels in ((32, 3), (48, 1), (64, 3))}
  assert at[48]["image"].shape == (8, 48, 48, 1) and at[64]["image"].shape == (8, 64, 64, 3)
  np.testing.assert_array_equal(at[32]["label"], at[64]["label"])  # the same scenes, in order,
  small = at[64]["image"].reshape(8, 32, 2, 32, 2, 3).mean(axis=(2, 4))  # and 2x2-pooled 64 px
  assert np.abs(small - at[32]["image"]).mean() < 0.05  # is nearly the 32-px image.


def test_evaluation_pass_covers_the_split_and_pads_its_last_batch(data_dir):
  cfg = shapes_cfg(data_dir, image_size=16)
  first = list(data.make_iterator(cfg, task="image", split="test", batch_size=300, seed=0))
  again = list(data.make_iterator(cfg, task="image", split="test", batch_size=300, seed=5))
  assert_batches_equal(first, again)  # no shuffling outside training.
  assert len(first) == 7 and all(b["image"].shape == (300, 16, 16, 3) for b in first)
  last = first[-1]
  assert last["weights"][:200].all() and not last["weights"][200:].any()
  assert not last["image"][200:].any() and not last["label"][200:].any()
  labels = np.concatenate([b["label"][b["weights"] > 0] for b in first])
  np.testing.assert_array_equal(np.bincount(labels, minlength=4),
                                np.bincount(shapes.scenes("test", 2000)["label"], minlength=4))


def test_training_order_is_a_function_of_the_seed(data_dir):
  cfg = shapes_cfg(data_dir, image_size=8)
  a = take(data.make_iterator(cfg, task="image", split="train", batch_size=16, seed=3), 3)
  b = take(data.make_iterator(cfg, task="image", split="train", batch_size=16, seed=3), 3)
  c = take(data.make_iterator(cfg, task="image", split="train", batch_size=16, seed=4), 3)
  assert_batches_equal(a, b)
  assert not np.array_equal(a[0]["image"], c[0]["image"])


def test_iterator_state_restores_exactly(data_dir):
  cfg = shapes_cfg(data_dir, image_size=16)
  make = lambda: data.make_iterator(cfg, task="image", split="train", batch_size=8, seed=1,
                                    process_index=1, process_count=2)
  it = make()
  take(it, 5)
  state = json.loads(json.dumps(it.get_state()))  # what Orbax writes and reads back.
  uninterrupted = take(it, 6)
  restored = make()
  restored.set_state(state)
  assert_batches_equal(take(restored, 6), uninterrupted)


def test_image_format_errors_are_clear(data_dir, tmp_path):
  with pytest.raises(ValueError, match="task 'image' needs image records"):
    data.make_iterator(shapes_cfg(data_dir, dataset="glue/mrpc"), task="image", split="train", batch_size=2, seed=0)
  with pytest.raises(ValueError, match="task 'lm' needs text records"):
    data.make_iterator(shapes_cfg(data_dir), task="lm", split="train", batch_size=2, seed=0)
  with pytest.raises(ValueError, match="data.image_channels=2"):
    data.make_iterator(shapes_cfg(data_dir, image_channels=2), task="image", split="train", batch_size=2, seed=0)
  with pytest.raises(ValueError, match="data.image_size=4 must be >= 8"):
    data.make_iterator(shapes_cfg(data_dir, image_size=4), task="image", split="validation", batch_size=2, seed=0)
  assert pipeline.IMAGE in data.FORMATS.values() and pipeline.batch_format("image") is pipeline.IMAGE


# --------------------------------------------------------------------------------------
# Pixel datasets through mock_data, and their preprocessing.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,size", [("cifar10", 24), ("cifar10", 48), ("imagenet2012", 40)])
def test_pixel_datasets_give_image_batches_at_the_requested_size(name, size):
  cfg = data.default_data_config()
  cfg.update(dataset=name, image_size=size)
  with tfds.testing.mock_data(num_examples=10, policy=tfds.testing.MockPolicy.USE_CODE):
    train = take(data.make_iterator(cfg, task="image", split="train", batch_size=4, seed=0), 3)
    again = take(data.make_iterator(cfg, task="image", split="train", batch_size=4, seed=0), 3)
    test = list(data.make_iterator(cfg, task="image", split="test", batch_size=4, seed=0))
    grey = next(data.make_iterator(_with(cfg, image_channels=1), task="image", split="test", batch_size=4, seed=0))
  assert_batches_equal(train, again)  # the random crops come from the seed: deterministic.
  for b in train + test:
    assert {k: (v.shape, v.dtype) for k, v in b.items()} == {
        "image": ((4, size, size, 3), np.float32), "label": ((4,), np.int32), "weights": ((4,), np.float32)}
    assert np.isfinite(b["image"]).all()
  assert grey["image"].shape == (4, size, size, 1)
  num_classes = data.get_spec(name).num_classes
  assert all(((b["label"] >= 0) & (b["label"] < num_classes)).all() for b in train)
  assert len(test) == 3 and test[-1]["weights"].tolist() == [1, 1, 0, 0]  # 10 images: padded.


def _with(cfg, **overrides):
  cfg = cfg.copy_and_resolve_references()
  cfg.update(overrides)
  return cfg


def test_imagenet_not_prepared_names_the_manual_files(tmp_path):
  cfg = data.default_data_config()
  cfg.update(dataset="imagenet2012", data_dir=str(tmp_path))
  with pytest.raises(data.DatasetNotPreparedError,
                     match=r"prepare dataset imagenet2012 .*--manual_dir <directory with ILSVRC2012_img_train.tar"):
    data.make_iterator(cfg, task="image", split="validation", batch_size=2, seed=0)
  cfg.dataset = "cifar10"
  with pytest.raises(data.DatasetNotPreparedError, match="prepare dataset cifar10 .*pip install tensorflow"):
    data.make_iterator(cfg, task="image", split="train", batch_size=2, seed=0)


def test_resize_and_crops():
  rng = np.random.default_rng(0)
  flat = np.full((37, 53, 3), 0.25, np.float32)
  for h, w in ((16, 16), (100, 7), (37, 53)):
    np.testing.assert_allclose(images.resize(flat, h, w), 0.25, atol=1e-6)
  ramp = np.tile(np.arange(64, dtype=np.float32)[None, :, None], (4, 1, 1))  # x, along columns
  half = images.resize(ramp, 4, 32)[0, :, 0]
  np.testing.assert_allclose(half[2:-2], 2 * np.arange(2, 30) + 0.5, atol=1e-4)  # linear stays linear
  photo = rng.integers(0, 256, (30, 50, 3), dtype=np.uint8)
  unit = images.to_unit(photo, 3)
  assert unit.dtype == np.float32 and unit.max() <= 1
  np.testing.assert_allclose(images.to_unit(photo, 1)[..., 0], unit.mean(-1), atol=1e-6)
  crop = images.center_crop(unit, 24, 0.875)
  assert crop.shape == (24, 24, 3)
  np.testing.assert_array_equal(images.center_crop(unit[:24, :24], 24), unit[:24, :24])  # nothing to do
  a = images.random_resized_crop(unit, 16, np.random.default_rng(5))
  b = images.random_resized_crop(unit, 16, np.random.default_rng(5))
  assert a.shape == (16, 16, 3)
  np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_prepare_command_builds_shapes2d(tmp_path):
  out = subprocess.run([sys.executable, "-m", "roformer_jax.training.data.prepare", "dataset", "shapes2d",
                        "--data_dir", str(tmp_path)], capture_output=True, text=True, check=True, timeout=300)
  assert "prepared shapes2d/default" in out.stdout
  assert (tmp_path / "shapes2d" / "default" / str(shapes.Shapes2d.VERSION) / "dataset_info.json").exists()
