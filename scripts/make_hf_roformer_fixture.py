"""Tiny HF RoFormer checkpoints for the tests, and a check of our exports against transformers.

What it makes (default mode)
----------------------------
``tests/fixtures/hf_roformer_tiny/<name>/``, one directory per fixture, each holding what
transformers' ``RoFormerForMaskedLM.save_pretrained(safe_serialization=True)`` writes
(``config.json``, ``model.safetensors``) plus ``reference.npz``:

* ``factorized``: embedding_size 24 != hidden_size 32 (exercises ``embeddings_project``),
  tied embeddings, ``hidden_act="gelu"``, rotary_value False.
* ``rotary_value``: embedding_size == hidden_size, ``rotary_value=True``, untied output
  embeddings (``cls.predictions.decoder.*``), ``hidden_act="gelu_new"``, 3 token types.

Both: vocab 128, 2 layers, 4 heads (head dim 8), intermediate 37, max_position_embeddings
640. Every weight is redrawn (seeded) at a scale where attention is peaked, so a wrong RoPE,
a skipped projection or a swapped bias shows up far above 1e-4.

``reference.npz`` (float32 outputs of the HF model in eval mode, torch's default float32):

* ``input_ids``, ``attention_mask``, ``token_type_ids``: int32[3, 520]. Row 0 is full
  length, row 1 right-padded (300 real tokens), row 2 left-padded (411 real tokens);
  token types are nonzero.
* ``last_hidden_state``: float32[3, 520, 32], ``model.roformer(...)`` on all slots (HF
  rotates slot t by position t).
* ``logit_positions``: int32[M]; ``logits``: float32[3, M, 128], the MLM logits at those
  slots (a subset, to keep the fixture small).
* ``transformers_version``, ``torch_version``: str.

Checking our exports (two steps, two interpreters)
--------------------------------------------------
1. In the project venv (JAX, no torch), write random JAX models with
   ``roformer_jax.hf.save_pretrained`` plus the JAX outputs (``jax_outputs.npz``)::

       .venv/bin/python scripts/make_hf_roformer_fixture.py --write-export /tmp/roformer_export

   or, for checkpoints export.py wrote from trained runs, put them under one directory and add
   the JAX outputs to each::

       .venv/bin/python scripts/make_hf_roformer_fixture.py --outputs-for /tmp/roformer_export/<run> ...

2. In the torch venv, load each directory with transformers (no missing/unexpected keys
   allowed) and compare its outputs with the JAX ones; exits 1 above 1e-4::

       /tmp/hfvenv/bin/python scripts/make_hf_roformer_fixture.py --check-export /tmp/roformer_export

How to run
----------
From the repository root::

    /tmp/hfvenv/bin/python scripts/make_hf_roformer_fixture.py

where the venv is created with (CPU torch is enough; neither is a project dependency)::

    python3.11 -m venv /tmp/hfvenv
    /tmp/hfvenv/bin/pip install torch==2.13.0 transformers==5.23.0 safetensors numpy

The output is deterministic for fixed torch/transformers versions (seeded torch and NumPy,
float32 on CPU).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(REPO_ROOT, "tests", "fixtures", "hf_roformer_tiny")
SEED = 20240612
TOL = 1e-4

COMMON = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
              max_position_embeddings=640, layer_norm_eps=1e-12, pad_token_id=0)
FIXTURES = {
    "factorized": dict(COMMON, embedding_size=24, type_vocab_size=2, hidden_act="gelu", rotary_value=False,
                       tie_word_embeddings=True),
    "rotary_value": dict(COMMON, type_vocab_size=3, hidden_act="gelu_new", rotary_value=True,
                         tie_word_embeddings=False),
}
BATCH, LENGTH = 3, 520
REAL_LENGTHS = (520, 300, 411)  # row 1 right-padded, row 2 left-padded
LEFT_PADDED = (False, False, True)
NUM_LOGIT_POSITIONS = 48


def make_inputs(rng, vocab_size, type_vocab_size, batch=BATCH, length=LENGTH, real=REAL_LENGTHS,
                left=LEFT_PADDED):
    """int32 input_ids, attention_mask, token_type_ids [batch, length]; padding id 0, type 0."""
    ids = np.zeros((batch, length), np.int32)
    mask = np.zeros((batch, length), np.int32)
    types = np.zeros((batch, length), np.int32)
    for b in range(batch):
        n = real[b]
        start = length - n if left[b] else 0
        ids[b, start:start + n] = rng.integers(1, vocab_size, size=n)
        mask[b, start:start + n] = 1
        # contiguous segments 0, 1, ..., type_vocab_size - 1 over the real tokens
        types[b, start:start + n] = (np.arange(n) * type_vocab_size) // n
    return ids, mask, types


def logit_positions(rng, length=LENGTH, real=REAL_LENGTHS, count=NUM_LOGIT_POSITIONS):
    edges = {0, 1, length - 1, length - 2}
    for n in real:
        edges |= {n - 1, n, length - n - 1, length - n}
    edges = {p for p in edges if 0 <= p < length}
    extra = rng.choice(np.setdiff1d(np.arange(length), sorted(edges)), size=count - len(edges), replace=False)
    return np.sort(np.concatenate([sorted(edges), extra])).astype(np.int32)


# ----------------------------------------------------------------------------- fixtures (torch)


def randomize_(model, generator):
    """Redraws every weight (seeded) so nothing is a trivial zero/one and attention is peaked."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:  # HF's fixed sinusoidal table: keep it
                continue
            noise = torch.randn(p.shape, generator=generator, dtype=p.dtype)
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif "embeddings.weight" in name:
                p.copy_(noise)
            else:  # nn.Linear weight [out, in]
                gain = 2.0 if name.endswith(("query.weight", "key.weight")) else 1.0
                p.copy_(noise * gain / math.sqrt(p.shape[1]))


