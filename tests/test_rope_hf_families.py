"""`rope.from_hf_config` against transformers' own rotary classes, family by family and layer
by layer, and `rope.multimodal_positions` against transformers' `get_rope_index`.

The goldens (tests/golden/hf_rope_families.{npz,json}) come from
scripts/make_hf_rope_families_golden.py: transformers 5.24.0's rotary embedding class and apply
function of each family, run in float64 (its own init functions computing inv_freq in float64),
on tiny configs with the real rope parameters and head dims and positions up to 2^20. Each
case's config is the config.json-style dict the HF config class was built from, with the keys
a published file leaves out left out. "Exactly" here is exact arithmetic on the config's
values: our float32 output is compared with the float64 golden at float32 tolerance; HF's own
float32 output only at positions below 2048.
"""

import json
import pathlib

import numpy as np
import pytest

from roformer_jax import rope

GOLDEN = pathlib.Path(__file__).parent / "golden"
META = json.loads((GOLDEN / "hf_rope_families.json").read_text())
_ARRAYS = np.load(GOLDEN / "hf_rope_families.npz")
ROTARY = [c for c in META["cases"] if c["kind"] == "rotary"]
POSITIONS = [c for c in META["cases"] if c["kind"] == "mrope_positions"]
LAYERS = [(c, layer) for c in ROTARY for layer in c["layers"]]


def arr(key):
  return np.asarray(_ARRAYS[key])


def test_the_goldens_cover_every_listed_family():
  types = {c["model_type"] for c in ROTARY}
  assert {"llama", "mistral", "qwen2", "qwen3", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma2", "gemma3_text",
          "phi3", "deepseek_v2", "deepseek_v3", "gpt_neox", "gptj", "llama4_text", "smollm3", "cohere2",
          "modernbert", "glm", "codegen"} <= types
  assert META["meta"]["versions"]["transformers"] == "5.24.0"


def config_json(case):
  """The case's config as its config.json holds it (model_type included)."""
  return {"model_type": case["model_type"], **case["config"]}


@pytest.mark.parametrize("case,layer", LAYERS, ids=[f"{c['name']}-L{layer['layer']}" for c, layer in LAYERS])
def test_from_hf_config_rotates_as_the_model(case, layer):
  spec = rope.from_hf_config(config_json(case), layer=layer["layer"])
  if not layer["rope"]:
    assert spec is None, f"layer {layer['layer']} ({layer['layer_type']}) has no RoPE in transformers"
    return
  assert spec is not None
  lay = layer["layout"]
  assert spec.layout == lay["pairing"]
  x = arr(layer["arrays"].get("x", case["arrays"]["x"]))
  pos = arr(case["arrays"]["positions"]).astype(np.int32)
  off, rd = lay["rotary_offset"], lay["rotary_dim"]
  if lay["mrope"] is not None:
    assert spec.sections == tuple(lay["mrope"]["section"])
    assert spec.section_layout == lay["mrope"]["style"]
  # transformers picks a length-dependent branch (Phi-3's longrope) from the whole batch's
  # largest position; ours is per row by default (docs/rope.md), so pass the batch's length.
  seq_len = int(pos.max()) + 1 if spec.length_dependent else None
  part = x[..., off:]  # DeepSeek's rope head (qk_rope_head_dim) sits after the nope channels
  assert spec.check(part.shape[-1]) == rd
  got = np.asarray(spec.apply(part, pos, seq_len=seq_len), np.float64)
  if lay["output"] == "deinterleaved":  # DeepSeek-V3 writes interleaved pairs back in half order
    got = got[..., rope.layout_permutation(part.shape[-1], rotary_dim=rd, src="interleaved", dst="half")]
  want = arr(layer["arrays"]["q_f64"])
  np.testing.assert_array_equal(want[..., :off], x[..., :off])
  scale = max(1.0, float(np.abs(want).max()))
  np.testing.assert_allclose(got, want[..., off:], rtol=1e-5, atol=1e-5 * scale)
  # HF's ordinary float32 run agrees at small positions (rows f32_rows, all positions < 2048)
  rows = case["f32_rows"]
  np.testing.assert_allclose(got[rows], arr(layer["arrays"]["q_f32"])[..., off:], rtol=2e-4, atol=2e-4 * scale)


