"""Samples while training: what the model does with a few fixed validation examples, at each eval.

A loss curve says the model is learning; a sample says what it learned. At each evaluation the
trainer takes the first `config.samples_per_eval` rows of the first validation batch (the same
rows every time, so samples from different steps compare) and decodes them with the model as
it is, through its task (`tasks.get(config.task).samples`, which calls one function here):
- lm: the first quarter of the row's first document as the prompt, then a greedy continuation
  (`decoding.generate`) of `config.sample_max_new_tokens` tokens, and a sampled one (temperature
  0.8, top-k 40, the same seed every time: `SAMPLING`), beside the document's true continuation;
- seq2seq: the row's first source sentence, greedily translated (`decoding.translate`),
  beside its reference;
- mlm: the row's first segment as the model saw it (each [MASK] shown as "[MASK]"), then its
  top-1 fill at every masked slot, beside the original text, and how many fills are right;
- classification: the row's text, the predicted label beside the true one (by name where the
  dataset names its labels, `data.label_names`);
- image: the predicted class and its probability beside the true class, by name likewise.

Each sample is a dict {"prompt", "output", "reference"} of text. The trainer writes them to
`<workdir>/samples.jsonl` (with the step), to TensorBoard as text, and prints the first under
the progress bar (`screen`: input, output, reference). Greedy decoding and the fixed sampling
seed keep samples deterministic for a given state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from roformer_jax import decoding


def _first_segment(row_segments: np.ndarray | None, row_ids: np.ndarray, pad_id: int) -> np.ndarray:
  """Indices of the row's first packed segment (or of its non-pad tokens without segment ids)."""
  if row_segments is None:
    return np.flatnonzero(row_ids != pad_id)
  nonzero = row_segments[row_segments != 0]
  return np.flatnonzero(row_segments == nonzero[0]) if nonzero.size else np.array([], np.int64)


def _row_segments(batch, i: int) -> np.ndarray | None:
  """Row i's segment ids, or None for rows without (data.document_mask=False: one sequence)."""
  segments = batch.get("segment_ids")
  return None if segments is None else segments[i]


