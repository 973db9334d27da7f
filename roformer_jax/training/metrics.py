"""Training metrics: `metrics.jsonl`, TensorBoard events, a progress bar, the loss plot, MFU.

Only process 0 writes; other processes get a writer that does nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, TextIO, cast

import jax

# Dense bf16 peak FLOP/s by device kind (vendor datasheets, without sparsity): the fallback
# where the peak cannot be derived from the device itself (TPUs; GPUs without nvidia-smi).
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

# Dense bf16 tensor-core FLOPs per SM per clock, by CUDA compute capability. Checked against
# the datasheets: A100 SXM 108 SMs x 1410 MHz x 2048 = 312 TFLOP/s; H100 SXM 132 x 1830 MHz x
# 4096 = 989 TFLOP/s; A10 72 x 1695 MHz x 1024 = 125 TFLOP/s; L40S 142 x 2520 MHz x 1024 = 366.
BF16_FLOPS_PER_SM_PER_CLOCK = {"8.0": 2048, "8.6": 1024, "8.7": 1024, "8.9": 1024, "9.0": 4096}


def _nvidia_smi_max_sm_clock_mhz(device) -> float | None:
  """The device's maximum SM clock (MHz) from nvidia-smi, or None."""
  import shutil
  import subprocess
  if not shutil.which("nvidia-smi"):
    return None
  try:
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    clocks = [float(line) for line in out.split() if line.strip()]
  except (OSError, subprocess.SubprocessError, ValueError):
    return None
  if not clocks:
    return None
  if len(set(clocks)) == 1:  # one GPU, or all alike: no need to map JAX's ids to nvidia-smi's
    return clocks[0]
  index = getattr(device, "local_hardware_id", None)
  return clocks[index] if isinstance(index, int) and 0 <= index < len(clocks) else None


def peak_flops_info(device: jax.Device | None = None, *, max_sm_clock_mhz=_nvidia_smi_max_sm_clock_mhz
                    ) -> dict | None:
  """The device's dense bf16 peak FLOP/s and where it came from, or None if unknown.

  On an NVIDIA GPU the peak is read off the device: SM count (`device.core_count`) x maximum SM
  clock (nvidia-smi) x the architecture's bf16 tensor-core FLOPs per SM per clock (by
  `device.compute_capability`). The maximum clock is above the one NVIDIA's datasheets use (an
  H100 SXM gives 1070 TFLOP/s at 1980 MHz, the datasheet 989 at 1830 MHz), so MFU against it
  errs low. Elsewhere the `PEAK_FLOPS` datasheet table by device kind is used.

  Returns {"flops", "source" ("device" or "datasheet table"), "detail"} or None.
  """
  device = device or jax.devices()[0]
  kind = getattr(device, "device_kind", "")
  if getattr(device, "platform", "") == "gpu":
    sms = getattr(device, "core_count", None)
    per_clock = BF16_FLOPS_PER_SM_PER_CLOCK.get(str(getattr(device, "compute_capability", "")))
    clock = max_sm_clock_mhz(device) if sms and per_clock else None
    if clock:
      return {"flops": float(sms * clock * 1e6 * per_clock), "source": "device",
              "detail": (f"{kind}: {sms} SMs x {clock:g} MHz max SM clock x {per_clock} bf16 FLOP/clock/SM "
                         f"(compute capability {device.compute_capability})")}
  for name, peak in PEAK_FLOPS.items():
    if kind.startswith(name):
      return {"flops": peak, "source": "datasheet table", "detail": f"{kind}: PEAK_FLOPS[{name!r}]"}
  return None


def device_peak_flops(device: jax.Device | None = None) -> float | None:
  """Dense bf16 peak FLOP/s of the device (`peak_flops_info`), or None: then no MFU is reported."""
  info = peak_flops_info(device)
  return info["flops"] if info else None


def train_flops_per_token(num_params: int, *, num_layers: int, seq_len: int, d_model: int,
                          causal: bool, linear_features: int | None = None) -> float:
  """6N for the matmuls (forward + backward) plus attention's score and value products.

  Softmax attention per token and layer: 2 matmuls of 2 * T * D FLOPs forward, times 3 with
  the backward pass; halved for causal attention (PaLM appendix B convention). Linear
  attention (`linear_features` = F per head) replaces the T keys by the F x Hv state, so
  the term is 12 * F * D per layer, independent of T.
  """
  attention: float
  if linear_features:
    attention = 12 * num_layers * linear_features * d_model
  else:
    attention = 12 * num_layers * seq_len * d_model * (0.5 if causal else 1.0)
  return 6.0 * num_params + attention


def mlm_train_flops_per_token(num_params: int, head_params: int, *, scored_fraction: float, num_layers: int,
                              seq_len: int, d_model: int, linear_features: int | None = None) -> float:
  """`train_flops_per_token` for an MLM whose head scores only a fraction of the positions.

  With `masked_positions` the head (its transform and the vocabulary projection, i.e. the
  tied embedding table) runs on M of the T positions, so its 6 x head_params count only
  M / T per token; everything else is as in `train_flops_per_token`. `scored_fraction` = M / T.
  """
  if not 0.0 < scored_fraction <= 1.0:
    raise ValueError(f"scored_fraction={scored_fraction} must be in (0, 1] (M / T).")
  if not 0 <= head_params <= num_params:
    raise ValueError(f"head_params={head_params} must be between 0 and num_params={num_params}.")
  full = train_flops_per_token(num_params, num_layers=num_layers, seq_len=seq_len, d_model=d_model, causal=False,
                               linear_features=linear_features)
  return full - 6.0 * head_params * (1.0 - scored_fraction)


