"""Test setup: 8 fake CPU devices for the sharding tests, a persistent XLA compilation cache,
and the trained smoke workdirs that several test files read.

The environment part must run before JAX initialises its backend, which is why it lives here.
"""

import atexit
import hashlib
import os
import pathlib
import shutil
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

os.environ.setdefault("JAX_PLATFORMS", "cpu")

# ---- the XLA compilation cache ------------------------------------------------------------------
# pytest-xdist's workers (which inherit this process's environment) and every train.py/eval.py
# subprocess the tests start compile the same small programs over and over; with one cache each
# is compiled once, and with the cache kept between runs a second run compiles almost nothing.
#
# The store is .cache/xla/<hash of requirements.txt>/ (git-ignored): new pins, new store. JAX keys
# each entry by the program, the jax/jaxlib version, the backend and XLA_FLAGS, so a changed
# program or flag is a miss, never a stale hit; a hit is the executable a fresh compile made.
# The run itself never writes to the store: it gets a private directory holding hard links to
# the store's entries (free, and JAX never rewrites an entry), and at exit this process adds the
# run's new entries to the store, each checked to decompress (a subprocess killed mid-write
# leaves a truncated file) and linked in atomically (os.link: a name appears complete or not at
# all), so concurrent runs and killed tests cannot leave a bad entry behind. A set
# JAX_COMPILATION_CACHE_DIR is used as it is.
XLA_CACHE_ROOT = ROOT / ".cache" / "xla"
XLA_CACHE_MAX_BYTES = 2 << 30  # past this the oldest entries go (they come back on the next miss)


def _xla_store() -> pathlib.Path:
  digest = hashlib.sha256((ROOT / "requirements.txt").read_bytes()).hexdigest()[:16]
  return XLA_CACHE_ROOT / digest


def _entry_is_whole(path: pathlib.Path) -> bool:
  from jax._src import compilation_cache  # the decompressor JAX wrote it with
  try:
    compilation_cache.decompress_executable(path.read_bytes())
    return True
  except Exception:  # truncated or unreadable: leave it out of the store
    return False


def _merge_into_store(run: pathlib.Path, store: pathlib.Path) -> None:
  try:
    for entry in run.iterdir():
      if entry.name.endswith("-cache") and entry.stat().st_nlink == 1 and _entry_is_whole(entry):
        try:
          os.link(entry, store / entry.name)
        except FileExistsError:  # a concurrent run stored the same program first
          pass
    entries = sorted(store.glob("*-cache"), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in entries)
    while entries and total > XLA_CACHE_MAX_BYTES:
      oldest = entries.pop(0)
      total -= oldest.stat().st_size
      oldest.unlink(missing_ok=True)
  except OSError:  # a full disk or a cleaned-up tree must not fail the run
    pass
  finally:
    shutil.rmtree(run, ignore_errors=True)


def _start_xla_cache() -> None:
  store = _xla_store()
  runs = store / "runs"
  try:
    runs.mkdir(parents=True, exist_ok=True)
  except OSError:  # a read-only checkout: a cache for this run only, as before
    run = tempfile.mkdtemp(prefix="roformer_jax_test_xla_cache_")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = run
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    atexit.register(shutil.rmtree, run, ignore_errors=True)
    return
  for stale in runs.iterdir():  # runs killed before their exit handler, a day ago or more
    try:
      if time.time() - stale.stat().st_mtime > 86400:
        shutil.rmtree(stale, ignore_errors=True)
    except OSError:  # another run removed it first
      pass
  run = pathlib.Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=runs))
  for entry in store.glob("*-cache"):
    try:
      os.link(entry, run / entry.name)
    except FileNotFoundError:  # pruned by a concurrent run's exit: a miss, then
      pass
    except OSError:  # no hard links here
      shutil.copy2(entry, run / entry.name)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = str(run)
  os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
  atexit.register(_merge_into_store, run, store)


if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _start_xla_cache()

# XLA's CPU backend without LLVM's optimisations: the suite's models are tiny, so compiling,
# not running, is most of its time, and this compiles about 4x faster (a 2-layer MLM train step
# with dropout: 4.7 s -> 1.2 s). It changes how XLA's CPU code is generated, not the program:
# results agree up to float rounding, which every comparison with a reference allows for, and
# runs compared bitwise use the same flags. The whole suite on 2 cores: 15 min 22 s -> 11 min
# 47 s. Speed is measured by bench/, never by tests. Subprocesses (train.py, eval.py, the
# documented commands) inherit it.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"
if TEST_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

# ---- trained smoke workdirs ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory):
  """The smoke runs that tests only read, each trained once per test process; see SmokeRuns."""
  from tests.smoke import SmokeRuns
  return SmokeRuns(tmp_path_factory.mktemp("smoke_runs"))


@pytest.fixture
def attention_calls(monkeypatch):
  """Records each `jax.nn.dot_product_attention` call instead of running it (a GPU kernel can't
  run here): a list of {"implementation", "masked", "dtype"}, one per call, which the tests
  that ask which kernel "auto" picks on a GPU (with `jax.default_backend` patched) read."""
  import jax.numpy as jnp
  calls = []

  def record(q, k, v, **kw):
    calls.append({"implementation": kw["implementation"], "masked": kw["mask"] is not None, "dtype": q.dtype})
    return jnp.zeros(q.shape[:-1] + v.shape[-1:], q.dtype)

  monkeypatch.setattr(jax.nn, "dot_product_attention", record)
  return calls


# ---- tiers --------------------------------------------------------------------------------------
# `make test` runs everything; `make test-fast` (-m "not slow") the unit tests only. A test is
# slow when it trains, starts processes (train.py, eval.py, generate.py, benches, multi-process
# runs, pip), runs the documented commands, is a hypothesis property test (many examples, each a
# compile), or reads a trained run: those carry @pytest.mark.slow (or a module-level pytestmark)
# in their files, and every test that asks for `smoke_runs`, directly or through another
# fixture, is marked here.


def pytest_collection_modifyitems(config, items):
  for item in items:
    if "smoke_runs" in getattr(item, "fixturenames", ()):
      item.add_marker(pytest.mark.slow)
