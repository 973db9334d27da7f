"""The figures README.md and docs/*.md quote, against the result files they come from.

Every quoted figure with a result file behind it (docs/bench_results/*.json, written by the
benches' --record; experiments/results/*.json, written by experiments/run.py, qk_decay.py and
summarize.py --record-default-run) is listed in FIGURES below: the document, a template of the
quoting sentence with `{}` where each figure stands, and the figures as the document formats
them, computed from the result file. The test finds the sentence and compares the text. A
changed result file, or a reworded sentence, fails here until the other side follows. Figures
without a result file stand in the docs next to their command and date; they are not checked.

The generated blocks (docs/benchmarks.md by bench/report.py, docs/results.md by
experiments/summarize.py) are checked by their own --check. Only files are read: nothing is
trained or timed.
"""

from __future__ import annotations

import functools
import json
import pathlib
import re

import numpy as np
import pytest

from bench import report
from experiments import summarize

ROOT = pathlib.Path(__file__).parents[1]


# --------------------------------------------------------------------------------------
# The result files and the docs' number formats.
# --------------------------------------------------------------------------------------


def bench(name: str) -> dict:
  return json.loads((ROOT / "docs" / "bench_results" / f"{name}.json").read_text())


def fig(name: str, fig_id: str) -> float:
  """The value of figure `fig_id` in docs/bench_results/<name>.json."""
  (value,) = [f["value"] for f in bench(name)["figures"] if f["id"] == fig_id]
  return value


def exp(name: str) -> dict:
  return json.loads((ROOT / "experiments" / "results" / f"{name}.json").read_text())


def f(value: float, digits: int) -> str:
  return f"{value:.{digits}f}"


def sci(value: float, digits: int = 1) -> str:
  """3.0e-7, as the docs write it (no zero-padded exponent)."""
  mantissa, exponent = f"{value:.{digits}e}".split("e")
  return f"{mantissa}e{int(exponent)}"


def g2(value: float) -> str:
  """Two significant digits, plain from 0.1 up and scientific below, as the docs write them (1.3, 0.45, 1.1e-2)."""
  return sci(value) if value < 0.1 else f"{value:.2g}"


def mean(values) -> float:
  return float(np.mean(values))


def arm_losses(name: str, arm: str) -> list[float]:
  return [e["eval"]["loss"] for e in exp(name)["arms"][arm]]


def length_curve(arm: str, length: int, scaled: str | None = None) -> float:
  """E4: mean over seeds of an arm's (or a RoPE scaling's) loss at one evaluation length."""
  vals = []
  for e in exp("e4")["arms"][arm]:
    curve = e["scaled"][scaled] if scaled else e["length_curve"]
    vals += [r["loss"] for r in curve if r["length"] == length]
  return mean(vals)


def e5(key: str, arm: str, field: str = "bleu") -> list[float]:
  return [e[key][field] for e in exp("e5")["arms"][arm]]


def beam_gains() -> list[float]:
  return [b - g for arm in ("rope", "sinusoidal") for b, g in zip(e5("eval", arm), e5("eval_greedy", arm), strict=True)]


def e1_ratio(layer: int, distance: int) -> float:
  e1 = exp("e1")
  i = e1["distances"].index(distance)
  curve = e1["mean_abs_qk"][f"layer{layer}"]
  return curve[i] / curve[0]


def default_run(step: int) -> float:
  (loss,) = [loss for s, loss in exp("default_run")["eval_loss"] if s == step]
  return loss


def rope_result(row: str, key: str) -> float:
  return bench("rope")["result"]["results"][row][key]


def digest_result() -> dict:
  return bench("checkpoint_digest")["result"]


# --------------------------------------------------------------------------------------
# The quoted figures: (document, template, lambda: the figures as the document writes them).
# In a template, `{}` is one figure and any run of spaces matches any whitespace (line breaks
# included); everything else is literal.
# --------------------------------------------------------------------------------------

def precision_table(first_row: str) -> str:
  """The max cos/sin error table of docs/rope.md and docs/benchmarks.md."""
  return (f"| {first_row} | {{}} | {{}} |\n"
          "| 200k random < 2^24 + windows at each 2^k, d=128 | {} | {} |\n"
          "| position 5,000, d=128 | {} | {} |\n"
          "| position 2^24, d=128 | {} | {} |")


