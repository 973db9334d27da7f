# One command per job on a fresh machine:
#   make test    create .venv (Python 3.12) if missing, install pinned deps, run make lint, then the test suite
#   make lint    ruff (pyflakes + bugbear, pyproject.toml) over the whole tree, mypy (mypy.ini) over roformer_jax
#   make test-fast  the same, unit tests only (-m "not slow"): the inner loop; 1 min 46 s warm, 5 min 10 s cold on
#                2 AMD EPYC cores (docs/development.md, 2026-11-27)
#   make train   create .venv if missing, run the default (offline, CPU) training config
#   make bench   create .venv if missing, run the benchmarks in bench/, record their figures in
#                docs/bench_results/ and regenerate the summary block of docs/benchmarks.md
#   make figures regenerate docs/figures/*.png
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# python3.12 may be a pyenv shim that is not activated; scripts/find_python.sh finds a real 3.12+.
PYTHON ?= $(shell scripts/find_python.sh)
# glibc's malloc backs large allocations with huge pages: XLA's CPU runtime allocates its
# buffers every step, and this makes training 1.4x faster here (docs/benchmarks.md, B5).
# Unknown tunables are ignored; other C libraries ignore the variable.
export GLIBC_TUNABLES ?= glibc.malloc.hugetlb=1

.PHONY: venv lint test test-fast train bench figures clean

$(VENV)/.installed: requirements.txt
	@test -n "$(PYTHON)" || { echo "error: no Python >= 3.12 found; install python3.12 or pass PYTHON=/path/to/python3.12" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

venv: $(VENV)/.installed

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -q -n 2 tests

# The tests marked slow (training, subprocesses, multi-process runs, the documented commands)
# are left out; `make test` runs them too. tests/conftest.py says what is marked.
test-fast: lint
	$(PY) -m pytest -q -n 2 -m "not slow" tests

train: venv
	$(PY) train.py --config configs/default.py --workdir workdirs/default

# Each bench saves its figures to docs/bench_results/<bench>.json (--record); bench/report.py
# then regenerates the summary block of docs/benchmarks.md from those files. The settled benches
# (experiments/{train_step,remat,decode,rope_precision,checkpoint_digest}.py) are not rerun; their
# recorded commands, bench/<name>.py, still run them (docs/benchmarks.md).
bench: venv
	$(PY) bench/rope.py --record
	$(PY) bench/long_context.py --b4 --record
	$(PY) bench/default_config.py --record
	$(PY) bench/gpu_mlm.py --record
	$(PY) bench/long_context.py --record
	$(PY) bench/inference.py --record
	$(PY) bench/report.py

figures: venv
	$(PY) scripts/plot_long_term_decay.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .cache/xla .mypy_cache .ruff_cache
