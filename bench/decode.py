"""Decode speed of a CausalLM: the cached / recurrent step vs recomputing the full forward.

Settled, so it lives in experiments/decode.py (issue 24); this runs it. `python bench/decode.py`
is the command its recorded figures (docs/bench_results/decode.json) carry.
"""

import os
import runpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
runpy.run_path(os.path.join(ROOT, "experiments", "decode.py"), run_name="__main__")