def _precision_table():
  p = "precision.{}.{}"
  return [sci(fig("rope_precision", p.format("exact", "all_0_2p24_d4"))),
          g2(fig("rope_precision", p.format("plain_fp32", "all_0_2p24_d4"))),
          sci(fig("rope_precision", p.format("exact", "sampled_2p24_d128"))),
          g2(fig("rope_precision", p.format("plain_fp32", "sampled_2p24_d128"))),
          sci(fig("rope_precision", p.format("exact", "pos_5000_d128"))),
          g2(fig("rope_precision", p.format("plain_fp32", "pos_5000_d128"))),
          sci(fig("rope_precision", p.format("exact", "pos_2p24_d128"))),
          g2(fig("rope_precision", p.format("plain_fp32", "pos_2p24_d128")))]


def _train_step(kind: str) -> list[float]:
  return [fig("train_step.amd_epyc", f"B2.{shape}.jax_{kind}.torch_over_ours") for shape in "abc"]


def _remat(shape: str, mode: str, what: str) -> float:
  return fig("remat", f"remat.{shape}.{mode}.{what}_vs_none")


def _attention_fit() -> float:
  return max(fig("attention", "B4.linear_mem_vs_linear_fit_fwd"), fig("attention", "B4.linear_mem_vs_linear_fit_fwd_bwd"))


def _b8(fig_id: str, passes: tuple[str, ...] = ("fwd", "fwd_bwd")) -> list[float]:
  """A B8 (bench/long_context.py) figure per pass: `fig_id` with {} for the pass."""
  return [fig("long_context", fig_id.format(p)) for p in passes]


def _b8_row(rows: str, key: str, **match) -> float:
  """A value of one measured row of B8's result file (rows: "results" or "train")."""
  (value,) = [r[key] for r in bench("long_context")["result"][rows] if all(r.get(k) == v for k, v in match.items())]
  return value


def _b8_train_gib(impl: str, t: int) -> str:
  return f(_b8_row("train", "peak_bytes", impl=impl, T=t) / 2**30, 1)


def _b8_1k(pas: str) -> float:
  get = lambda method: _b8_row("results", "ms", part="attention", method=method, N=1024, **{"pass": pas})  # noqa: E731
  return get("chunked") / get("dense")


def _absolute_at_8x() -> float:
  return mean([length_curve("learned", 1024), length_curve("sinusoidal-scaled (embeddings x sqrt(D))", 1024)])


_ABSOLUTE = ("learned", "sinusoidal-scaled (embeddings x sqrt(D))")


def _remat_rows(shape: str) -> list[str]:
  """One shape's rows of the remat table: temp memory (GiB), ratios and ms/step."""
  rows = bench("remat")["result"]["results"][shape]["rows"]
  gib = lambda mode: f(rows[mode]["temp_gib"], 3 if shape == "a" else 2)  # noqa: E731
  ms = lambda mode: f"{rows[mode]['ms']:,.0f}"  # noqa: E731
  out = [gib("none"), ms("none")]
  for mode in ("full", "dots"):
    out += [gib(mode), f(_remat(shape, mode, "memory"), 2), ms(mode), f(_remat(shape, mode, "time"), 2)]
  return out


def _walls() -> list[float]:
  return [mean([e["train_wall_s"] for e in entries]) for name in ("e2", "e3") for entries in exp(name)["arms"].values()]


def _bound(distance: int) -> float:
  e1 = exp("e1")
  return e1["bound_normalised"][e1["distances"].index(distance)]


def _e1_at(distance: int) -> list[float]:
  return [e1_ratio(layer, distance) for layer in range(len(exp("e1")["mean_abs_qk"]))]


def _e5_eval_walls() -> list[float]:
  return [e["eval_wall_s"] for entries in exp("e5")["arms"].values() for e in entries]


def _bps() -> list[float]:
  return [e["eval"]["bleu_bp"] for entries in exp("e5")["arms"].values() for e in entries]


