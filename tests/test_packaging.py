"""Packaging: what each model module imports, and what the wheel holds and requires.

The core install (`pip install roformer-jax`) is jax, flax, numpy and safetensors; the
trainer's stack is the [train] extra. Each model module is imported in a fresh interpreter,
and the top-level packages it leaves in sys.modules are compared with those of the imports it
is allowed, so a stray import of a training library fails here. The wheel is built offline
from a copy of the checkout; its files and its Requires-Dist are checked, so a dependency moved
out of its extra fails too.
"""

import email.parser
import functools
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

import roformer_jax

pytestmark = pytest.mark.slow  # builds wheels and starts interpreters: make test, not make test-fast

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Loaded by the trainer and evaluator only, never by a model module.
TRAINING_STACK = frozenset({"orbax", "grain", "tensorflow_datasets", "tensorflow", "array_record", "ml_collections",
                            "sentencepiece", "sacrebleu", "scipy", "matplotlib", "tensorboardX", "tqdm"})

# module -> (what it may load besides the standard library: these imports' own footprint, and
# extra top-level packages). flax itself imports optax and absl, so the flax modules may too.
JAX = ("jax", "numpy")
FLAX = ("jax", "numpy", "flax.nnx")
FOOTPRINTS = {
    "roformer_jax": ((), ()),
    "roformer_jax.rope": (JAX, ()),
    "roformer_jax.positional": (JAX, ()),
    "roformer_jax.attention": (JAX, ()),  # the pure functions; MultiHeadAttention loads flax on first use
    "roformer_jax.attention.chunked": (JAX, ()),
    "roformer_jax.attention.layer": (FLAX, ()),
    "roformer_jax.models": (FLAX, ()),
    "roformer_jax.decoding": (FLAX, ()),
    "roformer_jax.hf": (FLAX, ("safetensors",)),  # imported where checkpoints are read or written
}

# Prints the top-level names in sys.modules after importing argv[2:] in a fresh interpreter
# that finds this checkout first (argv[1]).
_PROBE = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
for name in sys.argv[2:]:
  importlib.import_module(name)
package = sys.modules.get("roformer_jax")
print(json.dumps({"top": sorted({m.partition(".")[0] for m in sys.modules}),
                  "file": getattr(package, "__file__", None)}))
