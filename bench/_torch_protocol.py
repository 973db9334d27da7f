"""The torch workers' reply channel (imported first, before torch, by bench/_torch_*_worker.py).

The protocol stream is a private copy of fd 1; fd 1 itself (and sys.stdout) then go to stderr,
so that no library output can corrupt a reply. Standard library only: the workers run in the
separate torch venv.
"""

import json
import os
import sys

_PROTO = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr


def reply(obj) -> None:
  """One JSON line to the driving bench."""
  _PROTO.write(json.dumps(obj) + "\n")
  _PROTO.flush()


def serve(handlers, *, annotate=None) -> None:
  """Answers one JSON command per stdin line until {"cmd": "quit"}.

  handlers: cmd name -> function(msg) returning a dict, sent back with "ok": true.
  annotate: optional function(dict) -> None adding fields to every successful reply.
  A failure is sent back as {"ok": false, "error": <traceback>} for the driver to raise.
  """
  import traceback
  for line in sys.stdin:
    if not line.strip():
      continue
    try:
      msg = json.loads(line)
      cmd = msg["cmd"]
      if cmd == "quit":
        reply({"ok": True})
        return
      if cmd not in handlers:
        raise ValueError(f"unknown command {cmd!r}; known: {sorted(handlers)}")
      out = handlers[cmd](msg)
      if annotate is not None:
        annotate(out)
      reply({"ok": True, **out})
    except Exception:  # noqa: BLE001 - reported to the driver, which fails loudly
      reply({"ok": False, "error": traceback.format_exc()})
