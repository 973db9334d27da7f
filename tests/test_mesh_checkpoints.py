"""Mesh construction from the config, and orbax checkpoints (save/restore/average)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roformer_jax import checkpoints, mesh as mesh_lib


@pytest.mark.parametrize("cfg, n, shape", [
    ({"data": -1, "fsdp": 1, "tensor": 1}, 8, (8, 1, 1)),
    ({"data": 2, "fsdp": -1, "tensor": 2}, 8, (2, 2, 2)),
    ({"data": 1, "fsdp": 2, "tensor": 4}, 8, (1, 2, 4)),
    ({"data": -1}, 1, (1, 1, 1)),
])
def test_mesh_shape_fills_the_minus_one_axis(cfg, n, shape):
  assert mesh_lib.mesh_shape(cfg, n) == shape


@pytest.mark.parametrize("cfg, match", [
    ({"data": 3, "fsdp": 1, "tensor": 1}, "needs 3 devices but 8"),
    ({"data": -1, "fsdp": 3, "tensor": 1}, "do not divide"),
    ({"data": -1, "fsdp": -1}, "at most one"),
    ({"data": 0}, "positive"),
    ({"model": 2}, "unknown axes"),
])
def test_bad_mesh_is_rejected_with_the_fix(cfg, match):
  with pytest.raises(ValueError, match=match):
    mesh_lib.mesh_shape(cfg, 8)


def test_batch_must_divide_the_data_axes():
  mesh = mesh_lib.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  mesh_lib.check_batch_size(8, mesh)
  with pytest.raises(ValueError, match="batch_size=6 .* multiple of 4"):
    mesh_lib.check_batch_size(6, mesh)


def test_rules_must_name_mesh_axes():
  with pytest.raises(ValueError, match="'model'"):
    mesh_lib.rules_from_config([("embed", "model")])
  assert mesh_lib.rules_from_config([("batch", ["data", "fsdp"])]) == (("batch", ("data", "fsdp")),)


def test_global_batch_is_sharded_over_data_and_fsdp():
  mesh = mesh_lib.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  batch = mesh_lib.global_batch({"x": np.arange(32).reshape(8, 4)}, mesh)
  assert batch["x"].sharding.spec == jax.P(("data", "fsdp"))
  np.testing.assert_array_equal(batch["x"], np.arange(32).reshape(8, 4))


def _state(seed):
  k = jax.random.key(seed)
  return {"w": jax.random.normal(k, (4, 3)), "count": jnp.array(seed, jnp.int32)}


def test_checkpoint_restores_onto_another_mesh(tmp_path):
  mesh8 = mesh_lib.make_mesh({"data": 8})
  sharded = jax.device_put(_state(1), jax.NamedSharding(mesh8, jax.P()))
  ck = checkpoints.Checkpointer(tmp_path / "ck", save_every=1)
  ck.save(3, sharded, force=True)
  ck.close()
  mesh2 = mesh_lib.make_mesh({"data": 2, "tensor": 4})
  target = jax.device_put(_state(0), {"w": jax.NamedSharding(mesh2, jax.P("tensor")),
                                      "count": jax.NamedSharding(mesh2, jax.P())})
  ck = checkpoints.Checkpointer(tmp_path / "ck")
  restored = ck.restore(ck.latest_step(), target)
  ck.close()
  np.testing.assert_array_equal(restored["w"], _state(1)["w"])
  assert restored["w"].sharding.spec == jax.P("tensor")


def test_average_of_identical_checkpoints_is_the_identity(tmp_path):
  ck = checkpoints.Checkpointer(tmp_path / "ck", save_every=1, keep=10)
  for step in (1, 2, 3):
    ck.save(step, _state(5), force=True)
  ck.close()
  mean, used = checkpoints.average_checkpoints(tmp_path / "ck", _state(0), last=3)
  assert used == [1, 2, 3]
  np.testing.assert_array_equal(mean["w"], _state(5)["w"])
  assert int(mean["count"]) == 5


def test_average_is_the_mean_of_the_last_n(tmp_path):
  ck = checkpoints.Checkpointer(tmp_path / "ck", save_every=1, keep=10)
  for step in range(1, 7):
    ck.save(step, _state(step), force=True)
  ck.close()
  mean, used = checkpoints.average_checkpoints(tmp_path / "ck", _state(0), last=5)
  assert used == [2, 3, 4, 5, 6]
  expected = np.mean([np.asarray(_state(s)["w"]) for s in used], axis=0)
  np.testing.assert_allclose(mean["w"], expected, rtol=1e-6)
  assert int(mean["count"]) == 6  # integer leaves come from the newest


def test_average_without_checkpoints_says_how_to_get_them(tmp_path):
  (tmp_path / "empty").mkdir()
  with pytest.raises(FileNotFoundError, match="train first"):
    checkpoints.average_checkpoints(tmp_path / "empty", _state(0))


@pytest.mark.parametrize("last", [0, -2, 1.5])
def test_average_rejects_a_last_that_is_not_a_positive_count(tmp_path, last):
  ck = checkpoints.Checkpointer(tmp_path / "ck", save_every=1, keep=10)
  for step in (1, 2, 3):
    ck.save(step, _state(step), force=True)
  ck.close()
  # last=0 used to average every checkpoint (available[-0:]), a negative one to drop the oldest.
  with pytest.raises(ValueError, match=rf"last={last!r}.*positive"):
    checkpoints.average_checkpoints(tmp_path / "ck", _state(0), last=last)


def test_average_of_no_steps_is_refused(tmp_path):
  ck = checkpoints.Checkpointer(tmp_path / "ck", save_every=1)
  ck.save(1, _state(1), force=True)
  ck.close()
  with pytest.raises(ValueError, match="steps=\\[\\]"):
    checkpoints.average_checkpoints(tmp_path / "ck", _state(0), steps=[])