FIGURES = [
    # ---------------------------------------------------------------- README.md
    ("README.md", "The recorded run (Python {}, AMD EPYC) gave eval loss {}, {} and {} nats/byte at steps 500, 1000 "
     "and 1500",
     lambda: [exp("default_run")["python"]] + [f(default_run(s), 4) for s in (500, 1000, 1500)]),
    # ---------------------------------------------------------------- docs/features.md
    ("docs/features.md", "rotated to within about {} of a float64 evaluation of eq. (15). The usual float32 product, as in "
     "HF LLaMA and MaxText, is off by {} at position 5,000 and by {} at position 2^24",
     lambda: [sci(fig("rope_precision", "precision.exact.all_0_2p24_d4"), 0),
              g2(fig("rope_precision", "precision.plain_fp32.pos_5000_d128")),
              g2(fig("rope_precision", "precision.plain_fp32.pos_2p24_d128"))]),
    ("docs/features.md", "On CPU the exact method costs about as much as the plain one: {}× its time in the recorded run",
     lambda: [f(fig("rope", "B1.exact_over_plain_fp32_time"), 2)]),
    ("docs/features.md", "in the recorded run, the MLM train step is {}–{}× faster than transformers' PyTorch RoFormer with "
     "full logits, and {}–{}× with the masked-positions head",
     lambda: [f(min(_train_step("full")), 2), f(max(_train_step("full")), 2),
              f(min(_train_step("masked")), 2), f(max(_train_step("masked")), 2)]),
    # ---------------------------------------------------------------- docs/measured.md
    ("docs/measured.md", "| {} exact vs {} / {} for the float32 product |",
     lambda: [sci(max(fig("rope_precision", "precision.exact.all_0_2p24_d4"),
                      fig("rope_precision", "precision.exact.sampled_2p24_d128"))),
              g2(fig("rope_precision", "precision.plain_fp32.all_0_2p24_d4")),
              g2(fig("rope_precision", "precision.plain_fp32.sampled_2p24_d128"))]),
    ("docs/measured.md", "exact / plain time {} (positions [T]) and {} (per-example positions [B, T]); {}% of the copy op's "
     "bandwidth, the copy at {} GB/s with huge pages; multi-axis (M-RoPE, positions [T, 3]) / 1-D time {} (chunked) and {} "
     "(interleaved)",
     lambda: [f(fig("rope", "B1.exact_over_plain_fp32_time"), 3), f(fig("rope", "B1.exact_over_plain_pos_bt_fp32_time"), 3),
              f(fig("rope", "B1.exact_fp32_of_copy_bw"), 0), f(rope_result("copy fp32", "gb_s"), 1),
              f(fig("rope", "B1.mrope_over_1d_fp32_time"), 3), f(fig("rope", "B1.mrope_interleaved_over_1d_fp32_time"), 3)]),
    ("docs/benchmarks.md", "| {}× (chunked, Qwen2-VL sections) and {}× (interleaved, Qwen3-VL) with positions [T, 3]",
     lambda: [f(fig("rope", "B1.mrope_over_1d_fp32_time"), 2), f(fig("rope", "B1.mrope_interleaved_over_1d_fp32_time"), 2)]),
    ("docs/measured.md", "linear faster from N={} (forward) / N={} (fwd+bwd) in the recorded run",
     lambda: [str(fig("attention", "B4.crossover_fwd")), str(fig("attention", "B4.crossover_fwd_bwd"))]),
    ("docs/measured.md", "memory within {}× of a linear fit up to 16K", lambda: [f(_attention_fit(), 2)]),
    ("docs/measured.md", "eval loss {} → {} → {} nats/byte at steps 500/1000/1500",
     lambda: [f(default_run(s), 4) for s in (500, 1000, 1500)]),
    ("docs/measured.md", "against the record's {}, {} and {}", lambda: [f(default_run(s), 4) for s in (500, 1000, 1500)]),
    ("docs/measured.md", "The record names the Python it used ({}) and the corpus it read ({} files)",
     lambda: [exp("default_run")["python"], f"{exp('default_run')['corpus']['files']:,}"]),
    ("docs/measured.md", "so these figures hold for Python {} ({} files, {} MB)",
     lambda: [exp("default_run")["python"], f"{exp('default_run')['corpus']['files']:,}",
              f(exp("default_run")["corpus"]["bytes"] / 1e6, 1)]),
    ("docs/measured.md", "MLM: RoPE {} vs learned {} nats/byte; linear attention: RoPE {} vs none {}; at 8× the trained "
     "length: RoPE {}, +NTK {}, +YaRN {}, absolute ≈{} |",
     lambda: [f(mean(arm_losses("e2", "rope")), 2), f(mean(arm_losses("e2", "learned (BERT)")), 2),
              f(mean(arm_losses("e3", "linear + RoPE")), 2), f(mean(arm_losses("e3", "linear, no position")), 2),
              f(length_curve("rope", 1024), 2), f(length_curve("rope", 1024, "rope + NTK (dynamic x4)"), 2),
              f(length_curve("rope", 1024, "rope + YaRN (x4)"), 2), f(_absolute_at_8x(), 2)]),
    ("docs/measured.md", "test BLEU, beam 4: RoPE {} vs sinusoidal {}, within seed noise",
     lambda: [f(mean(e5("eval", "rope")), 2), f(mean(e5("eval", "sinusoidal")), 2)]),
    ("docs/measured.md", "beam 4 beats greedy by {} BLEU on average ({}–{} per run)",
     lambda: [f(mean(beam_gains()), 1), f(min(beam_gains()), 1), f(max(beam_gains()), 1)]),
    ("docs/measured.md", "cached step {}× faster per token than recomputing the full forward (softmax), {}× (linear), in the "
     "recorded run",
     lambda: [report.fmt_value(fig("decode", "B4.decode_softmax_cached_vs_recompute"), ""),
              report.fmt_value(fig("decode", "B4.decode_linear_cached_vs_recompute"), "")]),
    ("docs/measured.md", "torch time / ours: {} / {} / {} with full logits, {} / {} / {} with the masked-positions head",
     lambda: [f(v, 2) for v in _train_step("full") + _train_step("masked")]),
    ("docs/measured.md", "ours {}× faster in the recorded run", lambda: [f(fig("rope", "B1.exact_fp32_vs_hf"), 2)]),
    ("docs/measured.md", "in the same run a plain copy of x is only {}× faster than HF's op",
     lambda: [f(rope_result("HF torch fp32", "ms") / rope_result("copy fp32", "ms"), 1)]),
    ("docs/measured.md", "| {} s to the first step ({} s of XLA compilation); {}k tokens/s in the recorded run",
     lambda: [f(fig("default_config", "B5.time_to_first_step"), 2), f(fig("default_config", "B5.xla_compile"), 2),
              f(fig("default_config", "B5.steady_tokens_per_s") / 1000, 1)]),
    # ---------------------------------------------------------------- docs/models.md
    ("docs/models.md", "At 1K context the cached step is {}× faster per token than recomputing the full forward pass "
     "for softmax attention, and {}× for linear attention",
     lambda: [report.fmt_value(fig("decode", "B4.decode_softmax_cached_vs_recompute"), ""),
              report.fmt_value(fig("decode", "B4.decode_linear_cached_vs_recompute"), "")]),
    # ---------------------------------------------------------------- docs/rope.md, docs/benchmarks.md
    ("docs/rope.md", precision_table("every integer 0..2^24, frequencies of d=4"), _precision_table),
    ("docs/benchmarks.md", precision_table("every integer 0..2^24, d=4"), _precision_table),
    ("docs/benchmarks.md", "| {}× (positions [T]), {}× (per-example positions [B, T]), recorded run of",
     lambda: [f(fig("rope", "B1.exact_over_plain_fp32_time"), 2), f(fig("rope", "B1.exact_over_plain_pos_bt_fp32_time"), 2)]),
    ("docs/benchmarks.md", "fp32: {}% (recorded run of 2026-11-26), 71% and 74% on 2026-11-22; bf16: {}%",
     lambda: [f(fig("rope", "B1.exact_fp32_of_copy_bw"), 0), f(fig("rope", "B1.exact_bf16_of_copy_bw"), 0)]),
    ("docs/benchmarks.md", "with huge pages: **{}×** recorded", lambda: [f(fig("rope", "B1.exact_fp32_vs_hf"), 2)]),
    ("docs/benchmarks.md", "full logits: **{}×, {}×, {}×**; masked positions: **{}×, {}×, {}×**",
     lambda: [f(v, 2) for v in _train_step("full") + _train_step("masked")]),
    ("docs/benchmarks.md", "| a (d=256, B=8, T=128) | none | {} GiB | 1 | {} | 1 |\n"
     "| | full | {} GiB | {} | {} | {} |\n| | dots | {} GiB | {} | {} | {} |",
     lambda: _remat_rows("a")),
    ("docs/benchmarks.md", "| c (BERT-base, B=8, T=512) | none | {} GiB | 1 | {} | 1 |\n"
     "| | full | {} GiB | {} | {} | {} |\n| | dots | {} GiB | {} | {} | {} |",
     lambda: _remat_rows("c")),
    ("docs/benchmarks.md", "The recorded run in the block at the top found the reverse (forward {}, fwd+bwd {})",
     lambda: [str(fig("attention", "B4.crossover_fwd")), str(fig("attention", "B4.crossover_fwd_bwd"))]),
    ("docs/benchmarks.md", "load average {}) gave {}× (softmax) and {}× (linear)",
     lambda: [f(bench("decode")["result"]["load_avg_1min"], 1),
              report.fmt_value(fig("decode", "B4.decode_softmax_cached_vs_recompute"), ""),
              report.fmt_value(fig("decode", "B4.decode_linear_cached_vs_recompute"), "")]),
    ("docs/benchmarks.md", "| chunked memory within 1.2× of a least-squares fit a + bN, N = 1K … 64K | forward **{}×** (at "
     "1K, where the fixed cost weighs most), fwd+bwd **{}×** |",
     lambda: [f(v, 2) for v in _b8("B8.chunked_mem_vs_linear_fit_{}")]),
    ("docs/benchmarks.md", "| chunked fwd+bwd time ≤ 1.3× dense at 2K | **{}×** |",
     lambda: [f(fig("long_context", "B8.chunked_over_dense_time_2048_fwd_bwd"), 2)]),
    ("docs/benchmarks.md", "8K is the only such N on this machine: **{}×** forward, **{}×** fwd+bwd |",
     lambda: [f(v, 2) for v in _b8("B8.chunked_over_dense_time_from_8192_{}")]),
    ("docs/benchmarks.md", "| dense / chunked peak memory at 64K (memory analysis) | {}× forward, {}× fwd+bwd |",
     lambda: [report.fmt_value(v, "") for v in _b8("B8.dense_over_chunked_mem_{}")]),
    ("docs/benchmarks.md", "(what tile skipping saves) | {}× forward, {}× fwd+bwd |",
     lambda: [f(v, 2) for v in _b8("B8.causal_skip_speedup_8192_{}")]),
    ("docs/benchmarks.md", "train step fits in 20 GiB | xla **{}**, chunked **{}** |",
     lambda: [str(fig("long_context", "B8.train_longest_T_20GiB_xla")),
              f"{fig('long_context', 'B8.train_longest_T_20GiB_chunked'):,}"]),
    ("docs/benchmarks.md", "| train step time, chunked / xla | {}× at 2K, {}× at 4K (xla at 8K needs {} GiB",
     lambda: [f(fig("long_context", f"B8.train_chunked_over_xla_time_{t}"), 2) for t in (2048, 4096)]
     + [_b8_train_gib("xla", 8192)]),
    ("docs/benchmarks.md", "({}× forward, {}× fwd+bwd at 1K)", lambda: [f(_b8_1k(p), 2) for p in ("fwd", "fwd+bwd")]),
    ("docs/benchmarks.md", "chunked attention ({} GiB at 32K, {} GiB at 256K). With xla it grows quadratically: {} GiB "
     "at 8K, {} GiB at 16K.",
     lambda: [_b8_train_gib("chunked", 32768), _b8_train_gib("chunked", 262144), _b8_train_gib("xla", 8192),
              _b8_train_gib("xla", 16384)]),
    ("docs/benchmarks.md", "512×256 was fastest, by {}× and {}× over 256×256 at 2K and 8K",
     lambda: [f(fig("long_context", f"B8.default_tile_over_best_{n}_fwd"), 2) for n in (2048, 8192)]),
    ("docs/benchmarks.md", "| C = 2: **{}×**, C = 4: **{}×**, C = 8: **{}×** | met to 4, missed at 8 |",
     lambda: [f(fig("long_context", f"B8.cp_temp_times_c_over_c1_{c}"), 2) for c in (2, 4, 8)]),
    # ---------------------------------------------------------------- docs/training.md (figures only)
    ("docs/training.md", "B=8, T=512 on CPU: {}% of the memory at about the same speed, or {}% for {}% more time",
     lambda: [f(100 * _remat("c", "dots", "memory"), 0), f(100 * _remat("c", "full", "memory"), 0),
              f(100 * (_remat("c", "full", "time") - 1), 0)]),
    # ---------------------------------------------------------------- docs/reliability.md
    ("docs/reliability.md", "moments in float32, a {} GB checkpoint), on this 2-core machine: writing the digest takes "
     "{} s ({} GB/s, {}x the time orbax takes to save the checkpoint), and verifying it {} s ({}x orbax's restore)",
     lambda: [f(digest_result()["bytes"] / 1e9, 2), f(fig("checkpoint_digest", "R.digest_write_s"), 2),
              f(digest_result()["bytes"] / 1e9 / fig("checkpoint_digest", "R.digest_write_s"), 1),
              f(fig("checkpoint_digest", "R.digest_vs_save"), 2), f(fig("checkpoint_digest", "R.digest_verify_s"), 2),
              f(fig("checkpoint_digest", "R.verify_vs_restore"), 2)]),
    # ---------------------------------------------------------------- docs/results.md
    ("docs/results.md", "steps** ({}–{} s per run on the 2-core CPU, 2026-11-22: the wall column of the E2 and E3",
     lambda: [f(min(_walls()), 0), f(max(_walls()), 0)]),
    ("docs/results.md", "about {}k bytes for the LM and about {}k masked bytes for MLM",
     lambda: [f(round(exp("e3")["arms"]["linear + RoPE"][0]["eval"]["tokens"], -4) / 1000, 0),
              f(round(exp("e2")["arms"]["rope"][0]["eval"]["tokens"], -4) / 1000, 0)]),
    ("docs/results.md", "the eq. (37) bound falls to {} of its distance-0 value at distance 4 and {} at 16",
     lambda: [f(_bound(4), 2), f(_bound(16), 2)]),
    ("docs/results.md", "to {}–{} of its distance-0 value at distance 4 (layers 0–3)",
     lambda: [f(min(_e1_at(4)), 2), f(max(_e1_at(4)), 2)]),
    ("docs/results.md", "At distance 4 it is at {}, {}, {} and {} of its distance-0 value in layers 0–3 (bound: {})",
     lambda: [f(v, 2) for v in _e1_at(4)] + [f(_bound(4), 2)]),
    ("docs/results.md", "RoPE **{}** vs sinusoidal **{}**, a {} difference **within seed noise** (ranges {} and {}). "
     "RoPE's test loss is {} nats lower",
     lambda: [f(mean(e5("eval", "rope")), 2), f(mean(e5("eval", "sinusoidal")), 2),
              f(mean(e5("eval", "rope")) - mean(e5("eval", "sinusoidal")), 2),
              f(np.ptp(e5("eval", "rope")), 2), f(np.ptp(e5("eval", "sinusoidal")), 2),
              f(mean(e5("eval", "sinusoidal", "loss")) - mean(e5("eval", "rope", "loss")), 2)]),
    ("docs/results.md", "Beam 4 beats greedy in every run, by {}–{} BLEU (+{} on average)",
     lambda: [f(min(beam_gains()), 1), f(max(beam_gains()), 1), f(mean(beam_gains()), 1)]),
    ("docs/results.md", "eval loss {} against {} (learned) and {} (√D-scaled sinusoidal)",
     lambda: [f(mean(arm_losses("e2", arm)), 2)
              for arm in ("rope", "learned (BERT)", "sinusoidal-scaled (embeddings x sqrt(D))")]),
    ("docs/results.md", "RoPE reaches {} against about {} for absolute positions. NTK and YaRN at evaluation time "
     "improve RoPE to {} and {}",
     lambda: [f(length_curve("rope", 1024), 2), f(_absolute_at_8x(), 2),
              f(length_curve("rope", 1024, "rope + NTK (dynamic x4)"), 2),
              f(length_curve("rope", 1024, "rope + YaRN (x4)"), 2)]),
    ("docs/results.md", "RoPE lowers the final eval loss by **{} nats/byte**",
     lambda: [f(mean(arm_losses("e3", "linear, no position")) - mean(arm_losses("e3", "linear + RoPE")), 2)]),
    ("docs/results.md", "`python experiments/run.py e2 --steps 600 --seeds 0,1` ({} s for all {} runs)",
     lambda: [f(exp("e2")["wall_s"], 0), str(sum(len(v) for v in exp("e2")["arms"].values()))]),
    ("docs/results.md", "Its final loss is {} nats below learned positions and {} below the better sinusoidal arm",
     lambda: [f(mean(arm_losses("e2", "learned (BERT)")) - mean(arm_losses("e2", "rope")), 2),
              f(mean(arm_losses("e2", "sinusoidal-scaled (embeddings x sqrt(D))")) - mean(arm_losses("e2", "rope")), 2)]),
    ("docs/results.md", "as Vaswani et al. do, recovers {} nats of it",
     lambda: [f(mean(arm_losses("e2", "sinusoidal")) - mean(arm_losses("e2", "sinusoidal-scaled (embeddings x sqrt(D))")),
                2)]),
    ("docs/results.md", "`python experiments/run.py e3 --steps 600 --seeds 0,1` ({} s)", lambda: [f(exp("e3")["wall_s"], 0)]),
    ("docs/results.md", "**RoPE lowers the final loss by {} nats/byte**, beyond the seed range (the seeds differ by {} and {})",
     lambda: [f(mean(arm_losses("e3", "linear, no position")) - mean(arm_losses("e3", "linear + RoPE")), 2),
              f(np.ptp(arm_losses("e3", "linear + RoPE")), 2), f(np.ptp(arm_losses("e3", "linear, no position")), 2)]),
    ("docs/results.md", "RoPE goes from {} at L=128 to {} at 8L. Learned and √D-scaled sinusoidal positions both start {} "
     "worse ({} in the full pass) and reach about {}.",
     lambda: [f(length_curve("rope", 128), 2), f(length_curve("rope", 1024), 2),
              f(mean([length_curve(a, 128) for a in _ABSOLUTE]) - length_curve("rope", 128), 2),
              f(mean([mean(arm_losses("e4", a)) for a in _ABSOLUTE]) - mean(arm_losses("e4", "rope")), 2),
              f(_absolute_at_8x(), 2)]),
    ("docs/results.md", "is identical at L ≤ 128 and better beyond: {} against {} at 8L",
     lambda: [f(length_curve("rope", 1024, "rope + NTK (dynamic x4)"), 2), f(length_curve("rope", 1024), 2)]),
    ("docs/results.md", "gives the best loss at 8L ({}) and is nearly flat from 128 to 512, but it costs {} at the trained",
     lambda: [f(length_curve("rope", 1024, "rope + YaRN (x4)"), 2),
              f(length_curve("rope", 128, "rope + YaRN (x4)") - length_curve("rope", 128), 2)]),
    ("docs/results.md", "The L=128 points ({}) differ slightly from the full-pass values above ({})",
     lambda: [f(length_curve("rope", 128), 2), f(mean(arm_losses("e4", "rope")), 2)]),
    ("docs/results.md", "took {}–{} s per run (the table's last column)",
     lambda: [f(min(_e5_eval_walls()), 1), f(max(_e5_eval_walls()), 1)]),
    ("docs/results.md", "+{} BLEU with beam 4, smaller than either arm's seed range",
     lambda: [f(mean(e5("eval", "rope")) - mean(e5("eval", "sinusoidal")), 2)]),
    ("docs/results.md", "The test loss favours RoPE by {} nats/token",
     lambda: [f(mean(e5("eval", "sinusoidal", "loss")) - mean(e5("eval", "rope", "loss")), 2)]),
    ("docs/results.md", "beam 4 is better in every run, by {}–{} BLEU (mean +{}; +{} for RoPE and +{} for sinusoidal)",
     lambda: [f(min(beam_gains()), 1), f(max(beam_gains()), 1), f(mean(beam_gains()), 1),
              f(mean(e5("eval", "rope")) - mean(e5("eval_greedy", "rope")), 1),
              f(mean(e5("eval", "sinusoidal")) - mean(e5("eval_greedy", "sinusoidal")), 1)]),
    ("docs/results.md", "(brevity penalty {}–{}), so a smaller α",
     lambda: [f(min(_bps()), 2), f(max(_bps()), 2)]),
]

