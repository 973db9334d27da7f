"""The RoFormer model family in Flax NNX: encoder (BERT layout), encoder-decoder, causal LM.

Shapes: B batch, T length, S source length, D model width, E embedding width, V vocabulary.

- `RoFormerModel`: the BERT-style encoder of Sec. 4.2-4.3 with HF RoFormer's parameter
  layout (post-LN; pre-LN as an option). Heads: `RoFormerForMaskedLM` (tied embeddings),
  `RoFormerForSequenceClassification` (num_labels=1 is regression, for STS-B).
- `TransformerSeq2Seq`: Transformer-base of Sec. 4.1, RoPE in both self-attentions, none in
  cross-attention, shared source/target vocabulary and tied embeddings.
- `CausalLM`: decoder-only LM with softmax or linear (eq. 19) attention, Sec. 4.4.

Every model takes a `ModelConfig`; `ModelConfig.position` is the one switch between RoPE
and the paper's baselines (positional.POSITION_ENCODINGS). Parameters carry logical axis
names (partitioning.py). Decoding caches are plain pytrees (`init_cache` / `decode_step`),
so beam search can reorder them with a gather.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
from flax import nnx

from roformer_jax import context_parallel, positional
from roformer_jax.attention import (ATTENTION_IMPLEMENTATIONS, ATTENTION_KINDS, FEATURE_MAPS, AttentionTemperature,
                                    MultiHeadAttention, cross_attend, cross_kv, mask_factors)
from roformer_jax.partitioning import partitioned
from roformer_jax.positional import RotaryConfig

def _recomputed(fn):
  """`fn` (elementwise) whose backward pass recomputes it from its input (jax.checkpoint).

  Autodiff of the GELUs and SiLU keeps 3-4 intermediates of the [B, T, d_ff] pre-activation
  for the backward pass (exact GELU: 0.5·x, -x/√2 and the erfc term), where the input alone is
  enough: the values and gradients are the same ops, recomputed. On an H100 (issue 27, RoFormer-
  base MLM, bf16) the exact GELU's forward fusion wrote three bf16 [32768, 3072] tensors per
  layer and ran at HBM speed, 4.0 ms of a 61 ms step each way; on the CPU the compiled MLM
  step's temporaries drop 6.5% (d=256, T=128) at the same speed and bitwise-equal losses.
  """
  return jax.checkpoint(fn)


ACTIVATIONS = {
    "gelu": _recomputed(functools.partial(jax.nn.gelu, approximate=False)),  # HF "gelu" is the exact erf form
    "gelu_new": _recomputed(functools.partial(jax.nn.gelu, approximate=True)),
    "relu": jax.nn.relu,  # its backward keeps a boolean mask: nothing to save by recomputing
    "silu": _recomputed(jax.nn.silu),
}
NORM_PLACEMENTS = ("post", "pre")
# ModelConfig.remat -> the jax.checkpoint policy of each layer (None: no remat).
REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture of every model here. Defaults are RoFormer-base (HF `RoFormerConfig`)."""

  vocab_size: int = 50000
  d_model: int = 768  # D
  num_layers: int = 12  # per stack (encoder and decoder each, for seq2seq)
  num_heads: int = 12
  head_dim: int | None = None  # None = d_model // num_heads
  d_ff: int = 3072  # feed-forward hidden width
  activation: str = "gelu"
  embedding_size: int | None = None  # E; != D adds HF's embeddings_project (E -> D)
  type_vocab_size: int = 2  # token types (segment A/B); 0 = none
  max_position: int = 1536  # rows of the learned table ("learned" only)
  position: str = "rope"  # rope | sinusoidal | learned | none
  rope_theta: float = 10000.0  # Sec. 3.2.2
  rope_layout: str = "interleaved"  # eq. (34), as in HF RoFormer
  rotary_dim: int | None = None
  rope_scaling: Any = None  # HF rope_parameters dict (linear, dynamic, yarn, longrope, llama3)
  rope_exact: bool = True
  # Any further RoPE spec field (positional.RotaryConfig) without a key of its own above, as a
  # dict {field: value}: a new spec field is set here with no edit to this class.
  rope: Any = None
  # Per-layer attention (Gemma 2/3 local/global, Llama 4 / SmolLM3 NoPE layers, Cohere2):
  # layer i has type layer_types[i % len(layer_types)] (a pattern, e.g. five "local" and one
  # "global"; None = every layer alike), and layer_settings[type] sets, for that type:
  #   "rope": {RoPE spec field: value} over the model's spec (e.g. {"theta": 1e6, "scaling":
  #           {...}}), or "none": a layer without RoPE (NoPE);
  #   "window": W, local attention over the last W tokens (causal) or |i - j| <= W // 2;
  #   "attn_temperature": {"scale": 0.1, "floor": 8192}: Llama 4's scaling of q by
  #           1 + scale * log(1 + floor((position + 1) / floor)) (its NoPE layers).
  # `layer_rotary(i)`, `layer_window(i)` and `layer_temperature(i)` read them.
  layer_types: Any = None
  layer_settings: Any = None
  rotary_value: bool = False  # also rotate v (HF config.rotary_value), off in the paper
  norm: str = "post"  # post-LN (BERT, HF RoFormer) or pre-LN
  layer_norm_eps: float = 1e-12
  dropout: float = 0.1  # hidden dropout
  attention_dropout: float = 0.1  # on attention probabilities (softmax only)
  attention: str = "softmax"  # softmax | linear (eq. 19)
  feature_map: str = "elu"  # linear attention: elu | favor
  num_features: int = 256  # FAVOR+ random features
  tie_embeddings: bool = True  # output projection = embedding table
  scale_embeddings: bool = False  # multiply embeddings by sqrt(D) (Vaswani et al.)
  init_std: float = 0.02
  embed_init_std: float | None = None  # None = init_std
  use_bias: bool = True
  pad_id: int = 0
  dtype: str = "float32"  # compute dtype (bfloat16 for mixed precision)
  param_dtype: str = "float32"
  # Softmax attention kernel of full-sequence calls: "auto" = cuDNN's fused kernel on a GPU where
  # it applies (bf16/fp16, no dense mask, no dropout), XLA elsewhere; "xla" or "cudnn" forces
  # one. Cached decoding always chooses itself (its dense masks take XLA). Not architecture:
  # checkpoints load under any value.
  attention_implementation: str = "auto"
  # Activation rematerialisation per layer (not architecture): "none" keeps every activation
  # for the backward pass (the GELUs and SiLU keep only their input: ACTIVATIONS); "full"
  # recomputes each layer's forward in the backward pass and keeps only its input; "dots"
  # keeps the matmul outputs and recomputes the rest.
  remat: str = "none"
  # Self-attention's q, k and v projections as ONE matmul over their stacked kernels (not
  # architecture: the parameters, checkpoints and HF mapping stay three projections; the
  # kernels are stacked at trace time). Fewer, larger matmuls (a GPU lever, issue 27).
  fused_qkv: bool = False

  def __post_init__(self):
    object.__setattr__(self, "rope_scaling", positional.freeze_scaling(self.rope_scaling))
    object.__setattr__(self, "rope", positional.freeze_rope_extra(self.rope))
    object.__setattr__(self, "layer_types", _freeze_layer_types(self.layer_types))
    object.__setattr__(self, "layer_settings", _freeze_layer_settings(self.layer_settings, self.layer_types))
    positional.check_position_encoding(self.position)
    for name in ("vocab_size", "d_model", "num_layers", "num_heads", "d_ff"):
      value = getattr(self, name)
      if not isinstance(value, int) or value <= 0:
        raise ValueError(f"model {name}={value!r} must be a positive integer.")
    if self.layer_types is not None and len(self.layer_types) > self.num_layers:
      raise ValueError(f"layer_types={self.layer_types} names {len(self.layer_types)} layers, but num_layers="
                       f"{self.num_layers}: types {self.layer_types[self.num_layers:]} would apply to no layer. Give at "
                       "most num_layers names (a shorter pattern repeats: layer i has type layer_types[i % "
                       "len(layer_types)]), or raise num_layers.")
    if self.head_dim is None and self.d_model % self.num_heads:
      raise ValueError(f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; "
                       "set head_dim or change one of them.")
    if self.activation not in ACTIVATIONS:
      raise ValueError(f"activation={self.activation!r}; expected one of {tuple(ACTIVATIONS)}.")
    if self.norm not in NORM_PLACEMENTS:
      raise ValueError(f"norm={self.norm!r}; expected 'post' (BERT, HF RoFormer) or 'pre'.")
    if self.attention not in ATTENTION_KINDS:
      raise ValueError(f"attention={self.attention!r}; expected one of {ATTENTION_KINDS}.")
    if self.feature_map not in FEATURE_MAPS:
      raise ValueError(f"feature_map={self.feature_map!r}; expected one of {FEATURE_MAPS}.")
    if self.remat not in REMAT_POLICIES:
      raise ValueError(f"remat={self.remat!r}; expected one of {tuple(REMAT_POLICIES)}.")
    if not isinstance(self.fused_qkv, bool):
      raise ValueError(f"fused_qkv={self.fused_qkv!r} must be True or False.")
    if self.attention_implementation not in ATTENTION_IMPLEMENTATIONS:
      raise ValueError(f"attention_implementation={self.attention_implementation!r}; expected one of "
                       f"{ATTENTION_IMPLEMENTATIONS}.")
    for name in ("dropout", "attention_dropout"):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(f"{name}={getattr(self, name)} must be in [0, 1).")
    for name in ("dtype", "param_dtype"):
      try:
        jnp.dtype(getattr(self, name))
      except TypeError as e:
        raise ValueError(f"{name}={getattr(self, name)!r} is not a dtype name (use 'float32' or 'bfloat16').") from e
    if self.position == "rope":
      # Theta, layout, scaling and the rotated width now, not at trace time. FAVOR+ linear
      # attention rotates its random features (eq. 19), softmax attention the head.
      width, what = ((self.num_features, "num_features") if self.attention == "linear" and self.feature_map == "favor"
                     else (self.head_size, "head dim"))
      self.rotary.check(width, what)
      for i in range(self.num_layers):
        try:
          spec = self.layer_rotary(i)
          if spec is not None:
            spec.check(width, what)
        except (TypeError, ValueError) as e:
          if self._layer_setting(i, "rope") is None:
            raise
          raise type(e)(f"layer_settings[{self.layer_type(i)!r}]['rope']="
                        f"{cast(dict, self.plain_layer_settings())[self.layer_type(i)]['rope']!r}: {e}") from None
        if spec is not None:
          if spec.position_shape != self.rotary.position_shape:
            raise ValueError(f"layer_settings[{self.layer_type(i)!r}]['rope'] gives positions of shape "
                             f"{spec.position_shape}, the model {self.rotary.position_shape}: every layer reads the "
                             "same positions; set sections on the model's rope, not per layer type.")
    for i in range(self.num_layers):
      if self.layer_window(i) is not None and self.attention != "softmax":
        raise ValueError(f"layer_settings[{self.layer_type(i)!r}]['window'] needs softmax attention; linear "
                         "attention has no window.")

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> "ModelConfig":
    """Builds a config from a dict (e.g. an ml_collections `config.model`), naming unknown keys."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ValueError(f"unknown model config keys {unknown}; known keys: {sorted(known)}.")
    return cls(**dict(values))

  def replace(self, **changes) -> "ModelConfig":
    return dataclasses.replace(self, **changes)

  @property
  def head_size(self) -> int:
    return self.head_dim or self.d_model // self.num_heads

  @property
  def embed_size(self) -> int:
    return self.embedding_size or self.d_model

  @functools.cached_property  # built once: its checks (and warnings) run once per config
  def rotary(self) -> RotaryConfig:
    """The RoPE spec every attention, cache and export of this model takes (positional.RotaryConfig)."""
    return positional.rotary_from_config(self)

  @property
  def compute_dtype(self):
    return jnp.dtype(self.dtype)

  def plain_layer_settings(self) -> dict[str, dict[str, Any]] | None:
    """`layer_settings` as nested dicts {type: {setting: value}} (the config keeps them frozen)."""
    return _thawed(self.layer_settings)

  def layer_type(self, i: int) -> str | None:
    """Layer i's type name (`layer_types`, repeated as a pattern), or None if none are set."""
    return None if self.layer_types is None else self.layer_types[i % len(self.layer_types)]

  def _layer_setting(self, i: int, key: str):
    settings = dict(self.layer_settings or ())
    return dict(settings.get(self.layer_type(i), ())).get(key)

  def layer_rotary(self, i: int) -> RotaryConfig | None:
    """Layer i's RoPE spec: the model's (`rotary`) with its type's overrides; None for a layer
    without RoPE (a NoPE type, or position != 'rope')."""
    if self.position != "rope":
      return None
    rope = self._layer_setting(i, "rope")
    if rope == "none":
      return None
    spec = self.rotary
    return spec if not rope else dataclasses.replace(spec, **dict(rope))

  def layer_window(self, i: int) -> int | None:
    """Layer i's attention window W (None = attend to every key the mask allows)."""
    return self._layer_setting(i, "window")

  def layer_temperature(self, i: int) -> AttentionTemperature | None:
    """Layer i's q temperature scaling (Llama 4's `scale` and `floor`), or None."""
    return self._layer_setting(i, "attn_temperature")