def make_fixture(name, hf_kwargs, rng, generator):
    import torch
    import transformers
    from transformers import RoFormerConfig, RoFormerForMaskedLM

    out = os.path.join(OUT_DIR, name)
    model = RoFormerForMaskedLM(RoFormerConfig(**hf_kwargs))
    randomize_(model, generator)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)

    ids, mask, types = make_inputs(rng, hf_kwargs["vocab_size"], hf_kwargs["type_vocab_size"])
    positions = logit_positions(rng)
    # Reload from disk: the reference is what the files produce.
    loaded, info = RoFormerForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    loaded.eval()
    t = lambda a: torch.from_numpy(a.astype(np.int64))
    with torch.no_grad():
        kw = dict(attention_mask=t(mask), token_type_ids=t(types))
        hidden = loaded.roformer(t(ids), **kw).last_hidden_state.numpy()
        logits = loaded(t(ids), **kw).logits.numpy()
        same = model(t(ids), **kw).logits.numpy()
    assert np.array_equal(logits, same), "reloaded model differs from the saved one"
    assert hidden.dtype == logits.dtype == np.float32
    np.savez_compressed(
        os.path.join(out, "reference.npz"),
        input_ids=ids, attention_mask=mask, token_type_ids=types,
        last_hidden_state=hidden, logit_positions=positions,
        logits=np.ascontiguousarray(logits[:, positions]),
        transformers_version=np.array(transformers.__version__), torch_version=np.array(torch.__version__))
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"wrote {out}: {size / 1024:.1f} KiB", file=sys.stderr)


def make_fixtures():
    import torch

    assert torch.get_default_dtype() == torch.float32
    torch.manual_seed(SEED)
    generator = torch.Generator().manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    for name, kwargs in FIXTURES.items():
        make_fixture(name, kwargs, rng, generator)


# ----------------------------------------------------------------------------- export check, JAX side


EXPORTS = {
    # name: (model class name, ModelConfig overrides, num_labels)
    "mlm_factorized": ("RoFormerForMaskedLM", dict(embedding_size=24, activation="gelu"), None),
    "mlm_untied_rotary_value": ("RoFormerForMaskedLM", dict(rotary_value=True, tie_embeddings=False,
                                                            activation="gelu_new", type_vocab_size=3), None),
    "encoder_relu": ("RoFormerModel", dict(activation="relu", embedding_size=20), None),
    "classifier_silu": ("RoFormerForSequenceClassification", dict(activation="silu", rotary_value=True), 3),
}
EXPORT_BASE = dict(vocab_size=96, d_model=32, num_layers=2, num_heads=4, d_ff=40, max_position=256)
EXPORT_BATCH, EXPORT_LENGTH = 2, 100


def randomize_jax_(model, seed):
    """The JAX twin of `randomize_`: redraws every parameter in place (seeded)."""
    from flax import nnx

    rng = np.random.default_rng(seed)
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        shape = var.get_value().shape
        noise = rng.standard_normal(shape).astype(np.float32)
        leaf = path[-1]
        if leaf == "scale":
            value = 1.0 + 0.2 * noise
        elif leaf == "bias":
            value = 0.1 * noise
        elif leaf == "embedding":
            value = noise
        else:  # kernels [in..., out...]; q/k/v kernels are [D, N, H]
            qkv = path[-2] in ("query", "key", "value")
            fan_in = shape[0] if qkv else math.prod(shape[:-1])
            gain = 2.0 if path[-2] in ("query", "key") else 1.0
            value = noise * gain / math.sqrt(fan_in)
        var.set_value(value.astype(var.get_value().dtype))


