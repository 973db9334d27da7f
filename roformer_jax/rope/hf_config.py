"""Any HuggingFace model's RoPE from its config.json: `from_hf_config(config, layer=i)`.

transformers reads a config.json through the model's config class: keys the file leaves out
take that class's defaults, and each class has its own legacy keys (Gemma 3's
`rope_local_base_freq`, GPT-NeoX's `rotary_pct` / `rotary_emb_base`, ModernBERT's
`global_rope_theta`, Llama 4's inverted `no_rope_layers`, ...). Two sources say what each
model_type does:

- the RoPE registry (`hf_registry.json`, `registry()`), made by scripts/make_hf_rope_registry.py
  by running every model type's own code in transformers 5.24: per type, exact (with the reading
  rules it observed), a wrapper whose `text_config` is read, refused with the mechanism that
  stopped it, or without RoPE; and every diffusers transformer class, refused by name;
- `_FAMILIES`, written by hand for 20 families whose legacy keys and layer rules the registry's
  generic reading does not cover, checked against tests/golden/hf_rope_families; they take
  precedence, with what the registry observed of them (a class that ignores
  partial_rotary_factor, default M-RoPE sections) applied on top.

A model_type in neither is refused, never guessed; `family=` reads a config as a named family on
the caller's say-so.

The returned spec rotates in the channel order of the model's q/k projection weights. Where
transformers permutes channels inside its rotary function (DeepSeek-V3's rope_interleave) the
rotated q and k differ from transformers' by that permutation, and q . k is identical.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

import numpy as np

from roformer_jax.rope.frequencies import default_inv_freq, pair_axes, pair_frequencies
from roformer_jax.rope.positions import ltx_pair_layout
from roformer_jax.rope.spec import RotaryConfig

# Per model_type: the config class's defaults for keys a config.json may leave out, and how
# the model applies RoPE. Keys:
#   theta: default rope_theta ({"full_attention": .., "sliding_attention": ..} when per layer type)
#   head_dim: the class's default head_dim (None: hidden_size // num_attention_heads);
#     "computed": always hidden_size // num_attention_heads, whatever the file says (Cohere2)
#   hidden_size, num_attention_heads, num_hidden_layers: class defaults
#   layout: "half" (rotate_half) or "interleaved" (GPT-J, Cohere, Llama 4, DeepSeek, GLM)
#   partial: default partial_rotary_factor; rotary_dim_key: a key giving R directly (GPT-J)
#   rope_head_dim_key: the key of the rotated head dim when it is not head_dim (DeepSeek MLA)
#   mrope: "chunked" / "interleaved" (M-RoPE); mrope_forced: the class ignores mrope_interleaved
#   layer_types: (pattern kind, key, default) giving each layer's type when the file has none
#   rope_on: the layer types that apply RoPE (others are NoPE); None = all
#   layer_types_filler: [block, k]: config.json writes each layer's type followed by k - 1 `block` entries, which the
#     config class drops (Dory's (type, "mlp") pairs: layer i is entry k * i, num_hidden_layers counts the entries)
#   derived_keys: {key: sources}: a key read from the file that the config class computes from `sources` when
#     absent: refused without it where the file sets one of them
#   rope_layers_key: [key, default]: the config list of the layer indices that rotate (Bamba's attn_layer_indices)
#   no_rope_layers: the layer's RoPE flag comes from `no_rope_layers` (1 = RoPE: inverted name)
#   legacy: {v4 key: layer type} keys that set that layer type's theta
#   v4_scaling_to: the layer type a v4 `rope_scaling` applies to (Gemma 3: full_attention)
#   type_defaults: a layer type's default rope parameters (Gemma 4: proportional on full layers)
#   type_head_dim: {layer type: (key, default)} for a layer type with its own head dim (Gemma 4), where the
#     config.json has no per_layer_config (the config class builds one from that key)
#   per_layer_keys: the keys of transformers' per_layer_config ({layer: overrides}) the model's rotation follows
#     (Gemma 4: head_dim); another override that could change the rotation is refused
#   per_layer_config_required: the head dims come from per_layer_config only (refused without it)
#   rotates_value_key: a key that makes the model rotate v too (RoFormer's rotary_value): the spec's rotate_value
#   rotates_value: observed: every call rotates v too (CLVP), the spec's rotate_value
#   heads: [start, stop]: observed: only these heads of q and k rotate (Qwen2.5-Omni's DiT: [0, 1]), the spec's heads
#   theta_fixed: observed: the class reads no rope key, theta is fixed (CLVP); a config that sets one is refused
#   rotary_dim_fixed: observed: the rotated width, computed by the class from keys guarded at their defaults (CLVP)
#   last_layer_full: the class makes the last layer full attention (Gemma 4)
_COMMON = dict(theta=10000.0, head_dim=None, layout="half", partial=None)
_FAMILIES: dict[str, dict[str, Any]] = {
    "llama": dict(hidden_size=4096, num_attention_heads=32, num_hidden_layers=32),
    "mistral": dict(hidden_size=4096, num_attention_heads=32, num_hidden_layers=32),
    "qwen2": dict(hidden_size=4096, num_attention_heads=32, num_hidden_layers=32),
    "qwen3": dict(head_dim=128, hidden_size=4096, num_attention_heads=32, num_hidden_layers=32),
    "qwen2_vl_text": dict(theta=1e6, hidden_size=8192, num_attention_heads=64, num_hidden_layers=80, mrope="chunked"),
    "qwen2_5_vl_text": dict(theta=1e6, hidden_size=8192, num_attention_heads=64, num_hidden_layers=80,
                            mrope="chunked"),
    "qwen3_vl_text": dict(theta=5e5, head_dim=128, hidden_size=4096, num_attention_heads=32, num_hidden_layers=32,
                          mrope="interleaved", mrope_forced=True),
    "qwen3_5_text": dict(head_dim=256, hidden_size=4096, num_attention_heads=16, num_hidden_layers=32, partial=0.25,
                         mrope="interleaved", mrope_forced=True,
                         layer_types=("every", "full_attention_interval", 4, "full_attention", "linear_attention"),
                         rope_on=("full_attention",)),
    "gemma": dict(head_dim=256, hidden_size=3072, num_attention_heads=16, num_hidden_layers=28),
    "gemma2": dict(head_dim=256, hidden_size=2304, num_attention_heads=8, num_hidden_layers=26,
                   layer_types=("every", None, 2, "full_attention", "sliding_attention")),
    "gemma3_text": dict(theta={"full_attention": 1e6, "sliding_attention": 1e4}, head_dim=256, hidden_size=2304,
                        num_attention_heads=8, num_hidden_layers=26,
                        layer_types=("every", "sliding_window_pattern", 6, "full_attention", "sliding_attention"),
                        legacy={"rope_theta": "full_attention", "rope_local_base_freq": "sliding_attention"},
                        v4_scaling_to="full_attention"),
    "gemma4_text": dict(theta={"full_attention": 1e6, "sliding_attention": 1e4}, head_dim=256, hidden_size=2304,
                        num_attention_heads=8, num_hidden_layers=30,
                        layer_types=("every", None, 6, "full_attention", "sliding_attention"), last_layer_full=True,
                        type_defaults={"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25}},
                        type_head_dim={"full_attention": ("global_head_dim", 512)}, per_layer_keys=("head_dim",)),
    "phi3": dict(hidden_size=3072, num_attention_heads=32, num_hidden_layers=32, partial=1.0),
    "deepseek_v2": dict(head_dim=64, hidden_size=4096, num_attention_heads=32, num_hidden_layers=32,
                        layout="interleaved", rope_head_dim_key="qk_rope_head_dim"),
    "deepseek_v3": dict(head_dim=64, hidden_size=7168, num_attention_heads=128, num_hidden_layers=61,
                        layout="interleaved", rope_head_dim_key="qk_rope_head_dim", interleave_key="rope_interleave"),
    "gpt_neox": dict(hidden_size=6144, num_attention_heads=64, num_hidden_layers=44, partial=0.25,
                     legacy_theta="rotary_emb_base", legacy_partial="rotary_pct"),
    "gptj": dict(hidden_size=4096, num_attention_heads=16, num_hidden_layers=28, layout="interleaved",
                 rotary_dim_key="rotary_dim", rotary_dim_default=64),
    # CodeGen: GPT-J's mechanism in its own code (CodeGenRotaryEmbedding builds create_sinusoidal_positions' table,
    # theta 10000 fixed, of max_position_embeddings rows, which the registry's probe positions pass): hand-written as
    # GPT-J's is, checked against CodeGen's own rotary module and apply function (tests/golden/hf_rope_families, case
    # codegen_2b)
    "codegen": dict(hidden_size=4096, num_attention_heads=16, num_hidden_layers=28, layout="interleaved",
                    rotary_dim_key="rotary_dim", rotary_dim_default=64),
    "llama4_text": dict(theta=5e5, head_dim=128, hidden_size=5120, num_attention_heads=40, num_hidden_layers=48,
                        layout="interleaved", no_rope_layers=("no_rope_layer_interval", 4)),
    "smollm3": dict(theta=2e6, hidden_size=2048, num_attention_heads=16, num_hidden_layers=36,
                    no_rope_layers=("no_rope_layer_interval", 4)),
    "cohere2": dict(head_dim="computed", hidden_size=8192, num_attention_heads=64, num_hidden_layers=40,
                    layout="interleaved",
                    layer_types=("every", "sliding_window_pattern", 4, "full_attention", "sliding_attention"),
                    rope_on=("sliding_attention",)),
    "modernbert": dict(theta={"full_attention": 160000.0, "sliding_attention": 10000.0}, hidden_size=768,
                       num_attention_heads=12, num_hidden_layers=22,
                       layer_types=("first_of", "global_attn_every_n_layers", 3, "full_attention", "sliding_attention"),
                       legacy={"global_rope_theta": "full_attention", "local_rope_theta": "sliding_attention"}),
    "glm": dict(head_dim=128, hidden_size=4096, num_attention_heads=32, num_hidden_layers=40, partial=0.5,
                layout="interleaved"),
    "glm4": dict(head_dim=128, hidden_size=4096, num_attention_heads=32, num_hidden_layers=40, partial=0.5,
                 layout="interleaved"),
    "roformer": dict(hidden_size=768, num_attention_heads=12, num_hidden_layers=12, layout="interleaved",
                     rotates_value_key="rotary_value"),
}
# Multimodal wrappers whose text model is in `text_config` (or, in older files, flat at the top).
_TEXT_OF = {"qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text", "qwen3_vl": "qwen3_vl_text",
            "qwen3_5": "qwen3_5_text", "gemma3": "gemma3_text", "llama4": "llama4_text"}
_NOT_SCALING = ("rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved", "type",
                "llama_4_scaling_beta")
# The model types read by the hand-written rules above (they take precedence over the registry's).
SUPPORTED_MODEL_TYPES = tuple(sorted(_FAMILIES)) + tuple(sorted(_TEXT_OF))


@functools.cache
def registry() -> dict[str, Any]:
  """The RoPE registry: per transformers model_type, what its code was observed to do (hf_registry.json, made by
  scripts/make_hf_rope_registry.py from transformers' own code; `registry()["versions"]` says which)."""
  with resources.files("roformer_jax.rope").joinpath("hf_registry.json").open() as f:
    return json.load(f)


def _made_from() -> str:
  return ", ".join(f"{k} {v}" for k, v in registry()["versions"].items() if k != "torch")


def hf_families() -> tuple[str, ...]:
  """The names `from_hf_config(..., family=...)` takes: the hand-verified families and every model_type the
  registry reads exactly."""
  exact = {mt for mt, e in registry()["model_types"].items() if e["status"] == "exact" and "family" in e}
  return tuple(sorted(set(SUPPORTED_MODEL_TYPES) | exact))


def _family(name: str) -> dict[str, Any]:
  """The reading rules of a family: hand-written (`_FAMILIES`, verified by tests/golden/hf_rope_families) first,
  then the registry's observed ones."""
  if name in _FAMILIES:
    return _FAMILIES[name]
  entry = registry()["model_types"].get(name)
  if entry is None or entry["status"] != "exact":
    raise ValueError(f"family={name!r} is not a family read exactly here; use one of rope.hf_families() "
                     f"({len(hf_families())} names, e.g. 'llama', 'qwen2', 'cohere').")
  return entry["family"]


def _observed(model_type: Any) -> dict[str, Any]:
  """What the registry observed of a model type that the reading rules must follow whoever wrote them: a rotary
  class that ignores partial_rotary_factor (Llama), the M-RoPE sections it defaults (Qwen2-VL: [16, 24, 24])."""
  entry = registry()["model_types"].get(model_type) if isinstance(model_type, str) else None
  rotations = (entry or {}).get("rotations") or []
  out: dict[str, Any] = {}
  if rotations and all(r.get("follows", {}).get("partial_rotary_factor") is False for r in rotations):
    out["ignores_partial"] = True
  sections = {json.dumps(r.get("mrope")) for r in rotations}
  if len(sections) == 1 and rotations[0].get("mrope"):
    out["mrope_sections"] = rotations[0]["mrope"]["sections"]
  return out


def _part_family(entry: Mapping[str, Any], part: str | None, who: str, what: str) -> dict[str, Any]:
  """The family of the named part of a registry entry whose parts (or streams) rotate differently; else refused,
  naming its parts."""
  if part not in entry["parts"]:
    named = "no part" if part is None else f"part={part!r}"
    raise ValueError(f"{who}: its {what} rotate differently, so the part to read must be named, and {named} is not "
                     f"one of them: pass part= one of {sorted(entry['parts'])} ({_made_from()}).")
  return entry["parts"][part]


def _ltx_frequencies(width: int, axes: int, theta: float) -> list[float]:
  """LTX and LTX-2's pair frequencies over a rotated width W: n = W // (2 axes) frequencies theta ** (k / (n - 1))
  * pi / 2, pair pad + axes * k + a turning axis a by the k-th, after pad = W // 2 - axes * n unturned pairs."""
  n = width // (2 * axes)
  pad = width // 2 - axes * n
  return [0.0] * pad + [float(theta ** (((q - pad) // axes) / (n - 1)) * math.pi / 2) for q in range(pad, width // 2)]


def _from_diffusers(cfg: Mapping[str, Any], class_name: Any, part: str | None = None) -> RotaryConfig:
  """The spec of an observed diffusers class (Flux and the models built on it), or its refusal.

  A diffusers config.json holds its class's init arguments; a key it lacks takes the class's
  default, as diffusers' ConfigMixin does when it builds the model (the registry recorded it).
  A class whose streams rotate differently (its video and its caption, or its audio) records one
  family per part: `part` names which, and is required there and refused elsewhere.
  """
  entry = registry().get("diffusers", {}).get(class_name) if isinstance(class_name, str) else None
  if entry is None or entry.get("status") != "exact":
    raise _refuse_diffusers(class_name, entry)
  if "parts" in entry:
    fam = _part_family(entry, part, f"diffusers class {class_name!r}", "streams")
  elif part is not None:
    raise ValueError(f"part={part!r}: diffusers class {class_name!r} rotates alike wherever it rotates; leave part "
                     "out.")
  else:
    fam = entry["family"]
  for key, default in fam.get("guarded", {}).items():  # a theta-like key the rotation was not seen to follow
    if cfg.get(key, default) != default:
      raise ValueError(f"{class_name}: the config sets {key}={cfg[key]!r}, but the registry observed its rotation not to "
                       f"follow {key} (seen only at {key}={default!r}; {_made_from()}): what another value changes is "
                       "not read.")
  for key, default in fam.get("required", {}).items():  # HiDream: its class default does not run, so no default
    if cfg.get(key) is None:
      raise ValueError(f"{class_name}: the config must give {key}; the class default {default!r} does not run in "
                       f"diffusers (the registry observed {fam.get('axes_default')!r}, the split its checkpoints "
                       f"ship; {_made_from()}).")
  for key, default in fam.get("positions_guarded", {}).items():  # CogVideoX 1.5's patch_size_t
    if cfg.get(key, default) != default:
      raise ValueError(f"{class_name}: the config sets {key}={cfg[key]!r}; its pipeline then builds the rotary "
                       f"positions by another rule, which the registry did not observe (seen only at {key}="
                       f"{default!r}; {_made_from()}).")
  if "ltx2" in fam:
    return _from_ltx2(cfg, class_name, fam)
  if "ltx" in fam:
    return _from_ltx(cfg, class_name, fam)
  if "longrope" in fam:
    return _from_longrope(cfg, class_name, fam)
  if "learned" in fam:  # Mochi: dense learned frequencies, from its checkpoint's pos_frequencies
    head_dim = cfg.get(fam["head_dim_key"], fam["head_dim_default"])
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 6 or head_dim % 2:
      raise ValueError(f"{class_name}: {fam['head_dim_key']}={head_dim!r} must be an even int >= 6.")
    k, axes = head_dim // 2, fam["learned"]["axes"]
    # sections: one entry per position axis, adding up to the pairs (only their number is read: every pair turns by
    # every axis, pair k of head n by sum_a pos_a F[a, n, k], F = its checkpoint's pos_frequencies)
    return RotaryConfig(theta=float(fam["theta"]), layout=fam["layout"], frequencies="mixed",
                        sections=(k - (axes - 1) * (k // axes), *([k // axes] * (axes - 1))))
  head_key = fam.get("head_dim_key")
  head_dim = cfg.get(head_key) if head_key else None
  if fam.get("head_dim_from"):  # Stable Audio 3: its head is embed_dim / num_heads
    width, heads, width_default, heads_default = fam["head_dim_from"]
    w, n = cfg.get(width, width_default), cfg.get(heads, heads_default)
    if not isinstance(w, int) or not isinstance(n, int) or n <= 0 or w % n:
      raise ValueError(f"{class_name}: {width}={w!r} must be a multiple of {heads}={n!r} (its head dim).")
    head_key, head_dim = f"{width} / {heads}", w // n
  if "axes_sum_key" in fam:  # Kandinsky 6's caption: one axis over its text blocks' whole head, sum(axes_dims)
    sum_key = fam["axes_sum_key"]
    dims = cfg.get(sum_key)
    if dims is None:
      dims = fam["axes_sum_default"]
    if not isinstance(dims, (list, tuple)) or not dims or any(
        isinstance(d, bool) or not isinstance(d, int) or d < 2 or d % 2 for d in dims):
      raise ValueError(f"{class_name}: {sum_key}={dims!r} must be a list of positive even ints (its head dim is their "
                       "sum, which its caption's 1-D RoPE spans).")
    axes = [sum(dims)]
  elif "axes_key" in fam:
    axes = cfg.get(fam["axes_key"])
    if axes is None:  # absent, or null in config.json (PRX: the class then fills in its default split)
      axes = fam["axes_default"]
  else:  # Wan: the head's split over (t, h, w) follows from its head dim by the model's own arithmetic
    if head_dim is not None and head_dim != fam["head_dim_default"]:
      raise ValueError(f"{class_name} splits its head over its position axes by its own arithmetic, observed at "
                       f"{head_key}={fam['head_dim_default']} only (as {fam['axes_default']}); "
                       f"{head_key}={head_dim} is not read (registry made from {_made_from()}).")
    axes = fam["axes_default"]
  rotary_dim = fam.get("rotary_dim")  # Stable Audio: the first attention_head_dim // 2 channels (its pipeline's rule)
  if "rotary_dim_key" in fam:  # MiniMax Music 3: the first `rotary_dim` channels, one axis
    rotary_dim = cfg.get(fam["rotary_dim_key"]) or fam["rotary_dim"]
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or rotary_dim < 2 or rotary_dim % 2 or (
        head_dim is not None and rotary_dim > head_dim):
      raise ValueError(f"{class_name}: {fam['rotary_dim_key']}={rotary_dim!r} must be a positive even int no larger "
                       f"than {head_key}={head_dim} (the rotated channels at the start of each head).")
    axes = [rotary_dim]
  if "sections_key" in fam:  # Ideogram 4's mrope_section: axes 1.. take their pairs, axis 0 the rest of the head
    given = cfg.get(fam["sections_key"])
    if given is None and fam.get("sections_fallback"):  # Cosmos3-Omni: with rope_axes_dim null, its class reads
      outer, inner = fam["sections_fallback"]  # rope_scaling["mrope_section"] (observed; no other key of it is read)
      sub = cfg.get(outer)
      if sub is not None and not isinstance(sub, Mapping):
        raise ValueError(f"{class_name}: {outer}={sub!r} must be a dict (its {inner!r} splits the pairs over the "
                         "position axes) or null.")
      given = None if sub is None else sub.get(inner)
    given = given or fam["sections_default"]
    if not isinstance(given, (list, tuple)) or len(given) != len(fam["axes_default"]) or any(
        isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in given):
      raise ValueError(f"{class_name}: {fam['sections_key']}={given!r} must be {len(fam['axes_default'])} positive "
                       "ints (the pairs each position axis takes).")
    rest = sum(fam["axes_default"]) // 2 - sum(given[1:])
    if rest < 1:
      raise ValueError(f"{class_name}: {fam['sections_key']}={list(given)} leaves no pairs of its "
                       f"{sum(fam['axes_default']) // 2} for the first axis.")
    axes = [2 * rest, *(2 * n for n in given[1:])]
  if not isinstance(axes, (list, tuple)) or not axes or any(
      isinstance(d, bool) or not isinstance(d, int) or d < 2 or d % 2 for d in axes):
    raise ValueError(f"{class_name}: {fam.get('axes_key')}={axes!r} must be a list of positive even ints (the "
                     "rotated channels per position axis).")
  if head_dim is not None and sum(axes) != head_dim and "rotary_dim" not in fam:
    raise ValueError(f"{class_name}: {fam.get('axes_key')}={list(axes)} adds up to {sum(axes)} channels, but "
                     f"{head_key}={head_dim}; {class_name} rotates every channel of its heads.")
  theta = fam["theta"] if "theta" in fam else cfg.get(fam["theta_key"], fam["theta_default"])
  if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
    raise ValueError(f"{class_name}: {fam.get('theta_key')}={theta!r} must be a positive number.")
  layout, blocks = fam["layout"], 1
  if layout.startswith("half") and layout != "half":  # Allegro: rotate_half inside each axis's block ("half3")
    layout, blocks = "half", int(layout[len("half"):])
  frequencies: Any = fam["frequencies"]
  if "ntk_key" in fam:  # Cosmos: axis a's own spectrum, of theta * scale_a ** (d_a / (d_a - 2))
    frequencies = _ntk_frequencies(cfg, class_name, fam, axes, float(theta))
  return RotaryConfig(theta=float(theta), layout=layout, sections=tuple(d // 2 for d in axes),
                      frequencies=frequencies, blocks=blocks,
                      section_layout=fam.get("section_layout", "chunked"),  # Ideogram 4: interleaved M-RoPE
                      rotary_dim=rotary_dim)  # Stable Audio, MiniMax Music 3: the first R channels of each head


def _ntk_frequencies(cfg: Mapping[str, Any], class_name: str, fam: Mapping[str, Any], axes: Any,
                     theta: float) -> tuple[float, ...]:
  """Cosmos: each axis a (d_a channels) turns by its own spectrum theta_a ** (-2j / d_a), theta_a = theta *
  scale_a ** (d_a / (d_a - 2)), scale_a from the observed key (rope_scale, (t, h, w)); frequencies per pair in the
  chunked order of `axes`."""
  key = fam["ntk_key"]
  scales = cfg.get(key)
  if scales is None:
    scales = fam["ntk_default"]
  if not isinstance(scales, (list, tuple)) or len(scales) != len(axes) or any(
      isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in scales):
    raise ValueError(f"{class_name}: {key}={scales!r} must be {len(axes)} positive numbers (one per position axis "
                     f"(t, h, w), each axis's theta scaled by {key}[a] ** (d_a / (d_a - 2))).")
  out: list[float] = []
  for d, scale in zip(axes, scales, strict=True):
    out.extend(default_inv_freq(d, theta * float(scale) ** (d / (d - 2))).tolist())
  return tuple(out)


def _from_longrope(cfg: Mapping[str, Any], class_name: str, fam: Mapping[str, Any]) -> RotaryConfig:
  """OmniGen: Phi-3's LongRoPE over its whole head (hidden_size / num_attention_heads, observed at its default only),
  rotate_half, its factors from rope_scaling's short_factor and long_factor (the only keys of it the class reads),
  long once max(position) + 1 passes original_max_position_embeddings (pass that as `seq_len`), cos and sin scaled
  by sqrt(1 + ln s / ln original) for s = max_position_embeddings / original_max_position_embeddings."""
  lr = fam["longrope"]
  width, heads, width_default, heads_default = fam["head_dim_from"]
  w, n = cfg.get(width, width_default), cfg.get(heads, heads_default)
  if not isinstance(w, int) or not isinstance(n, int) or n <= 0 or w % n or w // n != fam["head_dim_default"]:
    raise ValueError(f"{class_name}: its head dim {width} / {heads} = {w!r} / {n!r} was observed at "
                     f"{fam['head_dim_default']} only ({_made_from()}); another is not read.")
  head_dim = w // n
  scaling = cfg.get(lr["key"])
  if not isinstance(scaling, Mapping):
    raise ValueError(f"{class_name}: {lr['key']}={scaling!r} must be a dict with short_factor and long_factor (its "
                     "LongRoPE factors; the class default None does not run).")
  factors = {}
  for key in ("short_factor", "long_factor"):
    f = scaling.get(key)
    if not isinstance(f, (list, tuple)) or len(f) != head_dim // 2 or any(
        isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in f):
      raise ValueError(f"{class_name}: {lr['key']}[{key!r}] must be {head_dim // 2} positive numbers (one per pair "
                       f"of its head of {head_dim}), got {f!r}.")
    factors[key] = tuple(float(v) for v in f)
  lengths = {}
  for key, default in ((lr["original_key"], lr["original_default"]), (lr["max_key"], lr["max_default"])):
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 2:
      raise ValueError(f"{class_name}: {key}={v!r} must be an int >= 2.")
    lengths[key] = v
  theta = cfg.get(fam["theta_key"], fam["theta_default"])
  if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
    raise ValueError(f"{class_name}: {fam['theta_key']}={theta!r} must be a positive number.")
  return RotaryConfig(theta=float(theta), layout="half", scaling={
      "rope_type": "longrope", **factors,
      "original_max_position_embeddings": lengths[lr["original_key"]],
      "max_position_embeddings": lengths[lr["max_key"]]})


def _from_ltx(cfg: Mapping[str, Any], class_name: str, fam: Mapping[str, Any]) -> RotaryConfig:
  """LTX: one rotation over the whole attention width W = heads * attention_head_dim (q before its heads split):
  `ltx_pair_layout(W)`'s unturned pairs in front, then pair pad + 3k + a turning axis a (t, h, w) by
  theta ** (k / (n - 1)) * pi / 2, n = W // 6, as interleaved M-RoPE over the axes in `ltx_positions`' order
  (its guarded patch sizes are checked by `_from_diffusers` first)."""
  ltx = fam["ltx"]
  heads = cfg.get(ltx["heads_key"], ltx["heads_default"])
  head_dim = cfg.get(fam["head_dim_key"], fam["head_dim_default"])
  if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1 or isinstance(head_dim, bool) or \
      not isinstance(head_dim, int) or head_dim < 1:
    raise ValueError(f"{class_name}: {ltx['heads_key']}={heads!r} and {fam['head_dim_key']}={head_dim!r} must be "
                     "positive ints (its rotation spans every head).")
  width = heads * head_dim
  _, sections, _ = ltx_pair_layout(width)
  theta = float(fam["theta"])
  return RotaryConfig(theta=theta, layout="interleaved", sections=tuple(sections), section_layout="interleaved",
                      frequencies=tuple(_ltx_frequencies(width, 3, theta)))


def _from_ltx2(cfg: Mapping[str, Any], class_name: str, fam: Mapping[str, Any]) -> RotaryConfig:
  """LTX-2: a part (its video, its audio, or a stream's side of their cross-attentions) rotated over its whole
  attention width W (the product of its width keys): n = len(axes) position axes, W // (2n) frequencies
  theta ** linspace(0, 1, W // (2n)) * pi / 2, pair pad + n k + a turning axis a by frequency k after pad unturned
  pairs, as interleaved M-RoPE. rope_type "interleaved": pairs (2i, 2i + 1) of the width; "split": the width in the
  rotary module's heads (its heads key), rotate_half inside each (`blocks`). Its guarded keys are checked first."""
  l2 = fam["ltx2"]
  sizes = [cfg.get(k, d) for k, d in zip(l2["width_keys"], l2["width_defaults"], strict=True)]
  heads = cfg.get(l2["heads_key"], l2["heads_default"])
  for key, v in (*zip(l2["width_keys"], sizes, strict=True), (l2["heads_key"], heads)):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
      raise ValueError(f"{class_name}: {key}={v!r} must be a positive int.")
  width = math.prod(sizes)
  n = int(l2["axes"])
  nf = width // (2 * n)
  if width % 2 or nf < 2:
    raise ValueError(f"{class_name}: its rotated width {' * '.join(l2['width_keys'])} = {width} must be even and give "
                     f"at least 2 frequencies per position axis ({n} axes).")
  rope_type = cfg.get(l2["rope_type_key"], l2["rope_type_default"])
  if rope_type not in l2["rope_types"]:
    raise ValueError(f"{class_name}: {l2['rope_type_key']}={rope_type!r} is not one of {l2['rope_types']} (the ones "
                     f"observed; {_made_from()}).")
  theta = cfg.get(fam["theta_key"], fam["theta_default"])
  if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
    raise ValueError(f"{class_name}: {fam['theta_key']}={theta!r} must be a positive number.")
  freqs = _ltx_frequencies(width, n, float(theta))
  sections = tuple(sum(1 for q in range(width // 2) if q % n == b) for b in range(n))
  layout, blocks = "interleaved", 1
  if rope_type == "split":  # each head rotate_half'd on its own, head h taking pairs h r .. (h + 1) r - 1
    if (width // 2) % heads:
      raise ValueError(f"{class_name}: {l2['heads_key']}={heads} must divide the {width // 2} pairs of its rotated "
                       "width (its split rope_type turns each head apart).")
    layout, blocks = "half", heads
  return RotaryConfig(theta=float(theta), layout=layout, blocks=blocks, sections=sections,
                      section_layout="interleaved", frequencies=tuple(freqs))


def _pixel_windows(cfg: Mapping[str, Any], model_type: str, win: Mapping[str, Any], layer: int | None) -> None:
  """Checks what a windowed tower's config says about its layers (SAM 3: window_size, global_attn_indexes), as the
  registry observed them: the spec is one for every layer, but the positions differ by layer kind, which
  `rope.sam3_positions` gives; a config it cannot read so is refused."""
  num_layers = cfg.get("num_hidden_layers", win["num_hidden_layers"])
  window = cfg.get(win["window_key"], win["window_default"])
  whole = cfg.get(win["global_key"], win["global_default"])
  if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
    raise ValueError(f"model_type {model_type!r}: {win['window_key']}={window!r} must be a positive window side.")
  if not isinstance(whole, (list, tuple)) or not all(isinstance(i, int) and 0 <= i < num_layers for i in whole):
    raise ValueError(f"model_type {model_type!r}: {win['global_key']}={whole!r} must list layers of its "
                     f"{num_layers}.")
  for key in ("image_size", "patch_size"):  # its global layers scale both axes by window / the grid's width
    side = cfg.get(key)
    if isinstance(side, (list, tuple)) and len(set(side)) > 1:
      raise ValueError(f"model_type {model_type!r}: {key}={side!r} is not square; the registry observed its global "
                       "layers' positions (scaled by window / the grid's width on both axes) on a square image only "
                       f"({_made_from()}).")
  if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < num_layers):
    raise ValueError(f"layer={layer!r} is not a layer of this {num_layers}-layer model.")


def _pixel_width(cfg: Mapping[str, Any], model_type: str, fam: Mapping[str, Any], params: Any) -> int:
  """The rotated width of a tower that rotates q whole, before splitting it into heads (EfficientLoFTR): its
  hidden_size, which the registry observed the width to follow. The keys that also set how many frequencies its
  rotary module computes (the head count, head_dim, partial_rotary_factor) are read only at the values observed: the
  model's own code needs them to give hidden_size / 4 frequencies, and only the observed ones were run."""
  width = fam["width"]
  seen = dict(width["observed"])
  given = {"num_attention_heads": cfg.get("num_attention_heads", seen["num_attention_heads"]),
           "head_dim": cfg.get("head_dim", seen["head_dim"]),
           "partial_rotary_factor": (params.get("partial_rotary_factor", seen["partial_rotary_factor"])
                                     if isinstance(params, Mapping) else seen["partial_rotary_factor"])}
  for key, value in given.items():
    if value != seen[key]:
      raise ValueError(f"model_type {model_type!r}: {key}={value!r} is not read: this tower rotates q whole (its "
                       f"{width['key']} channels) before splitting heads, and the registry observed it at {key}="
                       f"{seen[key]!r} only, which with the others sets how many frequencies it computes "
                       f"({_made_from()}).")
  hidden = cfg.get(width["key"], fam["hidden_size"])
  if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden <= 0:
    raise ValueError(f"model_type {model_type!r}: {width['key']}={hidden!r} must be a positive int (the width it "
                     "rotates).")
  return hidden


def _pixel_memory(cfg: Mapping[str, Any], model_type: str, mem: Mapping[str, Any], layer: int | None) -> None:
  """Checks the grid keys of a video tracker's memory attention (SAM 2 video, EdgeTAM video, SAM 3 tracker video), as
  the registry observed them: [width, height] lists that `rope.sam2_memory_positions` takes as height = [1],
  width = [0]. Its one spec rotates q at the frame's grid and k at the memory's positions in every layer."""
  for key, default in ((mem["grid_key"], mem["grid_default"]), (mem.get("key_grid_key"), mem.get("key_grid_default"))):
    if key is None:
      continue
    sizes = cfg.get(key, default)
    if not isinstance(sizes, (list, tuple)) or len(sizes) != 2 or \
        not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes):
      raise ValueError(f"model_type {model_type!r}: {key}={sizes!r} must be [width, height] in positive ints.")
  num_layers = cfg.get(mem["layers_key"], mem["layers_default"])
  if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < num_layers):
    raise ValueError(f"layer={layer!r} is not a layer of this {num_layers}-layer memory attention.")


def _pixel_queries(cfg: Mapping[str, Any], model_type: str, q: Mapping[str, Any], layer: int | None) -> None:
  """Checks what a tower's config says about the query tokens its last layers put first (EoMT: num_queries in the
  last num_blocks layers), as the registry observed them: unrotated (at position 0), so the spec is one for every
  layer, and only the count of tokens before the patches differs by layer; a config it cannot read so is refused."""
  num_layers = cfg.get("num_hidden_layers", q["num_hidden_layers"])
  count = cfg.get(q["count_key"], q["count_default"])
  layers = cfg.get(q["layers_key"], q["layers_default"])
  if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers <= 0:
    raise ValueError(f"model_type {model_type!r}: num_hidden_layers={num_layers!r} must be a positive int.")
  if isinstance(count, bool) or not isinstance(count, int) or count < 0:
    raise ValueError(f"model_type {model_type!r}: {q['count_key']}={count!r} must be a count of query tokens.")
  if isinstance(layers, bool) or not isinstance(layers, int) or not 0 <= layers <= num_layers:
    raise ValueError(f"model_type {model_type!r}: {q['layers_key']}={layers!r} must count its last layers, of its "
                     f"{num_layers}.")
  if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < num_layers):
    raise ValueError(f"layer={layer!r} is not a layer of this {num_layers}-layer model.")


def _from_pixel(cfg: Mapping[str, Any], model_type: str, fam: Mapping[str, Any],
                layer: int | None = None) -> RotaryConfig:
  """The spec of a vision tower the registry observed on an image: each image axis an equal share of the head's
  pairs, theta from the key it was seen to follow, the head dim as hidden_size / num_attention_heads (or head_dim),
  which the observation also followed (or, for a tower that rotates q whole before splitting heads, EfficientLoFTR,
  hidden_size: `_pixel_width`). Positions: `rope.grid_positions` as the registry's numbering says; for a
  windowed tower (SAM 3) `rope.sam3_positions`, by layer kind (the spec is the same for every layer); for a tower
  whose last layers put query tokens first (EoMT), those count among the `cls_tokens` at 0 in those layers."""
  if fam.get("sub"):  # the keys its attention reads are in this sub-config (SAM 3's vision model: backbone_config)
    sub = cfg.get(fam["sub"])
    cfg = dict(sub) if isinstance(sub, Mapping) else {}
  if fam.get("windows"):
    _pixel_windows(cfg, model_type, fam["windows"], layer)
  if fam.get("queries"):  # EoMT: query tokens first, at position 0 (unrotated), in its last layers
    _pixel_queries(cfg, model_type, fam["queries"], layer)
  params = cfg.get("rope_parameters") or cfg.get("rope_scaling")
  observed = fam.get("rope_type") or "default"
  if isinstance(params, Mapping) and params.get("rope_type", params.get("type", observed)) != observed:
    raise ValueError(f"model_type {model_type!r}: rope_type {params.get('rope_type', params.get('type'))!r} is not "
                     f"read: the registry observed this tower with its own rope_type {observed!r} only "
                     f"({_made_from()}).")
  given = {"rope_theta": cfg.get("rope_theta"),  # where a config.json may hold theta: the observed key is read
           "rope_parameters.rope_theta": params.get("rope_theta") if isinstance(params, Mapping) else None}
  key = fam.get("theta_key")
  theta = given[key] if key in given and given[key] is not None else fam["theta_default"]
  for where, value in given.items():  # a theta where the observation did not see the tower read one: not guessed
    if value is not None and where != key and value != theta:
      raise ValueError(f"model_type {model_type!r}: the config sets {where}={value!r}, but the registry observed this "
                       f"tower read its theta from {key or 'no key'} ({theta!r} here; {_made_from()}).")
  if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
    raise ValueError(f"model_type {model_type!r}: rope_theta={theta!r} must be a positive number.")
  if fam.get("memory"):
    _pixel_memory(cfg, model_type, fam["memory"], layer)
  head_dim = cfg.get("head_dim", fam.get("head_dim"))
  if fam.get("width"):  # q rotated whole before its heads split (EfficientLoFTR): the rotated width is hidden_size
    head_dim = _pixel_width(cfg, model_type, fam, params)
  elif fam.get("head_dim_keys"):  # a memory attention's (SAM 2 video): hidden // (downsample_rate * heads), each key
    # observed to move it
    values = [cfg.get(k, d) for k, d in zip(fam["head_dim_keys"], fam["head_dim_defaults"], strict=True)]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values) or \
        values[0] % (values[1] * values[2]):
      keys = ", ".join(f"{k}={v!r}" for k, v in zip(fam["head_dim_keys"], values, strict=True))
      raise ValueError(f"model_type {model_type!r}: {keys} must be positive ints, the first a multiple of the "
                       "product of the others (the head dim it rotates).")
    head_dim = values[0] // (values[1] * values[2])
  elif head_dim is None:
    hidden = cfg.get("hidden_size", fam["hidden_size"])
    heads = cfg.get("num_attention_heads", fam["num_attention_heads"])
    if not isinstance(hidden, int) or not isinstance(heads, int) or heads <= 0 or hidden % heads:
      raise ValueError(f"model_type {model_type!r}: hidden_size={hidden!r} must be a multiple of "
                       f"num_attention_heads={heads!r} (the head dim it rotates).")
    head_dim = hidden // heads
  axes = len(fam["axes_default"])
  if not isinstance(head_dim, int) or head_dim % (2 * axes):
    raise ValueError(f"model_type {model_type!r}: its head dim {head_dim!r} must split into {axes} equal even shares "
                     "(one per image axis), as the registry observed it does.")
  sections = (head_dim // (2 * axes),) * axes
  frequencies: Any = fam["frequencies"]
  if fam["numbering"]["scale"] == "centre_2pi":  # DINOv3: angle 2 pi c f at centred coordinates c in (-1, 1)
    frequencies = tuple((2 * math.pi * pair_frequencies(2 * sum(sections), float(theta), sections=sections,
                                                        kind=frequencies)).tolist())
  section_layout = fam.get("section_layout", "chunked")  # Kimi-K2.5: the axes take alternate pairs ("interleaved")
  layout, blocks = ("half", 2) if fam["layout"] == "half2" else (fam["layout"], 1)  # Gemma 4: half inside halves
  if fam.get("class_angles"):  # MLCD: its class token turns by learned angles, on an axis of its own: dense
    # frequencies [3, R/2] over (row, column, class) (`hf_frequencies`); sections only say there are 3 axes
    k = head_dim // 2
    return RotaryConfig(theta=float(theta), layout=layout, frequencies="mixed", blocks=blocks,
                        sections=(k - 2 * (k // 3), k // 3, k // 3))
  return RotaryConfig(theta=float(theta), layout=layout, sections=sections, frequencies=frequencies, blocks=blocks,
                      section_layout=section_layout)


def _keypoint_head_dim(cfg: Mapping[str, Any], model_type: str, fam: Mapping[str, Any]) -> int:
  """LightGlue's head dim: its width key (descriptor_dim) // num_attention_heads, as observed."""
  width = cfg.get(fam["width_key"], fam[fam["width_key"]])
  heads = cfg.get("num_attention_heads", fam["num_attention_heads"])
  for name, value in ((fam["width_key"], width), ("num_attention_heads", heads)):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
      raise ValueError(f"model_type {model_type!r}: {name}={value!r} must be a positive int.")
  if width % heads or (width // heads) % 2:
    raise ValueError(f"model_type {model_type!r}: {fam['width_key']}={width} must be num_attention_heads={heads} "
                     "times an even head dim (the head dim it rotates).")
  return width // heads


def _from_keypoints(cfg: Mapping[str, Any], model_type: str, fam: Mapping[str, Any]) -> RotaryConfig:
  """An image matcher's keypoint rotation (LightGlue): dense learned frequencies F [2, R/2] over the keypoints'
  normalised (x, y) (`rope.keypoint_positions`), F its positional encoder's projector weight transposed
  (`hf_frequencies`); sections only say there are 2 axes."""
  k = _keypoint_head_dim(cfg, model_type, fam) // 2
  return RotaryConfig(layout=fam["layout"], frequencies="mixed", sections=(k - k // 2, k // 2))


def _refuse_rope_keys(cfg: Mapping[str, Any], model_type: str, fixed: str) -> None:
  """Refuses a config that sets a rope key for a model observed to read none (its theta is in its code: CLVP, V-JEPA 2):
  `fixed` says what it does whatever the config says."""
  unread = sorted(k for k in ("rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor")
                  if cfg.get(k) is not None)
  if unread:
    raise ValueError(f"model_type {model_type!r}: the config sets {', '.join(unread)}, but this model reads no rope "
                     f"key: {fixed} whatever the config says ({_made_from()}); remove {unread[0]}.")


def _from_half_tables(cfg: Mapping[str, Any], model_type: str, fam: Mapping[str, Any]) -> RotaryConfig:
  """V-JEPA 2's parts (`tables="half"`, docs/rope.md): rotate_half's tables over interleaved pairs, NOT a rotation,
  in `segments` equal segments (frame, height, width) of d = 2 ((H // segments) // 2) channels of each H-wide head
  (H = one config key // another, as observed), the rest unrotated; theta fixed in the model's code (it reads no
  rope key). Positions: `rope.video_grid_positions(frames, g, g)` (g = the grid keys' ratio), token i at
  (i // g^2, (i mod g^2) // g, i mod g); the predictor's tokens at their grid ids."""
  _refuse_rope_keys(cfg, model_type, f"it turns by theta {fam['theta']:g}")
  num, den = fam["head_dim_keys"]
  values = {k: cfg.get(k, fam["head_dim_key_defaults"][k]) for k in (num, den)}
  if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values.values()) or \
      values[num] % values[den]:
    raise ValueError(f"model_type {model_type!r}: its head width is {num} // {den}, which needs positive integers "
                     f"with {den} dividing {num}; got {values}.")
  head_dim, segments = values[num] // values[den], int(fam["segments"])
  width = 2 * ((head_dim // segments) // 2)
  if width < 2:
    raise ValueError(f"model_type {model_type!r}: a head of {head_dim} channels leaves its {segments} rotated "
                     "segments no channel pair.")
  return RotaryConfig(theta=float(fam["theta"]), layout="interleaved", tables="half", blocks=segments,
                      sections=(width // 2,) * segments, frequencies="per_axis", rotary_dim=segments * width)


def hf_frequencies(config: Mapping[str, Any], parameters: Mapping[str, Any], *,
                   layer: int | None = None) -> np.ndarray:
  """The frequencies a learned spec from `from_hf_config(config)` rotates by, from the model's parameters.

  For a vision tower whose class token turns by learned angles of its own (MLCD's `class_pos_emb`): float32[3, R/2]
  over (row, column, class), the positions `rope.grid_positions(h, w, cls="first", cls_axis=True)`: row and column
  each turn their own pairs by the patches' 2-D RoPE (theta and head dim from the config, as `from_hf_config` reads
  them), and every pair of the class token (at (0, 0, 1)) turns by the parameter's angle. Pass them to
  `spec.apply(x, positions, frequencies=F)`.

  For an image matcher's keypoints (LightGlue's `positional_encoder.projector.weight` W [R/2, 2]): float32[2, R/2] =
  W^T, over the keypoints' positions `rope.keypoint_positions(keypoints, height, width)` (x, y).

  Args:
    config: the tower's config.json as a dict.
    parameters: its checkpoint's parameters by name (a state dict, NumPy arrays or anything array-like): the one the
      registry names (`class_pos_emb`), or one name ending in "." + that name (a checkpoint of a larger model).
    layer: as for `from_hf_config`.

  Raises:
    ValueError: a config whose spec learns no frequencies so (Mochi's pos_frequencies are the layer's own, docs/rope.md),
      a missing or ambiguous parameter, or one of the wrong size.
  """
  spec = from_hf_config(config, layer=layer)
  model_type = config.get("model_type")
  entry = registry()["model_types"].get(model_type) if isinstance(model_type, str) else None
  keypoints = (entry or {}).get("keypoints")
  if keypoints:
    return _keypoint_frequencies(config, str(model_type), keypoints, parameters)
  fam = (entry or {}).get("pixel") or {}
  if spec is None or not fam.get("class_angles"):
    raise ValueError(f"model_type {model_type!r}: the registry knows no learned class-token angles for it "
                     f"({_made_from()}); hf_frequencies builds them for a tower whose class token turns by its own "
                     "(MLCD).")
  name = fam["class_angles"]["parameter"]
  held = [k for k in parameters if k == name or str(k).endswith("." + name)]
  if len(held) != 1:
    raise ValueError(f"model_type {model_type!r}: its class token turns by the angles of its parameter {name!r}; the "
                     f"parameters hold {'none' if not held else 'several: ' + ', '.join(map(str, held))} of that name.")
  angles = np.asarray(parameters[held[0]], np.float64).reshape(-1)
  grid = _from_pixel(dict(config), str(model_type), {k: v for k, v in fam.items() if k != "class_angles"}, layer)
  k = sum(grid.sections or ())
  if angles.shape != (k,) or not np.isfinite(angles).all():
    raise ValueError(f"model_type {model_type!r}: {held[0]} holds {angles.size} values; its class token turns each "
                     f"of its {k} pairs by one (finite) angle.")
  freqs = pair_frequencies(2 * k, grid.theta, sections=grid.sections, kind=grid.frequencies,
                           layout=grid.section_layout)
  owner = pair_axes(grid.sections, k, layout=grid.section_layout)
  dense = np.zeros((len(grid.sections or ()) + 1, k), np.float64)
  dense[owner, np.arange(k)] = freqs
  dense[-1] = angles
  return dense.astype(np.float32)


def _held(model_type: str, name: str, parameters: Mapping[str, Any], what: str) -> Any:
  held = [k for k in parameters if k == name or str(k).endswith("." + name)]
  if len(held) != 1:
    raise ValueError(f"model_type {model_type!r}: {what} {name!r}; the parameters hold "
                     f"{'none' if not held else 'several: ' + ', '.join(map(str, held))} of that name.")
  return held[0]


def _keypoint_frequencies(config: Mapping[str, Any], model_type: str, fam: Mapping[str, Any],
                          parameters: Mapping[str, Any]) -> np.ndarray:
  """LightGlue: F = W^T [2, R/2], W its positional encoder's projector weight [R/2, 2] (pair k turns by
  x W[k, 0] + y W[k, 1])."""
  name = fam["parameter"]
  key = _held(model_type, name, parameters, "its keypoints turn by its parameter")
  k = _keypoint_head_dim(config, model_type, fam) // 2
  weight = np.asarray(parameters[key], np.float64)
  if weight.shape != (k, 2) or not np.isfinite(weight).all():
    raise ValueError(f"model_type {model_type!r}: {key} has shape {weight.shape}; its keypoints turn each of its {k} "
                     f"pairs by a (finite) weight per coordinate (x, y): shape ({k}, 2).")
  return weight.T.astype(np.float32)


def _refuse_diffusers(class_name: Any, entry: Mapping[str, Any] | None) -> ValueError:
  if entry is None:
    return ValueError(f"diffusers class {class_name!r} is not in the RoPE registry (made from {_made_from()}); "
                      "nothing is guessed.")
  return ValueError(f"diffusers class {class_name!r} is refused: {entry['reason']} (registry made from "
                    f"{_made_from()}). Build its spec from the multi-axis layouts in docs/rope.md.")


def _refuse(model_type: Any, entry: Mapping[str, Any] | None) -> ValueError:
  how = ("If you know the model rotates q and k exactly as one of rope.hf_families() does, say so with "
         "from_hf_config(config, family='llama') (or that family's name): an explicit assertion, never a default.")
  if entry is None:
    close = difflib.get_close_matches(str(model_type), list(registry()["model_types"]), n=3, cutoff=0.75)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return ValueError(f"model_type {model_type!r} is not in the RoPE registry (made from {_made_from()}); nothing "
                      f"is guessed.{hint} {how} A newer transformers' types: refresh the registry "
                      "(docs/development.md).")
  if entry["status"] == "no_rope":
    return ValueError(f"model_type {model_type!r} applies no RoPE in {_made_from()} (its forward calls no rotary "
                      f"function), so there is no RoPE spec to read. {how}")
  return ValueError(f"model_type {model_type!r} is refused: {entry.get('reason')} (observed in {_made_from()}: "
                    f"what its code does is not yet read exactly here, docs/hf_rope_registry.md). {how}")


def _drop_filler(cfg: Mapping[str, Any], filler: Any, model_type: Any) -> list[str]:
  """The model's layer types from a config.json whose layer_types write each layer as its type followed by k - 1
  `block` entries its config class drops (observed: Dory's (type, "mlp") pairs, kept [::2], num_hidden_layers
  halved). Only that observed form is read: a list without the blocks, or with them elsewhere, is refused."""
  block, k = filler
  given = list(cfg["layer_types"])
  kept = given[::k]
  if not given or len(given) % k or any(t != block for j, t in enumerate(given) if j % k) or block in kept:
    raise ValueError(f"model_type {model_type!r}: its config class reads layer_types as each layer's type followed by "
                     f"{k - 1} {block!r} entr{'y' if k == 2 else 'ies'} (observed in {_made_from()}); "
                     f"layer_types={given[:2 * k]}... is not in that form, and what the class makes of another is "
                     "not observed.")
  n = cfg.get("num_hidden_layers")
  if n is not None and n != len(given):
    raise ValueError(f"model_type {model_type!r}: num_hidden_layers={n} must count layer_types' {len(given)} entries "
                     f"(its config class divides both by {k}).")
  return kept


def _layer_types(cfg: Mapping[str, Any], fam: Mapping[str, Any], num_layers: int) -> list[str] | None:
  if cfg.get("layer_types") is not None:  # with the legacy names transformers renames on load ("attention")
    legacy = registry().get("legacy_layer_types", {})
    return [legacy.get(t, t) for t in cfg["layer_types"]]
  if fam.get("layer_types_key"):  # observed: a list of block types, repeated over the layers (RecurrentGemma)
    key, default = fam["layer_types_key"]
    blocks = list(cfg.get(key) or default)
    return [blocks[i % len(blocks)] for i in range(num_layers)]
  rule = fam.get("layer_types")
  if rule is None:
    default = fam.get("default_layer_types")
    if default is not None and len(default) != num_layers:
      raise ValueError(f"the config has no layer_types, and its num_hidden_layers ({num_layers}) is not the "
                       f"default's ({len(default)}), whose layer_types are known: add layer_types to the config.")
    return None if default is None else list(default)
  kind, key, default, special, other = rule
  n = int(cfg.get(key, default) if key else default)
  if kind == "every":  # layer i is `special` when (i + 1) % n == 0 (Gemma 2/3/4, Cohere2, Qwen3.5)
    types = [special if (i + 1) % n == 0 else other for i in range(num_layers)]
    if fam.get("last_layer_full"):
      types[-1] = special
    return types
  return [special if i % n == 0 else other for i in range(num_layers)]  # first_of: ModernBERT


def _rope_parameters(cfg: Mapping[str, Any], fam: Mapping[str, Any], layer_type: str | None) -> dict[str, Any]:
  """This layer type's rope parameters dict, as transformers standardises it (theta inside)."""
  params: Any = _given_parameters(cfg, fam)  # a JSON value: narrowed by `nested` below
  v4 = cfg.get("rope_scaling")
  theta_default = fam["theta"]
  per_type = isinstance(theta_default, dict)
  nested = _nested(params)
  if nested:
    if layer_type not in params:
      raise ValueError(f"rope_parameters is keyed by layer type {sorted(params)}, but layer type {layer_type!r} "
                       "has no entry.")
    p = params[layer_type]
    if p is None:
      return {}
    p = dict(p)
  elif params:
    p = dict(params)
  else:
    p = {}
    if v4 and (not per_type or fam.get("v4_scaling_to") in (None, layer_type)):
      p.update(v4)
  if not nested and not params:
    for k, v in fam.get("type_defaults", {}).get(layer_type, {}).items():
      p.setdefault(k, v)
  if per_type:  # the legacy keys that set one layer type's theta
    for key, ltype in fam.get("legacy", {}).items():
      if ltype == layer_type and key in cfg and not nested:
        p.setdefault("rope_theta", cfg[key])
    if not nested:
      # a root rope_theta / partial_rotary_factor(s) beside rope parameters the model keys by layer type, with no
      # observed reading of which types it sets (Step 3.5's per-layer lists, which its config class turns into
      # per-type parameters): refused, not ignored
      unread = sorted(k for k in cfg if _ROOT_ROPE_KEY.fullmatch(k) and k not in fam.get("legacy", {}))
      if unread:
        raise ValueError(f"the config sets {', '.join(unread)} at its root, but this model keys its rope parameters "
                         f"by layer type ({sorted(theta_default)}) and the registry observed no reading of which "
                         f"layer types a root {unread[0]} sets ({_made_from()}): give rope_parameters per layer "
                         "type as transformers saves them.")
    if layer_type not in theta_default:
      raise ValueError(f"layer type {layer_type!r} has no rope parameters in the config, and the registry observed "
                       f"this model's only for {sorted(theta_default)} ({_made_from()}): give rope_parameters per "
                       "layer type as transformers saves them.")
    p.setdefault("rope_theta", theta_default[layer_type])
  else:
    theta_key = fam.get("legacy_theta")
    p.setdefault("rope_theta", cfg.get("rope_theta", cfg.get(theta_key) if theta_key else None) or theta_default)
  p.setdefault("rope_type", p.get("type", "default"))
  if p["rope_type"] == "mrope":  # v4 Qwen2-VL: "mrope" is default RoPE with sections
    p["rope_type"] = "default"
  return p


_ROOT_ROPE_KEY = re.compile(r"rope_theta|partial_rotary_factors?")

# per_layer_config keys that do not touch q and k's rotation: a layer may override them freely.
_LAYER_NEUTRAL = frozenset({"num_key_value_heads", "intermediate_size", "moe_intermediate_size", "sliding_window",
                            "attention_chunk_size", "attention_dropout", "num_experts", "num_local_experts",
                            "num_experts_per_tok", "n_routed_experts", "n_shared_experts", "mlp_bias",
                            "hidden_act", "hidden_activation"})


def _layer_overrides(cfg: Mapping[str, Any], fam: Mapping[str, Any], index: int, model_type: Any) -> dict[str, Any]:
  """transformers 5.24's per_layer_config ({layer index: the keys that layer overrides}, for any model): this
  layer's overrides that the reading follows (the keys the registry observed the model's rotary module follow per
  layer: Gemma 4's head_dim). Any other override that could change the rotation is refused, not ignored."""
  given = cfg.get("per_layer_config")
  if given is None:
    if fam.get("per_layer_config_required"):
      raise ValueError(f"model_type {model_type!r}: its layers' head dims come from per_layer_config, and the config "
                       "has none (what the config class builds instead was not observed): add per_layer_config.")
    return {}
  if not isinstance(given, Mapping):
    raise ValueError(f"per_layer_config must map layer indices to dicts of overrides, got {given!r}.")
  overrides: Any = {}
  for key, value in given.items():
    if not str(key).isdigit() or not isinstance(value, Mapping):
      raise ValueError(f"per_layer_config[{key!r}] = {value!r}: expected a layer index (e.g. \"05\") mapping to a "
                       "dict of the config keys that layer overrides.")
    if int(key) == index:
      overrides = value
  read = set(fam.get("per_layer_keys", ()))
  for key, value in overrides.items():
    if key not in read and key not in _LAYER_NEUTRAL:
      seen = f"only per-layer {', '.join(sorted(read))}" if read else "no per-layer key"
      raise ValueError(f"model_type {model_type!r}: per_layer_config sets {key}={value!r} for layer {index}; the "
                       f"registry observed this model follow {seen} ({_made_from()}), so what a per-layer {key} does "
                       "to its rotation is not read.")
  return {k: v for k, v in overrides.items() if k in read}


def _head_dim(cfg: Mapping[str, Any], fam: Mapping[str, Any], layer_type: str | None = None,
              overrides: Mapping[str, Any] | None = None) -> int:
  if "per_layer_config" in cfg and "head_dim" in fam.get("per_layer_keys", ()):
    if overrides and overrides.get("head_dim") is not None:
      return int(overrides["head_dim"])
    # a layer per_layer_config does not list takes the root's head_dim: the builder keys of type_head_dim (Gemma 4's
    # global_head_dim) make per_layer_config only when a file has none
  elif layer_type in fam.get("type_head_dim", {}):
    key, default = fam["type_head_dim"][layer_type]
    return int(cfg.get(key) or default)
  hidden = cfg.get("hidden_size", fam.get("hidden_size"))
  heads = cfg.get("num_attention_heads", fam.get("num_attention_heads"))
  if fam.get("rope_head_dim_key"):
    return int(cfg.get(fam["rope_head_dim_key"], fam["head_dim"]))  # (a derived key: checked present before)
  if fam.get("head_dim_from"):  # observed: a vision tower's embed_dim / num_heads
    width, count, width_default, count_default = fam["head_dim_from"]
    return int(cfg.get(width) or width_default) // int(cfg.get(count) or count_default)
  if fam["head_dim"] == "computed" or (cfg.get("head_dim") is None and fam["head_dim"] is None):
    if hidden is None or heads is None:
      raise ValueError("the config gives no head_dim and no hidden_size / num_attention_heads to derive it.")
    return int(hidden) // int(heads)
  return int(cfg["head_dim"] if cfg.get("head_dim") is not None else fam["head_dim"])


def from_hf_config(config: Mapping[str, Any], *, layer: int | None = None,
                   family: str | None = None, part: str | None = None) -> RotaryConfig | None:
  """The RoPE spec of decoder layer `layer` of the model a HuggingFace config.json describes.

  Args:
    config: the config as a dict (json.load of config.json). A multimodal config's
      `text_config` is used; keys it leaves out take the defaults of the transformers config
      class of its model_type (the registry's, or `SUPPORTED_MODEL_TYPES`' hand-written ones).
      Both formats are read: v4
      (`rope_theta` + `rope_scaling` with "type" or "rope_type", `partial_rotary_factor`,
      `rotary_pct`, `rotary_dim`, `head_dim`, model-specific keys) and v5 (`rope_parameters`,
      flat or keyed by layer type). A diffusers config.json (`_class_name`, no model_type) of
      a class the registry observed gives its RoPE at the positions its pipeline builds
      (docs/hf_rope_registry.md lists every class with its positions): the Flux family at the
      ids its forward takes, text first (`rope.flux_positions`); the classes that number their
      latent grid themselves (Wan, HunyuanVideo, QwenImage, CogVideoX, ...) over (frame, row,
      column) (`rope.video_grid_positions`); Lumina 2 and Z-Image over (caption index, row,
      column) (`rope.lumina_positions`); LTX-Video, Mochi, QwenImage 2.1 and Bria-Fibo 2 by
      their own builders. Any other diffusers class is refused, naming why.
    layer: the decoder layer index; None = layer 0. Models whose layers differ (Gemma 2/3,
      Cohere2, ModernBERT, Llama 4, SmolLM3, Qwen3.5) need it to pick the layer type.
    part: for a model whose parts rotate differently, the part to read (the registry's names):
      T5Gemma's "encoder" or "decoder" stack, DeepSeek-V3.2's attention ("self_attn", interleaved
      pairs) or its indexer ("self_attn.indexer", half pairs); Kandinsky 6's "video" (per-axis
      RoPE over its latent grid, `rope.video_grid_positions(..., scale=scale_factor)`) or
      "caption" (its text blocks' 1-D RoPE over the whole head, token i at i); LTX-2's "video",
      "audio", "video_cross" and "audio_cross" (docs/rope.md, `rope.ltx2_video_positions`,
      `rope.ltx2_audio_positions`); a composite's towers by their sub-config (CLVP's "text_config" and
      "speech_config", PE-Audio's and Voxtral Realtime's "audio_config" and "text_config", Nemotron 3.5 Transcribe's
      "asr_config" and "diarization_config.audio_config"); V-JEPA 2's "encoder" and "predictor" (each its own head
      width; `tables="half"`, rotate_half's tables over interleaved pairs, which is NOT a rotation: docs/rope.md,
      positions `rope.video_grid_positions(frames, g, g)`, g = crop_size // patch_size, the predictor's tokens at
      their sorted grid ids). Such a model is
      refused without it, naming its parts; any other model is refused with it.
    family: read the config as this family (`hf_families()`) whatever its model_type says: your
      assertion that the model rotates q and k as that one does. Never implied: an unknown
      model_type is refused without it.

  Returns:
    A `RotaryConfig` whose `.apply(x, positions)` rotates x [B, T, N, H] (H = the head dim
    the model rotates; DeepSeek: qk_rope_head_dim) as that layer's attention rotates q and k
    (positions [B, T], or [B, T, 3] (t, h, w) for M-RoPE), channels past the rotary dim
    untouched, with transformers' attention factor in cos and sin; None for a layer without
    RoPE (Llama 4 / SmolLM3 NoPE layers, Cohere2's full-attention layers, Qwen3.5's linear
    attention layers).

  Raises:
    ValueError: a model_type the registry does not hold (unknown, or newer than the
      transformers it was made from), one without RoPE, or one whose mechanism RotaryConfig
      cannot express (the message names it); a layer out of range; a key the reading needs
      and the config lacks; sections that do not fit the rotary dim.
  """
  if not isinstance(config, Mapping):
    raise TypeError(f"config must be a dict (json.load of a config.json), got {type(config).__name__}.")
  cfg = dict(config)
  model_type: Any = cfg.get("model_type")  # a JSON value (None or a bad type: no family)
  if model_type is None and family is None and "_class_name" in cfg:  # a diffusers config.json
    if layer is not None:
      raise ValueError(f"layer={layer}: a diffusers transformer ({cfg['_class_name']}) rotates every layer alike; "
                       "leave layer out.")
    return _from_diffusers(cfg, cfg["_class_name"], part)
  if model_type in _TEXT_OF:
    text = cfg.get("text_config")
    cfg = dict(text) if isinstance(text, Mapping) else cfg
    cfg["model_type"] = cfg.get("model_type") or _TEXT_OF[model_type]
    if cfg["model_type"] == model_type:
      cfg["model_type"] = _TEXT_OF[model_type]
    model_type = cfg["model_type"]
  if family is not None:
    fam = _family(family)
  elif model_type in _FAMILIES:
    fam = _FAMILIES[model_type]
  else:
    entry = registry()["model_types"].get(model_type) if isinstance(model_type, str) else None
    if entry is not None and entry["status"] == "delegates":  # Llava: the text model in text_config is a Llama
      key, sub_type = next(iter(entry["sub_configs"].items()))
      sub = cfg.get(key)
      sub = dict(sub) if isinstance(sub, Mapping) else {}
      sub.setdefault("model_type", sub_type)
      return from_hf_config(sub, layer=layer, part=part)
    if entry is None or entry["status"] != "exact":
      raise _refuse(model_type, entry)
    if "parts" in entry:  # T5Gemma's encoder and decoder, DeepSeek-V3.2's attention and its indexer
      fam, part = _part_family(entry, part, f"model_type {model_type!r}", "parts"), None
      if "delegates" in fam:  # a tower built from a sub-config with that type's own model (SAM 3 tracker video's
        # vision_config: a SAM 3 vision model): that type's spec of the sub-config
        sub = cfg.get(fam["sub"])
        sub = dict(sub) if isinstance(sub, Mapping) else {}
        sub.setdefault("model_type", fam["delegates"])
        return from_hf_config(sub, layer=layer)
    elif "pixel" in entry:  # a vision tower observed on an image (Pixtral): its 2-D RoPE over the patch grid
      fam = {"pixel": entry["pixel"]}
    elif "keypoints" in entry:  # an image matcher's keypoints (LightGlue): learned 2-D frequencies
      if part is not None:
        raise ValueError(f"part={part!r}: model_type {model_type!r} rotates alike wherever it rotates; leave part out.")
      return _from_keypoints(cfg, model_type, entry["keypoints"])
    else:
      fam = entry["family"]
  if part is not None:
    raise ValueError(f"part={part!r}: model_type {model_type!r} rotates alike wherever it rotates; leave part out.")
  if "pixel" in fam:
    return _from_pixel(cfg, model_type, fam["pixel"], layer)
  if "half_tables" in fam:
    return _from_half_tables(cfg, model_type, fam["half_tables"])
  fam = {**fam, **_observed(model_type if family is None else family)}
  if fam.get("sub"):  # the registry's composite: the rotating model's config is this sub-config (defaults if absent);
    # a dotted key is a sub-config's sub-config (Nemotron 3.5 Transcribe's "diarization_config.audio_config")
    held: Any = cfg
    for key in str(fam["sub"]).split("."):
      held = held.get(key) if isinstance(held, Mapping) else None
    cfg = dict(held) if isinstance(held, Mapping) else {}
  fam = {**_COMMON, **fam}
  # v turns too, at the key positions with the keys' table (the spec's rotate_value): RoFormer's rotary_value key, or
  # observed on every call (CLVP's apply rotates q, k and v)
  rotate_value = bool(fam.get("rotates_value") or (fam.get("rotates_value_key") and cfg.get(fam["rotates_value_key"])))
  if fam.get("theta_fixed"):  # observed: the class reads no rope key (CLVP's theta 10000 is in its code)
    _refuse_rope_keys(cfg, model_type, f"it turns by theta {fam['theta']} over {fam.get('rotary_dim_fixed')} channels")
  for key, default in fam.get("guarded", {}).items():  # observed only at its default (layer_rope_theta, ...)
    if key in cfg and cfg[key] != default:
      raise ValueError(f"model_type {model_type!r}: the config sets {key}={cfg[key]!r}, but the registry observed this "
                       f"model only with {key}={default!r} ({_made_from()}); what another value changes (which layers "
                       "rotate, with what) is not observed, so it is not read.")
  for key in fam.get("required", ()):  # observed only at a key its default config lacks (GLM-4.1V's partial factor)
    given = [cfg] + [v for v in (cfg.get("rope_parameters"), cfg.get("rope_scaling")) if isinstance(v, Mapping)]
    if all(g.get(key) is None for g in given):  # the file's own keys, not the registry's defaults
      required = fam["required"]  # {key: the value observed at} (a list of keys in older registries)
      seen = required[key] if isinstance(required, Mapping) else fam["default_rope_parameters"].get(key)
      raise ValueError(f"model_type {model_type!r}: the config sets no {key}; the registry observed this model only "
                       f"with {key}={seen!r} ({_made_from()}), as its default config either builds no working model in "
                       f"transformers or has no layer that rotates: set {key}.")
    required = fam["required"]
    if isinstance(required, Mapping) and isinstance(required[key], (bool, str)):  # a switch (Zamba 2's use_mem_rope,
      # Granite 4.0-H's position_embedding_type "rope"): read only at the value observed
      value = next(g.get(key) for g in given if g.get(key) is not None)
      if value != required[key]:
        raise ValueError(f"model_type {model_type!r}: the config sets {key}={value!r}; the registry observed this "
                         f"model only with {key}={required[key]!r} ({_made_from()}), so what {value!r} does to its "
                         "rotation is not read.")

  for key, sources in fam.get("derived_keys", {}).items():  # read from the file; computed by the class from
    # `sources` where a file lacks it: the registry's default holds only where the file sets none of them either
    if cfg.get(key) is None and any(k in cfg for k in sources):
      raise ValueError(f"model_type {model_type!r}: the config has no {key}, which its config class computes from "
                       f"{', '.join(sources)} when a file lacks it; the registry reads {key} only as a file gives it "
                       f"({_made_from()}): add {key}.")
  num_layers = int(cfg.get(fam.get("layers_key") or "num_hidden_layers", fam.get("num_hidden_layers") or 1))
  if fam.get("layer_types_filler") and cfg.get("layer_types") is not None:
    cfg["layer_types"] = _drop_filler(cfg, fam["layer_types_filler"], model_type)
    num_layers = len(cfg["layer_types"])
  index = 0 if layer is None else layer
  if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < num_layers:
    raise ValueError(f"layer={layer!r} is not a layer of this {num_layers}-layer model.")
  types = _layer_types(cfg, fam, num_layers)
  layer_type = None if types is None else types[index]
  overrides = _layer_overrides(cfg, fam, index, model_type)
  if fam.get("no_rope_layers"):
    key, interval = fam["no_rope_layers"]
    flags = cfg.get("no_rope_layers")
    if flags is None:
      n = int(cfg.get(key, interval))
      flags = [int((i + 1) % n != 0) for i in range(num_layers)]
    if not flags[index]:  # the name is inverted: 1 means the layer uses RoPE
      return None
  if fam.get("rope_on") is not None and layer_type not in fam["rope_on"]:
    return None
  if fam.get("rope_flags_key"):  # observed: a 0/1 flag per layer, 1 where it rotates (Mistral Large 4)
    key, default = fam["rope_flags_key"]
    flags = cfg[key] if cfg.get(key) is not None else default
    if not isinstance(flags, (list, tuple)) or len(flags) != num_layers:
      raise ValueError(f"model_type {model_type!r}: {key}={flags!r} must hold one 0/1 flag per layer "
                       f"({num_layers} layers; 1 = the layer rotates).")
    if not flags[index]:
      return None
  if fam.get("rope_layers_key"):  # observed: only the layers this list names rotate (Bamba's attn_layer_indices)
    key, default = fam["rope_layers_key"]
    if index not in (cfg[key] if cfg.get(key) is not None else default):
      return None
  if fam.get("nope_layers_key"):  # observed: the layers this list names do not rotate (Mllama's cross-attention)
    key, default = fam["nope_layers_key"]
    if index in (cfg[key] if cfg.get(key) is not None else default):
      return None

  nested = _nested(_given_parameters(cfg, fam))
  p = _rope_parameters(cfg, fam, layer_type if isinstance(fam["theta"], dict) or nested else None)
  if not p and nested:
    return None  # a None entry of rope_parameters: "possibly a NoPE layer"
  q_temperature = None
  if p.get("llama_4_scaling_beta") is not None:
    if not fam.get("q_temperature"):
      raise ValueError(f"model_type {model_type!r}: its rope parameters hold llama_4_scaling_beta, which scales q by "
                       "a position-dependent temperature besides RoPE, and this model was not observed to scale q "
                       "as the spec's q_temperature does (Mistral 4 scales its unrotated channels too), so its q "
                       "would differ from the model's.")
    length = p.get("original_max_position_embeddings")
    if length is None:
      raise ValueError(f"model_type {model_type!r}: llama_4_scaling_beta needs rope_parameters' "
                       "original_max_position_embeddings (the temperature's bucket length); the config has none.")
    q_temperature = (float(p["llama_4_scaling_beta"]), float(length))
  head_dim = _head_dim(cfg, fam, layer_type, overrides)
  theta = float(p["rope_theta"])
  rope_type = p["rope_type"]
  if rope_type == fam.get("axial_rope_type"):  # observed: a tower's own rope type, unscaled (Qwen2-VL's "axial")
    rope_type = "default"
  if rope_type == "dynamic" and p.get("alpha") is not None and "ntk_alpha" in fam.get("scalings", ()):
    rope_type = "ntk_alpha"  # HunYuan's checkpoints: "dynamic" with a fixed alpha, which its class computes so
  if "scalings" in fam and rope_type not in ("default", *fam["scalings"]):  # the registry's observed families
    raise ValueError(f"model_type {model_type!r} with rope_type {rope_type!r}: its rotary class was observed to "
                     f"compute only {['default', *fam['scalings']]} as transformers' standard functions do "
                     f"({_made_from()}), so {rope_type!r} is not read for it.")
  layout = fam["layout"]
  if fam.get("interleave_key") and not cfg.get(fam["interleave_key"], True):
    layout = "half"

  partial = p.get("partial_rotary_factor", cfg.get("partial_rotary_factor"))
  if rope_type == "proportional":  # transformers' proportional init reads the factor from the rope parameters alone,
    partial = p.get("partial_rotary_factor", 1.0)  # whatever the model's default init does with it
  elif fam.get("ignores_partial"):  # observed: the model's rotary class reads no partial_rotary_factor (Llama)
    partial = None
  if partial is None and fam.get("legacy_partial"):
    partial = cfg.get(fam["legacy_partial"])
  if partial is None:
    partial = fam["partial"]
  rotary_dim = None
  if fam.get("rotary_dim_fixed"):  # observed: a width its class computes from keys guarded at their defaults (CLVP)
    rotary_dim = int(fam["rotary_dim_fixed"])
  elif fam.get("rotary_dim_key"):
    key = fam["rotary_dim_key"]
    if key in cfg and cfg[key] is None:  # GPT-J, CodeGen: a table of hidden_size channels, applied to each head
      raise ValueError(f"model_type {model_type!r}: the config sets {key}=None; transformers then builds its sin/cos "
                       "table over hidden_size channels and applies it to each whole head, which runs only where a "
                       f"head is the whole hidden size; that is not read: set {key}.")
    rotary_dim = int(cfg.get(key) or fam["rotary_dim_default"])
  elif partial is not None and rope_type != "proportional":
    rotary_dim = int(head_dim * float(partial))
  if fam.get("rotary_per_axis_floor"):  # observed: each of n axes rotates 2 * ((head_dim // n) // 2) channels
    axes = int(fam["sections_equal"])
    rotary_dim = axes * 2 * ((head_dim // axes) // 2)
  frequencies: Any = fam.get("frequencies", "shared")  # observed: "per_axis" for Qwen2-VL's vision tower
  if rotary_dim is not None and rotary_dim % 2:
    # transformers' default RoPE for dim = int(head_dim * partial) odd: theta ** (-arange(0, dim, 2) / dim), i.e.
    # (dim + 1) / 2 pairs whose exponents run over a denominator of dim (GLM-4.5's default config: dim 21)
    if rope_type != "default":
      raise ValueError(f"model_type {model_type!r}: head_dim * partial_rotary_factor = {rotary_dim} is odd; "
                       f"transformers then rotates {rotary_dim + 1} channels with default RoPE's exponents over "
                       f"{rotary_dim}, which is read for rope_type 'default' only (got {rope_type!r}).")
    frequencies = tuple(default_inv_freq(rotary_dim, theta))
    rotary_dim += 1
  if rotary_dim == head_dim and not isinstance(frequencies, tuple):
    rotary_dim = None

  scaling = None
  if rope_type != "default":
    scaling = {k: v for k, v in p.items() if k not in _NOT_SCALING}
    scaling["rope_type"] = rope_type
    if rope_type == "proportional":
      scaling["partial_rotary_factor"] = 1.0 if partial is None else float(partial)
    if cfg.get("max_position_embeddings") is not None:
      scaling.setdefault("max_position_embeddings", cfg["max_position_embeddings"])
    if cfg.get("original_max_position_embeddings") is not None and rope_type in ("llama3", "yarn", "longrope"):
      # transformers prefers the top-level key (Phi-3 keeps it there)
      scaling["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]

  sections = p.get("mrope_section", (cfg.get("rope_scaling") or {}).get("mrope_section"))
  if sections is not None and fam.get("mrope_key_ignored"):  # observed: the class fixes its sections
    sections = None
  elif sections is not None and fam.get("mrope_key_order"):  # observed: Ernie 4.5-VL keeps (h, w, t) in the key
    if not isinstance(sections, (list, tuple)) or len(sections) != len(fam["mrope_key_order"]):
      raise ValueError(f"model_type {model_type!r}: mrope_section={sections!r} must list "
                       f"{len(fam['mrope_key_order'])} sections.")
    sections = [sections[i] for i in fam["mrope_key_order"]]
  section_layout = "chunked"
  if fam.get("sections_equal"):  # observed: the rotated pairs split equally over the axes (Qwen2-VL vision, NeoMME)
    pairs = (rotary_dim or head_dim) // 2
    equal = [pairs // int(fam["sections_equal"])] * int(fam["sections_equal"])
    if sections is not None and [int(x) for x in sections] != equal:
      raise ValueError(f"model_type {model_type!r}: the config sets mrope_section={sections!r}, but this model was "
                       f"observed to split its {pairs} rotated pairs equally over {fam['sections_equal']} axes "
                       f"({equal}) whatever the config says ({_made_from()}); another split is not read.")
    sections = equal
  if sections is None and fam.get("mrope_sections"):  # the rotary class's default, observed (Qwen2-VL)
    sections = fam["mrope_sections"]
  if sections is not None or fam.get("mrope_forced"):
    if sections is None:
      raise ValueError(f"model_type {model_type!r} uses M-RoPE, but the config has no mrope_section.")
    interleaved = fam.get("mrope") == "interleaved" and (fam.get("mrope_forced") or p.get("mrope_interleaved"))
    section_layout = "interleaved" if interleaved or p.get("mrope_interleaved") else "chunked"
    if fam.get("mrope") == "videorope":
      section_layout = "videorope"
  spec = RotaryConfig(theta=theta, layout=layout, rotary_dim=rotary_dim, scaling=scaling,
                      sections=None if sections is None else tuple(int(s) for s in sections),
                      section_layout=section_layout, direction=int(fam.get("direction", 1)),
                      q_temperature=q_temperature, frequencies=frequencies, rotate_value=rotate_value,
                      heads=None if fam.get("heads") is None else tuple(fam["heads"]))
  spec.check(head_dim)  # sections, factor lists and rotary_dim against the real head dim
  return spec


def _given_parameters(cfg: Mapping[str, Any], fam: Mapping[str, Any]) -> Any:
  """The config's rope_parameters; for a file with no RoPE keys at all, the registry's config-class default."""
  params = cfg.get("rope_parameters")
  if params is None and cfg.get("rope_scaling") is None and cfg.get("rope_theta") is None:
    return fam.get("default_rope_parameters") or None
  return params


def _nested(params: Any) -> bool:
  """rope_parameters keyed by layer type (Gemma 3's full/sliding_attention, Zaya's hybrid/hybrid_sliding): every
  value a dict (or None: a NoPE type). A flat one holds numbers, strings and lists."""
  return bool(isinstance(params, Mapping) and params
              and all(isinstance(v, Mapping) or v is None for v in params.values()))
