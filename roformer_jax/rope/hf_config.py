"""Any HuggingFace model's RoPE from its config.json: `from_hf_config(config, layer=i)`.

transformers reads a config.json through the model's config class: keys the file leaves out
take that class's defaults, and each class has its own legacy keys (Gemma 3's
`rope_local_base_freq`, GPT-NeoX's `rotary_pct` / `rotary_emb_base`, ModernBERT's
`global_rope_theta`, Llama 4's inverted `no_rope_layers`, ...). `_FAMILIES` holds, per
`model_type`, exactly what those classes (transformers 5.23) default and how their attention
rotates (layout, which head dim, which layers). An unknown model_type is read only when the
file itself names every RoPE key; otherwise it is refused, not guessed.

The returned spec rotates in the channel order of the model's q/k projection weights. Where
transformers permutes channels inside its rotary function (DeepSeek-V3's rope_interleave) the
rotated q and k differ from transformers' by that permutation, and q . k is identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
#   no_rope_layers: the layer's RoPE flag comes from `no_rope_layers` (1 = RoPE: inverted name)
#   legacy: {v4 key: layer type} keys that set that layer type's theta
#   v4_scaling_to: the layer type a v4 `rope_scaling` applies to (Gemma 3: full_attention)
#   type_defaults: a layer type's default rope parameters (Gemma 4: proportional on full layers)
#   type_head_dim: {layer type: (key, default)} for a layer type with its own head dim (Gemma 4)
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
                        type_head_dim={"full_attention": ("global_head_dim", 512)}),
    "phi3": dict(hidden_size=3072, num_attention_heads=32, num_hidden_layers=32, partial=1.0),
    "deepseek_v2": dict(head_dim=64, hidden_size=4096, num_attention_heads=32, num_hidden_layers=32,
                        layout="interleaved", rope_head_dim_key="qk_rope_head_dim"),
    "deepseek_v3": dict(head_dim=64, hidden_size=7168, num_attention_heads=128, num_hidden_layers=61,
                        layout="interleaved", rope_head_dim_key="qk_rope_head_dim", interleave_key="rope_interleave"),
    "gpt_neox": dict(hidden_size=6144, num_attention_heads=64, num_hidden_layers=44, partial=0.25,
                     legacy_theta="rotary_emb_base", legacy_partial="rotary_pct"),
    "gptj": dict(hidden_size=4096, num_attention_heads=16, num_hidden_layers=28, layout="interleaved",
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
    "roformer": dict(hidden_size=768, num_attention_heads=12, num_hidden_layers=12, layout="interleaved"),
}
# Multimodal wrappers whose text model is in `text_config` (or, in older files, flat at the top).
_TEXT_OF = {"qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text", "qwen3_vl": "qwen3_vl_text",
            "qwen3_5": "qwen3_5_text", "gemma3": "gemma3_text", "llama4": "llama4_text"}
_NOT_SCALING = ("rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved", "type")
SUPPORTED_MODEL_TYPES = tuple(sorted(_FAMILIES)) + tuple(sorted(_TEXT_OF))


def _layer_types(cfg: Mapping[str, Any], fam: Mapping[str, Any], num_layers: int) -> list[str] | None:
  if cfg.get("layer_types") is not None:
    return list(cfg["layer_types"])
  rule = fam.get("layer_types")
  if rule is None:
    return None
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
  params: Any = cfg.get("rope_parameters")  # a JSON value: narrowed by `nested` below
  v4 = cfg.get("rope_scaling")
  theta_default = fam["theta"]
  per_type = isinstance(theta_default, dict)
  nested = isinstance(params, Mapping) and any(isinstance(v, Mapping) or v is None for v in params.values()) \
      and params and all(k.endswith("attention") for k in params)
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
    p.setdefault("rope_theta", theta_default[layer_type])
  else:
    theta_key = fam.get("legacy_theta")
    p.setdefault("rope_theta", cfg.get("rope_theta", cfg.get(theta_key) if theta_key else None) or theta_default)
  p.setdefault("rope_type", p.get("type", "default"))
  if p["rope_type"] == "mrope":  # v4 Qwen2-VL: "mrope" is default RoPE with sections
    p["rope_type"] = "default"
  return p


def _head_dim(cfg: Mapping[str, Any], fam: Mapping[str, Any], layer_type: str | None = None) -> int:
  if layer_type in fam.get("type_head_dim", {}):
    key, default = fam["type_head_dim"][layer_type]
    return int(cfg.get(key) or default)
  hidden = cfg.get("hidden_size", fam.get("hidden_size"))
  heads = cfg.get("num_attention_heads", fam.get("num_attention_heads"))
  if fam.get("rope_head_dim_key"):
    return int(cfg.get(fam["rope_head_dim_key"], fam["head_dim"]))
  if fam["head_dim"] == "computed" or (cfg.get("head_dim") is None and fam["head_dim"] is None):
    if hidden is None or heads is None:
      raise ValueError("the config gives no head_dim and no hidden_size / num_attention_heads to derive it.")
    return int(hidden) // int(heads)
  return int(cfg["head_dim"] if cfg.get("head_dim") is not None else fam["head_dim"])


def from_hf_config(config: Mapping[str, Any], *, layer: int | None = None) -> RotaryConfig | None:
  """The RoPE spec of decoder layer `layer` of the model a HuggingFace config.json describes.

  Args:
    config: the config as a dict (json.load of config.json). A multimodal config's
      `text_config` is used; keys it leaves out take the defaults of the transformers config
      class of its model_type (`SUPPORTED_MODEL_TYPES`). Both formats are read: v4
      (`rope_theta` + `rope_scaling` with "type" or "rope_type", `partial_rotary_factor`,
      `rotary_pct`, `rotary_dim`, `head_dim`, model-specific keys) and v5 (`rope_parameters`,
      flat or keyed by layer type).
    layer: the decoder layer index; None = layer 0. Models whose layers differ (Gemma 2/3,
      Cohere2, ModernBERT, Llama 4, SmolLM3, Qwen3.5) need it to pick the layer type.

  Returns:
    A `RotaryConfig` whose `.apply(x, positions)` rotates x [B, T, N, H] (H = the head dim
    the model rotates; DeepSeek: qk_rope_head_dim) as that layer's attention rotates q and k
    (positions [B, T], or [B, T, 3] (t, h, w) for M-RoPE), channels past the rotary dim
    untouched, with transformers' attention factor in cos and sin; None for a layer without
    RoPE (Llama 4 / SmolLM3 NoPE layers, Cohere2's full-attention layers, Qwen3.5's linear
    attention layers).

  Raises:
    ValueError: an unknown model_type whose file lacks rope_theta or the head dim; a layer
      out of range; sections that do not fit the rotary dim.
  """
  if not isinstance(config, Mapping):
    raise TypeError(f"config must be a dict (json.load of a config.json), got {type(config).__name__}.")
  cfg = dict(config)
  model_type: Any = cfg.get("model_type")  # a JSON value (None or a bad type: no family)
  if model_type in _TEXT_OF:
    text = cfg.get("text_config")
    cfg = dict(text) if isinstance(text, Mapping) else cfg
    cfg["model_type"] = cfg.get("model_type") or _TEXT_OF[model_type]
    if cfg["model_type"] == model_type:
      cfg["model_type"] = _TEXT_OF[model_type]
    model_type = cfg["model_type"]
  fam = _FAMILIES.get(model_type)
  if fam is None:
    has_theta = cfg.get("rope_theta") is not None or "rope_theta" in (cfg.get("rope_parameters") or {})
    has_dim = cfg.get("head_dim") is not None or (cfg.get("hidden_size") and cfg.get("num_attention_heads"))
    if not (has_theta and has_dim):
      raise ValueError(
          f"model_type {model_type!r} is not one whose transformers defaults are known here ({SUPPORTED_MODEL_TYPES}), "
          "and its config leaves out rope_theta or the head dim (head_dim, or hidden_size and num_attention_heads). "
          "Add those keys to the dict to read it as a default-layout (rotate_half) model.")
    fam = {}
  fam = {**_COMMON, **fam}

  num_layers = int(cfg.get("num_hidden_layers", fam.get("num_hidden_layers") or 1))
  index = 0 if layer is None else layer
  if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < num_layers:
    raise ValueError(f"layer={layer!r} is not a layer of this {num_layers}-layer model.")
  types = _layer_types(cfg, fam, num_layers)
  layer_type = None if types is None else types[index]
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

  p = _rope_parameters(cfg, fam, layer_type if isinstance(fam["theta"], dict) or _nested(cfg) else None)
  if not p and _nested(cfg):
    return None  # a None entry of rope_parameters: "possibly a NoPE layer"
  head_dim = _head_dim(cfg, fam, layer_type)
  theta = float(p["rope_theta"])
  rope_type = p["rope_type"]
  layout = fam["layout"]
  if fam.get("interleave_key") and not cfg.get(fam["interleave_key"], True):
    layout = "half"

  partial = p.get("partial_rotary_factor", cfg.get("partial_rotary_factor"))
  if partial is None and fam.get("legacy_partial"):
    partial = cfg.get(fam["legacy_partial"])
  if partial is None:
    partial = fam["partial"]
  rotary_dim = None
  if fam.get("rotary_dim_key"):
    rotary_dim = int(cfg.get(fam["rotary_dim_key"]) or fam["rotary_dim_default"])
  elif partial is not None and rope_type != "proportional":
    rotary_dim = int(head_dim * float(partial))
  if rotary_dim == head_dim:
    rotary_dim = None

  scaling = None
  if rope_type != "default":
    scaling = {k: v for k, v in p.items() if k not in _NOT_SCALING}
    if rope_type == "proportional":
      scaling["partial_rotary_factor"] = 1.0 if partial is None else float(partial)
    if cfg.get("max_position_embeddings") is not None:
      scaling.setdefault("max_position_embeddings", cfg["max_position_embeddings"])
    if cfg.get("original_max_position_embeddings") is not None and rope_type in ("llama3", "yarn", "longrope"):
      # transformers prefers the top-level key (Phi-3 keeps it there)
      scaling["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]

  sections = p.get("mrope_section", (cfg.get("rope_scaling") or {}).get("mrope_section"))
  section_layout = "chunked"
  if sections is not None or fam.get("mrope_forced"):
    if sections is None:
      raise ValueError(f"model_type {model_type!r} uses M-RoPE, but the config has no mrope_section.")
    interleaved = fam.get("mrope") == "interleaved" and (fam.get("mrope_forced") or p.get("mrope_interleaved"))
    section_layout = "interleaved" if interleaved or p.get("mrope_interleaved") else "chunked"
  spec = RotaryConfig(theta=theta, layout=layout, rotary_dim=rotary_dim, scaling=scaling,
                      sections=None if sections is None else tuple(int(s) for s in sections),
                      section_layout=section_layout)
  spec.check(head_dim)  # sections, factor lists and rotary_dim against the real head dim
  return spec


def _nested(cfg: Mapping[str, Any]) -> bool:
  params = cfg.get("rope_parameters")
  return bool(isinstance(params, Mapping) and params and all(str(k).endswith("attention") for k in params))
