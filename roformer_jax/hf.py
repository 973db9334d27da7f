"""HF transformers RoFormer checkpoints in and out, without torch.

A checkpoint is a directory with `config.json` (a transformers `RoFormerConfig`) and
`model.safetensors` (or a sharded `model.safetensors.index.json`), as written by
`save_pretrained`. Tensors are read and written with `safetensors`' NumPy API.

- `from_pretrained(path)` returns `RoFormerForMaskedLM` when the checkpoint has the MLM head
  (`cls.predictions.*`), `RoFormerForSequenceClassification` when it has `classifier.dense`
  and `classifier.out_proj`, else `RoFormerModel`. Every tensor must be used and every
  parameter filled, with matching shapes; anything else raises `CheckpointError` naming the
  keys.
- `save_pretrained(model, path)` writes the same layout back, so transformers'
  `from_pretrained` opens it with no missing or unexpected keys.

Layout (HF `nn.Linear.weight` is [out, in]; ours are [in, out] kernels):

  [roformer.]embeddings.word_embeddings.weight           embeddings.word.embedding     [V, E]
  [roformer.]embeddings.token_type_embeddings.weight     embeddings.token_type.embedding
  [roformer.]embeddings.LayerNorm.{weight,bias}          embeddings.norm.{scale,bias}
  [roformer.]embeddings_project.{weight,bias}            embeddings.project (E != D only)
  [roformer.]encoder.embed_positions.weight              (fixed sinusoidal table; checked, not stored)
  [roformer.]encoder.layer.i.attention.self.query        layers[i].attention.query  [D, N, H]
                                       .self.key / .value              .key / .value
                                       .output.dense                   .out        [N, H, D]
                                       .output.LayerNorm        layers[i].attention_norm
  [roformer.]encoder.layer.i.intermediate.dense          layers[i].mlp_in
  [roformer.]encoder.layer.i.output.dense / .LayerNorm   layers[i].mlp_out / .mlp_norm
  cls.predictions.transform.dense / .LayerNorm           mlm.transform / mlm.norm
  cls.predictions.bias (tied) or .decoder.bias (untied)  mlm.bias
  cls.predictions.decoder.weight (untied only)           mlm.decoder
  classifier.dense / classifier.out_proj                 dense / out_proj

Task models prefix the encoder's keys with `roformer.`; a bare `RoFormerModel` has none.

Positions: HF rotates slot t by position t (0..T-1). Our `encode` counts real tokens by
default, which is the same rotation for right padding and, RoPE being relative, the same
attention for the real tokens of a left-padded row. Pass `positions=arange(T)` to match HF
on padding slots too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers numpy's bfloat16, so BF16 safetensors load)
import numpy as np
from flax import nnx

from roformer_jax.models import ModelConfig, RoFormerForMaskedLM, RoFormerForSequenceClassification, RoFormerModel
from roformer_jax.positional import RotaryConfig, config_key

__all__ = ["CheckpointError", "config_from_hf", "config_to_hf", "from_pretrained", "representation_problems",
           "rotary_problems", "save_pretrained", "sinusoidal_table", "state_dict"]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
HEADS = ("auto", "encoder", "mlm", "classifier")
ARCHITECTURES = {RoFormerModel: "RoFormerModel", RoFormerForMaskedLM: "RoFormerForMaskedLM",
                 RoFormerForSequenceClassification: "RoFormerForSequenceClassification"}
HF_THETA = 10000.0  # hard-coded in HF's RoFormerSinusoidalPositionalEmbedding.create_weight
# HF hidden_act names we run, and the name of the same function here.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "relu": "relu",
                  "silu": "silu", "swish": "silu"}
# RoFormerConfig defaults (transformers 5.x), for configs that leave a field out.
HF_DEFAULTS = dict(vocab_size=50000, embedding_size=None, hidden_size=768, num_hidden_layers=12,
                   num_attention_heads=12, intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                   attention_probs_dropout_prob=0.1, max_position_embeddings=1536, type_vocab_size=2,
                   initializer_range=0.02, layer_norm_eps=1e-12, pad_token_id=0, rotary_value=False,
                   is_decoder=False, add_cross_attention=False, tie_word_embeddings=True)
_MAX_LISTED = 20


class CheckpointError(ValueError):
  """A checkpoint (or model) that cannot be mapped between HF RoFormer and roformer_jax."""


def _listing(keys) -> str:
  keys = sorted(keys, key=str)
  more = f" ... and {len(keys) - _MAX_LISTED} more" if len(keys) > _MAX_LISTED else ""
  return ", ".join(map(str, keys[:_MAX_LISTED])) + more


# --------------------------------------------------------------------------------------
# Config.
# --------------------------------------------------------------------------------------


def config_from_hf(hf: Mapping[str, Any], *, dtype=None, param_dtype=None) -> ModelConfig:
  """A transformers RoFormerConfig dict (config.json) -> `ModelConfig`.

  Args:
    hf: the parsed config.json.
    dtype: compute dtype name (e.g. "bfloat16"); None = float32.
    param_dtype: parameter dtype name; None = float32.
  """
  model_type = hf.get("model_type")
  if model_type != "roformer":
    raise CheckpointError(f"config.json has model_type={model_type!r}; only 'roformer' checkpoints are supported.")
  c = {**HF_DEFAULTS, **{k: v for k, v in hf.items() if k in HF_DEFAULTS}}
  if c["is_decoder"] or c["add_cross_attention"]:
    raise CheckpointError("config.json has is_decoder/add_cross_attention set (a RoFormerForCausalLM or a "
                          "decoder); only the bidirectional encoder and its MLM/classification heads are supported.")
  act = c["hidden_act"]
  if not isinstance(act, str) or act not in HF_ACTIVATIONS:
    raise CheckpointError(f"hidden_act={act!r} is not supported; expected one of {sorted(HF_ACTIVATIONS)}.")
  d, n = c["hidden_size"], c["num_attention_heads"]
  if not isinstance(d, int) or not isinstance(n, int) or n <= 0 or d % n:
    raise CheckpointError(f"hidden_size={d} must be a multiple of num_attention_heads={n} (HF RoFormer's head "
                          "size is hidden_size // num_attention_heads).")
  e = c["embedding_size"]
  try:
    return ModelConfig(
        vocab_size=c["vocab_size"], d_model=d, num_layers=c["num_hidden_layers"], num_heads=n,
        d_ff=c["intermediate_size"], activation=HF_ACTIVATIONS[act],
        embedding_size=None if e is None or e == d else e, type_vocab_size=c["type_vocab_size"],
        max_position=c["max_position_embeddings"], position="rope", rope_theta=HF_THETA,
        rope_layout="interleaved", rotary_value=bool(c["rotary_value"]), norm="post",
        layer_norm_eps=float(c["layer_norm_eps"]), dropout=float(c["hidden_dropout_prob"]),
        attention_dropout=float(c["attention_probs_dropout_prob"]), attention="softmax",
        tie_embeddings=bool(c["tie_word_embeddings"]), init_std=float(c["initializer_range"]),
        pad_id=0 if c["pad_token_id"] is None else int(c["pad_token_id"]),
        dtype=str(jnp.dtype(dtype or "float32")), param_dtype=str(jnp.dtype(param_dtype or "float32")))
  except (TypeError, ValueError) as err:
    raise CheckpointError(f"config.json cannot be used: {err}") from err


# What HF RoFormer can represent of the RoPE spec (positional.RotaryConfig), field by field:
# each test takes (value, head size) and returns why HF cannot write it, or None. An
# allow-list: a spec field missing here is refused by name whenever it is off its default,
# so a new RoPE setting is never exported silently wrong.
HF_ROTARY = {
    "theta": lambda v, h: None if float(v) == HF_THETA else f"HF RoFormer hard-codes {HF_THETA:g}",
    "layout": lambda v, h: None if v == "interleaved" else "HF RoFormer rotates interleaved pairs",
    "rotary_dim": lambda v, h: None if v is None or v == h else "HF RoFormer rotates the whole head",
    "scaling": lambda v, h: None if v is None else "HF RoFormer has no context scaling",
    "exact": lambda v, h: None,  # the precision of the phase, not the rotation HF computes
}


def rotary_problems(rotary: RotaryConfig, head_size: int) -> list[str]:
  """Why HF RoFormer cannot represent the RoPE spec `rotary` (empty if it can), each reason
  naming the field by its config key (`positional.config_key`)."""
  problems = []
  for field in dataclasses.fields(rotary):
    value = getattr(rotary, field.name)
    key = config_key(field.name)
    shown = rotary.scaling_dict if field.name == "scaling" else value
    test = HF_ROTARY.get(field.name)
    if test is None:
      if value != field.default:
        problems.append(f"{key}={shown!r} (HF RoFormer has no such RoPE setting)")
      continue
    why = test(value, head_size)
    if why:
      problems.append(f"{key}={shown!r} ({why})")
  return problems


def representation_problems(cfg: ModelConfig) -> list[str]:
  """Why HF RoFormer cannot represent `cfg` (empty if it can), one reason per field, each
  naming the `ModelConfig` field and its value: what `save_pretrained` refuses."""
  problems = []
  if cfg.position != "rope":
    problems.append(f"position={cfg.position!r} (HF RoFormer always uses RoPE)")
  else:
    problems += rotary_problems(cfg.rotary, cfg.head_size)
  if cfg.layer_settings is not None:
    problems.append(f"layer_settings={cfg.plain_layer_settings()!r} (HF RoFormer's layers are all alike: one RoPE, "
                    "no window, no temperature)")
  if cfg.norm != "post":
    problems.append(f"norm={cfg.norm!r} (HF RoFormer is post-LN)")
  if cfg.attention != "softmax":
    problems.append(f"attention={cfg.attention!r} (HF RoFormer has softmax attention only)")
  if cfg.activation not in HF_ACTIVATIONS.values():
    problems.append(f"activation={cfg.activation!r}")
  if cfg.d_model % cfg.num_heads or cfg.head_size != cfg.d_model // cfg.num_heads:
    problems.append(f"head_dim={cfg.head_size} with d_model={cfg.d_model}, num_heads={cfg.num_heads} "
                    "(HF's head size is hidden_size // num_attention_heads)")
  if cfg.type_vocab_size < 1:
    problems.append("type_vocab_size=0 (HF RoFormer always has token type embeddings)")
  if not cfg.use_bias:
    problems.append("use_bias=False (HF RoFormer's linear layers have biases)")
  if cfg.scale_embeddings:
    problems.append("scale_embeddings=True (HF RoFormer does not scale embeddings)")
  return problems


def _check_representable(cfg: ModelConfig) -> None:
  problems = representation_problems(cfg)
  if problems:
    raise CheckpointError("this model cannot be written as an HF RoFormer checkpoint: " + "; ".join(problems) + ".")


def config_to_hf(cfg: ModelConfig, *, architecture: str = "RoFormerModel", num_labels: int | None = None,
                 label_names: Sequence[str] | None = None) -> dict:
  """`ModelConfig` -> a transformers RoFormerConfig dict; raises if HF cannot express it.

  A classifier's `id2label` / `label2id` name its classes `label_names` (one per label, distinct),
  else HF's default `LABEL_<i>`."""
  _check_representable(cfg)
  out = {
      "architectures": [architecture],
      "model_type": "roformer",
      "vocab_size": cfg.vocab_size,
      "embedding_size": cfg.embed_size,
      "hidden_size": cfg.d_model,
      "num_hidden_layers": cfg.num_layers,
      "num_attention_heads": cfg.num_heads,
      "intermediate_size": cfg.d_ff,
      "hidden_act": cfg.activation,
      "hidden_dropout_prob": cfg.dropout,
      "attention_probs_dropout_prob": cfg.attention_dropout,
      "max_position_embeddings": cfg.max_position,
      "type_vocab_size": cfg.type_vocab_size,
      "initializer_range": cfg.init_std,
      "layer_norm_eps": cfg.layer_norm_eps,
      "pad_token_id": cfg.pad_id,
      "bos_token_id": None,
      "eos_token_id": None,
      "rotary_value": cfg.rotary_value,
      "use_cache": True,
      "is_decoder": False,
      "add_cross_attention": False,
      "tie_word_embeddings": cfg.tie_embeddings,
      "dtype": "float32",
  }
  if num_labels is not None:
    names = [f"LABEL_{i}" for i in range(num_labels)] if label_names is None else [str(n) for n in label_names]
    if len(names) != num_labels or len(set(names)) != num_labels:
      raise CheckpointError(f"label_names={list(label_names or ())} must be {num_labels} distinct names, one per label.")
    out["id2label"] = {str(i): name for i, name in enumerate(names)}
    out["label2id"] = {name: i for i, name in enumerate(names)}
  return out