_LAYER_SETTING_KEYS = ("rope", "window", "attn_temperature")


def _thawed(frozen):
  """Frozen (key, value) items back as nested dicts."""
  if isinstance(frozen, tuple) and all(isinstance(i, tuple) and len(i) == 2 and isinstance(i[0], str) for i in frozen):
    return {k: _thawed(v) for k, v in frozen}
  return frozen


def _freeze_layer_types(types):
  """`layer_types` as a tuple of names (None stays None)."""
  if types is None:
    return None
  if isinstance(types, str) or not hasattr(types, "__iter__"):
    raise ValueError(f"layer_types={types!r} must be a sequence of layer type names, e.g. "
                     "('local', 'local', 'global'), repeated over the layers.")
  types = tuple(str(t) for t in types)
  if not types:
    raise ValueError("layer_types=() names no type; use None for every layer alike.")
  return types


def _freeze_layer_settings(settings, types):
  """`layer_settings` as sorted frozen items {type: {key: value}}, validated against the keys
  it may set and the types `layer_types` names."""
  if settings is None:
    return None
  if isinstance(settings, tuple):
    return settings
  if not isinstance(settings, Mapping):
    raise TypeError(f"layer_settings must be a dict {{layer type: {{setting: value}}}}, got {type(settings).__name__}.")
  out = []
  for name, values in settings.items():
    if types is None or name not in types:
      raise ValueError(f"layer_settings names layer type {name!r}, which layer_types={types} does not have.")
    if values is None:
      values = {}
    if not isinstance(values, (Mapping, tuple)):
      raise ValueError(f"layer_settings[{name!r}]={values!r} must be a dict {{setting: value}} of {_LAYER_SETTING_KEYS}, "
                       f"e.g. {{{name!r}: {{'rope': 'none'}}}} for layers without RoPE or {{{name!r}: {{'window': 4096}}}}.")
    values = dict(values)
    unknown = sorted(set(values) - set(_LAYER_SETTING_KEYS))
    if unknown:
      raise ValueError(f"layer_settings[{name!r}] has unknown keys {unknown}; a layer type sets {_LAYER_SETTING_KEYS}.")
    frozen = {}
    if values.get("rope") is not None:
      rope = values["rope"]
      if rope != "none":
        if not isinstance(rope, (Mapping, tuple)):
          raise ValueError(f"layer_settings[{name!r}]['rope'] must be a dict of RoPE spec fields or 'none' (a layer "
                           f"without RoPE), got {rope!r}.")
        rope = dict(rope)
        fields = {f.name for f in dataclasses.fields(RotaryConfig)}
        bad = sorted(set(rope) - fields)
        if bad:
          raise ValueError(f"layer_settings[{name!r}]['rope'] sets {bad}, which are not RoPE spec fields "
                           f"({sorted(fields)}).")
        rope = positional.freeze_scaling({k: (positional.freeze_scaling(v) if isinstance(v, Mapping) else v)
                                          for k, v in rope.items()})
      frozen["rope"] = rope
    if values.get("window") is not None:
      w = values["window"]
      if isinstance(w, bool) or not isinstance(w, int) or w < 1:
        raise ValueError(f"layer_settings[{name!r}]['window']={w!r} must be a positive int (tokens).")
      frozen["window"] = w
    if values.get("attn_temperature") is not None:
      frozen["attn_temperature"] = AttentionTemperature.of(values["attn_temperature"],
                                                           f"layer_settings[{name!r}]['attn_temperature']")
    out.append((name, tuple(sorted(frozen.items()))))
  return tuple(sorted(out))


