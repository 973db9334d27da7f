"""Decode speed of a CausalLM: the cached / recurrent step vs recomputing the full forward.

Settled, so it lives in experiments/decode.py (issue 24); this runs it: `python bench/decode.py` is
the command its recorded figures (docs/bench_results/decode.json) carry.
"""

import os
import runpy

runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "decode.py"),
               run_name="__main__")
