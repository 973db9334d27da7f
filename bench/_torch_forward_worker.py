"""The PyTorch side of bench/inference.py: HF transformers' RoFormerModel forward (inference).

It runs in a separate Python 3.11 venv that has torch and transformers (neither is a
dependency of this project) and imports only torch, transformers and the standard library.
bench/inference.py starts it and drives it over stdin/stdout, one JSON object per line:

  {"cmd": "init", "config": {RoFormerConfig kwargs}, "seed": int, "save_dir": str, "threads": int}
      -> builds the encoder (seeded), writes it with save_pretrained(save_dir) (safetensors)
         so that the JAX side loads the same weights.
  {"cmd": "forward", "input_ids": [[int]] (optional: else the last ids sent), "dtype": "float32" |
   "bfloat16", "n": int}
      -> n forwards under torch.inference_mode() in that dtype; returns {"seconds": [wall time
         of each], "sample": the last hidden state's [0, :4, :4] as float32 lists}.
  {"cmd": "quit"}  exits.

Every reply is one JSON line on the protocol stream; anything libraries print goes to stderr.
"""

from __future__ import annotations

import copy
import platform
import resource
import time

from _torch_protocol import reply as _reply, serve as _serve  # noqa: E402  (before torch: redirects stdout)

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import RoFormerConfig, RoFormerModel  # noqa: E402

_state: dict = {}


def _init(msg) -> dict:
  _state.clear()
  torch.set_num_threads(int(msg["threads"]))
  torch.manual_seed(int(msg["seed"]))
  model = RoFormerModel(RoFormerConfig(**msg["config"]))
  model.save_pretrained(msg["save_dir"])
  model.eval()
  _state["float32"] = model
  return {"params": sum(p.numel() for p in model.parameters()), "threads": torch.get_num_threads()}


def _forward(msg) -> dict:
  dtype = msg["dtype"]
  if dtype not in _state:  # a copy in that dtype, made once (Module.to converts in place)
    _state[dtype] = copy.deepcopy(_state["float32"]).to(getattr(torch, dtype))
  model = _state[dtype]
  if "input_ids" in msg:
    _state["input_ids"] = torch.tensor(msg["input_ids"], dtype=torch.long)
  ids = _state["input_ids"]
  seconds = []
  with torch.inference_mode():
    for _ in range(int(msg["n"])):
      start = time.perf_counter()
      out = model(input_ids=ids).last_hidden_state
      seconds.append(time.perf_counter() - start)
  return {"seconds": seconds, "sample": out[0, :4, :4].float().tolist()}


def main() -> None:
  _reply({"ready": True, "python": platform.python_version(), "torch": torch.__version__,
          "transformers": transformers.__version__, "torch_threads": torch.get_num_threads()})

  def rss(out):
    out["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

  _serve({"init": _init, "forward": _forward}, annotate=rss)


if __name__ == "__main__":
  main()