# Sizes from the paper (reference/roformer-paper-summary.md).
PRESETS: dict[str, dict[str, Any]] = {
    # Sec. 4.2/4.3: BERT-base sized RoFormer (HF junnyu/roformer_chinese_base layout).
    "roformer-base": dict(d_model=768, num_layers=12, num_heads=12, d_ff=3072),
    # Sec. 4.1: Transformer-base, d=512, 6+6 layers, 8 heads, FFN 2048, shared 37k BPE vocabulary.
    "transformer-base": dict(vocab_size=37000, d_model=512, num_layers=6, num_heads=8, d_ff=2048,
                             activation="relu", type_vocab_size=0, scale_embeddings=True,
                             embed_init_std=512 ** -0.5, layer_norm_eps=1e-5),
    # Sec. 4.4: 12-layer char-level Performer LM on enwik8, 768 wide, 12 heads.
    "performer-enwik8": dict(vocab_size=260,  # 256 bytes + pad/bos/eos/mask (data.ByteTokenizer)
                              d_model=768, num_layers=12, num_heads=12, d_ff=3072,
                             attention="linear", feature_map="favor", type_vocab_size=0,
                             norm="pre", layer_norm_eps=1e-5),
}


def preset(name: str, **overrides) -> ModelConfig:
  if name not in PRESETS:
    raise ValueError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}.")
  return ModelConfig(**{**PRESETS[name], **overrides})


# --------------------------------------------------------------------------------------
# Layers.
# --------------------------------------------------------------------------------------


def _position_shape(cfg: ModelConfig) -> tuple[int, ...]:
  """The trailing shape of one token's position: the RoPE spec's `position_shape`, () otherwise."""
  return cfg.rotary.position_shape if cfg.position == "rope" else ()


def _default_positions(cfg: ModelConfig, shape, **kw) -> jax.Array:
  """`positional.default_positions` [B, T], repeated on every position axis: [B, T, *P]."""
  positions = positional.default_positions(shape, **kw)
  trailing = _position_shape(cfg)
  return jnp.broadcast_to(positions[..., None], positions.shape + trailing) if trailing else positions


def _linear(cfg: ModelConfig, din: int, dout: int, axes, *, rngs, std=None):
  return nnx.Linear(din, dout, use_bias=cfg.use_bias, dtype=cfg.compute_dtype,
                    param_dtype=cfg.param_dtype, rngs=rngs,
                    kernel_init=partitioned(nnx.initializers.normal(std or cfg.init_std), axes),
                    bias_init=partitioned(nnx.initializers.zeros_init(), (axes[1],)))


def layer_norm(cfg: ModelConfig, dim: int, *, rngs):
  """The model's LayerNorm over `dim` features (a building block of every family)."""
  # Normalisation statistics stay in float32 whatever the compute dtype.
  return nnx.LayerNorm(dim, epsilon=cfg.layer_norm_eps, dtype=jnp.float32, param_dtype=cfg.param_dtype,
                       scale_init=partitioned(nnx.initializers.ones_init(), ("norm",)),
                       bias_init=partitioned(nnx.initializers.zeros_init(), ("norm",)), rngs=rngs)


def _embed(cfg: ModelConfig, rows: int, dim: int, axes, *, rngs):
  init = nnx.initializers.normal(cfg.embed_init_std or cfg.init_std)
  return nnx.Embed(rows, dim, dtype=cfg.compute_dtype, param_dtype=cfg.param_dtype,
                   embedding_init=partitioned(init, axes), rngs=rngs)


# Tables with at most this many rows (token types) are read by selection, not by a gather.
SMALL_TABLE_ROWS = 16


