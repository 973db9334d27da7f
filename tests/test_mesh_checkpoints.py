"""Mesh construction from the config, and orbax checkpoints (save/restore/average)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roformer_jax import errors, mesh as mesh_lib
from roformer_jax.training import checkpoints


@pytest.mark.parametrize("cfg, n, shape", [
    ({"data": -1, "fsdp": 1, "tensor": 1}, 8, (8, 1, 1, 1)),
    ({"data": 2, "fsdp": -1, "tensor": 2}, 8, (2, 2, 1, 2)),
    ({"data": 1, "fsdp": 2, "tensor": 4}, 8, (1, 2, 1, 4)),
    ({"data": 2, "context": -1}, 8, (2, 1, 4, 1)),
    ({"data": -1}, 1, (1, 1, 1, 1)),
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
  with pytest.raises(errors.UserError, match=r"last 7 checkpoints: .* only 6 usable ones \(steps \[1, 2, 3, 4, 5, 6\]\)"):
    checkpoints.average_checkpoints(tmp_path / "ck", _state(0), last=7)


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


def _performer_state():
  """(graphdef, state) of a tiny FAVOR+ Performer and its Adam optimiser, as train/eval build it."""
  from configs import default
  from roformer_jax.training import trainer
  config = default.get_config("smoke")
  config.model.update(dict(attention="linear", feature_map="favor", num_features=8))
  tx, _, _ = trainer.make_optimizer(config)
  return trainer.create_state(config, mesh_lib.make_mesh(config.mesh),
                              mesh_lib.rules_from_config(config.logical_axis_rules), tx)


def _variables(state) -> dict[str, tuple[type, np.ndarray]]:
  """Path -> (variable type, value) for every array leaf of an nnx.State (RNG keys left out)."""
  from flax import nnx
  out = {}
  for path, var in jax.tree_util.tree_flatten_with_path(state, is_leaf=lambda x: isinstance(x, nnx.Variable))[0]:
    if not jnp.issubdtype(var.get_value().dtype, jax.dtypes.prng_key):
      out[jax.tree_util.keystr(path)] = (type(var), np.asarray(var.get_value()))
  return out


def _redrawn(state, seed):
  """`state` with every float leaf drawn afresh from `seed` (trained parameters, moments and
  FAVOR+ projections all change between checkpoints) and every integer leaf set to `seed`."""
  leaves, treedef = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return treedef.unflatten([
      jax.random.normal(k, x.shape, x.dtype) if jnp.issubdtype(x.dtype, jnp.floating)
      else x if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else jnp.full_like(x, seed)
      for k, x in zip(keys, leaves, strict=True)])


def test_average_takes_feature_projections_and_optimiser_state_from_the_newest(tmp_path):
  from flax import nnx
  from roformer_jax import attention
  graphdef, state = _performer_state()
  ck = checkpoints.Checkpointer(tmp_path / "ck", save_every=1, keep=10, async_save=False)
  for step in range(1, 5):
    ck.save(step, _redrawn(state, step), force=True)
  ck.close()
  mean, used = checkpoints.average_checkpoints(tmp_path / "ck", state, last=3)
  assert used == [2, 3, 4]
  got = _variables(mean)
  saved = {s: _variables(_redrawn(state, s)) for s in used}
  kinds = {kind for kind, _ in got.values()}
  assert {nnx.Param, attention.FeatureProjection, nnx.OptVariable, nnx.OptState} <= kinds
  for path, (kind, value) in got.items():
    assert kind is saved[4][path][0], path  # the variable types survive: nnx.merge rebuilds the model
    if kind is nnx.Param:  # trained: the mean of the last 3
      np.testing.assert_allclose(value, np.mean([saved[s][path][1] for s in used], axis=0), rtol=1e-5,
                                 atol=1e-6, err_msg=path)
    else:  # FAVOR+ projections (redrawn, never trained), moments, counters: the newest, bitwise
      np.testing.assert_array_equal(value, saved[4][path][1], err_msg=path)
  projection = next(path for path, (kind, _) in got.items() if kind is attention.FeatureProjection)
  mean_projection = np.mean([saved[s][projection][1] for s in used], axis=0)
  assert not np.allclose(got[projection][1], mean_projection)  # the old behaviour: a model that never existed
  model, _ = nnx.merge(graphdef, mean)
  assert isinstance(model.layers[0].attention.projection, attention.FeatureProjection)



def test_create_state_draws_with_the_threefry_kernel_on_a_gpu_only(monkeypatch):
  """On a GPU, `create_state` switches JAX to jaxlib's threefry kernel (B3's initialiser did not
  compile in 150 s on an H100 without it); on other backends the flag is left as it is."""
  from roformer_jax.training import trainer
  before = jax.config.jax_threefry_gpu_kernel_lowering
  try:
    jax.config.update("jax_threefry_gpu_kernel_lowering", False)
    _performer_state()  # a CPU backend: create_state leaves the flag off
    assert not jax.config.jax_threefry_gpu_kernel_lowering and not trainer.use_gpu_threefry_kernel()
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert trainer.use_gpu_threefry_kernel() and jax.config.jax_threefry_gpu_kernel_lowering
  finally:
    jax.config.update("jax_threefry_gpu_kernel_lowering", before)
