"""Rematerialisation (`model.remat`): XLA's temporary memory and the step time it costs.

Settled, so it lives in experiments/remat.py (issue 24); this runs it. `python bench/remat.py`
is the command its recorded figures (docs/bench_results/remat.json) carry.
"""

import os
import runpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
runpy.run_path(os.path.join(ROOT, "experiments", "remat.py"), run_name="__main__")
