"""`rope.omni_positions` (Qwen2.5-Omni / Qwen3-Omni TMRoPE) and `rope.xdrope_positions` (HunyuanVL) against the
ids transformers 5.24's own get_rope_index gives (tests/golden/multimodal_positions.npz, made by
scripts/make_multimodal_positions_golden.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from roformer_jax import rope

GOLDEN = np.load(Path(__file__).parent / "golden" / "multimodal_positions.npz")
CASES = sorted(k[: -len("/ids")] for k in GOLDEN.files if k.endswith("/ids"))


def _ours(meta):
  runs = [tuple(tuple(v) if isinstance(v, list) else v for v in r) for r in meta["runs"]]
  if meta["model"] == "hunyuan-vl":
    return rope.xdrope_positions(runs, **meta["kwargs"])
  return rope.omni_positions(runs, model=meta["model"], **meta["kwargs"])


def test_golden_covers_every_layout():
  assert len(CASES) == 31
  models = {json.loads(str(GOLDEN[f"{c}/case"]))["model"] for c in CASES}
  assert models == {"qwen2.5-omni", "qwen3-omni", "hunyuan-vl"}
  assert json.loads(str(GOLDEN["versions"]))["transformers"] == "5.24.0"


@pytest.mark.parametrize("case", CASES)
def test_matches_transformers_get_rope_index(case):
  meta = json.loads(str(GOLDEN[f"{case}/case"]))
  want = GOLDEN[f"{case}/ids"].T
  got = _ours(meta)
  assert got.shape == want.shape
  if meta["model"] == "qwen3-omni":
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want.astype(np.float32))  # bit-exact float32
  else:
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("hunyuan")])
def test_audio_token_counts(case):
  meta = json.loads(str(GOLDEN[f"{case}/case"]))
  counts = [r[-1] for r in meta["runs"] if r[0] in ("audio", "video_audio")]
  assert [rope.omni_audio_tokens(m, model=meta["model"], n_window=meta["n_window"])
          for m in meta["audio_mel_frames"]] == counts


def test_chunking_matters():
  """The interleaving is what the golden pins: shifting the chunk length by one changes the order."""
  meta = json.loads(str(GOLDEN["qwen2.5-omni/va_spg1_short/case"]))
  runs = [tuple(tuple(v) if isinstance(v, list) else v for v in r) for r in meta["runs"]]
  want = GOLDEN["qwen2.5-omni/va_spg1_short/ids"].T
  off = rope.omni_positions(runs, model="qwen2.5-omni", position_id_per_seconds=25, seconds_per_chunk=2.04)
  assert not np.array_equal(off, want)


def test_omni_small_example():
  # text "a <|audio_bos|>", 3 audio tokens, "<|audio_eos|> b": all 1-D
  pos = rope.omni_positions([("text", 2), ("audio", 3), ("text", 2)])
  assert pos[:, 0].tolist() == list(range(7)) and (pos == pos[:, :1]).all()
  # an image: temporal step one second = 25 ids
  pos = rope.omni_positions([("text", 1), ("image", (2, 2, 2)), ("text", 1)])
  assert pos[1:3].tolist() == [[1, 1, 1], [26, 1, 1]] and pos[-1].tolist() == [27] * 3


def test_omni_errors():
  with pytest.raises(ValueError, match="model="):
    rope.omni_positions([("text", 1)], model="qwen2-vl")
  with pytest.raises(ValueError, match="use_audio_in_video"):
    rope.omni_positions([("text", 1), ("video", (2, 2, 2), 1.0), ("text", 1), ("video_audio", (2, 2, 2), 1.0, 4)])
  with pytest.raises(ValueError, match="bos"):
    rope.omni_positions([("image", (1, 2, 2)), ("text", 1)])
  with pytest.raises(ValueError, match="at least 2"):
    rope.omni_positions([("text", 1), ("audio", 2), ("text", 1), ("audio", 2), ("text", 1)])
  with pytest.raises(ValueError, match="seconds_per_grid"):
    rope.omni_positions([("text", 1), ("video", (2, 2, 2), -1.0), ("text", 1)])
  with pytest.raises(ValueError, match="4 fields"):
    rope.omni_positions([("video_audio", (2, 2, 2), 1.0)])
  with pytest.raises(ValueError, match="chunk"):
    rope.omni_positions([("text", 1)], position_id_per_seconds=0.1, seconds_per_chunk=2)
  with pytest.raises(ValueError, match="model="):
    rope.omni_audio_tokens(100, model="whisper")


def test_xdrope_small_example_and_errors():
  pos = rope.xdrope_positions([("text", 2), ("image", (1, 2, 4)), ("text", 1)], extra_tokens=False)
  # one row of 2 tokens + the row break: (w, h, k) = (0, 0, 0), (1, 0, 0), (2, 0, 0)
  assert pos.tolist() == [[0] * 4, [1] * 4, [2, 0, 0, 0], [3, 1, 0, 0], [4, 2, 0, 0], [5] * 4]
  with pytest.raises(ValueError, match="one placeholder span"):
    rope.xdrope_positions([("text", 1), ("image", (1, 2, 2)), ("image", (1, 2, 2))])
  with pytest.raises(ValueError, match="axes"):
    rope.xdrope_positions([("text", 1)], axes=2)
  with pytest.raises(ValueError, match="merged tokens"):
    rope.xdrope_positions([("image", (1, 1, 4))])