# --------------------------------------------------------------------------------------
# The check.
# --------------------------------------------------------------------------------------

# One figure: a number (thousands commas, decimals, an exponent), else the shortest run of
# characters other than spaces, bars, brackets, commas, semicolons and bold marks.
NUMBER = r"(-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?|[^\s|(),;*]+?)"


def pattern(template: str) -> re.Pattern:
  """The template as a regex: `{}` captures a figure, a run of spaces matches any whitespace."""
  parts = []
  for i, piece in enumerate(template.split("{}")):
    if i:
      parts.append(NUMBER)
    parts.append(r"\s+".join(re.escape(word) for word in re.split(r"[ \n]+", piece)) if piece.strip() else
                 (r"\s+" if piece else ""))
  return re.compile("".join(parts))


def quoted(text: str, template: str) -> list[tuple[str, ...]]:
  """Every occurrence of the template in text, as the tuple of figures it quotes."""
  rx = pattern(template)
  return [m.groups() if rx.groups else () for m in rx.finditer(text)]


def mismatches(text: str, template: str, expected: list[str]) -> str | None:
  """None if text quotes the template, and every occurrence quotes exactly `expected`; else why not."""
  found = quoted(text, template)
  if not found:
    return f"not found: {template!r} (reworded? update FIGURES in {__name__} with the doc)"
  wrong = [got for got in found if list(got) != list(expected)]
  if wrong:
    return f"{template!r}: the doc quotes {list(wrong[0])}, the result files give {list(expected)}"
  return None


