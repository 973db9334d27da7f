"""Phase precision of rope.rotary_cos_sin against float64 NumPy, exact vs plain float32.

Settled, so it lives in experiments/rope_precision.py (issue 24); this runs it. `python bench/rope_precision.py`
is the command its recorded figures (docs/bench_results/rope_precision.json) carry.
"""

import os
import runpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
runpy.run_path(os.path.join(ROOT, "experiments", "rope_precision.py"), run_name="__main__")
