#!/usr/bin/env bash
# Issue 27's measurements on a lent GPU machine, in ONE call of the device tool.
#
# The device time of a session is short (15 minutes, a machine start included), so everything
# runs from this one script, each step under its own time limit, and every step's log and
# record lands in $OUT/r, packed into $OUT/results.tgz after each step (a later step that
# overruns the call's limit cannot lose an earlier one's results). The machine's image has
# jax 0.11.2 + CUDA, flax, optax, orbax, chex, torch and transformers, but no grain, TFDS,
# ml-collections or tensorboardX: those travel as wheels in .whl/ (git-ignored; made with
# `pip download` as the device tool's README says) and the project's pinned flax, optax,
# orbax-checkpoint and chex travel too, so that the code runs against what its CPU tests used.
#
#   device run:  bash scripts/gpu_session.sh          (carry: [".whl"], timeout_s about 590)
#                GPU_SESSION_STEPS="env b3 b1" bash scripts/gpu_session.sh   (a subset, in the script's order)
#   dry run on a CPU (every step's plumbing, tiny shapes, minutes):
#                OUT=/tmp/gpu_dry GPU_SESSION_SMOKE=1 PYTHON=.venv/bin/python bash scripts/gpu_session.sh
#
# Steps, in order, with their limits in seconds (what a 570-second call holds; the default set
# is what the fifth session (issue 41) runs, the rest by GPU_SESSION_STEPS):
#   env 20 | b3 190 | switch 90 | b3_b128 80 | b3_b256 70 | b1 60 | attention 100 | attention64 70
#   run 140 | run_mlm 50 | cpu_b9 120 | cpu_b2 220 | suite: the rest of $BUDGET (545)
# (the fast tier took 101-135 s on 8 workers of the H100 machine)
set -u
OUT=${OUT:-/tmp/gpu_session}
PY=${PYTHON:-python3}
SMOKE=${GPU_SESSION_SMOKE:-0}
R=$OUT/r
mkdir -p "$R" "$R/bench_results"
export PYTHONUNBUFFERED=1 ROFORMER_BENCH_RESULTS=$R/bench_results
T0=$(date +%s)
BUDGET=${GPU_SESSION_BUDGET:-545}  # seconds for all steps; the call's timeout_s must leave a margin
STEPS=" ${GPU_SESSION_STEPS:-env b3 switch b1 run} "
want() { [[ "$STEPS" == *" $1 "* ]]; }

