"""The RoPE registry of every transformers model type, observed by running each model's own code.

What it makes
-------------
* ``roformer_jax/rope/hf_registry.json``: per transformers ``model_type``, what that model does
  with RoPE, read at run time by ``rope.from_hf_config`` (no torch, no transformers);
* ``tests/golden/hf_rope_registry.npz``: per observed rotation, q before and after the model's own
  rotary module and apply function, in float64, for ``tests/test_rope_hf_registry.py``.

How it observes (nothing is read from names or source text except to find the candidates)
------------------------------------------------------------------------------------------
For every model type transformers 5.24 registers (``CONFIG_MAPPING_NAMES``):

1. **Its default config** (``ConfigClass()``). A type whose default config does not build is
   recorded as such and refused.
2. **Does its modeling module rotate?** The candidates are the module's functions whose names
   mention rotary/rope. The model is built on the meta device from the default config with each
   candidate wrapped, and a forward runs on meta token ids (shapes only, seconds per model). Each
   wrapper records who called it (the attention module and its ``layer_idx``), the shapes and
   keyword arguments, and which rotary module produced the cos/sin it got (forward hooks record
   each rotary module's outputs). Where that forward cannot run, the same wrappers watch a real CPU
   forward instead (random weights; a model over 8 GB is refused): a copy of the config with narrow
   MLP and expert widths where data-dependent code stops the meta forward (`shrunk`); a vision
   tower that takes ``grid_thw`` on one VISION_GRID image, its token ids kept for the golden; an
   audio model on inputs built from its forward's required arguments and its config's own sizes (2 s at its
   sampling rate, 400 feature frames, a decoder's latents at its frame rate: ``_audio_inputs``), in eval mode with
   the buffers its own __init__ computes. There an apply that rotates only some heads is refused. A rotary module
   whose cos/sin another model's code applies (a second tower: PE-Audio's ModernBERT text tower) is observed again
   with the applies of every sub-config's modeling module wrapped too, each tower then a part of its own sub-config
   (a dotted key for a sub-config's sub-config); one that still no apply takes is refused. An apply that takes three tensors of
   q's layout and rotates them alike (q, k and v: CLVP) is recorded as rotating v (the spec's rotate_value). Tensors
   the attention computes from a rotary module's output alone (CLVP's cos() and sin() of its angle table) are
   followed as that output (`_DerivedRotaryOutputs`); a rotary module that keeps no config is rebuilt from its
   holder's. A default config from which transformers
   builds no model is recorded as "no_default_config". A type whose forward calls no candidate, and whose config holds
   a sub-config with its own model type, delegates to that sub-config (``text_config``: Llava's
   Llama); one with no candidate at all has no RoPE. Before any forward, the code of the modules the
   default config builds (and the module functions it names) rules rotation out where it reaches no
   candidate and builds no rotary module (``rotary_reach``): no RoPE where no class of the file that
   code names reaches one either (Chameleon's VQ-GAN beside its text model), else "rotates only under
   other settings" (Bamba without attention layers). Reading code only ever rules a rotation out:
   what rotates, and how, is found by running it. A sub-config type with no model class of its own is
   read so in the part a composite builds from it (SAM 2 video's mask decoder). A model whose forward requires a
   state object its processor builds (SAM 2 video's inference_session) is read part by part (`state_model_entry`):
   its memory attention run alone on tensor inputs of the shapes it takes (scripts/memory_rope_observer.py: q fitted
   over the frame's grid, the memory bank's keys checked at their own positions), a tower built from a sub-config
   with that type's own model class delegating to it. A composite that requires an image beside its token ids (SAM
   3) runs for real on both where token ids alone fail; where every rotation lies in one tower of one sub-config's
   type, it delegates to that sub-config (`tower_delegation`).
3. **What the rotation is**, in float64: the model is built again with parameters on meta and
   buffers on the CPU (so each rotary module holds its real inverse frequencies), inside the
   float64 mode of scripts/make_hf_rope_families_golden.py. Each distinct (rotary module, its
   call's keyword arguments, apply function) of step 2 is run on real positions and a random q:
   that is the golden (where the module builds a table over the tokens and the apply is handed the
   position ids it indexes it by, CLVP's, the table over 0 .. the largest position and those ids). Probing the apply function with basis vectors gives the linear map at one
   position, from which the registry records the pairing ("half": channel i with i + R/2;
   "interleaved": 2i with 2i + 1), the direction (+1: x_i' = x_i cos - x_j sin for the first of a
   pair), which channels rotate (the first R, the last R), and whether the output is permuted.
4. **What the config keys do**, by perturbing the default config and rebuilding the rotary module:
   does the model follow ``head_dim`` and ``partial_rotary_factor``? (transformers' Llama ignores
   ``partial_rotary_factor``; GPT-NeoX reads it.)

An entry is ``exact`` only when every rotating layer of the default config runs through a rotary
module that transformers' standard ``rope_parameters`` code drives, with one pairing and one
channel block, and every layer either rotates or is one the config's ``layer_types`` names. All
else is ``refused`` with the mechanism that stopped it. ``tests/test_rope_hf_registry.py`` walks
every entry: ``exact`` ones must equal the golden, refused ones must raise naming their reason.

Diffusers transformers (``_class_name``): those whose forward takes Flux's ``img_ids`` and
``txt_ids`` run their own forward on a shrunk config (scripts/diffusers_rope_observer.py says how
the rotation is fitted from what their apply function did); their goldens are
``tests/golden/diffusers_rope_registry.npz``. Every other class is refused by name.

Run in the throwaway reference venv (Python 3.11, torch 2.13 CPU, transformers 5.24, diffusers 0.42.1):
  python scripts/make_hf_rope_registry.py              # writes the files, prints what changed
  python scripts/make_hf_rope_registry.py llama ...    # observe only these types, print, write nothing
  python scripts/make_hf_rope_registry.py --update llama ...  # observe these, merge them into the files
  python scripts/make_hf_rope_registry.py --diffusers  # the diffusers part alone, written (a minute)
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import importlib
import inspect
import io
import itertools
import json
import math
import os
import re
import sys
import textwrap
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_hf_rope_families_golden import float64_transformers, np_inv_freq  # noqa: E402  (hides a bad torchvision)

import transformers  # noqa: E402
from transformers import modeling_rope_utils  # noqa: E402
from transformers.models.auto import modeling_auto  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES, model_type_to_module_name  # noqa: E402

import memory_rope_observer as memory  # noqa: E402
import pixel_rope_observer as pixel  # noqa: E402


def _timm_stand_in():
  """The reference venv has no timm (timm needs a torchvision, which breaks this CPU torch), so transformers'
  TimmWrapper models cannot build. Written by hand, not observed: an empty module stands in for them, so a
  composite whose timm tower is off the path a forward on token ids takes (Gemma 3n's MobileNet tower) builds
  and its text model is observed. A forward that reaches the feature model (TimmWrapperModel, whose output's shape
  depends on the timm architecture) fails, naming it, and stays refused. The image classifier
  (TimmWrapperForImageClassification) gives what the real one's output is by its config alone: per image, logits
  over config.num_labels classes (zeros, in the images' dtype). So a model that rotates downstream of the logits'
  count, never their values (PE Video's encoder: a token per frame's logits, rotated by token index), is observed
  in transformers' own code."""
  from transformers.modeling_outputs import ImageClassifierOutput
  from transformers.models.timm_wrapper import modeling_timm_wrapper as timm_wrapper

  def init(self, config):
    transformers.PreTrainedModel.__init__(self, config)
    self.timm_model = torch.nn.Identity()  # what post_init inspects: an empty module
    self.num_labels = config.num_labels
    self.post_init()

  def forward(self, *args, **kwargs):
    raise RuntimeError("the reference venv lacks timm: TimmWrapperModel is an empty stand-in, so this forward is "
                       "not observed")

  def classify(self, pixel_values, *args, **kwargs):
    if pixel_values.dim() != 4:
      raise ValueError(f"the timm classifier stand-in takes images [N, C, H, W], got {list(pixel_values.shape)}")
    return ImageClassifierOutput(logits=torch.zeros(pixel_values.shape[0], self.num_labels, dtype=pixel_values.dtype,
                                                    device=pixel_values.device))

  timm_wrapper.TimmWrapperModel.__init__, timm_wrapper.TimmWrapperModel.forward = init, forward
  cls = timm_wrapper.TimmWrapperForImageClassification
  cls.__init__, cls.forward = init, classify


_timm_stand_in()

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_JSON = os.path.join(REPO_ROOT, "roformer_jax", "rope", "hf_registry.json")
OUT_NPZ = os.path.join(REPO_ROOT, "tests", "golden", "hf_rope_registry.npz")
DIFFUSERS_NPZ = os.path.join(REPO_ROOT, "tests", "golden", "diffusers_rope_registry.npz")
SEED = 20261127
T_META = 11  # tokens of the meta forward: a length no default head count or head dim equals
POSITIONS = np.array([[0, 1, 2, 3, 7, 100, 1023], [1024, 4095, 4096, 8191, 16383, 30000, 32767]])
VISION_GRID = (1, 4, 10)  # a vision tower's probe image: grid_thw (t, h, w) in patches, 40 tokens
N_VISION = VISION_GRID[0] * VISION_GRID[1] * VISION_GRID[2]
MAX_VISION_EXTRA = 4  # the most tokens a tower may add to the image's patches (Inkling 2: a class token in front)
VISION_TOKENS = [N_VISION]  # the tokens of the current tower's attention: its patches and any class tokens, read
# from the [tokens, axes] ids its rotary module got
CANDIDATE = re.compile(r"rot|rope", re.I)
GUARDED_NAME = re.compile(r"rope|attn|attention|sliding|swa|nope", re.I)
GUARDED_PART = re.compile(r"layer|interval|period|indices|pattern|offset", re.I)
MAPPINGS = ("MODEL_MAPPING_NAMES", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
            "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES")


# Hand-written (observation cannot decide what a config that does not run would do): types whose default config
# does not run in transformers, observed at the key their published checkpoints set. GLM-4.1V's text model: its
# rotary class splits the rotated pairs into mrope_section (8, 12, 12) = 32 pairs, so it runs only with
# partial_rotary_factor 0.5 of its 128-channel head (GLM-4.1V-9B's config.json); without it transformers fails.
# The reader requires the key (`required`): a config without it is refused, as transformers fails on it.
OBSERVE_AT = {t: {"partial_rotary_factor": 0.5} for t in ("glm4v_text", "glm_image_text")}
# HunYuan's default config leaves head_dim None, which its attention's scale needs (None ** -0.5 fails in
# transformers itself); its checkpoints set it (Hunyuan-7B: 128)
OBSERVE_AT.update({t: {"head_dim": 128} for t in ("hunyuan_v1_dense", "hunyuan_v1_moe")})
OBSERVE_AT.update({t: {"text_config": {"partial_rotary_factor": 0.5}} for t in ("glm4v", "glm_image")})
# GLM-4.5V's text model: the same split of 32 pairs, with partial_rotary_factor 0.5 already in its default config
# but no head_dim, so hidden_size / num_attention_heads = 4096 / 96 = 42 channels give 10 pairs and transformers fails;
# GLM-4.5V's config.json sets head_dim 128. Observed there, the key required.
OBSERVE_AT.update({"glm4v_moe_text": {"head_dim": 128}, "glm4v_moe": {"text_config": {"head_dim": 128}}})
# Hybrid models whose default config has no attention layer (every layer Mamba), though their checkpoints have some:
# observed with attention layers, the key required (a config without it: refused, not read as rotating nowhere).
# Bamba: attention at attn_layer_indices (Bamba-9B's [9, 18, 27]).
OBSERVE_AT.update({"bamba": {"attn_layer_indices": [9, 18, 27]}})
# Zamba 2: its shared attention blocks rotate only with use_mem_rope (False by default).
OBSERVE_AT.update({"zamba2": {"use_mem_rope": True}})
# Granite 4.0 hybrid: RoPE only with position_embedding_type "rope" (None by default), in its full-attention layers
# (none in the default layer_types): observed with both, attention at every eighth layer, a probe setting (its
# layer_types are read from the file).
OBSERVE_AT.update({"granitemoehybrid": {"position_embedding_type": "rope", "layer_types": [
    "full_attention" if i % 8 == 7 else "linear_attention" for i in range(32)]}})
# Qwen3-Omni's thinker text model: hidden_size 2048 over 28 heads gives 73 channels, an odd head its rotary module
# cannot rotate (74 channels of cos); Qwen3-Omni-30B-A3B's config.json sets head_dim 128 (32 heads of 128).
# Its thinker: that text model, and a forward that reads vision_start_token_id, which the thinker's config class does
# not define (the talker's config defaults it to 151652, the checkpoint's): set too, not required (it moves no
# rotation of a text-only prompt; only the text model's keys are).
OBSERVE_AT.update({"qwen3_omni_moe_text": {"head_dim": 128},
                   "qwen3_omni_moe_thinker": {"vision_start_token_id": 151652, "text_config": {"head_dim": 128}}})
# Step 3.5 / 3.7's text model: its forward builds the sliding-window mask whatever its layer_types say, and fails
# where sliding_window is None (its default); the value only sizes that mask. Observed with one (512) set, the key
# required, as transformers fails without it.
OBSERVE_AT.update({"step3p5": {"sliding_window": 512}, "step3p7": {"text_config": {"sliding_window": 512}}})

# Hand-written refusals (read from the model's code, which this script cannot run): the mechanism, for a type whose
# forward needs inputs only its processor builds. ESMFold 2: its forward takes a featurized structure (token_index,
# residue_index, asym_id, sym_id, entity_id, mol_type, res_type, ...); its atom encoder's EsmFold2RotaryEmbedding turns
# pairs by continuous atom coordinates and a per-atom UID, not token positions.
REFUSE = {"esmfold2": "its atom encoder's rotary module (EsmFold2RotaryEmbedding) turns its pairs by continuous "
                      "3-D atom coordinates (ref_pos x, y, z; num_spatial_rope_pairs_per_axis pairs each) and a per-atom "
                      "space UID, at frequencies base ** (-k / n) of its own (spatial_rope_base_frequency, "
                      "uid_rope_base_frequency) with the rest of the head's pairs inactive: not token positions, which "
                      "the spec takes; and its forward needs a featurized structure (token_index, residue_index, "
                      "asym_id, ...) that only its processor builds. Its language model is ESM C: read "
                      "from_hf_config(config['esmc_config'])",
          # its observation stops inside its compressors' shape handling (a 4-D / 5-D concatenation) before any layer
          # runs, so what follows is read from its code, stated here so the refusal names the mechanism
          "deepseek_v4": "every layer's attention rotates the last rotary_dim channels of each head in interleaved "
                         "pairs (the spec's channels='last'), uses its one rotated latent as both k and v and rotates "
                         "the attention output back at the query positions (rotate_value, unrotate_output: "
                         "tests/test_rope_output_rotation.py checks that spec against its code); but its compressed "
                         "layers (compressed_sparse_attention, heavily_compressed_attention) also attend to entries "
                         "pooled over windows of compress_rates tokens, rotated at their windows' positions with "
                         "compress_rope_theta, and its indexer rotates its own queries: not one rotation per token "
                         "position, which a spec read from config.json gives. Build RotaryConfig(theta=..., "
                         "layout='interleaved', rotary_dim=..., channels='last', rotate_value=True, "
                         "unrotate_output=True) yourself for its sliding-window layers"}

TOKENS = [T_META]  # the token count of the current type's forward: T_META, or an audio encoder's frames after its
# subsampling (read from the position ids its rotary module got)
SEEN_IDS = {}  # the position ids each rotary module got in the last real forward (a vision tower's token order)


class Refused(Exception):
  """Observation stopped: the message is the mechanism, recorded in the registry."""


def modeling_module(model_type):
  name = model_type_to_module_name(model_type)
  try:
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")
  except ModuleNotFoundError:
    return None


def candidates(module):
  """The module's functions whose names mention rotary/rope, and its classes' static apply_* methods that do
  (RoFormer's RoFormerSelfAttention.apply_rotary_position_embeddings), as "Class.method"."""
  found = {n: f for n, f in vars(module).items() if inspect.isfunction(f) and CANDIDATE.search(n)}
  for cname, cls in vars(module).items():
    if inspect.isclass(cls) and cls.__module__ == module.__name__:
      found.update({f"{cname}.{n}": a.__func__ for n, a in vars(cls).items()
                    if isinstance(a, staticmethod) and n.startswith("apply_") and CANDIDATE.search(n)})
  return found


def _install(module, name, fn):
  """Put fn where candidates() found `name`: the module's function, or a class's static method."""
  if "." in name:
    cname, attr = name.split(".")
    setattr(getattr(module, cname), attr, staticmethod(fn))
  else:
    setattr(module, name, fn)


def model_class(model_type, config=None, module=None):
  """The auto mappings' class for the type, else (a sub-config's type: Qwen2-VL's text model) the module's base
  model class whose config class is the config's."""
  for mapping in MAPPINGS:
    name = getattr(modeling_auto, mapping).get(model_type)
    if name and hasattr(transformers, name):
      return getattr(transformers, name)
  if module is not None:
    own = list(dict.fromkeys(  # one class under two names (Ernie 4.5-VL's tower) counts once
        c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, transformers.PreTrainedModel)
        and getattr(c, "config_class", None) is type(config) and "PreTrained" not in c.__name__))
    own = [c for c in own if not any(c is not o and issubclass(c, o) for o in own)]  # not a deprecated alias
    bare = [c for c in own if "For" not in c.__name__]
    # a base model, else its one module, else its one head model (Qwen2.5-Omni, EoMT-DINOv3: no base model)
    for pick in ([c for c in bare if c.__name__.endswith("Model")], bare, own):
      if len(pick) == 1:
        return pick[0]
  return None


def _caller_path(path):
  """The calling module's place inside its layer ("model.layers.3.self_attn.indexer" -> "self_attn.indexer"): the
  name of a part of a layer whose rotation differs from its attention's (DeepSeek-V3.2's indexer)."""
  if not path:
    return None
  parts = path.split(".")
  index = next((i for i, p in enumerate(parts) if p.isdigit()), None)
  return ".".join(parts[index + 1:]) if index is not None and index + 1 < len(parts) else path


def _block(path):
  """The numbered block a module sits in ("model.L_stack.layers.3.self_attn" -> "model.L_stack.layers.3")."""
  parts = (path or "").split(".")
  index = next((i for i, p in enumerate(parts) if p.isdigit()), None)
  return None if index is None else ".".join(parts[:index + 1])


def every_block_rotates(model, calls):
  """Whether every numbered block of the model (every child of a ModuleList, at its first numbered level) holds a
  module that called the apply: a model that rotates in all its blocks alike, however its config counts layers
  (HRM's num_hidden_layers counts the 128 slots its 2 x 16 blocks fill in their cycles)."""
  blocks = {_block(p) for p, _ in model.named_modules()} - {None}
  return bool(blocks) and blocks == {c.get("caller_block") for c in calls}


@contextlib.contextmanager
def params_on_meta():
  """Build a model with its parameters on the meta device and its buffers (inverse frequencies) real."""
  orig = torch.nn.Module.register_parameter

  def register(self, name, param):
    orig(self, name, param)
    if param is not None:
      p = self._parameters[name]
      self._parameters[name] = torch.nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)

  torch.nn.Module.register_parameter = register
  try:
    yield
  finally:
    torch.nn.Module.register_parameter = orig


def is_rotary_module(m):
  """A module named for rotary embeddings: "Rotary", or "Rope"/"RoPE" ending a word (not Solar Open's "SolarOpen")."""
  return _rotary_name(type(m).__name__)


def _rotary_name(name):
  return "rotary" in name.lower() or re.search(r"(?i:rope)(?![a-z])", name) is not None


def _code_names(fn, names):
  """The global and attribute names fn's code (and its nested functions', under any decorator) refers to."""
  stack = [fn.__code__, inspect.unwrap(fn).__code__]
  while stack:
    code = stack.pop()
    names.update(code.co_names)
    stack.extend(c for c in code.co_consts if inspect.iscode(c))
  return names


def _methods(cls):
  """The functions of cls and of its transformers bases (methods, static and class methods)."""
  for base in cls.__mro__:
    if base.__module__.startswith("transformers"):
      for v in vars(base).values():
        f = v.__func__ if isinstance(v, (staticmethod, classmethod)) else v
        if inspect.isfunction(f):
          yield f


def rotary_reach(modules, module):
  """Can these built modules (a model, or the part of a composite a sub-config builds) rotate? Read from the code of
  the classes actually built, to rule rotation out, never in (what rotates is found by running it):
  "built": one of them is a rotary module, or their classes' code (and the module functions it names, in turn)
  names a rotary candidate of the modeling module; "other_settings": not so, but a class that code names (Bamba's
  attention, absent from its default config's layers) does; "never": neither, the modeling module's rotary code
  serves another model of the same file (Chameleon's VQ-GAN beside its text model)."""
  cands = {name.split(".")[-1] for name in candidates(module)}
  modules = list(modules)
  if any(is_rotary_module(m) for m in modules):
    return "built"
  namespaces = [vars(module)] + [vars(sys.modules[type(m).__module__]) for m in modules]
  names = set()
  for cls in {type(m) for m in modules}:
    for f in _methods(cls):
      _code_names(f, names)

  def close(names, classes):  # follow the module functions (and, with classes, the module classes) names name
    frontier = set(names)
    while frontier:
      found = set()
      for n in frontier:
        for ns in namespaces:
          v = ns.get(n)
          if inspect.isfunction(v):
            _code_names(v, found)
          elif classes and inspect.isclass(v) and v.__module__.startswith("transformers"):
            for f in _methods(v):
              _code_names(f, found)
      frontier = found - names
      names |= found
    return names

  def rotary_class(n):  # a rotary module's class (named as is_rotary_module reads it)
    return _rotary_name(n) and any(inspect.isclass(ns.get(n)) and issubclass(ns[n], torch.nn.Module)
                                   for ns in namespaces)

  if cands & close(set(names), classes=False):
    return "built"
  named = close(set(names), classes=True)
  return "other_settings" if cands & named or any(rotary_class(n) for n in named) else "never"


def _default_reach(mt, config, module):
  """rotary_reach of the model the default config builds on the meta device (or, for a sub-config type with no
  model class, of the part a composite builds from it); None where neither builds (meta_forward says why)."""
  cls = model_class(mt, config, module)
  if cls is None:
    part = _composite_part(mt)
    if part is None:
      return None
    reach = rotary_reach(part[0], module)
    return reach if not part[2] or reach == "never" else None  # of a build stopped partway, "never" alone holds
  try:
    with warnings.catch_warnings(), torch.device("meta"):
      warnings.simplefilter("ignore")
      return rotary_reach(cls(config).modules(), module)
  except Exception:  # noqa: BLE001
    return None


@functools.cache
def _composites():
  """{sub-config type: the types whose default config holds one}, over every registered type. A sub-config the
  default config leaves None (Gemma 4 Unified's optional vision and audio configs) counts by its class's type."""
  found = {}
  for parent in CONFIG_MAPPING_NAMES:
    try:
      config = CONFIG_MAPPING[parent]()
    except Exception:  # noqa: BLE001
      continue
    for k, sub_class in (getattr(config, "sub_configs", {}) or {}).items():
      sub = getattr(config, k, None)
      sub_type = getattr(sub, "model_type", None) if sub is not None else getattr(sub_class, "model_type", None)
      if sub_type:
        found.setdefault(sub_type, []).append(parent)
  return found


def _composite_configs(parent, mt):
  """The composite's configs to build a part of type mt from, in turn: its default config, with a sub-config of
  type mt it leaves None set to that class's default (Gemma 4 Unified's vision config); then that config with each
  of its use_* flags the default leaves off turned on (Idefics' use_resampler builds its perceiver)."""
  config = CONFIG_MAPPING[parent]()
  for k, sub_class in (getattr(config, "sub_configs", {}) or {}).items():
    if getattr(config, k, None) is None and getattr(sub_class, "model_type", None) == mt:
      config = CONFIG_MAPPING[parent](**{k: sub_class()})
  yield config
  for key, value in config.to_dict().items():
    if key.startswith("use_") and value is False:
      with contextlib.suppress(Exception):
        yield CONFIG_MAPPING[parent](**{**{k: getattr(config, k) for k in config.sub_configs
                                            if getattr(config, k, None) is not None}, key: True})


def _composite_classes(parent, config, module):
  """The composite's model classes to build: its auto class, then its module's other model classes of the same
  config class (Sapiens 2's heads, which its base model does not build)."""
  first = model_class(parent, config, module)
  others = [c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, transformers.PreTrainedModel)
            and getattr(c, "config_class", None) is type(config) and "PreTrained" not in c.__name__
            and c is not first] if module is not None else []
  return [c for c in (first, *dict.fromkeys(others)) if c is not None]


def _statement_span(code, line):
  """The lines (first, last) of the innermost statement of code's function that holds `line` (for a compound
  statement, its header: an if's test, not its body); None where the source is not to be had."""
  try:
    lines, first = inspect.getsourcelines(code)
    tree = ast.parse(textwrap.dedent("".join(lines)))
  except (OSError, TypeError, SyntaxError):
    return None
  best = None
  for node in ast.walk(tree):
    if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      body = [n for field in ("body", "orelse", "finalbody", "handlers") for n in getattr(node, field, [])
              if isinstance(n, ast.AST) and hasattr(n, "lineno")]
      lo = node.lineno + first - 1
      hi = (min(n.lineno for n in body) - 1 if body else node.end_lineno) + first - 1
      if lo <= line <= hi and (best is None or hi - lo < best[1] - best[0]):
        best = (lo, hi)
  return best


