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