def test_v4_and_v5_forms_of_a_config_give_the_same_spec():
  by_name = {c["name"]: c for c in ROTARY}
  for a, b in (("llama3_1", "llama3_1_v5"), ("gemma3_v4", "gemma3_v5")):
    for layer in range(by_name[a]["num_layers"]):
      assert rope.from_hf_config(config_json(by_name[a]), layer=layer) == \
          rope.from_hf_config(config_json(by_name[b]), layer=layer)


def test_per_row_length_is_our_default_and_differs_from_transformers_batch_rule():
  """Phi-3 longrope: transformers chooses the long factors for every row once any row passes
  the original length; we choose per row (a row's output never depends on its neighbours)."""
  case = next(c for c in ROTARY if c["name"] == "phi3_longrope_long")
  spec = rope.from_hf_config(config_json(case), layer=0)
  x, pos = arr(case["arrays"]["x"]), arr(case["arrays"]["positions"]).astype(np.int32)
  assert pos[0].max() + 1 <= spec.scaling_dict["original_max_position_embeddings"] < pos[1].max() + 1
  per_row = np.asarray(spec.apply(x, pos))
  batch = np.asarray(spec.apply(x, pos, seq_len=int(pos.max()) + 1))
  np.testing.assert_array_equal(per_row[1], batch[1])
  assert not np.allclose(per_row[0], batch[0], atol=1e-3)


def test_unknown_model_types_are_refused_even_with_every_rope_key():
  """Issue 39: a file with rope_theta and the head dim used to be read as a rotate_half model whatever its
  model_type (Cohere's interleaved pairs came out O(1) wrong). Nothing is guessed now; family= asserts it."""
  for config in ({"model_type": "my_model", "hidden_size": 64, "num_attention_heads": 4},
                 {"model_type": "my_model", "rope_theta": 5e5, "head_dim": 32}):
    with pytest.raises(ValueError, match="'my_model' is not in the RoPE registry"):
      rope.from_hf_config(config)
  spec = rope.from_hf_config({"model_type": "my_model", "rope_theta": 5e5, "head_dim": 32}, family="llama")
  assert spec == rope.RotaryConfig(theta=5e5, layout="half")
  with pytest.raises(ValueError, match="layer=9 is not a layer"):
    rope.from_hf_config({"model_type": "llama", "num_hidden_layers": 2}, layer=9)


def _our_runs(runs, seconds):
  out, videos = [], iter(seconds or [])
  for run in runs:
    if run["type"] in ("text", "pad"):
      out.append(("text", run["len"]) if run["type"] == "text" else None)
    elif run["type"] == "image":
      out.append(("image", tuple(run["grid_thw"])))
    else:
      out.append(("video", tuple(run["grid_thw"]), next(videos, 1.0)))
  return [r for r in out if r is not None], sum(r["len"] for r in runs if r["type"] == "pad")


@pytest.mark.parametrize("case", POSITIONS, ids=[c["name"] for c in POSITIONS])
def test_multimodal_positions_match_the_trained_semantics(case):
  """v4 / vLLM semantics (what the checkpoints were trained with); transformers 5.23 agrees
  except for text after a video (#45381), which the golden's `_v4` arrays show."""
  want = arr(case["arrays"]["position_ids_v4"])
  mask = arr(case["arrays"]["attention_mask"]).astype(bool)
  deltas = []
  for b, runs in enumerate(case["runs"]):
    ours, pad = _our_runs(runs, case["second_per_grid_ts"])
    pos = rope.multimodal_positions(ours, spatial_merge_size=case["spatial_merge_size"],
                                    tokens_per_second=case["tokens_per_second"])
    np.testing.assert_array_equal(pos, want[b][mask[b]])
    deltas.append(int(pos.max()) + 1 - len(pos))
  # rope_deltas, as transformers 5.x defines them (over the unpadded tokens)
  if case.get("v4_equal_deltas") or not any(r["type"] == "pad" for rr in case["runs"] for r in rr):
    assert deltas == arr(case["arrays"]["rope_deltas_v4"]).reshape(-1).tolist() or \
        deltas == arr(case["arrays"]["rope_deltas"]).reshape(-1).tolist()
  hf = arr(case["arrays"]["position_ids"])
  same = all(np.array_equal(hf[b][mask[b]], want[b][mask[b]]) for b in range(len(mask)))
  assert same == bool(case["v4_equal_on_unpadded"])
