"""Where a profiled step's device time goes: a table from a `jax.profiler.trace` directory.

Run (from the repository root):
  .venv/bin/python bench/trace_summary.py TRACE_DIR [--hlo step.hlo.txt ...] [--top 25]

Reads the newest `*.trace.json.gz` under TRACE_DIR (the Chrome-trace JSON that
`jax.profiler.trace(..., create_perfetto_trace=True)` writes beside its XPlane file) and sums
the durations of its complete ("X") events:
- per timeline (process / thread): on a GPU, the device's streams (kernels) and its "XLA Ops"
  line (one event per HLO instruction); on a CPU, XLA's executor and Eigen threads;
- the top events by total time on the busiest device line;
- with --hlo (the compiled step's HLO text, `compiled.as_text()`), each HLO instruction's time
  put under the named scope its ops carry: "rope" (`rope.rotate` / `rotary_cos_sin`),
  "attention" (`dot_product_attention`), "optimizer" (the optax update in
  `trainer.train_step`), else "other". A fusion that holds any op of a scope counts wholly
  for it (rope before attention before optimizer), so the rope share is an upper bound.

Why by hand: TensorBoard's profile plugin / xprof give these tables interactively, but neither
is installed on the lent GPU machine and nothing can be downloaded there; this reads the JSON
the profiler already wrote, with the standard library only. The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys

SCOPES = ("rope", "attention", "optimizer")  # in priority order: a fusion holding rope ops is "rope"


def find_trace(trace_dir: str) -> str:
  """The newest *.trace.json.gz under trace_dir (not the perfetto_trace.json.gz copy)."""
  paths = [p for p in glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)]
  if not paths:
    raise FileNotFoundError(f"no *.trace.json.gz under {trace_dir!r}: was it written by jax.profiler.trace?")
  return max(paths, key=os.path.getmtime)


def load_events(path: str) -> tuple[list[dict], dict[int, str], dict[tuple[int, int], str]]:
  """(complete events, process names by pid, thread names by (pid, tid)) of a Chrome trace."""
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rt") as f:
    data = json.load(f)
  events = data["traceEvents"] if isinstance(data, dict) else data
  processes, threads = {}, {}
  for e in events:
    if e.get("ph") == "M" and e.get("name") == "process_name":
      processes[e["pid"]] = e.get("args", {}).get("name", str(e["pid"]))
    elif e.get("ph") == "M" and e.get("name") == "thread_name":
      threads[(e["pid"], e.get("tid"))] = e.get("args", {}).get("name", str(e.get("tid")))
  complete = [e for e in events if e.get("ph") == "X" and "dur" in e]
  return complete, processes, threads


def scope_of(op_names: list[str]) -> str:
  """The first of SCOPES that any of the op_name paths passes through, else "other"."""
  found = set()
  for name in op_names:
    for part in name.split("/"):
      # jvp(attention), transpose(jvp(rope)) -> attention, rope
      core = re.sub(r"^(?:\w+\()+", "", part).rstrip(")")
      if core in SCOPES:
        found.add(core)
  return next((s for s in SCOPES if s in found), "other")


def hlo_scopes(hlo_text: str) -> dict[str, str]:
  """HLO instruction name -> scope, a fusion judged by every op of the computation it calls."""
  computations: dict[str, list[str]] = {}
  current = None
  instr: dict[str, tuple[str, list[str]]] = {}  # name -> (called computation or "", op_names)
  for line in hlo_text.splitlines():
    # A computation's header: `[ENTRY] %name (params) -> type {`, whose types may hold
    # `/*index=5*/` comments; an instruction has ` = ` before its first parenthesis.
    clean = re.sub(r"/\*.*?\*/", "", line)
    head = re.match(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s*\(", clean)
    if head and clean.rstrip().endswith("{") and " = " not in clean.split("(")[0]:
      current = head.group(1)
      computations.setdefault(current, [])
      continue
    m = re.match(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=", line)
    if not m:
      continue
    op_names = re.findall(r'op_name="([^"]*)"', line)
    if current is not None:
      computations[current].extend(op_names)
    called = re.search(r"calls=%?([\w.\-]+)", line)
    instr[m.group(1)] = (called.group(1) if called else "", op_names)
  out = {}
  for name, (called, op_names) in instr.items():
    out[name] = scope_of(op_names + computations.get(called, []))
  return out


def summarise(trace_dir: str, hlo_texts: list[str] = (), top: int = 25) -> dict:
  """The tables described in the module docstring, as a dict."""
  path = find_trace(trace_dir)
  events, processes, threads = load_events(path)
  lines = collections.defaultdict(lambda: {"us": 0.0, "events": 0})
  by_name = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0]))
  for e in events:
    key = (processes.get(e["pid"], str(e["pid"])), threads.get((e["pid"], e.get("tid")), str(e.get("tid"))))
    lines[key]["us"] += e["dur"]
    lines[key]["events"] += 1
    slot = by_name[key][e["name"].lstrip("%")]
    slot[0] += e["dur"]
    slot[1] += 1
  device = [k for k in lines if k[0].startswith("/device:")]
  candidates = device or [k for k in lines if k[1] != "python" and not k[1].startswith("$")]
  stream_keys = [k for k in candidates if "XLA Ops" not in k[1] and "XLA Modules" not in k[1]]
  busiest = max(stream_keys or candidates or list(lines), key=lambda k: lines[k]["us"], default=None)
  result = {"trace": path,
            "lines": [{"process": p, "thread": t, "ms": v["us"] / 1e3, "events": v["events"]}
                      for (p, t), v in sorted(lines.items(), key=lambda kv: -kv[1]["us"])],
            "busiest_line": busiest}
  scopes = {}
  for text in hlo_texts:
    scopes.update(hlo_scopes(text))

  def scope(name: str) -> str | None:
    # An XLA Ops event is named by its HLO instruction; a GPU kernel by the fusion, "." -> "_".
    base = re.split(r"[\s:=]+", name.lstrip("%"))[0]
    return scopes.get(base) or scopes.get(re.sub(r"_(\d+)$", r".\1", base))

  def top_of(key) -> list[dict]:
    total = lines[key]["us"]
    return [{"name": n, "ms": us / 1e3, "count": c, "share": us / total, "scope": scope(n)}
            for n, (us, c) in sorted(by_name[key].items(), key=lambda kv: -kv[1][0])[:top]]

  if busiest is not None:
    result["top"] = top_of(busiest)
  ops_keys = [k for k in lines if "XLA Ops" in k[1]] or candidates
  if ops_keys and ops_keys != candidates:
    result["top_ops"] = top_of(max(ops_keys, key=lambda k: lines[k]["us"]))
  if scopes:
    per_scope = collections.Counter()
    matched = unmatched = 0.0
    for key in ops_keys:
      for name, (us, _) in by_name[key].items():
        base = scope(name)
        if base is not None:
          per_scope[base] += us
          matched += us
        else:
          unmatched += us
    result["scopes"] = {
        "lines": [" / ".join(k) for k in ops_keys],
        "ms": {s: per_scope[s] / 1e3 for s in (*SCOPES, "other")},
        "share_of_matched": {s: per_scope[s] / matched if matched else None for s in (*SCOPES, "other")},
        "unmatched_ms": unmatched / 1e3}
  return result


def format_summary(result: dict, lines: int = 8) -> str:
  out = [f"trace: {result['trace']}", "busiest timelines (total event time):"]
  for row in result["lines"][:lines]:
    out.append(f"  {row['ms']:10.2f} ms {row['events']:7d} events  {row['process']} / {row['thread']}")
  if result.get("top"):
    out.append(f"top events on {' / '.join(result['busiest_line'])}:")
    for row in result["top"]:
      out.append(f"  {row['ms']:10.2f} ms {100 * row['share']:5.1f}% x{row['count']:<5d} [{row['scope'] or '?'}] "
                 f"{row['name'][:100]}")
  if result.get("top_ops"):
    out.append("top HLO ops (XLA Ops line):")
    for row in result["top_ops"]:
      out.append(f"  {row['ms']:10.2f} ms {100 * row['share']:5.1f}% x{row['count']:<5d} [{row['scope'] or '?'}] "
                 f"{row['name'][:100]}")
  if result.get("scopes"):
    sc = result["scopes"]
    shares = ", ".join(f"{s} {sc['ms'][s]:.2f} ms ({100 * (sc['share_of_matched'][s] or 0):.1f}%)"
                       for s in sc["ms"])
    out.append(f"by named scope ({'; '.join(sc['lines'])}): {shares}; unmatched {sc['unmatched_ms']:.2f} ms")
  return "\n".join(out)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("trace_dir")
  parser.add_argument("--hlo", action="append", default=[], help="a compiled step's HLO text file (repeatable)")
  parser.add_argument("--top", type=int, default=25)
  args = parser.parse_args(argv)
  texts = []
  for p in args.hlo:
    with open(p) as f:
      texts.append(f.read())
  result = summarise(args.trace_dir, texts, args.top)
  print(format_summary(result))
  print(json.dumps(result))
  return 0


if __name__ == "__main__":
  sys.exit(main())
