"""Evaluation and generation from a trained workdir: what `eval.py` and `generate.py` run.
Needs the `[train]` extra (it reads the training's config, data and checkpoints) and the
`[eval]` extra (sacreBLEU for BLEU).

- `evaluate`: every metric of a task, the length curve, pass-key retrieval, checkpoint
  averaging; writes `eval_results.json`.
- `eval_metrics`: the metrics as NumPy functions (BLEU, GLUE's, bits per byte, perplexity).
- `generation`: continue text, translate, fill masks (generate.py).
- `passkey`: pass-key retrieval scoring and its heat map (the prompts are
  `roformer_jax.training.data.passkey`'s).

Dependencies run one way: the model library <- `training` <- `evaluation`.
"""