def _build_recording_part(cls, config, mt):
  """Build cls(config) on the meta device, recording the modules built from its sub-config of type mt: (model, the
  modules whose constructor was handed a config of type mt, the modules built from values read off such a config).
  The latter, where a part takes the composite's config or plain numbers (Idefics' perceiver resampler, handed
  perceiver_config.resampler_depth and friends; Sapiens 2's head, which reads config.head_config itself): each
  read of a sub-config attribute inside a module's __init__ names the modules its statement constructs, or, where
  that statement constructs none, the reading module itself. model is None where the build stops with an error:
  the modules are then those it started building."""
  sub_class = CONFIG_MAPPING[mt]
  subs = [getattr(config, k) for k in getattr(config, "sub_configs", {}) or {}
          if isinstance(getattr(config, k, None), sub_class)]
  given, read_by = [], []
  reads = {}  # id(reader frame) -> [the frame, its module, {statement span: whether it constructed a module}]

  def module_init_frame(frame):
    while frame is not None:
      if frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), torch.nn.Module):
        return frame
      frame = frame.f_back
    return None

  def read_statement(frame):  # the reading statement up the stack that is running now
    while frame is not None:
      got = reads.get(id(frame))
      if got is not None and got[0] is frame:
        span = next((sp for sp in got[2] if sp[0] <= frame.f_lineno <= sp[1]), None)
        if span is not None:
          return got, span
      frame = frame.f_back
    return None

  def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "__init__" and \
        isinstance(frame.f_locals.get("self"), torch.nn.Module):
      if any(isinstance(v, sub_class) for k, v in frame.f_locals.items() if k != "self"):
        given.append(frame.f_locals["self"])
      elif (found := read_statement(frame.f_back)) is not None:
        read_by.append(frame.f_locals["self"])
        found[0][2][found[1]] = True

  orig = sub_class.__dict__.get("__getattribute__")
  base_get = sub_class.__getattribute__

  def getattribute(self, name):
    if not name.startswith("_") and any(self is s for s in subs):
      reader = module_init_frame(sys._getframe(1))
      span = _statement_span(reader.f_code, reader.f_lineno) if reader is not None else None
      if span is not None:
        got = reads.get(id(reader))
        if got is None or got[0] is not reader:  # (a new frame where a finished one's id was)
          got = reads[id(reader)] = [reader, reader.f_locals["self"], {}]
        got[2].setdefault(span, False)
    return base_get(self, name)

  model = None
  try:
    sub_class.__getattribute__ = getattribute
    with warnings.catch_warnings(), torch.device("meta"):
      warnings.simplefilter("ignore")
      sys.setprofile(profile)
      try:
        model = cls(config)
      finally:
        sys.setprofile(None)
  except Exception:  # noqa: BLE001  the build stops (Sapiens 2's heads on their default head config's None sizes)
    pass
  finally:
    if orig is None:
      del sub_class.__getattribute__
    else:
      sub_class.__getattribute__ = orig
  read_by += [module for _, module, statements in reads.values() if not all(statements.values())]
  return model, given, read_by


def _composite_part(mt):
  """The modules a composite builds from its sub-config of type mt (SAM 2 video's mask decoder), the composite's
  type, and whether the build stopped partway; None where no registered composite builds any. Tried over the
  composite's configs (_composite_configs) and model classes (_composite_classes): the first build that completes
  and holds such modules (those whose config is of type mt, else the outermost of those handed such a config, else
  of those built from its values), else the first that stopped partway after starting some (Sapiens 2's heads,
  whose default head config leaves their sizes None): the modules it started, whose classes' code is then all
  that can be read (rotary_reach's "never" alone decides anything of them)."""
  partial = None
  for parent in _composites().get(mt, []):
    module = modeling_module(parent)
    for config in _composite_configs(parent, mt):
      for cls in _composite_classes(parent, config, module):
        model, given, read_by = _build_recording_part(cls, config, mt)
        built = [] if model is None else [m for m in model.modules() if getattr(m, "config", None) is not None
                                          and getattr(m.config, "model_type", None) == mt]
        held = None if model is None else {id(m) for m in model.modules()}
        for found in (given, read_by):  # else the outermost modules built from such a config, that the model holds
          if built:
            break
          found = [m for m in found if held is None or id(m) in held]
          inner = {id(sub) for m in found for sub in m.modules() if sub is not m}
          built = [m for m in found if id(m) not in inner]
        if built and model is not None:
          return [sub for m in built for sub in m.modules()], parent, False
        if built and partial is None:
          partial = [sub for m in built for sub in m.modules()], parent, True
  return partial


def _caller_layer(frame, paths):
  """The decoder layer whose code called: the first module up the stack whose path in the model has an index
  ("layers.3.self_attn" -> 3). The path, not the attention's layer_idx: some models count only their attention
  layers, some keep no layer_idx."""
  while frame is not None:
    owner = frame.f_locals.get("self")
    path = paths.get(id(owner)) if owner is not None else None
    if path:
      index = next((int(part) for part in path.split(".") if part.isdigit()), None)
      if index is not None:
        return index
    frame = frame.f_back
  return None


@contextlib.contextmanager
def meta_values_stubbed():
  """A meta tensor's .item() / .tolist() / bool() give zeros instead of failing: some forwards read values (MoE
  routing counts, a packed-sequence check) that decide nothing about which layers rotate. Entries observed this
  way say so ("stubbed")."""
  orig = torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__

  def item(self):
    return (0.0 if self.is_floating_point() else 0) if self.is_meta else orig[0](self)

  def tolist(self):
    return np.zeros(self.shape, int).tolist() if self.is_meta else orig[1](self)

  def as_bool(self):
    return False if self.is_meta else orig[2](self)

  torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__ = item, tolist, as_bool
  try:
    yield
  finally:
    torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__ = orig


class NoModel(Refused):
  """The default config builds no model in transformers itself (a None where the model needs a size): recorded as
  status "no_default_config", outside the share of types that run."""


WIDTH_KEY = re.compile(r"intermediate_size|ffn_hidden_size|ffn_dim|^d_ff$|expert_hidden_size")


def shrunk(config):
  """A copy of the config small enough to run for real on the CPU, with every fact the observation records kept:
  the layer count and pattern, head_dim (head count 2, hidden_size 2 * head_dim where head_dim is computed), the
  RoPE keys. Only widths that do not reach the attention shrink (MLP and expert widths). A forward that data-
  dependent code stops on the meta device (MoE routing by nonzero, a sampled distribution) runs on this."""
  small = copy.deepcopy(config)
  todo, seen = [small], set()
  while todo:
    cfg = todo.pop()
    if id(cfg) in seen:
      continue
    seen.add(id(cfg))
    todo += [getattr(cfg, k) for k in getattr(cfg, "sub_configs", {}) or {} if getattr(cfg, k, None) is not None]
    heads, hidden = getattr(cfg, "num_attention_heads", None), getattr(cfg, "hidden_size", None)
    head_dim = getattr(cfg, "head_dim", None)
    with contextlib.suppress(Exception):
      if isinstance(heads, int) and isinstance(hidden, int) and heads > 2:
        hd = head_dim if isinstance(head_dim, int) and head_dim else hidden // heads
        kv = getattr(cfg, "num_key_value_heads", None)
        cfg.num_attention_heads = 2
        if isinstance(kv, int):
          cfg.num_key_value_heads = 2 if kv >= 2 else 1
        cfg.hidden_size = 2 * hd
    with contextlib.suppress(Exception):  # token ids are zeros: a large vocabulary only costs memory (kept above
      # every special token id the config names: padding_idx and friends must stay inside it)
      ids = [v for k, v in cfg.to_dict().items() if k.endswith("token_id") and isinstance(v, int)]
      small_vocab = max([4096, *(i + 1 for i in ids)])
      for key in ("vocab_size", "vocab_size_per_layer_input"):  # Gemma 3n: a per-layer embedding table too
        if isinstance(getattr(cfg, key, None), int) and getattr(cfg, key) > small_vocab:
          setattr(cfg, key, small_vocab)
    for key, value in list(cfg.to_dict().items()):
      if WIDTH_KEY.search(key) and isinstance(value, int) and not isinstance(value, bool) and value > 64:
        with contextlib.suppress(Exception):
          setattr(cfg, key, 64)
  return small


def _failure(e):
  return f"{type(e).__name__}: {next((x for x in str(e).splitlines() if x.strip()), '')[:160]}"


class ForeignTowers(Refused):
  """A tower of another model's code rotates in the forward (refuse_foreign_towers): observed again with that code's
  candidates wrapped too (`meta_forward(..., towers=True)`), each tower then a part of its own sub-config."""


def _tower_modules(config, module):
  """The modeling modules of the config's sub-configs (and theirs, two deep) other than `module` that hold candidates:
  the code a second tower may rotate with (PE-Audio's text tower: ModernBERT's)."""
  found = {}
  for sub in _sub_configs(config, depth=2).values():
    mod = modeling_module(sub.model_type) if getattr(sub, "model_type", None) else None
    if mod is not None and mod is not module and candidates(mod):
      found[mod.__name__] = mod
  return list(found.values())


def _sub_configs(config, depth):
  """{dotted key: sub-config} of a config, `depth` levels down (Nemotron 3.5 Transcribe's
  "diarization_config.audio_config")."""
  out = {}
  for key in getattr(config, "sub_configs", {}) or {}:
    sub = getattr(config, key, None)
    if sub is None or not hasattr(sub, "to_dict"):
      continue
    out[key] = sub
    if depth > 1:
      out.update({f"{key}.{k}": v for k, v in _sub_configs(sub, depth - 1).items()})
  return out


def _call_module(call, module):
  """The modeling module whose apply a call ran: a second tower's (`meta_forward(..., towers=True)`), or `module`."""
  return importlib.import_module(call["module"]) if call.get("module") else module


def meta_forward(model_type, config, module, towers=False):
  """Step 2: which layers call which candidate, with which rotary module's cos/sin. On the meta device from the
  default config; where that forward stops on data-dependent code, for real on the CPU from `shrunk(config)`
  (the same modules at the same paths, so the rotary modules are still rebuilt from the default config)."""
  cls = model_class(model_type, config, module)
  if cls is None:
    raise Refused("no transformers model class to run")
  calls, outputs, depth, shapes, how, paths = [], {}, [0], {}, [None], {}
  alive = []  # the rotary outputs recorded by id, kept alive: a freed one's id taken by a later q would read as
  # a rotary output (Kyutai STT: a rotary module per layer, each output freed after its layer)
  tagged = []  # a tower's rotary outputs, kept to find them again reordered by token (_reordered_rotary_output)
  attempts_ok = [None]  # the inputs of the forward that ran

  def hook(mod, args, kwargs, out):
    for i, t in enumerate(out if isinstance(out, tuple) else (out,)):
      if torch.is_tensor(t):
        alive.append(t)
        outputs[id(t)] = (paths[id(mod)], [v for v in args if isinstance(v, (str, int, float))],
                          {k: v for k, v in kwargs.items() if isinstance(v, (str, int, float))}, i)
    shapes[paths[id(mod)]] = [list(a.shape) for a in [*args, *kwargs.values()] if torch.is_tensor(a)]
    ids = [a for a in [*args, *kwargs.values()] if torch.is_tensor(a) and not a.is_meta and not a.is_floating_point()]
    if ids:
      SEEN_IDS[paths[id(mod)]] = ids[0].tolist()
    if ids and how[0] == "vision" and ids[0].dim() == 2 and N_VISION <= len(ids[0]) <= N_VISION + MAX_VISION_EXTRA:
      VISION_TOKENS[0] = len(ids[0])  # a tower's [tokens, axes] ids: its image's patches and any class tokens
    if how[0] == "vision":  # a tower: its outputs' token rows made distinct, to follow them through a reorder
      return _tagged_rotary_output(out, outputs, tagged)
    return None

  derived = _DerivedRotaryOutputs(outputs, alive)  # cos/sin computed from a rotary output in the attention (CLVP)
  saved = candidates(module)
  wrapped = [(module, saved)] + [(m, candidates(m)) for m in (_tower_modules(config, module) if towers else ())]
  for mod, cands in wrapped:
    for name, fn in cands.items():
      def wrapper(*a, _fn=fn, _name=name, _mod=None if mod is module else mod.__name__, **k):
        caller = sys._getframe(1).f_locals.get("self")
        if depth[0]:  # a candidate called by a candidate (rotate_half inside apply_rotary_pos_emb)
          return _fn(*a, **k)
        order = _reordered_rotary_output([*a, *k.values()], outputs, tagged)
        sources = [outputs.get(id(t))[:3] for t in [*a, *k.values()] if torch.is_tensor(t) and id(t) in outputs]
        calls.append({"fn": _name, "caller": type(caller).__name__ if caller is not None else None,
                      "caller_path": _caller_path(paths.get(id(caller)) if caller is not None else None),
                      "caller_block": _block(paths.get(id(caller)) if caller is not None else None),
                      "layer": _caller_layer(sys._getframe(1), paths),
                      "shapes": [list(t.shape) for t in a if torch.is_tensor(t)],
                      "args": [_role(t, outputs) for t in a],
                      "tensor_kwargs": {kk: _role(v, outputs) for kk, v in k.items() if torch.is_tensor(v)},
                      "kwargs": {kk: v for kk, v in k.items() if isinstance(v, (str, int, float, bool))},
                      "rotary": next((s for s in sources if s is not None), None)})
        if _mod:  # a second tower's own apply (towers=True)
          calls[-1]["module"] = _mod
        if order is not None:
          calls[-1]["token_order"] = order
        if any(torch.is_tensor(t) and not t.is_floating_point() and not t.is_complex() for t in [*a, *k.values()]):
          calls[-1]["integer_args"] = True  # position ids handed to the apply itself (V-JEPA 2)
        depth[0] += 1
        derived.paused += 1  # inside the apply: its own use of cos/sin is the model's code, rerun whole
        try:
          result = _fn(*a, **k)
          with contextlib.suppress(Exception):  # a note for the refusals below: it never stops the forward
            _note_rotated(calls[-1], a, result, sys._getframe(1))
          return result
        finally:
          depth[0] -= 1
          derived.paused -= 1
      _install(mod, name, wrapper)

  def batched_experts(cfg):  # MoE: the experts' batched matmul has no data-dependent shapes
    with contextlib.suppress(Exception):
      cfg._experts_implementation = "batched_mm"
      for key in getattr(cfg, "sub_configs", {}):
        if getattr(cfg, key, None) is not None:
          getattr(cfg, key)._experts_implementation = "batched_mm"

  def run(model, stub, attempts=None):
    paths.clear()
    paths.update({id(m): p for p, m in model.named_modules()})
    for m in model.modules():
      if is_rotary_module(m):
        m.register_forward_hook(hook, with_kwargs=True)
    if attempts is None:
      kwargs = {"input_ids": torch.zeros(1, T_META, dtype=torch.long)}
      params = inspect.signature(model.forward).parameters
      if "decoder_input_ids" in params:
        kwargs["decoder_input_ids"] = torch.zeros(1, T_META, dtype=torch.long)
      attempts = [kwargs]
      if "use_cache" in params:  # some models' caches need real values: run without one
        attempts.append({**kwargs, "use_cache": False, "attention_mask": torch.ones(1, T_META, dtype=torch.long)})
      if stub:
        attempts.append(None)
      # then inputs of other shapes, each plainly and then stubbed
      extra = _embeds_attempts(model, params) + _codebook_attempts(model, params) + _series_attempts(model, params)
      extra += _layer_input_attempts(model, params, kwargs) + _context_attempts(model, params)
      extra += _image_context_attempts(model, params, kwargs) + _last_hidden_state_attempts(model, params)
      extra += _encoder_embeds_attempts(model, params, kwargs)
      types = {n: torch.zeros(1, T_META, dtype=torch.long) for n in params if n.endswith("token_type_ids")}
      if types:  # a text-only prompt's token types, all 0 (Molmo 2 requires them in training mode)
        extra.append({**kwargs, **types})
      if "patch_lengths" in params:  # BLT: given patch lengths (its patcher's sampled entropies stop the meta
        # forward; the patcher itself does not run): T_META patches over the T_META + 1 its own fallback covers, one
        # byte each and two in the last, so that its global transformer too has T_META tokens
        lengths = torch.ones(1, T_META, dtype=torch.long)
        lengths[0, -1] = 2
        extra.append({**kwargs, "patch_lengths": lengths, "use_cache": False})
      attempts += extra + ([("stubbed", a) for a in extra] if stub else [])
    elif stub:
      attempts.append(None)
    for n, attempt in enumerate(attempts):
      calls.clear()
      outputs.clear()
      alive.clear()
      tagged.clear()
      try:
        if attempt is None or isinstance(attempt, tuple):  # data-dependent reads on meta tensors get zeros (MoE
          # routing, mask checks): the token ids' last plain attempt, or a stubbed one of the other inputs
          with meta_values_stubbed():
            model(**(attempts[n - 1] if attempt is None else attempt[1]))
          how[0] = "stubbed"
        else:
          model(**attempt)
        attempts_ok[:] = [attempt]
        return
      except Exception:  # noqa: BLE001
        if attempt is attempts[-1]:
          raise

  try:
    with warnings.catch_warnings(), derived:
      warnings.simplefilter("ignore")
      batched_experts(config)
      try:
        with torch.device("meta"):
          model = cls(config)
      except ImportError as e:  # a library the reference venv lacks (timm needs a CPU torchvision): not observed
        raise Refused(f"its model needs a library the reference venv lacks: {_failure(e)}") from e
      except Exception as e:  # noqa: BLE001  building modules reads sizes only: it fails on any device alike
        raise NoModel(f"its default config builds no model in transformers: {_failure(e)}") from e
      _state_required(model)
      audio = _audio_inputs(model, config)
      vision = None if audio else _vision_inputs(model, config)
      if audio or vision:  # a tower, for real: an audio model on its probe inputs (_audio_inputs), in each
        # layout; a vision tower on one VISION_GRID image, its ids from grid_thw's values
        how[0] = "audio" if audio else "vision"
        try:
          with torch.no_grad():
            real = _real_audio(model, cls, config) if audio else _real_or_shrunk(model, cls, config)
            run(real, stub=False, attempts=audio or vision)
        except Exception as e:  # noqa: BLE001
          refuse_rotated_values(calls)  # what the apply calls before the failure showed (CLVP's encoders rotate v)
          what = "its audio probe (2 s of samples, 400 feature frames or latents)" if audio else \
              f"a {VISION_GRID} patch grid"
          raise Refused(f"its forward on {what} fails: {_failure(e)}") from e
        if audio:
          refuse_rotated_values(calls)  # CLVP: its apply's own mechanism first
          _refuse_unused_towers(real, calls, shapes, towers)
        # an audio encoder's frames after subsampling: the length of the position ids [1, T] its rotary module got
        frames = {shape[1] for got in shapes.values() for shape in got if len(shape) == 2 and shape[0] == 1}
        if audio and len(frames) == 2 and T_META in frames and "decoder_input_ids" in attempts_ok[0]:
          # an encoder-decoder (Moonshine): its decoder's tokens as many as the encoder's frames, so that every
          # rotary module runs on one token count
          frames.discard(T_META)
          again = {**attempts_ok[0], "decoder_input_ids": torch.zeros(1, next(iter(frames)), dtype=torch.long)}
          with torch.no_grad():
            run(real, stub=False, attempts=[again])
          frames = {shape[1] for got in shapes.values() for shape in got if len(shape) == 2 and shape[0] == 1}
        if audio and len(frames) == 1:
          TOKENS[0] = frames.pop()
      else:
        ran = model
        try:
          with torch.device("meta"):
            run(model, stub=True, attempts=_embeds_inputs(model, config) or _video_inputs(model, config))
        except Exception as meta_error:  # noqa: BLE001
          small = shrunk(config)
          batched_experts(small)
          try:
            with torch.device("meta"):
              _check_fits(cls(small), 4)
            torch.manual_seed(0)
            with torch.no_grad():
              small_model = cls(small)
              run(small_model, stub=False, attempts=_embeds_inputs(small_model, small) or _video_inputs(small_model, small))
            how[0] = "shrunk"
            ran = small_model
          except Exception as cpu_error:  # noqa: BLE001
            refused = Refused(f"its forward fails on the meta device ({_failure(meta_error)}) and, shrunk, on the CPU "
                              f"({_failure(cpu_error)})")
            image_and_text = _image_text_inputs(model, config)
            if image_and_text is None:
              raise refused from cpu_error
            try:  # a composite that requires an image beside its token ids (SAM 3): run for real on both
              with torch.no_grad():
                ran = _real_or_shrunk(model, cls, config)
                run(ran, stub=False, attempts=image_and_text)
              how[0] = "image_and_text"
            except Exception:  # noqa: BLE001  (the first failures say why it is not observed)
              raise refused from cpu_error
        ok = attempts_ok[0][1] if isinstance(attempts_ok[0], tuple) else attempts_ok[0]
        if isinstance(ok, dict) and "pixel_values_videos" in ok:  # a video encoder, alone or beside a text tower
          _refuse_unused_towers(ran, calls, shapes, towers)
          # (each tower on a token count of its own: the video's frames and class token, the text's T_META; read per
          # call by observe_rotations, as PE-Audio's)
  finally:
    for mod, cands in wrapped:
      for name, fn in cands.items():
        _install(mod, name, fn)
  for c in calls:
    c["stubbed"] = how[0]  # how the calls were observed: None (meta), "stubbed", "shrunk", "vision", "audio",
    # "image_and_text"
  refuse_rotated_values(calls)
  return calls, shapes, model


_DTYPES = {str(d): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}


