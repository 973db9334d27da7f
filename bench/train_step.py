"""B2: the RoFormer MLM train step on CPU, our JAX model vs HF transformers' PyTorch model.

Settled, so it lives in experiments/train_step.py (issue 24); this runs it. `python bench/train_step.py`
is the command its recorded figures carry: docs/bench_results/train_step.<cpu kind>.json, one file
per CPU kind (train_step.amd_epyc.json, train_step.intel_xeon.json), as B9 records.
"""

import os
import runpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
runpy.run_path(os.path.join(ROOT, "experiments", "train_step.py"), run_name="__main__")