"""


def _probe(*imports: str) -> dict:
  done = subprocess.run([sys.executable, "-c", _PROBE, str(ROOT), *imports], capture_output=True, text=True,
                        timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert done.returncode == 0, done.stderr
  return json.loads(done.stdout.splitlines()[-1])


@functools.cache
def _footprint(imports: tuple[str, ...]) -> frozenset[str]:
  return frozenset(_probe(*imports)["top"])


@pytest.mark.parametrize("module", FOOTPRINTS)
def test_import_footprint(module):
  allowed_imports, allowed_packages = FOOTPRINTS[module]
  probe = _probe(module)
  assert probe["file"] == str(ROOT / "roformer_jax" / "__init__.py")  # this checkout, not an install
  loaded = frozenset(probe["top"])
  allowed = _footprint(allowed_imports) | set(allowed_packages) | set(sys.stdlib_module_names) | {"roformer_jax"}
  assert not loaded - allowed, (f"import {module} loads {sorted(loaded - allowed)}, beyond the standard library, "
                                f"{' '.join(allowed_imports) or 'nothing'} and {allowed_packages}")
  assert not loaded & TRAINING_STACK
  if "flax.nnx" not in allowed_imports:
    assert not loaded & {"flax", "optax", "absl"}
  if not allowed_imports:
    assert not loaded & {"jax", "numpy"}


def test_submodules_load_on_attribute_access():
  # A fresh interpreter, so the package's __getattr__ (not an earlier import) provides them.
  code = ("import sys; sys.path.insert(0, sys.argv[1]); import roformer_jax\n"
          "from roformer_jax import hf, rope\n"
          "mods = [getattr(roformer_jax, name) for name in roformer_jax.__all__] + [roformer_jax.losses]\n"
          "assert hf is roformer_jax.hf and rope is roformer_jax.rope\n"
          "assert hasattr(roformer_jax.models, 'ModelConfig') and hasattr(roformer_jax.losses, 'token_cross_entropy')\n"
          "assert set(roformer_jax.__all__) <= set(dir(roformer_jax))\n"
          "try:\n  roformer_jax.nonexistent\nexcept AttributeError:\n  print('ok', roformer_jax.__version__)\n")
  done = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=300,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ["ok", roformer_jax.__version__]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
  """The wheel built from a copy of this checkout, offline (no build isolation, no index)."""
  if importlib.util.find_spec("setuptools") is None:
    pytest.fail("setuptools is not installed: requirements.txt pins it (make venv installs it)")
  tmp = tmp_path_factory.mktemp("wheel")
  # A copy, so the build's build/ and *.egg-info stay out of the checkout. It keeps tests/,
  # configs/ and the rest, which the wheel must leave out.
  src = tmp / "src"
  shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "workdirs", "build", "*.egg-info",
                                                           "__pycache__", ".pytest_cache", ".hypothesis", "runs",
                                                           ".cache"))  # the tests' XLA cache
  out = tmp / "dist"
  done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                         "--quiet", "-w", str(out), str(src)], capture_output=True, text=True, timeout=300,
                        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"})
  assert done.returncode == 0, done.stdout + done.stderr
  wheels = list(out.glob("*.whl"))
  assert [w.name for w in wheels] == [f"roformer_jax-{roformer_jax.__version__}-py3-none-any.whl"]
  with zipfile.ZipFile(wheels[0]) as whl:
    yield whl


def test_wheel_holds_the_package_only(wheel):
  names = set(wheel.namelist())
  dist_info = f"roformer_jax-{roformer_jax.__version__}.dist-info/"
  sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "roformer_jax").rglob("*.py") if "__pycache__" not in p.parts}
  assert "roformer_jax/training/data/pipeline.py" in sources
  assert sources <= names, sorted(sources - names)
  assert "roformer_jax/py.typed" in names  # PEP 561: type checkers use the package's hints
  assert "roformer_jax/rope/hf_registry.json" in names  # rope.from_hf_config reads it at run time
  strays = {n for n in names if not n.startswith(("roformer_jax/", dist_info))}
  assert not strays, sorted(strays)  # no tests/, configs/, bench/, scripts/, experiments/, train.py ...
  assert not {n for n in names if n.split("/")[0] in {"tests", "configs", "bench", "scripts", "experiments", "docs"}}


def _canonical(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


def test_wheel_metadata_core_and_extras(wheel):
  dist_info = f"roformer_jax-{roformer_jax.__version__}.dist-info/"
  metadata = email.parser.Parser().parsestr(wheel.read(dist_info + "METADATA").decode())
  assert metadata["Name"] == "roformer-jax"
  assert metadata["Version"] == roformer_jax.__version__
  requires: dict[str, set[str]] = {}  # extra ("" for the core) -> canonical names
  for line in metadata.get_all("Requires-Dist"):
    match = re.fullmatch(r'([A-Za-z0-9._-]+)(\[[^\]]*\])?\s*[^;]*?(?:;\s*extra\s*==\s*"([^"]+)")?', line.strip())
    assert match, f"unexpected requirement (a marker other than extra?): {line!r}"
    name, extras, extra = match.groups()
    if _canonical(name) == "roformer-jax":  # [all] names the other extras
      requires.setdefault(extra, set()).update(f"roformer-jax[{e.strip()}]" for e in extras[1:-1].split(","))
    else:
      requires.setdefault(extra or "", set()).add(_canonical(name))
  assert requires.pop("") == {"jax", "flax", "numpy", "safetensors"}
  assert set(metadata.get_all("Provides-Extra")) == {"train", "eval", "dev", "all"}
  assert requires["train"] == {"optax", "orbax-checkpoint", "grain", "tensorflow-datasets", "array-record",
                               "importlib-resources", "sentencepiece", "ml-collections", "absl-py", "tensorboardx",
                               "matplotlib", "tqdm"}
  assert requires["eval"] == {"sacrebleu", "scipy"}
  assert requires["dev"] == {"pytest", "pytest-xdist", "hypothesis", "chex", "setuptools", "ruff", "mypy"}
  assert requires["all"] == {"roformer-jax[train]", "roformer-jax[eval]", "roformer-jax[dev]"}
  # Every pin that make installs is declared somewhere (jaxlib comes with jax).
  declared = {"jax", "flax", "numpy", "safetensors", "jaxlib"}.union(*requires.values())
  pins = {_canonical(re.split(r"[=<>!~\[ ;]", line, maxsplit=1)[0])
          for line in (ROOT / "requirements.txt").read_text().splitlines() if line.strip() and not line.startswith("#")}
  assert pins <= declared, sorted(pins - declared)