@functools.lru_cache(maxsize=None)
def _doc(name: str) -> str:
  return (ROOT / name).read_text()


@pytest.mark.parametrize("doc, template, expected", FIGURES, ids=[f"{d}:{t[:40]}" for d, t, _ in FIGURES])
def test_quoted_figure_matches_its_result_file(doc, template, expected):
  problem = mismatches(_doc(doc), template, expected())
  assert problem is None, f"{doc}: {problem}"


def test_checker_catches_a_changed_figure():
  """The check can fail: a figure one digit off, a reworded sentence and a second, stale copy."""
  template = "cached step {}× faster per token than recomputing the full forward (softmax), {}× (linear)"
  good = "the cached step 56.7× faster per token than recomputing the full\n  forward (softmax), 175× (linear)."
  assert mismatches(good, template, ["56.7", "175"]) is None
  assert "quotes ['69.2', '175']" in mismatches(good.replace("56.7", "69.2"), template, ["56.7", "175"])
  assert mismatches(good.replace("faster", "quicker"), template, ["56.7", "175"]).startswith("not found")
  stale = good + " Earlier: cached step 57× faster per token than recomputing the full forward (softmax), 150× (linear)"
  assert "quotes ['57', '150']" in mismatches(stale, template, ["56.7", "175"])


