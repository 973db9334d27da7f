"""Schedules and optimizers against closed forms (float64 NumPy references)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from roformer_jax import models
from roformer_jax.training import optim

# --------------------------------------------------------------------------------------
# Schedules.
# --------------------------------------------------------------------------------------


def _fairseq_inverse_sqrt(step, peak=5e-4, warmup=4000, init=1e-7):
  # fairseq InverseSquareRootSchedule.step_update(num_updates), verbatim arithmetic.
  if step < warmup:
    return init + step * (peak - init) / warmup
  return peak * warmup ** 0.5 * step ** -0.5


def test_inverse_sqrt_matches_fairseq_at_key_steps():
  schedule = optim.inverse_sqrt_schedule()  # Sec. 4.1 defaults
  steps = [0, 1, 2, 1000, 3999, 4000, 4001, 16000, 100_000, 1_000_000]
  got = np.asarray(schedule(jnp.asarray(steps)))
  want = [_fairseq_inverse_sqrt(s) for s in steps]
  np.testing.assert_allclose(got, want, rtol=2e-6)
  assert got.dtype == np.float32
  assert got[0] == np.float32(1e-7)  # the first update
  assert got[5] == np.float32(5e-4)  # peak exactly at step == warmup_steps
  np.testing.assert_allclose(got[7], 2.5e-4, rtol=1e-6)  # 4x warmup -> half the peak
  # Continuous at the switch: the last warmup step is one increment below the peak.
  np.testing.assert_allclose(got[5] - got[4], (5e-4 - 1e-7) / 4000, rtol=1e-3)


def test_schedules_are_jittable_and_accept_python_ints():
  schedule = optim.inverse_sqrt_schedule(peak_lr=1e-3, warmup_steps=10, warmup_init_lr=0.0)
  jitted = jax.jit(schedule)
  for s in (0, 5, 10, 40):
    np.testing.assert_allclose(jitted(jnp.int32(s)), schedule(s), rtol=1e-7)
  np.testing.assert_allclose(schedule(40), 1e-3 * math.sqrt(10 / 40), rtol=1e-6)


def _hf_linear(step, peak, warmup, total):
  # transformers.get_linear_schedule_with_warmup's lr_lambda, times the peak.
  if step < warmup:
    return peak * step / max(1, warmup)
  return peak * max(0.0, (total - step) / max(1, total - warmup))


@pytest.mark.parametrize("warmup", [0, 10, 100])
def test_linear_warmup_decay_matches_hf(warmup):
  total = 100
  schedule = optim.linear_warmup_decay_schedule(peak_lr=3e-5, warmup_steps=warmup, total_steps=total)
  steps = np.array([0, 1, 5, 9, 10, 11, 50, 99, 100, 150])
  np.testing.assert_allclose(schedule(steps), [_hf_linear(s, 3e-5, warmup, total) for s in steps],
                             rtol=1e-5, atol=1e-12)


def test_linear_with_end_and_init_lr():
  s = optim.linear_warmup_decay_schedule(peak_lr=1.0, warmup_steps=4, total_steps=12, end_lr=0.2, init_lr=0.1)
  want = {0: 0.1, 2: 0.55, 4: 1.0, 8: 0.6, 12: 0.2, 20: 0.2}
  np.testing.assert_allclose([s(k) for k in want], list(want.values()), rtol=1e-6)


def test_warmup_constant_constant_and_cosine():
  wc = optim.warmup_constant_schedule(peak_lr=1e-5, warmup_steps=4, init_lr=0.0)
  np.testing.assert_allclose([wc(k) for k in (0, 1, 4, 1000)], [0.0, 2.5e-6, 1e-5, 1e-5], rtol=1e-6)
  c = optim.constant_schedule(peak_lr=1e-4)
  np.testing.assert_allclose([c(k) for k in (0, 7, 10**6)], [1e-4] * 3, rtol=1e-7)
  cos = optim.warmup_cosine_schedule(peak_lr=1.0, warmup_steps=10, total_steps=110, end_lr=0.1)
  for k in (0, 5, 10, 35, 60, 110, 500):
    t = min(max((k - 10) / 100, 0.0), 1.0)
    want = k / 10 if k < 10 else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))
    np.testing.assert_allclose(cos(k), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("make, match", [
    (lambda: optim.inverse_sqrt_schedule(warmup_steps=0), "warmup_steps=0"),
    (lambda: optim.inverse_sqrt_schedule(peak_lr=-1.0), "peak_lr=-1.0"),
    (lambda: optim.inverse_sqrt_schedule(peak_lr=float("nan")), "peak_lr=nan"),
    (lambda: optim.linear_warmup_decay_schedule(peak_lr=1e-5, warmup_steps=11, total_steps=10), "exceeds"),
    (lambda: optim.linear_warmup_decay_schedule(peak_lr=1e-5, warmup_steps=0, total_steps=0), "total_steps=0"),
    (lambda: optim.warmup_cosine_schedule(peak_lr=1e-5, warmup_steps=2.5, total_steps=10), "warmup_steps=2.5"),
])
def test_schedule_arguments_are_validated(make, match):
  with pytest.raises(ValueError, match=match):
    make()


# --------------------------------------------------------------------------------------
# Config.
# --------------------------------------------------------------------------------------


def test_default_config_is_the_sec41_recipe():
  c = optim.default_optim_config()
  assert (c.optimizer, c.schedule, c.learning_rate, c.warmup_steps, c.warmup_init_lr) == (
      "adam", "inverse_sqrt", 5e-4, 4000, 1e-7)
  assert (c.b1, c.b2, c.eps, c.weight_decay, c.grad_clip_norm, c.grad_accum_steps) == (
      0.9, 0.98, 1e-8, 0.0, 0.0, 1)
  mlm = optim.default_optim_config("mlm")
  assert (mlm.optimizer, mlm.learning_rate) == ("adamw", 1e-5)  # Sec. 4.2
  glue = optim.default_optim_config("glue")
  assert (glue.schedule, glue.learning_rate) == ("linear", 2e-5)  # Sec. 4.3
  assert optim.default_optim_config("lm").learning_rate == 1e-4  # Sec. 4.4
  for setup in optim.SETUPS:  # every setup builds, and its keys are exactly the known ones
    cfg = optim.default_optim_config(setup)
    assert set(cfg.keys()) == set(c.keys())
    tx, schedule = optim.make_optimizer(cfg, total_steps=100)
    tx.init({"kernel": jnp.ones((2, 2))})
    assert float(schedule(0)) >= 0.0


@pytest.mark.parametrize("changes, match", [
    (dict(optimizer="sgd"), r"unknown optimizer 'sgd'.*'adam', 'adamw'"),
    (dict(schedule="step"), r"unknown schedule 'step'.*'inverse_sqrt'"),
    (dict(schedule="linear"), "pass total_steps"),
    (dict(optimizer="adam", weight_decay=0.01), "use optimizer='adamw'"),
    (dict(b2=1.0), r"b2=1.0 must lie in \[0.0, 1.0\)"),
    (dict(eps=0.0), r"eps=0.0 must lie in \(0.0"),
    (dict(weight_decay=-0.1, optimizer="adamw"), "weight_decay=-0.1"),
    (dict(grad_clip_norm=-1.0), "grad_clip_norm=-1.0"),
    (dict(grad_accum_steps=0), "grad_accum_steps=0"),
    (dict(learning_rat=1e-3), r"unknown optim config keys \['learning_rat'\]"),
])
def test_bad_configs_raise_at_construction(changes, match):
  with pytest.raises(ValueError, match=match):
    optim.make_optimizer(changes, total_steps=None)


def test_unknown_setup():
  with pytest.raises(ValueError, match="unknown optimizer setup 'bert'"):
    optim.default_optim_config("bert")


def test_config_dict_and_partial_dict_agree():
  cfg = optim.default_optim_config()
  cfg.learning_rate = 1e-3
  s1 = optim.make_schedule(cfg)
  s2 = optim.make_schedule({"learning_rate": 1e-3})  # missing keys default
  np.testing.assert_allclose([s1(k) for k in (0, 4000, 9000)], [s2(k) for k in (0, 4000, 9000)])


# --------------------------------------------------------------------------------------
# The optimizer against a float64 Adam reference.
# --------------------------------------------------------------------------------------


def _reference_adam(params, grads_seq, *, lr, b1, b2, eps, wd=0.0, decay=None, clip=0.0):
  """Adam/AdamW (Kingma & Ba with bias correction; decoupled decay times lr) in float64."""
  p = {k: np.asarray(v, np.float64) for k, v in params.items()}
  mu = {k: np.zeros_like(v) for k, v in p.items()}
  nu = {k: np.zeros_like(v) for k, v in p.items()}
  traj = []
  for t, g in enumerate(grads_seq, start=1):
    g = {k: np.asarray(v, np.float64) for k, v in g.items()}
    if clip:
      norm = math.sqrt(sum(float(np.sum(v * v)) for v in g.values()))
      g = {k: v * min(1.0, clip / norm) for k, v in g.items()}
    rate = lr(t - 1)  # the update after t-1 updates uses schedule(t-1)
    for k in p:
      mu[k] = b1 * mu[k] + (1 - b1) * g[k]
      nu[k] = b2 * nu[k] + (1 - b2) * g[k] ** 2
      m_hat, v_hat = mu[k] / (1 - b1 ** t), nu[k] / (1 - b2 ** t)
      step = m_hat / (np.sqrt(v_hat) + eps)
      if wd and (decay is None or decay[k]):
        step = step + wd * p[k]
      p[k] = p[k] - rate * step
    traj.append({k: v.copy() for k, v in p.items()})
  return traj


def _run(tx, params, grads_seq):
  state = tx.init(params)
  update = jax.jit(tx.update)
  traj = []
  for g in grads_seq:
    updates, state = update(g, state, params)
    params = optax.apply_updates(params, updates)
    traj.append(jax.tree.map(np.asarray, params))
  return traj


def _problem(seed=0, n=4, scales=(1.0,)):
  rng = np.random.default_rng(seed)
  params = {"kernel": rng.normal(size=(3, 5)).astype(np.float32), "bias": rng.normal(size=(5,)).astype(np.float32)}
  grads = [{k: (rng.normal(size=v.shape) * scales[i % len(scales)]).astype(np.float32) for k, v in params.items()}
           for i in range(n)]
  return params, grads


def test_adam_first_update_is_lr_times_sign():
  params, grads = _problem(n=1)
  tx, _ = optim.make_optimizer({"schedule": "constant", "learning_rate": 1e-3})
  state = tx.init(params)
  updates, _ = tx.update(grads[0], state, params)
  for k, g in grads[0].items():
    # m_hat = g, v_hat = g^2  =>  update = -lr g / (|g| + eps) = -lr sign(g) up to eps.
    np.testing.assert_allclose(updates[k], -1e-3 * g / (np.abs(g) + 1e-8), rtol=1e-6)
    np.testing.assert_allclose(updates[k], -1e-3 * np.sign(g), rtol=1e-5)


def test_mt_optimizer_trajectory_matches_reference_adam():
  """Sec. 4.1: Adam(0.9, 0.98) on the inverse-sqrt schedule, three steps, float64 reference."""
  params, grads = _problem(n=5, scales=(1.0, 0.1, 3.0))
  cfg = {"warmup_steps": 2, "warmup_init_lr": 1e-3, "learning_rate": 1e-2}
  tx, schedule = optim.make_optimizer(cfg)
  ref = _reference_adam(params, grads, lr=lambda s: _fairseq_inverse_sqrt(s, 1e-2, 2, 1e-3),
                        b1=0.9, b2=0.98, eps=1e-8)
  for got, want in zip(_run(tx, params, grads), ref, strict=True):
    for k in params:
      np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-7)


def test_clipping_caps_the_global_norm_inside_the_optimizer():
  # Steps alternate far above and below the clip norm: Adam's later steps depend on the ratio of
  # gradient sizes, so only a reference that clips the same way matches.
  params, grads = _problem(n=4, scales=(50.0, 0.01, 10.0, 0.5))
  cfg = {"schedule": "constant", "learning_rate": 1e-2, "grad_clip_norm": 1.0}
  ref = _reference_adam(params, grads, lr=lambda s: 1e-2, b1=0.9, b2=0.98, eps=1e-8, clip=1.0)
  unclipped = _reference_adam(params, grads, lr=lambda s: 1e-2, b1=0.9, b2=0.98, eps=1e-8)
  got = _run(optim.make_optimizer(cfg)[0], params, grads)
  for k in params:
    np.testing.assert_allclose(got[-1][k], ref[-1][k], rtol=1e-5, atol=1e-7)
    assert np.max(np.abs(ref[-1][k] - unclipped[-1][k])) > 1e-4  # the test can tell them apart
  # and the clip transform itself leaves exactly norm 1 on a too-large gradient
  clipped, _ = optax.clip_by_global_norm(1.0).update(grads[0], optax.EmptyState())
  norm = math.sqrt(sum(float(np.sum(np.square(v))) for v in clipped.values()))
  np.testing.assert_allclose(norm, 1.0, rtol=1e-6)


def test_grad_accumulation_equals_one_step_on_the_mean_gradient():
  k = 3
  params, micro = _problem(n=3 * k, scales=(0.1, 0.2, 0.3, 1.0))
  # The clip sits between the mean's norm and the sum's, so averaging (not summing) matters.
  base = {"warmup_steps": 2, "warmup_init_lr": 1e-3, "learning_rate": 1e-2, "grad_clip_norm": 1.5}
  tx_acc, _ = optim.make_optimizer({**base, "grad_accum_steps": k})
  tx_one, _ = optim.make_optimizer(base)
  means = [{n: np.mean([g[n] for g in micro[i:i + k]], axis=0) for n in params} for i in range(0, len(micro), k)]
  acc = _run(tx_acc, params, micro)
  one = _run(tx_one, params, means)
  for i, got in enumerate(acc):
    # Params move only on every k-th micro-step; then they equal the mean-gradient trajectory
    # (the schedule counts optimizer updates and the clip sees the mean gradient).
    done = (i + 1) // k  # optimizer updates completed after micro-step i
    want = params if done == 0 else one[done - 1]
    for n in params:
      np.testing.assert_allclose(got[n], want[n], rtol=1e-6, atol=1e-7)
  sums = _run(tx_one, params, [{n: k * g[n] for n in params} for g in means])
  assert max(np.max(np.abs(sums[-1][n] - one[-1][n])) for n in params) > 1e-4


# --------------------------------------------------------------------------------------
# Weight-decay mask on the real models, and AdamW through nnx.Optimizer.
# --------------------------------------------------------------------------------------

_TINY = dict(vocab_size=40, d_model=16, num_layers=1, num_heads=2, d_ff=24, max_position=32, dropout=0.0,
             attention_dropout=0.0)
_MODELS = [
    ("mlm", lambda c, r: models.RoFormerForMaskedLM(c, rngs=r), {}),
    ("mlm-untied-pre-ln-factorised", lambda c, r: models.RoFormerForMaskedLM(c, rngs=r),
     dict(tie_embeddings=False, norm="pre", embedding_size=8, position="learned")),
    ("classifier", lambda c, r: models.RoFormerForSequenceClassification(c, 3, rngs=r), {}),
    ("seq2seq", lambda c, r: models.TransformerSeq2Seq(c, rngs=r), dict(norm="pre", type_vocab_size=0)),
    ("causal-favor", lambda c, r: models.CausalLM(c, rngs=r),
     dict(attention="linear", feature_map="favor", num_features=8, norm="pre", tie_embeddings=False)),
]
_PARAM_NAMES = {"kernel", "bias", "scale", "embedding"}


def _is_norm_path(path):
  return any(isinstance(k, jax.tree_util.DictKey) and str(k.key).endswith("norm") for k in path)


@pytest.mark.parametrize("name, build, overrides", _MODELS, ids=[m[0] for m in _MODELS])
def test_decay_mask_on_every_model(name, build, overrides):
  cfg = models.ModelConfig(**{**_TINY, **overrides})
  model = nnx.eval_shape(lambda: build(cfg, nnx.Rngs(0)))
  params = nnx.state(model, nnx.Param)  # what nnx.Optimizer's tx.init sees (Param Variables)
  for tree in (params, nnx.as_pure(params)):  # ... and what its tx.update sees (arrays)
    mask = optim.decay_mask(tree)
    flat = jax.tree_util.tree_leaves_with_path(mask)
    assert len(flat) == len(jax.tree.leaves(nnx.as_pure(params)))
    for path, decayed in flat:
      leaf = optim._leaf_name(path)
      # A new parameter kind must make this fail and force a decay decision.
      assert leaf in _PARAM_NAMES, jax.tree_util.keystr(path)
      assert decayed is (leaf in ("kernel", "embedding")), jax.tree_util.keystr(path)
      if _is_norm_path(path) or leaf == "bias":
        assert decayed is False, jax.tree_util.keystr(path)
    assert any(d for _, d in flat) and not all(d for _, d in flat)


def test_decay_mask_on_plain_dicts():
  params = {"dense": {"kernel": 1.0, "bias": 2.0}, "ln": {"scale": 1.0, "bias": 0.0}, "tok": {"embedding": 0.0}}
  assert optim.decay_mask(params) == {"dense": {"kernel": True, "bias": False},
                                      "ln": {"scale": False, "bias": False}, "tok": {"embedding": True}}


def _tiny_mlm(seed=0):
  model = models.RoFormerForMaskedLM(models.ModelConfig(**_TINY), rngs=nnx.Rngs(seed))
  # Random values everywhere, so a bias or LayerNorm parameter that decayed would move.
  state = nnx.state(model, nnx.Param)
  leaves, treedef = jax.tree.flatten(nnx.as_pure(state))
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  nnx.update(model, jax.tree.unflatten(
      treedef, [1.0 + jax.random.normal(k, x.shape) for k, x in zip(keys, leaves, strict=True)]))
  return model


@pytest.mark.parametrize("accum", [1, 2])
def test_adamw_via_nnx_optimizer_decays_only_kernels_and_embeddings(accum):
  lr, wd = 1e-2, 0.1
  model = _tiny_mlm()
  cfg = optim.default_optim_config("mlm")
  cfg.update(learning_rate=lr, weight_decay=wd, grad_accum_steps=accum, grad_clip_norm=1.0)
  tx, _ = optim.make_optimizer(cfg, total_steps=10)
  opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
  before = jax.tree.map(np.asarray, nnx.as_pure(nnx.state(model, nnx.Param)))
  zeros = jax.tree.map(jnp.zeros_like, nnx.state(model, nnx.Param))

  @nnx.jit
  def step(opt, model, grads):
    opt.update(model, grads)

  for _ in range(accum):  # one optimizer update
    step(opt, model, zeros)
  after = nnx.as_pure(nnx.state(model, nnx.Param))
  mask = optim.decay_mask(after)
  n_decayed = 0
  for (path, b), a, decayed in zip(jax.tree_util.tree_leaves_with_path(before), jax.tree.leaves(after),
                                   jax.tree.leaves(mask), strict=True):
    # zero gradient: Adam's direction is 0 / (0 + eps) = 0, leaving p - lr * wd * p.
    want = b * (1 - lr * wd) if decayed else b
    np.testing.assert_allclose(np.asarray(a), want, rtol=1e-6, err_msg=jax.tree_util.keystr(path))
    n_decayed += decayed
  assert n_decayed == 9  # word + token_type embeddings, q/k/v/out, mlp_in, mlp_out, mlm transform


def test_optimizer_state_is_a_plain_pytree_that_orbax_round_trips(tmp_path):
  import orbax.checkpoint as ocp

  model = _tiny_mlm()
  cfg = optim.default_optim_config("mlm")
  cfg.update(weight_decay=0.01, grad_accum_steps=2, grad_clip_norm=1.0)
  opt = nnx.Optimizer(model, optim.make_optimizer(cfg, 10)[0], wrt=nnx.Param)
  grads = jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param))
  opt.update(model, grads)
  state = nnx.as_pure(nnx.state(opt))
  assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(state))
  with ocp.StandardCheckpointer() as ckpt:
    ckpt.save(tmp_path / "opt", state)
    ckpt.wait_until_finished()
    restored = ckpt.restore(tmp_path / "opt", jax.tree.map(ocp.utils.to_shape_dtype_struct, state))
  jax.tree.map(np.testing.assert_array_equal, restored, state)


def test_optimizer_state_is_sharded_like_the_parameters():
  """nnx.Optimizer built inside jit on a mesh: every moment / accumulator takes its parameter's
  sharding (nnx copies the Param metadata onto the state), and the update keeps it."""
  mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(jax.sharding.AxisType.Auto,))
  rules = (("vocab", "fsdp"), ("mlp", "fsdp"), ("embed", None), ("heads", None), ("kv", None), ("norm", None),
           ("types", None), ("position", None), ("labels", None))
  cfg = optim.default_optim_config("mlm")
  cfg.update(weight_decay=0.01, grad_accum_steps=2, grad_clip_norm=1.0)
  tx, _ = optim.make_optimizer(cfg, total_steps=10)
  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    @nnx.jit
    def create():
      model = models.RoFormerForMaskedLM(models.ModelConfig(**_TINY), rngs=nnx.Rngs(0))
      return model, nnx.Optimizer(model, tx, wrt=nnx.Param)

    @nnx.jit
    def step(opt, model, grads):
      opt.update(model, grads)

    model, opt = create()
    step(opt, model, jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param)))
  params = {jax.tree_util.keystr(p): x.sharding
            for p, x in jax.tree_util.tree_leaves_with_path(nnx.as_pure(nnx.state(model, nnx.Param)))}
  assert params["['roformer']['embeddings']['word']['embedding']"].spec == jax.P("fsdp")
  checked = 0
  for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.as_pure(nnx.state(opt))):
    key = jax.tree_util.keystr(path)
    owner = [p for p in params if key.endswith(p)]
    if owner:  # mu, nu and acc_grads of one parameter
      assert leaf.sharding.is_equivalent_to(params[owner[0]], leaf.ndim), key
      checked += 1
  assert checked == 3 * len(params)