class _DerivedRotaryOutputs(torch.overrides.TorchFunctionMode):
  """Follows a rotary module's output through the tensor ops its model applies to it alone before an apply gets it
  (CLVP's attention takes cos() and sin() of its module's angle table, then squeeze(0)): a result whose only tensor
  input is a recorded rotary output (or one derived from it) is recorded as that output with the ops appended, which
  run_group replays on the rebuilt module's output. Only ops of torch or torch.Tensor whose other arguments are plain
  values (ints, floats, a float dtype) are followed, and none in place: anything else stays unfollowed, as before."""

  def __init__(self, outputs, alive):
    super().__init__()
    self.outputs, self.alive, self.paused = outputs, alive, 0

  def __torch_function__(self, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    result = func(*args, **kwargs)
    if self.paused or not torch.is_tensor(result) or not args or not torch.is_tensor(args[0]):
      return result
    src = self.outputs.get(id(args[0]))
    name = getattr(func, "__name__", "")
    if src is None or len(src) < 4 or id(result) in self.outputs or name.endswith("_") or name.startswith("__"):
      return result
    where = "Tensor" if getattr(torch.Tensor, name, None) is func else "torch" if getattr(torch, name, None) is func \
        else None
    rest = [*args[1:], *kwargs.values()]

    def plain(v):
      return isinstance(v, (int, float, bool)) or v is None or (isinstance(v, (list, tuple)) and all(map(plain, v)))

    if where is None or not all(plain(v) or str(v) in _DTYPES for v in rest):
      return result
    enc = lambda v: {"dtype": str(v)} if str(v) in _DTYPES and not plain(v) else v  # noqa: E731
    op = [where, name, [enc(v) for v in args[1:]], {k: enc(v) for k, v in kwargs.items()}]
    ops = list(src[6]) if len(src) > 6 else []
    # (index 4, 5: a token order and the tensor kept alive, where _reordered_rotary_output found one)
    self.outputs[id(result)] = (*src[:4], *(src[4:6] if len(src) > 5 else (None, None)), [*ops, op])
    self.alive.append(result)
    return result


def _replay(t, ops):
  """A rotary output put through the ops _DerivedRotaryOutputs recorded."""
  dec = lambda v: _DTYPES[v["dtype"]] if isinstance(v, dict) and "dtype" in v else v  # noqa: E731
  for where, name, args, kwargs in ops or ():
    fn = getattr(torch.Tensor if where == "Tensor" else torch, name)
    t = fn(t, *[dec(v) for v in args], **{k: dec(v) for k, v in kwargs.items()})
  return t


def _state_argument(cls):
  """The first required forward parameter of cls annotated with a transformers class of its own (not torch.LongTensor):
  a state object (SAM 2 video's inference_session, which its processor builds from a whole video and its prompts),
  as (name, class); else None."""
  needs = [(n, p.annotation) for n, p in inspect.signature(cls.forward).parameters.items()
           if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
           and isinstance(p.annotation, type) and p.annotation is not inspect.Parameter.empty
           and p.annotation.__module__.startswith("transformers")]
  return needs[0] if needs else None


def _rotating_parts(model):
  """{top-level part's path: the classes of the rotary modules it holds}."""
  parts = {}
  for path, m in model.named_modules():
    if path and is_rotary_module(m):
      parts.setdefault(path.split(".")[0], set()).add(type(m).__name__)
  return parts


def state_model_entry(mt, config, cls):
  """A model whose forward requires a state object (`_state_argument`: SAM 2 video, EdgeTAM video, SAM 3 tracker
  video): no forward of it runs, so each top-level part that holds a rotary module is read on its own. The memory
  attention (`memory.memory_part`) is run on tensor inputs of the shapes it takes and observed
  (scripts/memory_rope_observer.py); a part the model builds from one of its sub-configs with that sub-config type's
  own model class (SAM 3 tracker video's vision_encoder: a Sam3VisionModel of its vision_config) rotates as that type
  does, whatever the registry reads of it: {"delegates": type, "sub": key}. Any other part is refused, naming it.
  One part: the entry is its family (or a delegation); several: "parts", by the part's name (the memory attention's
  path, or the sub-config key). Returns (entry, golden or None)."""
  name, state = _state_argument(cls)
  with warnings.catch_warnings(), torch.device("meta"):
    warnings.simplefilter("ignore")
    model = cls(config)
  parts, families, golden, errors, functions = _rotating_parts(model), {}, None, [], []
  where = memory.memory_part(model)
  for path, classes in parts.items():
    part = getattr(model, path)
    sub_key = next((k for k in getattr(config, "sub_configs", {}) or {}
                    if getattr(part, "config", None) is not None and _same(part.config, getattr(config, k, None))),
                   None)
    sub_type = getattr(getattr(config, sub_key, None), "model_type", None) if sub_key else None
    sub_cls = model_class(sub_type, getattr(config, sub_key), modeling_module(sub_type)) if sub_type else None
    if path == where:
      observed, golden = memory.observe(mt, config, type(part))
      families[path] = {"pixel": observed["family"]}
      errors.append(observed["error"])
      functions += observed["functions"]
    elif sub_cls is not None and type(part) is sub_cls:
      families[sub_key] = {"delegates": sub_type, "sub": sub_key}
    else:
      raise Refused(f"its forward requires {name} ({state.__name__}), a state object its processor builds, not "
                    f"tensors, so no forward is observed; its part {path} ({', '.join(sorted(classes))}) is neither "
                    "its memory attention, run alone, nor a tower of one of its sub-configs")
  if not families:
    return {"status": "no_rope", "unused_rotary_code": sorted(candidates(modeling_module(mt)))[:6]}, None
  if len(families) == 1 and "delegates" in next(iter(families.values())):
    (key, fam), = families.items()
    return {"status": "delegates", "sub_configs": {key: fam["delegates"]}}, None
  entry = {"status": "exact", "functions": sorted(set(functions)), "max_abs_error": max(errors),
           "state_argument": name}
  if len(families) == 1:
    entry["pixel"] = next(iter(families.values()))["pixel"]
  else:
    entry["parts"] = families
  return entry, golden


def _state_required(model):
  """A forward that requires a state object, not tensors (`_state_argument`), met where `state_model_entry` did not
  read the model: refused, naming that argument and the rotary modules its model holds, unobserved."""
  needs = _state_argument(type(model))
  if needs:
    held = "; ".join(f"{p} ({', '.join(sorted(c))})" for p, c in _rotating_parts(model).items())
    raise Refused(f"its forward requires {needs[0]} ({needs[1].__name__}), a state object its processor builds, "
                  "not tensors, so no forward is observed" + (f": its rotary code in {held} is not read" if held else ""))


def _embeds_attempts(model, params):
  """A forward that takes embeddings and refuses token ids (Qwen3-Omni's talker code predictor): T_META zero
  embeddings of the width its input embedding table gives, tried after the token ids."""
  if "inputs_embeds" not in params:
    return []
  width = None
  with contextlib.suppress(Exception):
    width = model.get_input_embeddings().weight.shape[-1]
  width = width or getattr(model.config, "hidden_size", None)  # its embedding table elsewhere (a ModuleList)
  return [{"inputs_embeds": torch.zeros(1, T_META, width)}] if isinstance(width, int) else []


def _encoder_embeds_attempts(model, params, kwargs):
  """A speech LM whose forward requires its audio beside the token ids and adds the audio tower's output to the
  token embeddings one for one (Voxtral Realtime: input_features or encoder_inputs_embeds, then inputs_embeds +=
  audio_embeds): the token ids with the encoder's embedded input at k frames per token, k = 1 .. 8 in turn (the
  one that runs is the tower's downsampling), of the width of each sub-config's hidden_size."""
  if "encoder_inputs_embeds" not in params or "input_ids" not in kwargs:
    return []
  widths = dict.fromkeys(getattr(sub, "hidden_size", None) for sub in _sub_configs(model.config, depth=1).values())
  return [{**kwargs, "encoder_inputs_embeds": torch.zeros(1, k * T_META, w)}
          for w in widths if isinstance(w, int) for k in range(1, 9)]


def _series_attempts(model, params):
  """A time-series model's forward (TimesFM 2.5: past_values [B, L], cut into patches of its patch_length): a
  random series of T_META patches, so its tokens are T_META as for token ids."""
  if "past_values" not in params or "input_ids" in params:
    return []
  values = json.loads(model.config.to_json_string(use_diff=False))
  patch = next((values[k] for k in ("patch_length", "patch_len", "patch_size") if isinstance(values.get(k), int)), 1)
  torch.manual_seed(0)
  return [{"past_values": torch.randn(1, T_META * patch)}]


def _context_attempts(model, params):
  """A drafter whose forward takes no token ids but embeddings and a context of another model's hidden states
  (MuseGlimmer's assistant: noise_embeds [B, T, hidden], context_hidden_states [B, C, k * hidden] that its keys
  prepend): T_META zero embeddings and an empty context (C = 0), so that its positions are the T_META of its queries;
  the context's width k * hidden_size tried for k = 1..8 (its own projection decides)."""
  required = [n for n, p in params.items() if p.default is inspect.Parameter.empty and
              p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
  width = getattr(model.config, "hidden_size", None)
  if "input_ids" in params or not required or not isinstance(width, int) or \
      not all(n.endswith("_embeds") or n.endswith("_hidden_states") for n in required) or \
      not any(n.endswith("_embeds") for n in required):
    return []
  return [{n: torch.zeros(1, T_META, width) if n.endswith("_embeds") else torch.zeros(1, 0, k * width)
           for n in required} for k in range(1, 9)]


def _image_context_attempts(model, params, kwargs):
  """A text model that cross-attends to images and requires some (Idefics: exactly one of pixel_values,
  image_encoder_embeddings, perceiver_embeddings): one image as 4 zero encoder embeddings of its vision config's
  width, every token allowed to see it. Its self-attention's rotation does not read them."""
  if "image_encoder_embeddings" not in params or "image_attention_mask" not in params:
    return []
  vision = getattr(model.config, "vision_config", None)
  width = next((getattr(vision, k) for k in ("embed_dim", "hidden_size") if isinstance(getattr(vision, k, None), int)),
               None)
  if width is None:
    return []
  return [{**kwargs, "image_encoder_embeddings": torch.zeros(1, 1, 4, width),
           "image_attention_mask": torch.ones(1, T_META, 1, dtype=torch.long), "use_cache": False}]


def _last_hidden_state_attempts(model, params):
  """A decoder conditioned on another model's last hidden state, one per step of that model, over a step's codebook
  tokens (Moshi's depth decoder, as MoshiForConditionalGeneration calls it: input_ids [B, K], a text token then the
  K - 1 codebooks before the last, and last_hidden_state [B, 1, width], embedded per codebook position): ids [1, K]
  for each codebook count K of the config, with a zero last_hidden_state [1, 1, w] for w each of its config's
  input_size and hidden_size (its own projection decides)."""
  if "last_hidden_state" not in params or "input_ids" not in params:
    return []
  values = json.loads(model.config.to_json_string(use_diff=False))
  counts = sorted({v for k, v in values.items() if CODEBOOK_KEY.match(k) and isinstance(v, int)
                   and not isinstance(v, bool) and 1 < v})
  widths = list(dict.fromkeys(values[k] for k in ("input_size", "hidden_size") if isinstance(values.get(k), int)))
  return [{"input_ids": torch.zeros(1, k, dtype=torch.long), "last_hidden_state": torch.zeros(1, 1, w)}
          for k in counts for w in widths]


LAYER_STANDARD = {"self", "hidden_states", "attention_mask", "position_ids", "position_embeddings", "cache",
                  "past_key_values", "past_key_value", "use_cache", "cache_position", "output_attentions", "kwargs"}


def _layer_inputs(model, params):
  """The tensor inputs its decoder layers take that its forward does not (Voxtral Realtime's t_cond, a conditioning
  its composite computes and passes through **kwargs): the names of the numbered layers' forward parameters that
  default to None, are annotated as tensors, and are neither the usual layer inputs nor the model's own."""
  names = set()
  for _, m in model.named_modules():
    if isinstance(m, torch.nn.ModuleList):
      for layer in m:
        for name, p in inspect.signature(layer.forward).parameters.items():
          if name not in LAYER_STANDARD and name not in params and p.default is None and \
              "Tensor" in str(p.annotation) and "tuple" not in str(p.annotation):
            names.add(name)
  return sorted(names)


def _layer_input_attempts(model, params, kwargs):
  """The token ids with a zero [1, hidden_size] for each tensor its layers take and its forward does not give (the
  layers' own conditioning, not their positions: what they rotate by is still the model's rotary module's)."""
  names, width = _layer_inputs(model, params), getattr(model.config, "hidden_size", None)
  if not names or not isinstance(width, int) or "kwargs" not in params:
    return []
  return [{**kwargs, **{n: torch.zeros(1, width) for n in names}}]


CODEBOOK_KEY = re.compile(r"^num_(codebooks|channels|quantizers)$")


def _codebook_attempts(model, params):
  """Token ids with a codebook axis (an audio codec's streams): [1, T, K] (Kyutai STT: K = num_codebooks + 1, its
  text stream first), [1, K, T] (Dia's decoder_input_ids, read as K streams of T tokens), K from the config's (or a
  sub-config's) codebook or channel count. Only the ids' shape is chosen: the layers and rotations are the model's."""
  values = json.loads(model.config.to_json_string(use_diff=False))
  places = [values] + [v for v in values.values() if isinstance(v, dict)]
  counts = sorted({v for place in places for k, v in place.items() if CODEBOOK_KEY.match(k) and isinstance(v, int)
                   and not isinstance(v, bool) and 1 < v and v + 1 != T_META and v != T_META})
  key = "decoder_input_ids" if "decoder_input_ids" in params else "input_ids"
  context = {}
  if "encoder_hidden_states" in params and "decoder_input_ids" not in params:  # a decoder alone (Dia's): zero encoder
    # states of the width its cross-attention takes (cross_hidden_size, else hidden_size)
    width = next((values[k] for k in ("cross_hidden_size", "encoder_hidden_size", "hidden_size")
                  if isinstance(values.get(k), int)), None)
    if width:
      context = {"encoder_hidden_states": torch.zeros(1, T_META, width)}
  out = []
  for k in counts:
    for shape in ((1, T_META, k), (1, T_META, k + 1), (1, k, T_META)):
      attempt = {key: torch.zeros(*shape, dtype=torch.long), **context}
      if key == "decoder_input_ids":
        attempt["input_ids"] = torch.zeros(1, T_META, dtype=torch.long)
      out.append(attempt)
  return out


def _tagged_rotary_output(out, outputs, tagged):
  """A vision tower's rotary output with every token's row made distinct (token i's values + i / 1024: the forward
  only has to run), so that an apply that gets its rows reordered can be traced back to it (Qwen2.5-VL permutes
  cos/sin by its window index between its rotary module and its attention). The token axis: the first of length
  VISION_TOKENS. Returns the output to use, the tagged tensors recorded as `outputs` records the originals."""
  items = out if isinstance(out, tuple) else (out,)
  new, n = [], VISION_TOKENS[0]
  for t in items:
    axis = next((i for i, k in enumerate(t.shape) if k == n), None) if torch.is_tensor(t) else None
    if axis is None or not t.is_floating_point() or t.is_meta:
      new.append(t)
      continue
    shape = [1] * t.dim()
    shape[axis] = n
    tag = t + (torch.arange(n, dtype=torch.float32) / 1024).reshape(shape).to(t.dtype)
    outputs[id(tag)] = outputs[id(t)]
    tagged.append((tag, axis, t))  # the untagged output kept alive too: its id must not be reused while recorded
    new.append(tag)
  return tuple(new) if isinstance(out, tuple) else new[0]


def _reordered_rotary_output(args, outputs, tagged):
  """Where an apply gets a tensor that is a tagged rotary output with its tokens reordered (rows t[j] = o[order[j]]
  along the token axis, every row matched exactly, each once), that tensor is recorded as the rotary output's (its
  rotation is the same per position) and the order is returned: the tower rotates token j by the position ids of
  token order[j]. All such tensors of one call must share one order. None where no argument is reordered."""
  found = set()
  for t in args:
    if torch.is_tensor(t) and id(t) in outputs and len(outputs[id(t)]) > 4 and outputs[id(t)][4] is not None:
      # found reordered by an earlier call
      found.add(outputs[id(t)][4])
    if not torch.is_tensor(t) or id(t) in outputs or t.is_meta or not t.is_floating_point():
      continue
    for o, axis, _ in tagged:
      if o.shape != t.shape or o.dtype != t.dtype:
        continue
      n = o.shape[axis]
      rows = {o.select(axis, i).double().numpy().tobytes(): i for i in range(n)}
      order = [rows.get(t.select(axis, j).double().numpy().tobytes()) for j in range(n)]
      if len(rows) == n and None not in order and sorted(order) != order and sorted(order) == list(range(n)):
        outputs[id(t)] = (*outputs[id(o)][:4], tuple(order), t)  # (the order, and the tensor kept alive)
        found.add(tuple(order))
        break
  if len(found) > 1:
    raise Refused("an apply gets a rotary module's outputs reordered by two different token orders")
  return list(found.pop()) if found else None


def _refuse_unused_towers(model, calls, shapes, towers):
  """After an audio or video forward: a rotary module that no apply used is refused (refuse_foreign_towers); with
  every tower's code wrapped (towers), as a Refused that says so."""
  if not towers:
    refuse_foreign_towers(model, calls, shapes)
    return
  try:
    refuse_foreign_towers(model, calls, shapes)
  except ForeignTowers as e:
    raise Refused(f"{e} (a tower's cos/sin applied by no candidate of any sub-config's code)") from None


def refuse_foreign_towers(model, calls, shapes):
  """A rotary module that ran in the forward but whose cos/sin no apply of the type's own modeling module took: a
  tower of another model's code rotates there (PE-Audio's text tower is ModernBERT), unobserved and each its own
  way. Refused, naming the sub-configs that hold each tower, where the reader can be asked for each."""
  if not calls or any(c["rotary"] is None for c in calls):  # cos/sin from no rotary module: refused after this
    return
  used = {c["rotary"][0] for c in calls}
  foreign = sorted(set(shapes) - used)
  if not foreign:
    return
  subs = getattr(model.config, "sub_configs", {}) or {}

  def where(path):  # the sub-config (or a sub-config's sub-config) the tower's rotary module reads
    cfg = getattr(model.get_submodule(path), "config", None)
    for key in subs:
      sub = getattr(model.config, key, None)
      if _same(sub, cfg):
        return f"its {key} ({cfg.model_type})"
      inner = next((k for k in getattr(sub, "sub_configs", {}) or {} if _same(getattr(sub, k, None), cfg)), None)
      if inner:
        return f"its {key}.{inner} ({cfg.model_type})"
    return type(model.get_submodule(path)).__name__

  own = sorted({where(c["rotary"][0]) for c in calls if c["rotary"]})
  other = sorted({where(p) for p in foreign})
  raise ForeignTowers(f"two towers rotate each their own way: {', '.join(own)} with its own apply, and "
                      f"{', '.join(other)} with another model's code ({foreign[0]}): read from_hf_config on each "
                      "sub-config")


def _note_rotated(call, args, result, frame):
  """What an apply call handed back: how many tensors of its first argument's layout it took and returned (q and k,
  or more), and the names its caller's frame gives those arguments (what they are, for the refusal's message)."""
  first = args[0] if args and torch.is_tensor(args[0]) else None
  if first is None or first.dim() < 2:
    return
  alike = [t for t in args if torch.is_tensor(t) and t.dim() == first.dim() and t.shape[-1] == first.shape[-1]]
  # (first's layout: a 0-d or 1-d first argument is no q, and is not looked at)
  heads = [t.shape[1] for t in frame.f_locals.values() if torch.is_tensor(t) and t.dim() == 4 == first.dim()
           and t.shape[1] > first.shape[1] and t.shape[:1] + t.shape[2:] == first.shape[:1] + first.shape[2:]]
  if heads:  # the caller holds q-like tensors with more heads than the apply got: it rotates a slice of the heads
    call["head_slice"] = [first.shape[1], max(heads)]
    found = _head_range([t for t in frame.f_locals.values() if torch.is_tensor(t) and t.dim() == 4
                         and t.shape[1] == max(heads)], first)
    if found:
      call["head_range"], call["head_perm"] = found
  out = result if isinstance(result, tuple) else (result,)
  call["rotated"] = sum(1 for t in out if torch.is_tensor(t) and t.dim() == first.dim()
                        and t.shape[-1] == first.shape[-1]) if len(alike) >= 3 else None
  if call["rotated"]:
    call["rotated_names"] = [next((n for n, v in frame.f_locals.items() if v is t), "?") for t in alike]


def _head_range(held, first):
  """Which of its caller's heads an apply got, matched by value on a forward that runs for real (Qwen2.5-Omni's DiT
  hands its apply deinterleave_head_dim(query[:, :1])): ([start, stop, heads], perm) where the apply's q is heads
  [start, stop) of one tensor the caller holds with its channels in the order perm (None: as held), or None when no
  held tensor matches exactly one slice (on the meta device there are no values to match)."""
  if first.is_meta or any(t.is_meta for t in held):
    return None
  n, found = first.shape[1], []
  for t in held:
    for start in range(t.shape[1] - n + 1):
      part = t[:, start:start + n]
      if torch.equal(part, first):
        found.append(([start, start + n, t.shape[1]], None))
        continue
      perm = []
      for j in range(first.shape[-1]):  # channel j of the apply's q is channel perm[j] of the held slice
        same = [i for i in range(part.shape[-1]) if torch.equal(part[..., i], first[..., j])]
        if len(same) != 1:
          break
        perm.append(same[0])
      if len(perm) == first.shape[-1] and sorted(perm) == list(range(part.shape[-1])):
        found.append(([start, start + n, t.shape[1]], perm))
  return found[0] if len(found) == 1 else None


def refuse_rotated_values(calls):
  """An apply that takes and returns three tensors of q's layout rotates a third beside q and k: the values
  (CLVP's apply_rotary_pos_emb(q, k, v, ...)), on every call. The spec's rotate_value can turn v, but an observed
  family records no such fact (only RoFormer's hand-written rotary_value key reads it), and the golden checks q
  only: refused, naming it, rather than read as a rotation of q and k alone."""
  for c in calls:
    if c.get("head_slice") and c.get("stubbed") == "audio" and not c.get("head_range"):  # (checked where audio
      # models run for real; found by value, the slice is read: the spec's heads)
      have, of = c["head_slice"]
      raise Refused(f"{c['fn']} (called by {c['caller']}) gets {have} of the {of} heads its caller holds: it "
                    f"rotates only some heads (the others pass unrotated), which a RoPE spec does not carry")
    if (c.get("rotated") or 0) >= 3 and not _rotates_value(c):
      raise Refused(f"{c['fn']} (called by {c['caller']}) rotates {c['rotated']} tensors per call, not q and k "
                    f"only ({', '.join(c['rotated_names'])}), and not q, k and v (three tensors of q's layout handed "
                    "in and rotated back)")


def _rotates_value(call):
  """An apply call that takes three tensors of q's layout (q, k and the attention's third per-head tensor, v) and
  hands three back rotated (CLVP's apply_rotary_pos_emb(q, k, v, ...)): the spec's rotate_value. run_group checks
  that all three turn alike, by the same positions; the golden checks q."""
  return (call.get("rotated") or 0) == 3 and sum("x" in r for r in call["args"]) == 3


def merge_order(height, width, merge):
  """(row, col) of a height x width grid's patches in m x m merge blocks, raster inside each (Qwen-VL)."""
  rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
  blocks = [a.reshape(height // merge, merge, width // merge, merge).transpose(0, 2, 1, 3).reshape(-1)
            for a in (rows, cols)]
  return np.stack(blocks, -1)


def token_order(ids, config):
  """How a grid tower orders its tokens, from the ids its own code gave the probe image: in merge blocks of its
  config's spatial_merge_size (Qwen2-VL: {"merge_size_key": ...}) or in plain raster order (PaddleOCR-VL, whose
  merge comes later: {"merge_size": 1}); else Refused."""
  ids = np.asarray(ids)
  if ids.ndim == 2 and ids.shape[1] == 3 and not ids[:, 0].any():  # (frame, row, col) of one frame (MiniMax-M3-VL)
    return {**token_order(ids[:, 1:], config), "frame_axis": True}
  extra = len(ids) - N_VISION
  if 0 < extra <= MAX_VISION_EXTRA:  # class tokens in front at (0, 0), the patches counted from 1 (Inkling 2)
    if ids[:extra].any() or ids[extra:].min() != 1:
      raise Refused(f"its tower adds {extra} token(s) to the image's patches, at ids {ids[:extra].tolist()} before "
                    f"patches from {ids[extra:].min()}: not class tokens at (0, 0) before 1-based patches")
    return {**token_order(ids[extra:] - 1, config), "start": 1, "cls_tokens": extra}
  key = next((k for k in ("spatial_merge_size", "merge_size") if isinstance(getattr(config, k, None), int)), None)
  _, h, w = VISION_GRID
  if key and h % getattr(config, key) == 0 and w % getattr(config, key) == 0 and \
      np.array_equal(ids, merge_order(h, w, getattr(config, key))):
    return {"merge_size_key": key}
  if np.array_equal(ids, merge_order(h, w, 1)):
    return {"merge_size": 1}
  windowed = window_token_order(ids, config)
  if windowed is not None:
    return windowed
  raise Refused(f"its tower orders its tokens' (row, col) ids as {ids[:6].tolist()}..., neither raster nor in "
                "merge blocks")


def _reordered_ids(ids, calls):
  """The ids each token of a tower's attention is rotated by: its rotary module's ids, reordered where every apply
  got the rotary outputs reordered by one token order (Qwen2.5-VL's window index); Refused where the applies
  disagree (some reordered, some not, or by different orders)."""
  orders = {json.dumps(c.get("token_order")) for c in calls}
  if len(orders) != 1:
    raise Refused("its layers get the rotary module's outputs in different token orders")
  order = calls[0].get("token_order")
  return ids if ids is None or order is None else np.asarray(ids)[order].tolist()


def window_merge_order(height, width, merge, window):
  """(row, col) of a height x width grid's patches in windows of window x window merge blocks (Qwen2.5-VL's window
  attention, written here from its description: the merge-block grid cut into windows from the top left, the
  windows at the right and bottom edges partial, windows in raster order, raster order of the blocks inside each
  window, merge_order inside each block)."""
  blocks = merge_order(height, width, merge).reshape(height // merge, width // merge, merge * merge, 2)
  out = []
  for r0 in range(0, height // merge, window):
    for c0 in range(0, width // merge, window):
      out.append(blocks[r0:r0 + window, c0:c0 + window].reshape(-1, 2))
  return np.concatenate(out)


def window_token_order(ids, config):
  """A tower whose ids are merge_order's reordered into windows (window_merge_order): {"merge_size_key": ...,
  "window_size_key": ..., "patch_size_key": ...}, the window being window_size // (merge * patch) merge blocks
  per side, read from the config's int keys that give the observed order; else None. The candidate keys are
  those named for a window or a patch; the order must be the one these values give and no plain merge order."""
  ints = {k: v for k, v in json.loads(config.to_json_string(use_diff=False)).items()
          if isinstance(v, int) and not isinstance(v, bool) and v > 0}
  _, h, w = VISION_GRID
  found = []
  for mkey in ("spatial_merge_size", "merge_size"):
    for wkey in (k for k in ints if "window" in k):
      for pkey in (k for k in ints if "patch_size" in k and "temporal" not in k):
        if mkey not in ints or h % ints[mkey] or w % ints[mkey]:
          continue
        window = ints[wkey] // ints[mkey] // ints[pkey]
        if window >= 1 and np.array_equal(ids, window_merge_order(h, w, ints[mkey], window)):
          found.append({"merge_size_key": mkey, "window_size_key": wkey, "patch_size_key": pkey})
  if len({json.dumps(f) for f in found}) > 1 and len({(f["window_size_key"], f["merge_size_key"]) for f in found}) > 1:
    raise Refused(f"its window order is given by several config keys ({found}): which one is not observed")
  return found[0] if found else None


def _image_text_inputs(model, config):
  """A composite whose forward takes an image beside token ids, with no patch grid (SAM 3: exactly one of
  pixel_values or vision_embeds, and input_ids), tried where its token ids alone fail: one random image [1, C, S, S]
  at the size its config names (the first image_size of the config or its sub-configs, two deep: SAM 3's
  vision_config, 1008) and T_META zero token ids; None for any other forward."""
  params = inspect.signature(model.forward).parameters
  if not {"pixel_values", "input_ids"} <= set(params) or {"grid_thw", "image_grid_thw"} & set(params):
    return None
  sized = [c for c in [config, *_sub_configs(config, depth=2).values()]
           if isinstance(getattr(c, "image_size", None), int) and not isinstance(c.image_size, bool)]
  if not sized:
    return None
  channels = next((getattr(c, k) for c in sized for k in ("num_channels", "in_channels")
                   if isinstance(getattr(c, k, None), int)), 3)
  torch.manual_seed(0)
  side = sized[0].image_size
  return [{"pixel_values": torch.randn(1, channels, side, side, dtype=torch.bfloat16),
           "input_ids": torch.zeros(1, T_META, dtype=torch.long)}]


def tower_delegation(model, config, calls, shapes):
  """A composite observed on an image and token ids (`_image_text_inputs`) whose every rotary apply call, and every
  rotary module that ran, lies in one top-level part that the model builds from one of its sub-configs with that
  sub-config type's own model class (SAM 3's vision_encoder: a Sam3VisionModel of its vision_config): its RoPE is that
  sub-config type's, {key: type} for "delegates". Refused where the rotations lie elsewhere, naming where."""
  where = {p.split(".")[0] for p in shapes} | {(c.get("caller_block") or "").split(".")[0] for c in calls} | \
      {c["rotary"][0].split(".")[0] if c["rotary"] else None for c in calls}
  parts = ", ".join(sorted(str(w) for w in where))
  if len(where) != 1 or None in where or "" in where:
    raise Refused(f"its forward on an image and token ids rotates in several parts ({parts}): not one tower")
  part = getattr(model, where.pop())
  for key in getattr(config, "sub_configs", {}) or {}:
    sub = getattr(config, key, None)
    sub_type = getattr(sub, "model_type", None)
    if sub_type and _same(getattr(part, "config", None), sub) and \
        type(part) is model_class(sub_type, sub, modeling_module(sub_type)):
      return {key: sub_type}
  raise Refused(f"its forward on an image and token ids rotates in {parts} ({type(part).__name__}), which is no "
                "model of one of its sub-configs")


def _vision_inputs(model, config):
  """A vision tower's forward inputs for one image of VISION_GRID patches and its grid_thw, from the config's patch
  sizes, in the layouts towers take them (tried in turn); None for a model that takes no grid."""
  params = inspect.signature(model.forward).parameters
  grid_key = next((k for k in ("grid_thw", "image_grid_thw") if k in params), None)
  if grid_key is None or "input_ids" in params:  # a composite (Qwen2-VL) runs on token ids: its text model rotates
    return None

  def size(*keys, default):
    value = next((getattr(config, k) for k in keys if isinstance(getattr(config, k, None), (int, list, tuple))),
                 default)
    return int(value[0] if isinstance(value, (list, tuple)) else value)

  channels = size("in_channels", "num_channels", "in_chans", default=3)
  temporal = size("temporal_patch_size", "patch_temporal", default=1)
  patch = size("patch_size", "spatial_patch_size", default=14)
  name = "hidden_states" if "hidden_states" in params else "pixel_values"
  torch.manual_seed(0)
  extra = {grid_key: torch.tensor([list(VISION_GRID)])}
  if "merge_sizes" in params:  # VideoLLaMA 3: the merge size per image, its config's
    extra["merge_sizes"] = torch.tensor([size("spatial_merge_size", "merge_size", default=1)])
  # the patches as each tower takes them, tried in turn: flattened (Qwen-VL), [N, C, p, p] (Kimi-K2.5),
  # [1, N, C, p, p] (PaddleOCR-VL), channels last [N, p, p, C]
  attempts = [{name: torch.randn(*shape, dtype=torch.bfloat16), **extra}
              for shape in ((N_VISION, channels * temporal * patch * patch), (N_VISION, channels, patch, patch),
                            (1, N_VISION, channels, patch, patch), (N_VISION, patch, patch, channels))]
  # last, a tower whose grid counts merged tokens (Inkling 2's image_grid_thw: its forward multiplies it by the merge
  # size): the same image as (t, h / m, w / m) merged tokens of m x m patches each, channels last
  merge = size("spatial_merge_size", "merge_size", default=1)
  t, h, w = VISION_GRID
  if merge > 1 and h % merge == 0 and w % merge == 0:
    attempts.append({name: torch.randn(N_VISION // merge ** 2, merge * patch, merge * patch, channels,
                                       dtype=torch.bfloat16), **extra, grid_key: torch.tensor([[t, h // merge, w // merge]])})
  return attempts


MAX_BYTES = 8e9  # the largest model the script makes real on the CPU (a 24 GiB machine runs it beside others)


def _check_fits(model, bytes_per_parameter):
  n = sum(p.numel() for p in model.parameters())
  if n * bytes_per_parameter > MAX_BYTES:
    raise RuntimeError(f"{n / 1e9:.1f}B parameters: too large to run on the CPU")


def _audio_config_int(config, keys, default=None):
  """The first of `keys` the config sets to a number, in its own keys and then its sub-configs' (Parakeet CTC keeps
  its mel count in encoder_config, Xcodec2 its semantic feature width in semantic_model_config)."""
  values = json.loads(config.to_json_string(use_diff=False))
  places = [values] + [v for v in values.values() if isinstance(v, dict)]
  for k in keys:
    for value in [getattr(config, k, None)] + [place.get(k) for place in places]:  # a property first (Xcodec2's
      if isinstance(value, (int, float)) and not isinstance(value, bool):          # hop_length), then the keys
        return value
  return default


AUDIO_SECONDS = 2  # a waveform probe's length, at the config's own sampling rate
AUDIO_FRAMES = 400  # a feature probe's frames where the config names no hop to derive them from


def _audio_inputs(model, config):
  """An audio model's forward inputs, tried in turn, built from its forward's required arguments and its config's
  own sizes; None for a model that takes token ids.
  * a waveform (``input_values``): 2 s at the config's sampling rate, as [B, S] and [B, 1, S];
  * features (``input_features``): 400 frames of its mel count, as [B, T, mels] and [B, mels, T]; where the forward
    takes a waveform too (Xcodec2: a semantic encoder beside an acoustic one, their frames concatenated), the
    features' frames are the waveform's samples over the config's hop_length;
  * a decoder's ``latents``: 2 s of frames at the config's frame_rate, [B, C, F] with C its latent_dim or its
    hidden_size (tried in turn);
  * the waveform sample count of each feature chunk (``chunk_sample_lengths``, Dots3-Note): frames x hop_length;
  * ``decoder_input_ids`` where the forward takes them (Moonshine), T_META zeros."""
  params = inspect.signature(model.forward).parameters
  required = {n for n, p in params.items() if p.default is inspect.Parameter.empty
              and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "self"}
  audio_in = {"input_values", "input_features"} & set(params)
  caches = {"cache", "past_key_values", "use_cache"} & set(params)
  extra = {}
  if "input_ids" in params:
    if not audio_in or caches:  # a text model, or a speech LM generating text: its token ids alone
      return None
    # token ids beside audio with no cache: two towers (PE-Audio's text and audio encoders, CLVP's conditioning
    # encoder on mel features): both run
    extra["input_ids"] = torch.zeros(1, T_META, dtype=torch.long)
  if required == {"inputs_embeds"} and "input_ids" not in params:
    # a head on another model's frame embeddings (Nemotron 3.5's word timestamps, which upsample them): run for real
    # here, where the token count is read from the position ids its rotary module gets (not T_META)
    width = int(_audio_config_int(config, ("hidden_size", "d_model"), 512))
    torch.manual_seed(0)
    return [{"inputs_embeds": torch.randn(1, T_META, width, dtype=torch.bfloat16)}]
  token2wav = _token2wav_inputs(required, config)
  if token2wav:
    return token2wav
  torch.manual_seed(0)
  rate = int(_audio_config_int(config, ("sampling_rate", "input_sampling_rate", "sample_rate"), 16000))
  samples = AUDIO_SECONDS * rate
  hop = _audio_config_int(config, ("hop_length",))
  if "decoder_input_ids" in params:
    extra["decoder_input_ids"] = torch.zeros(1, T_META, dtype=torch.long)
  if "latents" in required:
    frames = int(AUDIO_SECONDS * _audio_config_int(config, ("frame_rate", "_frame_rate"), 25))
    widths = dict.fromkeys(int(w) for w in (_audio_config_int(config, (k,)) for k in ("latent_dim", "hidden_size"))
                           if w)
    return [{"latents": torch.randn(1, w, frames, dtype=torch.bfloat16), **extra} for w in widths]
  waves = [torch.randn(1, samples, dtype=torch.bfloat16), torch.randn(1, 1, samples, dtype=torch.bfloat16)]
  if "pixel_values_videos" in params and (clip := _video_clip(model, config, dtype=torch.bfloat16)) is not None:
    extra["pixel_values_videos"] = clip  # an audio-video encoder (PE Audio-Video): both its towers run
  if "input_features" in params:
    mels = int(_audio_config_int(config, ("num_mel_bins", "feature_size", "input_feat_size", "n_mels",
                                          "feature_projection_input_dim"), 128))
    both = "input_values" in required
    frames = samples // hop if both and hop else AUDIO_FRAMES
    features = [torch.randn(1, frames, mels, dtype=torch.bfloat16), torch.randn(1, mels, frames, dtype=torch.bfloat16)]
    if "chunk_sample_lengths" in required:  # one chunk of `frames` feature frames, hop_length samples each
      extra["chunk_sample_lengths"] = torch.tensor([frames * int(hop or 160)])
    if both:
      return [{"input_values": w, "input_features": f, **extra} for w in waves[::-1] for f in features]
    return [{"input_features": f, **extra} for f in features]
  if "input_values" in params:
    return [{"input_values": w, **extra} for w in waves]
  return None


def _token2wav_inputs(required, config):
  """Name-specific, and justified: Qwen2.5-Omni's code-to-mel DiT and its token2wav wrapper take what the Omni
  pipeline builds upstream (the talker's codec codes, a speaker vector, a reference mel), none of which a processor
  makes alone; their shapes come from the DiT config (mel_dim, enc_emb_dim, repeats): T_META codes, repeats x
  T_META mel frames, a 50-frame reference mel. None for any other forward."""
  torch.manual_seed(0)
  mel, speaker = (int(_audio_config_int(config, (k,), 0)) for k in ("mel_dim", "enc_emb_dim"))
  frames = T_META * int(_audio_config_int(config, ("repeats",), 1))
  reference = torch.randn(1, 50, mel, dtype=torch.bfloat16)
  codes = torch.zeros(1, T_META, dtype=torch.long)
  if required == {"hidden_states", "condition_vector", "speaker_embedding", "quantized_code", "time_step"}:
    return [{"hidden_states": torch.randn(1, frames, mel, dtype=torch.bfloat16), "condition_vector": reference,
             "speaker_embedding": torch.randn(1, frames, speaker, dtype=torch.bfloat16), "quantized_code": codes,
             "time_step": torch.tensor(0.5, dtype=torch.bfloat16)}]
  if required == {"code", "conditioning", "reference_mel"}:
    return [{"code": codes, "conditioning": torch.randn(1, speaker, dtype=torch.bfloat16), "reference_mel": reference,
             "num_steps": 2}]
  return None


def _real_audio(meta_model, cls, config):
  """`_real`, with the buffers the model's own __init__ computes (a conv stack's integer stride, kernel_size and
  padding_total: Mimi's, zeroed by `_real`, make every conv's output empty), in eval mode."""
  model = _real(meta_model)
  with warnings.catch_warnings(), params_on_meta():
    warnings.simplefilter("ignore")
    reference = cls(config)
  with torch.no_grad():
    for name, b in reference.named_buffers():
      with contextlib.suppress(AttributeError, RuntimeError):
        model.get_buffer(name).copy_(b)
  return model.eval()  # no dropout, no layerdrop: in training mode LASR skips layers at random


def check_heads_in_model(model, family):
  """Where the rotary module alone was seen to take its head dim from width_key / heads_key (head_dim_from), the
  whole model built on meta with heads_key doubled must halve every rotary module's frequencies too. Where it does
  not, building the model rewrites the config its rotary modules read (Moonshine's attention sets the shared
  config's num_attention_heads, its decoder's key, to the encoder's head count while the encoder is built): the key
  whose doubling halves them all in the built model is the one read instead, when exactly one of the config's keys
  with that value does; else Refused."""
  if not family or not family.get("head_dim_from") or family.get("sub"):
    return
  width, heads, _, heads_default = family["head_dim_from"]
  base = {p: len(m.inv_freq) for p, m in model.named_modules() if is_rotary_module(m) and hasattr(m, "inv_freq")}

  def halves(key):
    config = copy.deepcopy(model.config)
    try:
      setattr(config, key, 2 * heads_default)
      with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        built = type(model)(config)
    except Exception:  # noqa: BLE001  a model that does not build with the key doubled
      return None
    got = {p: len(m.inv_freq) for p, m in built.named_modules() if p in base and hasattr(m, "inv_freq")}
    return got if got.keys() == base.keys() and all(n in (base[p] // 2, (base[p] + 1) // 2) for p, n in got.items()) \
        else False

  if halves(heads) is not False:  # it does (or the model does not build with it doubled: nothing to compare)
    return
  keys = [k for k, v in model.config.to_dict().items() if v == heads_default and not isinstance(v, bool)
          and k != heads and halves(k)]
  if len(keys) != 1:
    raise Refused(f"its rotary module alone takes its head dim from {width} / {heads}, but in the model built with "
                  f"{heads} doubled its rotary modules keep their frequencies, and {len(keys)} other keys of value "
                  f"{heads_default} halve them all: building the model rewrites the config its rotary modules read")
  family["head_dim_from"] = [width, keys[0], family["head_dim_from"][2], heads_default]


def _real(meta_model):
  """The meta model made real on the CPU in bfloat16 with random weights, without its slow initialisation: the
  forward only has to run (which layer calls what with which ids); the rotations are rebuilt in float64."""
  _check_fits(meta_model, 2)
  model = meta_model.to(torch.bfloat16).to_empty(device="cpu")
  with torch.no_grad():
    for p in model.parameters():
      p.normal_(0, 0.02)
    for b in model.buffers():
      if b.is_floating_point():
        b.zero_()
      else:
        b.fill_(0)
  return model.eval()  # no dropout, no layerdrop: a layer skipped at random would not be observed


def _embeds_inputs(model, config):
  """The forward inputs of a model that takes embeddings and no token ids (DeepSeek-OCR 2's vision encoder, a
  decoder over its image's features and queries): T_META zero embeddings of the config's hidden_size, and every
  other parameter the forward requires that is annotated an int (a token count: num_patches, the image tokens at
  the front) given T_META, all of them; None for any other forward (token ids, as before)."""
  params = inspect.signature(model.forward).parameters
  if "input_ids" in params or "inputs_embeds" not in params or not isinstance(getattr(config, "hidden_size", None),
                                                                              int):
    return None
  kwargs = {"inputs_embeds": torch.zeros(1, T_META, config.hidden_size)}
  for name, p in params.items():
    if name not in kwargs and p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                                                  p.KEYWORD_ONLY):
      if p.annotation not in (int, "int"):
        return None
      kwargs[name] = T_META
  return [kwargs]


def _video_clip(model, config, frames=None, dtype=torch.float32):
  """A zero video [1, frames, channels, h, w] for the model's pixel_values_videos:
  * from the config's patch and tubelet sizes, a clip of 2 tubelets of 2 x 2 patches;
  * where it names none and its frames go one by one through an image classifier it builds (PE Video's timm
    classifier, the stand-in, which reads only how many there are: _timm_stand_in), `frames` (T_META) frames of
    3 x 32 x 32 pixels;
  None for any other model."""
  values = json.loads(config.to_json_string(use_diff=False))
  patch, tubelet = values.get("patch_size"), values.get("tubelet_size", 1)
  channels = values.get("in_chans", values.get("num_channels", 3))
  if all(isinstance(v, int) for v in (patch, tubelet, channels)):
    return torch.zeros(1, 2 * tubelet, channels, 2 * patch, 2 * patch, dtype=dtype)
  from transformers.models.timm_wrapper import modeling_timm_wrapper as timm_wrapper
  if patch is None and any(isinstance(m, timm_wrapper.TimmWrapperForImageClassification) for m in model.modules()):
    return torch.zeros(1, frames or T_META, 3, 32, 32, dtype=dtype)
  return None


def _video_inputs(model, config):
  """The forward inputs of a video encoder that requires pixel_values_videos (V-JEPA 2, PE Video's encoder): its
  _video_clip, with T_META zero token ids where it takes them too but no cache (PE Video: a text tower beside the
  video's, both run); None for any other forward."""
  params = inspect.signature(model.forward).parameters
  p = params.get("pixel_values_videos")
  if p is None or p.default is not inspect.Parameter.empty:
    return None
  extra = {}
  if "input_ids" in params:
    if {"cache", "past_key_values", "use_cache"} & set(params):  # a video LM generating text: its token ids alone
      return None
    extra["input_ids"] = torch.zeros(1, T_META, dtype=torch.long)
  clip = _video_clip(model, config)
  return None if clip is None else [{"pixel_values_videos": clip, **extra}]


def _real_or_shrunk(meta_model, cls, config):
  """The tower to run for real: the meta model made real (_real), or, where that is too large for the CPU (Dots3's
  6.9B vision encoder, mostly experts), a model of its config with its MLP and expert widths cut to 64, else of
  `shrunk(config)` (its head dim, layers and RoPE keys kept; the head count cut too), whose modules sit at the same
  paths. The meta model of the default config stays the one its
  rotary modules are rebuilt from."""
  try:
    _check_fits(meta_model, 2)
  except RuntimeError as too_large:
    narrow = copy.deepcopy(config)  # first its MLP and expert widths alone (the attention's widths all kept)
    for key, value in list(narrow.to_dict().items()):
      if WIDTH_KEY.search(key) and isinstance(value, int) and not isinstance(value, bool) and value > 64:
        setattr(narrow, key, 64)
    for small in (narrow, shrunk(config)):
      with torch.device("meta"):
        small_model = cls(small)
      if {p for p, _ in small_model.named_modules()} == {p for p, _ in meta_model.named_modules()}:
        with contextlib.suppress(RuntimeError):
          return _real(small_model)
    raise too_large
  return _real(meta_model)


def _probe_shape(shape, heads):
  """A recorded q shape [1, .., T_META, .., H] -> [2, .., 7, .., H] with `heads` on every other axis."""
  tokens = TOKENS[0]
  if tokens not in shape[1:-1]:
    if len(shape) == 3 and shape[0] == VISION_TOKENS[0]:  # a vision tower's q [tokens, heads, D]: no batch axis
      return [POSITIONS.size, heads, shape[-1]], 0
    if len(shape) == 4 and shape[0] == 1 and shape[1] == VISION_TOKENS[0]:  # [1, tokens, heads, D] (Kimi-K2.5)
      return [1, POSITIONS.size, heads, shape[-1]], 1
    raise Refused(f"the apply's q {shape} has no token axis of length {tokens}")
  if shape[1:-1].count(tokens) != 1:
    raise Refused(f"the apply's q {shape} has more than one axis of length {tokens}: which is the token axis?")
  t = shape.index(tokens, 1)
  return [2 if i == 0 else POSITIONS.shape[1] if i == t else shape[-1] if i == len(shape) - 1 else heads
          for i in range(len(shape))], t


def _positions(rotary_shapes):
  """The positions the rotary module is called with: [2, 7], or [A, 2, 7] for A position axes (M-RoPE)."""
  pos = torch.tensor(POSITIONS)
  for shape in rotary_shapes:
    if len(shape) == 3 and shape[1:] == [1, TOKENS[0]]:  # M-RoPE: [axes, B, T]; axis a takes positions // (a + 1)
      return torch.stack([pos // (a + 1) for a in range(shape[0])])
    if shape == [1, TOKENS[0]] or (len(shape) == 2 and shape[1] == TOKENS[0] and shape[0] == 2 and TOKENS[0] != T_META):
      return pos  # [B, T] ids (B = 2: Qwen2.5-Omni's DiT doubles its batch; read only on a count of its own)
    if len(shape) == 2 and shape[0] == VISION_TOKENS[0] and shape[1] in (2, 3):  # a tower's [tokens, axes] ids
      return torch.stack([pos.reshape(-1) // (a + 1) for a in range(shape[1])], -1)
  raise Refused(f"its rotary module gets no position ids of shape [B, T] or [A, B, T] (got {rotary_shapes})")


def _table_positions(call, rotary_shapes):
  """The probe positions [2, 7] where the rotary module builds a table over the tokens 0 .. T - 1 from their hidden
  states alone (one [1, T, C] tensor, no position ids) and the apply is handed the position ids it indexes that
  table by (CLVP: cos[position_ids]): the golden gets the module's table over 0 .. max and those ids. Else None."""
  roles = [*call["args"], *call["tensor_kwargs"].values()]
  if sum("ids" in r for r in roles) != 1 or len(rotary_shapes) != 1 or len(rotary_shapes[0]) != 3 or \
      rotary_shapes[0][:2] != [1, TOKENS[0]] or next(r for r in roles if "ids" in r)["ids"] != [1, TOKENS[0]]:
    return None
  return torch.tensor(POSITIONS)


def run_group(rotary, module, call, rotary_shapes, q):
  """The group's apply on probe q (shape of the recorded q with heads moved): the model's own code, float64."""
  path, rot_args, rot_kwargs = call["rotary"]
  table = _table_positions(call, rotary_shapes[path])
  pos = _positions(rotary_shapes[path]) if table is None else table
  vision = pos.ndim == 2 and pos.shape[0] == POSITIONS.size
  hidden = torch.zeros(*(pos.shape[:1] if vision else POSITIONS.shape), rotary_shapes[path][0][-1],
                       dtype=torch.float64)
  with float64_transformers(modeling_rope_utils, module), torch.no_grad():
    if table is None:
      try:
        out = rotary(hidden, pos, *rot_args, **rot_kwargs)
      except IndexError as e:  # GPT-J's module indexes a table of max_position_embeddings rows it precomputed
        raise Refused(f"its rotary module {type(rotary).__name__} fails on the probe positions (up to "
                      f"{int(POSITIONS.max())}): {_failure(e)}") from e
    else:  # a table over positions 0 .. L - 1 from the module, which the apply indexes by the position ids it gets
      width = rotary_shapes[path][0][-1]
      out = rotary(torch.zeros(1, 1, width, dtype=torch.float64).expand(1, int(POSITIONS.max()) + 1, width),
                   *rot_args, **rot_kwargs)
    out = out if isinstance(out, tuple) else (out,)
    args, xs = [], 0
    for role in call["args"]:
      if "rotary" in role:
        if role["rotary"] != path:
          raise Refused(f"{call['fn']} mixes two rotary modules' outputs")
        args.append(_replay(out[role["index"]], role.get("ops")))
      elif "ids" in role and table is not None:
        args.append(pos.clone())
      elif "x" in role:
        x = q[..., :role["x"][-1]]  # the model hands its apply the first R of the head's channels
        if call.get("head_perm"):  # in the order its caller puts them (Qwen2.5-Omni's DiT de-interleaves first)
          x = x[..., call["head_perm"]]
        args.append(x.clone())
        xs += 1
      elif "value" in role:
        args.append(role["value"])
      else:
        raise Refused(f"{call['fn']} takes a {role['opaque']}")
    kwargs = dict(call["kwargs"])
    for k, role in call["tensor_kwargs"].items():
      if "ids" in role and table is not None:
        kwargs[k] = pos.clone()
        continue
      if "rotary" not in role:
        raise Refused(f"{call['fn']} takes a tensor keyword {k!r} that is not a rotary module's output")
      kwargs[k] = _replay(out[role["index"]], role.get("ops"))
    result = candidates(module)[call["fn"]](*args, **kwargs)
  result = result if isinstance(result, tuple) else (result,)
  if xs and q.shape[-1] > result[0].shape[-1]:  # the channels after the slice pass unrotated
    result = tuple(torch.cat([r, q[..., r.shape[-1]:]], -1) for r in result[:xs]) + result[xs:]
  if xs == 0 or any(r.shape != q.shape for r in result[:xs]):
    raise Refused(f"{call['fn']} returns {[tuple(r.shape) for r in result]} for q of {tuple(q.shape)}")
  for r in result[1:xs]:
    if not torch.equal(r, result[0]):
      raise Refused(f"{call['fn']} rotates q and k differently")
  return result[0], pos


def pair_axes_observed(maps, facts, axis_positions):
  """For M-RoPE: the position axis each rotated pair reads, found from the angles. Axis a of the probe positions is
  positions // (a + 1), so the axes differ at every position but 0; a pair's angle is f * p_a for one a."""
  start, stop = facts["block"]
  r = stop - start
  half = facts["pairing"] == "half"
  n_axes = axis_positions.shape[0]
  pos = axis_positions.reshape(n_axes, -1).astype(np.float64)  # [A, P]
  ones = [int(np.flatnonzero(pos[ax] == 1)[0]) for ax in range(n_axes)]  # where each axis is at position 1
  axes = []
  for k in range(r // 2):
    a, b = (start + k, start + k + r // 2) if half else (start + 2 * k, start + 2 * k + 1)
    c, sn = maps[:, a, a], maps[:, b, a]
    scale = np.hypot(c, sn)
    fits = []
    for ax in range(n_axes):
      f = np.arctan2(sn[ones[ax]], c[ones[ax]])  # the angle at axis position 1 is the frequency (< pi)
      fits.append(np.abs(c - scale * np.cos(f * pos[ax])).max() + np.abs(sn - scale * np.sin(f * pos[ax])).max())
    best = int(np.argmin(fits))
    if fits[best] > 1e-9 or sorted(fits)[1] < 1e-9:
      raise Refused(f"pair {k}'s angle is not its frequency times one position axis")
    axes.append(best)
    facts["frequencies"][k] = float(np.arctan2(sn[ones[best]], c[ones[best]]))
  axes = np.array(axes)
  sections = [int((axes == ax).sum()) for ax in range(n_axes)]
  for layout in ("chunked", "interleaved", "videorope"):
    if np.array_equal(_layout_axes(sections, len(axes), layout), axes):
      return {"sections": sections, "section_layout": layout}
  raise Refused(f"M-RoPE pairs read the position axes in an order no section layout gives ({axes.tolist()[:12]}...)")


def _pair_axes_any_order(maps, facts, pos, vision):
  """pair_axes_observed, and for a vision tower's two axes (row, col) whose pairs read them in no section layout, the
  same with the axes swapped: Inkling 2's tower turns its first pairs by the column and the rest by the row, which
  is the chunked layout over (col, row). Returns (the M-RoPE facts, with "axes_swapped" where swapped; the positions
  in the order the layout reads them, for the golden)."""
  try:
    return pair_axes_observed(maps, facts, pos.numpy()), pos
  except Refused:
    if not vision or pos.shape[0] != 2:
      raise
    swapped = pos.flip(0)
    return {**pair_axes_observed(maps, facts, swapped.numpy()), "axes_swapped": True}, swapped


def _layout_axes(sections, num_pairs, layout):
  """The axis of each pair under a section layout, as transformers' M-RoPE models lay them out (independent of
  roformer_jax: Qwen2-VL chunks, Qwen3-VL interleaves axis a >= 1 at every A-th pair, VideoRoPE alternates h, w)."""
  a = len(sections)
  if layout == "chunked":
    return np.repeat(np.arange(a), sections)
  axes = np.zeros(num_pairs, int)
  if layout == "interleaved":
    for axis in range(1, a):
      axes[axis:a * sections[axis]:a] = axis
  elif a == 3:
    spatial = sections[1] + sections[2]
    axes[:spatial:2], axes[1:spatial:2], axes[spatial:] = 1, 2, 0
  return axes


def analyse(maps):
  """Pairing, direction and rotated block of a linear map per position: maps [P, H(out), H(in)].

  DeepSeek-V3's apply takes interleaved pairs and writes them out in half layout: the output rows
  are permuted. That is recognised (rows un-permuted, "output": "half"): q . k is the interleaved one."""
  try:
    return _analyse(maps)
  except Refused as e:
    h = maps.shape[-1]
    for start in range(0, h, 2):  # the permuted block starts at `start` and runs to the end
      r = h - start
      perm = np.arange(h)  # output channel i of the apply holds pair-layout channel perm[i]
      perm[start:] = start + np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2)])
      try:
        facts = _analyse(maps[:, np.argsort(perm), :])
      except Refused:
        continue
      if facts["pairing"] == "interleaved" and facts["block"] == [start, h]:
        return {**facts, "output": "half"}
    raise e


def _analyse(maps):
  h = maps.shape[-1]
  eye = np.eye(h)
  moved = np.abs(maps - eye).max(axis=(0, 1)) > 1e-12  # input channels the rotation touches
  rotated = np.flatnonzero(moved)
  if rotated.size == 0:
    raise Refused("the apply leaves every channel as it is")
  start, stop = int(rotated[0]), int(rotated[-1]) + 1
  k = rotated.size // 2
  if rotated.size != stop - start and h % 2 == 0 and k and \
      np.array_equal(rotated, np.concatenate([np.arange(k), h // 2 + np.arange(k)])):
    # proportional RoPE (Gemma 4's full layers): rotate_half over the whole head, the first k of its h / 2 pairs
    # turning and the rest at frequency 0: read as the whole head, the unturned pairs' frequencies 0
    rotated, start, stop = np.arange(h), 0, h
  elif rotated.size != stop - start:
    raise Refused(f"the rotated channels are not one block ({rotated.tolist()[:8]}...)")
  r = stop - start
  partner = {}
  for j in rotated:
    others = np.flatnonzero(np.abs(maps[:, :, j]).max(axis=0) > 1e-12)
    others = [int(i) for i in others if i != j]
    if not others and not moved[j] and j % (h // 2) >= k:  # a proportional pair at frequency 0: its half partner
      others = [(j + h // 2) % h]
    if len(others) != 1:
      raise Refused(f"channel {j} is mixed into {len(others)} others: not a rotation of channel pairs (permuted "
                    "or mixed output)")
    partner[int(j)] = others[0]
  pairs = sorted({tuple(sorted((j, p))) for j, p in partner.items()})
  if any(partner.get(b) != a for a, b in pairs):
    raise Refused("the channel pairs are not symmetric: the output is permuted")
  if all(b - a == 1 and (a - start) % 2 == 0 for a, b in pairs):
    pairing = "interleaved"
  elif all(b - a == r // 2 and a < start + r // 2 for a, b in pairs):
    pairing = "half"
  else:
    raise Refused(f"pairs {pairs[:4]}... are neither (i, i + R/2) nor (2i, 2i + 1)")
  freqs = [float(np.arctan2(maps[1, q, p], maps[1, p, p])) for p, q in pairs]  # position 1 (row 0, t = 1)
  a, b = pairs[0]
  sin_ba = maps[:, b, a]
  cos_aa, cos_bb = maps[:, a, a], maps[:, b, b]
  if not np.allclose(cos_aa, cos_bb, atol=1e-12) or not np.allclose(maps[:, a, b], -sin_ba, atol=1e-12):
    raise Refused("a pair's 2x2 block is not a rotation [[c, -s], [s, c]] (scaled)")
  # the sign of the first sine that is not 0: position 1 of the probe's first row, or (M-RoPE: Ernie 4.5-VL's pair 0
  # reads the row axis, positions // 2, still 0 there) the first position where the pair's axis has moved to 1
  first = next((i for i in range(1, sin_ba.size) if abs(sin_ba.flat[i]) > 1e-9), 1)
  direction = 1 if sin_ba.flat[first] > 0 else -1
  scale = np.hypot(cos_aa, sin_ba)
  return {"pairing": pairing, "direction": direction, "block": [start, stop], "rotary_dim": r, "head_dim": h,
          "attention_factor": [float(scale.min()), float(scale.max())], "frequencies": freqs}


def rebuild(rotary, module, owner=None):
  """The meta model's rotary module built again on the CPU in float64 from its own config: real frequencies. One that
  keeps no config (CLVP's) is built from the config of the module that holds it, `owner`, where that gives it
  buffers of the same names and shapes as the model's; the config is then kept on it, as config_facts reads it."""
  config = getattr(rotary, "config", None)
  if config is None and owner is None:
    raise Refused(f"its rotary module {type(rotary).__name__} keeps no config to rebuild it from")
  with float64_transformers(modeling_rope_utils, module), warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
      built = type(rotary)(config=config if config is not None else owner)
    except TypeError as e:
      raise Refused(f"its rotary module {type(rotary).__name__} is not built from a config alone: {e}") from None
  if config is None:
    shapes = lambda m: {n: tuple(b.shape) for n, b in m.named_buffers()}  # noqa: E731
    if shapes(built) != shapes(rotary) or not shapes(built):
      raise Refused(f"its rotary module {type(rotary).__name__} keeps no config, and the config of the module "
                    "holding it does not rebuild it")
    built.config = owner
  return built


def _owner_config(model, path):
  """The config of the innermost module holding the one at `path` (CLVP's encoder, for its rotary module)."""
  parts = path.split(".") if path else []
  for n in range(len(parts) - 1, -1, -1):
    cfg = getattr(model.get_submodule(".".join(parts[:n])), "config", None)
    if cfg is not None:
      return cfg
  return None


def _perturbed_golden(rotary, module, top_config, facts, call, rotary_shapes, q):
  """The same rotation under a user's config that is not the default: rope_theta x 4 and, where the class follows
  transformers' YaRN, YaRN over a quarter of max_position_embeddings (factor about 4). Returns (the whole config.json
  with that change, the model's rotated q), or None when the class cannot be built from it. The test reads the
  changed config.json with from_hf_config: the keys a user changes are read as the model reads them."""
  top = json.loads(top_config.to_json_string(use_diff=False))
  key = facts["config"]
  sub = top
  for k in (key.split(".") if key else ()):  # a dotted key: a sub-config's sub-config
    sub = sub.get(k) if isinstance(sub, dict) else None
  if not isinstance(sub, dict):
    return None
  changed = _perturbed(sub, "rope_theta", None)
  max_pos = changed.get("max_position_embeddings") or 4096
  original = max(max_pos // 4, 16)
  if "yarn" in facts["follows"].get("scalings", []) and max_pos > original:
    # factor = max_position_embeddings / original exactly, as transformers expects (else it warns, and so do we)
    changed = _perturbed(changed, "scaling", {"rope_type": "yarn", "factor": max_pos / original,
                                              "original_max_position_embeddings": original})
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      rebuilt = rebuild_from(type(rotary), type(rotary.config).from_dict(changed), module)
    q_out, _ = run_group(rebuilt, module, call, rotary_shapes, q)
  except Exception:  # noqa: BLE001  no perturbed golden for this one
    return None
  if key is None:
    return changed, q_out
  out = copy.deepcopy(top)
  holder = out
  for k in key.split(".")[:-1]:
    holder = holder[k]
  holder[key.split(".")[-1]] = changed
  return out, q_out


SELF_ANGLED_TOKENS = 8  # the probe positions 0..7 of an apply that computes its angles from the ids it is handed
HALF_TABLES_THETA = [None]  # self_angled_apply's theta where it found rotate_half's tables over interleaved pairs


class HalfTables(Refused):
  """observe_rotations' finding that an apply handed integer ids turns interleaved pairs by rotate_half's tables
  (V-JEPA 2): main observes its callers whole (`half_tables_entry`) instead of refusing."""

  def __init__(self, message, theta):
    super().__init__(message)
    self.theta = theta


def self_angled_apply(fn, call):
  """What an apply that is handed integer ids [T] and computes its angles itself (V-JEPA 2's rotate_queries_or_keys
  (x [B, H, T, D], pos [T])) does, observed by calling it in float64 on a random x at ids 0..7: a sentence for the
  refusal, or None where its arguments are not of that form. Each output channel c is fitted as x_c C + s x_p S
  with p its interleaved partner (c xor 1, s = -1 for even c) over the batch and heads: a rotation of channel pairs
  turns both channels of a pair by one angle; where they turn by different ones, which pair's frequency each
  channel takes is read off the angles at id 1 and named."""
  shapes = call.get("shapes", [])
  ids = {k: r["ids"] for k, r in call.get("tensor_kwargs", {}).items() if "ids" in r}  # V-JEPA 2: pos=
  if len(shapes) == 2 and not ids:
    ids = {None: shapes[1]}
  positional = None in ids
  if fn is None or len(ids) != 1 or len(shapes) != 1 + positional or \
      len(call.get("tensor_kwargs", {})) != 1 - positional or \
      len(shapes[0]) != 4 or list(ids.values())[0] != [shapes[0][2]]:
    return None
  d, t = shapes[0][3], SELF_ANGLED_TOKENS
  gen = torch.Generator().manual_seed(SEED)
  x = torch.randn(4, 4, t, d, dtype=torch.float64, generator=gen)
  name = next(iter(ids))
  try:
    out = (fn(x, torch.arange(t)) if name is None else fn(x, **{name: torch.arange(t)})).detach().numpy()
  except Exception:  # noqa: BLE001
    return None
  xn = x.numpy()
  for layout in ("interleaved", "half"):
    i, j = pixel.fit.pairs(d, layout)
    if np.allclose(xn[..., i] ** 2 + xn[..., j] ** 2, out[..., i] ** 2 + out[..., j] ** 2, rtol=1e-9, atol=1e-9):
      return f"it turns channel pairs ({layout} pairing) by angles of its own, at ids 0..{t - 1}"
  partner = np.arange(d) ^ 1
  sign = np.where(np.arange(d) % 2 == 0, -1.0, 1.0)
  a, b = xn.reshape(-1, t, d), (sign * xn[..., partner]).reshape(-1, t, d)
  o = out.reshape(-1, t, d)
  cos, sin = np.empty((t, d)), np.empty((t, d))
  for n in range(t):
    for c in range(d):
      (cos[n, c], sin[n, c]), *_ = np.linalg.lstsq(np.stack([a[:, n, c], b[:, n, c]], 1), o[:, n, c], rcond=None)
  residual = float(np.abs(a * cos + b * sin - o).max())
  if residual > 1e-9 or not np.allclose(cos ** 2 + sin ** 2, 1, atol=1e-9):
    return ("observed on probe tensors, its output is no rotation of channel pairs under any pairing, nor a turn of "
            f"each channel with its interleaved partner (residual {residual:.1e})")
  f = np.arctan2(sin[1], cos[1])  # each channel's angle at id 1: its frequency
  theta = float(f[1] ** (-d / 2)) if 0 < f[1] < 1 else float("nan")  # channel 1 turns by theta ** (-1 / (d / 2))
  tiled = np.concatenate([theta ** (-np.arange(d // 2) / (d // 2))] * 2)
  if np.isfinite(theta) and np.allclose(f, tiled, rtol=1e-9, atol=1e-12) and np.allclose(
      np.arctan2(sin, cos), np.angle(np.exp(1j * np.arange(t)[:, None] * tiled)), atol=1e-9):
    HALF_TABLES_THETA[0] = theta
    return (f"observed on probe tensors, it is no rotation of channel pairs: it pairs channels (2k, 2k + 1) "
            f"(interleaved) but turns channel c of the D = {d} it is handed by id * {_integer_theta_text(theta)} ** "
            "(-(c mod D/2) / (D/2)) "
            "(cos/sin tables tiled [f | f] as rotate_half's, applied to interleaved pairs), so the two channels of a "
            "pair turn by different angles and q . k is no function of relative position; no RotaryConfig (nor "
            "any rotation) does that")
  return ("observed on probe tensors, it is no rotation of channel pairs: the two channels of an interleaved pair "
          "turn by different angles")


class Observed(Exception):  # noqa: N818  not an error: the entry was made whole by a dedicated observer
  """A type's entry and golden made in full by a dedicated observer (`half_tables_entry`): main records them."""


HALF_TABLES_ROWS = 4  # batch rows of the golden call (the same ids in each: the fit pools rows and heads)


def _half_tables_parts(calls):
  """{part: {"path", "head_dim": H, "segments": A, "width": d, "heads": N}} from the recorded calls of the apply:
  each part (the owner of a block list: V-JEPA 2's "encoder" and "predictor") hands it A equal contiguous slices
  [a d, (a + 1) d) of its H-wide heads, from channel 0; anything else is refused."""
  parts = {}
  for c in calls:
    x = next((r for r in c["args"] if "x" in r), None)
    if c["rotary"] is not None or not c.get("integer_args") or x is None or not x.get("slice_of") or \
        not c.get("caller_block") or len(x["x"]) != 4:
      raise Refused(f"{c['fn']} turns interleaved pairs by rotate_half's tables, but is called other than on slices "
                    "of a head [B, N, T, d] with integer ids")
    block = c["caller_block"].split(".")
    name = ".".join(block[:-2]) if len(block) > 2 and block[-1].isdigit() else c["caller_block"]
    p = parts.setdefault(name, {"path": f"{c['caller_block']}.{c['caller_path']}", "slices": set(), "heads": set()})
    p["slices"].add((x["slice_of"][0], x["x"][-1], x["slice_of"][1]))
    p["heads"].add(x["x"][1])
  out = {}
  for name, p in parts.items():
    slices = sorted(p["slices"])
    widths, heads = {w for _, w, _ in slices}, {h for *_, h in slices}
    d = min(widths)
    if len(widths) != 1 or len(heads) != 1 or len(p["heads"]) != 1 or \
        [start for start, _, _ in slices] != [i * d for i in range(len(slices))] or len(slices) * d > min(heads):
      raise Refused(f"{name}: the apply turns slices {slices} of its heads, not equal contiguous segments from 0")
    out[name] = {"path": p["path"], "head_dim": heads.pop(), "segments": len(slices), "width": d,
                 "heads": p["heads"].pop()}
  return out


def _observe_half_attention(attn, module, t, ids, heads, head_dim):
  """The caller `attn` (an attention module) run for real in float64 on T = t tokens, every Linear child of width
  N H (its q, k and v projections) made to output one float32-exact probe x [B, T, N H], and the q, k and v it
  hands its attention function captured (`module.eager_attention_forward`, the eager path forced). ids: None (its
  forward's own numbering), or sorted token ids [T] passed as its position argument (V-JEPA 2's predictor: the grid
  ids of its tokens), the same in each row. Returns x and the captured (q, k, v), each [B, N, T, H]."""
  attn = copy.deepcopy(attn).to_empty(device="cpu").to(torch.float64)  # (a meta model's: its weights are never read)
  for m in attn.modules():  # the copy runs bare: no hook meta_forward left on the model
    for hooks in (m._forward_hooks, m._forward_pre_hooks, getattr(m, "_forward_hooks_with_kwargs", {}),
                  getattr(m, "_forward_pre_hooks_with_kwargs", {})):
      hooks.clear()
  gen = torch.Generator().manual_seed(SEED)
  x = torch.randn(HALF_TABLES_ROWS, t, heads * head_dim, generator=gen).to(torch.float64)
  linears = [m for m in attn.children() if isinstance(m, torch.nn.Linear) and m.out_features == heads * head_dim]
  width = {m.in_features for m in linears}
  if len(linears) < 3 or len(width) != 1:
    raise Refused(f"{type(attn).__name__}: no q, k and v projections of width {heads} x {head_dim} to probe")
  for m in linears:
    m.register_forward_hook(lambda mod, inp, out: x)
  seen = {}

  def capture(_module, query, key, value, *args, **kwargs):
    seen["qkv"] = (query, key, value)
    return query.transpose(1, 2), None

  params = list(inspect.signature(attn.forward).parameters)
  hidden = torch.zeros(HALF_TABLES_ROWS, t, width.pop(), dtype=torch.float64)
  kwargs = {} if ids is None else {params[1]: torch.as_tensor(ids).repeat(HALF_TABLES_ROWS, 1)}
  saved = module.eager_attention_forward
  attn.config._attn_implementation = "eager"
  module.eager_attention_forward = capture
  try:
    with torch.no_grad():
      attn(hidden, **kwargs)
  finally:
    module.eager_attention_forward = saved
  if "qkv" not in seen:
    raise Refused(f"{type(attn).__name__}: its forward calls no eager attention function to observe")
  return x, [v.detach().numpy() for v in seen["qkv"]]


def _half_tables_positions(x, out, heads, head_dim, segments, width, theta):
  """What the caller did to x, read channel by channel: each output channel c fitted as x_c C + s x_p S at each
  token (p = c xor 1, s = -1 for even c) over the rows and heads, and each angle atan2(S, C) checked to be id-free
  beyond segments of `width` channels turning channel c of a segment by pos * theta ** (-(c mod w/2) / (w/2)),
  the rest unchanged. Returns the positions [T, segments] each segment turned by, or raises Refused naming what
  differs."""
  b, t, _ = x.shape
  xq = x.numpy().reshape(b, t, heads, head_dim).transpose(0, 2, 1, 3).reshape(-1, t, head_dim)
  o = out.reshape(-1, t, head_dim)
  partner = np.arange(head_dim) ^ 1
  a, p = xq, np.where(np.arange(head_dim) % 2 == 0, -1.0, 1.0) * xq[..., partner]
  aa, ap, pp, ao, po = [(u * v).sum(0) for u, v in ((a, a), (a, p), (p, p), (a, o), (p, o))]
  det = aa * pp - ap * ap
  cos, sin = (ao * pp - po * ap) / det, (aa * po - ap * ao) / det
  residual = float(np.abs(a * cos + p * sin - o).max())
  if residual > 1e-9 or not np.allclose(cos ** 2 + sin ** 2, 1, atol=1e-9):
    raise Refused(f"its caller's output is no turn of each channel with its interleaved partner (residual "
                  f"{residual:.1e})")
  rotated = segments * width
  if not (np.allclose(cos[:, rotated:], 1, atol=1e-12) and np.allclose(sin[:, rotated:], 0, atol=1e-12)):
    raise Refused(f"its caller turns channels past the {segments} segments of {width} it hands the apply")
  half = width // 2
  f = theta ** (-(np.arange(width) % half) / half)
  angles = np.arctan2(sin, cos)
  positions = np.empty((t, segments), np.int64)
  for s in range(segments):
    seg = angles[:, s * width:(s + 1) * width]
    pos = np.rint(seg[:, half - 1] / f[half - 1])  # the slowest channel: no wrap at these positions
    if not np.allclose(np.angle(np.exp(1j * (pos[:, None] * f - seg))), 0, atol=1e-8):
      raise Refused(f"segment {s} of its caller's heads turns by no integer position times rotate_half's tables")
    positions[:, s] = pos
  return positions


def _grid_numbering(positions, ids):
  """g where token id i sits at (i // g^2, (i mod g^2) // g, i mod g) for every observed token, else None."""
  g = int(positions[:, -1].max()) + 1
  want = np.stack([ids // (g * g), ids % (g * g) // g, ids % g], -1)
  return g if positions.shape[1] == 3 and np.array_equal(positions, want) else None


def _observe_grid(attn, module, p, theta, ids=None):
  """One observation of a part's attention: its own numbering of enough tokens to pass a whole frame (grown from 64
  until the frame axis moves), then 2 g^2 + 37 tokens (two frames and part of a third); or at the given ids.
  Returns (x, q, token ids, positions [T, 3], g)."""
  t = 64
  while True:
    n = t if ids is None else len(ids)
    x, (q, k, v) = _observe_half_attention(attn, module, n, ids, p["heads"], p["head_dim"])
    xv = x.numpy().reshape(x.shape[0], x.shape[1], p["heads"], p["head_dim"]).transpose(0, 2, 1, 3)
    if not np.array_equal(q, k) or not np.array_equal(v, xv):
      raise Refused(f"{type(attn).__name__}: its q and k turn differently, or v turns too")
    token_ids = np.arange(n) if ids is None else np.asarray(ids)
    positions = _half_tables_positions(x, q, p["heads"], p["head_dim"], p["segments"], p["width"], theta)
    if ids is None and positions[:, 0].max() < 1 and t < 1 << 15:
      t *= 2
      continue
    g = _grid_numbering(positions, token_ids)
    if g is None:
      raise Refused(f"{type(attn).__name__}: its segments turn by positions {positions[:3].tolist()}..., not the "
                    "(frame, row, column) of a raster grid numbering of its tokens")
    if ids is None and t != 2 * g * g + 37:
      t = 2 * g * g + 37
      continue
    return x, q, token_ids, positions, g


def _half_tables_numpy(x, positions, p, theta):
  """The layout the observation found, in float64 NumPy from its facts: each of the segments of d channels turns
  channel c by pos * theta ** (-(c mod d/2) / (d/2)) (rotate_half's tables) mixed with its interleaved partner
  (out_2k = x_2k cos - x_2k+1 sin, out_2k+1 = x_2k+1 cos + x_2k sin, each at its own channel's angle), the rest
  unchanged. x [B, T, N H], positions [T, segments]; returns [B, N, T, H] as the captured q."""
  b, t, _ = x.shape
  d, half = p["width"], p["width"] // 2
  xs = x.reshape(b, t, p["heads"], p["head_dim"]).transpose(0, 2, 1, 3)
  out = xs.copy()
  f = theta ** (-(np.arange(d) % half) / half)
  for s in range(p["segments"]):
    seg = xs[..., s * d:(s + 1) * d]
    ang = positions[:, s, None] * f  # [T, d]
    swapped = np.stack([-seg[..., 1::2], seg[..., 0::2]], -1).reshape(seg.shape)
    out[..., s * d:(s + 1) * d] = seg * np.cos(ang) + swapped * np.sin(ang)
  return out


def _ratio_keys(values, base, moved_by):
  """(numerator, denominator): the config keys whose ratio values[a] // values[b] is the observed `base`, among those
  `moved_by` (key -> the observed value with that key doubled) says change it; confirmed by the doubled values (the
  numerator doubles it, the denominator halves it). None unless exactly one pair does."""
  found = []
  for a, b in itertools.permutations(moved_by, 2):
    if values[b] and values[a] % values[b] == 0 and values[a] // values[b] == base and \
        moved_by[a] == 2 * base and moved_by[b] == base // 2:
      found.append((a, b))
  return found[0] if len(found) == 1 else None


def half_tables_entry(mt, config, module, model, calls, found):
  """V-JEPA 2: an apply handed integer ids that turns interleaved pairs by rotate_half's tables (self_angled_apply:
  `found.theta`), called by an attention on equal segments of its heads. Each part's attention (encoder, predictor)
  is run for real in float64 on a probe (`_observe_half_attention`) at its own numbering of two frames and part of
  a third, and at sorted grid ids passed as its position argument (the predictor's tokens); the positions each
  segment turned by are read off its output (`_half_tables_positions`) and must be the raster grid numbering
  (`_grid_numbering`). Which config keys give the head width (the whole model rebuilt) and the grid (the attention
  rebuilt) is observed by doubling each integer key: each must be one key // another. Returns the entry and the
  golden arrays per part."""
  theta = float(round(found.theta)) if abs(found.theta - round(found.theta)) <= 1e-9 * found.theta else found.theta
  parts = _half_tables_parts(calls)
  values = {k: v for k, v in config.to_dict().items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}
  widths, segment_widths = {}, {}  # key -> {part: head width, segment width} with that key doubled (its own calls)
  heads = {q["head_dim"] for q in parts.values()}
  pairs = [(a, b) for a, b in itertools.permutations(values, 2)
           if values[a] % values[b] == 0 and values[a] // values[b] in heads]
  for key in sorted({k for pair in pairs for k in pair}):  # only keys of a pair whose ratio is a head width
    changed = copy.deepcopy(config)
    setattr(changed, key, 2 * values[key])
    try:
      with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        SEEN_IDS.clear()
        seen = _half_tables_parts(meta_forward(mt, changed, module)[0])
    except Exception:  # noqa: BLE001  a value the model cannot take, or other calls
      continue
    widths[key] = {name: q["head_dim"] for name, q in seen.items()}
    segment_widths[key] = {name: q["width"] for name, q in seen.items()}
  families, golden, error = {}, {}, 0.0
  for name, p in parts.items():
    attn = model.get_submodule(p["path"])
    widths_of = [m.out_features for m in attn.children() if isinstance(m, torch.nn.Linear)]
    heads_of = {w // p["head_dim"] for w in widths_of if w % p["head_dim"] == 0 and widths_of.count(w) >= 3}
    if len(heads_of) != 1:
      raise Refused(f"{name}: no q, k and v projections of {p['head_dim']}-wide heads in {type(attn).__name__}")
    p["heads"] = heads_of.pop()  # the module's own head count (the calls may come from a shrunk copy)
    x, q, ids, positions, g = _observe_grid(attn, module, p, theta)
    rng = np.random.default_rng(SEED)
    chosen = np.sort(rng.choice(3 * g * g, size=97, replace=False))  # a predictor's tokens: grid ids, sorted
    xi, qi, _, pi, gi = _observe_grid(attn, module, p, theta, ids=chosen)
    if gi != g:
      raise Refused(f"{name}: its grid differs between its own numbering and given ids")
    moved = {k: w[name] for k, w in widths.items() if name in w and w[name] != p["head_dim"]}
    head_keys = _ratio_keys(values, p["head_dim"], moved)
    if head_keys is None:
      raise Refused(f"{name}: its head width {p['head_dim']} is no ratio of two config keys that move it ({moved})")
    grids = {}
    init = inspect.signature(type(attn).__init__).parameters
    for key in sorted(values):
      changed = copy.deepcopy(attn.config)
      setattr(changed, key, 2 * values[key])
      try:
        rebuilt = type(attn)(changed, **{a: getattr(attn, a) for a in init if a not in ("self", "config")
                                         and hasattr(attn, a)})
        grids[key] = _observe_grid(rebuilt, module, p, theta)[4]
      except Exception:  # noqa: BLE001  a value the class cannot take
        continue
    grid_keys = _ratio_keys(values, g, {k: v for k, v in grids.items() if v != g})
    if grid_keys is None:
      raise Refused(f"{name}: its grid of {g} is no ratio of two config keys that move it ({grids})")
    for xs, qs, ps in ((x, q, positions), (xi, qi, pi)):
      error = max(error, float(np.abs(_half_tables_numpy(xs.numpy(), ps, p, theta) - qs).max()))
    seen_widths = {p["head_dim"]: p["width"], **{w[name]: d for w, d in
                                                   ((widths[k], segment_widths[k][name]) for k in widths
                                                    if name in widths[k])}}
    if any(d != 2 * ((h // p["segments"]) // 2) for h, d in seen_widths.items()):
      raise Refused(f"{name}: its segment widths at head widths {seen_widths} are not 2 ((H // "
                    f"{p['segments']}) // 2)")
    families[name] = {"half_tables": {
        "head_dim_keys": list(head_keys), "head_dim_key_defaults": {k: values[k] for k in head_keys},
        "segment_widths_seen": {str(h): d for h, d in sorted(seen_widths.items())},
        "head_dim_default": p["head_dim"], "segments": p["segments"],
        "segment_width_default": p["width"], "theta": theta, "grid_keys": list(grid_keys), "grid_default": g}}
    kept = slice(0, 1), slice(None), slice(0, 2)  # the golden: row 0, heads 0 and 1 ([B, T, N, H]; every head alike)
    golden[name] = {"x": x.numpy().reshape(x.shape[0], x.shape[1], p["heads"], p["head_dim"])[kept],
                    "out": q.transpose(0, 2, 1, 3)[kept], "ids": ids, "positions": positions,
                    "x_ids": xi.numpy().reshape(xi.shape[0], xi.shape[1], p["heads"], p["head_dim"])[kept],
                    "out_ids": qi.transpose(0, 2, 1, 3)[kept], "ids_ids": chosen, "positions_ids": pi}
    golden[name] = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in golden[name].items()}  # x is
    # float32-exact; the float64 result rounded once
  entry = {"status": "exact", "functions": sorted({f"{module.__name__.split('.')[-1]}.py:{c['fn']}" for c in calls}),
           "parts": families, "max_abs_error": error,
           "observed": "each part's attention run for real on probe q, k and v (a float64 forward); its apply pairs "
                       "channels (2k, 2k + 1) but lays rotate_half's tables over them: not a rotation "
                       "(RotaryConfig tables='half')"}
  return entry, golden


def _integer_theta_text(theta):
  return str(int(round(theta))) if abs(theta - round(theta)) <= 1e-6 * theta else f"{theta:.6g}"


def observe_rotations(meta_model, module, calls, rotary_shapes, rng):
  """Step 3: per distinct apply call, the golden and what the rotation is."""
  built = {}
  groups = {}
  for c in calls:
    if c["rotary"] is None:
      how = (": it is given integer position ids and computes its angles itself, no rotary module the config's "
             "rope parameters drive") if c.get("integer_args") else ""
      HALF_TABLES_THETA[0] = None
      if c.get("integer_args"):  # run it on probe tensors: what it does with the ids it is given (V-JEPA 2)
        seen = self_angled_apply(candidates(module).get(c["fn"]), c)
        how = f"{how}; {seen}" if seen else how
      message = f"{c['fn']} (called by {c['caller']}) gets no cos/sin from a rotary module{how}"
      if HALF_TABLES_THETA[0] is not None:
        raise HalfTables(message, HALF_TABLES_THETA[0])
      raise Refused(message)
    key = json.dumps([c["fn"], c.get("module"), c["rotary"], c["args"], c["tensor_kwargs"], c["kwargs"]],
                     sort_keys=True)
    groups.setdefault(key, []).append(c)
  out = []
  tokens = TOKENS[0]
  for calls_of in groups.values():
    call = calls_of[0]
    path = call["rotary"][0]
    # CLVP: its two encoders, 11 and 13 tokens; PE-Audio: its audio frames and its text tower's tokens
    TOKENS[0] = _table_tokens(call, rotary_shapes[path]) or _own_tokens(call, rotary_shapes[path], tokens) or tokens
    out.append(_observe_group(meta_model, module, calls_of, rotary_shapes, rng, built))
  TOKENS[0] = tokens
  return out


def _table_tokens(call, rotary_shapes):
  """The tokens T of an apply that indexes its rotary module's table by the position ids [1, T] it is handed, where
  that module got only one [1, T, C] tensor (CLVP's encoders, each on its own token count); else None."""
  ids = [r["ids"] for r in [*call["args"], *call["tensor_kwargs"].values()] if "ids" in r]
  if len(ids) == 1 and len(rotary_shapes) == 1 and len(rotary_shapes[0]) == 3 and rotary_shapes[0][0] == 1 and \
      ids[0] == rotary_shapes[0][:2]:
    return rotary_shapes[0][1]
  return None


def _own_tokens(call, rotary_shapes, tokens):
  """The tokens T of a call whose q has no axis of the forward's `tokens` where its rotary module got position ids
  [1, T] alone of that form and q has an axis of T (a second tower on a count of its own); else None."""
  x = next((r["x"] for r in call["args"] if "x" in r), None)
  ids = {s[1] for s in rotary_shapes if len(s) == 2 and s[0] in (1, x[0] if x else 1)}  # [B, T] (Qwen2.5-Omni's
  # DiT: B = 2, its classifier-free guidance doubling the batch)
  if x is None or tokens in x[1:-1] or len(ids) != 1:
    return None
  t = ids.pop()
  return t if x[1:-1].count(t) == 1 else None


def _observe_group(meta_model, module, calls_of, rotary_shapes, rng, built):
  """observe_rotations for one group of alike calls."""
  call = calls_of[0]
  module = _call_module(call, module)  # a second tower's calls: its own modeling module
  path = call["rotary"][0]
  if path not in built:
    built[path] = rebuild(meta_model.get_submodule(path), module, _owner_config(meta_model, path))
  x_role = next(r for r in call["args"] if "x" in r)
  x_shape = list(x_role["x"])
  if x_role.get("slice_of") and x_role["slice_of"][0] == 0 and x_role["slice_of"][1] in _head_dims(built[path]):
    x_shape[-1] = x_role["slice_of"][1]  # the first R of a head's D channels (Phi): probe all D
  h = x_shape[-1]
  maps, pos, t_axis = _observed_maps(built[path], module, call, rotary_shapes, x_shape)
  facts = analyse(maps)
  if pos.ndim == 3:  # M-RoPE
    facts["mrope"], pos = _pair_axes_any_order(maps, facts, pos, vision=t_axis == 0 or x_shape[0] == 1 and
                                               VISION_TOKENS[0] in x_shape[1:2])
    facts["mrope"].update(_mrope_key_order(built[path], module, call, rotary_shapes, x_shape, facts))
  ranges = {json.dumps([c.get("head_range"), c.get("head_perm")]) for c in calls_of}
  if len(ranges) > 1:
    raise Refused(f"{call['fn']} rotates different slices of its caller's heads on different calls")
  head_range = call.get("head_range")
  shape1, _ = _probe_shape(x_shape, head_range[2] if head_range else 1)
  q = torch.tensor(rng.standard_normal(shape1).astype(np.float32).astype(np.float64))  # float32-exact input
  if head_range:  # Qwen2.5-Omni's DiT: the apply turns heads [start, stop) of its caller's; the golden holds them
    # all, the others unrotated (q's head axis: the one that is neither batch, tokens nor channels)
    if len(shape1) != 4:
      raise Refused(f"{call['fn']} rotates a slice of its caller's heads in a q of shape {x_shape}: no head axis")
    head_axis = 2 if t_axis == 1 else 1
    inside = [slice(None)] * 4
    inside[head_axis] = slice(head_range[0], head_range[1])
    inside = tuple(inside)

    def whole(turned):  # q with the apply's output in the slice it turned
      out = q.clone()
      out[inside] = turned
      return out
  q_out, _ = run_group(built[path], module, call, rotary_shapes, q[inside] if head_range else q)
  if head_range:
    q_out = whole(q_out)
  facts["config_facts"] = config_facts(built[path], module, meta_model.config, h)
  perturbed = _perturbed_golden(built[path], module, meta_model.config, facts["config_facts"], call, rotary_shapes,
                                q[inside] if head_range else q)
  if perturbed is not None:
    facts["perturbed_config"], q_perturbed = perturbed
    facts["q_out_perturbed"] = _bt(whole(q_perturbed) if head_range else q_perturbed, t_axis).numpy()
  if head_range:
    facts["heads"] = head_range
  value = {_rotates_value(c) for c in calls_of}
  if len(value) > 1:
    raise Refused(f"{call['fn']} rotates v on some calls and not on others")
  if value.pop():
    facts["rotates_value"] = True
  return {**facts, "layers": sorted({c["layer"] for c in calls_of}), "fn": call["fn"],
              "callers": sorted({c.get("caller_path") or "?" for c in calls_of}),
              "slice_of": x_role.get("slice_of"),
              "stubbed": call["stubbed"] or None,
              "rotary_module": type(built[path]).__name__,
              "rotary_args": call["rotary"][1:], "t_axis": t_axis,
              "positions": pos.numpy(), "q": _bt(q, t_axis).numpy(), "q_out": _bt(q_out, t_axis).numpy()}


def _observed_maps(rotary, module, call, rotary_shapes, x_shape):
  """The apply's linear map at each probe position, [positions, out, in], from basis vectors (head j holds e_j),
  with the positions ([axes, B, T] for M-RoPE and vision towers) and the token axis of the apply's layout."""
  h = x_shape[-1]
  shape, t_axis = _probe_shape(x_shape, h)
  probe = torch.zeros(shape, dtype=torch.float64)
  idx = [slice(None)] * len(shape)
  for j in range(h):
    idx[1 if t_axis != 1 else 2] = j
    idx[-1] = j
    probe[tuple(idx)] = 1.0
  mapped, pos = run_group(rotary, module, call, rotary_shapes, probe)
  m = _bt(mapped, t_axis)  # [2, 7, heads=j, out i]
  if pos.ndim == 2 and t_axis == 0:  # a vision tower: positions [tokens, axes] -> [axes, 1, tokens]
    pos = pos.T[:, None, :]
  return m.reshape(-1, h, h).transpose(1, 2).numpy(), pos, t_axis


def _mrope_key_order(rotary, module, call, rotary_shapes, x_shape, facts):
  """How a config.json's mrope_section maps onto the sections observed (axis order of the positions): rebuilt with
  mrope_section set to each rotation of the observed sections (nudged by up to a pair each), the rotary module's sections are read again. Ernie
  4.5-VL keeps (h, w, t) in its key and turns the positions' axes (t, h, w): order [2, 0, 1], observed[i] =
  key[order[i]]. {"key_order": order} where that is not the identity, {"key_ignored": True} where the sections never
  move with the key, else {} (the identity, or no rebuilt module runs)."""
  sections = facts["mrope"]["sections"]
  cfg = rotary.config
  serialized = json.loads(cfg.to_json_string(use_diff=False))
  params = serialized.get("rope_parameters")
  if not isinstance(params, dict) or _nested_by_type(params) or len(set(sections)) < 2:
    return {}
  orders = set(itertools.permutations(range(len(sections))))
  seen, moved = False, False
  deltas = [d for d in itertools.product((-1, 0, 1), repeat=len(sections)) if sum(d) == 0]
  tried = set()
  for shift, delta in itertools.product(range(len(sections)), deltas):  # rotations of the sections, nudged by 1
    given = [x + d for x, d in zip(sections[shift:] + sections[:shift], delta, strict=True)]
    if tuple(given) in tried or min(given) < 1:
      continue
    tried.add(tuple(given))
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        changed = type(cfg).from_dict(_revived({**serialized, "rope_parameters": {**params, "mrope_section": given}}))
      maps, pos, _ = _observed_maps(rebuild_from(type(rotary), changed, module), module, call, rotary_shapes, x_shape)
      got = pair_axes_observed(maps, {"block": facts["block"], "pairing": facts["pairing"],
                                      "frequencies": list(facts["frequencies"])}, pos.numpy())["sections"]
    except Exception:  # noqa: BLE001  a split the class cannot take (Ernie's h and w must match)
      continue
    seen, moved = True, moved or got != sections
    orders &= {o for o in orders if [given[i] for i in o] == got}
  if seen and not moved:
    return {"key_ignored": True}
  if not seen or not orders:
    return {}
  order = min(orders)
  return {} if list(order) == sorted(order) else {"key_order": list(order)}


def _head_dims(rotary):
  """The head widths the rotary module's config gives: head_dim, hidden_size / num_attention_heads (a slice of a
  wider tensor is a head's first channels only when that tensor is a head; GPT-NeoX slices q from fused qkv)."""
  cfg = rotary.config
  values = json.loads(cfg.to_json_string(use_diff=False))  # the serialized values (a per-layer key raises on getattr)
  heads, hidden, head_dim = (values.get(k) for k in ("num_attention_heads", "hidden_size", "head_dim"))
  return {d for d in (head_dim, hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads
                      else None) if isinstance(d, int)}


def _bt(x, t_axis):
  """[B, T, heads, D] from the apply's layout: the token axis moved to 1, or (a vision tower's [T, heads, D], no batch
  axis) a batch of one put in front."""
  return x.unsqueeze(0) if t_axis == 0 else x.movedim(t_axis, 1)


def inv_freqs(rotary):
  """The rotary module's inverse-frequency buffers (one per layer type for Gemma 3), float64."""
  return {n: b.detach().numpy() for n, b in rotary.named_buffers() if "inv_freq" in n and "original" not in n}


def _nested_by_type(params) -> bool:
  """rope_parameters keyed by layer type: every value a dict, or None for a type without RoPE (Beam's
  full_attention), and at least one dict."""
  return bool(params) and all(isinstance(v, dict) or v is None for v in params.values()) and \
      any(isinstance(v, dict) for v in params.values())


def _perturbed(serialized, key, value):
  """A config.json dict with one key changed the way a user's file would change it: rope_theta (x4) and
  partial_rotary_factor inside rope_parameters (flat or per layer type) and at the root where it is; any other
  key at the root."""
  out = copy.deepcopy(serialized)
  if key == "scaling":  # value: rope parameters merged into each layer type's (or the one) rope_parameters
    params = out.get("rope_parameters") or {}
    nested = _nested_by_type(params)
    for p in ([v for v in params.values() if v is not None] if nested else [params]):  # keep theta and the partial
      # factor, replace the rest
      kept = {k: p[k] for k in ("rope_theta", "partial_rotary_factor", "llama_4_scaling_beta") if k in p}
      p.clear()
      p.update({**kept, **value})
    out["rope_parameters"] = params
  elif key in ("rope_theta", "partial_rotary_factor"):
    params = out.get("rope_parameters")
    if isinstance(params, dict):
      nested = _nested_by_type(params)
      for p in ([v for v in params.values() if v is not None] if nested else [params]):
        if key == "rope_theta" and key in p:
          p[key] = p[key] * 4
        elif key == "partial_rotary_factor":
          p[key] = value
    if key in out:
      out[key] = out[key] * 4 if key == "rope_theta" else value
  else:
    out[key] = value
  return out


def _revived(x):
  """A to_json_string dict with the special floats it wrote as {"__float__": "Infinity"} (Falcon-H1's
  time_step_limit) turned back into floats, so that from_dict takes it again."""
  if isinstance(x, dict):
    if set(x) == {"__float__"}:
      return float(x["__float__"])
    return {k: _revived(v) for k, v in x.items()}
  if isinstance(x, list):
    return [_revived(v) for v in x]
  return x


def config_facts(rotary, module, top_config, head_dim):
  """Step 4: where the config keeps this rotary module's settings, its defaults, and which keys it follows."""
  cfg = rotary.config
  where = None
  derived = _derived_from(cfg, top_config)
  if cfg is not top_config and not _same(cfg, top_config) and not derived:
    subs = getattr(top_config, "sub_configs", {})  # the very object first: two equal sub-configs (CLVP's text_config
    # and speech_config) are each read by its own tower
    nested = _sub_configs(top_config, depth=2)  # a sub-config's sub-config: "diarization_config.audio_config"
    where = next((k for k in subs if getattr(top_config, k, None) is cfg), None) or \
        next((k for k in subs if _same(getattr(top_config, k, None), cfg)), None) or \
        next((k for k, v in nested.items() if v is cfg), "?")
  base = inv_freqs(rotary)
  if not base:
    raise Refused(f"its rotary module {type(rotary).__name__} holds no inv_freq buffer")
  serialized = json.loads(cfg.to_json_string(use_diff=False))  # what a config.json of it holds

  def rebuilt(key, value):  # the rotary module of the config class built from the changed config.json
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      changed = type(cfg).from_dict(_revived(_perturbed(serialized, key, value)))
    return rebuild_from(type(rotary), changed, module)

  layer_head_dims, builder_head_dim, per_layer_names = _per_layer_head_dims(rotary, cfg, serialized, base, rebuilt,
                                                                            module)
  follows = {}
  current = serialized.get("partial_rotary_factor") or (serialized.get("rope_parameters") or {}).get(
      "partial_rotary_factor")
  partial = 0.25 if current == 0.5 else 0.5
  own_base = {len(b) for b in base.values()}
  if (int(head_dim * partial) + 1) // 2 in own_base and current is None:  # a width the module has already (CLVP
    # rotates 32 of its 64 channels with no factor): a factor that would give it tells nothing; one that would not
    partial = next((x for x in (0.25, 0.75) if (int(head_dim * x) + 1) // 2 not in own_base), partial)
  halve = head_dim % 4 == 0  # else double it (GLM-4.5's default 42): either way every width changes
  if per_layer_names and isinstance(serialized.get("head_dim"), int):  # the root's head dim, not per_layer_config's
    halve = serialized["head_dim"] % 4 == 0
    changed_dim = serialized["head_dim"] // 2 if halve else serialized["head_dim"] * 2
  else:
    changed_dim = head_dim // 2 if halve else head_dim * 2
  for key, value in (("head_dim", changed_dim), ("partial_rotary_factor", partial),
                     ("rope_theta", None)):
    try:
      new = inv_freqs(rebuilt(key, value))
    except Exception as e:  # noqa: BLE001  a key the class cannot take at all is a key it does not follow
      follows[key] = f"fails: {type(e).__name__}"
      continue
    if key == "rope_theta":
      follows[key] = all(not np.array_equal(new[n][1:], base[n][1:]) for n in base)
    elif key == "head_dim":
      follows[key] = all(len(new[n]) in ((len(b) // 2, (len(b) + 1) // 2) if halve else (2 * len(b), 2 * len(b) - 1))
                         for n, b in base.items() if n not in per_layer_names)  # the others: per_layer_config's
    else:  # the frequencies of this head dim: per_layer_config's where it gives it (EmbeddingGemma 2), else the rest
      own = per_layer_names if head_dim in (layer_head_dims or {}).values() else set(base) - per_layer_names
      follows[key] = all(len(new[n]) == (int(head_dim * partial) + 1) // 2 for n in own)
  # Which rope types the rotary class computes as transformers' standard init functions do (an independent NumPy
  # transcription, scripts/make_hf_rope_families_golden.py): the reader refuses the others for this model.
  max_pos = serialized.get("max_position_embeddings") or 4096
  follows["scalings"] = []
  for rp in ({"rope_type": "linear", "factor": 4.0}, {"rope_type": "proportional", "partial_rotary_factor": 0.25},
             {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": max(max_pos // 4, 16)},
             {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": max(max_pos // 4, 16)},
             # HunYuan's checkpoints write NTK-alpha as "dynamic" with a fixed alpha; its class computes "ntk_alpha"
             {"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0}):
    try:
      rot = rebuilt("scaling", rp)
    except Exception:  # noqa: BLE001
      continue
    new = inv_freqs(rot)
    ok = True
    for n, freqs in new.items():
      base_params = serialized.get("rope_parameters") or {}
      if _nested_by_type(base_params):  # per layer type: "<type>_inv_freq"
        typed = {t: v for t, v in base_params.items() if v is not None}
        base_params = next((v for t, v in typed.items() if n.startswith(t)), next(iter(typed.values())))
      theta = float(base_params.get("rope_theta", 10000.0))
      named = {**rp, "rope_type": "ntk_alpha"} if rp.get("alpha") else rp
      want = np_inv_freq({**named, "rope_theta": theta}, 2 * len(freqs), max_pos)
      ok = ok and np.allclose(freqs, want, rtol=1e-12, atol=0)
    if rp["rope_type"] == "yarn":
      ok = ok and abs(float(getattr(rot, "attention_scaling", 1.0)) - (0.1 * math.log(4.0) + 1.0)) < 1e-12
    if ok:
      follows["scalings"].append("ntk_alpha" if rp.get("alpha") else rp["rope_type"])
  head_dim_key = None  # MLA: the rotated head dim is its own key (qk_rope_head_dim); found by perturbing
  sections = (serialized.get("rope_parameters") or {}).get("mrope_section")
  for key, value in serialized.items():
    if key == "head_dim" or isinstance(value, bool) or value != head_dim or head_dim % 4:
      continue
    try:
      new = inv_freqs(rebuilt(key, head_dim // 2))
    except Exception:  # noqa: BLE001
      if not sections or any(s % 2 for s in sections):
        continue
      try:  # HY-V4-VL: its config checks that the M-RoPE sections add up to the key's half: halved with it
        halved = _perturbed(serialized, "rope_parameters", {**serialized["rope_parameters"],
                                                             "mrope_section": [s // 2 for s in sections]})
        with warnings.catch_warnings():
          warnings.simplefilter("ignore")
          changed = type(cfg).from_dict(_revived(_perturbed(halved, key, head_dim // 2)))
        new = inv_freqs(rebuild_from(type(rotary), changed, module))
      except Exception:  # noqa: BLE001
        continue
    if all(len(new[n]) == len(base[n]) // 2 for n in base):
      head_dim_key = key
      break
  head_dim_from = None  # a vision config's head dim: embed_dim / num_heads, found by value and checked by perturbing
  heads = serialized.get("num_attention_heads")
  if heads is None and head_dim != serialized.get("head_dim"):  # a tower's config (num_heads, embed_dim) only
    ints = {k: v for k, v in serialized.items() if isinstance(v, int) and not isinstance(v, bool) and v > 1}
    for w, wv in sorted(ints.items()):
      for n, nv in sorted(ints.items()):
        if head_dim_from is None and w != n and wv == head_dim * nv:
          try:
            new = inv_freqs(rebuilt(w, wv * 2))
          except Exception:  # noqa: BLE001
            continue
          if all(len(new[x]) == 2 * len(b) for x, b in base.items()):
            head_dim_from = [w, n, wv, nv]
  rotary_dim_keys = None  # where neither head_dim nor partial_rotary_factor moves the rotated width (CLVP): the keys
  # whose doubling or halving does, found by rebuilding the module; None where the width follows either
  if follows.get("partial_rotary_factor") is not True and follows.get("head_dim") is not True and \
      all(2 * len(b) < head_dim for b in base.values()):
    rotary_dim_keys = []
    for key, value in sorted(serialized.items()):
      if not isinstance(value, int) or isinstance(value, bool) or value < 2:
        continue
      for changed in (value * 2, value // 2):
        try:
          new = inv_freqs(rebuilt(key, changed))
        except Exception:  # noqa: BLE001  a value the class cannot take: it cannot be set so either
          continue
        if any(len(new.get(n, ())) != len(b) for n, b in base.items()):
          rotary_dim_keys.append(key)
          break
  params = serialized.get("rope_parameters")
  # Keys that may change which layers rotate, or with what, and that the generic reading does not read (Granite's
  # layer_rope_theta, Molmo 2's rope_scaling_layers, a sliding-window pattern): from_hf_config refuses a config that
  # sets one to another value than the default observed here. Found by name, to refuse, never to read.
  guarded = {k: v for k, v in serialized.items() if k != "layer_types" and GUARDED_NAME.search(k)
             and GUARDED_PART.search(k)}
  return {"config": where, "config_class": type(top_config if derived else cfg).__name__, "follows": follows,
          "guarded": guarded, "serialized": serialized,
          "rope_parameters": params, "rope_type": getattr(rotary, "rope_type", None),
          "n_freq": {n: len(v) for n, v in base.items()},
          "defaults": {k: serialized.get(k) for k in ("head_dim", "hidden_size", "num_attention_heads",
                                                      "num_hidden_layers", "partial_rotary_factor", head_dim_key)
                       if k},
          "layer_types": list(serialized.get("layer_types") or []) or None,
          "loaded_layer_types": _loaded_layer_types(cfg),
          "lists": {k: v for k, v in serialized.items() if isinstance(v, list) and v
                    and all(isinstance(x, (int, str)) and not isinstance(x, bool) for x in v)},
          "head_dim_key": head_dim_key, "head_dim_from": head_dim_from, "rotary_dim_keys": rotary_dim_keys,
          "layer_head_dims": layer_head_dims, "builder_head_dim": builder_head_dim,
          "ints": {k: v for k, v in serialized.items() if isinstance(v, int) and not isinstance(v, bool)}}


def _loaded_layer_types(cfg):
  """The layer types the config object holds once loaded (what each layer's module reads), where that is a list of
  names; None otherwise."""
  types = getattr(cfg, "layer_types", None)
  return list(types) if isinstance(types, (list, tuple)) and all(isinstance(t, str) for t in types) else None


def layer_types_filler(serialized, loaded):
  """[block, k] where the config class builds its layer types from config.json's by keeping every k-th entry and
  dropping the k - 1 after each, which all name one block type no kept entry names (Dory: each decoder layer is
  written as its attention type followed by "mlp"; its class keeps [::2] and halves num_hidden_layers, and the
  model's layer i reads the kept type i); None where the two lists are the same. Any other relation is refused:
  found by comparing the serialized list with the loaded one, never by the block's name."""
  if serialized is None or loaded is None or serialized == loaded:
    return None
  k = len(serialized) // len(loaded) if loaded and len(serialized) % len(loaded) == 0 else 0
  dropped = {t for j, t in enumerate(serialized) if k and j % k}
  if k < 2 or serialized[::k] != loaded or len(dropped) != 1 or dropped & set(loaded):
    raise Refused(f"its config class turns config.json's layer_types ({serialized[:4]}...) into other layer types "
                  f"({loaded[:4]}...) by a rule not read here")
  return [dropped.pop(), k]


def _per_layer_head_dims(rotary, cfg, serialized, base, rebuilt, module):
  """transformers 5.24's per_layer_config (a sparse {layer: overrides} of any config): where the default config
  overrides head_dim per layer (Gemma 4, EmbeddingGemma 2: its full-attention layers are wider), whether the rotary
  module follows those overrides (all halved: each layer type's frequencies either halve or stay), and which
  config.json key the config class builds them from when a file has no per_layer_config (the names its __post_init__
  pops are the candidates; the one is the key whose halving halves the same frequencies). Returns ({layer: head
  dim}, [key, default] or None, the names of the frequencies that follow them) or (None, None, set())."""
  per_layer = serialized.get("per_layer_config") or {}
  dims = {int(k): v["head_dim"] for k, v in per_layer.items() if isinstance(v, dict) and "head_dim" in v}
  if not dims:
    return None, None, set()
  halved = {k: {**v, "head_dim": v["head_dim"] // 2} if isinstance(v, dict) and "head_dim" in v else v
            for k, v in per_layer.items()}
  try:
    new = inv_freqs(rebuilt("per_layer_config", halved))
  except Exception:  # noqa: BLE001
    return None, None, set()
  lengths = {n: len(v) for n, v in new.items()}
  if lengths == {n: len(v) for n, v in base.items()} or \
      any(lengths[n] not in (len(b), len(b) // 2) for n, b in base.items()):
    return None, None, set()
  builder = None
  if len(set(dims.values())) == 1:
    value = next(iter(dims.values()))
    bare = {k: v for k, v in serialized.items() if k != "per_layer_config"}
    for name in re.findall(r"kwargs\.pop\(\s*[\"'](\w+)[\"']", inspect.getsource(type(cfg))):
      try:
        with warnings.catch_warnings():
          warnings.simplefilter("ignore")
          changed = type(cfg).from_dict(_revived({**bare, name: value // 2}))
        moved = inv_freqs(rebuild_from(type(rotary), changed, module))
      except Exception:  # noqa: BLE001
        continue
      if {n: len(v) for n, v in moved.items()} == lengths:
        builder = [name, value]
        break
  return dims, builder, {n for n, b in base.items() if lengths[n] != len(b)}


def _derived_from(cfg, top_config):
  """Whether a rotary module's config is the top config's own fields under a subclass of its class (Mimi's
  encoder_config and decoder_config: MimiEncoderConfig(**self.to_dict())): it reads the top config's keys."""
  if cfg is None or top_config is None or cfg is top_config or not isinstance(cfg, type(top_config)):
    return False
  a, b = cfg.to_dict(), top_config.to_dict()
  return {k: v for k, v in a.items() if k != "model_type"} == {k: v for k, v in b.items() if k != "model_type"}


def _same(a, b):
  return a is b or (a is not None and b is not None and type(a) is type(b) and a.to_dict() == b.to_dict())


def rebuild_from(cls, config, module):
  with float64_transformers(modeling_rope_utils, module), warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return cls(config=config)


def _check_default_frequencies(r):
  """Default RoPE: pair k turns by direction * theta ** (-2k / R) per position, theta the config's."""
  f = r["config_facts"]
  params = f["rope_parameters"] or {}
  rtype = r["rotary_args"][0][0] if r["rotary_args"][0] else None
  if _nested_by_type(params):
    params = params.get(rtype) or {}
  theta = params.get("rope_theta")
  got = np.asarray(r["frequencies"])
  if theta is None:
    raise Refused("its config names no rope_theta for the frequencies it turns by")
  # transformers' default: dim = int(head_dim * partial_rotary_factor), theta ** (-arange(0, dim, 2) / dim), so an
  # odd dim (GLM-4.5's default config: int(42 * 0.5) = 21) gives (dim + 1) / 2 pairs over a denominator of dim
  partial = params.get("partial_rotary_factor", f["defaults"].get("partial_rotary_factor"))
  dims = [2 * len(got)]
  if partial is not None and int(r["head_dim"] * partial) == 2 * len(got) - 1:
    dims.append(2 * len(got) - 1)
  for dim in dims:
    want = r["direction"] * float(theta) ** (-np.arange(0, 2 * len(got), 2) / dim)
    if np.allclose(got, want, rtol=1e-9, atol=1e-12):
      break
  if not np.allclose(got, want, rtol=1e-9, atol=1e-12):
    k = int(np.argmax(np.abs(got - want)))
    raise Refused(f"pair {k} turns by {got[k]:.6g} per position, not theta ** (-2k / R) = {want[k]:.6g} "
                  f"(theta {theta}): frequencies of its own")


def _fixed_theta(rotations):
  """The theta of a rotary module that reads none from its config (CLVP's 10000 in its class): where the config holds
  no rope key at all (rope_parameters, rope_theta), the class follows no rope_theta, and every rotation's frequencies
  are theta ** (-2k / R) for one theta fitted from them (rounded where that is as exact). Else None."""
  thetas = set()
  for r in rotations:
    f = r["config_facts"]
    if f["rope_parameters"] or "rope_theta" in f["serialized"] or f["rope_type"] is not None or r.get("mrope"):
      return None
    got = np.asarray(r["frequencies"]) * r["direction"]
    n = len(got)
    if n < 2 or got[1] <= 0:
      return None
    theta = float(got[1] ** (-n))  # pair 1 turns by theta ** (-2 / R), R = 2n
    for t in (float(round(theta)), theta):
      if np.allclose(got, t ** (-np.arange(0, 2 * n, 2) / (2 * n)), rtol=1e-9, atol=1e-12):
        thetas.add(t)
        break
    else:
      return None
  return thetas.pop() if len(thetas) == 1 else None


def _frequency_kind(r):
  """Which spectrum a tower's own rope type turns its M-RoPE pairs by, against independent formulas: "shared"
  (theta ** (-2k / R) over all R / 2 pairs) or "per_axis" (each axis's s pairs theta ** (-2j / 2s), Qwen2-VL vision's
  axial RoPE), with the pairs laid out in chunked sections; else Refused."""
  params = r["config_facts"]["rope_parameters"] or {}
  theta = params.get("rope_theta")
  if theta is None:
    raise Refused("its config names no rope_theta for the frequencies it turns by")
  got = np.asarray(r["frequencies"])
  sections = r["mrope"]["sections"]
  k = len(got)
  kinds = {"shared": float(theta) ** (-np.arange(0, 2 * k, 2) / (2 * k))}
  if r["mrope"]["section_layout"] == "chunked":
    kinds["per_axis"] = np.concatenate([float(theta) ** (-np.arange(0, 2 * n, 2) / (2 * n)) for n in sections])
  for kind, want in kinds.items():
    if np.allclose(got, r["direction"] * want, rtol=1e-9, atol=1e-12):
      return kind
  raise Refused(f"its {r['config_facts']['rope_type']!r} RoPE turns its pairs by frequencies of its own")


def classify(rotations):
  """The reader's family dict for an observed model whose rotations the spec expresses, else Refused(mechanism)."""
  pairing = {r["pairing"] for r in rotations}
  if len(pairing) > 1:
    raise Refused(f"layers pair channels differently ({sorted(pairing)})")
  if len({r["direction"] for r in rotations}) > 1:
    raise Refused("its layers turn their pairs in opposite directions")
  if len({bool(r.get("rotates_value")) for r in rotations}) > 1:
    raise Refused("some of its layers rotate v too, others not")
  for r in rotations:
    if r["block"][0] != 0:
      raise Refused(f"rotates the last {r['rotary_dim']} of {r['head_dim']} channels")
    if r.get("mrope") and "mrope_interleaved" in (r["config_facts"]["rope_parameters"] or {}):
      raise Refused("M-RoPE whose layout a config key (mrope_interleaved) may change: not observed both ways")
    if r["config_facts"]["rope_type"] == "default" or (r["config_facts"]["rope_type"] is None and
                                                        not r["config_facts"]["rope_parameters"]):
      if not np.allclose(r["attention_factor"], 1.0, atol=1e-12):
        raise Refused(f"scales cos/sin by {r['attention_factor']} with default RoPE")
      if r["config_facts"]["rope_type"] == "default":
        _check_default_frequencies(r)
    elif isinstance(r["config_facts"]["rope_type"], str) and \
        r["config_facts"]["rope_type"] not in transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS:
      if not r.get("mrope"):  # a tower's own rope type (Kimi-K2.5's "axial") whose pairs this reading did not map
        raise Refused(f"its own {r['config_facts']['rope_type']!r} RoPE turns its pairs by the position ids in a way "
                      "not read as M-RoPE sections over them")
      if not np.allclose(r["attention_factor"], 1.0, atol=1e-12):
        raise Refused(f"scales cos/sin by {r['attention_factor']} with {r['config_facts']['rope_type']!r} RoPE")
      r["frequency_kind"] = _frequency_kind(r)
  facts = [r["config_facts"] for r in rotations]
  if len({json.dumps([f["config"], f["config_class"], f["follows"]], sort_keys=True) for f in facts}) > 1:
    raise Refused("its layers' rotary modules read different configs")
  f = facts[0]
  fixed_theta = None
  if f["follows"].get("rope_theta") is not True:
    fixed_theta = _fixed_theta(rotations)  # CLVP: no rope key in its config at all, theta fixed in its class
    if fixed_theta is None:
      raise Refused("its rotary module does not follow rope_parameters' rope_theta")
  d = f["defaults"]
  params = f["rope_parameters"] or {}
  # Hand-written (the q scaling happens in the attention, outside the apply function this script observes):
  # Ministral 3 and Mistral 4 multiply q by 1 + beta * log(1 + floor(position / original length)); the golden takes
  # the model's own get_llama_4_attn_scale (`with_q_temperature`). The spec's q_temperature rides on cos and sin, so
  # it holds where every channel of q rotates; Mistral 4 (MLA) scales its unrotated channels as well.
  flat = [v for v in params.values() if v is not None] if _nested_by_type(params) else [params]
  q_temperature = any("llama_4_scaling_beta" in p for p in flat)
  if q_temperature and (f["head_dim_key"] or f["head_dim_from"] or any(r.get("slice_of") for r in rotations)
                        or any(r["rotary_dim"] != r["head_dim"] for r in rotations)):
    sliced = next((r["slice_of"] for r in rotations if r.get("slice_of")), None)
    if sliced:  # Mistral 4: query_states = cat(q_pass, q_rot) * get_llama_4_attn_scale(...), q_rot its last channels
      start, width = sliced
      raise Refused("scales all of q, its unrotated channels too, by a position-dependent temperature "
                    f"(llama_4_scaling_beta) besides RoPE: its apply rotates channels [{start}, "
                    f"{start + rotations[0]['head_dim']}) of a {width}-channel q, which its attention then multiplies "
                    "whole by the temperature; a spec's q_temperature rides on the cos and sin of the channels it "
                    "rotates, so it cannot reach the others")
    raise Refused("scales all of q, its unrotated channels too, by a position-dependent temperature "
                  "(llama_4_scaling_beta) besides RoPE")
  nested = _nested_by_type(params)
  follows_head_dim = f["follows"].get("head_dim") is True
  follows_partial = f["follows"].get("partial_rotary_factor") is True
  n_layers = d["num_hidden_layers"]
  filler = layer_types_filler(f["layer_types"], f["loaded_layer_types"])
  if filler:  # Dory: config.json's layer_types interleave a block type its class drops; the model's layers are the
    # kept entries, as many as the class's num_hidden_layers (the file's, divided by the stride)
    if n_layers != len(f["layer_types"]):
      raise Refused(f"its config.json's num_hidden_layers ({n_layers}) is not the length of its layer_types "
                    f"({len(f['layer_types'])}), whose {filler[0]!r} blocks its class drops")
    f["layer_types"], n_layers = f["loaded_layer_types"], len(f["loaded_layer_types"])
  rotating = sorted({i for r in rotations for i in r["layers"]})
  if n_layers is None and rotating == list(range(len(rotating))):  # a tower counts its blocks by another key
    n_layers = len(rotating)
    keys = [k for k, v in f["ints"].items() if v == n_layers]
    fam_layers_key = keys[0] if len(keys) == 1 else None
  else:
    fam_layers_key = None
  fam = {"layout": rotations[0]["pairing"], "direction": rotations[0]["direction"], "hidden_size": d["hidden_size"],
         "num_attention_heads": d["num_attention_heads"], "num_hidden_layers": n_layers,
         "head_dim": d["head_dim"] if follows_head_dim else "computed", "partial": None}
  if fam_layers_key:
    fam["layers_key"] = fam_layers_key
  if filler:
    fam["layer_types_filler"] = filler
  for r in rotations:
    h = r["head_dim"]
    predicted = d["head_dim"] if follows_head_dim and d["head_dim"] else (
        d["hidden_size"] // d["num_attention_heads"] if d["hidden_size"] and d["num_attention_heads"] else None)
    layer_dims = f.get("layer_head_dims") or {}
    if any(i in layer_dims for i in r["layers"]):  # per_layer_config's head_dim (Gemma 4's wider full attention)
      if any(layer_dims.get(i, predicted) != h for i in r["layers"]):
        raise Refused(f"rotates a head dim of {h} in layers {r['layers'][:6]}..., not the head_dim per_layer_config "
                      "gives each of them")
      fam["per_layer_keys"] = ["head_dim"]
      rtype = r["rotary_args"][0][0] if r["rotary_args"][0] else None
      types_ = f["layer_types"] or []
      if f["builder_head_dim"] and rtype and sorted(layer_dims) == [i for i, t in enumerate(types_) if t == rtype]:
        fam.setdefault("type_head_dim", {})[rtype] = f["builder_head_dim"]  # a file without per_layer_config
      else:
        fam["per_layer_config_required"] = True
    elif f["head_dim_key"] and d.get(f["head_dim_key"], h) == h:  # the key that drives it, whatever head_dim says
      fam.update(rope_head_dim_key=f["head_dim_key"], head_dim=h)
    elif f["head_dim_from"] and predicted != h:  # a vision tower: embed_dim / num_heads
      fam.update(head_dim_from=f["head_dim_from"], head_dim="from")
    elif predicted != h and (key := _per_layer_width_key(f["serialized"], r["layers"], h)):
      raise Refused(f"rotates a head dim of {h} in layers {r['layers'][:6]}..., not head_dim ({d['head_dim']}) or "
                    f"hidden_size / num_attention_heads: the {key} of each layer (its per_layer_config entry's, else "
                    f"the root's: MLA with per-layer heads, its entries overriding "
                    f"{', '.join(_per_layer_keys(f['serialized']))}), which no perturbation observed: the config "
                    "class refuses a change of that width alone (its validation ties it to the per-layer head "
                    "dims), so neither it nor those overrides are read")
    elif predicted != h:
      raise Refused(f"rotates a head dim of {h}, not head_dim ({d['head_dim']}) or hidden_size / num_attention_heads "
                    f"({d['hidden_size']} / {d['num_attention_heads']})")
    rtype = r["rotary_args"][0][0] if r["rotary_args"][0] else None
    p = params.get(rtype, {}) if nested else params
    partial = p.get("partial_rotary_factor", d["partial_rotary_factor"]) if follows_partial else None
    expected = int(h * partial) if partial is not None else h
    expected += expected % 2  # an odd dim rotates (dim + 1) / 2 pairs (see _check_default_frequencies)
    n_axes = len(r["mrope"]["sections"]) if r.get("mrope") else 0
    if expected != r["rotary_dim"] and n_axes and r.get("frequency_kind") and \
        r["rotary_dim"] == n_axes * 2 * ((h // n_axes) // 2) and len(set(r["mrope"]["sections"])) == 1:
      fam["rotary_per_axis_floor"] = True  # MiniMax-M3-VL's tower: 2 * ((80 // 3) // 2) = 26 channels per axis, 2 pass
    elif expected != r["rotary_dim"] and not follows_partial and f.get("rotary_dim_keys") is not None and \
        fam.get("rotary_dim_fixed", r["rotary_dim"]) == r["rotary_dim"]:
      # CLVP: its class computes the rotated width from other keys (max(projection_dim // (2 * heads), 32)): read
      # as observed, with the keys whose change moves it (found by rebuilding the module) guarded at their defaults
      fam["rotary_dim_fixed"] = r["rotary_dim"]
      f["guarded"].update({k: f["serialized"][k] for k in f["rotary_dim_keys"]})
    elif expected != r["rotary_dim"]:
      raise Refused(f"rotates {r['rotary_dim']} of {h} channels where partial_rotary_factor gives {expected}")
    if partial is not None and not nested:
      fam["partial"] = partial
  if not follows_partial:
    fam["ignores_partial"] = True
  fam["scalings"] = sorted(set.intersection(*(set(x["follows"].get("scalings", [])) for x in facts)))
  if nested:
    fam["theta"] = {t: float(v["rope_theta"]) for t, v in params.items() if v is not None}  # None: a NoPE type
  else:
    fam["theta"] = float(params.get("rope_theta", 10000.0))
  fam["default_rope_parameters"] = params
  types = f["layer_types"]
  if types is not None:
    fam["default_layer_types"] = types
  flags = _flag_rule(f["lists"], rotating, n_layers) if len(rotating) != n_layers else None
  if flags:  # Mistral Large 4: a 0/1 flag per layer (no_rope_layers, 1 = rotates), whatever the layer types say
    fam.update(flags)
    f["guarded"].pop(flags["rope_flags_key"][0], None)  # the key is read now, not guarded
  elif len(rotating) != n_layers and types is None:
    rule = _layer_rule(f["lists"], rotating, n_layers)
    if rule is None and len(rotations) == 1 and rotations[0].get("every_block"):
      rule, rotating = {}, list(range(n_layers))  # every block rotates alike: so does every layer the config counts
      rotations[0]["layers"] = rotating
    if rule is None:
      raise Refused(f"{len(rotating)} of its {n_layers} layers rotate, by a rule its config has no layer_types for")
    fam.update(rule)
    if rule:
      f["guarded"].pop(next(iter(rule.values()))[0], None)  # the key is read now, not guarded
    if "layer_types_key" in rule:
      key, default = rule["layer_types_key"]
      types = [default[i % len(default)] for i in range(n_layers)]
  if len(rotating) != n_layers and "nope_layers_key" not in fam and "rope_layers_key" not in fam and not flags:
    on = sorted({types[i] for i in rotating})
    if [i for i in range(n_layers) if types[i] in on] != rotating:
      raise Refused(f"the layers that rotate ({rotating[:6]}...) are not those of some layer types ({on})")
    fam["rope_on"] = on
  for r in rotations:
    rtype = r["rotary_args"][0][0] if r["rotary_args"][0] else None
    if rtype is not None and (not nested or types is None or any(types[i] != rtype for i in r["layers"])):
      raise Refused(f"its rotary module takes a layer type ({rtype!r}) that the config does not key its rope by")
  equal_split = None
  if len({json.dumps(r.get("mrope")) for r in rotations}) > 1:
    # NeoMME: each layer type splits its own rotated pairs equally over the axes (16 + 16 of 32 on sliding layers,
    # 4 + 4 of 8 on its partial full-attention layers), in one layout: read as that equal split of each layer's pairs
    splits = {(r["mrope"]["section_layout"], len(r["mrope"]["sections"])) if r.get("mrope") and
              len(set(r["mrope"]["sections"])) == 1 and sum(r["mrope"]["sections"]) == r["rotary_dim"] // 2 else None
              for r in rotations}
    if len(splits) != 1 or None in splits or any("mrope_section" in p for p in flat):
      raise Refused("its layers lay M-RoPE sections out differently")
    equal_split = splits.pop()
  if equal_split:
    fam.update(mrope=equal_split[0], mrope_forced=True, sections_equal=equal_split[1])
  elif rotations[0].get("mrope"):
    fam.update(mrope=rotations[0]["mrope"]["section_layout"], mrope_forced=True,
               mrope_sections=rotations[0]["mrope"]["sections"])
    if rotations[0]["mrope"].get("key_order"):  # Ernie 4.5-VL: its mrope_section is (h, w, t)
      fam["mrope_key_order"] = rotations[0]["mrope"]["key_order"]
    if rotations[0]["mrope"].get("key_ignored"):  # sections fixed in the class, whatever mrope_section says
      fam["mrope_key_ignored"] = True
    if any(r["mrope"].get("axes_swapped") for r in rotations):  # Inkling 2's tower: its sections read (col, row)
      if not all(r["mrope"].get("axes_swapped") for r in rotations):
        raise Refused("its layers read the image's (row, col) axes in different orders")
      fam["position_axes"] = "wh"
    if rotations[0].get("frequency_kind"):  # a tower's own rope type (Qwen2-VL vision's "axial")
      sections = rotations[0]["mrope"]["sections"]
      if len(set(sections)) != 1 or "mrope_section" in (params or {}):
        raise Refused(f"its {f['rope_type']!r} RoPE splits the pairs {sections} over the axes: not the equal "
                      "split of a head this reading derives from the head dim")
      fam.update(axial_rope_type=f["rope_type"], frequencies=rotations[0]["frequency_kind"],
                 sections_equal=len(sections))
  if q_temperature:
    fam["q_temperature"] = True
  if len({json.dumps(r.get("heads")) for r in rotations}) > 1:
    raise Refused("its layers rotate different slices of their heads")
  if rotations[0].get("heads"):  # observed by value: the apply turns heads [start, stop) of its caller's (Qwen2.5-Omni's
    # DiT: query[:, :1]), the spec's heads; read only at the head count observed (a slice fixed in the code, or one
    # that follows the count, look alike from one forward)
    start, stop, held = rotations[0]["heads"]
    if d["num_attention_heads"] != held:
      raise Refused(f"rotates heads [{start}, {stop}) of the {held} its attention holds, which is not "
                    f"num_attention_heads ({d['num_attention_heads']})")
    fam["heads"] = [start, stop]
    f["guarded"]["num_attention_heads"] = held
  if fixed_theta is not None:
    fam["theta"], fam["theta_fixed"] = fixed_theta, True
  if rotations[0].get("rotates_value"):  # observed: the apply rotates v too (CLVP), the spec's rotate_value
    fam["rotates_value"] = True
  derived = _derived_keys(fam, f["config_class"], f["serialized"])
  if derived:
    fam["derived_keys"] = derived
  if f["config"] is not None:
    fam["sub"] = f["config"]
  if f["guarded"]:
    fam["guarded"] = f["guarded"]
  return fam


def _per_layer_keys(serialized):
  """The keys transformers 5.24's per_layer_config overrides in a config.json, sorted."""
  per_layer = serialized.get("per_layer_config") or {}
  return sorted({k for v in per_layer.values() if isinstance(v, dict) for k in v})


def _per_layer_width_key(serialized, layers, width):
  """For a refusal's message only (never read): where the config has a per_layer_config, the root "..._dim" keys
  that, from each layer's entry or else the root, equal `width` on every one of `layers` (Dots 3 Note's
  qk_rope_head_dim), joined; else None."""
  per_layer = {int(k): v for k, v in (serialized.get("per_layer_config") or {}).items() if isinstance(v, dict)}
  if not per_layer:
    return None
  keys = [k for k, v in sorted(serialized.items()) if k.endswith("_dim") and isinstance(v, int)
          and all(per_layer.get(i, {}).get(k, v) == width for i in layers)]
  return " or ".join(keys) or None


def _derived_keys(fam, config_class, serialized):
  """The keys the reading takes from a config.json (a rotated head dim's, a list of rotating layers) that the config
  class computes from other keys when a file lacks them (Zamba 2's attention_head_dim = 2 * hidden_size /
  num_attention_heads): {key: the keys whose change moves its computed value}, found by the class assigning it in
  its own code and by doubling each integer key of a file without it. The reader refuses a file that lacks the key
  but sets one of those (the registry's default would not be the class's); never read from the source."""
  cls = next((c for c in CONFIG_MAPPING.values() if c.__name__ == config_class), None)
  keys = [k for k in (fam.get("rope_head_dim_key"), (fam.get("rope_layers_key") or [None])[0]) if k]
  try:
    source = inspect.getsource(cls) if cls is not None else ""
  except (OSError, TypeError):
    source = ""
  out = {}
  for key in keys:
    if not re.search(rf"self\.{key}\s*=", source):
      continue
    bare = {k: v for k, v in serialized.items() if k != key}
    moved = []
    for other, value in sorted(bare.items()):
      if not isinstance(value, int) or isinstance(value, bool):
        continue
      try:
        with warnings.catch_warnings():
          warnings.simplefilter("ignore")
          base = getattr(cls.from_dict(_revived(bare)), key)
          changed = getattr(cls.from_dict(_revived({**bare, other: 2 * value})), key)
      except Exception:  # noqa: BLE001  a value the class cannot take
        continue
      if changed != base:
        moved.append(other)
    out[key] = moved
  return out


def split_parts(rotations):
  """Parts of one model that rotate differently, each read on its own (from_hf_config(..., part=name)), or None
  when its rotations are one reading. A part is a sub-config the rotary modules read (T5Gemma's "encoder" and
  "decoder") or, within one config, the module inside each layer that calls the apply ("self_attn" and
  "self_attn.indexer": DeepSeek-V3.2's attention pairs interleaved, its indexer half). Split only where one reading
  is refused for exactly that difference, and only along the observed boundary."""
  try:
    classify(copy.deepcopy(rotations))
    return None
  except Refused as e:
    reason = str(e)
  configs = {r["config_facts"]["config"] for r in rotations}
  if reason == "its layers' rotary modules read different configs" or \
      (len(configs) > 1 and reason.startswith("layers pair channels differently")):  # towers of sub-configs that
    # also pair differently (PE-Audio's audio tower and its ModernBERT text tower): a part per sub-config
    key = lambda r: r["config_facts"]["config"] or "root"  # noqa: E731
  elif reason.startswith("layers pair channels differently"):
    key = lambda r: "/".join(r["callers"])  # noqa: E731
  else:
    return None
  groups = {}
  for r in rotations:
    r["part"] = key(r)
    groups.setdefault(r["part"], []).append(r)
  if len(groups) < 2:
    return None
  layers = [set().union(*(set(r["layers"]) for r in g)) for g in groups.values()]
  if reason.startswith("layers pair") and any(a & b for a in layers for b in layers if a is not b) and \
      any("/" in name or name == "?" for name in groups):
    return None  # the same module calls both pairings: not a boundary between parts
  return groups


def _flag_rule(lists, rotating, n_layers):
  """A config list of one 0/1 flag per layer whose ones are the layers observed to rotate (Mistral Large 4's
  no_rope_layers, its name inverted): matched by the observed values, never by the key's name."""
  for key, value in sorted(lists.items()):
    if len(value) == n_layers and all(isinstance(x, int) and x in (0, 1) for x in value) and \
        [i for i, x in enumerate(value) if x] == rotating:
      return {"rope_flags_key": [key, value]}
  return None


def _layer_rule(lists, rotating, n_layers):
  """Which config list says which layers rotate, where the config has no layer_types: a list of layer indices equal
  to the layers observed not to rotate (Mllama's cross_attention_layers), or a list of block types that, repeated
  over the layers, puts the rotating layers in types of their own (RecurrentGemma's block_types). Matched by the
  observed values, never by the key's name."""
  still = sorted(set(range(n_layers)) - set(rotating))
  for key, value in sorted(lists.items()):
    if all(isinstance(x, int) for x in value) and sorted(value) == still:
      return {"nope_layers_key": [key, value]}
  for key, value in sorted(lists.items()):
    if all(isinstance(x, str) for x in value):
      types = [value[i % len(value)] for i in range(n_layers)]
      on = {types[i] for i in rotating}
      if on and all((types[i] in on) == (i in rotating) for i in range(n_layers)):
        return {"layer_types_key": [key, value]}
  for key, value in sorted(lists.items()):  # the layers a list names are those that rotate (Bamba's attention layers)
    if all(isinstance(x, int) for x in value) and sorted(value) == sorted(rotating):
      return {"rope_layers_key": [key, value]}
  return None


def with_q_temperature(module, rotations):
  """The goldens of a model that scales q after rotating it (Ministral 3): the rotated q times the model's own
  get_llama_4_attn_scale(positions, beta, length), called with its config's rope parameters as its attention calls
  it. Hand-written wiring: that call is in the attention, outside the apply this script observes."""
  fn = getattr(module, "get_llama_4_attn_scale", None)
  if fn is None:
    raise Refused("its rope parameters hold llama_4_scaling_beta, but its module has no get_llama_4_attn_scale")
  for r in rotations:
    key = r["config_facts"]["config"]
    cases = [(r["config_facts"]["rope_parameters"], "q_out")]
    if r.get("perturbed_config") is not None:
      top = r["perturbed_config"]
      cases.append(((top if key is None else top[key]).get("rope_parameters"), "q_out_perturbed"))
    for params, out in cases:
      with torch.no_grad():
        scale = fn(torch.tensor(r["positions"], dtype=torch.float64), params["llama_4_scaling_beta"],
                   params["original_max_position_embeddings"])
      r[out] = r[out] * scale[:, 0, :, 0].numpy()[:, :, None, None]


def _role(t, outputs):
  """How a positional argument of an apply call is rebuilt: a rotary module's output, a q-like tensor, a value."""
  if torch.is_tensor(t):
    src = outputs.get(id(t))
    if src:
      return {"rotary": src[0], "index": src[3], **({"ops": src[6]} if len(src) > 6 else {})}
    if not t.is_floating_point() and not t.is_complex():  # integer position ids handed to the apply (CLVP)
      return {"ids": list(t.shape)}
    role = {"x": list(t.shape)}
    sliced = _slice_of(t)
    if sliced:
      role["slice_of"] = sliced
    return role
  return {"value": t} if isinstance(t, (str, int, float, bool, type(None))) else {"opaque": type(t).__name__}


def _slice_of(t):
  """[start, D] when the tensor is channels start..start + R of a head of D channels: a view of the per-head
  tensor (Phi's q[..., :rotary_ndims]), read from its strides (the smallest stride of a longer axis is the head's
  channel count) and storage offset. None when it is a whole head."""
  if t.dim() < 2 or t.stride()[-1] != 1:
    return None
  strides = [st for st, n in zip(t.stride()[:-1], t.shape[:-1], strict=True) if n > 1]
  if not strides:
    return None
  d, r = min(strides), t.shape[-1]
  start = t.storage_offset() % d if d > r else 0
  return [start, d] if d > r and start + r <= d else None


def _summary(r):
  """A rotation as the registry records it (the arrays go to the golden file)."""
  keep = ("pairing", "direction", "block", "head_dim", "attention_factor", "output", "mrope", "layers", "fn",
          "rotary_module", "rotary_args", "stubbed", "part", "rotates_value", "heads")
  out = {k: r[k] for k in keep if r.get(k) is not None}
  out["follows"] = r["config_facts"]["follows"]
  out["config"] = r["config_facts"]["config"]
  return out


def main():
  only = sys.argv[1:]
  if only == ["--diffusers"]:
    with open(OUT_JSON) as f:
      registry = json.load(f)
    old = {"model_types": {}, "diffusers": registry.get("diffusers", {})}
    registry["versions"]["diffusers"], registry["diffusers"] = diffusers_entries()
    report_diffusers(old["diffusers"], registry["diffusers"])
    with open(OUT_JSON, "w") as f:
      json.dump(registry, f, indent=0, sort_keys=True, default=_json_default)
      f.write("\n")
    return
  update = only[:1] == ["--update"]  # observe these types and merge them into the files (for working on a few)
  only = only[1:] if update else only
  types = only or list(CONFIG_MAPPING_NAMES)
  t0 = time.time()
  out = {}
  rng = np.random.default_rng(SEED)
  goldens = {}
  for mt in types:
    entry = {}
    try:
      module = modeling_module(mt)
      if mt in REFUSE:
        raise Refused(REFUSE[mt])
      try:
        config = CONFIG_MAPPING[mt](**OBSERVE_AT.get(mt, {}))
      except Exception as e:  # noqa: BLE001
        entry = {"status": "no_default_config", "reason": f"{type(e).__name__}: {str(e)[:160]}"}
        raise Refused(entry["reason"]) from None
      rotary = candidates(module) if module is not None else {}
      pixel_cls = model_class(mt, config, module) if rotary else None
      if not rotary:
        entry = {"status": "no_rope"}
      elif (reach := _default_reach(mt, config, module)) in ("never", "other_settings"):
        # no module its default config builds reaches the rotary code, whatever its inputs: "never" (the rotary code
        # serves another model of its file), or only through a class other settings build (Bamba's attention)
        entry = {"status": "no_rope", ("unreachable_rotary_code" if reach == "never" else "unused_rotary_code"):
                 sorted(rotary)[:6]}
      elif pixel_cls is not None and pixel.takes_pixels(pixel_cls, mt):  # a tower on pixels: fitted like a latent grid
        try:
          entry, golden = pixel.observe(mt, config, pixel_cls, shrunk)
        except pixel.fit.Refused as e:  # the fit's refusal, in the registry's terms
          raise Refused(str(e)) from e
        if entry["status"] == "exact" and "keypoints" in entry:  # an image matcher's keypoints (LightGlue)
          goldens[mt] = {"config": json.loads(config.to_json_string(use_diff=False)), "rotations": [],
                         "pixel": golden}
        elif entry["status"] == "exact":
          read = pixel.rope_config(config)[1]  # the config, or the sub-config its attention reads (SAM 3's backbone)
          entry["pixel"].update({k: getattr(read, k, None) for k in ("hidden_size", "num_attention_heads",
                                                                      "head_dim")})
          params = getattr(read, "rope_parameters", None)  # the rope type it was observed with (Pixtral: "axial")
          entry["pixel"]["rope_type"] = params.get("rope_type") if isinstance(params, dict) else None
          goldens[mt] = {"config": json.loads(config.to_json_string(use_diff=False)), "rotations": [],
                         "pixel": golden}
        else:  # no rotary call on an image
          entry = {"status": "no_rope", "unused_rotary_code": sorted(rotary)[:6]}
      elif pixel_cls is not None and _state_argument(pixel_cls) is not None:  # SAM 2 video: a state object
        entry, golden = state_model_entry(mt, config, pixel_cls)
        if golden is not None:
          goldens[mt] = {"config": json.loads(config.to_json_string(use_diff=False)), "rotations": [],
                         "pixel": golden}
      elif getattr(getattr(pixel_cls, "forward", None), "__name__", "") == "_forward_unimplemented":
        # a composite with no forward of its own (Qwen2.5-Omni: generate() runs its parts): its parts are read
        # through its sub-configs (delegate)
        entry = {"status": "no_rope", "no_forward": True}
      else:
        SEEN_IDS.clear()
        TOKENS[0] = T_META
        VISION_TOKENS[0] = N_VISION
        try:
          calls, rotary_shapes, model = meta_forward(mt, config, module)
        except ForeignTowers:  # PE-Audio's ModernBERT text tower: observed with that code's applies wrapped too,
          # each tower a part of its own sub-config
          SEEN_IDS.clear()
          TOKENS[0] = T_META
          VISION_TOKENS[0] = N_VISION
          calls, rotary_shapes, model = meta_forward(mt, config, module, towers=True)
        if calls and calls[0]["stubbed"] == "image_and_text":  # SAM 3: its rotations are one tower's
          entry = {"status": "delegates", "sub_configs": tower_delegation(model, config, calls, rotary_shapes),
                   "observed": "its forward on an image and token ids rotates in this sub-config's tower only"}
        else:
          try:
            rotations = observe_rotations(model, module, calls, rotary_shapes, rng)
          except HalfTables as e:  # V-JEPA 2: its callers observed whole, each part its own spec
            entry, golden = half_tables_entry(mt, config, module, model, calls, e)
            goldens[mt] = {"config": json.loads(config.to_json_string(use_diff=False)), "rotations": [],
                           "half_tables": golden}
            raise Observed from None
          every_block = every_block_rotates(model, calls)
          for r in rotations:
            r["every_block"] = every_block
          if not rotations:  # rotary code, but the default config's forward calls none of it (Bamba: no attention)
            entry = {"status": "no_rope", "unused_rotary_code": sorted(rotary)[:6]}
          else:
            entry = {"status": "observed", "rotations": [_summary(r) for r in rotations]}
            goldens[mt] = {"config": json.loads(config.to_json_string(use_diff=False)),
                           "rotations": rotations}
            if calls and calls[0]["stubbed"] == "vision":  # the token order the tower gave the probe image's ids
              goldens[mt]["vision_ids"] = SEEN_IDS.get(calls[0]["rotary"][0]) if calls[0]["rotary"] else None
              goldens[mt]["vision_ids"] = _reordered_ids(goldens[mt]["vision_ids"], calls)
            parts = split_parts(rotations)
            if parts is None:
              entry["family"] = classify(rotations)
            else:  # T5Gemma's encoder and decoder, DeepSeek-V3.2's attention and indexer: read one part at a time
              entry["parts"] = {name: classify(group) for name, group in parts.items()}
              for r, summary in zip(rotations, entry["rotations"], strict=True):
                summary["part"] = r["part"]
            if calls[0]["stubbed"] == "audio":  # built for real: what the whole model does with the heads key
              check_heads_in_model(model, entry.get("family"))
            if goldens[mt].get("vision_ids") is not None:
              entry["family"].update(token_order(goldens[mt]["vision_ids"], config))
              if entry["family"].get("position_axes") == "wh":  # the ids as its sections read them: (col, row)
                goldens[mt]["vision_ids"] = np.asarray(goldens[mt]["vision_ids"])[:, ::-1].tolist()
            if mt in OBSERVE_AT:  # the keys it was observed at, which a config must set
              entry["observed_at"] = OBSERVE_AT[mt]
              at = OBSERVE_AT[mt]["text_config"] if "text_config" in OBSERVE_AT[mt] else OBSERVE_AT[mt]
              entry["family"]["required"] = dict(sorted(at.items()))  # {key: the value observed at}
            for r, summary in zip(rotations, entry["rotations"], strict=True):
              summary["layers"] = r["layers"]  # HRM: the layers the config counts, all rotating as its blocks do
            if any(f.get("q_temperature") for f in entry.get("parts", {"": entry.get("family")}).values()):
              with_q_temperature(module, rotations)
            entry["status"] = "exact"
    except Observed:
      pass
    except Refused as e:
      if entry.get("status") in (None, "observed"):
        entry["status"] = "no_default_config" if isinstance(e, NoModel) else "refused"
      entry.setdefault("reason", str(e))
    except Exception as e:  # noqa: BLE001  the observation itself failed: refused, with the failure
      entry = {"status": "refused", "reason": f"its observation fails: {_failure(e)}"}
    out[mt] = entry
    if not only:
      print(f"{len(out)}/{len(types)} {mt}: {entry['status']} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
  if update:
    with open(OUT_JSON) as f:
      registry = json.load(f)
    merged = {**copy.deepcopy(registry["model_types"]), **out}
    delegate(merged)
    inherit_sub_configs(merged)
    towers_own_rotary_code(merged)
    out = {mt: merged[mt] for mt in out}
  else:
    delegate(out)
    inherit_sub_configs(out)
    towers_own_rotary_code(out)
  for mt, entry in out.items() if only else ():  # as the registry would hold them, the sub-config steps included
    print(mt, entry["status"], entry.get("reason"), entry.get("observed_via") or "",
          json.dumps(entry.get("family") or entry.get("parts"))[:600])
  stats = {}
  for e in out.values():
    stats[e["status"]] = stats.get(e["status"], 0) + 1
  print(stats, f"{time.time() - t0:.0f} s", file=sys.stderr)
  if update:
    report_changes(registry, {**registry, "model_types": merged})
    registry["model_types"] = merged
    with open(OUT_JSON, "w") as f:
      json.dump(registry, f, indent=0, sort_keys=True, default=_json_default)
      f.write("\n")
    write_goldens(goldens, out, keep=True)
    return
  if only:
    return
  registry = {"made_by": "scripts/make_hf_rope_registry.py",
              "versions": {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]},
              "model_types": out,
              # transformers renames these layer types in every config it loads (remap_legacy_layer_types)
              "legacy_layer_types": dict(transformers.configuration_utils._LEGACY_LAYER_TYPE_REMAP)}
  diffusers_version, classes = diffusers_entries()
  if classes is not None:
    registry["versions"]["diffusers"] = diffusers_version
    registry["diffusers"] = classes
  if os.path.exists(OUT_JSON):
    with open(OUT_JSON) as f:
      old = json.load(f)
    report_changes(old, registry)
    report_diffusers(old.get("diffusers", {}), registry.get("diffusers", {}))
  with open(OUT_JSON, "w") as f:
    json.dump(registry, f, indent=0, sort_keys=True, default=_json_default)
    f.write("\n")
  write_goldens(goldens, out)
  print(f"wrote {OUT_JSON} ({os.path.getsize(OUT_JSON) // 1024} KiB) and {OUT_NPZ} "
        f"({os.path.getsize(OUT_NPZ) // 1024} KiB)", file=sys.stderr)


def _json_default(x):
  if isinstance(x, (np.integer,)):
    return int(x)
  if isinstance(x, (np.floating,)):
    return float(x)
  raise TypeError(type(x).__name__)


def diffusers_entries():
  """Every diffusers transformer class (a diffusers config.json names it in `_class_name`): those whose forward
  takes Flux's img_ids/txt_ids observed (scripts/diffusers_rope_observer.py; their goldens written to
  DIFFUSERS_NPZ), every other one refused by name: their forwards need latents, timesteps and text states per
  model, and their rotary modules take position ids of their own (video grids, centred ids) not probed yet."""
  try:
    import diffusers
    import diffusers.models.transformers as package
  except ImportError:
    return None, None
  import pkgutil

  import diffusers_rope_observer as observer

  classes = {}
  for info in pkgutil.iter_modules(package.__path__):
    module = importlib.import_module(f"{package.__name__}.{info.name}")
    for name, cls in vars(module).items():
      if inspect.isclass(cls) and issubclass(cls, diffusers.ModelMixin) and cls.__module__ == module.__name__:
        rotary = sorted(n for n in vars(module) if CANDIDATE.search(n))
        classes[name] = {"status": "refused", "module": info.name,
                         "reason": "diffusers transformers are not observed yet (their forwards need latents, "
                                   "timesteps and text states; their rotary modules take ids of their own)",
                         "rotary_names": rotary[:6]}
        given = [p for p in inspect.signature(cls.forward).parameters if CANDIDATE.search(p)]
        if given:  # CogVideoX, HunyuanDiT, Lumina-Next, Stable Audio: the pipeline makes the rotary tensors
          classes[name]["reason"] = (f"its forward takes rotary inputs ({', '.join(given)}) from its pipeline, "
                                     "which this registry does not observe")
          classes[name]["rotary_inputs"] = given
        elif not rotary:  # as for transformers: no rotary candidate in its module, none passed in
          classes[name].update(status="no_rope", reason="its module has no rotary code (no function or class "
                                                        "named rot/rope) and its forward takes no rotary tensors: "
                                                        "it has no RoPE")
  goldens = {}
  ids = set(observer.ids_classes(classes))
  for name in sorted(classes):
    if name in ids:
      entry, golden = observer.observe(name, SEED)
      if entry["status"] == "refused":  # the Flux-style observation was tried and failed: say how
        entry["reason"] = f"its forward takes img_ids/txt_ids, but {entry['reason']}"
    elif classes[name]["status"] == "refused" and (
        not observer.requires(name, classes[name].get("rotary_inputs", [])) or
        "observe" in observer.RECIPES.get(name, {})):  # (SANA-WM's refiner: its observation builds them as its
      # pipeline does)
      # a latent video through its own forward (rotary inputs it can go without left out: CogView 4 then
      # makes its own; one that then rotates nothing takes them from its pipeline, refused as before)
      entry, golden = observer.observe_grid(name, SEED)
      if classes[name].get("rotary_inputs"):
        if entry["status"] == "no_rope":
          continue
        recipe = observer.RECIPES.get(name, {})  # CogVideoX, HunyuanDiT: given as their pipelines make them
        made = bool(observer.CROPS & set(recipe)) or "observe" in recipe
        entry["rotary_inputs_from_pipeline" if made else "rotary_inputs_left_out"] = classes[name]["rotary_inputs"]
    else:
      continue
    classes[name] = {"module": classes[name]["module"], "rotary_names": classes[name]["rotary_names"], **entry}
    if golden is not None:
      goldens[name] = golden
    print(f"diffusers {name}: {entry['status']} {entry.get('reason', '')}", file=sys.stderr, flush=True)
  arrays = {f"{name}/{k}": np.asarray(v) for name, g in goldens.items() for k, v in g.items() if k != "config"}
  arrays.update(observer.pipeline_ids())
  np.savez_compressed(DIFFUSERS_NPZ, **arrays)
  with open(DIFFUSERS_NPZ.replace(".npz", "_configs.json"), "w") as f:
    json.dump({name: g["config"] for name, g in sorted(goldens.items())}, f, indent=0, sort_keys=True)
    f.write("\n")
  return diffusers.__version__, classes


def report_diffusers(before, after):
  """What a re-run changed among the diffusers classes."""
  for name in sorted(set(before) | set(after)):
    b, a = before.get(name), after.get(name)
    if b is None or a is None or b.get("status") != a.get("status") or b.get("family") != a.get("family"):
      print(f"  diffusers {name}: {None if b is None else b.get('status')} -> {None if a is None else a.get('status')} "
            f"{(a or {}).get('reason', '')}")


def delegate(out):
  """A model type whose own code rotates nothing but whose config holds a sub-config of a rotating type (Llava's
  text_config: Llama) reads that sub-config: its text_config, else its one rotating sub-config where that one is
  read exactly (ColQwen2's vlm_config); with several and no text_config, it is refused naming the first. Delegation
  runs to a fixed point first (ColPali's vlm_config is PaliGemma, which delegates to Gemma), then the refusals:
  the outcome does not depend on the order of the types."""
  subs_of = {}
  for mt, entry in out.items():
    if entry["status"] != "no_rope":
      continue
    try:
      config = CONFIG_MAPPING[mt]()
    except Exception:  # noqa: BLE001
      config = None
    keys = sorted(getattr(config, "sub_configs", {}) or {}, key=lambda k: k != "text_config")  # the text model first
    subs_of[mt] = [(k, getattr(getattr(config, k, None), "model_type", None)) for k in keys]

  def rotating(mt):  # the sub-config types of mt that rotate, or may (not those whose rotary code no layer calls)
    return {k: t for k, t in subs_of[mt] if t in out and out[t]["status"] not in ("no_rope", "no_default_config")
            and not out[t].get("unused_rotary_code")}

  changed = True
  while changed:
    changed = False
    for mt in subs_of:
      entry, subs = out[mt], rotating(mt)
      if entry["status"] != "no_rope":
        continue
      if "text_config" in subs:
        entry.update(status="delegates", sub_configs={"text_config": subs["text_config"]})
      elif not entry.get("unused_rotary_code") and len(subs) == 1 and \
          out[next(iter(subs.values()))]["status"] in ("exact", "delegates"):
        # its one rotating part, a sub-config read exactly (ColQwen2's vlm_config, CHMv2's dinov3 backbone_config)
        entry.update(status="delegates", sub_configs=dict(subs))
      else:
        continue
      changed = True
  for mt in subs_of:
    entry, subs = out[mt], rotating(mt)
    if entry["status"] != "no_rope":
      continue
    if entry.get("unused_rotary_code") and subs and all(model_type_to_module_name(t) == model_type_to_module_name(mt)
                                                         for t in subs.values()):
      # the rotary code its token-id forward leaves unused is its rotating sub-models' own (Nemotron 3.5
      # Transcribe's audio towers live in its modeling module): its RoPE is in them, not in a text model
      parts = ", ".join(f"{k} ({t})" for k, t in subs.items())
      entry.update(status="refused", reason=f"its forward on token ids rotates nothing; its RoPE is in its {parts}, "
                                            "towers of its own modeling code: read from_hf_config(config[key]) for "
                                            "each part")
    elif entry.get("unused_rotary_code"):
      entry.update(status="refused", reason="its modeling code rotates (" + ", ".join(entry["unused_rotary_code"]) +
                   "), but no layer of its default config calls it: the layers other settings add are not observed")
    elif subs:
      key, sub_type = next(iter(subs.items()))
      entry.update(status="refused", reason=f"its RoPE is in its {key} ({sub_type}), not a text model: read "
                                             f"from_hf_config(config[{key!r}]) for that part")


def _runs_only_inside(sub_type, composite, out):
  """Whether a sub-config type's own forward failed for want of what its composite gives it (BLT's local encoder
  takes the patch ids and states BltModel builds), its model class defined in its composite's modeling module: the
  composite's run is then that class's run."""
  return out[sub_type]["reason"].startswith("its forward fails") and \
      model_type_to_module_name(sub_type) == model_type_to_module_name(composite)


def towers_own_rotary_code(out):
  """A composite refused because no layer of its default config calls its module's rotary code, where that code is
  a tower's (a sub-config of the same modeling module, observed exactly, whose layers call those
  functions: Inkling 2, GLM-5-Next, whose text models rotate nothing in transformers' code): still refused, with that
  reason, naming the sub-config to read (NeMo SpeechLM: its audio encoder's)."""
  for mt, entry in out.items():
    unused = set(entry.get("unused_rotary_code") or ())
    if entry["status"] != "refused" or not unused:
      continue
    try:
      config = CONFIG_MAPPING[mt]()
    except Exception:  # noqa: BLE001
      continue
    for key in getattr(config, "sub_configs", {}) or {}:
      sub_type = getattr(getattr(config, key, None), "model_type", None)
      sub = out.get(sub_type) or {}
      called = {r.get("fn") for r in sub.get("rotations", [])}
      if sub.get("status") == "exact" and called and called <= unused and \
          modeling_module(sub_type) is modeling_module(mt):
        entry["reason"] = (f"its rotary code ({', '.join(sorted(called))}) is its {key}'s ({sub_type}, observed "
                           f"there); its other layers call none of it: read from_hf_config(config[{key!r}]) for that "
                           "part")
        break


def inherit_sub_configs(out):
  """A sub-config type with no model class of its own (Ernie 4.5-VL's text model) was observed inside its
  composite, whose family reads that sub-config (`sub`): the sub-config type, read alone, is that family without the
  step into the sub-config, and records the composite it was observed through (`observed_via`: [type, key], whose
  goldens the test checks it against). Where several composites or parts disagree, it stays refused."""
  found = {}
  for mt, entry in out.items():
    if entry["status"] != "exact" or "rotations" not in entry:
      continue
    try:
      config = CONFIG_MAPPING[mt](**OBSERVE_AT.get(mt, {}))
    except Exception:  # noqa: BLE001
      continue
    for part, fam in (entry["parts"].items() if "parts" in entry else [(None, entry["family"])]):
      sub_type = getattr(getattr(config, fam.get("sub") or "", None), "model_type", None)
      if sub_type in out and out[sub_type]["status"] == "refused" and (
          out[sub_type]["reason"] == "no transformers model class to run" or _runs_only_inside(sub_type, mt, out)):
        found.setdefault(sub_type, []).append(({k: v for k, v in fam.items() if k != "sub"}, [mt, fam["sub"], part]))
  for sub_type, seen in found.items():
    if len({json.dumps(f, sort_keys=True) for f, _ in seen}) == 1:
      out[sub_type] = {"status": "exact", "family": seen[0][0], "observed_via": seen[0][1]}


def report_changes(old, new):
  """What a re-run changed: new and removed types, and types whose status or observation changed."""
  before, after = old.get("model_types", {}), new["model_types"]
  print(f"registry: transformers {old.get('versions', {}).get('transformers')} -> {new['versions']['transformers']}")
  for mt in sorted(set(after) - set(before)):
    print(f"  new   {mt}: {after[mt]['status']} {after[mt].get('reason', '')}")
  for mt in sorted(set(before) - set(after)):
    print(f"  gone  {mt}")
  for mt in sorted(set(before) & set(after)):
    if json.dumps(before[mt], sort_keys=True, default=_json_default) != \
        json.dumps(after[mt], sort_keys=True, default=_json_default):
      keys = sorted(k for k in set(before[mt]) | set(after[mt]) if before[mt].get(k) != after[mt].get(k))
      print(f"  changed {mt}: {before[mt]['status']} -> {after[mt]['status']} ({', '.join(keys)}) "
            f"{after[mt].get('reason', '')}")


def write_goldens(goldens, out, keep=False):
  """Per observed rotation: positions, q and the model's rotated q (float64), and the default config.json. With
  `keep`, the other types' goldens already in the files stay (--update)."""
  arrays, configs = {}, {}
  if keep:
    with np.load(OUT_NPZ) as old:
      arrays = {k: old[k] for k in old.files if k.split("/")[0] not in out}
    with open(OUT_NPZ.replace(".npz", "_configs.json")) as f:
      configs = {k: v for k, v in json.load(f).items() if k.split("/")[0] not in out}
  for mt, g in sorted(goldens.items()):
    configs[mt] = g["config"]
    for k, v in g.get("pixel", {}).items():  # a pixel tower's golden apply: x, out, positions
      arrays[f"{mt}/pixel/{k}"] = np.asarray(v)
    for part, arrs in g.get("half_tables", {}).items():  # V-JEPA 2: each part's attention, observed whole
      for k, v in arrs.items():
        arrays[f"{mt}/{part}/half_tables/{k}"] = np.asarray(v)
    if g.get("vision_ids") is not None:  # [tokens, axes] for VISION_GRID
      arrays[f"{mt}/vision_ids"] = np.asarray(g["vision_ids"], np.int64)
    for i, r in enumerate(g["rotations"]):
      arrays[f"{mt}/{i}/positions"] = np.asarray(r["positions"], np.int64)
      arrays[f"{mt}/{i}/q"] = np.asarray(r["q"], np.float32)
      arrays[f"{mt}/{i}/q_out"] = np.asarray(r["q_out"], np.float32)  # float64 result, rounded once
      if r.get("q_out_perturbed") is not None:
        arrays[f"{mt}/{i}/q_out_perturbed"] = np.asarray(r["q_out_perturbed"], np.float32)
        configs[f"{mt}/{i}/perturbed"] = r["perturbed_config"]
  np.savez_compressed(OUT_NPZ, **arrays)
  with open(OUT_NPZ.replace(".npz", "_configs.json"), "w") as f:
    json.dump(configs, f, indent=0, sort_keys=True, default=_json_default)
    f.write("\n")


if __name__ == "__main__":
  main()
