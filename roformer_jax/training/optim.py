"""Learning-rate schedules and optimizers for the paper's experiments, as pure functions.

Step convention (every schedule here): `schedule(step)` is the learning rate of the update
that is applied when `step` updates have already been applied. This is optax's convention
(its `count` starts at 0), fairseq's (`lr_scheduler.step_update(num_updates)` sets the rate of
the next update) and HF's (`LambdaLR` multiplier of the current step). So the very first update
uses `schedule(0)`. Under gradient accumulation (`grad_accum_steps = k`) the schedule counts
optimizer updates, not micro-batches: micro-step `s` uses `schedule(s // k)`.

Schedules (all jit-friendly: `step` may be a traced integer; the result is float32):
  inverse_sqrt_schedule         Sec. 4.1 (fairseq `inverse_sqrt`): 1e-7 -> 5e-4 over 4000, then
                                5e-4 * sqrt(4000 / step).
  linear_warmup_decay_schedule  Sec. 4.3 GLUE (HF `get_linear_schedule_with_warmup`).
  warmup_constant_schedule      linear warmup, then flat; `constant_schedule` is flat from 0.
  warmup_cosine_schedule        linear warmup, then cosine to `end_lr`.

`make_optimizer(cfg, total_steps)` builds the whole `optax` chain from the `config.optim`
section (`default_optim_config()` documents every key):
  [clip_by_global_norm] -> adam | adamw(decoupled weight decay, masked by `decay_mask`)
  [-> wrapped in optax.MultiSteps for gradient accumulation].
Its state is a plain pytree of arrays (orbax saves it; it shards like the parameters).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import ml_collections
import optax

Schedule = Callable[[Any], jax.Array]

OPTIMIZERS = ("adam", "adamw")
SCHEDULES = ("inverse_sqrt", "linear", "constant", "warmup_constant", "cosine")
SETUPS = ("mt", "mlm", "glue", "lm")
DECAY_NAMES = ("kernel", "embedding")  # leaf names that get weight decay; see decay_mask


# --------------------------------------------------------------------------------------
# Argument checks (construction time, never inside jit).
# --------------------------------------------------------------------------------------


def _real(name: str, value, *, low: float = 0.0, low_open: bool = False, high: float | None = None,
          high_open: bool = True) -> float:
  if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
    raise ValueError(f"{name}={value!r} must be a finite number.")
  v = cast(float, value)  # a finite Real (typeshed's numbers.Real declares no comparison with float)
  bad_low = v <= low if low_open else v < low
  bad_high = high is not None and (v >= high if high_open else v > high)
  if bad_low or bad_high:
    lo = "(" if low_open else "["
    hi = ("inf)" if high is None else (f"{high})" if high_open else f"{high}]"))
    raise ValueError(f"{name}={value!r} must lie in {lo}{low}, {hi}.")
  return float(value)


def _int(name: str, value, *, low: int) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
    raise ValueError(f"{name}={value!r} must be an integer >= {low}.")
  return int(value)


def _as_step(step) -> jax.Array:
  """Steps below 0 are treated as 0; float32 holds every step up to 2^24 exactly."""
  return jnp.maximum(jnp.asarray(step, jnp.float32), 0.0)


def _warmup(step, *, init_lr: float, peak_lr: float, warmup_steps: int) -> jax.Array:
  # init + step * (peak - init) / warmup: equals init at step 0 and reaches peak at step == warmup.
  return init_lr + step * ((peak_lr - init_lr) / max(warmup_steps, 1))


# --------------------------------------------------------------------------------------
# Schedules.
# --------------------------------------------------------------------------------------


def _warmup_then_decay_args(peak_lr, end_lr, init_lr, warmup_steps, total_steps):
  """Validated arguments of a warmup-then-decay schedule, plus the decay length."""
  peak_lr, end_lr, init_lr = (_real(n, v) for n, v in (("peak_lr", peak_lr), ("end_lr", end_lr),
                                                       ("init_lr", init_lr)))
  total_steps = _int("total_steps", total_steps, low=1)
  warmup_steps = _int("warmup_steps", warmup_steps, low=0)
  if warmup_steps > total_steps:
    raise ValueError(f"warmup_steps={warmup_steps} exceeds total_steps={total_steps}.")
  return peak_lr, end_lr, init_lr, warmup_steps, total_steps, max(total_steps - warmup_steps, 1)


def inverse_sqrt_schedule(*, peak_lr: float = 5e-4, warmup_steps: int = 4000,
                          warmup_init_lr: float = 1e-7) -> Schedule:
  """The Sec. 4.1 MT schedule, exactly fairseq's `inverse_sqrt` (Vaswani et al. with a floor).

    lr(step) = warmup_init_lr + step * (peak_lr - warmup_init_lr) / warmup_steps,  step < warmup_steps
    lr(step) = peak_lr * sqrt(warmup_steps / step),                                 step >= warmup_steps

  So lr(0) = warmup_init_lr (the first update), lr(warmup_steps) = peak_lr (both branches agree
  there: the schedule is continuous), and lr(4 * warmup_steps) = peak_lr / 2.

  Args:
    peak_lr: rate reached at `warmup_steps` (fairseq `--lr`; Sec. 4.1: 5e-4).
    warmup_steps: >= 1 (fairseq `--warmup-updates`, 4000 in its WMT recipe). Without warmup the
      decay peak_lr * sqrt(warmup / step) has no scale, so 0 is rejected.
    warmup_init_lr: rate of the first update (fairseq `--warmup-init-lr`; Sec. 4.1: 1e-7).

  Returns:
    schedule(step int[...]) -> float32[...].
  """
  peak_lr = _real("peak_lr", peak_lr)
  warmup_init_lr = _real("warmup_init_lr", warmup_init_lr)
  warmup_steps = _int("warmup_steps", warmup_steps, low=1)

  def schedule(step):
    step = _as_step(step)
    warm = _warmup(step, init_lr=warmup_init_lr, peak_lr=peak_lr, warmup_steps=warmup_steps)
    decay = peak_lr * jnp.sqrt(warmup_steps / jnp.maximum(step, 1.0))
    return jnp.where(step < warmup_steps, warm, decay).astype(jnp.float32)

  return schedule


def linear_warmup_decay_schedule(*, peak_lr: float, warmup_steps: int, total_steps: int,
                                 end_lr: float = 0.0, init_lr: float = 0.0) -> Schedule:
  """Linear warmup init_lr -> peak_lr, then linear decay to end_lr at total_steps (Sec. 4.3).

  With init_lr = end_lr = 0 this is HF's `get_linear_schedule_with_warmup`, which the paper's
  GLUE fine-tuning used (HF Transformers; lr in {2,3,4,5}e-5):

    lr(step) = init_lr + step * (peak_lr - init_lr) / warmup_steps,                   step < warmup_steps
    lr(step) = peak_lr + (end_lr - peak_lr) * (step - warmup_steps) / (total_steps - warmup_steps),
    lr(step) = end_lr,                                                                step >= total_steps

  warmup_steps = 0 starts the decay at peak_lr; with warmup_steps = total_steps the rate warms up
  and then drops to end_lr at total_steps (as HF's does).

  Args:
    peak_lr, end_lr, init_lr: non-negative rates.
    warmup_steps: integer in [0, total_steps].
    total_steps: integer >= 1, the number of optimizer updates.

  Returns:
    schedule(step int[...]) -> float32[...].
  """
  peak_lr, end_lr, init_lr, warmup_steps, total_steps, decay_steps = _warmup_then_decay_args(
      peak_lr, end_lr, init_lr, warmup_steps, total_steps)

  def schedule(step):
    step = _as_step(step)
    warm = _warmup(step, init_lr=init_lr, peak_lr=peak_lr, warmup_steps=warmup_steps)
    frac = jnp.clip((step - warmup_steps) / decay_steps, 0.0, 1.0)
    decay = jnp.where(step >= total_steps, end_lr, peak_lr + (end_lr - peak_lr) * frac)
    return jnp.where(step < warmup_steps, warm, decay).astype(jnp.float32)

  return schedule


def warmup_constant_schedule(*, peak_lr: float, warmup_steps: int, init_lr: float = 0.0) -> Schedule:
  """Linear warmup init_lr -> peak_lr over warmup_steps, then peak_lr for ever.

  The paper's MLM pre-training (Sec. 4.2) names only AdamW with lr 1e-5; this (or
  `constant_schedule`) keeps the rate there.
  """
  peak_lr, init_lr = _real("peak_lr", peak_lr), _real("init_lr", init_lr)
  warmup_steps = _int("warmup_steps", warmup_steps, low=0)

  def schedule(step):
    step = _as_step(step)
    warm = _warmup(step, init_lr=init_lr, peak_lr=peak_lr, warmup_steps=warmup_steps)
    return jnp.where(step < warmup_steps, warm, peak_lr).astype(jnp.float32)

  return schedule


def constant_schedule(*, peak_lr: float) -> Schedule:
  """lr(step) = peak_lr at every step (Sec. 4.4's Performer LM: Adam, 1e-4)."""
  return warmup_constant_schedule(peak_lr=peak_lr, warmup_steps=0)


def warmup_cosine_schedule(*, peak_lr: float, warmup_steps: int, total_steps: int,
                           end_lr: float = 0.0, init_lr: float = 0.0) -> Schedule:
  """Linear warmup init_lr -> peak_lr, then half a cosine down to end_lr at total_steps.

    lr(step) = end_lr + (peak_lr - end_lr) * (1 + cos(pi * t)) / 2,
    t = clip((step - warmup_steps) / (total_steps - warmup_steps), 0, 1).
  """
  peak_lr, end_lr, init_lr, warmup_steps, total_steps, decay_steps = _warmup_then_decay_args(
      peak_lr, end_lr, init_lr, warmup_steps, total_steps)

  def schedule(step):
    step = _as_step(step)
    warm = _warmup(step, init_lr=init_lr, peak_lr=peak_lr, warmup_steps=warmup_steps)
    t = jnp.where(step >= total_steps, 1.0, jnp.clip((step - warmup_steps) / decay_steps, 0.0, 1.0))
    decay = end_lr + (peak_lr - end_lr) * 0.5 * (1.0 + jnp.cos(jnp.pi * t))
    return jnp.where(step < warmup_steps, warm, decay).astype(jnp.float32)

  return schedule


# --------------------------------------------------------------------------------------
# Config.
# --------------------------------------------------------------------------------------

# Per-setup overrides of the Sec. 4.1 defaults below.
_SETUP_OVERRIDES: dict[str, dict[str, Any]] = {
    "mt": {},
    # Sec. 4.2: AdamW, lr 1e-5; the paper names no schedule, betas, eps or decay, so those
    # are BERT's (Devlin et al. 2019: beta2 0.999, eps 1e-6, weight decay 0.01).
    "mlm": dict(optimizer="adamw", schedule="constant", learning_rate=1e-5, warmup_steps=0,
                warmup_init_lr=0.0, b2=0.999, eps=1e-6, weight_decay=0.01),
    # Sec. 4.3: HF Transformers fine-tuning, lr in {2,3,4,5}e-5, 3 epochs; HF Trainer defaults
    # otherwise (AdamW, linear decay to 0, no warmup, beta2 0.999, eps 1e-8, decay 0).
    "glue": dict(optimizer="adamw", schedule="linear", learning_rate=2e-5, warmup_steps=0,
                 warmup_init_lr=0.0, b2=0.999, eps=1e-8, weight_decay=0.0),
    # Sec. 4.4: Performer LM on enwik8, lr 1e-4 (lucidrains/performer-pytorch enwik8 example:
    # torch Adam defaults, constant rate, gradient norm clipped at 0.5).
    "lm": dict(optimizer="adam", schedule="constant", learning_rate=1e-4, warmup_steps=0,
               warmup_init_lr=0.0, b2=0.999, eps=1e-8, grad_clip_norm=0.5),
}


def default_optim_config(setup: str = "mt") -> ml_collections.ConfigDict:
  """The `config.optim` section, with the paper's values for one experiment.

  Args:
    setup: "mt" (Sec. 4.1, the defaults below), "mlm" (Sec. 4.2), "glue" (Sec. 4.3) or "lm"
      (Sec. 4.4); see _SETUP_OVERRIDES for what each changes.

  Returns:
    A ConfigDict whose keys are exactly the ones `make_optimizer` reads.
  """
  if setup not in _SETUP_OVERRIDES:
    raise ValueError(f"unknown optimizer setup {setup!r}; expected one of {SETUPS}.")
  c = ml_collections.ConfigDict()
  c.optimizer = "adam"  # adam | adamw. Sec. 4.1: Adam.
  c.schedule = "inverse_sqrt"  # inverse_sqrt | linear | constant | warmup_constant | cosine.
  c.learning_rate = 5e-4  # peak rate. Sec. 4.1: warmup 1e-7 -> 5e-4.
  c.warmup_steps = 4000  # linear-warmup updates (fairseq --warmup-updates 4000, its WMT recipe).
  c.warmup_init_lr = 1e-7  # rate of the first update, for every warmup schedule. Sec. 4.1: 1e-7.
  c.end_learning_rate = 0.0  # final rate of linear and cosine (reached at total_steps).
  c.b1 = 0.9  # Sec. 4.1: beta1 = 0.9.
  c.b2 = 0.98  # Sec. 4.1: beta2 = 0.98.
  # Sec. 4.1 ran fairseq, whose --adam-eps default is 1e-8 (Vaswani et al. used 1e-9).
  c.eps = 1e-8
  c.weight_decay = 0.0  # decoupled (AdamW), times the rate; adamw only. Biases/LayerNorm never.
  c.grad_clip_norm = 0.0  # clip the global gradient norm to this; 0 = off.
  c.grad_accum_steps = 1  # >1: average this many micro-batch gradients per update (MultiSteps).
  c.update(_SETUP_OVERRIDES[setup])
  return c


def _read(cfg: Mapping[str, Any] | ml_collections.ConfigDict) -> dict[str, Any]:
  """cfg over the defaults; unknown keys are an error (a typo would otherwise be ignored)."""
  values = dict(cfg.to_dict() if isinstance(cfg, ml_collections.ConfigDict) else cfg)
  defaults = default_optim_config().to_dict()
  unknown = sorted(set(values) - set(defaults))
  if unknown:
    raise ValueError(f"unknown optim config keys {unknown}; known keys: {sorted(defaults)}.")
  return {**defaults, **values}


def make_schedule(cfg, total_steps: int | None = None) -> Schedule:
  """The learning-rate schedule named by `cfg.schedule` (see default_optim_config).

  Args:
    cfg: the `config.optim` ConfigDict (or a dict); missing keys take their defaults.
    total_steps: optimizer updates in the run; needed by "linear" and "cosine".

  Raises:
    ValueError: unknown schedule name, or a value out of range.
  """
  c = _read(cfg)
  name = c["schedule"]
  peak, warmup, init = c["learning_rate"], c["warmup_steps"], c["warmup_init_lr"]
  if name == "inverse_sqrt":
    return inverse_sqrt_schedule(peak_lr=peak, warmup_steps=warmup, warmup_init_lr=init)
  if name == "constant":  # warmup_steps and warmup_init_lr are not used
    return constant_schedule(peak_lr=peak)
  if name == "warmup_constant":
    return warmup_constant_schedule(peak_lr=peak, warmup_steps=warmup, init_lr=init)
  if name in ("linear", "cosine"):
    if total_steps is None:
      raise ValueError(f"schedule={name!r} decays to end_learning_rate at total_steps; pass total_steps.")
    fn = linear_warmup_decay_schedule if name == "linear" else warmup_cosine_schedule
    return fn(peak_lr=peak, warmup_steps=warmup, total_steps=total_steps,
              end_lr=c["end_learning_rate"], init_lr=init)
  raise ValueError(f"unknown schedule {name!r}; expected one of {SCHEDULES}.")


# --------------------------------------------------------------------------------------
# Weight-decay mask.
# --------------------------------------------------------------------------------------


def _leaf_name(path) -> str | None:
  """The parameter's own name: the last string key, skipping an nnx.Variable's `value` slot."""
  for key in reversed(path):
    if isinstance(key, jax.tree_util.DictKey):
      name = key.key
    elif isinstance(key, jax.tree_util.GetAttrKey):
      name = key.name
      if name in ("value", "raw_value"):
        continue
    else:
      continue
    if isinstance(name, str):
      return name
  return None


def _is_variable(x) -> bool:
  from flax import nnx  # optax users without flax never get here with Variables
  return isinstance(x, nnx.Variable)


def decay_mask(params, *, decay_names: tuple[str, ...] = DECAY_NAMES):
  """True for the leaves that get weight decay: those named `kernel` or `embedding`.

  That is every Linear/LinearGeneral kernel and every embedding table (BERT and HF decay
  embeddings), and never a bias (Linear biases, LayerNorm bias, the MLM head's output `bias`)
  or a LayerNorm `scale`: HF's no_decay = ["bias", "LayerNorm.weight"].

  Works on the trees optax sees through `nnx.Optimizer(model, tx, wrt=nnx.Param)` in flax
  0.12: `tx.init` gets an `nnx.State` of `nnx.Param` Variables, `tx.update` an `nnx.State` of
  arrays (`nnx.as_pure`); on plain nested dicts too. The result is a tree of Python bools with
  the params' structure down to each parameter (a prefix of it, which `optax.masked` accepts).
  """
  def leaf(path, _):
    return _leaf_name(path) in decay_names

  return jax.tree_util.tree_map_with_path(leaf, params, is_leaf=_is_variable)


# --------------------------------------------------------------------------------------
# Optimizer.
# --------------------------------------------------------------------------------------


def make_optimizer(cfg, total_steps: int | None = None) -> tuple[optax.GradientTransformation, Schedule]:
  """The optax optimizer of `cfg` (the `config.optim` section) and its schedule.

  Chain: clip_by_global_norm(grad_clip_norm) [if > 0] -> adam or adamw(schedule, b1, b2, eps,
  weight_decay masked by decay_mask); with grad_accum_steps = k > 1 all of it is wrapped in
  `optax.MultiSteps(k)`: k calls accumulate the mean gradient (the first k-1 return zero
  updates), and the k-th clips it and takes one Adam step, exactly one step on the mean.

  AdamW's update is -lr * (adam_direction + weight_decay * param) (decoupled decay scaled by
  the scheduled rate, as PyTorch/HF AdamW and fairseq's Adam --weight-decay). "adam" with
  weight_decay > 0 is rejected: choose adamw for decoupled decay.

  Args:
    cfg: ConfigDict or dict with the keys of `default_optim_config()`; missing ones default.
    total_steps: optimizer updates in the run (micro-batches / grad_accum_steps); needed by
      the "linear" and "cosine" schedules.

  Returns:
    (tx, schedule); schedule(optimizer_step) is the rate, for logging.

  Raises:
    ValueError: an unknown optimizer or schedule name, or a value out of range.
  """
  c = _read(cfg)
  schedule = make_schedule(c, total_steps)
  name = c["optimizer"]
  if name not in OPTIMIZERS:
    raise ValueError(f"unknown optimizer {name!r}; expected one of {OPTIMIZERS}.")
  b1 = _real("b1", c["b1"], high=1.0)
  b2 = _real("b2", c["b2"], high=1.0)
  eps = _real("eps", c["eps"], low_open=True)
  wd = _real("weight_decay", c["weight_decay"])
  clip = 0.0 if c["grad_clip_norm"] is None else _real("grad_clip_norm", c["grad_clip_norm"])
  accum = _int("grad_accum_steps", 1 if c["grad_accum_steps"] is None else c["grad_accum_steps"], low=1)

  if name == "adam":
    if wd > 0:
      raise ValueError(f"optimizer='adam' with weight_decay={wd}: use optimizer='adamw' for "
                       "decoupled weight decay, or set weight_decay=0.")
    core = optax.adam(schedule, b1=b1, b2=b2, eps=eps)
  else:
    core = optax.adamw(schedule, b1=b1, b2=b2, eps=eps, weight_decay=wd, mask=decay_mask)
  tx = optax.chain(optax.clip_by_global_norm(clip), core) if clip > 0 else core
  if accum > 1:
    tx = optax.MultiSteps(tx, every_k_schedule=accum).gradient_transformation()
  return tx, schedule
