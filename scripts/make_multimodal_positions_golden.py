"""Golden position ids for `rope.omni_positions` and `rope.xdrope_positions`, made by the models' own code.

What it makes
-------------
``tests/golden/multimodal_positions.npz``: for every case, ``<name>/ids`` (the position ids transformers'
``get_rope_index`` returns for one sequence, [axes, T]) and ``<name>/case`` (a JSON string: the model, our
runs, our keyword arguments, the transformers inputs' summary), plus ``versions`` (JSON: python, torch,
transformers, numpy).

The models and the functions called (transformers 5.24, unmodified, on CPU):

* Qwen2.5-Omni: ``Qwen2_5OmniPreTrainedModelForConditionalGeneration.get_rope_index`` (TMRoPE: audio runs,
  images, videos, ``use_audio_in_video`` with ``position_id_per_seconds`` / ``seconds_per_chunk``);
* Qwen3-Omni: ``Qwen3OmniMoePreTrainedModelForConditionalGeneration.get_rope_index`` (the same runs; audio in
  video merged by time rather than by chunks; float ids);
* HunyuanVL: ``HunYuanVLModel.get_rope_index`` (XD-RoPE: 3 to 5 axes, indexed images).

Each is called as the plain function on a small stand-in ``self`` that holds the model's real config class
(``Qwen2_5OmniThinkerConfig()``, ``Qwen3OmniMoeThinkerConfig()``, ``HunYuanVLConfig()``) and the model's own
helper methods (``get_llm_pos_ids_for_vision``, ``get_chunked_index``, ``get_vision_position_ids``), so no
weights are built. Where the default config lacks a field the checkpoints set, the stand-in adds it:
``vision_start_token_id = 151652`` (both Omni checkpoints' config.json) and HunyuanVL's
``rope_parameters["mrope_section"]`` (``xdrope_section`` in its checkpoint; 4 sections, and 3 and 5 for the
axis-count cases). ``input_ids`` are built from the case's segments with the config's special token ids (text
tokens are id 872 + i), one sequence per call, attention mask all ones. Audio lengths are given as the audio
encoder's input lengths (mel frames, ``audio_seqlens``); the number of audio tokens put in ``input_ids`` is the
model's own ``_get_feat_extract_output_lengths`` of it.

How it was run
--------------
From the repository root, in the reference venv (Python 3.11, torch 2.13 CPU, transformers 5.24)::

    /work/refvenv/bin/python scripts/make_multimodal_positions_golden.py

It writes only the npz (a few tens of KB).
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLConfig
from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLModel
from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as q25
from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniThinkerConfig
from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as q3
from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeThinkerConfig

OUT = Path(__file__).resolve().parents[1] / "tests" / "golden" / "multimodal_positions.npz"
VISION_BOS, VISION_EOS = 151652, 151653  # <|vision_bos|>, <|vision_eos|> in both Omni checkpoints
HY_IMAGE_START, HY_IMAGE_END = 120118, 120119  # any non-image ids: HunyuanVL reads mm_token_type_ids only


class _Cfg:
  """A config proxy: the real config's attributes, with the few missing ones added."""

  def __init__(self, real, **extra):
    self._real, self._extra = real, extra

  def __getattr__(self, name):
    return self._extra[name] if name in self._extra else getattr(self._real, name)


def _stub(cls, names, **attrs):
  stub_cls = type("Stub", (), {n: getattr(cls, n) for n in names})
  stub = stub_cls()
  for k, v in attrs.items():
    setattr(stub, k, v)
  return stub


def omni_audio_tokens(model, mel_frames, n_window):
  if model == "qwen2.5-omni":  # the audio encoder's method (self unused); get_rope_index inlines the same formula
    return int(q25.Qwen2_5OmniAudioEncoder._get_feat_extract_output_lengths(None, torch.tensor(mel_frames))[1])
  return int(q3._get_feat_extract_output_lengths(torch.tensor(mel_frames), n_window))


