"""bench/gpu_mlm.py (B3) on the CPU: the plumbing, the batches and the RoPE ablation.

The figures themselves need a GPU; these tests check that the script runs end to end, that
its variants compute what they claim, and that its FLOP count agrees with XLA's."""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)
import gpu_mlm  # noqa: E402

from roformer_jax import models  # noqa: E402


@pytest.mark.slow
def test_smoke_run_end_to_end(tmp_path, capsys, monkeypatch):
  out = tmp_path / "b3.json"
  monkeypatch.setenv("ROFORMER_BENCH_RESULTS", str(tmp_path / "results"))
  # Every variant but those that only change a config field of another's step ("config":
  # "bert-dropout"'s with other rates; "fused-qkv", "gelu-tanh", "gelu-saved": "auto"'s): one compile less
  # each; test_variant_configs checks their settings.
  variants = [v for v in gpu_mlm.VARIANTS if v not in ("config", "fused-qkv", "gelu-tanh", "gelu-saved")]
  assert gpu_mlm.main(["--smoke", "--variants", ",".join(variants), "--rounds", "1", "--warmup", "0",
                       "--json-out", str(out), "--record"]) == 0
  summary = json.loads(out.read_text())
  assert summary["smoke"] and list(summary["rows"]) == variants
  rows = summary["rows"]
  assert all(r["attention_kernel"] == "xla" and r["tokens_per_s"] > 0 for r in rows.values())  # CPU
  # "auto" and "xla" are the same computation on a CPU: same weights, batch and first loss.
  assert summary["loss_check"]["rel_diff"] < 1e-6
  flops = summary["flops_per_token"]
  # Our count vs XLA's for the sharded bf16 step (XLA also counts the casts, softmax, GELU and
  # LayerNorm; tests/test_metrics.py checks the formula to 5% on a float32 step).
  assert flops["model"] == pytest.approx(flops["xla"], rel=0.15)
  assert summary["peak"] is None and "mfu" not in rows["auto"]  # a CPU has no bf16 peak here
  printed = capsys.readouterr().out
  assert "RoPE share of the step" in printed and "--smoke: plumbing only" in printed
  # --record: a smoke run never overwrites the GPU figures (its own file name)
  recorded = json.loads((tmp_path / "results" / "gpu_mlm_smoke.json").read_text())
  ids = {f["id"] for f in recorded["figures"]}
  assert {"B3.auto.tokens_per_s", "B3.rope_share", "B3.xla.compile_s"} <= ids
  assert "RoPE share" in recorded["table"]
  assert "python bench/gpu_mlm.py --smoke" in recorded["command"]  # not pytest's command line


def test_variant_configs():
  config = gpu_mlm.load_config(True, batch=2, seq=16)
  dropouts = {name: (c.model.dropout, c.model.attention_dropout, c.model.attention_implementation)
              for name in gpu_mlm.VARIANTS for c in [gpu_mlm.variant_config(config, name)]}
  assert dropouts["auto"] == (0.0, 0.0, "auto") and dropouts["xla"] == (0.0, 0.0, "xla")
  assert dropouts["bert-dropout"] == (0.1, 0.1, "auto")
  # "config" is configs/bert_base_mlm.py's own: hidden dropout 0.1, attention dropout 0 (cuDNN)
  assert dropouts["config"] == (0.1, 0.0, "auto") and config.data.document_mask is False
  fields = {name: (c.model.fused_qkv, c.model.activation)
            for name in gpu_mlm.VARIANTS for c in [gpu_mlm.variant_config(config, name)]}
  assert fields["fused-qkv"] == (True, "gelu") and fields["gelu-tanh"] == (False, "gelu_new")
  assert fields["gelu-saved"] == (False, "gelu_saved")
  others = [name for name in gpu_mlm.VARIANTS if name not in ("fused-qkv", "gelu-tanh", "gelu-saved")]
  assert all(fields[name] == (False, "gelu") for name in others)


