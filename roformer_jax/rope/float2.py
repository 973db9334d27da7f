"""Float-float arithmetic: a value held as the unevaluated sum hi + lo of two float32 arrays.

About 48 significant bits, with float32 operations only (no jax_enable_x64). The rotation uses
it for the one run-time quantity float32 cannot hold precisely enough: dynamic NTK's
frequencies, whose base depends on a traced per-row length (`dynamic_turn_words`). They are
formed here to ~1e-14 and split into the same two uint32 words the static frequencies get in
float64 at trace time, so the phase reduction that follows is the same exact integer one.

Pairs are tuples (hi, lo) with |lo| <= ulp(hi) / 2. The error-free transformations are
Knuth's two-sum and Dekker's split product; they need IEEE float32 rounding, which XLA keeps
(it does not reassociate floating-point sums; an FMA contraction only makes them more exact).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

Pair = tuple[jax.Array, jax.Array]
# What the operations take: a pair they made, or a `const` (NumPy, so that module constants start no backend).
PairLike = tuple[jax.Array | np.ndarray, jax.Array | np.ndarray]

_SPLITTER = 4097.0  # 2^12 + 1: Dekker's split of a 24-bit significand into two 12-bit halves


def const(value: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
  """A float64 constant (scalar or NumPy array) as a float32 pair, hi = float32(value).

  NumPy, not jax, arrays: module constants built at import must not start a JAX backend."""
  value = np.asarray(value, np.float64)
  hi = value.astype(np.float32)
  return hi, (value - hi.astype(np.float64)).astype(np.float32)


def from_int(n: jax.Array) -> Pair:
  """An int32 array as an exact pair: its high bits (a multiple of 2^12) and its low 12 bits."""
  n = n.astype(jnp.int32)
  low = n & 0xFFF
  return _fast_two_sum((n - low).astype(jnp.float32), low.astype(jnp.float32))


def _two_sum(a: Any, b: Any) -> Pair:
  s = a + b
  bb = s - a
  return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a: Any, b: Any) -> Pair:
  """Exact for |a| >= |b| (or a == 0)."""
  s = a + b
  return s, b - (s - a)


def _split(a: Any) -> Pair:
  t = a * _SPLITTER
  hi = t - (t - a)
  return hi, a - hi


def _two_prod(a: Any, b: Any) -> Pair:
  p = a * b
  ah, al = _split(a)
  bh, bl = _split(b)
  return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def add(x: PairLike, y: PairLike) -> Pair:
  """x + y to ~2^-48 of the result, cancellation included (the lo words summed exactly too)."""
  s, e = _two_sum(x[0], y[0])
  t, f = _two_sum(x[1], y[1])
  s, e = _fast_two_sum(s, e + t)
  return _fast_two_sum(s, e + f)


def neg(x: PairLike) -> PairLike:
  return -x[0], -x[1]


def mul(x: PairLike, y: PairLike) -> Pair:
  p, e = _two_prod(x[0], y[0])
  return _fast_two_sum(p, e + (x[0] * y[1] + x[1] * y[0]))


def where(cond: ArrayLike, x: PairLike, y: PairLike) -> Pair:
  return jnp.where(cond, x[0], y[0]), jnp.where(cond, x[1], y[1])


def _pow2(k: jax.Array) -> jax.Array:
  """2.0 ** k for int32 k in [-126, 127], exactly (built from its exponent bits)."""
  return jax.lax.bitcast_convert_type((k + 127) << 23, jnp.float32)


_LN2 = const(math.log(2.0))
_SQUARINGS = 8  # exp: the reduced argument is divided by 2^8, then the result squared 8 times
# 1 / n! for the Taylor series of expm1 at |r| <= ln(2) / 2^9: the r^7 term is below 2^-60.
_INV_FACTORIALS = [const(1.0 / math.factorial(n)) for n in range(2, 7)]


def exp(x: Pair) -> Pair:
  """e^x for x in about [-85, 85] (float32's exponent range).

  Relative error below 1e-14 (1 + |x|) (the |x| term is ln 2's pair error times the k of
  x = k ln 2 + r: the size of the error the pair x itself carries, |x| 2^-48)."""
  k = jnp.round(x[0] * np.float32(1.0 / math.log(2.0)))
  # r = x - k ln 2, |r| <= ln(2) / 2 (plus rounding), then r / 2^8: exact scaling.
  r = add(x, neg(mul((k, jnp.zeros_like(k)), _LN2)))
  scale = np.float32(2.0**-_SQUARINGS)
  r = (r[0] * scale, r[1] * scale)
  # expm1(r) = r (1 + r (1/2 + r (1/6 + ...))) by Horner, all in pairs.
  poly: PairLike = _INV_FACTORIALS[-1]
  for c in reversed(_INV_FACTORIALS[:-1]):
    poly = add(c, mul(r, poly))
  u = mul(r, add(const(1.0), mul(r, poly)))
  for _ in range(_SQUARINGS):  # e^(2r) - 1 = u (2 + u): keeps the relative error of u
    u = mul(u, add(const(2.0), u))
  one_plus_u = add(const(1.0), u)
  two_k = _pow2(jnp.clip(k, -126, 127).astype(jnp.int32))
  return one_plus_u[0] * two_k, one_plus_u[1] * two_k


def log(x: Pair) -> Pair:
  """ln x for positive normal x, to ~1e-14 absolute: one Newton step from float32's log."""
  y0 = jnp.log(x[0])
  # c = x e^-y0 - 1 is tiny (float32's log is within a few ulp); ln(1 + c) = c - c^2 / 2 + O(c^3).
  c = add(mul(x, exp((-y0, jnp.zeros_like(y0)))), const(-1.0))
  c = add(c, (-0.5 * c[0] * c[0], jnp.zeros_like(y0)))
  return add((y0, jnp.zeros_like(y0)), c)


def turn_words(f: Pair) -> tuple[jax.Array, jax.Array]:
  """The two uint32 words of f in [0, 1): f ~= (a + c 2^-32) 2^-32, as `rotation._turn_words`.

  Extracted 16 bits at a time; each digit is the floor of the exact pair (corrected when hi
  rounded across an integer), so the words agree with the float64 ones to the pair's precision.
  """
  h, l = f
  digits = []
  for _ in range(4):
    h, l = h * np.float32(65536.0), l * np.float32(65536.0)
    d = jnp.floor(h)
    h, l = _two_sum(h - d, l)  # h - d is exact: the fractional part of a float
    carry = jnp.floor(h)  # -1, 0 or 1 when l pushed the sum across an integer
    carry = jnp.where((h - carry) + l < 0, carry - 1, carry)
    d = d + carry
    h, l = add((h, l), (-carry, jnp.zeros_like(carry)))
    digits.append(jnp.clip(d, 0, 65535).astype(jnp.uint32))
  return (digits[0] << 16) | digits[1], (digits[2] << 16) | digits[3]
