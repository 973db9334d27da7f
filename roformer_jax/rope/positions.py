"""Position builders: packed segments, padding masks (1-D), and the multi-axis positions of the
multimodal and vision variants."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

# --------------------------------------------------------------------------------------
# Position helpers.
# --------------------------------------------------------------------------------------


def positions_from_segments(segment_ids: ArrayLike) -> jax.Array:
  """Positions that restart at 0 at every packed segment.

  A new segment starts wherever the id changes from the previous token, so padding
  (conventionally id 0) at the end forms its own segment; mask it out of attention.

  Args:
    segment_ids: int[..., T].

  Returns:
    int32[..., T]. Example: [1, 1, 1, 2, 2, 0] -> [0, 1, 2, 0, 1, 0].
  """
  seg = jnp.asarray(segment_ids)
  if seg.ndim < 1 or not jnp.issubdtype(seg.dtype, jnp.integer):
    raise TypeError(f"segment_ids must be an integer array [..., T], got dtype {seg.dtype}, shape {seg.shape}.")
  t = seg.shape[-1]
  index = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), seg.shape)
  starts = jnp.concatenate([jnp.ones(seg.shape[:-1] + (1,), bool), seg[..., 1:] != seg[..., :-1]], axis=-1)
  last_start = jax.lax.cummax(jnp.where(starts, index, 0), axis=seg.ndim - 1)
  return index - last_start


def positions_from_mask(mask: ArrayLike) -> jax.Array:
  """Positions 0, 1, ... over the real tokens of a left- or right-padded batch.

  Args:
    mask: bool or int[..., T], nonzero for real tokens.

  Returns:
    int32[..., T]; padding gets position 0. Example: [0, 0, 1, 1, 1] -> [0, 0, 0, 1, 2].
  """
  mask = jnp.asarray(mask)
  if mask.ndim < 1 or not (jnp.issubdtype(mask.dtype, jnp.integer) or mask.dtype == jnp.bool_):
    raise TypeError(f"mask must be a bool or integer array [..., T], got dtype {mask.dtype}, shape {mask.shape}.")
  real = mask.astype(bool)
  pos = jnp.cumsum(real.astype(jnp.int32), axis=-1) - 1
  return jnp.where(real, pos, 0)




# --------------------------------------------------------------------------------------
# Multi-axis positions: multimodal sequences (M-RoPE) and image grids (2-D RoPE).
# --------------------------------------------------------------------------------------

_RUN_KINDS = ("text", "image", "video")


def _merged_grid(grid: Any, spatial_merge_size: int, what: str) -> tuple[int, int, int]:
  try:
    t, h, w = (int(v) for v in grid)
  except (TypeError, ValueError):
    raise ValueError(f"{what} grid must be (t, h, w) in patches, got {grid!r}.") from None
  m = spatial_merge_size
  if min(t, h, w) < 1 or h % m or w % m:
    raise ValueError(f"{what} grid (t, h, w) = {(t, h, w)} must be positive, with h and w divisible by "
                     f"spatial_merge_size={m} (grids are in patches before merging).")
  return t, h // m, w // m


def multimodal_positions(runs: Sequence[tuple[Any, ...]], *, spatial_merge_size: int = 2,
                         tokens_per_second: float | None = None,
                         split_videos: bool = False) -> np.ndarray:
  """M-RoPE position ids (t, h, w) of one sequence of text, image and video runs.

  The semantics the Qwen2-VL / Qwen2.5-VL checkpoints were trained with (transformers v4's
  `get_rope_index`, vLLM's `get_mrope_input_positions`, the Qwen team's PR #35569):
  - a text run of n tokens gets t = h = w = s, s + 1, ..., s + n - 1;
  - a vision run of grid (t, h, w) patches covers t * (h / m) * (w / m) tokens (m =
    spatial_merge_size), t-major, then h, then w, with ids (s + tau(i_t), s + i_h, s + i_w);
  - each run starts at s = max(every id so far) + 1 (0 for the first).
  tau(i) = i (Qwen2-VL, tokens_per_second None). With tokens_per_second (Qwen2.5-VL: 2),
  tau(i) = floor(i * seconds_per_grid * tokens_per_second), computed in floating point, for a
  video, and 0 for an image. transformers 5.3 to 5.17 differ: text after a video starts at
  s + max(h, w) / m (#45381), and fractional seconds_per_grid were truncated until PR #48669;
  docs/rope.md lists these.

  Args:
    runs: a sequence of ("text", n), ("image", (t, h, w)) or ("video", (t, h, w),
      seconds_per_grid); grids in patches before merging.
    spatial_merge_size: m (2 in every Qwen-VL).
    tokens_per_second: None (Qwen2-VL) or the config's vision_config.tokens_per_second.
    split_videos: Qwen3-VL / Qwen3.5: each video frame is its own run of grid (1, h, w), so every
      frame has one temporal id and the next frame starts after the previous one's largest id.
      (Qwen3-VL's processor puts timestamp text between frames: pass those as text runs and the
      frames as images instead.)

  Returns:
    int32[T, 3]: (t, h, w) per token. The continuation for decoding: the j-th new token
    (j = 0, 1, ...) after these T gets max(ids) + 1 + j on every axis, i.e. position T + j +
    rope_delta with rope_delta = max(ids) + 1 - T (transformers' `rope_deltas`).
  """
  if isinstance(spatial_merge_size, bool) or not isinstance(spatial_merge_size, int) or spatial_merge_size < 1:
    raise ValueError(f"spatial_merge_size must be a positive int, got {spatial_merge_size!r}.")
  if tokens_per_second is not None and not float(tokens_per_second) >= 0:
    raise ValueError(f"tokens_per_second must be None or a number >= 0, got {tokens_per_second!r}.")
  pieces, start = [], 0
  for i, run in enumerate(runs):
    if not isinstance(run, (tuple, list)) or not run or run[0] not in _RUN_KINDS:
      raise ValueError(f"run {i} = {run!r}: expected ('text', n), ('image', (t, h, w)) or "
                       "('video', (t, h, w), seconds_per_grid).")
    kind = run[0]
    if kind == "text":
      if len(run) != 2 or isinstance(run[1], bool) or not isinstance(run[1], (int, np.integer)) or run[1] < 0:
        raise ValueError(f"run {i} = {run!r}: a text run is ('text', n) with n >= 0 tokens.")
      ids = np.repeat((start + np.arange(int(run[1])))[:, None], 3, axis=1)
      frames = [ids]
    else:
      if kind == "image" and len(run) != 2 or kind == "video" and len(run) != 3:
        raise ValueError(f"run {i} = {run!r}: expected ('image', (t, h, w)) or ('video', (t, h, w), "
                         "seconds_per_grid).")
      t, h, w = _merged_grid(run[1], spatial_merge_size, f"run {i} ({kind})")
      seconds = float(run[2]) if kind == "video" else 0.0
      if seconds < 0 or not np.isfinite(seconds):
        raise ValueError(f"run {i}: seconds_per_grid must be a finite number >= 0, got {run[2]!r}.")
      grids = [1] * t if kind == "video" and split_videos else [t]
      frames = []
      for frame_t in grids:  # each frame of a split video starts after the previous one
        it = np.arange(frame_t)
        if tokens_per_second is None:
          tau = it
        else:
          tau = np.floor(it * seconds * float(tokens_per_second)).astype(np.int64)
        ids = np.stack(np.broadcast_arrays(tau[:, None, None], np.arange(h)[None, :, None],
                                           np.arange(w)[None, None, :]), axis=-1).reshape(-1, 3)
        frames.append(ids + start)
        start = int(frames[-1].max()) + 1
    pieces.extend(frames)
    if kind == "text" and len(frames[0]):
      start = int(frames[0].max()) + 1
  out = np.concatenate(pieces, axis=0) if pieces else np.zeros((0, 3), np.int64)
  if out.size and out.max() >= 2**31:
    raise ValueError(f"position ids reach {int(out.max())}, past int32.")
  return out.astype(np.int32)


_OMNI_MODELS = ("qwen2.5-omni", "qwen3-omni")
_OMNI_KINDS = ("text", "image", "video", "audio", "video_audio")


def omni_audio_tokens(mel_frames: int, *, model: str = "qwen2.5-omni", n_window: int = 50) -> int:
  """The number of audio tokens an Omni thinker puts in its prompt for an audio of `mel_frames` mel frames
  (transformers' `audio_seqlens` / `audio_feature_lengths`), the audio encoder's output length.

  qwen2.5-omni: a = (L - 1) // 2 + 1, then (a - 2) // 2 + 1 (the formula its get_rope_index inlines).
  qwen3-omni: with c = 2 * n_window (its audio_config.n_window, 50): r = L mod c, f = (r - 1) // 2 + 1,
  then ((f - 1) // 2 + 1 - 1) // 2 + 1 + (L // c) * 13 (`_get_feat_extract_output_lengths`, floor division
  throughout: an exact multiple of c, r = 0, still adds 1 token, as the model computes it).
  """
  _check_count("mel_frames", mel_frames)
  if model == "qwen2.5-omni":
    return ((int(mel_frames) - 1) // 2 + 1 - 2) // 2 + 1
  if model == "qwen3-omni":
    _check_count("n_window", n_window)
    c = 2 * int(n_window)
    f = (int(mel_frames) % c - 1) // 2 + 1
    return ((f - 1) // 2 + 1 - 1) // 2 + 1 + (int(mel_frames) // c) * 13
  raise ValueError(f"model={model!r}: expected one of {_OMNI_MODELS}.")


def _chunk_bounds(values: np.ndarray, per_chunk: float, base: float) -> list[tuple[int, int]]:
  """Qwen2.5-Omni's get_chunked_index: cut before token i when values[i] - base >= k * per_chunk, k = 1, 2, ...
  advancing k by one per cut (so a jump over several chunks cuts at several successive tokens)."""
  bounds, start, k = [], 0, 1
  for i, v in enumerate(values):
    if v - base >= k * per_chunk:
      bounds.append((start, i))
      start, k = i, k + 1
  bounds.append((start, len(values)))
  return bounds


def omni_positions(runs: Sequence[tuple[Any, ...]], *, model: str = "qwen2.5-omni", spatial_merge_size: int = 2,
                   position_id_per_seconds: float = 25, seconds_per_chunk: float = 2) -> np.ndarray:
  """TMRoPE position ids (t, h, w) of one Qwen2.5-Omni or Qwen3-Omni thinker sequence: text, image, video,
  audio and audio-in-video runs, as transformers 5.24's `get_rope_index` of
  Qwen2_5OmniPreTrainedModelForConditionalGeneration / Qwen3OmniMoePreTrainedModelForConditionalGeneration
  computes them (tests/golden/multimodal_positions.npz, made by scripts/make_multimodal_positions_golden.py).

  Runs, in sequence order (grids (t, h, w) in patches before merging, m = spatial_merge_size, p =
  position_id_per_seconds):
  - ("text", n): n tokens at s, s + 1, ..., on all three axes. The wrapper tokens of image, video and audio
    runs (<|vision_bos|>, <|vision_eos|>, <|audio_bos|>, <|audio_eos|>) are text tokens: put them in the text
    runs (not those of a "video_audio" run, below).
  - ("image", (t, h, w)): t * (h / m) * (w / m) tokens, t-major then h then w, at (s + tau(i_t), s + i_h,
    s + i_w) with tau(i) = i * p (an image's temporal step is one second).
  - ("video", (t, h, w), seconds_per_grid): the same with tau(i) = i * seconds_per_grid * p, computed in
    float32 (torch: arange(t) * float32(seconds) * p); qwen2.5-omni truncates it to an integer (`.long()`),
    qwen3-omni keeps the float (fractional ids, and every later id carries the fraction).
  - ("audio", n): n audio tokens (`omni_audio_tokens` of the mel length) at s, s + 1, ... on all axes.
  - ("video_audio", (t, h, w), seconds_per_grid, n): a video with its audio (`use_audio_in_video=True`), as
    the tokens <|vision_bos|> <|audio_bos|>, the video's and audio's tokens interleaved, <|audio_eos|>
    <|vision_eos|> (the four wrappers are part of this run). The video's ids V are as a "video" run's and the
    audio's A are s, ..., s + n - 1 on all axes, both from the same s (after the two bos tokens).
    qwen2.5-omni: with chunk c = int(p * seconds_per_chunk), V and A are each cut into chunks where the
    temporal id minus s reaches c, 2c, 3c, ... -- one cut per token, so when the temporal id jumps over
    several multiples of c (seconds_per_grid * p > c) the next tokens are cut one by one, as the model's
    get_chunked_index does; the tokens are video chunk 0, audio chunk 0, video chunk 1, audio chunk 1, ...
    qwen3-omni: V and A are merged by temporal id (video first on ties; a stable merge in token order).
    Oddities reproduced: qwen2.5-omni gives the two bos tokens one id and the two eos tokens one id;
    qwen3-omni gives them consecutive ids. Both start the eos tokens at (the largest id of the last piece
    appended) + 1 -- the last chunk (qwen2.5-omni) or the last unmerged tail (qwen3-omni) -- not at the
    largest id of the whole run, so the eos and the text after it can reuse ids the video's h and w axes
    already hold.
  Every other run starts at s = (the largest id so far) + 1 (0 first). transformers' `use_audio_in_video`
  holds for a whole call, so a sequence mixes no "video" and "video_audio" runs (ValueError).
  Without any image or video grid transformers falls back to plain 1-D positions; these rules give the same.

  Args:
    runs: the runs above.
    model: "qwen2.5-omni" or "qwen3-omni".
    spatial_merge_size: m (2 in both).
    position_id_per_seconds: p (the thinker config's, 25 in both).
    seconds_per_chunk: qwen2.5-omni's config value (2); qwen3-omni does not use it.

  Returns:
    int32[T, 3] (qwen2.5-omni) or float32[T, 3] (qwen3-omni, whose ids are float32 in transformers).
  """
  if model not in _OMNI_MODELS:
    raise ValueError(f"model={model!r}: expected one of {_OMNI_MODELS}.")
  if isinstance(spatial_merge_size, bool) or not isinstance(spatial_merge_size, int) or spatial_merge_size < 1:
    raise ValueError(f"spatial_merge_size must be a positive int, got {spatial_merge_size!r}.")
  if not (np.isfinite(float(position_id_per_seconds)) and float(position_id_per_seconds) > 0):
    raise ValueError(f"position_id_per_seconds must be a positive number, got {position_id_per_seconds!r}.")
  q3 = model == "qwen3-omni"
  chunk = 0
  if not q3:
    chunk = int(float(position_id_per_seconds) * float(seconds_per_chunk))
    if chunk < 1:
      raise ValueError(f"position_id_per_seconds * seconds_per_chunk = {position_id_per_seconds} * "
                       f"{seconds_per_chunk} must be at least 1 (the chunk length in temporal ids).")
  kinds = {r[0] for r in runs if isinstance(r, (tuple, list)) and r}
  if "video" in kinds and "video_audio" in kinds:
    raise ValueError("runs mix 'video' and 'video_audio': transformers' use_audio_in_video holds for the whole "
                     "sequence, so every video has its audio or none does.")
  dt = np.float32 if q3 else np.int64
  p32 = np.float32(position_id_per_seconds)
  pieces: list[np.ndarray] = []

  def nxt() -> Any:  # the largest id of the last piece appended, + 1 (the models' st_idx)
    return pieces[-1].max() + dt(1) if pieces else dt(0)

  def seq(n: int, s: Any) -> np.ndarray:
    base: np.ndarray = np.arange(n).astype(dt)
    return np.repeat((base + dt(s))[:, None], 3, axis=1).astype(dt)

  def vision(t: int, h: int, w: int, tau: np.ndarray, s: Any) -> np.ndarray:
    ids = np.stack(np.broadcast_arrays(tau.astype(dt)[:, None, None], np.arange(h, dtype=dt)[None, :, None],
                                       np.arange(w, dtype=dt)[None, None, :]), axis=-1).reshape(-1, 3)
    return (ids + dt(s)).astype(dt)

  media = ("image", "video", "audio")
  cur: Any = None  # the models' st_idx where a text run hands over to the next run (exact float32 steps)
  for i, run in enumerate(runs):
    if not isinstance(run, (tuple, list)) or not run or run[0] not in _OMNI_KINDS:
      raise ValueError(f"run {i} = {run!r}: expected ('text', n), ('image', (t, h, w)), ('video', (t, h, w), "
                       "seconds_per_grid), ('audio', n) or ('video_audio', (t, h, w), seconds_per_grid, n).")
    kind = run[0]
    want = {"text": 2, "image": 2, "video": 3, "audio": 2, "video_audio": 4}[kind]
    if len(run) != want:
      raise ValueError(f"run {i} = {run!r}: a {kind!r} run has {want} fields.")
    if kind == "text":
      _check_count(f"run {i} (text) length", run[1], 0)
      lead = int(i > 0 and runs[i - 1][0] in media)  # the previous run's eos token
      tail = int(i + 1 < len(runs) and runs[i + 1][0] in media)  # the next run's bos token
      if run[1] < lead + tail:
        raise ValueError(f"run {i} = {run!r}: this text run must hold at least {lead + tail} token(s): the eos of "
                         "the run before it and the bos of the run after it.")
      if lead:
        pieces.append(seq(1, nxt()))
      body, st = int(run[1]) - lead - tail, nxt()
      if body:  # text_len tokens, then st_idx += text_len, as the models step
        pieces.append(seq(body, st))
        st = dt(st + dt(body))
      if tail:
        pieces.append(seq(1, st))
        st = dt(st + dt(1))
      cur = st
      continue
    if kind in media and not (0 < i < len(runs) - 1 and runs[i - 1][0] == "text" and runs[i + 1][0] == "text"):
      raise ValueError(f"run {i} = {run!r}: an {kind!r} run needs a text run before it (ending in its bos token) "
                       "and one after it (starting with its eos token).")
    s, cur = (nxt() if cur is None else cur), None
    if kind == "audio":
      _check_count(f"run {i} (audio) length", run[1])
      pieces.append(seq(int(run[1]), s))
      continue
    if kind == "video_audio":
      _check_count(f"run {i} (video_audio) audio tokens", run[3])
    t, h, w = _merged_grid(run[1], spatial_merge_size, f"run {i} ({kind})")
    it = np.arange(t, dtype=np.float32)
    if kind == "image":
      tau = it * p32
    else:
      seconds = float(run[2])
      if not (np.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"run {i}: seconds_per_grid must be a finite number >= 0, got {run[2]!r}.")
      tau = (it * np.float32(seconds)).astype(np.float32) * p32
    tau = tau.astype(np.float32) if q3 else np.trunc(tau).astype(np.int64)
    if kind != "video_audio":
      pieces.append(vision(t, h, w, tau, s))
      continue
    if q3:  # two bos tokens at s, s + 1; the run from s + 2
      pieces.append(seq(2, s))
      s = dt(s + dt(2))
    else:  # both bos tokens at s; the run from s + 1
      pieces.extend([seq(1, s), seq(1, s)])
      s = nxt()
    video = vision(t, h, w, tau, s)
    audio = seq(int(run[3]), s)
    if q3:  # merge by temporal id, video first on ties; each token its own piece, then the rest of the other
      vi = ai = 0
      while vi < len(video) and ai < len(audio):
        if video[vi, 0] <= audio[ai, 0]:
          pieces.append(video[vi:vi + 1])
          vi += 1
        else:
          pieces.append(audio[ai:ai + 1])
          ai += 1
      pieces.append(video[vi:] if vi < len(video) else audio[ai:])
      pieces.append(seq(2, nxt()))
    else:
      vc, ac = _chunk_bounds(video[:, 0], chunk, s), _chunk_bounds(audio[:, 0], chunk, s)
      for j in range(max(len(vc), len(ac))):
        if j < len(vc):
          pieces.append(video[vc[j][0]:vc[j][1]])
        if j < len(ac):
          pieces.append(audio[ac[j][0]:ac[j][1]])
      e = nxt()
      pieces.extend([seq(1, e), seq(1, e)])
  out = np.concatenate(pieces, axis=0) if pieces else np.zeros((0, 3), dt)
  if q3:
    return out.astype(np.float32)
  if out.size and out.max() >= 2**31:
    raise ValueError(f"position ids reach {int(out.max())}, past int32.")
  return out.astype(np.int32)


def xdrope_positions(runs: Sequence[tuple[Any, ...]], *, axes: int = 4, spatial_merge_size: int = 2,
                     extra_tokens: bool = True, first_image: int = 0) -> np.ndarray:
  """HunyuanVL's XD-RoPE position ids, as transformers 5.24's `HunYuanVLModel.get_rope_index` computes them
  (tests/golden/multimodal_positions.npz, made by scripts/make_multimodal_positions_golden.py).

  Every token starts at its index in the sequence, i, on all `axes` axes (len(rope_parameters["mrope_section"]),
  its checkpoints' xdrope_section: 4). An image run ("image", (t, h, w)), grid in patches before merging, is
  the span of image-placeholder tokens (mm_token_type_ids == 1): H = h // m rows of W + 1 tokens, W = w // m
  (m = spatial_merge_size; floor division, as the model does; t is not read), the last token of each row the
  merger's row break; with extra_tokens (the processor's cat_extra_token, default True) one more token before
  and one after, which keep their index i. Token (r, c) of the grid gets, on the last three axes,
  (c, r, k) -- width, height, the image's ordinal k = first_image, first_image + 1, ... -- and its index i on
  every axis before those. Nothing else moves: text after an image keeps its own index (no offset), and the
  image's start/end tokens are text. Odd points reproduced: transformers counts k over the whole batch, not per
  sequence (pass first_image = the images in the rows before this one), and two image runs with no text
  between them are one span there (an error), so they are refused here.

  Args:
    runs: ("text", n) and ("image", (t, h, w)) runs in sequence order.
    axes: the number of position axes (>= 3).
    spatial_merge_size: m (2).
    extra_tokens: the two extra tokens around each image's grid.
    first_image: k of the first image.

  Returns:
    int32[T, axes]. The continuation for decoding is T + j on every axis (rope_delta = max + 1 - T, 0 unless an
    image's ordinal or grid outgrows its index).
  """
  _check_count("axes", axes, 3)
  _check_count("spatial_merge_size", spatial_merge_size)
  _check_count("first_image", first_image, 0)
  pieces, k, prev = [], int(first_image), None
  start = 0
  for i, run in enumerate(runs):
    if not isinstance(run, (tuple, list)) or len(run) != 2 or run[0] not in ("text", "image"):
      raise ValueError(f"run {i} = {run!r}: expected ('text', n) or ('image', (t, h, w)).")
    if run[0] == "text":
      _check_count(f"run {i} (text) length", run[1], 0)
      n = int(run[1])
      pieces.append(np.repeat((start + np.arange(n))[:, None], axes, 1))
      start += n
      if n:
        prev = "text"
      continue
    if prev == "image":
      raise ValueError(f"run {i} = {run!r}: two image runs with no text between them form one placeholder span "
                       "in transformers' get_rope_index; put the image's start/end tokens between them as text.")
    try:
      _, h, w = (int(v) for v in run[1])
    except (TypeError, ValueError):
      raise ValueError(f"run {i} (image) grid must be (t, h, w) in patches, got {run[1]!r}.") from None
    rows, cols = h // spatial_merge_size, w // spatial_merge_size + 1
    if rows < 1 or cols < 2:
      raise ValueError(f"run {i} (image) grid {run[1]!r} gives {rows} x {cols - 1} merged tokens with "
                       f"spatial_merge_size={spatial_merge_size}; expected at least 1 x 1.")
    extra = 1 if extra_tokens else 0
    n = rows * cols + 2 * extra
    ids = np.repeat((start + np.arange(n))[:, None], axes, 1)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    grid = slice(extra, extra + rows * cols)
    ids[grid, axes - 3] = c.reshape(-1)
    ids[grid, axes - 2] = r.reshape(-1)
    ids[grid, axes - 1] = k
    pieces.append(ids)
    k += 1
    start += n
    prev = "image"
  out = np.concatenate(pieces, axis=0) if pieces else np.zeros((0, axes), np.int64)
  return out.astype(np.int32)


def videorope_positions(runs: Sequence[tuple[Any, ...]], *, spatial_merge_size: int = 2,
                        temporal_scale: float = 2.0) -> np.ndarray:
  """VideoRoPE's positions (Wei et al. 2025, `get_t_scale_rope_index`): the diagonal layout.

  A text run continues 1-D from s; a vision run of grid (t, h, w) patches (merged grid
  (t, h / m, w / m)) starting at s gets t_id = s + temporal_scale * i_t and spatial ids centred
  on it: h_id = t_id + i_h - (h / m - 1) // 2, w_id = t_id + i_w - (w / m - 1) // 2. The next run
  starts at max(t ids so far) + 1. Use with sections (t, h, w) and section_layout "videorope".

  Args:
    runs: as `multimodal_positions` (("text", n), ("image", (t, h, w)), ("video", (t, h, w),
      seconds_per_grid); the seconds are not used).
    spatial_merge_size: m. temporal_scale: delta (2.0 in the paper's code).

  Returns:
    float32[T, 3] (integers when temporal_scale is).
  """
  pieces, start = [], 0.0
  for i, run in enumerate(runs):
    if not isinstance(run, (tuple, list)) or not run or run[0] not in _RUN_KINDS:
      raise ValueError(f"run {i} = {run!r}: expected ('text', n), ('image', (t, h, w)) or "
                       "('video', (t, h, w), seconds_per_grid).")
    if run[0] == "text":
      n = int(run[1])
      ids = np.repeat((start + np.arange(n, dtype=np.float64))[:, None], 3, axis=1)
      if n:
        start = float(ids[:, 0].max()) + 1
    else:
      t, h, w = _merged_grid(run[1], spatial_merge_size, f"run {i} ({run[0]})")
      it, ih, iw = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
      tid = start + float(temporal_scale) * it
      ids = np.stack([tid, tid + ih - (h - 1) // 2, tid + iw - (w - 1) // 2], axis=-1).reshape(-1, 3)
      start = float(ids[:, 0].max()) + 1
    pieces.append(ids)
  out = np.concatenate(pieces, axis=0) if pieces else np.zeros((0, 3))
  return out.astype(np.float32)


def pad_positions(rows: Sequence[Any], *, length: int | None = None,
                  left: bool = True) -> tuple[np.ndarray, np.ndarray]:
  """Batches per-row positions ([T_b] or [T_b, A] each) with padding, as a left-padded batch
  for generation (left=True) or right-padded for training.

  Returns:
    (positions int32[B, L, ...], mask bool[B, L]): padded slots hold position 0 and mask False
    (transformers v4 writes 1 there, 5.x writes 0: either is masked out of attention).
  """
  rows = [np.asarray(r) for r in rows]
  if not rows:
    raise ValueError("pad_positions needs at least one row.")
  trailing = {r.shape[1:] for r in rows}
  if len(trailing) != 1:
    raise ValueError(f"rows must share their trailing shape, got {sorted(trailing)}.")
  longest = max(len(r) for r in rows)
  length = longest if length is None else int(length)
  if length < longest:
    raise ValueError(f"length={length} is shorter than the longest row ({longest}).")
  out = np.zeros((len(rows), length) + rows[0].shape[1:], np.int32)
  mask = np.zeros((len(rows), length), bool)
  for b, r in enumerate(rows):
    sl = slice(length - len(r), length) if left else slice(0, len(r))
    out[b, sl], mask[b, sl] = r, True
  return out, mask


def _check_count(name: str, value: Any, low: int = 1) -> None:
  """Raises unless `value` is an int (not a bool) >= low: a grid size, a text length."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
    raise ValueError(f"{name} must be {'a positive int' if low == 1 else f'an int >= {low}'}, got {value!r}.")


def grid_positions(height: int, width: int, *, frames: int = 1, axes: str = "hw", start: int = 0,
                   merge_size: int = 1, cls: str | None = None, normalize: str | None = None,
                   cls_tokens: int = 1, window: int | None = None, cls_axis: bool = False) -> np.ndarray:
  """Per-token 2-D positions of an image's patch grid, for the 2-D vision layouts.

  Args:
    height, width: the patch grid (rows, columns).
    frames: repeat the grid this many times (Qwen-VL vision encoders: one grid per temporal
      patch; the positions carry no time).
    axes: "hw" -> (row, col) per token (Qwen-VL, Pixtral, Gemma 4, DINOv3); "wh" -> (col, row)
      (Llama 4 and RoPE-Axial/Mixed: x first); "thw" -> (frame, row, col), the frame index in
      front (MiniMax-M3-VL's tower: transformers' get_vision_position_ids with include_temporal).
    start: 0, or 1 for Llama 4's 1-based grid (which leaves (0, 0) to the CLS token).
    merge_size: tokens in merge-block order (Qwen-VL): m x m windows in raster order, raster
      order inside each window; 1 = plain raster order (row-major, columns fastest).
    window: tokens in attention windows of window x window merge blocks (Qwen2.5-VL's tower, which
      reorders its tokens and their cos/sin by get_window_index before its blocks; window =
      window_size // (spatial_merge_size * patch_size), 4 in Qwen2.5-VL): the merge-block grid
      cut into windows from the top left (the windows at the right and bottom edges partial),
      windows in raster order, blocks in raster order inside each window, merge_size's order
      inside each block; per frame. None: no windows.
    cls: None, "first" or "last": add a class token with position (0, 0), i.e. zero angle, so it
      is not rotated (Llama 4 appends it last; RoPE-ViT leaves its first token unrotated).
    cls_tokens: how many such tokens (DINOv3 and Sapiens 2: a class token and the register
      tokens, `1 + num_register_tokens`).
    cls_axis: add a third axis, 1 for the cls tokens and 0 for the patches: the axis by which a
      class token turns by learned angles of its own (MLCD's class_pos_emb, the frequencies of
      that axis in a spec with frequencies="mixed"; `rope.hf_frequencies`). Needs cls.
    normalize: None (integer positions); "center": ((i + 0.5) / N) * 2 - 1 per axis (DINOv3;
      float32); "linspace": linspace(-1, 1, N) per axis (rotary-embedding-torch's pixel
      frequencies; float32). With normalize, start must be 0.

  Returns:
    int32[frames * height * width (+ cls_tokens), 2] (3 with axes="thw" or cls_axis), or float32 with
    normalize.
  """
  for name, v in (("height", height), ("width", width), ("frames", frames), ("merge_size", merge_size)):
    _check_count(name, v)
  if axes not in ("hw", "wh", "thw"):
    raise ValueError(f"axes={axes!r}: expected 'hw' (row, col), 'wh' (col, row) or 'thw' (frame, row, col).")
  if axes == "thw" and (cls is not None or normalize is not None):
    raise ValueError("axes='thw' (a frame index in front) takes no cls tokens and no normalize.")
  if cls not in (None, "first", "last"):
    raise ValueError(f"cls={cls!r}: expected None, 'first' or 'last'.")
  _check_count("cls_tokens", cls_tokens)
  if cls_axis is not False and (cls_axis is not True or cls is None):
    raise ValueError(f"cls_axis={cls_axis!r}: True (with cls='first' or 'last') adds the class tokens' own axis.")
  if normalize not in (None, "center", "linspace"):
    raise ValueError(f"normalize={normalize!r}: expected None, 'center' (DINOv3) or 'linspace' (pixel).")
  if height % merge_size or width % merge_size:
    raise ValueError(f"the grid {height}x{width} must be divisible by merge_size={merge_size}.")
  if window is not None:
    _check_count("window", window)
  if normalize is not None and start != 0:
    raise ValueError("normalized positions take start=0.")
  rows: np.ndarray
  cols: np.ndarray
  r: np.ndarray
  c: np.ndarray
  rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
  m = merge_size
  if m > 1 or window is not None:  # [H/m, m, W/m, m] -> blocks in raster order, raster inside each block
    rows = rows.reshape(height // m, m, width // m, m).transpose(0, 2, 1, 3)
    cols = cols.reshape(height // m, m, width // m, m).transpose(0, 2, 1, 3)
  if window is not None:  # [H/m, W/m, m, m] blocks -> windows of window x window blocks, raster order of both
    bh, bw = height // m, width // m
    order = np.arange(bh * bw).reshape(bh, bw)
    order = np.concatenate([order[r:r + window, c:c + window].reshape(-1)
                            for r in range(0, bh, window) for c in range(0, bw, window)])
    rows, cols = rows.reshape(bh * bw, m * m)[order], cols.reshape(bh * bw, m * m)[order]
  rows, cols = rows.reshape(-1), cols.reshape(-1)
  if normalize == "center":
    r, c = ((rows + 0.5) / height) * 2 - 1, ((cols + 0.5) / width) * 2 - 1
  elif normalize == "linspace":
    r, c = np.linspace(-1, 1, height)[rows], np.linspace(-1, 1, width)[cols]
  else:
    r, c = rows + start, cols + start
  pos = np.stack([c, r] if axes == "wh" else [r, c], axis=-1)
  pos = np.tile(pos, (frames, 1))
  if axes == "thw":  # frame f's tokens at (f, row, col)
    pos = np.concatenate([np.repeat(np.arange(frames), height * width)[:, None], pos], axis=-1)
  dtype = np.float32 if normalize else np.int32
  pos = pos.astype(dtype)
  if cls is not None:
    zero = np.zeros((cls_tokens, 2), dtype)
    pos = np.concatenate([zero, pos] if cls == "first" else [pos, zero], axis=0)
    if cls_axis:  # 1 on its own axis for each class token, 0 for the patches
      own = np.zeros((len(pos), 1), dtype)
      own[slice(0, cls_tokens) if cls == "first" else slice(len(pos) - cls_tokens, None)] = 1
      pos = np.concatenate([pos, own], axis=1)
  return pos


def sam3_positions(grid: int, window: int, *, kind: str) -> np.ndarray:
  """Per-token positions of SAM 3's vision tower (transformers' Sam3ViTLayer.precompute_positions), one kind of layer
  at a time: its windowed layers rotate each window's tokens by their (column, row) inside the window, counted from
  the window's own corner; its global layers (`global_attn_indexes`) rotate the whole image's tokens by their
  (column, row) times window / grid, so that the image spans the window's range (24 / 72 = 1/3 in SAM 3).

  Args:
    grid: the image's side in patches, as SAM 3 takes it from its config: image_size // patch_size (72), not from
      the image given to the forward (a square image: SAM 3 scales both axes by the grid's width).
    window: the config's window_size (24).
    kind: "window" -> float32[window * window, 2], one window's tokens in raster order (rows slowest), the same for
      every window (SAM 3 pads the grid to whole windows and rotates each alike); "global" -> float32[grid * grid, 2],
      the image's tokens in raster order.

  Returns:
    float32 positions (column, row) per token, x first as SAM 3's sections read them; computed in float32 as SAM 3
    does (arange in float32 times the Python float window / n).
  """
  _check_count("grid", grid)
  _check_count("window", window)
  if kind not in ("window", "global"):
    raise ValueError(f"kind={kind!r}: expected 'window' (a windowed layer) or 'global' (a global_attn_indexes layer).")
  n = window if kind == "window" else grid
  rows, cols = np.meshgrid(np.arange(n, dtype=np.float32), np.arange(n, dtype=np.float32), indexing="ij")
  pos = np.stack([cols.reshape(-1), rows.reshape(-1)], axis=-1)
  return (pos * np.float32(window / n)).astype(np.float32)


def sam2_memory_positions(height: int, width: int, *, frames: int, object_pointers: int = 0,
                          unrotated_per_frame: int = 0) -> np.ndarray:
  """Per-key positions of a video tracker's memory bank, as the cross-attention of its memory attention rotates its
  keys (transformers' SAM 2 video, SAM 3 tracker video and EdgeTAM video: apply_rotary_pos_emb_2d with rope_k_repeat
  and num_k_exclude_rope; the queries, the current frame's grid, take `grid_positions(height, width, axes="wh")`).

  The memory is `frames` memory frames, each `unrotated_per_frame` tokens (EdgeTAM's perceiver 1-D latents,
  perceiver_resampler_num_latents) then the frame's grid in raster order (rows slowest) at (column, row), the grid's
  rotation repeated per frame; then `object_pointers` object-pointer tokens (num_object_pointer_tokens), which the
  model leaves unrotated. An unrotated token is at (0, 0): zero angle, no rotation.

  Args:
    height, width: the keys' grid: SAM 2 video and SAM 3 tracker video, the frame's grid
      (memory_attention_rope_feat_sizes = [width, height], 64 x 64 and 72 x 72); EdgeTAM video, its key grid
      (memory_attention_rope_k_sizes = [width, height], 16 x 16), the queries' still memory_attention_rope_feat_sizes.
    frames: memory frames in the bank (>= 1).
    object_pointers: pointer tokens after them (>= 0).
    unrotated_per_frame: tokens at the start of every frame left unrotated (>= 0; EdgeTAM: its 1-D latents).

  Returns:
    int32[frames * (unrotated_per_frame + height * width) + object_pointers, 2], (column, row) per key.
  """
  _check_count("frames", frames)
  _check_count("object_pointers", object_pointers, low=0)
  _check_count("unrotated_per_frame", unrotated_per_frame, low=0)
  frame = grid_positions(height, width, axes="wh")
  if unrotated_per_frame:
    frame = np.concatenate([np.zeros((unrotated_per_frame, 2), np.int32), frame])
  return np.concatenate([np.tile(frame, (frames, 1)), np.zeros((object_pointers, 2), np.int32)]).astype(np.int32)


def flux_positions(height: int, width: int, text_length: int, *, axes: int = 3) -> np.ndarray:
  """The position ids a Flux-family diffusers transformer rotates by, text tokens first.

  This is what its pipeline builds and its forward concatenates (`torch.cat((txt_ids, img_ids))`),
  for a latent grid of `height` x `width` patches in raster order and `text_length` text tokens:
  - axes=3 (Flux, Chroma, Bria, LongCat-Image, Ovis-Image; FluxPipeline._prepare_latent_image_ids):
    text (0, 0, 0), image (0, row, col);
  - axes=4 (Flux 2: Flux2Pipeline._prepare_text_ids / _prepare_latent_ids): text (0, 0, 0, l)
    for the l-th text token, image (0, row, col, 0).
  Pass the result, [text_length + height * width, axes], as the positions of the spec
  `from_hf_config` gives for that class's config.json. Reference images (Kontext) and video
  frames number the first axis otherwise: build those ids as the pipeline does.

  Returns:
    int32[text_length + height * width, axes].
  """
  for name, v in (("height", height), ("width", width)):
    _check_count(name, v)
  _check_count("text_length", text_length, 0)
  if axes not in (3, 4):
    raise ValueError(f"axes={axes!r}: 3 (Flux: (t, row, col)) or 4 (Flux 2: (t, row, col, text index)).")
  text = np.zeros((text_length, axes), np.int32)
  image = np.zeros((height * width, axes), np.int32)
  image[:, 1:3] = grid_positions(height, width)
  if axes == 4:
    text[:, 3] = np.arange(text_length)
  return np.concatenate([text, image])


def video_grid_positions(frames: int, height: int, width: int, *, centred: bool = False,
                         frame_ids: Sequence[int] | None = None,
                         stretch_to: Sequence[int] | None = None,
                         crop_to: Sequence[int] | None = None,
                         scale: Sequence[float] | None = None) -> np.ndarray:
  """(frame, row, column) of each latent patch in raster order (frames slowest, columns fastest):
  the positions a diffusers transformer that numbers its own latent grid rotates by (Wan,
  SkyReels-V2, Helios, HunyuanVideo; the grid after patching, e.g. frames = latent frames /
  patch_t). centred=True: rows and columns count from -ceil(n / 2), so the grid's centre is
  near 0 (QwenImage's and Nucleus-MoE's `scale_rope`; an image is one frame). frame_ids: each
  frame's position instead of 0, 1, ... (ChronoEdit rotates a video of exactly two latent frames
  at frames (0, rope_temporal_skip_len - 1)). stretch_to: (A_h, A_w), row i at i * A_h // height
  and column j at j * A_w // width, the grid stretched over A positions per axis (CogView 4:
  its `rope_axes_dim`, (256, 256)). crop_to: (B_h, B_w), a base grid: the latent's aspect is
  fitted inside it and centred (the covered rows R_h = B_h, or round(B_w / width * height),
  the first at top = round((B_h - R_h) / 2), halves rounded to even as Python's `round`), and
  row i of n sits at top + i * (top + R_h) / n, a float (CogVideoX 1.0 and ConsisID:
  (sample_height, sample_width) // patch_size, the grid their pipelines' crop coordinates make).
  scale: (s_t, s_h, s_w), every position divided by its axis's s, in float32 (Allegro: its
  interpolation_scale_t, _h and _w, (2.2, 2.0, 2.0) by default).

  Returns:
    int32[frames * height * width, 3], float32 with crop_to or scale.
  """
  for name, v in (("frames", frames), ("height", height), ("width", width)):
    _check_count(name, v)
  if frame_ids is not None and len(frame_ids) != frames:
    raise ValueError(f"frame_ids has {len(frame_ids)} positions for {frames} frames.")
  times = np.arange(frames) if frame_ids is None else np.asarray(frame_ids)
  rows, cols = np.arange(height), np.arange(width)
  if stretch_to is not None:
    if len(stretch_to) != 2:
      raise ValueError(f"stretch_to={stretch_to!r}: expected (rows, columns) to stretch over.")
    rows, cols = rows * int(stretch_to[0]) // height, cols * int(stretch_to[1]) // width
  if crop_to is not None:
    if len(crop_to) != 2 or centred or stretch_to is not None:
      raise ValueError(f"crop_to={crop_to!r}: expected (base rows, base columns), without centred or stretch_to.")
    rows, cols = _crop(height, width, *(int(b) for b in crop_to))
  grid = np.meshgrid(times, rows, cols, indexing="ij")
  pos = np.stack(grid, -1).reshape(-1, 3)
  if centred:
    pos = pos - np.array([0, -(-height // 2), -(-width // 2)])
  if scale is not None:
    if len(scale) != 3 or not all(isinstance(v, (int, float)) and v > 0 for v in scale):
      raise ValueError(f"scale={scale!r}: expected three positive numbers (frames, rows, columns).")
    return (pos.astype(np.float32) / np.asarray(scale, np.float32)).astype(np.float32)
  return pos.astype(np.float32 if crop_to is not None else np.int32)


def _crop(height: int, width: int, base_h: int, base_w: int) -> tuple[np.ndarray, np.ndarray]:
  """The rows and columns of `video_grid_positions(crop_to=)`: the latent's aspect fitted inside the base grid and
  centred, row i of n at top + i * (top + covered rows) / n (an end point scaled by (n - 1) / n, as the pipelines
  do, not the covered span), in float32 as they compute it."""
  _check_count("crop_to rows", base_h)
  _check_count("crop_to columns", base_w)
  if height / width > base_h / base_w:
    cover_h, cover_w = base_h, int(round(base_h / height * width))
  else:
    cover_h, cover_w = int(round(base_w / width * height)), base_w
  top, left = int(round((base_h - cover_h) / 2.0)), int(round((base_w - cover_w) / 2.0))
  return (np.linspace(top, (top + cover_h) * (height - 1) / height, height, dtype=np.float32),
          np.linspace(left, (left + cover_w) * (width - 1) / width, width, dtype=np.float32))


def ltx_pair_layout(width: int) -> tuple[int, list[int], list[int]]:
  """LTX's pairs over an attention width W (every head together): pad = (W mod 6) / 2 pairs that do not turn come
  first, then pair pad + 3k + a turns by frequency k of axis a (t, h, w). As interleaved M-RoPE (axis b >= 1 the
  pairs b, b + 3, ..., axis 0 the rest): (pad, the sections, the LTX axis each spec axis holds: (b - pad) mod 3)."""
  _check_count("width", width)
  pairs = width // 2
  counts = [sum(1 for q in range(pairs) if q % 3 == b) for b in range(3)]
  pad = (width % 6) // 2
  return pad, counts, [(b - pad) % 3 for b in range(3)]


def ltx_positions(frames: int, height: int, width: int, *, attention_width: int, frame_rate: float = 25.0,
                  compression: Sequence[int] = (8, 32, 32), patch: Sequence[int] = (1, 1),
                  base: Sequence[int] = (20, 2048, 2048)) -> np.ndarray:
  """The positions LTX-Video rotates its latent patches by (raster order, frames slowest), for the spec
  `from_hf_config` gives for its config.json: each axis's coordinate 2 * i * s * p / base - 1 in float32, as its
  `LTXVideoRotaryPosEmbed` computes it from the `rope_interpolation_scale` s its pipeline passes (VAE temporal
  compression / frame_rate, spatial compression, spatial compression), its patch sizes p (patch_size_t,
  patch_size) and its fixed base (20 frames, 2048 x 2048); columns in the spec's axis order
  (`ltx_pair_layout(attention_width)`, attention_width = heads * attention_head_dim: 2048 for LTX-Video gives
  (w, t, h)). Apply the spec to q before its heads are split, [..., T, 1, attention_width].

  Returns:
    float32[frames * height * width, 3].
  """
  for name, v in (("frames", frames), ("height", height), ("width", width)):
    _check_count(name, v)
  if not frame_rate > 0:
    raise ValueError(f"frame_rate={frame_rate!r} must be positive.")
  grid = np.stack(np.meshgrid(np.arange(frames), np.arange(height), np.arange(width), indexing="ij"),
                  -1).reshape(-1, 3).astype(np.float32)
  scale = np.array([compression[0] / frame_rate, compression[1], compression[2]], np.float32)
  p = np.array([patch[0], patch[1], patch[1]], np.float32)
  coords = grid * scale * p / np.asarray(base, np.float32)
  _, _, order = ltx_pair_layout(attention_width)
  return (coords * 2 - 1)[:, order].astype(np.float32)


def ltx2_video_positions(frames: int, height: int, width: int, *, attention_width: int | None = None,
                         fps: float = 24.0, compression: Sequence[int] = (8, 32, 32), causal_offset: int = 1,
                         base: Sequence[float] = (20, 2048, 2048), time_only: bool = False,
                         frame_ids: Sequence[int] | None = None) -> np.ndarray:
  """The positions LTX-2 (`LTX2VideoTransformer3DModel`) rotates its video's latent patches by (raster order, frames
  slowest), as its `prepare_video_coords` and rotary module compute them (float32): each patch's [start, end) in
  pixels, index * compression per axis (VAE scale factors (t, h, w)), the time shifted by causal_offset -
  compression[0], clamped at 0 and divided by fps (the frame rate its pipeline passes); the midpoint over base
  (pos_embed_max_pos, base_height, base_width), times 2 - 1. For `part="video"` pass attention_width = heads *
  attention_head_dim (columns in the spec's axis order, `ltx_pair_layout(attention_width)`); for
  `part="video_cross"` time_only=True (the time alone, [N, 1]; its base is then max(pos_embed_max_pos,
  audio_pos_embed_max_pos)). frame_ids: each latent frame's absolute index instead of 0, 1, ... (the SANA-WM
  refiner's window, its pipeline's `frame_positions`; its attention sink's frames at its `sink_rope_offset`). Apply
  the spec to q before its heads are split, [..., T, 1, attention width].

  Returns:
    float32[frames * height * width, 3], or [..., 1] with time_only.
  """
  for name, v in (("frames", frames), ("height", height), ("width", width)):
    _check_count(name, v)
  if not fps > 0:
    raise ValueError(f"fps={fps!r} must be positive.")
  if len(compression) != 3 or len(base) != 3:
    raise ValueError(f"compression={tuple(compression)!r} and base={tuple(base)!r} must give three values each "
                     "(time, rows, columns).")
  if not time_only and attention_width is None:
    raise ValueError("attention_width= is required (heads * attention_head_dim: it orders the columns as the spec's "
                     "axes); pass time_only=True for its cross-attention's time alone.")
  if frame_ids is not None and len(frame_ids) != frames:
    raise ValueError(f"frame_ids has {len(frame_ids)} positions for {frames} frames.")
  f32 = np.float32
  sf = np.asarray(compression, f32)
  times = np.arange(frames) if frame_ids is None else np.asarray(frame_ids)
  grid = np.stack(np.meshgrid(times, np.arange(height), np.arange(width), indexing="ij"),
                  -1).reshape(-1, 3).astype(f32)
  start, end = grid * sf, (grid + 1) * sf
  start[:, 0] = np.maximum(start[:, 0] + f32(causal_offset) - sf[0], 0) / f32(fps)
  end[:, 0] = np.maximum(end[:, 0] + f32(causal_offset) - sf[0], 0) / f32(fps)
  coords = ((start + end) / f32(2.0)) / np.asarray(base, f32) * 2 - 1
  if time_only:
    return coords[:, :1].astype(f32)
  assert attention_width is not None
  _, _, order = ltx_pair_layout(attention_width)
  return coords[:, order].astype(f32)


def ltx2_audio_positions(frames: int, *, sampling_rate: int = 16000, hop_length: int = 160, compression: int = 4,
                         causal_offset: int = 1, base: float = 20, shift: int = 0) -> np.ndarray:
  """The positions LTX-2 rotates its audio latents by (`part="audio"`, and `part="audio_cross"` for its
  cross-attentions: the same at its defaults, whose base is max(pos_embed_max_pos, audio_pos_embed_max_pos)), as its
  `prepare_audio_coords` and rotary module compute them (float32): latent frame i (from `shift`) spans mel frames
  [i * compression, (i + 1) * compression) shifted by causal_offset - compression and clamped at 0, in seconds of
  hop_length / sampling_rate; the midpoint over base (audio_pos_embed_max_pos), times 2 - 1.

  Returns:
    float32[frames, 1].
  """
  _check_count("frames", frames)
  if not sampling_rate > 0 or not hop_length > 0 or not compression > 0 or not base > 0:
    raise ValueError(f"sampling_rate={sampling_rate!r}, hop_length={hop_length!r}, compression={compression!r} and "
                     f"base={base!r} must be positive.")
  f32 = np.float32
  i = np.arange(shift, frames + shift, dtype=f32)
  c = f32(compression)
  start = np.maximum(i * c + f32(causal_offset) - c, 0) * f32(hop_length) / f32(sampling_rate)
  end = np.maximum((i + 1) * c + f32(causal_offset) - c, 0) * f32(hop_length) / f32(sampling_rate)
  return (((start + end) / f32(2.0)) / f32(base) * 2 - 1)[:, None].astype(f32)


def caption_positions(text_length: int, *, start: int, axes: int = 3) -> np.ndarray:
  """A caption rotated apart from the image at start + i on every axis: token i of a diffusers
  transformer's text stream (QwenImage and Nucleus-MoE: start = max(rows // 2, columns // 2) of
  the latent grid, `rope.video_grid_positions(..., centred=True)`'s largest row or column + 1;
  JoyImage-Edit: one past the grid's largest position).

  Returns:
    int32[text_length, axes].
  """
  _check_count("text_length", text_length, 0)
  _check_count("axes", axes)
  return np.repeat((np.arange(text_length) + int(start))[:, None], axes, 1).astype(np.int32)


def lumina_positions(height: int, width: int, text_length: int, *, image_first: bool = False,
                     start: int = 0) -> np.ndarray:
  """The positions Lumina 2 rotates by (its Lumina2RotaryPosEmbed): caption token i at (i, 0, 0),
  then the image's patches in raster order at (text_length, row, column), for a caption of
  `text_length` tokens (its attention mask's sum) and a `height` x `width` patch grid.
  image_first=True: the same positions with the image's tokens before the caption's.
  start: the caption's first position, every position on the first axis moved by it (Z-Image:
  start=1, caption token i at (1 + i, 0, 0) and the image at (1 + text_length, row, column), its
  caption padded to a multiple of 32 tokens first: text_length counts the padding).

  Returns:
    int32[text_length + height * width, 3].
  """
  _check_count("text_length", text_length, 0)
  _check_count("start", start, 0)
  text = np.zeros((text_length, 3), np.int32)
  text[:, 0] = np.arange(text_length) + start
  image = video_grid_positions(1, height, width)
  image[:, 0] = text_length + start
  return np.concatenate([image, text] if image_first else [text, image])


def qwen_image21_positions(runs: Sequence[Any]) -> np.ndarray:
  """The positions QwenImage 2.1 rotates its joint sequence by (its QwenImage21Rope), run by run
  in sequence order: an int n is n text tokens, a (height, width) pair an image block of that many
  latent tokens in raster order (its condition images where its vision-language encoder reserved
  their slots, each slot 2 x 2 tokens, and the target image last). A counter p starts at 0; text
  token i of a run sits at (p + i, p + i, p + i) and moves p past the run; an image block sits at
  frame p, its rows and columns centred on 0 (-(n - n // 2), ..., n // 2 - 1), and moves p by
  max(height, width).

  Returns:
    int32[tokens, 3]: (frame, row, column) per token.
  """
  if isinstance(runs, (str, bytes)) or not isinstance(runs, Sequence):
    raise ValueError(f"runs must be a sequence of text lengths (ints) and image (height, width) pairs, got {runs!r}.")
  out, p = [], 0
  for run in runs:
    if isinstance(run, (int, np.integer)) and not isinstance(run, bool):
      _check_count("a text run's length", run, 0)
      out.append(np.repeat((np.arange(run) + p)[:, None], 3, 1))
      p += int(run)
      continue
    if not isinstance(run, Sequence) or len(run) != 2:
      raise ValueError(f"a run must be a text length (int) or an image's (height, width), got {run!r}.")
    h, w = run
    _check_count("an image's height", h)
    _check_count("an image's width", w)
    rows = np.repeat(np.arange(h) - (h - h // 2), w)
    cols = np.tile(np.arange(w) - (w - w // 2), h)
    out.append(np.stack([np.full(h * w, p), rows, cols], -1))
    p += max(int(h), int(w))
  return (np.concatenate(out) if out else np.zeros((0, 3))).astype(np.int32)


def bria_fibo2_positions(height: int, width: int, gist_tokens: int, *, max_gist_tokens: int = 512,
                         contexts: Sequence[tuple[int, int]] = (), gist_first: bool = True) -> np.ndarray:
  """The positions Bria-Fibo 2's layers rotate by: its `gist_tokens` Perceiver tokens at (1 + i, 0, 0)
  (its compute_gist_count of the prompt's length), the `height` x `width` image's patches at
  (max_gist_tokens + 1, row, column) (its config's `max_num_gist_tokens`, 512 by default; the
  plane does not move with the gist count), then context image k (each (height, width) in
  `contexts`, the images to edit) at (max_gist_tokens + 2 + k, row, column). gist_first=False: the
  gist tokens last, as its forward orders a batch whose prompts got different gist counts. Its
  noise refiner rotates the image and context tokens alone: the rows after the gist tokens.

  Returns:
    int32[gist_tokens + height * width + sum of the contexts' tokens, 3].
  """
  _check_count("gist_tokens", gist_tokens, 0)
  _check_count("max_gist_tokens", max_gist_tokens, 0)
  if gist_tokens > max_gist_tokens:
    raise ValueError(f"gist_tokens={gist_tokens} is more than max_gist_tokens={max_gist_tokens}.")
  gist = np.zeros((gist_tokens, 3), np.int64)
  gist[:, 0] = np.arange(gist_tokens) + 1
  blocks = []
  for k, size in enumerate([(height, width), *contexts]):
    if not isinstance(size, Sequence) or len(size) != 2:
      raise ValueError(f"a context image's size must be (height, width), got {size!r}.")
    _check_count("an image's height", size[0])
    _check_count("an image's width", size[1])
    grid = video_grid_positions(1, int(size[0]), int(size[1]))
    grid[:, 0] = max_gist_tokens + 1 + k
    blocks.append(grid)
  image = np.concatenate(blocks)
  return np.concatenate([gist, image] if gist_first else [image, gist]).astype(np.int32)


def mochi_positions(frames: int, height: int, width: int, *, base: tuple[int, int] = (192, 192)) -> np.ndarray:
  """The positions Mochi rotates its latent patches by (its MochiRoPE): (t, row, column) in
  raster order, t = 0, 1, ...; rows at the centres of `height` equal cells spanning
  [-height s / 2, height s / 2] (columns likewise), s = sqrt(base_h base_w / (height width)) (its
  base 192 x 192 patches: a grid of another area is rescaled to that one's). Its rotation is
  dense and learned: pair k of head n turns by sum_a pos_a F[a, n, k], F its checkpoint's
  pos_frequencies [3, heads, head_dim / 2] (`spec.apply(x, positions, frequencies=F)`).

  Returns:
    float32[frames * height * width, 3], computed in float32 as Mochi computes them.
  """
  for name, value in (("frames", frames), ("height", height), ("width", width)):
    _check_count(name, value)
  s = np.float32((base[0] * base[1] / (height * width)) ** 0.5)

  def centres(n: int) -> np.ndarray:
    edges = np.linspace(np.float32(-n * s / 2), np.float32(n * s / 2), n + 1, dtype=np.float32)
    return ((edges[:-1] + edges[1:]) / np.float32(2)).astype(np.float32)
  t, h, w = np.meshgrid(np.arange(frames, dtype=np.float32), centres(height), centres(width), indexing="ij")
  return np.stack([t, h, w], -1).reshape(-1, 3)


def keypoint_positions(keypoints: ArrayLike, height: int, width: int) -> np.ndarray:
  """The positions an image matcher rotates its keypoints by (LightGlue's normalize_keypoints):
  each keypoint's (x, y) in pixels, centred on the image and divided by half its longer side,
  (kp - (width, height) / 2) / (max(width, height) / 2), so the longer side spans [-1, 1]. Its
  rotation is dense and learned: pair k turns by x F[0, k] + y F[1, k], F = W^T of its positional
  encoder's projector weight W [head_dim / 2, 2] (`rope.hf_frequencies`;
  `spec.apply(q, positions, frequencies=F)` with q [images, keypoints, heads, head_dim]).

  Args:
    keypoints: [..., keypoints, 2] (x, y) in pixels (x along the width), float.
    height, width: the image's size in pixels.

  Returns:
    [..., keypoints, 2] in the keypoints' float dtype (float32 for ints), computed in it as
    LightGlue computes them.
  """
  _check_count("height", height)
  _check_count("width", width)
  kp = np.asarray(keypoints)
  if kp.ndim < 2 or kp.shape[-1] != 2:
    raise ValueError(f"keypoints must be [..., keypoints, 2] (x, y) in pixels, got shape {kp.shape}.")
  if not np.issubdtype(kp.dtype, np.floating):
    kp = kp.astype(np.float32)
  size = np.array([width, height], kp.dtype)
  shift = size / kp.dtype.type(2)
  scale = size.max() / kp.dtype.type(2)
  return ((kp - shift) / scale).astype(kp.dtype)