def lm_samples(model, batch, tokenizer, n: int, max_new_tokens: int,
               labels: Sequence[str] | None = None) -> list[dict[str, Any]]:
  """Greedy continuations of the first quarter of each row's first document."""
  del labels  # no classes
  docs = [batch["inputs"][i][_first_segment(_row_segments(batch, i), batch["inputs"][i], tokenizer.pad_id)]
          for i in range(n)]
  prompt_len = max(1, min(min(len(d) for d in docs), max(4, batch["inputs"].shape[1] // 4)))
  prompts = np.stack([d[:prompt_len] for d in docs]).astype(np.int32)
  out = np.asarray(decoding.generate(model, prompts, max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_id,
                                     pad_id=tokenizer.pad_id))
  # A greedy continuation of a small model repeats itself ('the the the') long after the model has learned a lot:
  # a seeded sample (the same seed at every evaluation) shows the distribution it learned beside it.
  import jax
  sampled = np.asarray(decoding.generate(model, prompts, max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_id,
                                         pad_id=tokenizer.pad_id, temperature=SAMPLE_TEMPERATURE, top_k=SAMPLE_TOP_K,
                                         rng=jax.random.key(SAMPLE_SEED)))
  return [{"prompt": tokenizer.decode(p), "output": tokenizer.decode(_until_eos(o, tokenizer.eos_id)),
           "sampled": tokenizer.decode(_until_eos(s, tokenizer.eos_id)), "sampling": SAMPLING,
           "reference": tokenizer.decode(d[prompt_len:prompt_len + max_new_tokens])}
          for p, o, s, d in zip(prompts, out, sampled, docs, strict=True)]


SAMPLE_TEMPERATURE, SAMPLE_TOP_K, SAMPLE_SEED = 0.8, 40, 0
SAMPLING = f"temperature {SAMPLE_TEMPERATURE}, top-k {SAMPLE_TOP_K}, seed {SAMPLE_SEED}"
MASK_SHOWN = "[MASK]"  # how a masked slot of an MLM sample's input is shown (its token decodes to nothing)


def screen(sample: dict[str, Any], step: int) -> str:
  """A sample as the lines printed under the progress bar: the input, the model's output (and a sampled one), the
  reference, so a person can judge it."""
  lines = [f"sample at step {step}:", f"  input:     {sample['prompt']!r}"]
  lines.append(f"  model:     {sample['output']!r}" + (" (greedy)" if "sampled" in sample else ""))
  if "sampled" in sample:
    lines.append(f"  sampled:   {sample['sampled']!r} ({sample['sampling']})")
  if "filled_right" in sample:
    lines[-1] += f" ({sample['filled_right']} masked slots right)"
  lines.append(f"  reference: {sample['reference']!r}")
  return "\n".join(lines)


def _until_eos(ids: np.ndarray, eos_id: int) -> np.ndarray:
  ends = np.flatnonzero(ids == eos_id)
  return ids[:ends[0]] if ends.size else ids


def seq2seq_samples(model, batch, tokenizer, n: int, max_new_tokens: int,
                    labels: Sequence[str] | None = None) -> list[dict[str, Any]]:
  """Greedy translations of each row's first sentence pair, through eval's own decoder."""
  del labels  # no classes
  src_seg, tgt_seg = batch.get("src_segment_ids"), batch.get("tgt_segment_ids")
  sources = [batch["src"][i][_first_segment(None if src_seg is None else src_seg[i], batch["src"][i],
                                            tokenizer.pad_id)] for i in range(n)]
  targets = [batch["tgt_out"][i][_first_segment(None if tgt_seg is None else tgt_seg[i], batch["tgt_out"][i],
                                                tokenizer.pad_id)] for i in range(n)]
  src = np.full((n, max(len(s) for s in sources)), tokenizer.pad_id, np.int32)
  tgt = np.full((n, max(len(t) for t in targets)), tokenizer.pad_id, np.int32)
  for i, (s, t) in enumerate(zip(sources, targets, strict=True)):
    src[i, :len(s)], tgt[i, :len(t)] = s, t
  unpacked = {"src": src, "tgt_out": tgt, "weights": (tgt != tokenizer.pad_id).astype(np.float32)}
  outputs, references = decoding.translate(model, [unpacked], tokenizer, beam_size=1, max_len=max_new_tokens)
  return [{"prompt": tokenizer.decode(_until_eos(s, tokenizer.eos_id)), "output": o, "reference": r}
          for s, o, r in zip(sources, outputs, references, strict=True)]


def mlm_samples(model, batch, tokenizer, n: int, max_new_tokens: int = 0,
                labels: Sequence[str] | None = None) -> list[dict[str, Any]]:
  """Each row's first segment with the top-1 fill at every masked slot (max_new_tokens unused)."""
  del labels  # no classes
  del max_new_tokens
  inputs = np.asarray(batch["inputs"][:n])
  truth = inputs.copy()
  if "masked_positions" in batch:  # the pipeline's compact form: M slots per row
    for i in range(n):
      slots = batch["masked_positions"][i][batch["masked_weights"][i] > 0]
      truth[i, slots] = batch["masked_targets"][i][batch["masked_weights"][i] > 0]
  else:
    scored = batch["weights"][:n] > 0
    truth[scored] = batch["targets"][:n][scored]
  scored = truth != inputs  # BERT also scores slots left unchanged; only changed ones show here
  segments = batch.get("segment_ids")
  logits = model(inputs, segment_ids=None if segments is None else segments[:n], positions=batch["positions"][:n],
                 token_type_ids=None if batch.get("token_type_ids") is None else batch["token_type_ids"][:n])
  filled = np.where(scored, np.asarray(logits).argmax(-1), inputs)
  out = []
  for i in range(n):
    keep = _first_segment(_row_segments(batch, i), inputs[i], tokenizer.pad_id)
    right, total = int((filled[i][keep] == truth[i][keep])[scored[i][keep]].sum()), int(scored[i][keep].sum())
    out.append({"prompt": _with_masks(inputs[i][keep], tokenizer), "output": tokenizer.decode(filled[i][keep]),
                "reference": tokenizer.decode(truth[i][keep]), "filled_right": f"{right}/{total}"})
  return out


def _with_masks(ids: np.ndarray, tokenizer) -> str:
  """The text of `ids` with each [MASK] token shown as MASK_SHOWN (decoded, it is nothing: the slot vanished)."""
  mask_id = getattr(tokenizer, "mask_id", None)
  if mask_id is None:
    return tokenizer.decode(ids)
  at = np.flatnonzero(ids == mask_id)
  pieces: list[str] = []
  start = 0
  for i in at:
    pieces += [tokenizer.decode(ids[start:i]), MASK_SHOWN]
    start = int(i) + 1
  return "".join(pieces + [tokenizer.decode(ids[start:])])


def _class(k: int, labels: Sequence[str] | None) -> str:
  """A class as a person reads it: its name and number where the dataset names its classes."""
  return f"{labels[k]} ({k})" if labels and 0 <= k < len(labels) else str(k)


def _pair_text(ids: np.ndarray, types: np.ndarray | None, mask: np.ndarray, tokenizer) -> str:
  """A classification row's text: its sentence, or its two sentences joined by " | "."""
  ids, kinds = ids[mask > 0], (np.zeros_like(ids) if types is None else types)[mask > 0]
  parts = [tokenizer.decode(ids[kinds == t]) for t in np.unique(kinds)]
  return " | ".join(parts)


def classification_samples(model, batch, tokenizer, n: int, max_new_tokens: int = 0,
                           labels: Sequence[str] | None = None) -> list[dict[str, Any]]:
  """Each row's text, the predicted label beside the true one (by name where the dataset names
  its labels; a regression's scores to two decimals). max_new_tokens unused."""
  del max_new_tokens
  types = batch.get("token_type_ids")
  out = np.asarray(model(batch["input_ids"][:n], attention_mask=batch["attention_mask"][:n],
                         token_type_ids=None if types is None else types[:n]))
  texts = [_pair_text(batch["input_ids"][i], None if types is None else types[i], batch["attention_mask"][i], tokenizer)
           for i in range(n)]
  if out.shape[-1] == 1:  # regression (STS-B)
    return [{"prompt": texts[i], "output": f"{out[i, 0]:.2f}", "reference": f"{float(batch['label'][i]):.2f}"}
            for i in range(n)]
  predicted = out.argmax(-1)
  return [{"prompt": texts[i], "output": _class(int(predicted[i]), labels),
           "reference": _class(int(batch["label"][i]), labels)} for i in range(n)]


def image_samples(model, batch, tokenizer, n: int, max_new_tokens: int = 0,
                  labels: Sequence[str] | None = None) -> list[dict[str, Any]]:
  """The predicted class beside the true one (by name where the dataset names its classes), with
  the predicted class's probability (tokenizer and max_new_tokens unused)."""
  del tokenizer, max_new_tokens
  logits = np.asarray(model(batch["image"][:n]), np.float64)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  predicted = probs.argmax(-1)
  return [{"prompt": f"validation image {i}",
           "output": f"{_class(int(predicted[i]), labels)}, p={probs[i, predicted[i]]:.2f}",
           "reference": _class(int(batch["label"][i]), labels)} for i in range(n)]


def num_rows(batch: dict[str, np.ndarray], num: int) -> int:
  """min(num, the batch's rows): how many rows a task's `samples` decodes."""
  return min(num, next(iter(batch.values())).shape[0])


__all__ = ["SAMPLING", "classification_samples", "image_samples", "lm_samples", "mlm_samples", "num_rows", "screen",
           "seq2seq_samples"]