def embedding_lookup(table: nnx.Embed, ids: jax.Array, dtype) -> jax.Array:
  """table's rows at ids, cast to `dtype`: what nnx.Embed(ids) returns, with a faster backward.

  nnx.Embed casts the whole table to its compute dtype and then gathers, so the backward pass
  scatter-adds the gradient into a bfloat16 table: bf16 atomics, and a bf16 sum. Here the rows
  are gathered in the parameter dtype and cast afterwards (the same values), so the scatter-add
  runs in float32. A table of at most SMALL_TABLE_ROWS rows (BERT's 2 token types) is read by
  selection (`where` per row): its gradient is then a reduction per row, where a gather's
  would be a scatter in which every token of the batch adds into the same row, serialised on a
  GPU. Measured on an H100 (RoFormer-base MLM, B = 64 x T = 512, bf16; issue 27): the two
  scatters took 110 ms (token types) and 81 ms (words) of a 280 ms step. Ids must lie in
  [0, rows): a small table maps others to row 0 (nnx.Embed's gather gives NaN or wraps).
  """
  if not jnp.issubdtype(jnp.asarray(ids).dtype, jnp.integer):
    raise ValueError(f"embedding ids must be integers, got dtype {jnp.asarray(ids).dtype}.")
  w = table.embedding[...]
  if w.shape[0] <= SMALL_TABLE_ROWS:
    ids = ids[..., None]
    out = jnp.broadcast_to(w[0], ids.shape[:-1] + w.shape[1:])
    for row in range(1, w.shape[0]):
      out = jnp.where(ids == row, w[row], out)
  else:
    out = jnp.take(w, ids, axis=0)
  return out.astype(dtype)


class Embedder(nnx.Module):
  """Token (+ token-type, + absolute position) embeddings, as in HF RoFormerEmbeddings.

  word + type [+ position] -> LayerNorm (post-LN models) -> dropout -> E->D projection.
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    e = cfg.embed_size
    self.cfg = cfg
    self.word = _embed(cfg, cfg.vocab_size, e, ("vocab", "embed"), rngs=rngs)
    self.token_type = _embed(cfg, cfg.type_vocab_size, e, ("types", "embed"), rngs=rngs) if cfg.type_vocab_size else None
    self.position = _embed(cfg, cfg.max_position, e, ("position", "embed"), rngs=rngs) if cfg.position == "learned" else None
    self.norm = layer_norm(cfg, e, rngs=rngs) if cfg.norm == "post" else None
    self.dropout = nnx.Dropout(cfg.dropout, rngs=rngs)
    self.project = _linear(cfg, e, cfg.d_model, ("embed", None), rngs=rngs) if e != cfg.d_model else None

  def __call__(self, ids, *, positions, token_type_ids=None, deterministic: bool = True) -> jax.Array:
    cfg = self.cfg
    dtype = cfg.compute_dtype
    x = embedding_lookup(self.word, ids, dtype)
    if cfg.scale_embeddings:
      x = x * math.sqrt(cfg.d_model)
    if self.token_type is not None:
      x = x + embedding_lookup(self.token_type, jnp.zeros_like(ids) if token_type_ids is None else token_type_ids,
                               dtype)
    if cfg.position == "learned":
      if ids.shape[-1] > cfg.max_position:
        raise ValueError(f"sequence length {ids.shape[-1]} exceeds max_position={cfg.max_position}, the rows "
                         "of the learned position table; raise max_position or use position='rope'.")
      x = x + embedding_lookup(cast(nnx.Embed, self.position), positions, dtype)  # "learned": a table
    elif cfg.position == "sinusoidal":
      x = x + positional.sinusoidal_embedding(positions, x.shape[-1], dtype=x.dtype)
    if self.norm is not None:
      x = self.norm(x).astype(cfg.compute_dtype)
    x = self.dropout(x, deterministic=deterministic)
    return x if self.project is None else self.project(x)

  def attend(self, h: jax.Array) -> jax.Array:
    """Tied output projection h [..., E] -> float32 logits [..., V]."""
    return self.word.attend(h).astype(jnp.float32)


class Block(nnx.Module):
  """One transformer layer: self-attention (+ cross-attention) + feed-forward.

  post-LN (BERT/HF RoFormer): x = LN(x + f(x)); pre-LN: x = x + f(LN(x)).
  Parameter names follow HF's BertLayer roles: attention, attention_norm, [cross_attention,
  cross_norm], mlp_in, mlp_out, mlp_norm.
  """

  def __init__(self, cfg: ModelConfig, *, causal: bool, cross: bool, rngs: nnx.Rngs, layer: int = 0):
    self.cfg, self.causal = cfg, causal
    mha = dict(head_dim=cfg.head_size, init_std=cfg.init_std, use_bias=cfg.use_bias,
               dtype=cfg.compute_dtype, param_dtype=cfg.param_dtype, rngs=rngs)
    rotary = cfg.layer_rotary(layer)  # this layer's RoPE (its type's), None for a NoPE layer
    self.attention = MultiHeadAttention(
        cfg.d_model, cfg.num_heads, kind=cfg.attention, use_rope=rotary is not None, rotary=rotary or cfg.rotary,
        rotary_value=cfg.rotary_value, causal=causal, feature_map=cfg.feature_map,
        num_features=cfg.num_features, dropout_rate=cfg.attention_dropout,
        implementation=cfg.attention_implementation, window=cfg.layer_window(layer),
        temperature=cfg.layer_temperature(layer), fused_qkv=cfg.fused_qkv, **mha)
    self.attention_norm = layer_norm(cfg, cfg.d_model, rngs=rngs)
    if cross:
      self.cross_attention = MultiHeadAttention(cfg.d_model, cfg.num_heads, kind="softmax", use_rope=False,
                                                dropout_rate=cfg.attention_dropout,
                                                implementation=cfg.attention_implementation, **mha)
      self.cross_norm = layer_norm(cfg, cfg.d_model, rngs=rngs)
    else:
      self.cross_attention = self.cross_norm = None
    self.mlp_in = _linear(cfg, cfg.d_model, cfg.d_ff, ("embed", "mlp"), rngs=rngs)
    self.mlp_out = _linear(cfg, cfg.d_ff, cfg.d_model, ("mlp", "embed"), rngs=rngs)
    self.mlp_norm = layer_norm(cfg, cfg.d_model, rngs=rngs)
    self.dropout = nnx.Dropout(cfg.dropout, rngs=rngs)

  def _residual(self, x, norm, fn, deterministic):
    dt = self.cfg.compute_dtype
    if self.cfg.norm == "pre":
      return x + self.dropout(fn(norm(x).astype(dt)), deterministic=deterministic)
    return norm(x + self.dropout(fn(x), deterministic=deterministic)).astype(dt)

  def _mlp(self, x):
    return self.mlp_out(ACTIVATIONS[self.cfg.activation](self.mlp_in(x)))

  def __call__(self, x, *, positions, mask=None, kv_valid=None, segment_ids=None, context=None,
               context_mask=None, deterministic: bool = True) -> jax.Array:
    attn = lambda h: self.attention(h, positions=positions, mask=mask, kv_valid=kv_valid,
                                    segment_ids=segment_ids, deterministic=deterministic)
    x = self._residual(x, self.attention_norm, attn, deterministic)
    if self.cross_attention is not None:
      cross = lambda h: self.cross_attention(h, context=context, mask=context_mask, deterministic=deterministic)
      x = self._residual(x, self.cross_norm, cross, deterministic)
    return self._residual(x, self.mlp_norm, self._mlp, deterministic)

  def decode(self, x, cache, *, positions, index, kv_valid, cross_mask=None, end=None):
    """Incremental forward of new tokens x [B, L, D]; returns (y, new layer cache). `end`:
    see `MultiHeadAttention.decode` (a cache rebuild)."""
    new = {}

    def attn(h):
      y, new["self"] = self.attention.decode(h, cache["self"], positions=positions, index=index,
                                             kv_valid=kv_valid, end=end)
      return y

    x = self._residual(x, self.attention_norm, attn, True)
    if self.cross_attention is not None:
      new["cross"] = cache["cross"]
      x = self._residual(x, self.cross_norm,
                         lambda h: cross_attend(self.cross_attention, h, cache["cross"], mask=cross_mask), True)
    return self._residual(x, self.mlp_norm, self._mlp, True), new


def layer_stack(cfg: ModelConfig, *, causal: bool, cross: bool, rngs: nnx.Rngs) -> nnx.List:
  """cfg.num_layers `Block`s, layer i with its type's RoPE, window and temperature (`layer_types`)."""
  return nnx.List([Block(cfg, causal=causal, cross=cross, rngs=rngs, layer=i) for i in range(cfg.num_layers)])


