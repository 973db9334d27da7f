"""Training metrics: `metrics.jsonl`, TensorBoard events, a progress bar, the loss plot, MFU.

Only process 0 writes; other processes get a writer that does nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import jax

# Dense bf16 peak FLOP/s by device kind (vendor datasheets, without sparsity). MFU is reported
# only for devices listed here; add yours to get it.
PEAK_FLOPS = {
    "NVIDIA H100 80GB HBM3": 989e12,
    "NVIDIA H100": 989e12,
    "NVIDIA H200": 989e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
}


def device_peak_flops(device: jax.Device | None = None) -> float | None:
  device = device or jax.devices()[0]
  kind = getattr(device, "device_kind", "")
  for name, peak in PEAK_FLOPS.items():
    if kind.startswith(name):
      return peak
  return None


def train_flops_per_token(num_params: int, *, num_layers: int, seq_len: int, d_model: int,
                          causal: bool, linear_features: int | None = None) -> float:
  """6N for the matmuls (forward + backward) plus attention's score and value products.

  Softmax attention per token and layer: 2 matmuls of 2 * T * D FLOPs forward, times 3 with
  the backward pass; halved for causal attention (PaLM appendix B convention). Linear
  attention (`linear_features` = F per head) replaces the T keys by the F x Hv state, so
  the term is 12 * F * D per layer, independent of T.
  """
  if linear_features:
    attention = 12 * num_layers * linear_features * d_model
  else:
    attention = 12 * num_layers * seq_len * d_model * (0.5 if causal else 1.0)
  return 6.0 * num_params + attention


class MetricsWriter:
  """Writes rows to `<workdir>/metrics.jsonl` and TensorBoard (tensorboardX, no TensorFlow)."""

  def __init__(self, workdir: str, *, enabled: bool | None = None):
    self.enabled = jax.process_index() == 0 if enabled is None else enabled
    self._jsonl = self._tb = None
    if self.enabled:
      os.makedirs(workdir, exist_ok=True)
      self._jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a", buffering=1)
      from tensorboardX import SummaryWriter
      self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

  def write(self, step: int, metrics: Mapping[str, float], *, prefix: str = "") -> None:
    if not self.enabled:
      return
    row = {"step": int(step), **{f"{prefix}{k}": float(v) for k, v in metrics.items()}}
    self._jsonl.write(json.dumps(row) + "\n")
    for k, v in metrics.items():
      self._tb.add_scalar(f"{prefix}{k}", float(v), int(step))

  def close(self) -> None:
    if self.enabled:
      self._jsonl.close()
      self._tb.close()


def truncate_after(workdir: str, step: int) -> None:
  """Drops metrics rows after `step` (rows logged after the checkpoint a resumed run restarts
  from would otherwise appear twice)."""
  path = os.path.join(workdir, "metrics.jsonl")
  if jax.process_index() != 0 or not os.path.exists(path):
    return
  with open(path) as f:
    rows = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    f.writelines(rows)
  os.replace(tmp, path)


class Progress:
  """A tqdm bar over steps with loss, tokens/s and ETA (process 0 only)."""

  def __init__(self, total: int, initial: int, *, enabled: bool | None = None):
    self.enabled = jax.process_index() == 0 if enabled is None else enabled
    self.bar = None
    if self.enabled:
      from tqdm import tqdm
      self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, smoothing=0.1)

  def update(self, step: int, **fields) -> None:
    if self.bar is not None:
      self.bar.update(step - self.bar.n)
      self.bar.set_postfix({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in fields.items()}, refresh=False)

  def write(self, message: str) -> None:
    if self.bar is not None:
      self.bar.write(message)
    elif self.enabled:
      print(message, flush=True)

  def close(self) -> None:
    if self.bar is not None:
      self.bar.close()


def plot_loss(workdir: str, out: str | None = None) -> str | None:
  """Plots train (and eval) loss from metrics.jsonl into `<workdir>/loss.png`."""
  path = os.path.join(workdir, "metrics.jsonl")
  if jax.process_index() != 0 or not os.path.exists(path):
    return None
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  train, evals = [], []
  with open(path) as f:
    for line in f:
      row = json.loads(line)
      if "loss" in row:
        train.append((row["step"], row["loss"]))
      if "eval_loss" in row:
        evals.append((row["step"], row["eval_loss"]))
  if not train:
    return None
  fig, ax = plt.subplots(figsize=(6, 4))
  ax.plot(*zip(*train), label="train", lw=1)
  if evals:
    ax.plot(*zip(*evals), "o-", label="eval", ms=3)
  ax.set_xlabel("step")
  ax.set_ylabel("loss (nats/token)")
  ax.grid(alpha=0.3)
  ax.legend()
  ax.set_title(os.path.basename(os.path.abspath(workdir)))
  out = out or os.path.join(workdir, "loss.png")
  fig.tight_layout()
  fig.savefig(out, dpi=120)
  plt.close(fig)
  return out
