"""The PyTorch side of bench/train_step.py: HF transformers' RoFormerForMaskedLM train steps.

It runs in a separate Python 3.11 venv that has torch and transformers (neither is a
dependency of this project) and imports only torch, transformers and the standard library.
bench/train_step.py starts it and drives it over stdin/stdout, one JSON object per line:

  {"cmd": "init", "config": {RoFormerConfig kwargs}, "seed": int, "save_dir": str,
   "input_ids": [[int]], "labels": [[int]] (-100 = not scored), "optim": {lr, b1, b2, eps,
   weight_decay}, "threads": int}
      -> builds the model (seeded), writes it with save_pretrained(save_dir) (safetensors)
         so that the JAX side loads the same weights, builds AdamW.
  {"cmd": "steps", "n": int}
      -> runs n train steps on the batch; returns {"seconds": [wall time of each], "losses": [...]}.
  {"cmd": "free"}  drops the model and optimiser.   {"cmd": "quit"}  exits.

One step is what the HF Trainer does per batch (without gradient clipping):
  loss = model(input_ids, labels=labels).loss   # full logits [B, T, V], mean CE over labels != -100
  loss.backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
with torch.optim.AdamW(fused=True), the Trainer's default optimiser for torch >= 2.8, and its
weight-decay grouping (no decay for biases and LayerNorm weights).

Every reply is one JSON line on the protocol stream; anything libraries print goes to stderr.
"""

from __future__ import annotations

import gc
import platform
import resource
import time

from _torch_protocol import reply as _reply, serve as _serve  # noqa: E402  (before torch: redirects stdout)

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import RoFormerConfig, RoFormerForMaskedLM  # noqa: E402

_state: dict = {}


def _decay_groups(model, weight_decay: float):
  """HF Trainer.get_decay_parameter_names: no decay for LayerNorm parameters or names with 'bias'."""
  norm_params = {id(p) for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()}
  decay, no_decay = [], []
  for name, p in model.named_parameters():  # tied parameters appear once
    if not p.requires_grad:
      continue
    (no_decay if id(p) in norm_params or "bias" in name.lower() else decay).append(p)
  return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _init(msg) -> dict:
  _state.clear()
  gc.collect()
  torch.set_num_threads(int(msg["threads"]))
  torch.manual_seed(int(msg["seed"]))
  config = RoFormerConfig(**msg["config"])
  model = RoFormerForMaskedLM(config)
  model.save_pretrained(msg["save_dir"])
  model.train()
  o = msg["optim"]
  optimizer = torch.optim.AdamW(_decay_groups(model, o["weight_decay"]), lr=o["lr"], betas=(o["b1"], o["b2"]),
                                eps=o["eps"], fused=True)
  _state.update(model=model, optimizer=optimizer,
                input_ids=torch.tensor(msg["input_ids"], dtype=torch.long),
                labels=torch.tensor(msg["labels"], dtype=torch.long))
  return {"params": sum(p.numel() for p in model.parameters()), "threads": torch.get_num_threads()}


def _steps(n: int) -> dict:
  model, optimizer = _state["model"], _state["optimizer"]
  ids, labels = _state["input_ids"], _state["labels"]
  losses, seconds = [], []
  for _ in range(n):
    start = time.perf_counter()
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())
    seconds.append(time.perf_counter() - start)
  return {"seconds": seconds, "losses": losses}


def main() -> None:
  _reply({"ready": True, "python": platform.python_version(), "torch": torch.__version__,
          "transformers": transformers.__version__, "torch_threads": torch.get_num_threads()})

  def free(msg):
    _state.clear()
    gc.collect()
    return {}

  def rss(out):
    out["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

  _serve({"init": _init, "steps": lambda msg: _steps(int(msg["n"])), "free": free}, annotate=rss)


if __name__ == "__main__":
  main()
