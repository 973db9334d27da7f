"""What the checkpoint digest costs: SHA-256 of a saved checkpoint, against orbax's own save and restore.

Settled, so it lives in experiments/checkpoint_digest.py (issue 24); this runs it. `python bench/checkpoint_digest.py`
is the command its recorded figures (docs/bench_results/checkpoint_digest.json) carry.
"""

import os
import runpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
runpy.run_path(os.path.join(ROOT, "experiments", "checkpoint_digest.py"), run_name="__main__")
