"""The PyTorch side of bench/rope.py: HF transformers' RoFormer rotary op, timed.

It runs in a separate Python 3.11 venv that has torch and transformers (neither is a
dependency of this project) and imports only torch, transformers and the standard library.
bench/rope.py starts it (bench/harness.py TorchWorker: a hello line first) and drives it over
stdin/stdout, one JSON object per line:

  {"cmd": "init", "x_path": str, "shape": [B, T, N, H], "threads": int, "out_path": str, "device": str}
      -> reads x (raw float32, C order, [B, T, N, H], the layout of bench/rope.py) from
         x_path, lays it out as HF does ([B, N, T, H], contiguous) for the query and a copy
         for the key, builds sinusoidal_pos with RoFormerSinusoidalPositionalEmbedding for
         positions 0..T-1 as RoFormerEncoder.forward does, rotates once and writes the
         rotated query back in the [B, T, N, H] layout to out_path (raw float32), for the
         numerical check against roformer_jax.
     "device" ("cpu" if absent, or "cuda") is where q, k and sinusoidal_pos live.
  {"cmd": "time", "inner": int}
      -> calls RoFormerSelfAttention.apply_rotary_position_embeddings(sinusoidal_pos, q, k)
         inner times; returns {"seconds": wall time per call}. One call rotates q AND k (the
         API has no query-only form), i.e. two tensors of x's size.
  {"cmd": "quit"}  exits.

sinusoidal_pos is built once in "init" and not timed, as the model builds it once per
forward and shares it between layers. Every reply is one JSON line on the protocol stream;
anything libraries print goes to stderr.
"""

from __future__ import annotations

import platform
import time

from _torch_protocol import reply as _reply, serve as _serve  # noqa: E402  (before torch: redirects stdout)

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers.models.roformer import modeling_roformer  # noqa: E402

_state: dict = {}


def _rotate(sinusoidal_pos, q, k):
  return modeling_roformer.RoFormerSelfAttention.apply_rotary_position_embeddings(sinusoidal_pos, q, k)


@torch.no_grad()
def _init(msg) -> dict:
  _state.clear()
  torch.set_num_threads(int(msg["threads"]))
  b, t, n, h = (int(v) for v in msg["shape"])
  x = torch.from_file(msg["x_path"], shared=False, size=b * t * n * h, dtype=torch.float32).view(b, t, n, h)
  device = torch.device(msg.get("device", "cpu"))
  q = x.permute(0, 2, 1, 3).contiguous().to(device)  # HF's [B, N, T, H]
  del x
  k = q.clone()
  emb = modeling_roformer.RoFormerSinusoidalPositionalEmbedding(t, h)
  emb.weight.copy_(emb.create_weight())  # what RoFormerPreTrainedModel._init_weights does
  sinusoidal_pos = emb((b, t))[None, None, :, :].to(device)  # as in RoFormerEncoder.forward
  out_q, out_k = _rotate(sinusoidal_pos, q, k)
  dump = torch.from_file(msg["out_path"], shared=True, size=b * t * n * h, dtype=torch.float32)
  dump.view(b, t, n, h).copy_(out_q.permute(0, 2, 1, 3).cpu())
  del dump
  same_qk = bool(torch.equal(out_q, out_k))
  del out_q, out_k
  _state.update(sinusoidal_pos=sinusoidal_pos, q=q, k=k, cuda=device.type == "cuda")
  return {"torch": torch.__version__, "device": str(device), "transformers": transformers.__version__, "python": platform.python_version(),
          "threads": torch.get_num_threads(), "q_shape": list(q.shape), "k_equals_q_rotation": same_qk}


@torch.no_grad()
def _time(msg) -> dict:
  inner = int(msg["inner"])
  sinusoidal_pos, q, k = _state["sinusoidal_pos"], _state["q"], _state["k"]
  sync = torch.cuda.synchronize if _state["cuda"] else (lambda: None)  # GPU work is asynchronous
  sync()
  start = time.perf_counter()
  for _ in range(inner):
    out = _rotate(sinusoidal_pos, q, k)
  sync()
  seconds = (time.perf_counter() - start) / inner
  del out
  return {"seconds": seconds}


def main() -> None:
  _reply({"ready": True})
  _serve({"init": _init, "time": _time})


if __name__ == "__main__":
  main()
