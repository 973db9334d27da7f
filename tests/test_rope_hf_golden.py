"""rope against golden values from HF transformers (tests/golden/hf_rope.json).

The JSON is made by scripts/make_hf_golden.py in a separate Python 3.11 venv with torch and
transformers; neither is a dependency of this project.
"""

import json
import pathlib

import numpy as np
import pytest

from roformer_jax import rope
from tests import reference as ref

GOLDEN = json.loads((pathlib.Path(__file__).parent / "golden" / "hf_rope.json").read_text())
LARGE = 4096  # positions beyond this expose HF's float32 phase error


@pytest.mark.parametrize("case", GOLDEN["frequencies"], ids=lambda c: c["name"])
def test_frequencies_match_hf(case):
  inv_freq, attention_factor = rope.rope_frequencies(case["dim"], case["theta"], scaling=case["scaling"],
                                                     seq_len=case["seq_len"])
  # HF computes in float32 torch, we in float64 then round: allow a few float32 ulps.
  np.testing.assert_allclose(inv_freq, np.asarray(case["inv_freq"], np.float32), rtol=1e-6, atol=0)
  assert attention_factor == pytest.approx(case["attention_factor"], rel=1e-12)


@pytest.mark.parametrize("case", GOLDEN["rotary"], ids=lambda c: c["name"])
def test_rotary_matches_hf(case):
  x = np.asarray(case["x"], np.float32)
  positions = np.asarray(case["positions"], np.int32)
  hf_out = np.asarray(case["out"], np.float64)
  out = np.asarray(rope.apply_rotary(x, positions, case["theta"], layout=case["layout"],
                                     rotary_dim=case["rotary_dim"], scaling=case["scaling"],
                                     seq_len=case["seq_len"]), np.float64)
  if positions.max() < LARGE:
    np.testing.assert_allclose(out, hf_out, atol=1e-5, rtol=0)
    return
  # Large positions: HF's float32 phases drift (the flaw this library fixes). Check against
  # float64 NumPy instead, and that we are much closer to it than HF is.
  rd = case["rotary_dim"] or x.shape[-1]
  inv_freq, factor = rope.rope_frequencies(rd, case["theta"], scaling=case["scaling"])
  inv64 = np.asarray(inv_freq, np.float64) if case["scaling"] else None  # float64 formula when unscaled
  interleaved_x = x if case["layout"] == "interleaved" else ref.from_half_layout(x, rd)
  expected = ref.rotate_interleaved64(interleaved_x, positions, case["theta"], rotary_dim=rd,
                                      inv_freq=inv64, attention_factor=factor)
  if case["layout"] == "half":
    expected = ref.to_half_layout(expected, rd)
  tol = 1e-5 if inv64 is None else 1e-5 + np.abs(positions).max() * 6e-8  # float32-rounded scaled freqs
  ours, theirs = np.abs(out - expected).max(), np.abs(hf_out - expected).max()
  assert ours < tol, (ours, theirs)
  if inv64 is None and case["layout"] == "half":
    # LLaMA multiplies positions by inv_freq in float32; RoFormer's table is float64 NumPy.
    assert theirs > 10 * ours, (ours, theirs)