def run_layers(cfg: ModelConfig, layers, x: jax.Array, **kw) -> jax.Array:
  """x through every layer, each under `cfg.remat`'s checkpoint policy (if any).

  Under context parallelism each layer's input is constrained to the (batch, length)
  sharding, so that no layer gathers the sequence (context_parallel.shard)."""
  if cfg.remat == "none":
    for layer in layers:
      x = layer(context_parallel.shard(x), **kw)
    return context_parallel.shard(x)
  step = nnx.remat(lambda layer, h: layer(h, **kw), policy=REMAT_POLICIES[cfg.remat])
  for layer in layers:
    x = step(layer, context_parallel.shard(x))
  return context_parallel.shard(x)


def self_attention_mask(cfg: ModelConfig, *, valid, segment_ids, causal: bool, shape, order=None):
  """The self-attention mask factors of a [B, T] batch (None for linear attention, which takes
  kv_valid / segment_ids itself)."""
  if cfg.attention == "linear":
    return None  # linear attention takes kv_valid / segment_ids directly
  b, t = shape
  slots = None if order is None else order.slots(b)
  return mask_factors(b, t, t, kv_valid=valid, q_segment_ids=segment_ids, causal=causal, q_index=slots,
                      kv_index=slots)


def _check_context_parallel(cfg: ModelConfig, length: int, *, causal: bool, key: str) -> None:
  """Trace-time check of an input against the mesh's context axis; `key` names the argument.

  The trainer checks the config's lengths before any work (trainer.check_context_parallel);
  this catches direct callers of the models under a mesh.
  """
  if context_parallel.size() > 1:
    if cfg.attention != "softmax":
      raise ValueError(f"context parallelism (mesh.context={context_parallel.size()}) needs softmax attention; "
                       f"attention={cfg.attention!r} is not split over the context axis. Set mesh.context=1.")
    context_parallel.check_length(length, causal=causal, key=key)


def _valid_tokens(ids, attention_mask, segment_ids):
  """Real-token mask: attention_mask if given, else segment id != 0 if packed, else None."""
  if attention_mask is not None:
    return jnp.asarray(attention_mask).astype(bool)
  if segment_ids is not None:
    return jnp.asarray(segment_ids) != 0
  return None


def _check_ids(ids, what="input_ids"):
  ids = jnp.asarray(ids)
  if ids.ndim != 2 or not jnp.issubdtype(ids.dtype, jnp.integer):
    raise ValueError(f"{what} must be an integer array [B, T], got dtype {ids.dtype} shape {ids.shape}.")
  return ids


# --------------------------------------------------------------------------------------
# Encoder (BERT layout) and its heads.
# --------------------------------------------------------------------------------------


class RoFormerModel(nnx.Module):
  """The RoFormer encoder: embeddings and a stack of bidirectional blocks (Sec. 4.2)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.config = cfg
    self.embeddings = Embedder(cfg, rngs=rngs)
    self.layers = layer_stack(cfg, causal=False, cross=False, rngs=rngs)
    self.final_norm = layer_norm(cfg, cfg.d_model, rngs=rngs) if cfg.norm == "pre" else None

  def encode(self, input_ids, *, attention_mask=None, token_type_ids=None, positions=None,
             segment_ids=None, deterministic: bool = True) -> jax.Array:
    """Last hidden states [B, T, D] (float32 for float32 compute).

    Args:
      input_ids: int[B, T].
      attention_mask: 1/True for real tokens, 0 for padding ([B, T]).
      token_type_ids: int[B, T] segment A/B ids (HF token_type_ids).
      positions: int[B, T]; default counts real tokens (or restarts per packed segment), so
        left padding and packing work for absolute encodings too.
      segment_ids: int[B, T] packed documents (0 = padding); tokens attend within their own.
    """
    input_ids = _check_ids(input_ids)
    cfg = self.config
    if segment_ids is not None and cfg.attention == "linear":
      raise ValueError("packed segment_ids with bidirectional linear attention are not supported; "
                       "unpack the batch or use attention='softmax'.")
    _check_context_parallel(cfg, input_ids.shape[1], causal=False, key="input_ids.shape[1]")
    valid = _valid_tokens(input_ids, attention_mask, segment_ids)
    if positions is None:
      positions = _default_positions(cfg, input_ids.shape, attention_mask=valid, segment_ids=segment_ids)
    x = self.embeddings(input_ids, positions=positions, token_type_ids=token_type_ids, deterministic=deterministic)
    mask = self_attention_mask(cfg, valid=valid, segment_ids=segment_ids, causal=False, shape=input_ids.shape)
    x = run_layers(cfg, self.layers, x, positions=positions, mask=mask, kv_valid=valid, deterministic=deterministic)
    return x if self.final_norm is None else self.final_norm(x)

  __call__ = encode


class MLMHead(nnx.Module):
  """HF RoFormerLMPredictionHead: dense D->E, activation, LayerNorm, tied decoder + bias."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    e = cfg.embed_size
    self.transform = _linear(cfg, cfg.d_model, e, ("embed", None), rngs=rngs)
    self.norm = nnx.LayerNorm(e, epsilon=cfg.layer_norm_eps, dtype=jnp.float32, param_dtype=cfg.param_dtype,
                              scale_init=partitioned(nnx.initializers.ones_init(), ("norm",)),
                              bias_init=partitioned(nnx.initializers.zeros_init(), ("norm",)), rngs=rngs)
    self.bias = nnx.Param(partitioned(nnx.initializers.zeros_init(), ("vocab",))(rngs.params(), (cfg.vocab_size,), cfg.param_dtype))
    self.decoder = None if cfg.tie_embeddings else nnx.Linear(
        e, cfg.vocab_size, use_bias=False, dtype=cfg.compute_dtype, param_dtype=cfg.param_dtype, rngs=rngs,
        kernel_init=partitioned(nnx.initializers.normal(cfg.init_std), ("embed", "vocab")))

  def __call__(self, h, embedder: Embedder) -> jax.Array:
    h = self.norm(ACTIVATIONS[self.cfg.activation](self.transform(h))).astype(self.cfg.compute_dtype)
    logits = embedder.attend(h) if self.decoder is None else self.decoder(h).astype(jnp.float32)
    return logits + self.bias[...].astype(jnp.float32)


