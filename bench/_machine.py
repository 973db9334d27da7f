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


def matmul_flops(dtype, n: int, repeats: int = 10) -> float:
  """FLOP/s of one jitted [n, n] x [n, n] product in `dtype` (median of `repeats`): the
  machine's achievable matmul rate, measured in the same run as the figure it scales."""
  import statistics
  import time

  import jax

  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  b = jax.random.normal(jax.random.key(1), (n, n), dtype)
  f = jax.jit(lambda x, y: x @ y)
  f(a, b).block_until_ready()
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    f(a, b).block_until_ready()
    times.append(time.perf_counter() - t0)
  return 2 * n ** 3 / statistics.median(times)
