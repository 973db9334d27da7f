"""What the benches share: the one round-robin timer, the torch worker client, the machine.

Timing (`time_round`, `round_robin`): the configurations of a group take turns, `rounds`
rounds with the order rotated by one every round, so slow drifts of a shared machine's speed
hit them alike. In each round a configuration runs a block: `rewarm` untimed calls (they
absorb the page faults of memory that another configuration's large buffers handed back to
the OS: up to 3x on the first call), then the timed calls. A call is a function that runs
and waits for its work; if it returns `Seconds(x)`, x is its own measurement (the torch
worker times itself in its process), else the wall time of the call counts.

The torch side (`find_torch_python`, `TorchWorker`): torch and transformers are never
dependencies of this project. A worker script (bench/_torch_*_worker.py) runs in a separate
venv and answers one JSON line per command (bench/_torch_protocol.py).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TORCH_VENV = os.path.join(os.path.expanduser("~"), ".cache", "roformer_jax", "bench-torch-venv")
DEFAULT_TORCH_WHEEL = "/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
TORCH_PIN, TRANSFORMERS_PIN = "torch==2.13.0", "transformers==5.23.0"


# --------------------------------------------------------------------------------------
# The timer.
# --------------------------------------------------------------------------------------


class Seconds(float):
  """What a call returns when it measured itself (see the module docstring)."""


def _timed(call: Callable[[], object]) -> float:
  t0 = time.perf_counter()
  out = call()
  return float(out) if isinstance(out, Seconds) else time.perf_counter() - t0


def time_round(calls: dict, r: int, *, rewarm: int = 1, timed: int | Callable[[float], int] = 1) -> dict:
  """Round r of `round_robin`: {key: [seconds of every call, the `rewarm` untimed ones first]}.

  timed: timed calls per block, or a function of the first call's seconds (with rewarm 0, that
  first call is an extra untimed one)."""
  keys = list(calls)
  k0 = r % len(keys) if keys else 0
  out = {}
  for k in keys[k0:] + keys[:k0]:
    ts = [_timed(calls[k]) for _ in range(rewarm)]
    n = timed(ts[0] if ts else _timed(calls[k])) if callable(timed) else timed
    out[k] = ts + [_timed(calls[k]) for _ in range(n)]
  return out


def round_robin(calls: dict, rounds: int, *, rewarm: int = 1, timed: int | Callable[[float], int] = 1) -> dict:
  """{key: seconds of each timed call} over `rounds` rounds (see the module docstring)."""
  times = {k: [] for k in calls}
  for r in range(rounds):
    for k, ts in time_round(calls, r, rewarm=rewarm, timed=timed).items():
      times[k] += ts[rewarm:]
  return times


def by_first(slow_s: float, *, fast: int = 5, normal: int = 2, slow: int = 1, fast_s: float = 0.05):
  """`timed` for `round_robin`: `slow` calls over slow_s seconds, `fast` under fast_s, else `normal`."""
  return lambda first: slow if first > slow_s else fast if first < fast_s else normal


def timing(ts: list[float]) -> dict:
  """Median, min and max in ms, and the count."""
  return {"ms": 1e3 * statistics.median(ts), "ms_min": 1e3 * min(ts), "ms_max": 1e3 * max(ts), "repeats": len(ts)}


# --------------------------------------------------------------------------------------
# Memory and the machine.
# --------------------------------------------------------------------------------------


def memory_bytes(compiled) -> dict:
  """XLA's compiled memory analysis: argument, output, temp, alias and peak bytes ({} if none)."""
  ma = compiled.memory_analysis()
  if ma is None:
    return {}
  arg, out, tmp = ma.argument_size_in_bytes, ma.output_size_in_bytes, ma.temp_size_in_bytes
  alias = getattr(ma, "alias_size_in_bytes", 0)
  return {"argument": int(arg), "output": int(out), "temp": int(tmp), "alias": int(alias),
          "peak": int(arg + out + tmp - alias)}


def default_mem_limit_gb() -> float:
  """80% of the accelerator's memory, or min(8, 40% of RAM) on a CPU."""
  import jax
  dev = jax.devices()[0]
  if dev.platform != "cpu":
    stats = dev.memory_stats() or {}
    return 0.8 * stats["bytes_limit"] / 2**30 if stats.get("bytes_limit") else 16.0
  try:
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
  except (ValueError, OSError):
    ram = 16.0
  return min(8.0, 0.4 * ram)


def cpu_name() -> str:
  """The CPU model from /proc/cpuinfo, or what `platform` knows."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


# The instruction sets that decide which kernels XLA and oneDNN run on x86 (issue 28: AMX on a
# Xeon lets torch's oneDNN matmuls run 2-4x faster than XLA's): /proc/cpuinfo's flag names.
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_isa() -> list[str]:
  """Which of ISA_FLAGS the CPU has (empty where /proc/cpuinfo is missing)."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("flags"):
          flags = set(line.split(":", 1)[1].split())
          return [isa for isa in ISA_FLAGS if isa in flags]
  except OSError:
    pass
  return []