class RoFormerForMaskedLM(nnx.Module):
  """Encoder + MLM head with tied embeddings (Sec. 4.2 pre-training)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.config = cfg
    self.roformer = RoFormerModel(cfg, rngs=rngs)
    self.mlm = MLMHead(cfg, rngs=rngs)

  def encode(self, input_ids, **kw) -> jax.Array:
    return self.roformer.encode(input_ids, **kw)

  def __call__(self, input_ids, *, masked_positions=None, deterministic: bool = True, **kw) -> jax.Array:
    """float32 logits [B, T, V], or [B, M, V] at `masked_positions` int[B, M] only.

    Scoring only the masked positions gives the same loss and gradients as full logits and
    skips most of the vocabulary projection.
    """
    h = self.roformer.encode(input_ids, deterministic=deterministic, **kw)
    if masked_positions is not None:
      h = jnp.take_along_axis(h, jnp.asarray(masked_positions)[..., None], axis=1)
    return self.mlm(h, self.roformer.embeddings)


class RoFormerForSequenceClassification(nnx.Module):
  """Encoder + HF RoFormerClassificationHead on the first token (Sec. 4.3 GLUE).

  num_labels=1 makes it a regressor (STS-B); the loss is the trainer's choice.
  """

  def __init__(self, cfg: ModelConfig, num_labels: int, *, rngs: nnx.Rngs):
    if num_labels < 1:
      raise ValueError(f"num_labels={num_labels} must be >= 1 (1 = regression).")
    self.config, self.num_labels = cfg, num_labels
    self.roformer = RoFormerModel(cfg, rngs=rngs)
    self.dense = _linear(cfg, cfg.d_model, cfg.d_model, ("embed", None), rngs=rngs)
    self.out_proj = _linear(cfg, cfg.d_model, num_labels, (None, "labels"), rngs=rngs)
    self.dropout = nnx.Dropout(cfg.dropout, rngs=rngs)

  def encode(self, input_ids, **kw) -> jax.Array:
    return self.roformer.encode(input_ids, **kw)

  def __call__(self, input_ids, *, deterministic: bool = True, **kw) -> jax.Array:
    """float32 logits [B, num_labels] (scores [B, 1] for regression)."""
    h = self.roformer.encode(input_ids, deterministic=deterministic, **kw)[:, 0]
    h = self.dropout(h, deterministic=deterministic)
    h = ACTIVATIONS[self.config.activation](self.dense(h))
    h = self.dropout(h, deterministic=deterministic)
    return self.out_proj(h).astype(jnp.float32)


# --------------------------------------------------------------------------------------
# Decoding caches (shared by the causal LM and the seq2seq decoder).
# --------------------------------------------------------------------------------------


def _length_dependent_specs(cfg: ModelConfig) -> tuple[RotaryConfig, ...]:
  """The distinct RoPE specs among cfg's layers (the model's, and each layer type's own) whose
  frequencies follow the sequence's length (dynamic, longrope)."""
  specs = dict.fromkeys(cfg.layer_rotary(i) for i in range(cfg.num_layers))
  return tuple(spec for spec in specs if spec is not None and spec.length_dependent)


def _keeps_tokens(cfg: ModelConfig) -> bool:
  """A length-dependent RoPE (dynamic, longrope) on any layer needs the tokens to rebuild the
  cache from."""
  return bool(_length_dependent_specs(cfg))


def _new_cache(layers, batch: int, max_len: int, dtype) -> dict[str, Any]:
  """{"layers": [...], "index": next slot, "valid": real slots [B, max_len], "position": next
  position per row [B, *P]}, and "tokens" int32[B, max_len] under a length-dependent RoPE. Every
  leaf but "index" has the batch as its leading axis. P is the RoPE spec's `position_shape`: ()
  for positions [B, L], (A,) for A position axes, positions [B, L, A]."""
  cfg = layers[0].cfg
  if cfg.position == "learned" and max_len > cfg.max_position:
    raise ValueError(f"cache length {max_len} exceeds max_position={cfg.max_position} of the learned "
                     "position table; decode fewer tokens or raise max_position.")
  cache = {"layers": [{"self": layer.attention.init_cache(batch, max_len, dtype)} for layer in layers],
           "index": jnp.zeros((), jnp.int32),
           "valid": jnp.zeros((batch, max_len), bool),
           "position": jnp.zeros((batch,) + _position_shape(cfg), jnp.int32)}
  if _keeps_tokens(cfg):
    cache["tokens"] = jnp.zeros((batch, max_len), jnp.int32)
  return cache




def _trailing(x, like):
  """x [B, ...] with singleton axes appended to broadcast against positions `like` [B, ..., *P]."""
  return x.reshape(x.shape + (1,) * (like.ndim - x.ndim))


def _advance(cache, token_mask, length: int):
  """Slots, positions [B, L, *P] and validity for `length` new tokens (token_mask False = left
  padding). Each new real token advances every position axis by one."""
  b = cache["position"].shape[0]
  token_mask = jnp.ones((b, length), bool) if token_mask is None else jnp.asarray(token_mask, bool)
  counts = jnp.cumsum(token_mask.astype(jnp.int32), axis=1)
  start = cache["position"][:, None]  # [B, 1, *P]
  positions = jnp.where(_trailing(token_mask, start), start + _trailing(counts, start) - 1, 0)
  valid = jax.lax.dynamic_update_slice_in_dim(cache["valid"], token_mask, cache["index"], axis=1)
  return positions, valid, counts[:, -1]


def _decode_stack(layers, x, cache, advanced, *, cross_mask=None, end=None):
  positions, valid, count = advanced
  index = cache["index"]
  new_layers = []
  for layer, layer_cache in zip(layers, cache["layers"], strict=True):
    x, new = layer.decode(x, layer_cache, positions=positions, index=index, kv_valid=valid, cross_mask=cross_mask,
                          end=end)
    new_layers.append(new)
  new_cache = {**cache, "layers": new_layers, "index": index + x.shape[1], "valid": valid,
               "position": cache["position"] + _trailing(count, cache["position"])}
  return x, new_cache