def omni_case(model, segments, *, use_audio_in_video, merge=2):
  """segments: ("text", n) | ("image", thw) | ("video", thw, seconds_per_grid) | ("audio", mel_frames) |
  ("video_audio", thw, seconds_per_grid, mel_frames). Returns (ids [3, T], our runs, hf inputs summary)."""
  if model == "qwen2.5-omni":
    real = Qwen2_5OmniThinkerConfig()
    cfg = _Cfg(real, vision_start_token_id=VISION_BOS)
    cls = q25.Qwen2_5OmniPreTrainedModelForConditionalGeneration
    n_window = real.audio_config.n_window
  else:
    real = Qwen3OmniMoeThinkerConfig()
    cfg = _Cfg(real, vision_start_token_id=VISION_BOS)
    cls = q3.Qwen3OmniMoePreTrainedModelForConditionalGeneration
    n_window = real.audio_config.n_window
  stub = _stub(cls, ["get_rope_index", "get_llm_pos_ids_for_vision", "get_chunked_index"],
               config=cfg, spatial_merge_size=merge)
  img, vid, aud = real.image_token_id, real.video_token_id, real.audio_token_id
  a_bos, a_eos = real.audio_start_token_id, real.audio_end_token_id if hasattr(real, "audio_end_token_id") else 151648
  ids: list[int] = []
  runs: list[list] = []
  image_grids, video_grids, seconds, mels = [], [], [], []

  def text(n):
    ids.extend(872 + (len(ids) + i) % 1000 for i in range(n))
    add_text(n)

  def add_text(n):
    if runs and runs[-1][0] == "text":
      runs[-1][1] += n
    else:
      runs.append(["text", n])

  for seg in segments:
    kind = seg[0]
    if kind == "text":
      text(seg[1])
    elif kind == "image":
      thw = list(seg[1])
      ids.append(VISION_BOS); add_text(1)
      n = thw[0] * thw[1] * thw[2] // merge**2
      ids.extend([img] * n); runs.append(["image", thw])
      ids.append(VISION_EOS); add_text(1)
      image_grids.append(thw)
    elif kind == "video":
      thw, spg = list(seg[1]), seg[2]
      ids.append(VISION_BOS); add_text(1)
      n = thw[0] * thw[1] * thw[2] // merge**2
      ids.extend([vid] * n); runs.append(["video", thw, spg])
      ids.append(VISION_EOS); add_text(1)
      video_grids.append(thw); seconds.append(spg)
    elif kind == "audio":
      n = omni_audio_tokens(model, seg[1], n_window)
      ids.append(a_bos); add_text(1)
      ids.extend([aud] * n); runs.append(["audio", n])
      ids.append(a_eos); add_text(1)
      mels.append(seg[1])
    elif kind == "video_audio":
      thw, spg, mel = list(seg[1]), seg[2], seg[3]
      nv = thw[0] * thw[1] * thw[2] // merge**2
      na = omni_audio_tokens(model, mel, n_window)
      # get_rope_index never reads which of these tokens is video and which audio: only the block's length.
      ids.extend([VISION_BOS, a_bos] + [vid] * nv + [aud] * na + [a_eos, VISION_EOS])
      runs.append(["video_audio", thw, spg, na])
      video_grids.append(thw); seconds.append(spg); mels.append(mel)
    else:
      raise ValueError(seg)
  input_ids = torch.tensor([ids])
  kwargs = dict(
      image_grid_thw=torch.tensor(image_grids) if image_grids else None,
      video_grid_thw=torch.tensor(video_grids) if video_grids else None,
      attention_mask=torch.ones_like(input_ids),
      use_audio_in_video=use_audio_in_video,
      audio_seqlens=torch.tensor(mels) if mels else None,
      second_per_grids=torch.tensor(seconds) if seconds else None,
  )
  pos, _ = stub.get_rope_index(input_ids, **kwargs)
  summary = dict(image_grid_thw=image_grids, video_grid_thw=video_grids, second_per_grids=seconds,
                 audio_seqlens=mels, use_audio_in_video=use_audio_in_video, length=len(ids),
                 position_id_per_seconds=real.position_id_per_seconds,
                 seconds_per_chunk=getattr(real, "seconds_per_chunk", None), n_window=n_window)
  return pos[:, 0].numpy(), runs, summary


