"""FLOP accounting and the device peak behind MFU, against independent references: XLA's own
count of the compiled step, and NVIDIA's datasheet peaks."""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from roformer_jax import models
from roformer_jax.training import metrics


def _xla_flops(fn, *args) -> float:
  cost = jax.jit(fn).lower(*args).compile().cost_analysis()
  return float((cost[0] if isinstance(cost, list) else cost)["flops"])


@pytest.mark.parametrize("masked", [False, True])
def test_train_flops_match_xla_count_of_the_backward_pass(masked):
  """6N + attention (full logits) and the masked-head count agree with XLA's FLOP count of the
  compiled value-and-grad within 5% (XLA also counts softmax, ReLU and LayerNorm arithmetic).

  ReLU, not the default GELU: the GELUs are recomputed in the backward pass
  (models._recomputed), and XLA counts the erf polynomial twice, recomputation that model
  FLOPs (and MFU) leave out by convention."""
  cfg = models.ModelConfig(vocab_size=512, d_model=128, num_layers=2, num_heads=4, d_ff=512,
                           dropout=0.0, attention_dropout=0.0, activation="relu")
  model = models.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0))
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  b, t, m = 4, 128, 24
  ids = jnp.ones((b, t), jnp.int32)
  pos = jnp.tile(jnp.arange(m) * 5, (b, 1))

  def loss(params):
    logits = nnx.merge(graphdef, params, rest)(ids, masked_positions=pos if masked else None)
    return jnp.mean(jax.nn.logsumexp(logits, -1))

  xla_per_token = _xla_flops(jax.grad(loss), params) / (b * t)
  n = sum(x.size for x in jax.tree.leaves(params))
  assert metrics.count_params(model) == n
  head = sum(x.size for x in jax.tree.leaves(nnx.state(model.mlm, nnx.Param))) + cfg.vocab_size * cfg.d_model
  assert metrics.mlm_head_params(model) == head  # the head's transform and bias, and the tied table
  if masked:
    ours = metrics.mlm_train_flops_per_token(n, head, scored_fraction=m / t, num_layers=2, seq_len=t, d_model=128)
  else:
    ours = metrics.train_flops_per_token(n, num_layers=2, seq_len=t, d_model=128, causal=False)
  assert ours == pytest.approx(xla_per_token, rel=0.05)
  if masked:  # and the full-logits count would overstate this step by > 5%
    full = metrics.train_flops_per_token(n, num_layers=2, seq_len=t, d_model=128, causal=False)
    assert full > 1.05 * xla_per_token


def test_mlm_flops_arguments_are_checked():
  with pytest.raises(ValueError, match="scored_fraction=0"):
    metrics.mlm_train_flops_per_token(10, 5, scored_fraction=0.0, num_layers=1, seq_len=8, d_model=4)
  with pytest.raises(ValueError, match="head_params=11"):
    metrics.mlm_train_flops_per_token(10, 11, scored_fraction=0.5, num_layers=1, seq_len=8, d_model=4)


class _FakeGpu:
  platform = "gpu"

  def __init__(self, kind, sms, cc):
    self.device_kind, self.core_count, self.compute_capability = kind, sms, cc


@pytest.mark.parametrize("kind, sms, cc, datasheet_mhz, datasheet_tflops", [
    ("NVIDIA A100-SXM4-80GB", 108, "8.0", 1410, 312),
    ("NVIDIA H100 80GB HBM3", 132, "9.0", 1830, 989),
    ("NVIDIA A10", 72, "8.6", 1695, 125),
])
def test_gpu_peak_is_derived_from_the_device_and_matches_datasheets(kind, sms, cc, datasheet_mhz, datasheet_tflops):
  info = metrics.peak_flops_info(_FakeGpu(kind, sms, cc), max_sm_clock_mhz=lambda d: datasheet_mhz)
  assert info["source"] == "device" and f"{sms} SMs" in info["detail"]
  assert info["flops"] / 1e12 == pytest.approx(datasheet_tflops, rel=0.01)


def test_peak_falls_back_to_the_table_then_to_none():
  h100 = _FakeGpu("NVIDIA H100 80GB HBM3", 132, "9.0")
  info = metrics.peak_flops_info(h100, max_sm_clock_mhz=lambda d: None)  # no nvidia-smi
  assert info == {"flops": 989e12, "source": "datasheet table", "detail": "NVIDIA H100 80GB HBM3: "
                  "PEAK_FLOPS['NVIDIA H100 80GB HBM3']"}
  assert metrics.peak_flops_info(_FakeGpu("NVIDIA Future", 100, "12.0"), max_sm_clock_mhz=lambda d: 2000) is None
  assert metrics.peak_flops_info(jax.devices("cpu")[0]) is None
  assert metrics.device_peak_flops(jax.devices("cpu")[0]) is None


def test_max_sm_clock_is_parsed_from_nvidia_smi(monkeypatch):
  import shutil
  import subprocess
  from types import SimpleNamespace
  out = {"text": "1980\n"}
  monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi")
  monkeypatch.setattr(subprocess, "run", lambda *a, **k: SimpleNamespace(stdout=out["text"]))
  device = SimpleNamespace(local_hardware_id=1)
  assert metrics._nvidia_smi_max_sm_clock_mhz(device) == 1980.0
  out["text"] = "1980\n1755\n"  # two different GPUs: the device's own row
  assert metrics._nvidia_smi_max_sm_clock_mhz(device) == 1755.0
  assert metrics._nvidia_smi_max_sm_clock_mhz(SimpleNamespace()) is None  # no id: no guess
  out["text"] = "[N/A]\n"
  assert metrics._nvidia_smi_max_sm_clock_mhz(device) is None
  monkeypatch.setattr(shutil, "which", lambda name: None)
  assert metrics._nvidia_smi_max_sm_clock_mhz(device) is None


def test_progress_draws_the_finished_bar_once(capsys):
  """At the last step the bar closes; the messages that follow (the last evaluation, samples)
  print below it and do not redraw it (before, `make train` ended with the bar three times)."""
  progress = metrics.Progress(total=3, initial=0, enabled=True)
  progress.update(1, loss=2.5)
  progress.write("step 1: eval loss 2.5")
  progress.update(3, loss=1.25)
  progress.write("sample at step 3: 'a' -> 'b'")
  progress.write("step 3: eval loss 1.25")
  progress.close()
  out, err = capsys.readouterr()
  assert err.count("3/3") == 1, err
  assert "loss=1.25" in err
  assert out.splitlines()[-2:] == ["sample at step 3: 'a' -> 'b'", "step 3: eval loss 1.25"], out