# --------------------------------------------------------------------------------------
# The key map.
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Entry:
  """One checkpoint tensor <-> one parameter.

  kind: "same" (identical layout), "flat" (HF keeps it 1-D: q/k/v biases [N*H] vs [N, H]),
  "kernel" (HF [out, in] vs our [in..., out...] with `n_in` leading input axes).
  """
  key: str
  path: tuple
  kind: str = "same"
  n_in: int = 1


def _linear(key: str, path: tuple, n_in: int = 1, flat_bias: bool = False) -> list[_Entry]:
  return [_Entry(f"{key}.weight", path + ("kernel",), "kernel", n_in),
          _Entry(f"{key}.bias", path + ("bias",), "flat" if flat_bias else "same")]


def _norm(key: str, path: tuple) -> list[_Entry]:
  return [_Entry(f"{key}.weight", path + ("scale",)), _Entry(f"{key}.bias", path + ("bias",))]


def _encoder_entries(cfg: ModelConfig, prefix: str, root: tuple) -> list[_Entry]:
  emb = root + ("embeddings",)
  out = [_Entry(f"{prefix}embeddings.word_embeddings.weight", emb + ("word", "embedding"))]
  if cfg.type_vocab_size:
    out.append(_Entry(f"{prefix}embeddings.token_type_embeddings.weight", emb + ("token_type", "embedding")))
  out += _norm(f"{prefix}embeddings.LayerNorm", emb + ("norm",))
  if cfg.embed_size != cfg.d_model:
    out += _linear(f"{prefix}embeddings_project", emb + ("project",))
  for i in range(cfg.num_layers):
    k, p = f"{prefix}encoder.layer.{i}.", root + ("layers", i)
    for name in ("query", "key", "value"):
      out += _linear(f"{k}attention.self.{name}", p + ("attention", name), flat_bias=True)
    out += _linear(f"{k}attention.output.dense", p + ("attention", "out"), n_in=2)
    out += _norm(f"{k}attention.output.LayerNorm", p + ("attention_norm",))
    out += _linear(f"{k}intermediate.dense", p + ("mlp_in",))
    out += _linear(f"{k}output.dense", p + ("mlp_out",))
    out += _norm(f"{k}output.LayerNorm", p + ("mlp_norm",))
  return out


