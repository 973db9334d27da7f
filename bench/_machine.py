"""Machine description shared by the benchmarks."""

import platform


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
