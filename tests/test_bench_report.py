"""`make bench`'s recording step: bench/_record.py save() and bench/report.py.

save() writes one result file per bench atomically and refuses malformed figures; report.py
rewrites only the block between the markers of a markdown file, idempotently; bench/rope.py
--record, run on a tiny shape, leaves the B1 figures. Nothing here writes into docs/.
"""

import datetime
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from bench import _record, harness, report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGV = [os.path.join(ROOT, "bench", "rope.py"), "--record", "--shape", "1,2,3,4"]


def _figures():
  return [
      {"id": "B9.speedup", "name": "ours vs theirs", "value": 9.5, "unit": "x", "goal": ">= 8x", "met": True},
      {"id": "B9.share", "name": "share of copy", "value": np.float32(42.0), "unit": "%", "goal": ">= 50%",
       "met": np.bool_(False)},
      {"id": "B9.time", "name": "time | per call", "value": 3, "unit": "ms"},
  ]


def _save(tmp_path, bench="demo", **kw):
  args = dict(figures=_figures(), table="method  ms\nours    3.0", result={"bench": "demo", "ms": 3.0},
              out_dir=str(tmp_path), argv=ARGV)
  args.update(kw)
  return _record.save(bench, **args)


@pytest.fixture
def env(monkeypatch):
  monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  monkeypatch.delenv(_record.OUT_DIR_ENV, raising=False)


# --------------------------------------------------------------------------------------
# save()
# --------------------------------------------------------------------------------------


def test_save_round_trip(tmp_path, env):
  result = {"bench": "demo", "nested": {"arr": np.arange(3), "nan": float("nan"), "i": np.int64(7)}, "t": (1, 2)}
  path = _save(tmp_path, result=result)
  assert path == str(tmp_path / "demo.json")
  assert os.listdir(tmp_path) == ["demo.json"]  # no temporary file left behind
  rec = json.loads((tmp_path / "demo.json").read_text())
  assert set(rec) == {"bench", "date", "command", "machine", "versions", "git_commit", "figures", "table", "result"}
  assert rec["bench"] == "demo"
  date = datetime.datetime.fromisoformat(rec["date"])
  assert date.utcoffset() == datetime.timedelta(0)
  assert abs((datetime.datetime.now(datetime.timezone.utc) - date).total_seconds()) < 600
  assert rec["command"] == "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python bench/rope.py --record --shape 1,2,3,4"
  assert set(rec["machine"]) == {"platform", "device_kind", "device_count", "cpu", "cpu_count", "os", "isa",
                                 "huge_pages"}
  assert set(rec["machine"]["isa"]) <= {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}
  assert rec["machine"]["platform"] == "cpu" and rec["machine"]["device_count"] >= 1
  assert set(rec["versions"]) == {"python", "jax", "jaxlib", "flax", "optax"}
  assert rec["versions"]["jax"] and rec["versions"]["python"].startswith("3.")
  assert rec["git_commit"] is None or re.fullmatch(r"[0-9a-f]{4,40}(-dirty)?", rec["git_commit"])
  assert rec["figures"] == [
      {"id": "B9.speedup", "name": "ours vs theirs", "value": 9.5, "unit": "x", "goal": ">= 8x", "met": True},
      {"id": "B9.share", "name": "share of copy", "value": 42.0, "unit": "%", "goal": ">= 50%", "met": False},
      {"id": "B9.time", "name": "time | per call", "value": 3, "unit": "ms", "goal": None, "met": None},
  ]
  assert rec["table"] == "method  ms\nours    3.0"
  assert rec["result"] == {"bench": "demo", "nested": {"arr": [0, 1, 2], "nan": None, "i": 7}, "t": [1, 2]}


def test_command_quotes_args_and_carries_xla_flags(monkeypatch):
  monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
  monkeypatch.setenv("XLA_FLAGS", "--xla_a=1 --xla_b=2")
  cmd = _record.command_line([os.path.join(ROOT, "bench", "decode.py"), "--attention", "softmax,linear", "--x", ""])
  assert cmd == "XLA_FLAGS='--xla_a=1 --xla_b=2' python bench/decode.py --attention softmax,linear --x ''"


def test_save_replaces_atomically(tmp_path, env, monkeypatch):
  _save(tmp_path, table="first")
  before = (tmp_path / "demo.json").read_bytes()

  def broken_replace(src, dst):
    raise OSError("disk full")

  monkeypatch.setattr(_record.os, "replace", broken_replace)
  with pytest.raises(OSError, match="disk full"):
    _save(tmp_path, table="second")
  assert (tmp_path / "demo.json").read_bytes() == before  # the old file is whole
  assert os.listdir(tmp_path) == ["demo.json"]  # and the temporary file is gone