def _mlm_entries(cfg: ModelConfig) -> list[_Entry]:
  out = _linear("cls.predictions.transform.dense", ("mlm", "transform"))
  out += _norm("cls.predictions.transform.LayerNorm", ("mlm", "norm"))
  if cfg.tie_embeddings:
    out.append(_Entry("cls.predictions.bias", ("mlm", "bias")))
  else:  # HF's untied decoder carries the live bias; cls.predictions.bias is then unused
    out.append(_Entry("cls.predictions.decoder.weight", ("mlm", "decoder", "kernel"), "kernel"))
    out.append(_Entry("cls.predictions.decoder.bias", ("mlm", "bias")))
  return out


def _classifier_entries() -> list[_Entry]:
  return _linear("classifier.dense", ("dense",)) + _linear("classifier.out_proj", ("out_proj",))


def _entries(cfg: ModelConfig, head: str, prefix: str) -> list[_Entry]:
  root = () if head == "encoder" else ("roformer",)
  out = _encoder_entries(cfg, prefix, root)
  if head == "mlm":
    out += _mlm_entries(cfg)
  elif head == "classifier":
    out += _classifier_entries()
  return out


def _hf_shape(entry: _Entry, shape: tuple) -> tuple:
  if entry.kind == "kernel":
    return (math.prod(shape[entry.n_in:]), math.prod(shape[:entry.n_in]))
  if entry.kind == "flat":
    return (math.prod(shape),)
  return tuple(shape)