def _decode(layers, embed, tokens, cache, token_mask, *, cross_mask=None):
  """Hidden states [B, L, D] of L new tokens and the updated cache.

  The prediction after a prefix is the full forward over that prefix, whatever the RoPE
  scaling. A length-independent one keeps each cached key valid forever. Under 'dynamic' or
  'longrope' the frequencies follow each row's length, and when this step changes them for a
  row (dynamic: every token past max_position_embeddings; longrope: once, when the length
  passes original_max_position_embeddings) every earlier key changes, and so does every
  earlier hidden state after the first layer. Rotating cached keys again on read would fix
  the first layer only. So the step is then recomputed from the tokens the cache keeps: one
  forward over all its slots (padding and empty slots masked), which rebuilds every layer's
  cache. Otherwise the cached step runs as usual.
  """
  advanced = _advance(cache, token_mask, tokens.shape[1])

  def cached(cache):
    return _decode_stack(layers, embed(tokens, advanced[0]), cache, advanced, cross_mask=cross_mask)

  cfg = layers[0].cfg
  if not _keeps_tokens(cfg):
    return cached(cache)
  index, length = cache["index"], tokens.shape[1]
  history = jax.lax.dynamic_update_slice_in_dim(cache["tokens"], jnp.asarray(tokens, jnp.int32), index, axis=1)
  cache = {**cache, "tokens": history}
  old_len = cache["position"].reshape(cache["position"].shape[0], -1).max(axis=1)  # each row's length so far
  changed = functools.reduce(jnp.logical_or, [spec.frequencies_change(old_len, old_len + advanced[2])
                                               for spec in _length_dependent_specs(cfg)]) & (old_len > 0)

  def rebuilt(cache):
    b, slots = history.shape
    dtype = jax.tree.leaves(cache["layers"][0]["self"])[0].dtype
    fresh = {**cache, "index": jnp.zeros((), jnp.int32), "valid": jnp.zeros_like(cache["valid"]),
             "position": jnp.zeros_like(cache["position"]),
             "layers": [{**lc, "self": layer.attention.init_cache(b, slots, dtype)}
                        for layer, lc in zip(layers, cache["layers"], strict=True)]}
    every = _advance(fresh, advanced[1], slots)  # all real slots so far, this step's included
    x, new = _decode_stack(layers, embed(history, every[0]), fresh, every, cross_mask=cross_mask,
                           end=index + length)  # window layers keep the slots before it, not the last empty ones
    return jax.lax.dynamic_slice_in_dim(x, index, length, axis=1), {**new, "index": index + length}

  return jax.lax.cond(jnp.any(changed), rebuilt, cached, cache)


# --------------------------------------------------------------------------------------
# Causal LM.
# --------------------------------------------------------------------------------------


class CausalLM(nnx.Module):
  """Decoder-only language model, softmax or linear attention (Sec. 4.4's Performer LM)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.config = cfg
    self.embeddings = Embedder(cfg, rngs=rngs)
    self.layers = layer_stack(cfg, causal=True, cross=False, rngs=rngs)
    self.final_norm = layer_norm(cfg, cfg.d_model, rngs=rngs) if cfg.norm == "pre" else None
    self.lm_head = None if cfg.tie_embeddings else nnx.Linear(
        cfg.d_model, cfg.vocab_size, use_bias=False, dtype=cfg.compute_dtype, param_dtype=cfg.param_dtype,
        rngs=rngs, kernel_init=partitioned(nnx.initializers.normal(cfg.init_std), ("embed", "vocab")))
    if cfg.tie_embeddings and cfg.embed_size != cfg.d_model:
      raise ValueError("tied output embeddings need embedding_size == d_model for the causal LM.")

  def _logits(self, h):
    if self.final_norm is not None:
      h = self.final_norm(h).astype(self.config.compute_dtype)
    return self.embeddings.attend(h) if self.lm_head is None else self.lm_head(h).astype(jnp.float32)

  def __call__(self, tokens, *, attention_mask=None, positions=None, segment_ids=None,
               deterministic: bool = True) -> jax.Array:
    """float32 next-token logits [B, T, V] for tokens int[B, T].

    attention_mask marks real tokens (left or right padding); segment_ids packs documents
    (0 = padding) with positions restarting in each.
    """
    tokens = _check_ids(tokens, "tokens")
    _check_context_parallel(self.config, tokens.shape[1], causal=True, key="tokens.shape[1]")
    valid = _valid_tokens(tokens, attention_mask, segment_ids)
    if positions is None:
      positions = _default_positions(self.config, tokens.shape, attention_mask=valid, segment_ids=segment_ids)
    # Context parallelism: rows in zig-zag order (each shard an equal share of the causal
    # work), positions and masks permuted with them, the order restored after the last layer.
    order = context_parallel.Order(tokens.shape[1], causal=True)
    tokens, positions, valid, segment_ids = map(order.permute, (tokens, positions, valid, segment_ids))
    x = self.embeddings(tokens, positions=positions, deterministic=deterministic)
    mask = self_attention_mask(self.config, valid=valid, segment_ids=segment_ids, causal=True,
                                shape=tokens.shape, order=order)
    x = run_layers(self.config, self.layers, x, positions=positions, mask=mask, kv_valid=valid,
                    segment_ids=segment_ids, deterministic=deterministic)
    return self._logits(context_parallel.shard(order.restore(x)))

  def init_cache(self, batch: int, max_len: int, dtype=None) -> dict[str, Any]:
    """An empty decode cache for `max_len` tokens (prompt + generated)."""
    return _new_cache(self.layers, batch, max_len, dtype or self.config.compute_dtype)

  def decode_step(self, tokens, cache, *, token_mask=None) -> tuple[jax.Array, dict]:
    """Feeds tokens int[B, L] (a prompt, or L=1 while generating) and returns their logits.

    token_mask: bool[B, L], False at left padding of a prompt. Linear attention advances its
    recurrent (s, z) state: O(1) work per generated token.

    Returns:
      (float32 logits [B, L, V], the updated cache).
    """
    tokens = _check_ids(tokens, "tokens")
    embed = lambda ids, positions: self.embeddings(ids, positions=positions)
    x, cache = _decode(self.layers, embed, tokens, cache, token_mask)
    return self._logits(x), cache


# --------------------------------------------------------------------------------------
# Encoder-decoder (Sec. 4.1).
# --------------------------------------------------------------------------------------


class TransformerSeq2Seq(nnx.Module):
  """Transformer-base encoder-decoder with RoPE in both self-attentions (Sec. 4.1).

  Source and target share one vocabulary and one embedding table, which is also the output
  projection. Cross-attention has no RoPE (source and target positions are unrelated).
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    if cfg.attention != "softmax":
      raise ValueError("the encoder-decoder uses softmax attention; set attention='softmax'.")
    if cfg.embed_size != cfg.d_model:
      raise ValueError("the encoder-decoder ties embeddings and needs embedding_size == d_model.")
    self.config = cfg
    self.embeddings = Embedder(cfg, rngs=rngs)
    self.encoder = layer_stack(cfg, causal=False, cross=False, rngs=rngs)
    self.decoder = layer_stack(cfg, causal=True, cross=True, rngs=rngs)
    pre = cfg.norm == "pre"
    self.encoder_norm = layer_norm(cfg, cfg.d_model, rngs=rngs) if pre else None
    self.decoder_norm = layer_norm(cfg, cfg.d_model, rngs=rngs) if pre else None

  def encode(self, src_ids, *, src_mask=None, segment_ids=None, positions=None,
             deterministic: bool = True) -> jax.Array:
    """Encoder states [B, S, D].

    Args:
      src_ids: int[B, S].
      src_mask: bool[B, S], real source tokens (default: ids != pad_id, or segment_ids != 0).
      segment_ids: int[B, S] for packed rows (several sources per row, 0 = padding); tokens
        attend only within their own source.
      positions: int[B, S]; default counts real tokens (restarting per segment when packed).
    """
    src_ids = _check_ids(src_ids, "src_ids")
    valid = _valid_tokens(src_ids, src_mask, segment_ids) if (src_mask is not None or segment_ids is not None) \
        else src_ids != self.config.pad_id
    _check_context_parallel(self.config, src_ids.shape[1], causal=False, key="src_ids.shape[1]")
    if positions is None:
      positions = _default_positions(self.config, src_ids.shape, attention_mask=valid, segment_ids=segment_ids)
    x = self.embeddings(src_ids, positions=positions, deterministic=deterministic)
    mask = mask_factors(src_ids.shape[0], src_ids.shape[1], src_ids.shape[1], kv_valid=valid,
                        q_segment_ids=segment_ids)
    x = run_layers(self.config, self.encoder, x, positions=positions, mask=mask, deterministic=deterministic)
    return x if self.encoder_norm is None else self.encoder_norm(x).astype(self.config.compute_dtype)

  def _logits(self, h):
    if self.decoder_norm is not None:
      h = self.decoder_norm(h).astype(self.config.compute_dtype)
    return self.embeddings.attend(h)

  def decode(self, tgt_ids, encoded, *, src_mask, tgt_mask=None, src_segment_ids=None,
             tgt_segment_ids=None, positions=None, deterministic: bool = True) -> jax.Array:
    """Teacher-forced decoder logits float32 [B, T, V] for target inputs int[B, T].

    Packed rows pass src_segment_ids and tgt_segment_ids (the same number for a source and
    its target, 0 = padding): each target token then attends to earlier tokens of its own
    target and to its own source only. positions: int[B, T], default per target.
    """
    tgt_ids = _check_ids(tgt_ids, "tgt_ids")
    if (src_segment_ids is None) != (tgt_segment_ids is None):
      raise ValueError("packed decoding needs both src_segment_ids and tgt_segment_ids (or neither).")
    valid = None if tgt_mask is None else jnp.asarray(tgt_mask, bool)
    if tgt_segment_ids is not None:
      valid = _valid_tokens(tgt_ids, tgt_mask, tgt_segment_ids)
    _check_context_parallel(self.config, tgt_ids.shape[1], causal=True, key="tgt_ids.shape[1]")
    if positions is None:
      positions = _default_positions(self.config, tgt_ids.shape, attention_mask=valid, segment_ids=tgt_segment_ids)
    (b, t), s = tgt_ids.shape, encoded.shape[1]
    order = context_parallel.Order(t, causal=True)  # zig-zag under context parallelism (see CausalLM)
    tgt_ids, positions, valid, tgt_segment_ids = map(order.permute, (tgt_ids, positions, valid, tgt_segment_ids))
    x = self.embeddings(tgt_ids, positions=positions, deterministic=deterministic)
    slots = order.slots(b)
    mask = mask_factors(b, t, t, kv_valid=valid, q_segment_ids=tgt_segment_ids, causal=True, q_index=slots,
                        kv_index=slots)
    cross_mask = mask_factors(b, t, s, kv_valid=jnp.asarray(src_mask, bool), q_segment_ids=tgt_segment_ids,
                              kv_segment_ids=src_segment_ids)
    x = run_layers(self.config, self.decoder, x, positions=positions, mask=mask, context=encoded,
                    context_mask=cross_mask, deterministic=deterministic)
    return self._logits(context_parallel.shard(order.restore(x)))

  def __call__(self, src_ids, tgt_ids, *, src_mask=None, tgt_mask=None, src_segment_ids=None,
               tgt_segment_ids=None, src_positions=None, tgt_positions=None, deterministic: bool = True):
    """Logits [B, T, V]; packed rows pass both segment id arrays (see `decode`)."""
    src_ids = _check_ids(src_ids, "src_ids")
    if src_mask is None:
      src_mask = (src_ids != self.config.pad_id) if src_segment_ids is None else jnp.asarray(src_segment_ids) != 0
    encoded = self.encode(src_ids, src_mask=src_mask, segment_ids=src_segment_ids, positions=src_positions,
                          deterministic=deterministic)
    return self.decode(tgt_ids, encoded, src_mask=src_mask, tgt_mask=tgt_mask, src_segment_ids=src_segment_ids,
                       tgt_segment_ids=tgt_segment_ids, positions=tgt_positions, deterministic=deterministic)

  def init_cache(self, encoded, src_mask, max_len: int, dtype=None) -> dict[str, Any]:
    """A decode cache holding each layer's cross-attention keys/values of `encoded`."""
    b = encoded.shape[0]
    cache = _new_cache(self.decoder, b, max_len, dtype or self.config.compute_dtype)
    for layer, layer_cache in zip(self.decoder, cache["layers"], strict=True):
      layer_cache["cross"] = cross_kv(layer.cross_attention, encoded)
    cache["src_valid"] = jnp.asarray(src_mask, bool)
    return cache

  def decode_step(self, tgt_ids, cache, *, token_mask=None) -> tuple[jax.Array, dict]:
    """Incremental decoder step: (float32 logits [B, L, V], updated cache)."""
    tgt_ids = _check_ids(tgt_ids, "tgt_ids")
    embed = lambda ids, positions: self.embeddings(ids, positions=positions)
    x, new_cache = _decode(self.decoder, embed, tgt_ids, cache, token_mask,
                           cross_mask=cache["src_valid"][:, None, None, :])
    return self._logits(x), new_cache