def hunyuan_case(segments, *, axes=4, extra_tokens=True, merge=2):
  """segments: ("text", n) | ("image", thw). The image span is wrapped by start/end tokens that are text."""
  real = HunYuanVLConfig()
  text_cfg = _Cfg(real.text_config, rope_parameters={"rope_theta": 10000.0, "mrope_section": [16] * axes})
  vision_cfg = _Cfg(real.vision_config, spatial_merge_size=merge)
  cfg = _Cfg(real, text_config=text_cfg, vision_config=vision_cfg)
  stub = _stub(HunYuanVLModel, ["get_rope_index", "get_vision_position_ids"], config=cfg)
  ids: list[int] = []
  types: list[int] = []
  runs: list[list] = []
  grids = []
  for seg in segments:
    if seg[0] == "text":
      ids.extend(872 + (len(ids) + i) % 1000 for i in range(seg[1])); types.extend([0] * seg[1])
      runs.append(["text", seg[1]])
    else:
      thw = list(seg[1])
      n = (thw[1] // merge) * (thw[2] // merge + 1) + (2 if extra_tokens else 0)
      ids.append(HY_IMAGE_START); types.append(0)
      ids.extend([real.image_token_id] * n); types.extend([1] * n)
      ids.append(HY_IMAGE_END); types.append(0)
      runs.append(["text", 1]); runs.append(["image", thw]); runs.append(["text", 1])
      grids.append(thw)
  merged: list[list] = []
  for r in runs:  # adjacent text runs as one
    if merged and r[0] == "text" and merged[-1][0] == "text":
      merged[-1][1] += r[1]
    else:
      merged.append(r)
  input_ids = torch.tensor([ids])
  pos, _ = stub.get_rope_index(input_ids, torch.tensor([types]),
                               image_grid_thw=torch.tensor(grids) if grids else None,
                               attention_mask=torch.ones_like(input_ids))
  summary = dict(image_grid_thw=grids, length=len(ids), mrope_section=[16] * axes, cat_extra_token=extra_tokens)
  return pos[:, 0].numpy(), merged, summary


def main():
  cases = {}
  # Qwen-Omni: chunk = position_id_per_seconds * seconds_per_chunk = 25 * 2 = 50 temporal ids. Grids (t, h, w) in
  # patches; seconds_per_grid 1.0 puts a frame every 25 ids, 2.0 every 50 (one per chunk), 4.0 every 100 (jumps
  # two chunks: the odd one-token chunk), 0.5 / 2/3 / 1.5 fractional (float32 products; Qwen3-Omni keeps them).
  omni_cases = {
      "audio_only": ([("text", 3), ("audio", 1000), ("text", 4)], False),
      "image_audio": ([("text", 2), ("image", (2, 4, 6)), ("text", 3), ("audio", 333), ("text", 2)], False),
      "video_only": ([("text", 2), ("video", (4, 4, 4), 2 / 3), ("text", 3), ("video", (3, 2, 4), 1.5)], False),
      "va_spg1_short": ([("text", 3), ("video_audio", (4, 4, 4), 1.0, 240), ("text", 2)], True),
      "va_spg1_long_audio": ([("text", 1), ("video_audio", (3, 2, 4), 1.0, 1001), ("text", 3)], True),
      "va_spg2": ([("text", 2), ("video_audio", (6, 4, 2), 2.0, 470), ("text", 2)], True),
      "va_spg4_jump": ([("text", 2), ("video_audio", (3, 2, 2), 4.0, 500), ("text", 1)], True),
      "va_spg_half": ([("text", 2), ("video_audio", (8, 2, 2), 0.5, 163), ("text", 2)], True),
      "va_spg_two_thirds": ([("text", 2), ("video_audio", (7, 2, 4), 2 / 3, 399), ("text", 2)], True),
      "va_big_grid": ([("text", 2), ("video_audio", (2, 20, 24), 1.0, 97), ("text", 2)], True),
      "va_mixed": ([("text", 4), ("image", (1, 4, 4)), ("text", 2), ("video_audio", (5, 4, 4), 1.0, 611),
                    ("text", 3), ("audio", 58), ("text", 2), ("video_audio", (2, 2, 2), 1.5, 150), ("text", 3)],
                   True),
      "va_at_start": ([("video_audio", (3, 2, 2), 1.0, 200), ("text", 2)], True),
  }
  for model in ("qwen2.5-omni", "qwen3-omni"):
    for name, (segments, uav) in omni_cases.items():
      pos, runs, summary = omni_case(model, segments, use_audio_in_video=uav)
      key = f"{model}/{name}"
      cases[key] = (pos, dict(model=model, runs=runs, kwargs=dict(
          position_id_per_seconds=summary["position_id_per_seconds"],
          **({"seconds_per_chunk": summary["seconds_per_chunk"]} if model == "qwen2.5-omni" else {})),
          audio_mel_frames=summary["audio_seqlens"], n_window=summary["n_window"], hf=summary))
  hy_cases = {
      "one_image": ([("text", 5), ("image", (1, 8, 6)), ("text", 4)], 4, True),
      "two_images": ([("text", 3), ("image", (1, 4, 8)), ("text", 2), ("image", (1, 6, 4)), ("text", 3)], 4, True),
      "no_extra_tokens": ([("text", 2), ("image", (1, 4, 4)), ("text", 1), ("image", (2, 6, 2)), ("text", 2)], 4,
                          False),
      "three_axes": ([("text", 2), ("image", (1, 4, 6)), ("text", 2), ("image", (1, 2, 2))], 3, True),
      "five_axes": ([("image", (1, 4, 4)), ("text", 3), ("image", (1, 4, 2)), ("text", 1)], 5, True),
      "odd_grid_floors": ([("text", 1), ("image", (1, 5, 7)), ("text", 2)], 4, True),
      "text_only": ([("text", 6)], 4, True),
  }
  for name, (segments, axes, extra) in hy_cases.items():
    pos, runs, summary = hunyuan_case(segments, axes=axes, extra_tokens=extra)
    cases[f"hunyuan-vl/{name}"] = (pos, dict(model="hunyuan-vl", runs=runs,
                                             kwargs=dict(axes=axes, extra_tokens=extra), hf=summary))
  arrays = {}
  for key, (pos, meta) in cases.items():
    arrays[f"{key}/ids"] = pos
    arrays[f"{key}/case"] = np.array(json.dumps(meta))
  arrays["versions"] = np.array(json.dumps(dict(python=platform.python_version(), torch=torch.__version__,
                                                transformers=transformers.__version__, numpy=np.__version__)))
  OUT.parent.mkdir(parents=True, exist_ok=True)
  np.savez_compressed(OUT, **arrays)
  print(f"wrote {len(cases)} cases to {OUT}", file=sys.stderr)


if __name__ == "__main__":
  main()
