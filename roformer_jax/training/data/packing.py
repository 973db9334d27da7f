"""Packing token sequences into fixed-length rows with segment ids and per-segment positions.

Letters: B batch, T row length.

A packed row holds several documents (segments) back to back. ``segment_ids`` number them
1, 2, ... within the row and 0 marks padding; ``positions`` restart at 0 at every segment
and equal ``rope.positions_from_segments(segment_ids)`` (this module has its NumPy twin, so
the input pipeline never touches JAX). Attention must be masked to ``segment_ids[q] ==
segment_ids[k] != 0``.

We use Grain's ``ConcatThenSplitIterDataset``: it fills every row completely (padding only in
the very last row of a finite stream), splits a document that does not fit across rows, and its
iterator state is small (parent state + the remainder's slice) and restores exactly (after the
JSON fix below). Grain's first-fit/best-fit packers never split a document and pad instead,
which wastes most of a row on long documents. For training, long documents are first cut into
row-sized chunks (``ChunkFeatures``) so that a window shuffle can mix chunks of different
documents; a chunk that fills a row exactly is emitted as that row, so chunks keep their full
context and only the shorter tails of documents share rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grain
import numpy as np

SEGMENT_SUFFIX, POSITION_SUFFIX = "_segment_ids", "_positions"


def positions_from_segments(segment_ids: np.ndarray) -> np.ndarray:
  """Positions that restart at 0 wherever the segment id changes (NumPy twin of the rope one).

  Args:
    segment_ids: int[..., T].

  Returns:
    int32[..., T]. Example: [1, 1, 1, 2, 2, 0] -> [0, 1, 2, 0, 1, 0].
  """
  seg = np.asarray(segment_ids)
  index = np.broadcast_to(np.arange(seg.shape[-1], dtype=np.int32), seg.shape)
  starts = np.concatenate([np.ones(seg.shape[:-1] + (1,), bool), seg[..., 1:] != seg[..., :-1]], -1)
  last_start = np.maximum.accumulate(np.where(starts, index, 0), axis=-1)
  return (index - last_start).astype(np.int32)


class ChunkFeatures(grain.experimental.FlatMapTransform):
  """Cuts every array of a dict element into consecutive chunks of at most ``length`` items.

  All arrays of an element must have the same length (they are aligned token features).
  """

  max_fan_out = 1 << 30  # only used by MapDataset flat maps; IterDataset ones take any number.

  def __init__(self, length: int):
    if length < 1:
      raise ValueError(f"chunk length must be >= 1, got {length}.")
    self.length = length

  def flat_map(self, element: Mapping[str, np.ndarray]) -> Sequence[dict[str, np.ndarray]]:
    n = len(next(iter(element.values())))
    return [{k: v[i:i + self.length] for k, v in element.items()} for i in range(0, n, self.length)]


def chunk_and_shuffle(ds: grain.IterDataset, *, chunk_length: int, window: int,
                      seed: int) -> grain.IterDataset:
  """Cuts documents into chunks of ``chunk_length`` and shuffles them in a window of ``window``.

  ``window`` <= 1 returns ``ds`` unchanged (the packer splits long documents by itself).
  """
  if window <= 1:
    return ds
  ds = grain.experimental.FlatMapIterDataset(ds, ChunkFeatures(chunk_length))
  return grain.experimental.WindowShuffleIterDataset(ds, window_size=window, seed=seed)


class _JsonSafeState(grain.DatasetIterator):
  """Passes elements through; restores the tuples that a JSON round trip turns into lists.

  Orbax saves a Grain iterator state as JSON. ``ConcatThenSplitIterDataset`` keeps the slice
  of a half-packed document as a tuple and compares it with the tuple ``(-1, -1)``; after JSON
  that is a list and the comparison fails, so the restored iterator would repack wrongly.
  """

  def __init__(self, parent: grain.DatasetIterator):
    super().__init__(parent)

  def __next__(self):
    return next(self._parent)

  def get_state(self) -> dict[str, Any]:
    return self._parent.get_state()

  def set_state(self, state: dict[str, Any]) -> None:
    self._parent.set_state(_tuples_for_slices(state))


def _tuples_for_slices(state: Any) -> Any:
  if isinstance(state, dict):
    return {k: ({f: tuple(s) for f, s in v.items()} if k == "remainder_slices" else _tuples_for_slices(v))
            for k, v in state.items()}
  if isinstance(state, list):
    return [_tuples_for_slices(v) for v in state]
  return state


class _JsonSafeDataset(grain.IterDataset):

  def __iter__(self) -> grain.DatasetIterator:
    return _JsonSafeState(self._parent.__iter__())


def pack(ds: grain.IterDataset, lengths: Mapping[str, int]) -> grain.IterDataset:
  """Packs dict elements of 1-D arrays into rows; adds ``segment_ids`` and ``positions``.

  Args:
    ds: elements ``{name: int/float[n]}``, all arrays of one element of equal length ``n``.
    lengths: row length per feature (use the same T for aligned features).

  Returns:
    Elements ``{name: [T] ...}`` zero-padded only at the end of a finite stream, plus
    ``segment_ids`` int32[T] (1, 2, ... ; 0 = padding) and ``positions`` int32[T], both taken
    from the first feature.
  """
  first = next(iter(lengths))
  # split_full_length_features=False: a chunk that fills a row exactly becomes that row, so
  # row-sized chunks stay whole (one segment, full context) and only document tails share rows.
  packed = grain.experimental.ConcatThenSplitIterDataset(ds, length_struct=dict(lengths),
                                                         split_full_length_features=False)

  def tidy(row: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {k: row[k] for k in lengths}
    out["segment_ids"] = row[first + SEGMENT_SUFFIX].astype(np.int32)
    out["positions"] = positions_from_segments(out["segment_ids"])
    return out

  return _JsonSafeDataset(packed).map(tidy)