def write_outputs(d, rng):
    """(project venv) d/jax_outputs.npz: the outputs of the checkpoint directory d as
    roformer_jax reads it, on padded rows with token types, for --check-export to compare."""
    import jax.numpy as jnp
    from flax import nnx

    from roformer_jax import hf, models

    @nnx.jit
    def forward(model, ids, mask, types, positions):
        kw = dict(attention_mask=mask, token_type_ids=types, positions=positions)
        hidden = model.encode(ids, **kw)
        return hidden, (None if isinstance(model, models.RoFormerModel) else model(ids, **kw))

    model = hf.from_pretrained(d)
    cfg = model.config
    length = min(EXPORT_LENGTH, cfg.max_position)
    ids, mask, types = make_inputs(rng, cfg.vocab_size, cfg.type_vocab_size, batch=EXPORT_BATCH,
                                   length=length, real=(length, length * 61 // 100), left=(False, False))
    positions = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), ids.shape)  # HF's slots
    hidden, logits = forward(model, ids, mask, types, positions)
    arrays = dict(input_ids=ids, attention_mask=mask, token_type_ids=types, last_hidden_state=np.asarray(hidden))
    if logits is not None:
        arrays["logits"] = np.asarray(logits)
    np.savez(os.path.join(d, "jax_outputs.npz"), **arrays)
    return model


def write_export(out_dir, names=None):
    from flax import nnx

    from roformer_jax import hf, models

    rng = np.random.default_rng(SEED + 1)
    for i, (name, (cls_name, overrides, num_labels)) in enumerate(EXPORTS.items()):
        if names is not None and name not in names:
            continue
        cfg = models.ModelConfig(**{**EXPORT_BASE, **overrides})
        cls = getattr(models, cls_name)
        args = (num_labels,) if num_labels else ()
        # Parameters only (no random init, which is slow); save, and run what loads back.
        abstract = nnx.eval_shape(lambda cls=cls, cfg=cfg, args=args: cls(cfg, *args, rngs=nnx.Rngs(0)))
        randomize_jax_(abstract, SEED + 10 + i)
        d = os.path.join(out_dir, name)
        hf.save_pretrained(abstract, d)
        model = write_outputs(d, rng)
        assert type(model) is cls and model.config == cfg
        print(f"wrote {d} ({cls_name})", file=sys.stderr)


# ----------------------------------------------------------------------------- export check, torch side


def check_export(out_dir):
    import torch
    import transformers

    worst = 0.0
    names = sorted(n for n in os.listdir(out_dir) if os.path.isfile(os.path.join(out_dir, n, "jax_outputs.npz")))
    if not names:
        raise SystemExit(f"no <name>/jax_outputs.npz under {out_dir}; run --write-export first.")
    for name in names:
        d = os.path.join(out_dir, name)
        with open(os.path.join(d, "config.json")) as f:
            arch = json.load(f)["architectures"][0]
        cls = getattr(transformers, arch)
        model, info = cls.from_pretrained(d, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        if bad:
            raise SystemExit(f"{name}: transformers reported loading problems: {bad}")
        model.eval()
        ref = np.load(d + "/jax_outputs.npz")
        t = lambda a: torch.from_numpy(np.asarray(a, np.int64))
        kw = dict(attention_mask=t(ref["attention_mask"]), token_type_ids=t(ref["token_type_ids"]))
        with torch.no_grad():
            base = model if arch == "RoFormerModel" else model.roformer
            hidden = base(t(ref["input_ids"]), **kw).last_hidden_state.numpy()
            errs = {"hidden": float(np.abs(hidden - ref["last_hidden_state"]).max())}
            real = ref["attention_mask"].astype(bool)
            errs["hidden_real"] = float(np.abs(hidden - ref["last_hidden_state"])[real].max())
            if "logits" in ref.files:
                logits = model(t(ref["input_ids"]), **kw).logits.numpy()
                errs["logits"] = float(np.abs(logits - ref["logits"]).max())
        scale = float(np.abs(ref["last_hidden_state"]).max())
        print(f"{name:26s} {arch:34s} " + "  ".join(f"{k} {v:.2e}" for k, v in errs.items())
              + f"  (|hidden| max {scale:.2f})")
        worst = max(worst, *errs.values())
    print(f"max abs error over all exports: {worst:.3e} (tolerance {TOL:g})")
    return 0 if worst <= TOL else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write-export", metavar="DIR", help="(project venv) save random JAX models + outputs into DIR")
    group.add_argument("--outputs-for", metavar="DIR", nargs="+",
                       help="(project venv) write jax_outputs.npz into each checkpoint DIR (e.g. export.py's --out)")
    group.add_argument("--check-export", metavar="DIR", help="(torch venv) compare DIR's exports with transformers")
    args = parser.parse_args()
    if args.write_export:
        write_export(args.write_export)
        return 0
    if args.outputs_for:
        rng = np.random.default_rng(SEED + 2)
        for d in args.outputs_for:
            write_outputs(d, rng)
            print(f"wrote {os.path.join(d, 'jax_outputs.npz')}", file=sys.stderr)
        return 0
    if args.check_export:
        return check_export(args.check_export)
    make_fixtures()
    return 0


if __name__ == "__main__":
    sys.exit(main())