def test_without_a_gpu_it_skips(capsys):
  assert gpu_mlm.main([]) == 0
  assert "B3 needs a GPU" in capsys.readouterr().out


def test_bad_variant_is_named():
  with pytest.raises(SystemExit):
    gpu_mlm.main(["--smoke", "--variants", "auto,flash"])


def test_batches_unpacked_and_packed():
  config = gpu_mlm.load_config(True, batch=2, seq=16)
  plain = gpu_mlm.make_batch(config, "auto")
  assert plain["segment_ids"] is None and plain["positions"] is None  # no dense mask: cuDNN can run
  m = plain["masked_positions"].shape[1]
  scored = int(plain["masked_weights"].sum(1)[0])
  assert scored == round(0.15 * 16) and m >= scored
  rows = np.arange(2)[:, None]
  np.testing.assert_array_equal(plain["masked_targets"][:, :scored],
                                plain["targets"][rows, plain["masked_positions"][:, :scored]])
  assert (plain["inputs"][rows, plain["masked_positions"][:, :scored]] == 4).all()
  packed = gpu_mlm.make_batch(config, "packed")
  np.testing.assert_array_equal(packed["segment_ids"][0], np.repeat([1, 2, 3, 4], 4))
  np.testing.assert_array_equal(packed["positions"][0], np.tile(np.arange(4), 4))


def test_rope_ablation_equals_a_model_without_position_encoding():
  """With the rotation disabled, a RoPE model computes exactly what position='none' computes
  (same parameters: RoPE has none), so 'no-rope' removes RoPE and nothing else."""
  cfg = models.ModelConfig(vocab_size=64, d_model=32, num_layers=2, num_heads=4, d_ff=64, dropout=0.0,
                           attention_dropout=0.0, init_std=0.5)  # sharp attention: RoPE matters
  rope_model = models.RoFormerForMaskedLM(cfg, rngs=nnx.Rngs(0))
  none_model = models.RoFormerForMaskedLM(cfg.replace(position="none"), rngs=nnx.Rngs(0))
  ids = jax.random.randint(jax.random.key(1), (2, 12), 5, 64)
  with gpu_mlm.rope_disabled():
    ablated = rope_model(ids)
  np.testing.assert_allclose(ablated, none_model(ids), atol=1e-6)
  assert np.abs(rope_model(ids) - ablated).max() > 0.1  # outside the context RoPE is back


def test_attention_kernel_is_read_from_the_lowered_step():
  f = jax.jit(lambda q: jax.nn.dot_product_attention(q, q, q))
  assert gpu_mlm.attention_kernel(f.lower(jnp.ones((1, 4, 2, 8))).as_text()) == "xla"
  assert gpu_mlm.attention_kernel('stablehlo.custom_call @"__cudnn$fmhaSoftmax"(%0)') == "cudnn"


@pytest.mark.slow
def test_mfu_lines_with_a_known_peak(monkeypatch, capsys):
  """The GPU-only branch (MFU against the device's and the datasheet's peak), on a CPU with a
  stand-in peak of 1 TFLOP/s from the device and 2 from the datasheet."""
  def fake_peak(device, max_sm_clock_mhz=None):
    from_device = max_sm_clock_mhz is None
    return {"flops": 1e12 if from_device else 2e12, "source": "device" if from_device else "datasheet table",
            "detail": "stand-in"}
  monkeypatch.setattr(gpu_mlm.metrics, "peak_flops_info", fake_peak)
  assert gpu_mlm.main(["--smoke", "--rounds", "1", "--warmup", "0", "--variants", "auto"]) == 0
  summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  auto = summary["rows"]["auto"]
  devices = summary["machine"]["device_count"]
  assert auto["mfu"] == pytest.approx(auto["model_tflops"] / devices)
  assert auto["mfu_datasheet_peak"] == pytest.approx(auto["mfu"] / 2)
  assert auto["mfu_6n_plus_attention"] > auto["mfu"]  # the plain count also charges the head at every position