def test_default_run_record_matches_the_docs_claims():
  """The default run's record is the one the docs describe: configs/default.py's length and shape."""
  from configs import default
  rec, config = exp("default_run"), default.get_config()
  assert (rec["total_steps"], rec["batch_size"], rec["max_length"]) == (
      config.total_steps, config.batch_size, config.data.max_length)
  assert [s for s, _ in rec["eval_loss"]] == list(range(config.eval_every_steps, config.total_steps + 1,
                                                        config.eval_every_steps))
  measured, readme = _doc("docs/measured.md"), _doc("README.md")
  assert f"{config.total_steps} steps × {config.batch_size} × {config.data.max_length} bytes), 2-core {rec['cpu']} |" \
      in measured
  assert f"Python {rec['python']}" in measured
  assert f"{config.total_steps} steps" in readme
  assert f"(Python {rec['python']}, {rec['cpu']})" in readme  # the losses depend on both


def test_results_md_tables_are_generated_from_the_result_files(capsys):
  assert summarize.main(["--check"]) == 0, capsys.readouterr().err


def test_summarize_check_fails_on_a_hand_edited_table(tmp_path):
  """A figure patched by hand inside a block is caught by --check and undone by --write."""
  text = (ROOT / "docs" / "results.md").read_text()
  e4 = text[text.index(summarize.markers("e4")[0]):text.index(summarize.markers("e4")[1])]
  row = next(line for line in e4.splitlines() if line.startswith("| sinusoidal-scaled"))
  doc = tmp_path / "results.md"
  doc.write_text(text.replace(row, row.rsplit("|", 2)[0] + "| 69 |"))
  assert doc.read_text() != text
  assert summarize.main(["--check", "--doc", str(doc)]) == 1
  assert summarize.main(["--write", "--doc", str(doc)]) == 0
  assert doc.read_text() == text
