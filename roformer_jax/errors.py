"""Errors a person can act on, and how the command-line tools report them.

A mistake in a config, a flag, the data, the workdir or a checkpoint is not a bug in the
program, and a 40-line traceback hides the one line that says what to fix. `train.py` and
`eval.py` print such errors as the message alone and exit with status 2 (a run stopped by its
environment, such as a full disk, exits with 1). Anything else is a bug and keeps its
traceback. `ROFORMER_JAX_TRACEBACK=1` (or `--traceback`) shows the traceback of every error.

- `UserError`: the input is wrong; the message names the value, what was expected, the fix.
- `RunFault`: the environment stopped the run (a failed write, a full disk); the message names
  the path and the cause, and says how to continue.
"""

from __future__ import annotations

import contextlib
import os
import sys

TRACEBACK_ENV = "ROFORMER_JAX_TRACEBACK"


class UserError(Exception):
  """Wrong input (config, flags, data, workdir, checkpoint): exit status 2, message only."""
  exit_code = 2


class RunFault(Exception):
  """The environment stopped the run (disk full, write error): exit status 1, message only."""
  exit_code = 1


class TrainingDiverged(RunFault, FloatingPointError):
  """The loss or the parameters became non-finite; nothing was saved after the last good step."""


def message_of(error: BaseException) -> str:
  """The text of an exception, without the quoting KeyError and AttributeError add."""
  if isinstance(error, (KeyError, AttributeError)) and len(error.args) == 1:
    text = error.args[0]
    if isinstance(text, BaseException):  # ml_collections raises AttributeError(KeyError(...))
      return message_of(text)
    text = str(text)
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":  # ml_collections quotes twice
      text = text[1:-1].replace("\\'", "'").replace("\\n", "\n")
    return text
  return str(error)


@contextlib.contextmanager
def user_errors(what: str):
  """Re-raises ValueError and OSError from validation code as `UserError`s.

  Wrap only code whose errors are, by design, about the input (config checks, opening the
  data, reading a checkpoint's metadata): there a ValueError means "this value is wrong".
  """
  try:
    yield
  except (UserError, RunFault):
    raise
  except (ValueError, OSError) as e:
    prefix = f"{what}: " if what else ""
    raise UserError(f"{prefix}{message_of(e)}") from e


def show_tracebacks(argv: list[str] | None = None) -> bool:
  return os.environ.get(TRACEBACK_ENV, "") not in ("", "0") or "--traceback" in (argv or sys.argv)


def report(error: BaseException, prog: str) -> int:
  """Prints `error` for a person (no traceback) and returns the exit status to use."""
  code = getattr(error, "exit_code", 2)
  kind = "error" if code == 2 else "stopped"
  print(f"{prog}: {kind}: {message_of(error)}", file=sys.stderr)
  print(f"({TRACEBACK_ENV}=1 shows the traceback.)", file=sys.stderr)
  return code


__all__ = ["RunFault", "TRACEBACK_ENV", "TrainingDiverged", "UserError", "message_of", "report", "show_tracebacks", "user_errors"]