def huge_pages() -> bool:
  """Whether glibc's malloc backs large allocations with huge pages in this process
  (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, as `make` sets): both sides of a comparison must agree."""
  return "glibc.malloc.hugetlb=1" in os.environ.get("GLIBC_TUNABLES", "")


def matmul_flops(dtype, n: int, repeats: int = 10) -> float:
  """FLOP/s of one jitted [n, n] x [n, n] product in `dtype` (median of `repeats`): the
  machine's achievable matmul rate, measured in the same run as the figure it scales."""
  import jax
  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  b = jax.random.normal(jax.random.key(1), (n, n), dtype)
  f = jax.jit(lambda x, y: x @ y)
  f(a, b).block_until_ready()
  ts = round_robin({"matmul": lambda: f(a, b).block_until_ready()}, repeats, rewarm=0)["matmul"]
  return 2 * n ** 3 / statistics.median(ts)


def load_config(spec: str):
  """A config file's get_config(), `path[:variant]` relative to the repository root."""
  import importlib.util
  path, _, arg = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location("bench_config", os.path.join(ROOT, path))
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


def machine_info() -> dict:
  """bench/_record.py's machine, with the Python and JAX versions."""
  import jax

  from bench import _record
  return {**_record.machine(), "python": platform.python_version(), "jax": jax.__version__}


# --------------------------------------------------------------------------------------
# The torch worker.
# --------------------------------------------------------------------------------------


def has_torch(python: str) -> bool:
  try:
    return subprocess.run([python, "-c", "import torch, transformers"], capture_output=True,
                          timeout=300).returncode == 0
  except (OSError, subprocess.TimeoutExpired):
    return False


def find_torch_python(explicit: str = "", venv: str = DEFAULT_TORCH_VENV, *, create: bool = False,
                      lenient: bool = True, wheel: str = DEFAULT_TORCH_WHEEL, base: str = "") -> str | None:
  """An interpreter that imports torch and transformers: `explicit`, else the venv's.

  Without one: create=True builds the venv (once; python3.11 or `base`, torch from `wheel` if
  it exists, else PyPI); else lenient=True returns None with a note (the torch side is then
  skipped), and lenient=False exits with the reason.
  """
  python = explicit or os.path.join(venv, "bin", "python")
  if os.path.exists(python) and has_torch(python):
    return python
  why = f"{python} " + ("cannot import torch and transformers" if os.path.exists(python) else "does not exist")
  if create and not explicit:
    base = base or shutil.which("python3.11") or shutil.which("python3")
    if base is None:
      raise SystemExit("no python3.11 to create the torch venv with; pass --venv-python or --torch-python.")
    print(f"creating the torch venv {venv} with {base} (once; it is cached) ...", flush=True)
    subprocess.run([base, "-m", "venv", venv], check=True)
    pip = [python, "-m", "pip", "install", "--quiet"]
    subprocess.run(pip + ["--upgrade", "pip"], check=True)
    subprocess.run(pip + [wheel if wheel and os.path.exists(wheel) else TORCH_PIN, TRANSFORMERS_PIN, "safetensors"],
                   check=True)
    if has_torch(python):
      return python
    why = f"the new venv {venv} still cannot import torch and transformers"
  if not lenient:
    raise SystemExit(f"torch: {why}.")
  print(f"the torch side is skipped: {why} (pass --torch-python PATH to an interpreter with torch and "
        "transformers).", flush=True)
  return None


class TorchWorker:
  """A bench/_torch_*_worker.py in the torch venv: one JSON line each way, a hello line first."""

  def __init__(self, python: str, script: str):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    self.proc = subprocess.Popen([python, os.path.join(os.path.dirname(os.path.abspath(__file__)), script)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env)
    self.info = self._read()

  def _read(self) -> dict:
    line = self.proc.stdout.readline()
    if not line:
      raise RuntimeError(f"the torch worker exited (code {self.proc.wait()}); its stderr is above")
    out = json.loads(line)
    if out.get("ok") is False:
      raise RuntimeError("the torch worker failed:\n" + out["error"])
    return out

  def call(self, cmd: str, **kw) -> dict:
    try:
      self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
      self.proc.stdin.flush()
    except OSError as e:
      raise RuntimeError(f"the torch worker is gone ({e}); its stderr is above") from e
    return self._read()

  def close(self) -> None:
    if self.proc.poll() is None:
      try:
        self.call("quit")
        self.proc.wait(timeout=30)
      except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired):
        self.proc.kill()


def cpu_kind(name: str) -> str:
  """A file-name slug for the CPU family: "amd_epyc", "intel_xeon", else the model name's.

  The benches that compare CPUs (B2 train_step, B9 inference) record one file per kind.
  """
  lower = name.lower()
  for kind in ("amd epyc", "intel xeon"):
    if kind.split()[1] in lower:
      return kind.replace(" ", "_")
  return re.sub(r"[^a-z0-9]+", "_", lower).strip("_")[:40] or "cpu"
