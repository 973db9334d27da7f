"""Context parallelism on 8 fake CPU devices: a (data=2, context=4) mesh gives the loss and
gradients of one device, for each model family, with packing and left padding.

The reference is the same model run unsharded on one device (no mesh in context). A shard
that rotated with its local positions, a causal mask on permuted slots, or a lost K/V shard
would each change the loss (`test_the_comparison_can_fail`).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from roformer_jax import context_parallel as cp
from roformer_jax import mesh as mesh_lib
from roformer_jax import models as M

TINY = dict(d_model=32, num_layers=2, num_heads=4, d_ff=64, dropout=0.0, attention_dropout=0.0, vocab_size=50,
            max_position=128)
B, T = 4, 32


def _batch(kind, seed=0):
  rng = np.random.default_rng(seed)
  if kind == "packed":
    seg = np.sort(rng.integers(0, 4, (B, T)), axis=1).astype(np.int32)
    seg[:, 0] = np.maximum(seg[:, 0], 1)
    ids = np.where(seg != 0, rng.integers(3, 50, (B, T)), 0).astype(np.int32)
    return {"ids": ids, "seg": seg, "weights": (seg != 0).astype(np.float32)}
  # left padding: row i starts after 3 * i pad tokens; positions count real tokens only.
  valid = np.arange(T)[None, :] >= 3 * np.arange(B)[:, None]
  ids = np.where(valid, rng.integers(3, 50, (B, T)), 0).astype(np.int32)
  return {"ids": ids, "valid": valid, "weights": valid.astype(np.float32)}


# Per-layer attention (issue 26): a sliding-window layer of 4 keys (the shards hold T / C = 8
# tokens, so windows cross shard boundaries) and a layer without RoPE, or a global one. Larger
# initial weights than TINY's make attention peaked enough that the window changes the loss.
WINDOW_LAYERS = {
    "lm": dict(layer_types=("w", "n"), layer_settings={"w": {"window": 4}, "n": {"rope": "none"}}, init_std=0.3),
    "mlm": dict(layer_types=("w", "g"), layer_settings={"w": {"window": 4}, "g": {"rope": {"theta": 1e6}}},
                init_std=0.3),
}


def _model(family, impl, layers=None):
  cfg = M.ModelConfig(**TINY, attention_implementation=impl, **(layers or {}))
  rngs = nnx.Rngs(0)
  return {"lm": M.CausalLM, "mlm": M.RoFormerForMaskedLM, "seq2seq": M.TransformerSeq2Seq}[family](cfg, rngs=rngs)


def _call(family, model, batch):
  ids = batch["ids"]
  if family == "seq2seq":
    if "seg" in batch:
      return model(ids, ids, src_segment_ids=batch["seg"], tgt_segment_ids=batch["seg"])
    return model(ids, ids, src_mask=batch["valid"], tgt_mask=batch["valid"])
  if "seg" in batch:
    return model(ids, segment_ids=batch["seg"])
  return model(ids, attention_mask=batch["valid"])


def _loss_and_grads(family, impl, batch, mesh=None, layers=None):
  graphdef, params, rest = nnx.split(_model(family, impl, layers), nnx.Param, ...)

  def loss(params, batch):
    logits = _call(family, nnx.merge(graphdef, params, rest), batch)
    logp = jax.nn.log_softmax(logits, -1)
    return -jnp.sum(jnp.take_along_axis(logp, batch["ids"][..., None], -1)[..., 0] * batch["weights"])

  fn = jax.jit(jax.value_and_grad(loss))
  if mesh is None:
    return fn(params, batch)
  with jax.set_mesh(mesh):
    sharded = jax.device_put(batch, NamedSharding(mesh, P(mesh_lib.BATCH_AXES)))
    return fn(params, sharded)


def _assert_same(a, b, rtol=1e-5):
  (va, ga), (vb, gb) = a, b
  np.testing.assert_allclose(float(vb), float(va), rtol=rtol)
  scale = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(ga))  # the gradient's overall scale
  for (path, x), y in zip(jax.tree.leaves_with_path(ga), jax.tree.leaves(gb), strict=True):
    err = float(jnp.abs(x - y).max())
    assert err <= rtol * max(float(jnp.abs(x).max()), 0.01 * scale), (jax.tree_util.keystr(path), err)


@pytest.fixture(scope="module")
def mesh():
  return mesh_lib.make_mesh({"data": 2, "context": 4})


@pytest.mark.slow  # whole models on an 8-device mesh against one device
@pytest.mark.parametrize("family,impl,kind", [
    ("lm", "chunked", "packed"), ("lm", "xla", "left_padded"), ("mlm", "chunked", "left_padded"),
    ("seq2seq", "chunked", "packed"),  # each family; both kernels; packing and left padding
])
def test_data2_context4_equals_one_device(mesh, family, impl, kind):
  batch = _batch(kind)
  _assert_same(_loss_and_grads(family, impl, batch), _loss_and_grads(family, impl, batch, mesh))


@pytest.mark.slow
@pytest.mark.parametrize("family,impl,kind", [("lm", "chunked", "packed"), ("lm", "xla", "left_padded"),
                                              ("mlm", "chunked", "left_padded"), ("mlm", "xla", "packed")])
def test_window_layers_on_context4_equal_one_device(mesh, family, impl, kind):
  """Sliding-window layers (and layers without RoPE, or with their own theta) split over the
  context axis give the loss and gradients of one device; the window really masks (the same
  model without windows gives another loss)."""
  batch = _batch(kind, seed=1)
  layers = WINDOW_LAYERS[family]
  one = _loss_and_grads(family, impl, batch, layers=layers)
  # rtol 1e-4: the larger weights give gradients of ~50, and the key bias's (zero in exact
  # arithmetic: softmax ignores it) float32 noise reaches 5e-6
  _assert_same(one, _loss_and_grads(family, impl, batch, mesh, layers=layers), rtol=1e-4)
  unwindowed = {**layers, "layer_settings": {**layers["layer_settings"], "w": {}}}
  assert abs(float(_loss_and_grads(family, impl, batch, layers=unwindowed)[0]) / float(one[0]) - 1) > 2e-4


def test_the_comparison_can_fail(mesh, monkeypatch):
  """Were each shard to rotate with positions counted from its own first token, the loss
  would change: the equivalence above really checks the global phases."""
  batch = _batch("left_padded")
  one = _loss_and_grads("mlm", "xla", batch)
  original = M.positional.default_positions

  def local_positions(shape, **kw):  # per-shard positions: restart every T / C tokens
    return original(shape, **kw) % (shape[1] // 4)

  monkeypatch.setattr(M.positional, "default_positions", local_positions)
  wrong = _loss_and_grads("mlm", "xla", batch, mesh)
  with pytest.raises(AssertionError):
    _assert_same(one, wrong)


def test_activations_are_sharded_and_attention_gathers_over_context(mesh):
  """The compiled step splits the sequence: per-device hidden states are T / 4 long, and
  the K/V all-gathers run over the context axis."""
  batch = _batch("packed")
  graphdef, params, rest = nnx.split(_model("lm", "chunked"), nnx.Param, ...)

  def hidden(params, batch):
    model = nnx.merge(graphdef, params, rest)
    x = model.embeddings(batch["ids"], positions=jnp.zeros_like(batch["ids"]))
    return cp.shard(x)

  with jax.set_mesh(mesh):
    sharded = jax.device_put(batch, NamedSharding(mesh, P(mesh_lib.BATCH_AXES)))
    x = jax.jit(hidden)(params, sharded)
    assert {s.data.shape for s in x.addressable_shards} == {(B // 2, T // 4, TINY["d_model"])}
    fn = jax.jit(jax.grad(lambda p, b: jnp.sum(_call("lm", nnx.merge(graphdef, p, rest), b))))
    hlo = fn.lower(params, sharded).compile().as_text()
  assert "all-gather" in hlo


def test_zigzag_order_balances_causal_work():
  for t, c in [(16, 2), (64, 4), (64, 8)]:
    order = cp.zigzag_order(t, c)
    assert sorted(order.tolist()) == list(range(t))
    shards = order.reshape(c, t // c)
    work = [int(sum(s + 1 for s in shard)) for shard in shards]  # causal keys seen by each shard's queries
    assert len(set(work)) == 1, work
    contiguous = [int(sum(s + 1 for s in shard)) for shard in np.arange(t).reshape(c, t // c)]
    assert max(contiguous) / min(contiguous) > 2


def test_lengths_that_do_not_split_are_refused_clearly(mesh):
  batch = _batch("packed")
  batch = {k: v[:, :28] for k, v in batch.items()}  # 28 is not a multiple of 2 x 4
  with pytest.raises(ValueError, match=r"^tokens.shape\[1\]=28 is not a multiple of 8: mesh.context=4 .*e.g. 32 or 24"):
    _loss_and_grads("lm", "chunked", batch, mesh)
  cfg = dict(TINY, attention="linear")
  model = M.CausalLM(M.ModelConfig(**cfg), rngs=nnx.Rngs(0))
  with jax.set_mesh(mesh), pytest.raises(ValueError, match="needs softmax attention"):
    model(jnp.asarray(batch["ids"]))


# (length, causal, context, the multiple the rule requires). Bidirectional rows need C pieces;
# causal rows 2C chunks (the zig-zag pairs chunks i and 2C - 1 - i); C = 1 accepts any length.
RULE = [(36, False, 4, 4), (36, True, 4, 8), (40, True, 4, 8), (30, False, 4, 4), (28, True, 4, 8),
        (12, True, 3, 6), (9, False, 3, 3), (10, False, 3, 3), (7, True, 1, 1), (7, False, 1, 1), (32, True, 8, 16)]


def test_the_length_rule_and_its_message():
  for length, causal, c, need in RULE:
    assert cp.required_multiple(c, causal=causal) == need, (length, causal, c)
    key = "config.data.max_target_length" if causal else "config.data.max_length"
    if length % need == 0:
      cp.check_length(length, causal=causal, key=key, context=c)  # accepted
      continue
    up = length + (-length % need)
    with pytest.raises(ValueError) as e:
      cp.check_length(length, causal=causal, key=key, context=c)
    message = str(e.value)
    # The key and its value, the multiple, why (zig-zag for causal rows), and a length that works.
    assert message.startswith(f"{key}={length} is not a multiple of {need}: mesh.context={c} "), message
    assert ("zig-zag" in message) == causal, message
    assert f"e.g. {up}" in message, message


def test_check_length_reads_the_context_axis_of_the_mesh_in_context(mesh):
  with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
    cp.check_length(36, causal=False, key="src_ids.shape[1]")
    with pytest.raises(ValueError, match=r"^tgt_ids.shape\[1\]=36 is not a multiple of 8: mesh.context=4 "):
      cp.check_length(36, causal=True, key="tgt_ids.shape[1]")


def test_evaluation_splits_bidirectional_rows_at_a_multiple_of_c(mesh, monkeypatch):
  """eval.py's length curve splits an MLM row of 36 tokens over context=4 (9 per device; the
  old rule asked 2C = 8 of every row and ran it unsplit), with one device's loss; a causal LM
  row of 36 cannot be split into 2 x 4 chunks and runs unsplit on the same mesh."""
  import ml_collections
  from roformer_jax.training import trainer
  from roformer_jax.evaluation import evaluate

  length, rng = 36, np.random.default_rng(0)
  ids = rng.integers(3, 50, (B, length + 1)).astype(np.int32)
  ones = np.ones((B, length), np.int32)
  positions = np.broadcast_to(np.arange(length, dtype=np.int32), (B, length)).copy()
  batches = {"mlm": {"inputs": ids[:, :-1], "targets": ids[:, 1:], "weights": ones.astype(np.float32),
                     "segment_ids": ones, "positions": positions},
             "lm": {"inputs": ids[:, :-1], "targets": ids[:, 1:], "weights": ones.astype(np.float32),
                    "segment_ids": ones, "positions": positions}}
  split = []
  original = trainer.step_context
  monkeypatch.setattr(trainer, "step_context", lambda m, rules: (split.append(m is not None), original(m, rules))[1])
  monkeypatch.setattr(evaluate, "_batches", lambda config, *a: iter([batches[config.task]]))
  settings = {"length_factors": (1,), "split": "validation", "length_batches": 1}
  for task, splits in (("mlm", True), ("lm", False)):
    config = ml_collections.ConfigDict(dict(
        task=task, model=dict(TINY), data=dict(max_length=length, max_target_length=0),
        logical_axis_rules=[list(rule) for rule in mesh_lib.DEFAULT_RULES]))
    family = {"mlm": M.RoFormerForMaskedLM, "lm": M.CausalLM}[task]
    graphdef, state = nnx.split(family(M.ModelConfig(**TINY), rngs=nnx.Rngs(0)))
    split.clear()
    (row,) = evaluate._length_curve(config, graphdef, state, mesh, settings, B)
    assert split == [splits], (task, split)
    one_device = mesh_lib.make_mesh({"data": 2}, jax.devices()[:2])
    (ref,) = evaluate._length_curve(config, graphdef, state, one_device, settings, B)
    np.testing.assert_allclose(row["loss"], ref["loss"], rtol=1e-5)


@pytest.mark.parametrize("heads_rule,local_heads", [("tensor", 2), (None, 4)])
def test_the_wrapper_shards_heads_by_the_logical_heads_rule(heads_rule, local_heads):
  """The context-parallel wrapper splits heads over what the "heads" rule names (the config's
  rules table), never over a mesh axis it names itself, and equals one device's attention."""
  from roformer_jax.attention import dot_product_attention, mask_factors
  from roformer_jax.attention.sharded import context_parallel_attention

  mesh = mesh_lib.make_mesh({"data": 2, "context": 2, "tensor": 2})
  rules = tuple((name, heads_rule if name == "heads" else axes) for name, axes in mesh_lib.DEFAULT_RULES)
  q, k, v = jax.random.normal(jax.random.key(0), (3, 2, 8, 4, 8))
  seen = []

  def kernel(q, k, v, **kw):  # the wrapper takes the kernel as an argument
    seen.append(q.shape[2])
    return dot_product_attention(q, k, v, **kw)

  mask = mask_factors(2, 8, 8, causal=True)
  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    out = jax.jit(lambda q, k, v: context_parallel_attention(kernel, q, k, v, mask=mask))(q, k, v)
  assert set(seen) == {local_heads}, seen
  np.testing.assert_allclose(np.asarray(out), np.asarray(dot_product_attention(q, k, v, is_causal=True)), atol=1e-5)
