"""The training system: what `train.py` runs. Needs the `[train]` extra (optax, orbax, grain,
TFDS, sentencepiece, ml-collections, tensorboardX, matplotlib, tqdm).

- `trainer`: `train(config, workdir)`, the public `train_step` / `eval_step` / `eval_sums`
  builders, and the loop; `hooks`: the periodic work the loop calls (log, eval, samples,
  checkpoint, feature redraw, stop, profiler).
- `tasks`: one object per task (lm, mlm, seq2seq, classification); `samples`: what each task
  shows during training.
- `data`: the input pipeline (TFDS builders, tokenizers, Grain packing and masking).
- `optim`: the paper's optax schedules and optimisers; `checkpoints`: orbax, atomic and
  exactly resumable; `metrics`: JSON lines, TensorBoard, plots, the progress bar.
- Reliability: `stopping` (signals, the stop file), `workdir_lock`, `launch` (multi-process
  start) and `peers` (heartbeats).

The model library it trains (`roformer_jax.rope`, `attention`, `models`, ...) needs none of
these packages.
"""