def test_out_dir_from_environment(tmp_path, env, monkeypatch):
  monkeypatch.setenv(_record.OUT_DIR_ENV, str(tmp_path / "results"))
  path = _record.save("demo", figures=[], table="", result={}, argv=ARGV)
  assert path == str(tmp_path / "results" / "demo.json")


def _without(key):
  fig = dict(_figures()[0])
  del fig[key]
  return [fig]


def _with(**kw):
  return [{**_figures()[0], **kw}]


@pytest.mark.parametrize("kw, error, match", [
    (dict(figures=_without("id")), ValueError, r"missing \['id'\]"),
    (dict(figures=_without("value")), ValueError, r"missing \['value'\]"),
    (dict(figures=_with(value=float("nan"))), ValueError, "must be finite"),
    (dict(figures=_with(value=math.inf)), ValueError, "must be finite"),
    (dict(figures=_with(value="9.5")), TypeError, "value must be a real number"),
    (dict(figures=_with(value=True)), TypeError, "value must be a real number"),
    (dict(figures=_with(id="")), ValueError, "non-empty str"),
    (dict(figures=_with(goal=8)), TypeError, "goal must be a str"),
    (dict(figures=_with(met="yes")), TypeError, "met must be True, False or None"),
    (dict(figures=_with(goal=None)), ValueError, "no goal"),
    (dict(figures=_with(colour="red")), ValueError, r"unknown keys \['colour'\]"),
    (dict(figures=_figures() + _figures()[:1]), ValueError, "duplicate id"),
    (dict(figures="B1"), TypeError, "list of dicts"),
    (dict(table=["a"]), TypeError, "table"),
    (dict(result=[1]), TypeError, "result"),
    (dict(result={"x": object()}), TypeError, r"result\['x'\]"),
    (dict(bench="../rope"), ValueError, "bench name"),
])
def test_save_rejects_malformed_input(tmp_path, env, kw, error, match):
  bench = kw.pop("bench", "demo")
  with pytest.raises(error, match=match):
    _save(tmp_path, bench=bench, **kw)
  assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------------------
# report.py
# --------------------------------------------------------------------------------------

BEFORE = "# Benchmarks\n\nHand-written intro, trailing space \nand ünïcode.\n\n"
AFTER = "\n\n## B1\n\nOld pasted run:\n\n```\ncopy fp32 51.17\n```\n"


def _doc(tmp_path, middle="stale text\n"):
  doc = tmp_path / "benchmarks.md"
  doc.write_bytes((BEFORE + report.BEGIN + "\n" + middle + report.END + AFTER).encode())
  return doc


def _run(results, doc, *extra):
  return report.main(["--results", str(results), "--doc", str(doc), *extra])


def test_report_rewrites_only_the_block(tmp_path, env, capsys):
  results = tmp_path / "results"
  _save(results, bench="zeta")
  _save(results, bench="gpu_mlm", figures=[_record.figure("B3.mfu", "MFU", 41.5, "%", goal=">= 40%", met=True)])
  doc = _doc(tmp_path)
  assert _run(results, doc) == 0
  data = doc.read_bytes()
  head = (BEFORE + report.BEGIN).encode()
  tail = (report.END + AFTER).encode()
  assert data.startswith(head) and data.endswith(tail)  # outside the markers: byte for byte
  block = data[len(head):-len(tail)].decode()
  assert "stale text" not in block
  assert "`make bench` (`bench/report.py`)" in block
  # Summary rows: one per figure, benches in name order, the status spelled out.
  rows = [line for line in block.splitlines() if line.startswith("| ") and "`B" in line]
  assert [r.split(" | ")[1] for r in rows] == ["`B3.mfu`", "`B9.speedup`", "`B9.share`", "`B9.time`"]
  assert rows[0].split(" | ")[3:6] == ["41.5%", ">= 40%", "met"]
  assert rows[1].split(" | ")[3:6] == ["9.50x", ">= 8x", "met"]
  assert rows[2].split(" | ")[3:6] == ["42%", ">= 50%", "missed"]
  assert rows[3].split(" | ")[2:6] == ["time \\| per call", "3 ms", "—", "—"]
  assert block.index("### gpu_mlm") < block.index("### zeta")
  assert "```\nmethod  ms\nours    3.0\n```" in block
  # The JSON lines: one object per figure, each with its origin.
  lines = re.findall(r"```json\n(.*?)\n```", block, flags=re.S)
  figs = [json.loads(x) for chunk in lines for x in chunk.splitlines()]
  assert [f["id"] for f in figs] == ["B3.mfu", "B9.speedup", "B9.share", "B9.time"]
  for f in figs:
    assert {"machine", "device", "versions", "command", "date", "git_commit", "value", "unit", "goal", "met"} <= set(f)
    assert f["command"].endswith("python bench/rope.py --record --shape 1,2,3,4")
    assert f["versions"]["jax"] and f["machine"]["platform"] == "cpu" and f["device"].startswith("CPU: ")
  capsys.readouterr()
  # Idempotent: a second run leaves every byte as it was, and --check agrees.
  assert _run(results, doc) == 0 and doc.read_bytes() == data
  assert "up to date" in capsys.readouterr().out
  assert _run(results, doc, "--check") == 0