def _to_ours(arr: np.ndarray, entry: _Entry, shape: tuple) -> np.ndarray:
  if entry.kind == "kernel":
    return arr.T.reshape(shape)
  return arr.reshape(shape)


def _to_hf(arr: np.ndarray, entry: _Entry) -> np.ndarray:
  if entry.kind == "kernel":
    return arr.reshape(math.prod(arr.shape[:entry.n_in]), -1).T
  if entry.kind == "flat":
    return arr.reshape(-1)
  return arr


def sinusoidal_table(num_positions: int, dim: int) -> np.ndarray:
  """HF's `RoFormerSinusoidalPositionalEmbedding.create_weight`, bit for bit: float32[P, dim],
  sin(p * w_j) in the first half, cos in the second, w_j = 10000^(-2j/dim)."""
  j = np.arange(dim)
  enc = np.arange(num_positions, dtype=np.float64)[:, None] / np.power(10000, 2 * (j // 2) / dim)[None, :]
  sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
  out = np.empty((num_positions, dim), np.float32)
  out[:, :sentinel] = np.sin(enc[:, 0::2])
  out[:, sentinel:] = np.cos(enc[:, 1::2])
  return out


# --------------------------------------------------------------------------------------
# Loading.
# --------------------------------------------------------------------------------------


def _weight_files(path: str) -> list[str]:
  single = os.path.join(path, WEIGHTS_NAME)
  if os.path.isfile(single):
    return [single]
  index = os.path.join(path, WEIGHTS_INDEX_NAME)
  if os.path.isfile(index):
    with open(index) as f:
      weight_map = json.load(f)["weight_map"]
    return [os.path.join(path, name) for name in sorted(set(weight_map.values()))]
  bins = sorted(name for name in os.listdir(path) if name.endswith((".bin", ".pt", ".pth", ".ckpt")))
  if bins:
    raise CheckpointError(
        f"{path} has only PyTorch pickle weights ({', '.join(bins)}), which cannot be read without torch. "
        "Convert them once with transformers (torch installed):\n"
        f"  python -c \"from transformers import AutoModel as M; M.from_pretrained('{path}')"
        f".save_pretrained('{path}', safe_serialization=True)\"\n"
        "(use the checkpoint's class, e.g. RoFormerForMaskedLM, to keep its head), which writes model.safetensors.")
  raise CheckpointError(f"{path} has no {WEIGHTS_NAME} (or {WEIGHTS_INDEX_NAME}).")


def _read_tensors(files: list[str]) -> dict[str, np.ndarray]:
  from safetensors import safe_open  # imported here: only checkpoint I/O needs it
  tensors = {}
  for file in files:
    with safe_open(file, framework="np") as f:
      for key in f.keys():
        if key in tensors:
          raise CheckpointError(f"tensor {key!r} appears in more than one shard ({file}).")
        tensors[key] = f.get_tensor(key)
  return tensors


def _detect_head(keys, prefix: str) -> str:
  heads = []
  if any(k.startswith("cls.predictions.") for k in keys):
    heads.append("mlm")
  if any(k.startswith(("classifier.dense.", "classifier.out_proj.")) for k in keys):
    heads.append("classifier")
  if not prefix:
    return "encoder"
  if len(heads) > 1:
    raise CheckpointError(f"the checkpoint has both an MLM and a classification head; pass head= one of {HEADS[1:]}.")
  return heads[0] if heads else "encoder"


def _num_labels(hf: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> int:
  w = tensors.get("classifier.out_proj.weight")
  if w is None or w.ndim != 2:
    raise CheckpointError("classifier.out_proj.weight is missing or not 2-D; cannot tell num_labels.")
  n = int(w.shape[0])
  id2label = hf.get("id2label")
  if id2label is not None and len(id2label) != n:
    raise CheckpointError(f"config.json has {len(id2label)} labels (id2label) but classifier.out_proj.weight "
                          f"has {n} rows.")
  return n


def _abstract(cls, cfg: ModelConfig, *args):
  """(graphdef, abstract params, concrete non-param state) without drawing random weights.

  The rng state (dropout keys) comes from a jitted build whose unused parameter
  initialisers XLA drops.
  """
  make = lambda: cls(cfg, *args, rngs=nnx.Rngs(0))
  # nnx.split's stub returns a variadic tuple: two filters give (graphdef, params, rest).
  graphdef, params, _ = cast(tuple[Any, Any, Any], nnx.split(nnx.eval_shape(make), nnx.Param, ...))
  rest = jax.jit(lambda: cast(tuple[Any, Any, Any], nnx.split(make(), nnx.Param, ...))[2])()
  return graphdef, params, rest


def _as_float(key: str, arr: np.ndarray) -> np.ndarray:
  if not np.issubdtype(arr.dtype, np.floating) and arr.dtype != ml_dtypes.bfloat16:
    raise CheckpointError(f"tensor {key!r} has dtype {arr.dtype}; expected a floating-point tensor.")
  return arr


def _pop_tied(tensors: dict, key: str, expected: np.ndarray, what: str) -> None:
  """Consumes a tensor HF ties to another one; it must hold the same values."""
  arr = tensors.pop(key, None)
  if arr is None:
    return
  arr = _as_float(key, arr)
  if arr.shape != expected.shape:
    raise CheckpointError(f"tensor {key!r} has shape {tuple(arr.shape)}; expected {tuple(expected.shape)} ({what}).")
  if not np.array_equal(np.asarray(arr, np.float32), np.asarray(expected, np.float32)):
    raise CheckpointError(f"tensor {key!r} differs from {what}, but the config ties them "
                          "(tie_word_embeddings=true); set tie_word_embeddings=false if the head is untied.")


def from_pretrained(path: str | os.PathLike, *, dtype=None, param_dtype=None, head: str = "auto"):
  """Loads a transformers RoFormer checkpoint directory (config.json + safetensors), no torch.

  Args:
    path: the directory `save_pretrained` wrote.
    dtype: compute dtype of the returned model ("float32" default, or "bfloat16").
    param_dtype: dtype the parameters are stored in (default float32; checkpoint tensors of any
      float dtype are cast to it).
    head: "auto" (from the tensors), "encoder" (load only the encoder and ignore every tensor
      outside it, e.g. to reuse a task checkpoint's encoder), "mlm" or "classifier".

  Returns:
    `RoFormerForMaskedLM`, `RoFormerForSequenceClassification` or `RoFormerModel`; all have
    `.encode(input_ids, *, attention_mask=None, token_type_ids=None)` -> [B, T, D].

  Raises:
    CheckpointError: unsupported config, .bin-only directory, missing/unexpected tensors,
      wrong shapes or dtypes.
  """
  path = os.fspath(path)
  if head not in HEADS:
    raise ValueError(f"head={head!r}; expected one of {HEADS}.")
  if not os.path.isdir(path):
    raise CheckpointError(f"{path} is not a directory.")
  config_file = os.path.join(path, CONFIG_NAME)
  if not os.path.isfile(config_file):
    raise CheckpointError(f"{path} has no {CONFIG_NAME}.")
  with open(config_file) as f:
    hf = json.load(f)
  cfg = config_from_hf(hf, dtype=dtype, param_dtype=param_dtype)
  tensors = _read_tensors(_weight_files(path))

  prefix = "roformer." if any(k.startswith("roformer.") for k in tensors) else ""
  detected = _detect_head(tensors, prefix)
  if head == "auto":
    head = detected
  elif head != "encoder" and head != detected:
    raise CheckpointError(f"head={head!r} was asked for, but the checkpoint's tensors hold "
                          f"{'no head' if detected == 'encoder' else 'the ' + detected + ' head'}.")
  if head == "encoder" and prefix:
    tensors = {k: v for k, v in tensors.items() if k.startswith(prefix)}

  cls: type[nnx.Module]
  args: tuple[int, ...]
  if head == "mlm":
    cls, args = RoFormerForMaskedLM, ()
  elif head == "classifier":
    cls, args = RoFormerForSequenceClassification, (_num_labels(hf, tensors),)
  else:
    cls, args = RoFormerModel, ()
  graphdef, params, rest = _abstract(cls, cfg, *args)
  slots = dict(nnx.to_flat_state(params))

  values, missing, errors = {}, [], []
  for entry in _entries(cfg, head, prefix):
    if entry.path not in slots:
      raise AssertionError(f"internal: no parameter {entry.path} for {entry.key}")
    if entry.key not in tensors:
      missing.append(entry.key)
      continue
    arr = _as_float(entry.key, tensors.pop(entry.key))
    shape = tuple(slots[entry.path].get_value().shape)
    want = _hf_shape(entry, shape)
    if tuple(arr.shape) != want:
      errors.append(f"{entry.key}: shape {tuple(arr.shape)}, expected {want}")
      continue
    values[entry.path] = _to_ours(arr, entry, shape)
  if errors:
    raise CheckpointError(f"{len(errors)} checkpoint tensors have the wrong shape for this config: "
                          + "; ".join(errors[:_MAX_LISTED]))

  # Tensors HF keeps but that hold nothing of ours: the fixed RoPE table and tied copies.
  pos_key = f"{prefix}encoder.embed_positions.weight"
  if pos_key in tensors:
    table = _as_float(pos_key, tensors.pop(pos_key))
    want = (cfg.max_position, cfg.head_size)
    if tuple(table.shape) != want:
      raise CheckpointError(f"{pos_key}: shape {tuple(table.shape)}, expected {want} "
                            "(max_position_embeddings, hidden_size // num_attention_heads).")
    atol = max(1e-4, 2 * float(ml_dtypes.finfo(table.dtype).eps))  # f32: 1e-4, f16: 2e-3, bf16: 1.6e-2
    if not np.allclose(np.asarray(table, np.float32), sinusoidal_table(*want), rtol=0, atol=atol):
      raise CheckpointError(f"{pos_key} is not HF RoFormer's sinusoidal table (theta=10000); this model "
                            "computes RoPE from positions and cannot use another table.")
  if head == "mlm":
    word = values.get(("roformer", "embeddings", "word", "embedding"))
    if cfg.tie_embeddings:
      if ("mlm", "bias") not in values and "cls.predictions.decoder.bias" in tensors:
        values[("mlm", "bias")] = _as_float("cls.predictions.decoder.bias", tensors.pop("cls.predictions.decoder.bias"))
        missing.remove("cls.predictions.bias")
      if word is not None:
        _pop_tied(tensors, "cls.predictions.decoder.weight", word, "the word embeddings")
      if ("mlm", "bias") in values:
        _pop_tied(tensors, "cls.predictions.decoder.bias", values[("mlm", "bias")], "cls.predictions.bias")
    else:
      dead = tensors.pop("cls.predictions.bias", None)  # HF's untied decoder has its own bias
      if dead is not None:
        _as_float("cls.predictions.bias", dead)

  unfilled = sorted(set(slots) - set(values), key=str)
  problems = []
  if missing:
    problems.append(f"missing tensors: {_listing(missing)}")
  if tensors:
    hint = " (pass head='encoder' to load only the encoder)" if prefix and head != "encoder" else ""
    problems.append(f"unexpected tensors{hint}: {_listing(tensors)}")
  if unfilled and not missing:
    problems.append(f"parameters with no tensor: {_listing('.'.join(map(str, p)) for p in unfilled)}")
  if problems:
    raise CheckpointError(f"{path} does not match a {cls.__name__} for its config.json: " + "; ".join(problems) + ".")

  pdtype = jnp.dtype(cfg.param_dtype)
  flat = [(p, var.replace(value=jnp.asarray(values[p], dtype=pdtype))) for p, var in slots.items()]
  return nnx.merge(graphdef, nnx.from_flat_state(flat), rest)


# --------------------------------------------------------------------------------------
# Saving.
# --------------------------------------------------------------------------------------


def _head_of(model) -> tuple[str, str, int | None]:
  if isinstance(model, RoFormerForMaskedLM):
    return "mlm", "RoFormerForMaskedLM", None
  if isinstance(model, RoFormerForSequenceClassification):
    return "classifier", "RoFormerForSequenceClassification", model.num_labels
  if isinstance(model, RoFormerModel):
    return "encoder", "RoFormerModel", None
  raise CheckpointError(f"cannot save a {type(model).__name__} as HF RoFormer; expected one of "
                        f"{sorted(ARCHITECTURES.values())}.")


def state_dict(model) -> dict[str, np.ndarray]:
  """The HF RoFormer state dict of `model` as float32 NumPy arrays (what `save_pretrained` writes)."""
  head, _, _ = _head_of(model)
  cfg = model.config
  _check_representable(cfg)
  prefix = "" if head == "encoder" else "roformer."
  params = {p: var.get_value() for p, var in nnx.to_flat_state(nnx.state(model, nnx.Param))}
  out, used = {}, set()
  for entry in _entries(cfg, head, prefix):
    if entry.path not in params:
      raise CheckpointError(f"the model has no parameter {'.'.join(map(str, entry.path))} for {entry.key}.")
    value = np.asarray(jax.device_get(params[entry.path]), dtype=np.float32)
    out[entry.key] = np.ascontiguousarray(_to_hf(value, entry))
    used.add(entry.path)
  extra = set(params) - used
  if extra:
    raise CheckpointError("the model has parameters HF RoFormer has no place for: "
                          + _listing(".".join(map(str, p)) for p in extra))
  out[f"{prefix}encoder.embed_positions.weight"] = sinusoidal_table(cfg.max_position, cfg.head_size)
  if head == "mlm" and not cfg.tie_embeddings:
    out["cls.predictions.bias"] = out["cls.predictions.decoder.bias"].copy()  # HF keeps both
  return out


def save_pretrained(model, path: str | os.PathLike, *, label_names: Sequence[str] | None = None) -> None:
  """Writes `model` as a transformers RoFormer checkpoint: config.json + model.safetensors (float32).

  Accepts `RoFormerModel`, `RoFormerForMaskedLM` and `RoFormerForSequenceClassification`.
  Raises `CheckpointError` if the config has no HF RoFormer equivalent (non-RoPE position,
  pre-LN, "half" layout, theta != 10000, scaling, partial rotary, linear attention, ...).
  `label_names` name a classifier's classes in config.json's id2label (default: LABEL_<i>).
  """
  from safetensors.numpy import save_file

  head, arch, num_labels = _head_of(model)
  if label_names is not None and num_labels is None:
    raise CheckpointError(f"label_names are for a classifier; this is a {arch}.")
  hf = config_to_hf(model.config, architecture=arch, num_labels=num_labels, label_names=label_names)
  tensors = state_dict(model)
  path = os.fspath(path)
  os.makedirs(path, exist_ok=True)
  save_file(tensors, os.path.join(path, WEIGHTS_NAME), metadata={"format": "pt"})
  with open(os.path.join(path, CONFIG_NAME), "w") as f:
    json.dump(hf, f, indent=2, sort_keys=True)
    f.write("\n")