def count_params(module) -> int:
  """The number of trainable parameters (`nnx.Param` entries) of an nnx module."""
  from flax import nnx
  return sum(x.size for x in jax.tree.leaves(nnx.state(module, nnx.Param)))


def mlm_head_params(model) -> int:
  """Parameters an MLM uses per scored position: its head, plus the tied embedding table."""
  head = count_params(model.mlm)
  if model.config.tie_embeddings:
    head += model.roformer.embeddings.word.embedding[...].size
  return head


class MetricsWriter:
  """Writes rows to `<workdir>/metrics.jsonl` and TensorBoard (tensorboardX, no TensorFlow)."""

  def __init__(self, workdir: str, *, enabled: bool | None = None):
    self.enabled = jax.process_index() == 0 if enabled is None else enabled
    self._jsonl: TextIO | None = None
    self._tb: Any = None  # a tensorboardX SummaryWriter
    self.workdir = workdir
    if self.enabled:
      os.makedirs(workdir, exist_ok=True)
      self._jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a", buffering=1)
      from tensorboardX import SummaryWriter
      self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

  def write(self, step: int, metrics: Mapping[str, float], *, prefix: str = "",
            tags: Mapping[str, str] | None = None) -> None:
    """One row; `tags` are text fields of the row (eval.py's `evaluated`: what the numbers are of)."""
    if not self.enabled:
      return
    row = {"step": int(step), **(tags or {}), **{f"{prefix}{k}": float(v) for k, v in metrics.items()}}
    cast(TextIO, self._jsonl).write(json.dumps(row) + "\n")  # enabled: opened
    for k, v in metrics.items():
      self._tb.add_scalar(f"{prefix}{k}", float(v), int(step))

  def write_samples(self, step: int, samples: list[dict]) -> None:
    """Decoded samples (samples.py) to `<workdir>/samples.jsonl` and TensorBoard text."""
    if not self.enabled or not samples:
      return
    with open(os.path.join(self.workdir, "samples.jsonl"), "a") as f:
      for i, sample in enumerate(samples):
        f.write(json.dumps({"step": int(step), "index": i, **sample}) + "\n")
    text = "\n\n".join(f"**prompt:** `{s['prompt']}`  \n**model:** `{s['output']}`  \n**reference:** "
                        f"`{s['reference']}`" for s in samples)
    self._tb.add_text("samples", text, int(step))

  def close(self) -> None:
    if self.enabled:
      cast(TextIO, self._jsonl).close()
      self._tb.close()


def read_rows(path: str) -> list[dict]:
  """The rows of a metrics.jsonl file. A torn line (a run killed, or a disk that filled, in
  the middle of a write) is skipped."""
  rows = []
  with open(path) as f:
    for line in f:
      try:
        row = json.loads(line)
      except ValueError:
        continue
      if isinstance(row, dict) and "step" in row:
        rows.append(row)
  return rows


def truncate_after(workdir: str, step: int, name: str = "metrics.jsonl") -> None:
  """Drops rows after `step` from `<workdir>/<name>` (rows logged after the checkpoint a
  resumed run restarts from would otherwise appear twice)."""
  path = os.path.join(workdir, name)
  if jax.process_index() != 0 or not os.path.exists(path):
    return
  rows = [json.dumps(row) + "\n" for row in read_rows(path) if row["step"] <= step]
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    f.writelines(rows)
  os.replace(tmp, path)


class Progress:
  """A tqdm bar over steps with loss, tokens/s and ETA (process 0 only).

  At the last step the bar is drawn once and closed: the messages that follow (the last
  evaluation, samples) print below it instead of redrawing the finished bar after each.
  """

  def __init__(self, total: int, initial: int, *, enabled: bool | None = None):
    self.enabled = jax.process_index() == 0 if enabled is None else enabled
    self.bar = None
    if self.enabled:
      from tqdm import tqdm
      self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, smoothing=0.1)

  def update(self, step: int, **fields) -> None:
    if self.bar is None:
      return
    self.bar.set_postfix({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in fields.items()}, refresh=False)
    if step < self.bar.total:
      self.bar.update(step - self.bar.n)
    else:  # the last step: close() draws the finished bar, once
      self.bar.n = step
      self.close()

  def write(self, message: str) -> None:
    if self.bar is not None:
      self.bar.write(message)
    elif self.enabled:
      print(message, flush=True)

  def close(self) -> None:
    if self.bar is not None:
      self.bar.close()
      self.bar = None  # later messages are printed (write), below the closed bar


AS_TRAINED = "as trained"  # eval.py's `evaluated` tag of a row evaluated with the run's own settings


def plot_loss(workdir: str, out: str | None = None) -> str | None:
  """Plots train (and eval) loss from metrics.jsonl into `<workdir>/loss.png`."""
  path = os.path.join(workdir, "metrics.jsonl")
  if jax.process_index() != 0 or not os.path.exists(path):
    return None
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  train, evals = [], []
  for row in read_rows(path):
    if "loss" in row:
      train.append((row["step"], row["loss"]))
    if "eval_loss" in row and row.get("evaluated", AS_TRAINED) == AS_TRAINED:  # not eval.py's other settings
      evals.append((row["step"], row["eval_loss"]))
  if not train:
    return None
  fig, ax = plt.subplots(figsize=(6, 4))
  ax.plot(*zip(*train, strict=True), label="train", lw=1)
  if evals:
    ax.plot(*zip(*evals, strict=True), "o-", label="eval", ms=3)
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
