"""Packaging: what each model module imports.

Each model module is imported in a fresh interpreter, and the top-level packages it leaves in
sys.modules are compared with those of the imports it is allowed: a stray import of a training
library from a model module fails here.
"""

import functools
import json
import os
import pathlib
import subprocess
import sys

import pytest

import roformer_jax

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
    "roformer_jax.attention": (FLAX, ()),
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