def test_report_check_reports_a_stale_block_and_writes_nothing(tmp_path, env, capsys):
  results = tmp_path / "results"
  _save(results)
  doc = _doc(tmp_path)
  stale = doc.read_bytes()
  assert _run(results, doc, "--check") == 1
  assert doc.read_bytes() == stale
  assert "out of date" in capsys.readouterr().err
  assert _run(results, doc) == 0
  assert _run(results, doc, "--check") == 0
  _save(results, table="a new run")  # a new result makes it stale again
  assert _run(results, doc, "--check") == 1


def test_report_smoke_rewrites_a_copy_only(tmp_path, env, capsys):
  """--smoke (run by tests/test_docs.py) goes all the way to writing, but into a temporary copy."""
  results = tmp_path / "results"
  _save(results)
  doc = _doc(tmp_path)
  stale = doc.read_bytes()
  assert _run(results, doc, "--smoke") == 0
  assert doc.read_bytes() == stale and sorted(os.listdir(tmp_path)) == ["benchmarks.md", "results"]
  assert "--smoke: rewrote a temporary copy" in capsys.readouterr().out
  assert _run(results, doc, "--smoke", "--check") == 1  # with --check: just --check


def test_smoke_runs_record_only_where_told(monkeypatch, capsys):
  """A --smoke run's figures never reach docs/bench_results: --record is a no-op there, and
  with $ROFORMER_BENCH_RESULTS set they go there under their own name."""
  run = lambda **kw: type("Args", (), {"record": False, "smoke": False, **kw})()
  monkeypatch.delenv(_record.OUT_DIR_ENV, raising=False)
  assert _record.record_name("rope", run()) is None
  assert _record.record_name("rope", run(smoke=True)) is None
  assert _record.record_name("rope", run(record=True)) == "rope"
  assert capsys.readouterr().err == ""
  assert _record.record_name("rope", run(record=True, smoke=True)) is None
  assert "--smoke: --record writes nothing" in capsys.readouterr().err
  monkeypatch.setenv(_record.OUT_DIR_ENV, "/somewhere/else")
  assert _record.record_name("rope", run(record=True, smoke=True)) == "rope_smoke"
  assert _record.record_name("rope", run(record=True)) == "rope"


def test_report_without_results_says_so(tmp_path):
  doc = _doc(tmp_path)
  assert _run(tmp_path / "nothing-here", doc) == 0
  text = doc.read_text()
  assert "No recorded results yet" in text
  assert text.startswith(BEFORE + report.BEGIN) and text.endswith(report.END + AFTER)


@pytest.mark.parametrize("text", [
    "# no markers\n",
    f"{report.BEGIN}\nonly the start\n",
    f"{report.END}\n{report.BEGIN}\n",
    f"{report.BEGIN}\n{report.END}\n{report.BEGIN}\n{report.END}\n",
])
def test_report_needs_one_pair_of_markers(tmp_path, text, capsys):
  doc = tmp_path / "benchmarks.md"
  doc.write_text(text)
  assert _run(tmp_path, doc) == 2
  err = capsys.readouterr().err
  assert "bench-report:begin" in err and "bench-report:end" in err
  assert doc.read_text() == text
  with pytest.raises(ValueError, match="expected one line"):
    report.splice(text, "\nbody\n")


def test_report_rejects_a_foreign_result_file(tmp_path, capsys):
  (tmp_path / "bad.json").write_text(json.dumps({"bench": "bad", "figures": []}))
  doc = _doc(tmp_path)
  assert _run(tmp_path, doc, "--check") == 2
  assert "bad.json: missing" in capsys.readouterr().err


def test_fmt_value():
  assert report.fmt_value(512, "tokens") == "512 tokens"
  assert report.fmt_value(28657.2, "tokens/s") == "28,657 tokens/s"
  assert report.fmt_value(1.0316, "x") == "1.03x"
  assert report.fmt_value(73.85, "%") == "73.8%"
  assert report.fmt_value(3.0e-7, "") == "3.00e-07"


