"""bench/trace_summary.py on a hand-made profiler trace and HLO text (what a GPU trace holds;
the ENTRY's tuple of six carries the `/*index=5*/` comment XLA prints, which once hid its header)."""

import gzip
import json
import os

from bench import trace_summary

HLO = """HloModule jit_train_step

%fused_rope (p0: bf16[8,4]) -> bf16[8,4] {
  %p0 = bf16[8,4]{1,0} parameter(0)
  ROOT %mul.1 = bf16[8,4]{1,0} multiply(%p0, %p0), metadata={op_name="jit(train_step)/transpose(jvp(attention))/rope/mul"}
}

%fused_ln (p0: f32[8,4]) -> f32[8,4] {
  %p0 = f32[8,4]{1,0} parameter(0)
  ROOT %add.2 = f32[8,4]{1,0} add(%p0, %p0), metadata={op_name="jit(train_step)/jvp()/add"}
}

ENTRY %main (a: bf16[8,4], b: f32[8,4]) -> (f32[8,4], f32[8,4], f32[8,4], f32[8,4], f32[8,4], /*index=5*/f32[8,4]) {
  %a = bf16[8,4]{1,0} parameter(0)
  %b = f32[8,4]{1,0} parameter(1)
  %loop_multiply_fusion.3 = bf16[8,4]{1,0} fusion(%a), kind=kLoop, calls=%fused_rope
  %cudnn-fmha.1 = bf16[8,4]{1,0} custom-call(%loop_multiply_fusion.3), custom_call_target="__cudnn$fmhaSoftmax", metadata={op_name="jit(train_step)/jvp(attention)/dot_product_attention"}
  %adam.4 = f32[8,4]{1,0} add(%b, %b), metadata={op_name="jit(train_step)/optimizer/add"}
  %loop_add_fusion = f32[8,4]{1,0} fusion(%adam.4), kind=kLoop, calls=%fused_ln
  ROOT %tuple.9 = (f32[8,4], f32[8,4], f32[8,4], f32[8,4], f32[8,4], /*index=5*/f32[8,4]) tuple(%loop_add_fusion, %loop_add_fusion, %loop_add_fusion, %loop_add_fusion, %loop_add_fusion, /*index=5*/%loop_add_fusion)
}
"""


def _trace(tmp_path):
  meta = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
          {"ph": "M", "pid": 1, "tid": 5, "name": "thread_name", "args": {"name": "python3"}},
          {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:GPU:0"}},
          {"ph": "M", "pid": 2, "tid": 7, "name": "thread_name", "args": {"name": "Stream #14(Compute)"}}]
  # Kernels are named by their fusion with "." -> "_"; a custom call's kernel by the library.
  kernels = [("loop_multiply_fusion_3", 10.0), ("loop_add_fusion", 50.0), ("adam.4", 10.0),
             ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 20.0), ("loop_multiply_fusion_3", 10.0)]
  events = [{"ph": "X", "pid": 1, "tid": 5, "ts": 0, "dur": 1000.0, "name": "$python step"}]
  events += [{"ph": "X", "pid": 2, "tid": 7, "ts": i, "dur": d, "name": n} for i, (n, d) in enumerate(kernels)]
  folder = tmp_path / "plugins" / "profile" / "run"
  os.makedirs(folder)
  with gzip.open(folder / "host.trace.json.gz", "wt") as f:
    json.dump({"traceEvents": meta + events}, f)
  return str(tmp_path)


def test_the_busiest_device_line_and_the_time_per_named_scope(tmp_path):
  result = trace_summary.summarise(_trace(tmp_path), [HLO])
  assert result["busiest_line"] == ("/device:GPU:0", "Stream #14(Compute)")  # not the host's python thread
  top = {row["name"]: row for row in result["top"]}
  assert top["loop_add_fusion"]["ms"] == 0.05 and top["loop_add_fusion"]["share"] == 0.5
  assert top["loop_multiply_fusion_3"]["count"] == 2 and top["loop_multiply_fusion_3"]["scope"] == "rope"
  assert top["adam.4"]["scope"] == "optimizer" and top["loop_add_fusion"]["scope"] == "other"
  scopes = result["scopes"]
  # the cuDNN kernel's name is no HLO instruction: unmatched, not guessed
  assert scopes["ms"] == {"rope": 0.02, "attention": 0.0, "optimizer": 0.01, "other": 0.05}
  assert scopes["unmatched_ms"] == 0.02
  assert "by named scope" in trace_summary.format_summary(result)


def test_scope_of_prefers_rope_and_reads_through_transformations():
  assert trace_summary.scope_of(["jit(f)/transpose(jvp(attention))/rope/mul"]) == "rope"
  assert trace_summary.scope_of(["jit(f)/jvp(attention)/dot_general", "jit(f)/add"]) == "attention"
  assert trace_summary.scope_of(["jit(f)/ropes/add", "jit(f)/my_attention/add"]) == "other"