_STATIC_TYPES = (bool, int, float, str, type(None))  # keyword values models.jitted compiles in


def jitted(model: nnx.Module, method: str = "__call__"):
  """`model.<method>` as a compiled function of its inputs: the fast path for inference.

  `nnx.jit(lambda m, x: m(x))(model, x)` flattens every state array of the model on each call
  (a 4-layer encoder at B=8, T=8: 12.1 vs 4.8 ms per call on a 2-core AMD EPYC, B9 in
  docs/benchmarks.md).
  This splits the model once, keeps its arrays as a flat list, and compiles the method once
  per input shape with `jax.jit`:

      encode = models.jitted(model, "encode")      # or models.jitted(lm) for lm(tokens)
      hidden = encode(ids, attention_mask=mask)

  Positional arguments and array keyword arguments are traced; other keyword values (bools
  such as `deterministic`, ints, strings, None) are static, and each new value compiles once.
  The weights are those of the model at this call: after changing them (training, loading),
  call `jitted` again. State the method writes (an RNG counter of dropout, a decoding cache
  kept on the model) is not written back: use it for inference with `deterministic=True`,
  the default.
  """
  if not callable(getattr(model, method, None)):
    raise ValueError(f"method={method!r}: {type(model).__name__} has no such method; expected e.g. '__call__' "
                     "or 'encode'.")
  graphdef, state = nnx.split(model)
  leaves, treedef = jax.tree.flatten(state)

  @functools.partial(jax.jit, static_argnums=(1,))
  def run(leaves, static_kwargs, args, array_kwargs):
    model = nnx.merge(graphdef, jax.tree.unflatten(treedef, leaves))
    return getattr(model, method)(*args, **dict(static_kwargs), **array_kwargs)

  def call(*args, **kwargs):
    static, arrays = [], {}
    for k, v in kwargs.items():
      if isinstance(v, _STATIC_TYPES):
        static.append((k, v))
      else:
        arrays[k] = v
    return run(leaves, tuple(sorted(static)), args, arrays)

  call.__doc__ = f"{type(model).__name__}.{method}, compiled (roformer_jax.models.jitted)."
  return call