def test_docs_benchmarks_block_is_up_to_date():
  """docs/benchmarks.md shows what docs/bench_results/ holds (run bench/report.py after recording)."""
  assert report.main(["--results", os.path.join(ROOT, "docs", "bench_results"), "--check"]) == 0


# --------------------------------------------------------------------------------------
# End to end: bench/rope.py --record on a tiny shape.
# --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_rope_bench_records_its_figures(tmp_path):
  results = tmp_path / "results"
  env = {**os.environ, _record.OUT_DIR_ENV: str(results), "JAX_PLATFORMS": "cpu",
         "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
  env.pop("XLA_FLAGS", None)
  args = ["--shape", "1,16,2,8", "--rounds", "1", "--inner", "1", "--no-dense", "--torch-python", "", "--record"]
  done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "rope.py"), *args], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr
  assert os.listdir(results) == ["rope.json"]
  rec = json.loads((results / "rope.json").read_text())
  assert rec["command"] == ("GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python bench/rope.py --shape 1,16,2,8 --rounds 1 "
                            "--inner 1 --no-dense --torch-python '' --record")
  figs = {f["id"]: f for f in rec["figures"]}
  assert set(figs) == {"B1.exact_fp32_gb_s", "B1.exact_fp32_of_copy_bw", "B1.exact_bf16_of_copy_bw",
                       "B1.exact_over_plain_fp32_time", "B1.exact_over_plain_pos_bt_fp32_time",
                       "B1.mrope_over_1d_fp32_time", "B1.mrope_interleaved_over_1d_fp32_time"}  # no HF row
  rows = rec["result"]["results"]
  assert figs["B1.exact_fp32_of_copy_bw"]["value"] == pytest.approx(100 * rows["exact fp32"]["frac_of_copy_bw"])
  assert figs["B1.exact_fp32_of_copy_bw"]["goal"] == ">= 50%"
  assert figs["B1.exact_fp32_of_copy_bw"]["met"] == (figs["B1.exact_fp32_of_copy_bw"]["value"] >= 50)
  assert figs["B1.exact_over_plain_fp32_time"]["value"] == pytest.approx(rows["exact fp32"]["time_vs_baseline"])
  assert figs["B1.exact_over_plain_fp32_time"]["goal"] == "<= 1.15"
  assert figs["B1.exact_fp32_gb_s"]["unit"] == "GB/s" and figs["B1.exact_fp32_gb_s"]["met"] is None
  # The recorded table is what the script printed; its stdout still ends with the JSON summary.
  assert rec["table"] in done.stdout and rec["table"].startswith("RoPE op on x[1,16,2,8]")
  assert json.loads(done.stdout.strip().splitlines()[-1]) == rec["result"]
  doc = _doc(tmp_path)
  assert _run(results, doc) == 0
  assert "`B1.exact_fp32_of_copy_bw`" in doc.read_text()


def test_a_cpu_device_names_its_instruction_sets_and_huge_pages():
  """Records since issue 28 carry the ISA and huge pages; older ones read as before."""
  old = {"platform": "cpu", "cpu": "AMD EPYC", "cpu_count": 2}
  assert report.device(old) == "CPU: AMD EPYC, 2 cores"
  xeon = {**old, "cpu": "Intel(R) Xeon(R) Platinum", "isa": ["avx2", "avx512f", "amx_tile"], "huge_pages": True}
  assert report.device(xeon) == "CPU: Intel(R) Xeon(R) Platinum, 2 cores, amx_tile+avx512f, huge pages"
  assert report.device({**old, "isa": ["avx2"], "huge_pages": False}) == "CPU: AMD EPYC, 2 cores, no AVX-512, no huge pages"


def test_inference_bench_names_its_record_per_cpu_kind_and_states_its_goals():
  from bench import inference
  assert harness.cpu_kind("AMD EPYC 9B14 96-Core Processor") == "amd_epyc"
  assert harness.cpu_kind("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz") == "intel_xeon"
  assert harness.cpu_kind("Apple M2") == "apple_m2"
  row = lambda ms, ratio=None: {"ms": ms, "torch_over_this": ratio, "nnx_jit_over_this": 2.0}
  results = {"a": {"batch": 8, "seq": 128, "rows": {"jitted": row(40.0, 1.25), "jitted bf16": row(30.0, 0.9)}}}
  figures = {f["id"]: f for f in inference.figures(results)}
  assert figures["B9.a.torch_over_ours_fp32"]["met"] is True and figures["B9.a.torch_over_ours_fp32"]["goal"] == ">= 1.2x"
  assert figures["B9.a.torch_over_ours_bf16"]["met"] is False
  assert figures["B9.a.nnx_jit_over_jitted"]["value"] == 2.0