log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$R/steps.log"; }
pack() { tar czf "$OUT/results.tgz.tmp" -C "$OUT" r && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"; }
step() {  # step NAME LIMIT_S CMD...: runs CMD under the limit, its output in $R/NAME.log
  local name=$1 limit=$2; shift 2
  want "$name" || return 0
  log "start $name (limit ${limit}s): $*"
  timeout -k 3 "$limit" "$@" > "$R/$name.log" 2>&1
  local rc=$?
  log "end $name rc=$rc$([ $rc = 124 ] && echo ' (time limit)')"
  tail -n 12 "$R/$name.log" | cut -c1-240
  pack
}

if [ "$SMOKE" = 1 ]; then
  S=--smoke
else
  S=
  # The wheels first: PYTHONPATH puts them (and the repository) before the image's packages.
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$R/pip.log" 2>&1 || { log "pip install failed"; tail "$R/pip.log"; pack; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONPATH=${PYTHONPATH:-}${PYTHONPATH:+:}$PWD

# 1. What the machine has.
step env 20 bash -c "nvidia-smi || true; $PY -c 'import jax, flax, optax, orbax.checkpoint as o, grain, \
tensorflow_datasets as t, ml_collections, chex; print(jax.__version__, jax.devices(), flax.__version__, \
optax.__version__, t.__version__)'; nproc; free -g"

# 2. B3: RoFormer-base MLM at 512 in bf16. Six variants with two profiles took 143 s (second
#    session); the third session's four (the base, q/k/v as one matmul, the tanh GELU, the
#    config's own step) with one profile need about 120 (160 leaves room).
#    --trace: a profile of "auto" (4 steps) and where its device time goes
#    (bench/trace_summary.py, printed into b3.log); its Chrome trace and compiled HLO come back.
#    Fifth session (issue 41): the recompute A/B (gelu-saved), the dropout PRNG (config and its
#    rbg / unsafe_rbg twins) and the masked head against [B, T, V] logits (full-logits); no
#    profile (B3_TRACE=1 adds one of "auto").
B3_VARIANTS=${B3_VARIANTS:-auto,gelu-saved,config,config-rbg,config-unsafe-rbg,full-logits}
[ "$SMOKE" = 1 ] && B3_VARIANTS=auto,config,config-rbg
B3_TRACE=$([ "${B3_TRACE:-0}" = 1 ] && echo "--trace /tmp/b3_trace")
step b3 190 "$PY" bench/gpu_mlm.py $S --variants $B3_VARIANTS --rounds 3 --steps 4 --record --json-out "$R/b3.json" $B3_TRACE
want b3 && for v in auto xla; do
  f=$(ls -t /tmp/b3_trace/$v/plugins/profile/*/*.trace.json.gz 2>/dev/null | head -1)
  [ -n "$f" ] && [ "$(stat -c %s "$f")" -lt 6000000 ] && cp "$f" "$R/b3_trace_$v.json.gz"
  cp /tmp/b3_trace/$v/step.hlo.txt.gz "$R/b3_hlo_$v.txt.gz" 2>/dev/null
done; want b3 && pack
#    The dense/chunked switch on the real model: packed rows (a dense mask, so no cuDNN) at
#    B=6 x T=4096, where one call's float32 logits (4.5 GiB) pass GPU_DENSE_LOGITS_BYTES and "auto"
#    takes the chunked kernel, against XLA's dense attention forced (time and temp memory).
step switch 90 "$PY" bench/gpu_mlm.py $S --batch $([ "$SMOKE" = 1 ] && echo 2 || echo "${SWITCH_BATCH:-6}") \
  --seq $([ "$SMOKE" = 1 ] && echo 1024 || echo 4096) --variants packed,packed-xla --rounds 2 --steps 2 --warmup 1 \
  --json-out "$R/switch.json"
#    and larger batches (MFU grows with the matmuls' size), not recorded: B = 128 as it is, and
#    B = 256 with --remat dots (the matmul outputs kept, the elementwise work recomputed)
step b3_b128 80 "$PY" bench/gpu_mlm.py $S --batch $([ "$SMOKE" = 1 ] && echo 4 || echo 128) --variants auto,fused-qkv \
  --rounds 3 --steps 4 --json-out "$R/b3_b128.json"
step b3_b256 70 "$PY" bench/gpu_mlm.py $S --batch $([ "$SMOKE" = 1 ] && echo 4 || echo 256) --remat dots --variants auto \
  --rounds 3 --steps 3 --json-out "$R/b3_b256.json"

# 3. B1: the RoPE op against a same-run copy, 1-D and multi-axis, HF's op on the GPU beside it.
B1_SHAPE=8,4096,32,128  # 512 MiB of fp32: ten times the L2
step b1 60 "$PY" bench/rope.py $S --shape $B1_SHAPE --no-dense --tables-in --pallas --rounds 9 --record --torch-python "$(command -v "$PY")" \
  --torch-device "$([ "$SMOKE" = 1 ] && echo cpu || echo cuda)"

# 4. Attention scaling to 64K in bf16: dense (mask array), XLA causal, cuDNN, chunked, linear, windowed.
METHODS=dense,chunked,linear,causal,cudnn
[ "$SMOKE" = 1 ] && METHODS=dense,chunked,linear,causal
step attention 100 "$PY" bench/long_context.py $S --dtype bfloat16 --methods $METHODS --min-len 4096 \
  --max-len 65536 --max-time-len 65536 --no-train --cp-sizes "" --skip-lens 16384 --tile-lens "" \
  --window-lens 16384,65536 --rounds 2 --record --figure "$R/attention_gpu.png"

#    64K forward+backward alone (the second session's 100 s ended before it): the O(N) methods.
L64=$([ "$SMOKE" = 1 ] && echo 2048 || echo 65536)
step attention64 70 "$PY" bench/long_context.py $S --dtype bfloat16 --methods dense,chunked,linear$([ "$SMOKE" = 1 ] || echo ,cudnn) \
  --min-len $L64 --max-len $L64 --max-time-len $L64 --no-train --cp-sizes "" --skip-lens 0 --tile-lens "" \
  --window-lens $L64 --rounds 2 --no-figure

# 5. A real run: train (with a checkpoint), generate, resume to a later step, evaluate. The
#    third session's 100 s ended while generate.py was starting (after 60 + 30 steps): now it
#    runs right after the first training, and every command is timed.
W=/tmp/gpu_default
N=$([ "$SMOKE" = 1 ] && echo 4 || echo 60)  # default.py warms up for 50 steps
CFG=configs/default.py$([ "$SMOKE" = 1 ] && echo :smoke)
#    (Fifth session: generate.py under its own 60 s limit, since the third session's stopped
#    after printing its prompt; the resume, already shown twice on the GPU, is left out.)
step run 140 bash -c "set -e; rm -rf $W; \
  time $PY train.py --config $CFG --workdir $W --config.total_steps=$N \
    --config.checkpoint_every_steps=$N --config.eval_every_steps=$N; \
  time timeout 60 $PY generate.py --config $CFG --workdir $W --prompt 'def ' --max_new_tokens 32 || echo generate rc=\$?; \
  time $PY eval.py --config $CFG --workdir $W --config.eval.length_factors=1,2; \
  cp $W/metrics.jsonl $R/run_metrics.jsonl || true"
#    configs/bert_base_mlm.py's smoke model in bf16 on the offline byte corpus (its wikipedia
#    needs a download): train with checkpoints, resume, evaluate.
WM=/tmp/gpu_mlm
MLM="configs/bert_base_mlm.py:smoke --config.data.dataset=python_stdlib_bytes"
step run_mlm 50 bash -c "set -e; rm -rf $WM; \
  $PY train.py --config $MLM --workdir $WM --config.total_steps=40 --config.checkpoint_every_steps=20 \
    --config.eval_every_steps=20; \
  $PY train.py --config $MLM --workdir $WM --config.total_steps=60 --config.checkpoint_every_steps=20 \
    --config.eval_every_steps=20; \
  $PY eval.py --config $MLM --workdir $WM"

# 6. Issue 28 on the GPU machine's host CPU (an Intel Xeon with AVX-512 and AMX; 16 cores):
#    B9 (the encoder forward) and B2 (the MLM train step) against the image's torch on the
#    CPU, JAX on its CPU backend, huge pages on for both sides; recorded per CPU kind.
TP=$(command -v "$PY")
CPU_ENV=(env JAX_PLATFORMS=cpu CUDA_VISIBLE_DEVICES= GLIBC_TUNABLES=glibc.malloc.hugetlb=1)
step cpu_b9 120 "${CPU_ENV[@]}" "$PY" bench/inference.py $S $([ "$SMOKE" = 1 ] || echo --record) --torch-python "$TP"
step cpu_b2 220 "${CPU_ENV[@]}" "$PY" bench/train_step.py $S $([ "$SMOKE" = 1 ] || echo --record) --torch-python "$TP" \
  --wait-quiet 5 --quiet-budget 30

# 6. The suite on the GPU backend: the fast tier, 8 workers sharing the GPU (no preallocation).
#    It runs last and takes what is left of $BUDGET (a cut benchmark loses its table; a cut suite
#    keeps its lines): -v prints one line per test, so a run cut by the limit still says what passed
#    and failed. The model library's files come first (pytest collects each file once).
LIB=(rope rope_variants rotary_spec rope_scaling rope_anchor_golden rope_hf_golden rope_hf_families attention
     chunked_attention window_attention models layer_types decoding vit hf losses context_parallel optim metrics)
SUITE_ARGS=(-n 8 -v -m "not slow" -p no:cacheprovider --timeout 120)
for f in "${LIB[@]}"; do SUITE_ARGS+=("tests/test_$f.py"); done
SUITE_ARGS+=(tests)
[ "$SMOKE" = 1 ] && SUITE_ARGS=(-n 2 -v -p no:cacheprovider tests/test_rope.py)
want suite && XLA_PYTHON_CLIENT_PREALLOCATE=false step suite $(( BUDGET - ($(date +%s) - T0) )) "$PY" -m pytest "${SUITE_ARGS[@]}"

log "done"
pack
grep -h "" "$R/steps.log"
